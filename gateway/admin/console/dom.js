// Small builders for the pages' elements: text is always set as text, never parsed as HTML.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// A table: columns are [heading, row => cell]; a cell is text, a number (right-aligned) or a node.
export function table(testid, columns, rows) {
  return el("table", { "data-testid": testid },
    el("thead", {}, el("tr", {}, columns.map(([heading]) => el("th", {}, heading)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, columns.map(([, cell]) => {
      const value = cell(row);
      return el("td", { class: typeof value === "number" ? "num" : null }, value);
    })))));
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function when(ms) {
  return ms === null || ms === undefined ? "" : new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}
