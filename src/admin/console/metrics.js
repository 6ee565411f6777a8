// The Prometheus text format as routerd writes it, read into samples, and
// what the console computes from two scrapes of one node.

/** Parses exposition text into [{name, labels, value}]. */
export function parse(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const brace = line.indexOf("{");
    const space = line.lastIndexOf(" ");
    let name;
    const labels = {};
    if (brace >= 0 && brace < space) {
      name = line.slice(0, brace);
      const inner = line.slice(brace + 1, line.lastIndexOf("}"));
      for (const match of inner.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[match[1]] = match[2];
      }
    } else {
      name = line.slice(0, space);
    }
    samples.push({ name, labels, value: Number(line.slice(space + 1)) });
  }
  return samples;
}

/** The sum of the samples named `name` whose labels pass `keep`. */
export function sum(samples, name, keep = () => true) {
  let total = 0;
  for (const sample of samples) {
    if (sample.name === name && keep(sample.labels)) total += sample.value;
  }
  return total;
}

/** Cumulative bucket counts by `le`, summed over every series of `name`. */
export function buckets(samples, name) {
  const byLe = new Map();
  for (const sample of samples) {
    if (sample.name !== `${name}_bucket`) continue;
    const le = sample.labels.le;
    byLe.set(le, (byLe.get(le) ?? 0) + sample.value);
  }
  return [...byLe.entries()]
    .map(([le, count]) => [le === "+Inf" ? Infinity : Number(le), count])
    .sort((a, b) => a[0] - b[0]);
}

/** Prometheus's histogram_quantile over cumulative [le, count] pairs. */
export function quantile(q, pairs) {
  if (pairs.length === 0) return NaN;
  const total = pairs[pairs.length - 1][1];
  if (!(total > 0)) return NaN;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const [le, count] of pairs) {
    if (count >= rank) {
      if (le === Infinity) return lowerBound;
      const inBucket = count - lowerCount;
      return inBucket > 0 ? lowerBound + (le - lowerBound) * ((rank - lowerCount) / inBucket) : le;
    }
    lowerBound = le;
    lowerCount = count;
  }
  return lowerBound;
}

/** The codes that count as the server's failures in the error ratio. */
export const SERVER_ERRORS = new Set(["UNAVAILABLE", "TIMEOUT", "INTERNAL", "OVERLOADED"]);

const REQUESTS = "routerd_gateway_requests_total";
const LATENCY = "routerd_gateway_request_duration_seconds";

/** Cumulative bucket counts by `le` of the series of `name` whose labels
 * pass `keep`. */
function bucketsWhere(samples, name, keep) {
  return buckets(samples.filter((sample) => sample.name !== `${name}_bucket` || keep(sample.labels)), name);
}

/** Per route: requests, server errors, refusals (every other non-OK code)
 * and latency buckets. */
function byRoute(samples) {
  const routes = new Map();
  const of = (route) => {
    if (!routes.has(route)) routes.set(route, { requests: 0, errors: 0, refused: 0, latency: [] });
    return routes.get(route);
  };
  for (const sample of samples) {
    if (sample.name !== REQUESTS) continue;
    const route = of(sample.labels.route);
    route.requests += sample.value;
    if (SERVER_ERRORS.has(sample.labels.code)) route.errors += sample.value;
    else if (sample.labels.code !== "OK") route.refused += sample.value;
  }
  for (const [name, route] of routes) {
    route.latency = bucketsWhere(samples, LATENCY, (labels) => labels.route === name);
  }
  return routes;
}

/** What one scrape says of a node, kept to compute rates at the next. */
export function reading(samples, at) {
  return {
    at,
    requests: sum(samples, REQUESTS),
    errors: sum(samples, REQUESTS, (labels) => SERVER_ERRORS.has(labels.code)),
    latency: buckets(samples, LATENCY),
    objects: samples
      .filter((sample) => sample.name === "routerd_router_objects_by_type")
      .map((sample) => [sample.labels.type, sample.value]),
    objectsTotal: sum(samples, "routerd_router_objects"),
    sessions: sum(samples, "routerd_gateway_sessions_active"),
    cpuSeconds: sum(samples, "process_cpu_seconds_total"),
    residentBytes: sum(samples, "process_resident_memory_bytes"),
    storeLatency: buckets(samples, "routerd_store_operation_duration_seconds"),
    storeErrors: sum(samples, "routerd_store_errors_total"),
    routes: byRoute(samples),
  };
}

/** The buckets of `now` minus those of `before` (same bounds). */
function delta(now, before) {
  return now.map(([le, count], i) => [le, count - (before?.[i]?.[1] ?? 0)]);
}

/** Per route between two readings: calls/s, p99 (s), errors/s and
 * refusals/s; over the node's life when there is no earlier reading. */
export function routeRates(before, now) {
  const seconds = before ? (now.at - before.at) / 1000 : NaN;
  const rows = [];
  for (const [name, route] of now.routes) {
    const earlier = before?.routes.get(name);
    const asked = earlier ? route.requests - earlier.requests : route.requests;
    rows.push({
      route: name,
      type: name.includes(".") ? name.slice(0, name.indexOf(".")) : name,
      perSecond: earlier && seconds > 0 ? asked / seconds : NaN,
      p99: quantile(0.99, earlier && asked > 0 ? delta(route.latency, earlier.latency) : route.latency),
      errors: earlier ? route.errors - earlier.errors : route.errors,
      refused: earlier ? route.refused - earlier.refused : route.refused,
      total: route.requests,
    });
  }
  return rows;
}

/** Node health between two readings: CPU (cores busy), resident memory,
 * store p99 (s) and store errors/s. */
export function health(before, now) {
  const seconds = before ? (now.at - before.at) / 1000 : NaN;
  const storeWindow = before && delta(now.storeLatency, before.storeLatency);
  const storeAsked = storeWindow?.length ? storeWindow[storeWindow.length - 1][1] : 0;
  return {
    cpu: seconds > 0 ? (now.cpuSeconds - before.cpuSeconds) / seconds : NaN,
    residentBytes: now.residentBytes,
    storeP99: quantile(0.99, storeAsked > 0 ? storeWindow : now.storeLatency),
    storeErrorsPerSecond: seconds > 0 ? (now.storeErrors - before.storeErrors) / seconds : NaN,
  };
}

/** Requests/s, p99 (seconds) and error ratio between two readings; the
 * p99 and ratio over the whole life of the node when nothing was asked in
 * between (or there is no earlier reading). */
export function rates(before, now) {
  const seconds = before ? (now.at - before.at) / 1000 : 0;
  const asked = before ? now.requests - before.requests : 0;
  const window = before && asked > 0;
  const perSecond = seconds > 0 && asked >= 0 ? asked / seconds : NaN;
  const latency = window
    ? now.latency.map(([le, count], i) => [le, count - (before.latency[i]?.[1] ?? 0)])
    : now.latency;
  const requests = window ? asked : now.requests;
  const errors = window ? now.errors - before.errors : now.errors;
  return {
    perSecond,
    p99: quantile(0.99, latency),
    errorRatio: requests > 0 ? errors / requests : NaN,
    errorsPerSecond: seconds > 0 && window ? errors / seconds : seconds > 0 ? 0 : NaN,
  };
}
