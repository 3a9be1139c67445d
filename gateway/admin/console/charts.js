// Charts as small hand-written SVG: bars, a line over time, a timeline. No chart library.

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// Horizontal bars: items are {label, value, max?, warn?}; each bar's length is value / max.
export function bars(testid, items, format = String) {
  const row = 22, width = 520, labelWidth = 160;
  const top = Math.max(1, ...items.map((i) => i.max ?? i.value));
  const chart = svg("svg", { class: "chart", "data-testid": testid, width, height: row * items.length + 8 });
  items.forEach((item, n) => {
    const y = 4 + n * row;
    const length = Math.max(1, ((width - labelWidth - 90) * item.value) / (item.max ?? top));
    chart.append(svg("text", { x: 4, y: y + 14 }, item.label));
    chart.append(svg("rect", { class: item.warn ? "bar warn" : "bar", x: labelWidth, y, width: length, height: row - 6 }));
    chart.append(svg("text", { x: labelWidth + length + 6, y: y + 14 }, format(item.value)));
  });
  return chart;
}

// Lines over time: series are {name, points: [[ms, value], ...]}.
export function lines(testid, series, format = String) {
  const width = 520, height = 160, pad = 34;
  const all = series.flatMap((s) => s.points);
  const chart = svg("svg", { class: "chart", "data-testid": testid, width, height });
  if (all.length < 2) {
    chart.append(svg("text", { x: pad, y: height / 2 }, "collecting samples..."));
    return chart;
  }
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  chart.setAttribute("data-from", t0);  // the span drawn, for readers (and tests) of the chart
  chart.setAttribute("data-to", t1);
  const top = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => pad + ((width - 2 * pad) * (t - t0)) / (t1 - t0);
  const y = (v) => height - pad + 10 - ((height - pad) * v) / top;
  chart.append(svg("text", { x: 2, y: 12 }, format(top)));
  chart.append(svg("text", { x: 2, y: height - 4 }, `${Math.round((t1 - t0) / 1000)} s`));
  series.forEach((s, n) => {
    const d = s.points.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    chart.append(svg("path", { class: n ? "line second" : "line", d }));
    chart.append(svg("text", { x: width - 120, y: 14 + 14 * n }, s.name));
  });
  return chart;
}

// A timeline: items are {label, at (ms), count}, one row each, placed between now and the last.
export function timeline(testid, items, now) {
  const row = 24, width = 620, labelWidth = 120;
  const end = Math.max(now + 1000, ...items.map((i) => i.at));
  const chart = svg("svg", { class: "chart", "data-testid": testid, width, height: row * items.length + 26 });
  const x = (t) => labelWidth + ((width - labelWidth - 20) * (t - now)) / (end - now);
  chart.append(svg("text", { x: labelWidth, y: row * items.length + 20 }, "now"));
  chart.append(svg("text", { x: width - 90, y: row * items.length + 20 }, `+${Math.round((end - now) / 1000)} s`));
  items.forEach((item, n) => {
    const y = 6 + n * row;
    chart.append(svg("text", { x: 4, y: y + 12 }, item.label));
    chart.append(svg("line", { x1: labelWidth, x2: width - 20, y1: y + 8, y2: y + 8, stroke: "#e3e6ea" }));
    chart.append(svg("circle", { class: "bar", cx: x(Math.max(now, item.at)), cy: y + 8, r: 4 + Math.min(6, Math.log10(1 + item.count) * 2) }));
  });
  return chart;
}
