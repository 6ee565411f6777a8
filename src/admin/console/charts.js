// History kept in the page, and the SVG line charts drawn from it. Hand
// written (no library): a chart is a few polylines, a grid and two labels.

/** Points kept per series: an hour at one reading a second. */
export const HISTORY_POINTS = 3600;

/** Time series by key ("cluster:requests", "node 2:p99"), each a ring of
 * [time ms, value] pairs, oldest first. */
export class History {
  constructor(points = HISTORY_POINTS) {
    this.points = points;
    this.series = new Map();
  }

  /** Adds `value` at `at` (ms); a value that is not a finite number is a
   * gap in the line. */
  push(key, at, value) {
    let ring = this.series.get(key);
    if (!ring) {
      ring = [];
      this.series.set(key, ring);
    }
    ring.push([at, Number.isFinite(value) ? value : null]);
    if (ring.length > this.points) ring.splice(0, ring.length - this.points);
  }

  /** Puts the `points` ([ms, value]) older than any `key` holds before
   * them: a node's own history (GET /history), read when the page opens. */
  seed(key, points) {
    const ring = this.series.get(key) ?? [];
    const first = ring.length ? ring[0][0] : Infinity;
    const older = points.filter(([at]) => at < first).map(([at, v]) => [at, Number.isFinite(v) ? v : null]);
    const merged = [...older, ...ring];
    if (merged.length > this.points) merged.splice(0, merged.length - this.points);
    this.series.set(key, merged);
  }

  /** The points of `key` at or after `since` (ms). */
  since(key, since) {
    const ring = this.series.get(key) ?? [];
    let first = ring.length;
    while (first > 0 && ring[first - 1][0] >= since) first -= 1;
    return ring.slice(first);
  }

  /** How many points `key` holds. */
  length(key) {
    return this.series.get(key)?.length ?? 0;
  }
}

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7d8c"];
const WIDTH = 320;
const HEIGHT = 120;
const PAD = { left: 4, right: 4, top: 18, bottom: 16 };

function element(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A "nice" ceiling for the y axis: 1, 2 or 5 times a power of ten. */
export function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

/**
 * An SVG chart of `lines` ([{label, points: [[ms, value|null]]}]) over the
 * window [now - windowMs, now]: a polyline per line (broken at gaps), the
 * y axis from 0 to a nice maximum, the title with the latest value of each
 * line, formatted by `format`.
 */
export function lineChart({ title, lines, now, windowMs, format }) {
  const svg = element("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "chart",
    role: "img",
    "aria-label": title,
  });
  const values = lines.flatMap((line) => line.points.map(([, v]) => v)).filter((v) => v !== null);
  const top = niceMax(Math.max(0, ...values));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (at) => PAD.left + plotW * (1 - (now - at) / windowMs);
  const y = (v) => PAD.top + plotH * (1 - v / top);
  for (const fraction of [0, 0.5, 1]) {
    const gy = PAD.top + plotH * fraction;
    svg.appendChild(element("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: gy, y2: gy, class: "grid" }));
  }
  svg.appendChild(element("text", { x: WIDTH - PAD.right, y: PAD.top - 4, class: "axis", "text-anchor": "end" }, format(top)));
  svg.appendChild(element("text", { x: PAD.left, y: HEIGHT - 3, class: "axis" }, `−${Math.round(windowMs / 60000)} min`));
  svg.appendChild(element("text", { x: WIDTH - PAD.right, y: HEIGHT - 3, class: "axis", "text-anchor": "end" }, "now"));
  const latest = [];
  lines.forEach((line, index) => {
    const colour = COLOURS[index % COLOURS.length];
    let run = [];
    const flush = () => {
      if (run.length > 1) {
        svg.appendChild(element("polyline", { points: run.join(" "), fill: "none", stroke: colour, "stroke-width": 1.5, class: "series" }));
      } else if (run.length === 1) {
        const [cx, cy] = run[0].split(",");
        svg.appendChild(element("circle", { cx, cy, r: 1.5, fill: colour, class: "series" }));
      }
      run = [];
    };
    for (const [at, value] of line.points) {
      if (value === null) flush();
      else run.push(`${x(at).toFixed(1)},${y(value).toFixed(1)}`);
    }
    flush();
    const last = [...line.points].reverse().find(([, v]) => v !== null);
    latest.push({ label: line.label, colour, value: last ? format(last[1]) : "–" });
  });
  const heading = element("text", { x: PAD.left, y: 12, class: "title" });
  heading.appendChild(element("tspan", {}, `${title} `));
  for (const { label, colour, value } of latest) {
    heading.appendChild(element("tspan", { fill: colour }, lines.length > 1 ? ` ${label} ${value}` : value));
  }
  svg.appendChild(heading);
  return svg;
}
