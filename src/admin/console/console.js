// The routerd console: reads the admin API of the node serving it, which
// forwards to the other members (/nodes/{id}/...). No framework, no build.

import { parse, reading, rates, routeRates, health } from "./metrics.js";
import { record, seed, drawCharts, drawHealth, drawRoutes } from "./panels.js";
import { sessionsPanel } from "./sessions.js";
import { roomsPanel, drawHot } from "./rooms.js";
import { typeReading, typeWindows, drawTypes } from "./types.js";

const REFRESH_MS = 1000;
/** The hottest objects are read every this many refreshes. */
const HOT_EVERY_ROUNDS = 5;
const TOKEN_KEY = "routerd.admin.token";
const $ = (id) => document.getElementById(id);

/** The previous reading of each node's metrics, by node id. */
const readings = new Map();
/** The previous reading of each node's calls by type, by node id. */
const typeReadings = new Map();
let members = [];
let self = null;
let objectsAfter = null;
let rounds = 0;
/** The nodes whose own history (GET /history) the charts hold. */
const seeded = new Set();
/** The last round of figures, for the panels redrawn between rounds. */
let lastRound = [];

function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

/** A call to the admin API; mutating calls carry the admin token. */
async function call(method, path, body) {
  const headers = {};
  if (method !== "GET" && token() !== "") headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { method, headers, body, cache: "no-store" });
  const type = response.headers.get("content-type") ?? "";
  const payload = type.includes("json") ? exactJson(await response.text()) : await response.text();
  return { status: response.status, ok: response.ok, payload };
}

/** JSON with every integer of 16 digits or more kept as a string: session
 * ids (the core and incarnation in their high bits) are past 2^53, where a
 * JavaScript number would round them, and a kick or a page cursor made
 * from a rounded id names another session. */
function exactJson(text) {
  return JSON.parse(text.replace(/([:,[]\s*)(\d{16,})(?=\s*[,\]}])/g, '$1"$2"'));
}

function cell(row, text, className, label) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  // The column's name, shown beside the value when a narrow screen stacks
  // the cells (console.css).
  if (label) td.dataset.label = label;
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

/** One node's round: its rates, health and routes from its /metrics, its
 * calls by type, and its lease from its /cluster (this node's from `own`). */
async function nodeFigures(member, own) {
  const empty = { member, figures: null, health: null, routes: null, types: null, lease: null };
  if (member.state === "left" || member.state === "down") return empty;
  try {
    const [answer, view, byType] = await Promise.all([
      call("GET", `/nodes/${member.node_id}/metrics`),
      member.link === "self" ? Promise.resolve({ ok: true, payload: own }) : call("GET", `/nodes/${member.node_id}/cluster`),
      call("GET", `/nodes/${member.node_id}/calls-by-type`).catch(() => ({ ok: false })),
    ]);
    if (!answer.ok) return empty;
    const now = reading(parse(answer.payload), Date.now());
    const before = readings.get(member.node_id);
    readings.set(member.node_id, now);
    let types = null;
    if (byType.ok) {
      const typesNow = typeReading(byType.payload, Date.now());
      types = typeWindows(typeReadings.get(member.node_id), typesNow);
      typeReadings.set(member.node_id, typesNow);
    }
    return {
      member,
      figures: { ...rates(before, now), objects: now.objects, objectsTotal: now.objectsTotal, sessions: now.sessions },
      health: health(before, now),
      routes: routeRates(before, now),
      types,
      lease: view.ok ? view.payload.lease_remaining_ms : null,
    };
  } catch {
    return empty;
  }
}

function renderMembers(figures) {
  const body = $("members").tBodies[0];
  const labels = [...$("members").tHead.rows[0].cells].map((th) => th.textContent);
  body.replaceChildren();
  members.forEach((member, index) => {
    const row = document.createElement("tr");
    row.dataset.node = member.node_id;
    row.dataset.state = member.state;
    const column = (text, className) => cell(row, text, className, labels[row.cells.length]);
    column(member.node_id + (member.link === "self" ? " (this node)" : ""));
    column(member.state, `state state-${member.state}`);
    column(member.incarnation);
    column(member.link, `link link-${member.link}`);
    column(member.heartbeat_age_ms == null ? "–" : `${member.heartbeat_age_ms} ms`);
    const f = figures[index];
    column(f && Number.isFinite(f.perSecond) ? f.perSecond.toFixed(1) : "–");
    column(f ? duration(f.p99) : "–");
    column(f ? percent(f.errorRatio) : "–");
    column(f ? f.objects.map(([type, n]) => `${type} ${n}`).join(", ") : "–");
    const actions = column("");
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
  const live = members.filter((member) => member.state !== "left" && member.state !== "down");
  const fill = (id, options) => {
    const select = $(id);
    const chosen = select.value;
    select.replaceChildren(...options);
    if ([...select.options].some((option) => option.value === chosen)) select.value = chosen;
  };
  for (const id of ["sessions-node", "objects-node", "rooms-node"]) {
    fill(id, live.map((member) => new Option(member.node_id, member.node_id)));
  }
  // The panels also show nodes that left or are down: their history stays.
  const scopes = () => [new Option("whole cluster", "cluster"), ...members.map((m) => new Option(`node ${m.node_id}`, `node ${m.node_id}`))];
  fill("chart-scope", scopes());
  fill("routes-scope", scopes());
  fill("hot-scope", scopes());
}

/** Redraws the panels from the history and the last round. */
function drawPanels() {
  drawCharts($("charts"), $("chart-scope").value || "cluster", Number($("chart-window").value) * 60_000);
  drawHealth($("health"), lastRound);
  drawRoutes($("routes"), $("routes-scope").value || "cluster", lastRound);
  drawTypes($("types"), $("routes-scope").value || "cluster", lastRound);
}

async function refresh() {
  try {
    const cluster = await call("GET", "/cluster");
    if (!cluster.ok) throw new Error(`/cluster answered ${cluster.status}`);
    self = cluster.payload.node_id;
    $("served-by").textContent = `node ${self}, incarnation ${cluster.payload.incarnation}`;
    members = cluster.payload.members;
    await seedHistories();
    const round = await Promise.all(members.map((member) => nodeFigures(member, cluster.payload)));
    renderMembers(round.map((r) => r.figures));
    fillNodeSelects();
    lastRound = round;
    record(Date.now(), round);
    drawPanels();
    if (rounds++ % HOT_EVERY_ROUNDS === 0) drawHot(api, members);
    const up = members.filter((member) => member.state === "up").length;
    $("status").textContent = `${members.length} members, ${up} up; updated ${new Date().toLocaleTimeString()}`;
    $("status").className = "";
  } catch (error) {
    $("status").textContent = `This node does not answer: ${error.message}`;
    $("status").className = "error";
  }
}

/** Reads the history of each live member not read yet: the charts then
 * show the last hour at once, reload or not. A node that does not answer
 * is tried again at the next refresh. */
async function seedHistories() {
  const unread = members.filter((m) => !seeded.has(m.node_id) && m.state !== "left" && m.state !== "down");
  const read = await Promise.all(
    unread.map(async (member) => {
      const answer = await call("GET", `/nodes/${member.node_id}/history`).catch(() => ({ ok: false }));
      if (!answer.ok) return null;
      seeded.add(member.node_id);
      return { nodeId: member.node_id, ...answer.payload };
    }),
  );
  seed(read.filter((history) => history !== null));
}

async function startDrain(nodeId) {
  if (!confirm(`Drain node ${nodeId}? Its objects move to the others, its clients are told to reconnect elsewhere, then it leaves and exits.`)) return;
  const answer = await call("POST", `/nodes/${nodeId}/drain`);
  // Its own line, which the refresh leaves alone: the result stays until
  // the next action.
  say(
    answer.ok
      ? `Node ${nodeId} drains (started ${new Date().toLocaleTimeString()}).`
      : `Drain of node ${nodeId} refused (${answer.status}): ${JSON.stringify(answer.payload)}`,
    !answer.ok,
  );
  refresh();
}

/** The result of the operator's last action, kept until the next one. */
function say(text, failed = false) {
  $("action-result").textContent = text;
  $("action-result").className = failed ? "error" : "";
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

/** A player's sessions on every node, in the sessions panel. */
function findPlayer(playerId) {
  $("sessions-player").value = playerId;
  $("sessions-everywhere").checked = true;
  $("sessions-form").requestSubmit();
}

/** Looks up one object in the lookup panel. */
function lookUp(type, id) {
  $("lookup-type").value = type;
  $("lookup-id").value = id;
  $("lookup-form").requestSubmit();
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
    ...stateEntries(o.state),
  ]);
  $("lookup-members").replaceChildren();
  if (o.state?.members) {
    $("lookup-members").appendChild(
      table(
        ["member", "online", "session (node/id)"],
        o.state.members.map((m) => [m.player_id, m.online ? "yes" : "no", m.session ? `${m.session.gateway_node}/${m.session.session_id}` : "–"]),
      ),
    );
  }
}

/** The saved state as the viewer shows it: a built-in's fields, another
 * type's bytes in hex. */
function stateEntries(state) {
  if (!state) return [];
  if (!state.saved) return [["as saved", "nothing saved yet"]];
  const session = (s) => (s ? `node ${s.gateway_node}, session ${s.session_id} (epoch ${s.session_epoch})` : "none");
  if ("counter" in state) {
    return [
      ["counter", state.counter],
      ["session", session(state.session)],
      ["rooms", state.rooms.length ? state.rooms.join(", ") : "none"],
    ];
  }
  if ("members" in state) return [["members", `${state.members.length}, ${state.members.filter((m) => m.online).length} online`]];
  // A user type's own view (Object::debug_view), JSON or words.
  const debug = "debug" in state ? [["debug view", typeof state.debug === "string" ? state.debug : JSON.stringify(state.debug, null, 1)]] : [];
  return [...debug, ["bytes (hex)", state.hex + (state.hex_cut ? "…" : "")]];
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

/** A room.message to every logged-in member of a room, from player 0. */
async function messageRoom(event) {
  event.preventDefault();
  const room = $("message-room").value.trim();
  const answer = await call("POST", `/rooms/${encodeURIComponent(room)}/message`, $("message-text").value);
  say(
    answer.ok
      ? `Message sent to room ${room}'s logged-in members.`
      : `Message to room ${room} refused (${answer.status}): ${JSON.stringify(answer.payload)}`,
    !answer.ok,
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
const api = { call, table, say, $, findPlayer, lookUp };
sessionsPanel(api);
roomsPanel(api);
$("hot-scope").addEventListener("change", () => drawHot(api, members));
$("message-form").addEventListener("submit", messageRoom);
for (const id of ["chart-scope", "chart-window", "routes-scope"]) $(id).addEventListener("change", drawPanels);
$("objects-form").addEventListener("submit", (event) => objects(event));
$("objects-next").addEventListener("click", () => objects(null, true));
$("log-form").addEventListener("submit", logLevel);
$("config-details").addEventListener("toggle", showConfig);

showTokenState();
logLevel();
refresh();
setInterval(refresh, REFRESH_MS);
