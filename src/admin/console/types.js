// The per-type table: each node's GET /calls-by-type, read every round and
// taken between two readings. A type's calls are those of the routes that
// address it (the node adds them up); the cluster's row adds the nodes'
// calls and their latency buckets, so its p99 is the p99 of all the calls,
// not the highest node's.

import { quantile } from "./metrics.js";

/** What one node's answer says, kept to compute rates at the next. */
export function typeReading(payload, at) {
  const le = payload.le.map((bound) => (bound === "+Inf" ? Infinity : Number(bound)));
  const types = new Map();
  for (const t of payload.types) {
    const name = t.type ?? `${t.kind} ${t.type_id}`;
    types.set(name, { name, kind: t.kind, routes: t.routes, calls: t.calls, errors: t.errors, refused: t.refused, latency: t.latency });
  }
  return { at, le, types };
}

/** Per type between two readings of one node: calls/s, the interval's
 * server errors, refusals and latency buckets (cumulative [le, count]),
 * and the totals over the node's life. */
export function typeWindows(before, now) {
  const seconds = before ? (now.at - before.at) / 1000 : NaN;
  const rows = [];
  for (const [name, t] of now.types) {
    const earlier = before?.types.get(name);
    const life = now.le.map((le, i) => [le, t.latency[i] ?? 0]);
    rows.push({
      name,
      kind: t.kind,
      routes: t.routes,
      perSecond: earlier && seconds > 0 ? (t.calls - earlier.calls) / seconds : NaN,
      errors: earlier ? t.errors - earlier.errors : t.errors,
      refused: earlier ? t.refused - earlier.refused : t.refused,
      window: earlier ? life.map(([le, count], i) => [le, count - (earlier.latency[i] ?? 0)]) : life,
      life,
      calls: t.calls,
      errorsTotal: t.errors,
    });
  }
  return rows;
}

/** Adds the cumulative buckets `b` into `a` (the same bounds, one binary). */
function addBuckets(a, b) {
  if (!a) return b.map(([le, count]) => [le, count]);
  return a.map(([le, count], i) => [le, count + (b[i]?.[1] ?? 0)]);
}

function ms(seconds) {
  if (!Number.isFinite(seconds)) return "–";
  if (seconds < 1e-3) return `${(seconds * 1e6).toFixed(0)} µs`;
  if (seconds < 1) return `${(seconds * 1e3).toFixed(1)} ms`;
  return `${seconds.toFixed(2)} s`;
}

const HEADERS = ["Type", "Routes", "Calls/s", "p99", "Server errors (1 s)", "Refused (1 s)", "Error ratio", "Calls (total)"];

/** The per-type table of `scope` ("cluster" adds up the nodes), from
 * rows of [{member, types}] (types null when the node did not answer). */
export function drawTypes(container, scope, rows) {
  const merged = new Map();
  for (const { member, types } of rows) {
    if (!types || (scope !== "cluster" && scope !== `node ${member.node_id}`)) continue;
    for (const t of types) {
      const m = merged.get(t.name) ?? { ...t, perSecond: 0, errors: 0, refused: 0, calls: 0, errorsTotal: 0, window: null, life: null };
      m.perSecond += Number.isFinite(t.perSecond) ? t.perSecond : 0;
      m.errors += t.errors;
      m.refused += t.refused;
      m.calls += t.calls;
      m.errorsTotal += t.errorsTotal;
      m.window = addBuckets(m.window, t.window);
      m.life = addBuckets(m.life, t.life);
      merged.set(t.name, m);
    }
  }
  const t = document.createElement("table");
  t.id = "types-table";
  const head = t.createTHead().insertRow();
  for (const h of HEADERS) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  const body = t.createTBody();
  const sorted = [...merged.values()].sort((a, b) => b.calls - a.calls || a.name.localeCompare(b.name));
  for (const m of sorted) {
    const row = body.insertRow();
    row.dataset.type = m.name;
    // The interval's p99 when something was timed in it, else the life's.
    const timed = m.window?.length ? m.window[m.window.length - 1][1] : 0;
    const values = [
      m.kind === "service" ? `${m.name} (service)` : m.name,
      `${m.routes.length}`,
      m.perSecond.toFixed(1),
      ms(quantile(0.99, timed > 0 ? m.window : m.life ?? [])),
      m.errors,
      m.refused,
      m.calls > 0 ? `${((m.errorsTotal / m.calls) * 100).toFixed(2)} %` : "–",
      m.calls,
    ];
    values.forEach((value, i) => {
      const td = row.insertCell();
      td.textContent = value;
      td.dataset.label = HEADERS[i];
      if (i === 1) td.title = m.routes.join(", ");
    });
  }
  container.replaceChildren(t);
}
