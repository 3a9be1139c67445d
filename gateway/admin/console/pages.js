// The console's pages: each reads the admin JSON API and draws what it says.

import { api, confirmed } from "./api.js";
import { bars, lines, timeline } from "./charts.js";
import { bytes, el, table, when } from "./dom.js";

const enc = encodeURIComponent;

// -- overview ---------------------------------------------------------------------------------

const rates = { last: null, points: { produced: [], fetched: [] } };

function sum(counters) { return Object.values(counters).reduce((a, b) => a + b, 0); }

// Throughput as rates between this page's reads of the gateway's byte counters.
async function throughputChart() {
  const t = await api("/admin/v2/throughput");
  const now = Date.now(), produced = sum(t.produced_bytes), fetched = sum(t.fetched_bytes);
  if (rates.last) {
    const seconds = Math.max(0.001, (now - rates.last.at) / 1000);
    rates.points.produced.push([now, Math.max(0, produced - rates.last.produced) / seconds]);
    rates.points.fetched.push([now, Math.max(0, fetched - rates.last.fetched) / seconds]);
    for (const series of Object.values(rates.points)) series.splice(0, Math.max(0, series.length - 60));
  }
  rates.last = { at: now, produced, fetched };
  return lines("throughput", [{ name: "produced B/s", points: rates.points.produced },
    { name: "fetched B/s", points: rates.points.fetched }], (v) => `${bytes(Math.round(v))}/s`);
}

export async function overview(page, refresh) {
  const [gateways, memory, replication, health] = await Promise.all([
    api("/admin/v2/gateways"), api("/admin/v2/memory"), api("/admin/v2/replication"), api("/health")]);
  const chart = el("div", { id: "throughput-box" }, await throughputChart());
  refresh(async () => chart.replaceChildren(await throughputChart()), 2000);
  page.append(
    el("h1", {}, "Overview"),
    el("p", { "data-testid": "health" }, `health: ${health.status}`),
    el("h2", {}, "Gateways"),
    table("gateways", [["node", (g) => g.node_id], ["host", (g) => g.host], ["kafka", (g) => g.kafka_port],
      ["native", (g) => g.native_port], ["admin", (g) => g.admin_port],
      ["roles", (g) => gateways.roles.filter((r) => r.node_id === g.node_id).map((r) => r.role).join(", ")]],
    gateways.gateways),
    el("h2", {}, "Redis memory against its budget"),
    table("memory", [["primary", (p) => p.address], ["used", (p) => bytes(p.used)],
      ["maxmemory", (p) => (p.maxmemory ? bytes(p.maxmemory) : "no limit")],
      ["produce stops at", (p) => (p.maxmemory ? bytes(p.mark) : "")], ["policy", (p) => p.policy]],
    memory.primaries),
    bars("memory-chart", memory.primaries.map((p) => ({
      label: p.address, value: p.used, max: p.maxmemory || undefined, warn: p.maxmemory && p.used >= p.mark })), bytes),
    el("h2", {}, "Replication"),
    table("replication", [["primary", (p) => p.primary], ["offset", (p) => p.offset],
      ["replicas online", (p) => p.replicas_online], ["replicas", (p) => p.replicas.length]], replication),
    el("h2", {}, "Throughput (this gateway)"),
    chart,
  );
}

// -- topics -----------------------------------------------------------------------------------

// A tiered partition's two parts: offsets [log start, local log start) and their bytes in tiered
// storage, [local log start, high watermark) and their batches' bytes in Redis.
const tierColumns = [["local log start", (p) => p.local_log_start_offset],
  ["highest tiered", (p) => p.highest_tiered_offset], ["segments", (p) => p.remote_segments],
  ["remote bytes", (p) => bytes(p.remote_bytes)], ["local bytes", (p) => bytes(p.local_bytes)]];

export async function topics(page) {
  const [list, tiered] = await Promise.all([api("/admin/v2/topics"), api("/admin/v2/tiering")]);
  const filter = el("input", { placeholder: "filter", "data-testid": "topic-filter" });
  const box = el("div");
  const draw = () => box.replaceChildren(table("topics",
    [["topic", (t) => el("a", { href: `#/topics/${enc(t.name)}` }, t.name)], ["partitions", (t) => t.partitions]],
    list.filter((t) => t.name.includes(filter.value))));
  filter.addEventListener("input", draw);
  draw();
  page.append(el("h1", {}, `Topics (${list.length})`), filter, box);
  if (tiered.length) {
    page.append(el("h2", {}, "Tiered storage"), table("tiered", [["topic", (p) => p.topic],
      ["partition", (p) => p.partition], ["log start", (p) => p.log_start_offset], ...tierColumns,
      ["high watermark", (p) => p.high_watermark]], tiered));
  }
}

function shown(v) {
  if (v === null) return el("span", { class: "muted" }, "null");
  const label = v.schema_id !== undefined ? `${v.format}${v.message ? ` ${v.message}` : ""} · schema ${v.schema_id} (${v.subject})` : v.format;
  const text = v.format === "text" || v.format === "hex" ? v.data : JSON.stringify(v.data, null, 1);
  return el("div", {}, el("span", { class: "muted" }, label), el("pre", {}, text));
}

export async function topic(page, _refresh, name) {
  const t = await api(`/admin/v2/topics/${enc(name)}`);
  const messages = el("div", { "data-testid": "messages-box" });
  const partition = el("select", { name: "partition" },
    t.partitions.map((p) => el("option", { value: p.partition }, p.partition)));
  const offset = el("input", { name: "offset", size: 8, placeholder: "last" });
  const time = el("input", { name: "timestamp", size: 14, placeholder: "ms since epoch" });
  const key = el("input", { name: "key", size: 10 });
  const format = el("select", { name: "format" }, ["auto", "json", "text", "hex"].map((f) => el("option", {}, f)));
  const browse = async (event) => {
    event?.preventDefault();
    const q = new URLSearchParams({ partition: partition.value, format: format.value, limit: "50" });
    if (offset.value) q.set("offset", offset.value);
    if (time.value) q.set("timestamp", time.value);
    if (key.value) q.set("key", key.value);
    try {
      const got = await api(`/admin/v2/topics/${enc(name)}/messages?${q}`);
      messages.replaceChildren(
        el("p", { class: "muted" }, `partition ${got.partition}: offsets ${got.log_start_offset} to ${got.high_watermark}`),
        table("messages", [["offset", (m) => m.offset], ["timestamp", (m) => when(m.timestamp)],
          ["key", (m) => shown(m.key)], ["value", (m) => shown(m.value)],
          ["headers", (m) => m.headers.map((h) => `${h.key}=${h.value ? h.value.data : "null"}`).join(", ")]],
        got.messages));
    } catch (error) {
      messages.replaceChildren(el("p", { class: "error" }, error.message));
    }
  };
  const value = el("input", { name: "value", size: 30 });
  const produceKey = el("input", { name: "produce-key", size: 10 });
  const produced = el("span", { "data-testid": "produced" });
  const produce = async (event) => {
    event.preventDefault();
    try {
      const r = await api(`/admin/v2/topics/${enc(name)}/messages`, {
        method: "POST", body: { value: value.value, key: produceKey.value || null, partition: Number(partition.value) } });
      produced.textContent = `written at ${r.topic}-${r.partition} offset ${r.offset}`;
      await browse();
    } catch (error) {
      produced.textContent = error.message;
    }
  };
  page.append(
    el("h1", { "data-testid": "topic-name" }, t.name),
    el("h2", {}, "Partitions"),
    table("partitions", [["partition", (p) => p.partition], ["log start", (p) => p.log_start_offset],
      ["high watermark", (p) => p.high_watermark], ["records", (p) => p.high_watermark - p.log_start_offset],
      ["size", (p) => bytes(p.bytes)],
      ...(t.partitions.some((p) => p.tier) ? tierColumns.map(([h, cell]) => [h, (p) => (p.tier ? cell(p.tier) : "")]) : [])],
    t.partitions),
    bars("sizes", t.partitions.map((p) => ({ label: `partition ${p.partition}`, value: p.bytes })), bytes),
    el("h2", {}, "Configs"),
    table("configs", [["config", ([k]) => k], ["value", ([, v]) => v]], Object.entries(t.config).sort()),
    el("h2", {}, "Messages"),
    el("form", { class: "inline", onsubmit: browse, "data-testid": "browse" },
      el("label", {}, "partition", partition), el("label", {}, "from offset", offset),
      el("label", {}, "from time", time), el("label", {}, "key", key), el("label", {}, "show as", format),
      el("button", { type: "submit" }, "Browse")),
    messages,
    el("h2", {}, "Produce a test message"),
    el("form", { class: "inline", onsubmit: produce, "data-testid": "produce" },
      el("label", {}, "key", produceKey), el("label", {}, "value", value),
      el("button", { type: "submit" }, "Produce"), produced),
  );
  await browse();
}

// -- consumer groups --------------------------------------------------------------------------

export async function groups(page) {
  const [list, shares] = await Promise.all([api("/admin/v2/groups"), api("/admin/v2/share-groups")]);
  const lag = (g) => Object.values(g.lag).reduce((a, b) => a + b, 0);
  page.append(
    el("h1", {}, `Consumer groups (${list.length})`),
    table("groups", [["group", (g) => el("a", { href: `#/groups/${enc(g.group_id)}` }, g.group_id)],
      ["protocol", (g) => g.type], ["type", (g) => g.protocol_type], ["state", (g) => g.state],
      ["members", (g) => g.members], ["lag", lag]], list),
    bars("lag-chart", list.map((g) => ({ label: g.group_id, value: lag(g) }))),
    el("p", { class: "muted" }, `${shares.share_groups.length} share groups: see Share groups`),
  );
}

// A group's total lag as the gateway sampled it, from before this page was opened on.
async function lagHistoryChart(id, testid = "lag-history") {
  const h = await api(`/admin/v2/groups/${enc(id)}/lag-history`);
  return lines(testid, [{ name: "total lag", points: h.samples.map((s) => [s.timestamp, s.total]) }]);
}

export async function group(page, refresh, id) {
  const [g, chart] = await Promise.all([api(`/admin/v2/groups/${enc(id)}`), lagHistoryChart(id)]);
  const history = el("div", { id: "lag-history-box" }, chart);
  refresh(async () => history.replaceChildren(await lagHistoryChart(id)), 5000);
  const assigned = (m) => Object.entries(m.assigned || {}).map(([t, ps]) => `${t}: ${ps.join(",")}`).join("; ");
  const topicsOf = [...new Set(g.offsets.map((o) => o.topic))];
  const resetTopic = el("select", { name: "reset-topic" }, topicsOf.map((t) => el("option", {}, t)));
  const to = el("select", { name: "to" }, ["earliest", "latest"].map((o) => el("option", {}, o)));
  const result = el("span", { "data-testid": "reset-result" });
  const reset = async (event) => {
    event.preventDefault();
    if (!await confirmed(`Reset group ${id}'s offsets on ${resetTopic.value} to ${to.value}?`)) {
      result.textContent = "not reset";
      return;
    }
    try {
      const r = await api(`/admin/v2/groups/${enc(id)}/offsets`, { method: "POST", body: { topic: resetTopic.value, to: to.value } });
      result.textContent = `reset: ${JSON.stringify(r.offsets)}`;
    } catch (error) {
      result.textContent = error.message;
    }
  };
  page.append(
    el("h1", { "data-testid": "group-id" }, g.group_id),
    el("p", { "data-testid": "group-state" }, `${g.type} protocol · ${g.state} · epoch ${g.group_epoch} · assignor ${g.assignor ?? ""}`),
    el("h2", {}, "Members"),
    table("members", [["member", (m) => m.member_id], ["client", (m) => m.client_id], ["host", (m) => m.client_host],
      ["epoch", (m) => m.member_epoch ?? ""], ["subscribed", (m) => m.subscribed_topics.join(", ")],
      ["assigned", assigned]], g.members),
    el("h2", {}, "Offsets and lag"),
    table("offsets", [["topic", (o) => o.topic], ["partition", (o) => o.partition], ["committed", (o) => o.committed],
      ["high watermark", (o) => o.high_watermark], ["lag", (o) => o.lag]], g.offsets),
    bars("partition-lag", g.offsets.map((o) => ({ label: `${o.topic}-${o.partition}`, value: o.lag ?? 0 }))),
    el("h2", {}, "Lag over time"),
    history,
    el("h2", {}, "Reset offsets"),
    el("p", { class: "muted" }, "Only a group with no members can be reset, as in Kafka."),
    el("form", { class: "inline", onsubmit: reset, "data-testid": "reset" },
      el("label", {}, "topic", resetTopic), el("label", {}, "to", to), el("button", { type: "submit" }, "Reset…"), result),
  );
}

// -- share groups -----------------------------------------------------------------------------

export async function shareGroups(page) {
  const { share_groups: list } = await api("/admin/v2/share-groups");
  page.append(el("h1", {}, `Share groups (${list.length})`));
  for (const s of list) {
    const v = await api(`/admin/v2/share-groups/${enc(s.group)}`);
    page.append(
      el("h2", { "data-testid": "share-group" }, `${v.group} · ${v.state} · ${v.members.length} members`),
      el("p", { "data-testid": `share-counts-${v.group}` },
        `rejected ${v.rejected} · archived ${v.archived} · dead-lettered ${v.dead_lettered}`),
      table(`share-${v.group}`, [["topic", (p) => p.topic], ["partition", (p) => p.partition],
        ["start offset", (p) => p.start_offset], ["in flight", (p) => p.in_flight],
        ["by delivery count", (p) => Object.entries(p.delivery_counts).map(([n, c]) => `${n}×: ${c}`).join(", ")]],
      v.partitions),
      await lagHistoryChart(v.group, `share-lag-${v.group}`));
  }
}

// -- transactions -----------------------------------------------------------------------------

export async function transactions(page, _refresh, _arg, rerender) {
  const list = await api("/admin/v2/transactions");
  const abort = async (t) => {
    if (!await confirmed(`Abort transaction ${t.txn}?`)) return;
    await api(`/admin/v2/transactions/${enc(t.txn)}/abort`, { method: "POST" });
    await rerender();
  };
  page.append(
    el("h1", {}, `Open transactions (${list.length})`),
    table("transactions", [["transaction", (t) => t.txn], ["state", (t) => t.state],
      ["age", (t) => el("span", { class: t.age_ms > t.timeout_ms ? "hanging" : null },
        `${Math.round(t.age_ms / 1000)} s${t.age_ms > t.timeout_ms ? " (hanging)" : ""}`)],
      ["timeout", (t) => `${t.timeout_ms / 1000} s`], ["producer", (t) => `${t.producer_id}/${t.producer_epoch}`],
      ["partitions", (t) => t.partitions.map((p) => `${p.topic}-${p.partition}`).join(", ")],
      ["", (t) => el("button", { onclick: () => abort(t), "data-testid": "abort" }, "Abort…")]], list),
  );
}

// -- delayed delivery and watermarks: per topic ----------------------------------------------

async function topicPicker(page, title, route, chosen) {
  const list = await api("/admin/v2/topics");
  const pick = el("select", { "data-testid": "topic-pick", onchange: () => { location.hash = `#/${route}/${enc(pick.value)}`; } },
    el("option", { value: "" }, "choose a topic"),
    list.map((t) => el("option", { value: t.name, selected: t.name === chosen }, t.name)));
  page.append(el("h1", {}, title), pick);
}

export async function delayed(page, _refresh, name) {
  await topicPicker(page, "Delayed delivery", "delayed", name);
  if (!name) return;
  const d = await api(`/admin/v2/topics/${enc(name)}/delayed`);
  const now = Date.now();
  page.append(
    table("delayed", [["partition", (p) => p.partition], ["waiting", (p) => p.messages], ["buckets", (p) => p.buckets],
      ["next due", (p) => when(p.next_due_ms)], ["in transactions", (p) => p.pending_in_transactions]], d.partitions),
    timeline("schedule", d.partitions.filter((p) => p.next_due_ms !== null)
      .map((p) => ({ label: `partition ${p.partition}`, at: p.next_due_ms, count: p.messages })), now),
  );
}

export async function watermarks(page, _refresh, name) {
  await topicPicker(page, "Watermarks", "watermarks", name);
  if (!name) return;
  const w = await api(`/admin/v2/topics/${enc(name)}/watermarks`);
  page.append(
    el("p", { "data-testid": "topic-watermark" }, `topic watermark: ${when(w.watermark_ms) || "none"}`),
    table("watermarks", [["partition", (p) => p.partition], ["last stable offset", (p) => p.last_stable_offset],
      ["watermark", (p) => when(p.watermark_ms)], ["producers", (p) => Object.keys(p.producers || {}).join(", ")]], w.partitions),
    el("h2", {}, "Groups and subscriptions"),
    table("readers", [["reader", (r) => r.name], ["watermark", (r) => when(r.watermark_ms)]], [...w.groups, ...w.subscriptions]),
  );
}

// -- users and ACLs ---------------------------------------------------------------------------

export async function security(page) {
  const [users, acls] = await Promise.all([api("/admin/v2/users"), api("/admin/v2/acls")]);
  page.append(
    el("h1", {}, "Users and ACLs"),
    table("users", [["user", (u) => u.name], ["mechanisms", (u) => u.mechanisms.join(", ")],
      ["created", (u) => when(u.created_ms)], ["tokens", (u) => u.tokens.length]], users),
    table("acls", Object.keys(acls[0] || { principal: "" }).map((k) => [k, (a) => String(a[k])]), acls),
  );
}
