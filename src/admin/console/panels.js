// The console's history charts, node health and per-route tables: fed one
// round of figures a second by console.js, kept in the page (an hour).

import { History, lineChart } from "./charts.js";

/** The charts, in order: key, title, how a value reads. */
const CHARTS = [
  ["requests", "requests/s", (v) => v.toFixed(v < 10 ? 1 : 0)],
  ["p99", "p99 latency", (v) => ms(v)],
  ["errors", "server errors/s", (v) => v.toFixed(v < 10 ? 2 : 0)],
  ["sessions", "sessions", (v) => v.toFixed(0)],
  ["objects", "objects", (v) => v.toFixed(0)],
  ["store", "store p99", (v) => ms(v)],
  ["heartbeat", "heartbeat age (max)", (v) => ms(v)],
];

export const history = new History();

function ms(milliseconds) {
  if (!Number.isFinite(milliseconds)) return "–";
  if (milliseconds < 1) return `${(milliseconds * 1000).toFixed(0)} µs`;
  if (milliseconds < 1000) return `${milliseconds.toFixed(1)} ms`;
  return `${(milliseconds / 1000).toFixed(2)} s`;
}

const finite = (values) => values.filter(Number.isFinite);
const total = (values) => (finite(values).length ? finite(values).reduce((a, b) => a + b, 0) : NaN);
const highest = (values) => (finite(values).length ? Math.max(...finite(values)) : NaN);

/**
 * Records one round: `rows` are [{member, figures, health}] for every
 * member (figures and health null when the node did not answer).
 */
export function record(at, rows) {
  const per = [];
  for (const { member, figures, health } of rows) {
    const values = {
      requests: figures?.perSecond ?? NaN,
      p99: (figures?.p99 ?? NaN) * 1000,
      errors: figures?.errorsPerSecond ?? NaN,
      sessions: figures?.sessions ?? NaN,
      objects: figures?.objectsTotal ?? NaN,
      store: (health?.storeP99 ?? NaN) * 1000,
      heartbeat: member.heartbeat_age_ms ?? NaN,
    };
    per.push(values);
    for (const [key] of CHARTS) history.push(`node ${member.node_id}:${key}`, at, values[key]);
  }
  const column = (key) => per.map((values) => values[key]);
  const cluster = {
    requests: total(column("requests")),
    p99: highest(column("p99")),
    errors: total(column("errors")),
    sessions: total(column("sessions")),
    objects: total(column("objects")),
    store: highest(column("store")),
    heartbeat: highest(column("heartbeat")),
  };
  for (const [key] of CHARTS) history.push(`cluster:${key}`, at, cluster[key]);
}

/** Each chart's field in a sample of a node's GET /history. */
const SAMPLE_FIELDS = {
  requests: "requests_per_s",
  p99: "p99_ms",
  errors: "errors_per_s",
  sessions: "sessions",
  objects: "objects",
  store: "store_p99_ms",
  heartbeat: "heartbeat_age_ms",
};
/** The charts whose cluster line is the nodes' sum (the others: the highest). */
const SUMMED = new Set(["requests", "errors", "sessions", "objects"]);

/**
 * Puts the nodes' own histories before what the page recorded, so the
 * charts start with the last hour: `nodes` are [{nodeId, every_ms,
 * samples}] as GET /history answers. The cluster's line adds the nodes'
 * samples of one interval (their times rounded to it).
 */
export function seed(nodes) {
  const byInterval = new Map();
  for (const { nodeId, every_ms: every, samples } of nodes) {
    for (const [key, field] of Object.entries(SAMPLE_FIELDS)) {
      history.seed(`node ${nodeId}:${key}`, samples.map((s) => [s.at_ms, s[field] ?? NaN]));
    }
    for (const s of samples) {
      const at = Math.round(s.at_ms / every) * every;
      if (!byInterval.has(at)) byInterval.set(at, []);
      byInterval.get(at).push(s);
    }
  }
  // A node read later (it joined, or did not answer at first) adds to its
  // own lines only: the cluster's would show it alone for the time before.
  if (history.length("cluster:requests") > 0) return;
  const times = [...byInterval.keys()].sort((a, b) => a - b);
  for (const [key, field] of Object.entries(SAMPLE_FIELDS)) {
    const combine = SUMMED.has(key) ? total : highest;
    history.seed(`cluster:${key}`, times.map((at) => [at, combine(byInterval.get(at).map((s) => s[field] ?? NaN))]));
  }
}

/** Draws every chart of `scope` ("cluster" or "node N") over the last
 * `windowMs` into `container`. */
export function drawCharts(container, scope, windowMs, now = Date.now()) {
  const charts = CHARTS.map(([key, title, format]) => {
    const figure = document.createElement("figure");
    figure.dataset.chart = key;
    const points = history.since(`${scope}:${key}`, now - windowMs);
    figure.dataset.points = points.filter(([, v]) => v !== null).length;
    figure.dataset.since = points.length ? points[0][0] : "";
    figure.appendChild(lineChart({ title, lines: [{ label: scope, points }], now, windowMs, format }));
    return figure;
  });
  container.replaceChildren(...charts);
}

function cell(row, text, label) {
  const td = row.insertCell();
  td.textContent = text;
  td.dataset.label = label;
  return td;
}

function table(container, headers, rows) {
  const t = document.createElement("table");
  const head = t.createTHead().insertRow();
  for (const h of headers) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  const body = t.createTBody();
  for (const values of rows) {
    const row = body.insertRow();
    values.forEach((value, i) => cell(row, value ?? "–", headers[i]));
  }
  container.replaceChildren(t);
  return t;
}

function mib(bytes) {
  return Number.isFinite(bytes) && bytes > 0 ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : "–";
}

/** The node health table: CPU, memory, store, lease, heartbeat. */
export function drawHealth(container, rows) {
  table(
    container,
    ["Node", "CPU (cores)", "Memory (RSS)", "Store p99", "Store errors/s", "Lease remaining", "Heartbeat age"],
    rows.map(({ member, health, lease }) => [
      member.node_id,
      Number.isFinite(health?.cpu) ? health.cpu.toFixed(2) : "–",
      mib(health?.residentBytes),
      ms((health?.storeP99 ?? NaN) * 1000),
      Number.isFinite(health?.storeErrorsPerSecond) ? health.storeErrorsPerSecond.toFixed(2) : "–",
      lease == null ? "–" : ms(lease),
      member.heartbeat_age_ms == null ? (member.link === "self" ? "(this node)" : "–") : ms(member.heartbeat_age_ms),
    ]),
  );
}

/** The per-route table of `scope` ("cluster" sums the nodes; p99 is the
 * highest node's), grouped by the type the route name starts with. */
export function drawRoutes(container, scope, rows) {
  const merged = new Map();
  for (const { member, routes } of rows) {
    if (!routes || (scope !== "cluster" && scope !== `node ${member.node_id}`)) continue;
    for (const r of routes) {
      const m = merged.get(r.route) ?? { ...r, perSecond: 0, errors: 0, refused: 0, total: 0, p99: NaN };
      m.perSecond += Number.isFinite(r.perSecond) ? r.perSecond : 0;
      m.errors += r.errors;
      m.refused += r.refused;
      m.total += r.total;
      m.p99 = highest([m.p99, r.p99]);
      merged.set(r.route, m);
    }
  }
  const sorted = [...merged.values()].sort((a, b) => a.type.localeCompare(b.type) || b.perSecond - a.perSecond);
  const t = table(
    container,
    ["Type", "Route", "Calls/s", "p99", "Server errors (1 s)", "Refused (1 s)", "Calls (total)"],
    sorted.map((r) => [r.type, r.route, r.perSecond.toFixed(1), ms(r.p99 * 1000), r.errors, r.refused, r.total]),
  );
  t.id = "routes-table";
}
