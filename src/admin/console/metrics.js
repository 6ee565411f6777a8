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
  };
}
