"""The web console in a real browser: Debian's chromium driven by playwright, against one gateway
with authentication on and real traffic from confluent-kafka (JSON, Avro and Protobuf records through
the gateway's own Schema Registry, a classic and a consumer group, a share consumer holding records, an
open transaction). Each page is clicked through and what it shows compared with what the admin API
says; a screenshot of each lands in test-artifacts/console/ (git-ignored)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import confluent_kafka as ck
import confluent_kafka.admin
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from playwright.async_api import Browser, Page, async_playwright

from gateway.formats.records import build_batch
from gateway.server.gateway import Gateway
from gateway.store.embedded import free_port
from tests.conftest import admin_url, eventually, flush, kafka_bootstrap, running_gateway, test_config
from tests.test_client_schema import nested_and_imported

pytestmark = [pytest.mark.kafka, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "console"
PASSWORD = "console-secret"
LOGIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "admin", "sasl.password": PASSWORD}
PAYMENT = json.dumps({"type": "record", "name": "Payment",
                      "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]})


class Site:
    """The gateway, its admin URL and an API client logged in as the browser is."""

    def __init__(self, gw: Gateway, http: aiohttp.ClientSession) -> None:
        self.gw, self.http, self.url = gw, http, admin_url(gw)
        self.bootstrap = kafka_bootstrap(gw)

    async def api(self, path: str) -> Any:
        async with self.http.get(self.url + path) as r:
            assert r.status == 200, await r.text()
            return await r.json()


def _traffic(bootstrap: str, registry: str) -> tuple[ck.Producer, ck.ShareConsumer]:
    """Records, groups and an open transaction made by confluent-kafka; returns the transactional
    producer, whose transaction is left open, and the share consumer holding records."""
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap, **LOGIN})
    for f in admin.create_topics([ck.admin.NewTopic("orders", 3), ck.admin.NewTopic("payments", 1),
                                  ck.admin.NewTopic("shipments", 1), ck.admin.NewTopic("later", 2, config={"delayed.delivery.enable": "true"})]).values():
        f.result()
    producer = ck.Producer({"bootstrap.servers": bootstrap, **LOGIN})
    for i in range(30):
        producer.produce("orders", key=f"customer-{i % 5}", value=json.dumps({"order": i, "total": i * 2.5}))
    avro = AvroSerializer(SchemaRegistryClient({"url": registry, "basic.auth.user.info": f"admin:{PASSWORD}"}),
                          PAYMENT)
    for i in range(3):
        producer.produce("payments", value=avro({"id": f"p-{i}", "amount": i + 0.5},
                                                SerializationContext("payments", MessageField.VALUE)))
    line = nested_and_imported()  # shop.Order.Line: a nested message, its file importing another
    protobuf = ProtobufSerializer(line, SchemaRegistryClient({"url": registry,
                                                              "basic.auth.user.info": f"admin:{PASSWORD}"}))
    for i in range(2):
        producer.produce("shipments", value=protobuf(line(sku=f"s-{i}", price={"cents": 100 * i + 50}),
                                                     SerializationContext("shipments", MessageField.VALUE)))
    due = int(time.time() * 1000) + 3_600_000  # an hour away: still waiting while the test looks
    for i in range(4):
        producer.produce("later", partition=i % 2, value=b"wake up",
                         headers=[("x-deliver-at", str(due + i * 60_000).encode())])
    assert producer.flush(30) == 0
    for group, protocol in (("billing", "classic"), ("audit", "consumer")):
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, **LOGIN, "group.id": group,
                                "group.protocol": protocol, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False})
        consumer.subscribe(["orders"])
        got = 0
        while got < 12:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
        consumer.close()
    entry = ck.admin.ConfigEntry("share.auto.offset.reset", "earliest",
                                 incremental_operation=ck.admin.AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ck.admin.ConfigResource(
            ck.admin.ResourceType.GROUP, "pickers", incremental_configs=[entry])]).values():
        f.result()
    share = ck.ShareConsumer({"bootstrap.servers": bootstrap, **LOGIN, "group.id": "pickers",
                              "share.acknowledgement.mode": "explicit"})
    share.subscribe(["orders"])
    while not [m for m in share.poll(1.0) if m.error() is None]:
        pass  # held, never acknowledged: in flight at delivery count 1 until the member leaves
    txn = ck.Producer({"bootstrap.servers": bootstrap, **LOGIN, "transactional.id": "stuck-writer"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("orders", key="customer-0", value=b"uncommitted")
    assert txn.flush(30) == 0
    return txn, share


@pytest.fixture(scope="module")
async def site(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    flush(redis_server)
    cfg = test_config(redis_server, auth=True, super_users="admin", schema_registry_port=free_port(),
                      lag_sample_interval=0.3,
                      tier_store=str(tmp_path_factory.mktemp("tier")), tier_interval=3600)  # the test runs passes
    async with running_gateway(cfg) as gw:
        await gw.services.security.set_user("admin", PASSWORD)
        registry = f"http://127.0.0.1:{gw.listeners['schema_registry'].port}"
        held = await asyncio.to_thread(_traffic, kafka_bootstrap(gw), registry)
        async with aiohttp.ClientSession(headers={"Authorization": aiohttp.encode_basic_auth("admin", PASSWORD)}) as http:
            yield Site(gw, http)
        # off the event loop: the share consumer's leave needs the gateway in this loop to answer
        await asyncio.to_thread(held[1].close)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path="/usr/bin/chromium")
        yield b
        await b.close()


@pytest.fixture
async def page(site: Site, browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(http_credentials={"username": "admin", "password": PASSWORD},
                                        viewport={"width": 1280, "height": 900})
    p = await context.new_page()
    yield p
    await context.close()


async def show(page: Page, site: Site, route: str) -> None:
    """Open the console at `route` (#/...) and wait until that page has drawn."""
    await page.goto(f"{site.url}/console{route}")
    await ready(page, route)


async def ready(page: Page, route: str) -> None:
    await page.wait_for_selector(f'[data-route="{route}"][data-ready]')


async def rows(page: Page, testid: str) -> list[list[str]]:
    cells: list[list[str]] = await page.eval_on_selector_all(
        f'[data-testid="{testid}"] tbody tr',
        "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))")
    return cells


async def snap(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def test_the_console_wants_the_admin_login(site: Site) -> None:
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.get(f"{site.url}/console/") as r:
            assert r.status == 401 and "Basic" in r.headers["WWW-Authenticate"]
        async with anonymous.get(f"{site.url}/console/assets/app.js") as r:
            assert r.status == 401
    async with site.http.get(f"{site.url}/console/assets/app.js") as r:
        assert r.status == 200 and "javascript" in r.headers["Content-Type"]


async def test_topics_partitions_configs_and_messages(site: Site, page: Page) -> None:
    await show(page, site, "#/topics")
    listed = await site.api("/admin/v2/topics")
    assert sorted(r[0] for r in await rows(page, "topics")) == sorted(t["name"] for t in listed)
    await page.click('[data-testid="topics"] >> text=orders')
    await ready(page, "#/topics/orders")
    described = await site.api("/admin/v2/topics/orders")
    assert [r[:4] for r in await rows(page, "partitions")] == [
        [str(p["partition"]), str(p["log_start_offset"]), str(p["high_watermark"]),
         str(p["high_watermark"] - p["log_start_offset"])] for p in described["partitions"]]
    assert dict((k, v) for k, v in await rows(page, "configs")) == described["config"]
    # the latest records of partition 0, as the API decodes them (JSON values)
    api_messages = await site.api("/admin/v2/topics/orders/messages?partition=0&limit=50")
    shown = await rows(page, "messages")
    assert [r[0] for r in shown] == [str(m["offset"]) for m in api_messages["messages"]]
    assert all(m["value"]["format"] == "json" for m in api_messages["messages"])
    assert json.loads(shown[0][3].split("\n", 1)[1]) == api_messages["messages"][0]["value"]["data"]
    # by key, on the partition the key lives on
    key_part = [p for p in range(3) if (await site.api(
        f"/admin/v2/topics/orders/messages?partition={p}&key=customer-3"))["messages"]][0]
    await page.select_option('select[name="partition"]', str(key_part))
    await page.fill('input[name="key"]', "customer-3")
    await page.click('[data-testid="browse"] button')
    await page.wait_for_function("() => [...document.querySelectorAll('[data-testid=messages] tbody tr')]"
                                 ".every(r => r.cells[2].innerText.includes('customer-3'))")
    by_key = await site.api(f"/admin/v2/topics/orders/messages?partition={key_part}&key=customer-3&limit=50")
    assert [r[0] for r in await rows(page, "messages")] == [str(m["offset"]) for m in by_key["messages"]]
    await snap(page, "topic")
    # a test message, then seen by the API
    await page.fill('input[name="produce-key"]', "console")
    await page.fill('input[name="value"]', "hello from the console")
    await page.click('[data-testid="produce"] button')
    await page.wait_for_selector('[data-testid="produced"]:has-text("offset")')
    written = (await page.inner_text('[data-testid="produced"]')).split()
    p, offset = int(written[2].rsplit("-", 1)[1]), int(written[-1])
    got = await site.api(f"/admin/v2/topics/orders/messages?partition={p}&offset={offset}&limit=1")
    assert got["messages"][0]["value"] == {"format": "text", "data": "hello from the console"}
    assert got["messages"][0]["key"] == {"format": "text", "data": "console"}


async def test_tiered_partitions_show_their_local_and_remote_parts(site: Site, page: Page) -> None:
    """The topics page and the topic's own page show each tiered partition's offsets and bytes in
    tiered storage and in Redis, as the admin API reports them (formatted by the console's own `bytes`)."""
    logs = site.gw.services.log
    await logs.create_topic("cold", 2, {"remote.storage.enable": "true", "segment.bytes": "1048576",
                                        "local.retention.bytes": "0"})
    batch = build_batch([(None, b"v" * 1000, [])] * 400)  # about 400 KB: two make a segment, a third stays
    for p in range(2):
        assert all(not isinstance(r.result, Exception) for r in await logs.append([("cold", p, batch)] * 3))
    assert site.gw.tiering is not None and await site.gw.tiering.tier_pass() > 0
    tiered = await site.api("/admin/v2/tiering")
    assert [(t["topic"], t["partition"], t["local_log_start_offset"], t["remote_segments"]) for t in tiered] == [
        ("cold", 0, 800, 1), ("cold", 1, 800, 1)]
    await show(page, site, "#/topics")

    async def size(n: int) -> str:
        shown: str = await page.evaluate("async n => (await import('/console/assets/dom.js')).bytes(n)", n)
        return shown

    def offsets(t: dict[str, Any]) -> list[str]:
        return [str(t[k]) for k in ("local_log_start_offset", "highest_tiered_offset", "remote_segments")]

    assert await rows(page, "tiered") == [
        [t["topic"], str(t["partition"]), str(t["log_start_offset"]), *offsets(t), await size(t["remote_bytes"]),
         await size(t["local_bytes"]), str(t["high_watermark"])] for t in tiered]
    await snap(page, "topics-tiered")
    await page.click('[data-testid="topics"] >> text=cold')
    await ready(page, "#/topics/cold")
    described = await site.api("/admin/v2/topics/cold")
    assert [r[5:] for r in await rows(page, "partitions")] == [
        [*offsets(p["tier"]), await size(p["tier"]["remote_bytes"]), await size(p["tier"]["local_bytes"])]
        for p in described["partitions"]]


async def test_values_decoded_through_the_schema_registry(site: Site, page: Page) -> None:
    await show(page, site, "#/topics/payments")
    shown = await rows(page, "messages")
    api_messages = (await site.api("/admin/v2/topics/payments/messages?partition=0"))["messages"]
    assert [m["value"]["data"] for m in api_messages] == [{"id": f"p-{i}", "amount": i + 0.5} for i in range(3)]
    assert len(shown) == 3 and all("avro · schema" in r[3] and "payments-value" in r[3] for r in shown)
    assert json.loads(shown[1][3].split("\n", 1)[1]) == {"id": "p-1", "amount": 1.5}
    await page.select_option('select[name="format"]', "hex")
    await page.click('[data-testid="browse"] button')
    await page.wait_for_selector('[data-testid="messages"] td:has-text("hex")')
    hexed = (await site.api("/admin/v2/topics/payments/messages?partition=0&format=hex"))["messages"]
    assert [r[3].split("\n", 1)[1] for r in await rows(page, "messages")] == [m["value"]["data"] for m in hexed]


async def test_protobuf_values_decoded_through_the_schema_registry(site: Site, page: Page) -> None:
    await show(page, site, "#/topics/shipments")
    api_messages = (await site.api("/admin/v2/topics/shipments/messages?partition=0"))["messages"]
    # protobuf's JSON mapping: an int64 is a string
    assert [m["value"]["data"] for m in api_messages] == [{"sku": f"s-{i}", "price": {"cents": str(100 * i + 50)}}
                                                          for i in range(2)]
    assert {(m["value"]["format"], m["value"]["message"], m["value"]["subject"]) for m in api_messages} == {
        ("protobuf", "shop.Order.Line", "shipments-value")}
    shown = await rows(page, "messages")
    assert len(shown) == 2 and all("protobuf shop.Order.Line · schema" in r[3] for r in shown)
    assert [json.loads(r[3].split("\n", 1)[1]) for r in shown] == [m["value"]["data"] for m in api_messages]


async def test_groups_of_both_protocols_with_lag_and_a_confirmed_reset(site: Site, page: Page) -> None:
    await show(page, site, "#/groups")
    listed = await site.api("/admin/v2/groups")
    assert sorted((r[0], r[1], r[3], r[5]) for r in await rows(page, "groups")) == sorted(
        (g["group_id"], g["type"], g["state"], str(sum(g["lag"].values()))) for g in listed)
    assert {g["type"] for g in listed} == {"classic", "consumer"}
    await snap(page, "groups")
    # the lag sampler has recorded billing's lag before its page is opened: the chart starts there
    sampled = await eventually(lambda: _samples(site, "billing", 2), timeout=30, what="two lag samples")
    await page.click('[data-testid="groups"] >> text=billing')
    await ready(page, "#/groups/billing")
    described = await site.api("/admin/v2/groups/billing")
    assert await page.get_attribute('[data-testid="lag-history"]', "data-from") == str(sampled[0]["timestamp"])
    assert sampled[-1]["total"] == sum(described["lag"].values())
    assert await rows(page, "offsets") == [
        [o["topic"], str(o["partition"]), str(o["committed"]), str(o["high_watermark"]), str(o["lag"])]
        for o in described["offsets"]]
    assert await page.locator('[data-testid="partition-lag"] rect').count() == len(described["offsets"])
    await snap(page, "group")
    before = {o["partition"]: o["committed"] for o in described["offsets"]}
    # cancelled: nothing changes
    await page.select_option('select[name="to"]', "earliest")
    await page.click('[data-testid="reset"] button')
    await page.click('#confirm button[value="cancel"]')
    await page.wait_for_selector('[data-testid="reset-result"]:has-text("not reset")')
    assert {o["partition"]: o["committed"] for o in (await site.api("/admin/v2/groups/billing"))["offsets"]} == before
    # confirmed: every partition back at its log start
    await page.click('[data-testid="reset"] button')
    await page.click("#confirm-ok")
    await page.wait_for_selector('[data-testid="reset-result"]:has-text("reset:")')
    after = (await site.api("/admin/v2/groups/billing"))["offsets"]
    starts = {p["partition"]: p["log_start_offset"] for p in (await site.api("/admin/v2/topics/orders"))["partitions"]}
    assert {o["partition"]: o["committed"] for o in after} == {p: starts[p] for p in range(3)}


async def _samples(site: Site, group: str, at_least: int) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = (await site.api(f"/admin/v2/groups/{group}/lag-history"))["samples"]
    return samples if len(samples) >= at_least else []


async def test_overview_gateways_memory_and_throughput(site: Site, page: Page) -> None:
    await show(page, site, "#/overview")
    gateways = await site.api("/admin/v2/gateways")
    assert [r[0] for r in await rows(page, "gateways")] == [str(g["node_id"]) for g in gateways["gateways"]]
    memory = await site.api("/admin/v2/memory")
    assert [r[0] for r in await rows(page, "memory")] == [p["address"] for p in memory["primaries"]]
    assert [r[4] for r in await rows(page, "memory")] == [p["policy"] for p in memory["primaries"]]
    assert [r[0] for r in await rows(page, "replication")] == [
        p["primary"] for p in await site.api("/admin/v2/replication")]
    # the chart draws once the page has read the counters twice
    await page.wait_for_function(
        "() => (document.querySelector('[data-testid=throughput] path.line')?.getAttribute('d') || '').includes('L')")
    await snap(page, "overview")


async def test_share_groups_in_flight(site: Site, page: Page) -> None:
    sampled = await eventually(lambda: _samples(site, "pickers", 2), timeout=30, what="two lag samples")
    await show(page, site, "#/share-groups")
    assert await page.get_attribute('[data-testid="share-lag-pickers"]', "data-from") == str(sampled[0]["timestamp"])
    view = await site.api("/admin/v2/share-groups/pickers")
    assert await page.inner_text('[data-testid="share-counts-pickers"]') == (
        f"rejected {view['rejected']} · archived {view['archived']} · dead-lettered {view['dead_lettered']}")
    assert [[r[0], r[1], r[2], r[3]] for r in await rows(page, "share-pickers")] == [
        [p["topic"], str(p["partition"]), str(p["start_offset"]), str(p["in_flight"])] for p in view["partitions"]]
    assert sum(p["in_flight"] for p in view["partitions"]) > 0
    await snap(page, "share-groups")


async def test_a_hanging_transaction_aborted_behind_a_confirmation(site: Site, page: Page) -> None:
    await show(page, site, "#/transactions")
    open_txns = await site.api("/admin/v2/transactions")
    assert [r[0] for r in await rows(page, "transactions")] == [t["txn"] for t in open_txns] and open_txns
    await snap(page, "transactions")
    await page.click('[data-testid="abort"]')
    await page.click("#confirm-ok")
    await page.wait_for_function("() => !document.querySelector('[data-testid=transactions] tbody tr')")
    assert await site.api("/admin/v2/transactions") == []


async def test_delayed_watermarks_users_and_acls(site: Site, page: Page) -> None:
    await show(page, site, "#/delayed")
    await page.select_option('[data-testid="topic-pick"]', "later")
    await ready(page, "#/delayed/later")
    delayed = await site.api("/admin/v2/topics/later/delayed")
    assert [[r[0], r[1], r[2]] for r in await rows(page, "delayed")] == [
        [str(p["partition"]), str(p["messages"]), str(p["buckets"])] for p in delayed["partitions"]]
    assert sum(p["messages"] for p in delayed["partitions"]) == 4
    assert await page.locator('[data-testid="schedule"] circle').count() == 2
    await snap(page, "delayed")
    await show(page, site, "#/watermarks/orders")
    marks = await site.api("/admin/v2/topics/orders/watermarks")
    assert [[r[0], r[1]] for r in await rows(page, "watermarks")] == [
        [str(p["partition"]), str(p["last_stable_offset"])] for p in marks["partitions"]]
    assert sorted(r[0] for r in await rows(page, "readers")) == sorted(
        r["name"] for r in marks["groups"] + marks["subscriptions"])
    await show(page, site, "#/security")
    users = await site.api("/admin/v2/users")
    assert [r[0] for r in await rows(page, "users")] == [u["name"] for u in users]
    assert len(await rows(page, "acls")) == len(await site.api("/admin/v2/acls"))
    await snap(page, "security")

