//! The HTML report (`--html`): one self-contained page a person opens
//! instead of reading numbers, drawn from the JSON summary `--json` writes
//! (the same value, so the two never disagree): the latency percentiles
//! and the throughput and p99 of every second, as inline SVG, with no
//! script and nothing fetched.

use std::fmt::Write as _;

use serde_json::Value;

/// Plot size, in SVG user units.
const PLOT_WIDTH: f64 = 640.0;
const PLOT_HEIGHT: f64 = 240.0;
/// Room for the axis labels around a plot.
const MARGIN: f64 = 48.0;

/// The percentiles the latency plot shows, as (label, JSON key, nines):
/// the x axis is in "nines" (p99 = 2, p99.99 = 4), the HdrHistogram way.
const PERCENTILES: [(&str, &str, f64); 6] = [
    ("p50", "p50_us", 0.301),
    ("p90", "p90_us", 1.0),
    ("p99", "p99_us", 2.0),
    ("p99.9", "p999_us", 3.0),
    ("p99.99", "p9999_us", 4.0),
    ("max", "max_us", 5.0),
];

fn number(value: &Value, key: &str) -> f64 {
    value[key].as_f64().unwrap_or(0.0)
}

/// Text safe inside HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line plot of `points` (x, y) with its axes and labels.
fn plot(
    title: &str,
    x_label: &str,
    y_label: &str,
    points: &[(f64, f64)],
    ticks: &[(f64, String)],
) -> String {
    let mut svg = String::new();
    let (width, height) = (PLOT_WIDTH + 2.0 * MARGIN, PLOT_HEIGHT + 2.0 * MARGIN);
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"{}\">",
        escape(title)
    );
    let scale = Scale::of(points);
    let _ = write!(
        svg,
        "<rect x=\"{MARGIN}\" y=\"{MARGIN}\" width=\"{PLOT_WIDTH}\" height=\"{PLOT_HEIGHT}\" fill=\"none\" stroke=\"#999\"/>"
    );
    write_series(&mut svg, points, &scale);
    write_tick_labels(&mut svg, ticks, &scale);
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">{}</text>\
         <text x=\"12\" y=\"{:.1}\" font-size=\"12\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">{}</text></svg>",
        MARGIN + PLOT_WIDTH / 2.0,
        height - 8.0,
        escape(x_label),
        MARGIN + PLOT_HEIGHT / 2.0,
        MARGIN + PLOT_HEIGHT / 2.0,
        escape(y_label)
    );
    svg
}

/// Where a plot's points land: x from the smallest to the largest, y from
/// 0 to a tenth above the largest.
struct Scale {
    x_min: f64,
    x_span: f64,
    y_max: f64,
}

impl Scale {
    fn of(points: &[(f64, f64)]) -> Scale {
        let x_max = points.iter().map(|p| p.0).fold(f64::MIN, f64::max).max(1.0);
        let x_min = points
            .iter()
            .map(|p| p.0)
            .fold(f64::MAX, f64::min)
            .min(x_max);
        let y_max = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.1;
        let x_span = (x_max - x_min).max(f64::EPSILON);
        Scale {
            x_min,
            x_span,
            y_max,
        }
    }

    /// The point's place in the SVG's pixels.
    fn at(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (
            MARGIN + (x - self.x_min) / self.x_span * PLOT_WIDTH,
            MARGIN + PLOT_HEIGHT - y / self.y_max * PLOT_HEIGHT,
        )
    }
}

/// The line through `points` and a dot at each, titled with its value.
fn write_series(svg: &mut String, points: &[(f64, f64)], scale: &Scale) {
    let line: Vec<String> = points
        .iter()
        .map(|point| {
            let (x, y) = scale.at(*point);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let _ = write!(
        svg,
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>",
        line.join(" ")
    );
    for point in points {
        let (x, y) = scale.at(*point);
        let _ = write!(svg, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"#1f77b4\"><title>{:.1}</title></circle>", point.1);
    }
}

/// The x axis's labels at `ticks` and five y axis labels, 0 to the top.
fn write_tick_labels(svg: &mut String, ticks: &[(f64, String)], scale: &Scale) {
    for (x, label) in ticks {
        let (px, _) = scale.at((*x, 0.0));
        let _ = write!(
            svg,
            "<text x=\"{px:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            MARGIN + PLOT_HEIGHT + 16.0,
            escape(label)
        );
    }
    for step in 0..=4 {
        let y = scale.y_max * f64::from(step) / 4.0;
        let (_, py) = scale.at((scale.x_min, y));
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{py:.1}\" font-size=\"11\" text-anchor=\"end\">{y:.0}</text>",
            MARGIN - 4.0
        );
    }
}

/// The page for `summary`, the value `--json` writes.
pub fn report(summary: &Value) -> String {
    let latency = &summary["latency"];
    let percentiles: Vec<(f64, f64)> = PERCENTILES
        .iter()
        .map(|(_, key, nines)| (*nines, number(latency, key)))
        .collect();
    let ticks: Vec<(f64, String)> = PERCENTILES
        .iter()
        .map(|(label, _, nines)| (*nines, (*label).to_string()))
        .collect();
    let series = summary["series"].as_array().cloned().unwrap_or_default();
    let throughput: Vec<(f64, f64)> = series
        .iter()
        .map(|second| (number(second, "second"), number(second, "responses")))
        .collect();
    let p99: Vec<(f64, f64)> = series
        .iter()
        .map(|second| (number(second, "second"), number(second, "p99_us")))
        .collect();
    let second_ticks: Vec<(f64, String)> = throughput
        .iter()
        .map(|(second, _)| (*second, format!("{second:.0}")))
        .collect();
    let mut rows = String::new();
    for (label, key, _) in PERCENTILES {
        let _ = write!(
            rows,
            "<tr><td>{label}</td><td>{:.1}</td></tr>",
            number(latency, key)
        );
    }
    let workload = summary["config"]["workload"].as_str().unwrap_or("?");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>loadgen: {workload}</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td{{padding:0 1em;text-align:right}}</style></head><body>\
         <h1>loadgen: {workload}</h1>\
         <p>{mode} loop, {measured:.1} s measured: {tput:.0} responses/s, {sent} sent, {failed} failed.</p>\
         <h2>Latency percentiles (µs)</h2><table>{rows}</table>{latency_plot}\
         <h2>Throughput, each second</h2>{tput_plot}\
         <h2>p99 latency, each second</h2>{p99_plot}\
         </body></html>\n",
        workload = escape(workload),
        mode = escape(summary["mode"].as_str().unwrap_or("?")),
        measured = number(summary, "measured_s"),
        tput = number(summary, "throughput"),
        sent = number(summary, "sent"),
        failed = number(summary, "failed"),
        latency_plot = plot("latency percentiles", "percentile", "µs", &percentiles, &ticks),
        tput_plot = plot("throughput", "second", "responses/s", &throughput, &second_ticks),
        p99_plot = plot("p99 each second", "second", "µs", &p99, &second_ticks),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_page_draws_the_json_it_is_given() {
        let summary = json!({
            "config": {"workload": "incr"},
            "mode": "closed",
            "measured_s": 2.0,
            "throughput": 1500.0,
            "sent": 3000,
            "failed": 0,
            "latency": {"p50_us": 10.0, "p90_us": 20.0, "p99_us": 40.0, "p999_us": 80.0,
                        "p9999_us": 160.0, "max_us": 320.0},
            "series": [
                {"second": 0, "responses": 1400, "p99_us": 41.0},
                {"second": 1, "responses": 1600, "p99_us": 39.0},
            ],
        });
        let page = report(&summary);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert_eq!(page.matches("<svg").count(), 3, "three plots");
        assert!(page.contains("<td>p99.99</td><td>160.0</td>"), "{page}");
        assert!(
            page.contains("<title>1600.0</title>"),
            "a second's throughput is a point"
        );
        // Self-contained: nothing loaded from elsewhere, no script.
        assert!(!page.contains("<script") && !page.contains("src="));
        // Text from the run is escaped.
        let odd = json!({"config": {"workload": "<b>"}, "latency": {}, "series": []});
        assert!(report(&odd).contains("&lt;b&gt;"));
    }
}
