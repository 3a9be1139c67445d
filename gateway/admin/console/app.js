// The console's router: #/page/argument picks a page; a page may ask to be refreshed on a timer,
// which stops when another page is shown.

import * as pages from "./pages.js";
import { el } from "./dom.js";

const routes = {
  overview: pages.overview, topics: pages.topics, "topics/": pages.topic, groups: pages.groups,
  "groups/": pages.group, "share-groups": pages.shareGroups, transactions: pages.transactions,
  delayed: pages.delayed, "delayed/": pages.delayed, watermarks: pages.watermarks,
  "watermarks/": pages.watermarks, security: pages.security,
};
let timers = [];
let shown = 0;  // the latest render: a slower earlier one never replaces it

async function render() {
  timers.forEach(clearInterval);
  timers = [];
  const seq = ++shown;
  const [name, ...rest] = (location.hash.replace(/^#\//, "") || "overview").split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : undefined;
  const draw = routes[arg === undefined ? name : `${name}/`] || pages.overview;
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.hash === `#/${name}`));
  const page = el("div", { "data-page": name, "data-route": location.hash || "#/overview" });
  const refresh = (fn, ms) => timers.push(setInterval(fn, ms));
  try {
    await draw(page, refresh, arg, render);
  } catch (error) {
    page.append(el("p", { class: "error" }, error.message));
  }
  if (seq !== shown) return;
  page.setAttribute("data-ready", "true");
  document.getElementById("page").replaceChildren(page);
}

window.addEventListener("hashchange", render);
render();
