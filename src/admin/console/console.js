// The routerd console: reads the admin API of the node serving it, which
// forwards to the other members (/nodes/{id}/...). No framework, no build.

import { parse, reading, rates } from "./metrics.js";

const REFRESH_MS = 1000;
const TOKEN_KEY = "routerd.admin.token";
const $ = (id) => document.getElementById(id);

/** The previous reading of each node's metrics, by node id. */
const readings = new Map();
let members = [];
let self = null;
let objectsAfter = null;

function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

/** A call to the admin API; mutating calls carry the admin token. */
async function call(method, path, body) {
  const headers = {};
  if (method !== "GET" && token() !== "") headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { method, headers, body, cache: "no-store" });
  const type = response.headers.get("content-type") ?? "";
  const payload = type.includes("json") ? await response.json() : await response.text();
  return { status: response.status, ok: response.ok, payload };
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function duration(seconds) {
  if (!Number.isFinite(seconds)) return "–";
  if (seconds < 1e-3) return `${(seconds * 1e6).toFixed(0)} µs`;
  if (seconds < 1) return `${(seconds * 1e3).toFixed(1)} ms`;
  return `${seconds.toFixed(2)} s`;
}

function percent(ratio) {
  return Number.isFinite(ratio) ? `${(ratio * 100).toFixed(2)} %` : "–";
}

async function nodeFigures(member) {
  if (member.state === "left" || member.state === "down") return null;
  try {
    const answer = await call("GET", `/nodes/${member.node_id}/metrics`);
    if (!answer.ok) return null;
    const now = reading(parse(answer.payload), Date.now());
    const figures = rates(readings.get(member.node_id), now);
    readings.set(member.node_id, now);
    return { ...figures, objects: now.objects };
  } catch {
    return null;
  }
}

function renderMembers(figures) {
  const body = $("members").tBodies[0];
  body.replaceChildren();
  members.forEach((member, index) => {
    const row = document.createElement("tr");
    row.dataset.node = member.node_id;
    row.dataset.state = member.state;
    cell(row, member.node_id + (member.link === "self" ? " (this node)" : ""));
    cell(row, member.state, `state state-${member.state}`);
    cell(row, member.incarnation);
    cell(row, member.link, `link link-${member.link}`);
    cell(row, member.heartbeat_age_ms == null ? "–" : `${member.heartbeat_age_ms} ms`);
    const f = figures[index];
    cell(row, f && Number.isFinite(f.perSecond) ? f.perSecond.toFixed(1) : "–");
    cell(row, f ? duration(f.p99) : "–");
    cell(row, f ? percent(f.errorRatio) : "–");
    cell(row, f ? f.objects.map(([type, n]) => `${type} ${n}`).join(", ") : "–");
    const actions = cell(row, "");
    if (member.state === "up") {
      const drain = document.createElement("button");
      drain.textContent = "Drain";
      drain.className = "drain";
      drain.addEventListener("click", () => startDrain(member.node_id));
      actions.appendChild(drain);
    }
    body.appendChild(row);
  });
}

function fillNodeSelects() {
  for (const id of ["sessions-node", "objects-node"]) {
    const select = $(id);
    const chosen = select.value;
    select.replaceChildren(
      ...members
        .filter((member) => member.state !== "left" && member.state !== "down")
        .map((member) => new Option(member.node_id, member.node_id)),
    );
    if ([...select.options].some((option) => option.value === chosen)) select.value = chosen;
  }
}

async function refresh() {
  try {
    const cluster = await call("GET", "/cluster");
    if (!cluster.ok) throw new Error(`/cluster answered ${cluster.status}`);
    self = cluster.payload.node_id;
    $("served-by").textContent = `node ${self}, incarnation ${cluster.payload.incarnation}`;
    members = cluster.payload.members;
    const figures = await Promise.all(members.map(nodeFigures));
    renderMembers(figures);
    fillNodeSelects();
    const up = members.filter((member) => member.state === "up").length;
    $("status").textContent = `${members.length} members, ${up} up; updated ${new Date().toLocaleTimeString()}`;
    $("status").className = "";
  } catch (error) {
    $("status").textContent = `This node does not answer: ${error.message}`;
    $("status").className = "error";
  }
}

async function startDrain(nodeId) {
  if (!confirm(`Drain node ${nodeId}? Its objects move to the others, its clients are told to reconnect elsewhere, then it leaves and exits.`)) return;
  const answer = await call("POST", `/nodes/${nodeId}/drain`);
  $("status").textContent = answer.ok
    ? `Node ${nodeId} drains.`
    : `Drain of node ${nodeId} refused (${answer.status}): ${JSON.stringify(answer.payload)}`;
  refresh();
}

function describe(list, entries) {
  list.replaceChildren();
  for (const [term, value] of entries) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    list.append(dt, dd);
  }
}

async function lookup(event) {
  event.preventDefault();
  const type = $("lookup-type").value.trim();
  const id = $("lookup-id").value.trim();
  const answer = await call("GET", `/objects/${encodeURIComponent(type)}/${encodeURIComponent(id)}`);
  if (!answer.ok) {
    describe($("lookup-result"), [["answer", `${answer.status}: ${typeof answer.payload === "string" ? answer.payload.trim() : JSON.stringify(answer.payload)}`]]);
    return;
  }
  const o = answer.payload;
  describe($("lookup-result"), [
    ["owner", `node ${o.owner} (incarnation ${o.owner_incarnation}${o.owner_live === false ? ", not live" : ""})`],
    ["route version", o.route_version],
    ["CAS version", o.cas_version],
    ["saved", o.save_timepoint_ms ? new Date(o.save_timepoint_ms).toISOString() : "never"],
    ["state", `${o.state_bytes} bytes`],
  ]);
}

async function transfer(event) {
  event.preventDefault();
  const type = encodeURIComponent($("transfer-type").value.trim());
  const id = encodeURIComponent($("transfer-id").value.trim());
  const to = encodeURIComponent($("transfer-to").value.trim());
  const answer = await call("POST", `/objects/${type}/${id}/transfer?to=${to}`);
  $("transfer-result").textContent = `${answer.status} ${JSON.stringify(answer.payload, null, 2)}`;
}

function table(headers, rows) {
  const t = document.createElement("table");
  const head = t.createTHead().insertRow();
  for (const h of headers) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  const body = t.createTBody();
  for (const r of rows) {
    const row = body.insertRow();
    for (const value of r) cell(row, value ?? "–");
  }
  return t;
}

async function sessions(event) {
  event.preventDefault();
  const node = $("sessions-node").value;
  const player = $("sessions-player").value.trim();
  const query = player === "" ? "" : `?player=${encodeURIComponent(player)}`;
  const answer = await call("GET", `/nodes/${node}/sessions${query}`);
  const out = $("sessions-result");
  if (!answer.ok) {
    out.textContent = `${answer.status}: ${JSON.stringify(answer.payload)}`;
    return;
  }
  const s = answer.payload;
  const counts = document.createElement("p");
  counts.textContent = `${s.total} sessions: ` + s.cores.map((c) => `core ${c.core} ${c.sessions}`).join(", ");
  out.replaceChildren(
    counts,
    table(
      ["session", "core", "player", "epoch", "in flight"],
      s.sessions.map((r) => [r.session_id, r.core, r.player_id || "(not logged in)", r.session_epoch, r.inflight]),
    ),
  );
}

async function objects(event, next = false) {
  if (event) event.preventDefault();
  if (!next) objectsAfter = null;
  const node = $("objects-node").value;
  const type = encodeURIComponent($("objects-type").value.trim());
  const after = objectsAfter == null ? "" : `&after=${objectsAfter}`;
  const answer = await call("GET", `/nodes/${node}/objects/${type}?limit=50${after}`);
  const out = $("objects-result");
  if (!answer.ok) {
    out.textContent = `${answer.status}: ${JSON.stringify(answer.payload)}`;
    return;
  }
  const o = answer.payload;
  objectsAfter = o.next_after;
  $("objects-next").disabled = o.next_after == null;
  out.replaceChildren(
    table(
      ["id", "core", "writable", "owner", "route version", "CAS version"],
      o.objects.map((r) => [r.id, r.core, r.writable ? "yes" : "cache", r.owner, r.route_version, r.cas_version]),
    ),
  );
}

async function logLevel(event) {
  if (event) {
    event.preventDefault();
    const answer = await call("PUT", "/log-level", $("log-filter").value);
    $("log-result").textContent = `${answer.status} ${JSON.stringify(answer.payload)}`;
    return;
  }
  const answer = await call("GET", "/log-level");
  if (answer.ok) $("log-filter").value = answer.payload.filter;
}

async function showConfig() {
  if (!$("config-details").open) return;
  const answer = await call("GET", "/config");
  $("config").textContent = JSON.stringify(answer.payload, null, 2);
}

function showTokenState() {
  $("token-state").textContent = token() === "" ? "no token kept" : "token kept for this tab";
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("token").value;
  if (value === "") sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  showTokenState();
});
$("lookup-form").addEventListener("submit", lookup);
$("transfer-form").addEventListener("submit", transfer);
$("sessions-form").addEventListener("submit", sessions);
$("objects-form").addEventListener("submit", (event) => objects(event));
$("objects-next").addEventListener("click", () => objects(null, true));
$("log-form").addEventListener("submit", logLevel);
$("config-details").addEventListener("toggle", showConfig);

showTokenState();
logLevel();
refresh();
setInterval(refresh, REFRESH_MS);
