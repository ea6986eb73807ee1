// The operator's dashboard. It reads the public API only, with the token
// typed into the page (kept in sessionStorage, sent as X-Auth-Token), at
// microversion 1.39. Everything is built with DOM calls and textContent:
// provider, project and app names are user input and never parsed as HTML.
"use strict";

const MICROVERSION = "placement 1.39";
// Bounds on what one refresh reads, so a large cloud does not flood the
// service from a browser tab.
const MAX_PROVIDERS = 500;
const MAX_APPS = 20;
const PARALLEL = 8;

/** Provider names by uuid, from the last refresh (the explain table shows them). */
let providerNames = new Map();

class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
  }
}

function token() {
  return sessionStorage.getItem("placement-token") || "";
}

async function api(path) {
  const headers = { "OpenStack-API-Version": MICROVERSION, Accept: "application/json" };
  if (token()) headers["X-Auth-Token"] = token();
  const response = await fetch(path, { headers });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = body && body.errors && body.errors[0];
    throw new ApiError(response.status, error ? error.detail : response.statusText);
  }
  return body;
}

/** An element with attributes (class, data-*, ...) and children (strings become text). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function byId(id) {
  return document.getElementById(id);
}

/** Runs `work` over `items`, at most PARALLEL at a time. */
async function eachLimited(items, work) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      out[i] = await work(items[i]);
    }
  }
  await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
  return out;
}

/** Placement's capacity of an inventory record. */
function capacity(inv) {
  return Math.floor((inv.total - inv.reserved) * inv.allocation_ratio);
}

/** A usage bar: `used` of `cap`, coloured as it fills. */
function bar(label, used, cap) {
  const ratio = cap > 0 ? Math.min(used / cap, 1) : 1;
  const fill = el("div", { class: "fill" + (ratio >= 1 ? " full" : ratio >= 0.8 ? " high" : "") });
  // CSSOM, not a style attribute: the page's CSP allows no inline styles.
  fill.style.width = `${(ratio * 100).toFixed(1)}%`;
  return el("div", { class: "bar", "data-class": label, title: `${label}: ${used} of ${cap}` },
    fill, el("span", { class: "label" }, `${label} ${used} / ${cap}`));
}

// ---- Provider trees and the fullest and emptiest providers ----

async function loadProviders() {
  const list = (await api("/resource_providers")).resource_providers;
  const shown = list.slice(0, MAX_PROVIDERS);
  byId("providers-note").textContent = list.length > shown.length
    ? `Showing ${shown.length} of ${list.length} providers.` : `${list.length} providers.`;
  await eachLimited(shown, async (rp) => {
    const base = `/resource_providers/${rp.uuid}`;
    const [inv, use] = await Promise.all([api(`${base}/inventories`), api(`${base}/usages`)]);
    rp.classes = Object.entries(inv.inventories).map(([rc, record]) => ({
      rc, cap: capacity(record), used: use.usages[rc] || 0,
    }));
  });
  renderTrees(shown);
  renderExtremes(shown);
  return shown;
}

function providerItem(rp, children) {
  const item = el("li", { class: "provider", "data-uuid": rp.uuid },
    el("div", { class: "name" }, rp.name, el("span", { class: "uuid" }, rp.uuid)),
    el("div", { class: "bars" }, ...rp.classes.map((c) => bar(c.rc, c.used, c.cap))));
  const kids = children.get(rp.uuid) || [];
  if (kids.length) item.append(el("ul", {}, ...kids.map((k) => providerItem(k, children))));
  return item;
}

function renderTrees(providers) {
  const known = new Set(providers.map((p) => p.uuid));
  const children = new Map();
  const roots = [];
  for (const rp of providers.slice().sort((a, b) => a.name.localeCompare(b.name))) {
    const parent = rp.parent_provider_uuid;
    if (parent && known.has(parent)) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(rp);
    } else {
      roots.push(rp);
    }
  }
  byId("trees").replaceChildren(...roots.map((r) => providerItem(r, children)));
}

/** How full a provider is: its fullest class. */
function fullness(rp) {
  return Math.max(...rp.classes.map((c) => (c.cap > 0 ? c.used / c.cap : 1)));
}

function renderExtremes(providers) {
  const stocked = providers.filter((p) => p.classes.length > 0)
    .map((p) => ({ p, f: fullness(p) }))
    .sort((a, b) => b.f - a.f);
  const line = ({ p, f }) => el("li", { "data-uuid": p.uuid }, `${p.name}: ${(f * 100).toFixed(0)} %`);
  byId("fullest").replaceChildren(...stocked.slice(0, 5).map(line));
  byId("emptiest").replaceChildren(...stocked.slice(-5).reverse().map(line));
}

// ---- Why not? ----

/** A value as text: objects as JSON. */
function show(value) {
  return typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
}

/** An object's fields as `key=value, ...`. */
function numbers(detail) {
  if (!detail) return "";
  return Object.entries(detail).map(([k, v]) => `${k}=${show(v)}`).join(", ");
}

async function explain(query, names) {
  byId("explain-error").textContent = "";
  const body = byId("explain-result").tBodies[0];
  body.replaceChildren();
  let answer;
  try {
    answer = await api(`/allocation_candidates/explain?${query}`);
  } catch (e) {
    byId("explain-error").textContent = e.message;
    byId("explain-summary").textContent = "";
    byId("explain-quota").replaceChildren();
    return;
  }
  const counts = Object.entries(answer.summary).map(([k, n]) => `${k}: ${n}`).join(", ");
  byId("explain-summary").textContent =
    (counts || "no provider trees") + (answer.complete ? "" : " (search cut at its step budget)");
  byId("explain-quota").replaceChildren(...answer.quota.map((q) => el("li", {},
    `Quota: ${q.project_id} would go over its ${q.resource_class} limit `
    + `(${q.consumed} consumed + ${q.requested} requested > ${q.limit}).`)));
  for (const v of answer.providers) {
    body.append(el("tr", { "data-uuid": v.root_provider_uuid },
      el("td", {}, names.get(v.root_provider_uuid) || v.root_provider_uuid),
      el("td", { class: v.fits ? "yes" : "no" }, v.fits ? "yes" : "no"),
      el("td", { class: "reason" }, v.reason || ""),
      el("td", {}, v.group === null || v.group === undefined ? "" : v.group || "(unnumbered)"),
      el("td", {}, numbers(v.detail))));
  }
}

// ---- Deployments and their core maps ----

async function coreMap(node) {
  try {
    const topo = await api(`/resource_providers/${node}/cpu_topology`);
    return el("div", { class: "cores", "data-node": node }, ...topo.cores.map((c) => {
      const fill = el("div", { class: "fill" });
      fill.style.height = `${(100 * c.used_shares / topo.share_base).toFixed(0)}%`;
      return el("div", { class: "core", title: `core ${c.id}: ${c.used_shares} of ${topo.share_base} shares used` },
        fill, el("span", {}, c.id));
    }));
  } catch (e) {
    return el("p", { class: "note" }, `No CPU topology: ${e.message}`);
  }
}

async function loadDeployments(names) {
  const apps = (await api("/deployments")).deployments;
  const shown = apps.slice(0, MAX_APPS);
  byId("deployments-note").textContent = apps.length
    ? `${apps.length} apps${apps.length > shown.length ? `, showing ${shown.length}` : ""}.`
    : "No deployments.";
  const blocks = await eachLimited(shown, async (summary) => {
    const view = await api(`/deployments/${encodeURIComponent(summary.app)}`);
    const nodes = await eachLimited(Object.entries(view.nodes), async ([node, held]) => {
      const bindings = held.instances.map((i) => el("li", {},
        `${i.consumer_uuid}: ${i.cpu} CPU${i.cpu_bind ? " bound" : ""}, ${i.memory_mb} MiB`,
        Object.keys(i.cpu_map).length ? ` (cores ${numbers(i.cpu_map)})` : ""));
      return el("div", { class: "node" },
        el("h4", {}, `${names.get(node) || node}: ${held.count} instances`),
        await coreMap(node), el("ul", {}, ...bindings));
    });
    return el("div", { class: "app", "data-app": summary.app },
      el("h3", {}, `${summary.app}: ${summary.count} instances on ${summary.nodes} nodes`), ...nodes);
  });
  byId("apps").replaceChildren(...blocks);
}

// ---- Project shares and colocation ----

async function loadSharing() {
  const shares = await api("/fairness/shares");
  byId("shares").tBodies[0].replaceChildren(...shares.projects.map((p) => el("tr", { "data-project": p.project_id },
    el("td", {}, p.project_id), el("td", {}, p.parent_project_id || ""), el("td", {}, p.weight),
    el("td", {}, p.dominant_share.toFixed(3)), el("td", {}, p.dominant_rc || ""),
    el("td", {}, p.allocation_count))));
  const colocation = (await api("/colocation_policy")).policy;
  const shown = ["cpuReclaimThresholdPercent", "memoryReclaimThresholdPercent", "forbidUsageThresholds",
    "cpuSuppressThresholdPercent", "memoryEvictThresholdPercent", "metricExpirationSeconds"];
  byId("colocation").replaceChildren(...shown.filter((k) => k in colocation).flatMap((k) => [
    el("dt", {}, k), el("dd", {}, show(colocation[k]))]));
  byId("sharing-note").textContent = `${shares.projects.length} projects; colocation policy in force below.`;
}

// ---- The fair queue ----

/** Counts of each value, as "a: 2, b: 1". */
function tally(values) {
  const counts = new Map();
  for (const v of values) counts.set(v, (counts.get(v) || 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k}: ${n}`).join(", ");
}

async function loadQueue() {
  const pending = (await api("/queue?state=pending&limit=1000")).requests;
  const advice = (await api("/preemptions")).preemptions;
  const projects = new Set([...pending.map((r) => r.project_id), ...advice.map((a) => a.project_id)]);
  const rows = [...projects].sort().map((p) => {
    const mine = pending.filter((r) => r.project_id === p);
    const longest = Math.max(0, ...mine.map((r) => r.waited_seconds));
    return el("tr", { "data-project": p },
      el("td", {}, p), el("td", { class: "pending" }, mine.length),
      el("td", {}, mine.length ? `${longest.toFixed(1)} s` : ""),
      el("td", { class: "reasons" }, tally(mine.map((r) => r.reason || "not yet tried"))),
      el("td", { class: "victims" }, advice.filter((a) => a.project_id === p).length),
      el("td", { class: "for" }, tally(advice.filter((a) => a.project_id === p).map((a) => a.for_project_id))));
  });
  byId("queue").tBodies[0].replaceChildren(...rows);
  byId("queue-note").textContent = `${pending.length} pending${pending.length === 1000 ? " (the first 1000)" : ""}; ${advice.length} consumers advised for removal.`;
}

// ---- Wiring ----

/** Runs one section's loader; a failure shows in that section only. */
async function section(noteId, load) {
  try {
    return await load();
  } catch (e) {
    byId(noteId).textContent = e instanceof ApiError && e.status === 401
      ? "Unauthorized: enter a token above (admin in the default noauth2 mode, a Keystone token behind Keystone)." : `Failed: ${e.message}`;
    byId(noteId).classList.add("error");
    return null;
  }
}

async function refresh() {
  byId("status").textContent = "Loading…";
  for (const id of ["providers-note", "deployments-note", "sharing-note", "queue-note"]) byId(id).classList.remove("error");
  const providers = (await section("providers-note", loadProviders)) || [];
  const names = new Map(providers.map((p) => [p.uuid, p.name]));
  providerNames = names;
  await Promise.all([
    section("deployments-note", () => loadDeployments(names)),
    section("sharing-note", loadSharing),
    section("queue-note", loadQueue),
  ]);
  byId("status").textContent = `Updated ${new Date().toLocaleTimeString()}`;
  document.body.dataset.loaded = "true";
}

document.addEventListener("DOMContentLoaded", () => {
  byId("token").value = token();
  byId("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("placement-token", byId("token").value.trim());
    refresh();
  });
  byId("refresh").addEventListener("click", refresh);
  byId("explain-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const query = byId("explain-query").value.trim().replace(/^\?/, "");
    explain(query, providerNames).then(() => {
      byId("explain-result").dataset.done = String(Date.now());
    });
  });
  refresh();
});
