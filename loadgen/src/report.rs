//! What a run found: the verdict (which conditions fail it), the human
//! table, the JSON document and the HdrHistogram percentile file.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cli::Args;
use crate::stats::{error_slot_name, Stats};

/// Open loop: below this fraction of the offered sends, the generator (or
/// the server's backpressure) did not keep the schedule, and the latency
/// figures describe a lighter load than asked for.
pub const SENT_FRACTION_MIN: f64 = 0.95;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Percentiles {
        let us = |ns: u64| ns as f64 / 1000.0;
        Percentiles {
            count: histogram.len(),
            mean_us: histogram.mean() / 1000.0,
            p50_us: us(histogram.value_at_quantile(0.50)),
            p90_us: us(histogram.value_at_quantile(0.90)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            p999_us: us(histogram.value_at_quantile(0.999)),
            max_us: us(histogram.max()),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub config: Args,
    pub machine_cpus: usize,
    pub mode: &'static str,
    pub measured_s: f64,
    pub offered_rate: Option<f64>,
    pub sent_rate: f64,
    /// RESPONSEs per second in the measured phase: the headline.
    pub throughput: f64,
    pub sent: u64,
    pub responses: u64,
    pub errors: BTreeMap<&'static str, u64>,
    pub protocol_errors: u64,
    pub unanswered: u64,
    pub schedule_overflow: u64,
    pub connections_lost: u64,
    pub kicked: u64,
    pub latency: Percentiles,
    pub pushes: u64,
    pub pushes_expected: u64,
    pub push_latency: Option<Percentiles>,
    /// Why the run failed; empty means it passed.
    pub failures: Vec<String>,
}

impl Summary {
    pub fn new(args: &Args, stats: &Stats, setup_errors: Vec<String>) -> Summary {
        let measured_s = args.duration.as_secs_f64();
        let mut errors = BTreeMap::new();
        for (slot, count) in stats.errors_by_code.iter().enumerate() {
            if *count > 0 {
                errors.insert(error_slot_name(slot), *count);
            }
        }
        let offered_rate = args.rate.map(|r| r as f64);
        let mut failures = setup_errors;
        if failures.is_empty() {
            failures.extend(verdict(stats, offered_rate, measured_s));
        }
        Summary {
            config: args.clone(),
            machine_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mode: if args.rate.is_some() {
                "open"
            } else if args.batch {
                "closed (batched)"
            } else {
                "closed"
            },
            measured_s,
            offered_rate,
            sent_rate: stats.sent as f64 / measured_s,
            throughput: stats.responses as f64 / measured_s,
            sent: stats.sent,
            responses: stats.responses,
            errors,
            protocol_errors: stats.protocol_errors,
            unanswered: stats.unanswered,
            schedule_overflow: stats.schedule_overflow,
            connections_lost: stats.connections_lost,
            kicked: stats.kicked,
            latency: Percentiles::of(&stats.latency_ns),
            pushes: stats.pushes,
            pushes_expected: stats.pushes_expected,
            push_latency: (!stats.push_latency_ns.is_empty())
                .then(|| Percentiles::of(&stats.push_latency_ns)),
            failures,
        }
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The table people read.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let c = &self.config;
        let workload = clap::ValueEnum::to_possible_value(&c.workload)
            .map_or_else(|| format!("{:?}", c.workload), |v| v.get_name().to_string());
        let _ = writeln!(
            out,
            "loadgen: {} {} loop, {} connections x depth {}, {} thread(s), {:.1} s measured ({} CPUs on this machine)",
            workload, self.mode, c.connections, c.pipeline, c.threads, self.measured_s, self.machine_cpus
        );
        if let Some(rate) = self.offered_rate {
            let _ = writeln!(out, "  offered       {rate:>12.0} req/s");
        }
        let _ = writeln!(out, "  sent          {:>12.0} req/s", self.sent_rate);
        let _ = writeln!(out, "  throughput    {:>12.0} responses/s", self.throughput);
        let l = &self.latency;
        let _ = writeln!(
            out,
            "  latency (us)  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us
        );
        if let Some(p) = &self.push_latency {
            let _ = writeln!(
                out,
                "  pushes        {} received / {} promised; delivery (us) p50 {:.1}  p99 {:.1}  max {:.1}",
                self.pushes, self.pushes_expected, p.p50_us, p.p99_us, p.max_us
            );
        }
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            out,
            "  errors        {}",
            if errors.is_empty() {
                "none".to_string()
            } else {
                errors.join(" ")
            }
        );
        let _ = writeln!(
            out,
            "  unanswered {}  protocol errors {}  connections lost {}  kicked {}",
            self.unanswered, self.protocol_errors, self.connections_lost, self.kicked
        );
        if self.passed() {
            let _ = writeln!(out, "  result        PASS");
        } else {
            for failure in &self.failures {
                let _ = writeln!(out, "  FAIL          {failure}");
            }
        }
        out
    }
}

/// The conditions that make a run's figures untrustworthy.
pub fn verdict(stats: &Stats, offered_rate: Option<f64>, measured_s: f64) -> Vec<String> {
    let mut failures = Vec::new();
    if stats.protocol_errors > 0 {
        failures.push(format!("{} protocol errors", stats.protocol_errors));
    }
    if stats.connections_lost > 0 {
        failures.push(format!("{} connections lost", stats.connections_lost));
    }
    if stats.responses == 0 && stats.errors() == 0 && stats.pushes == 0 {
        failures.push("no answers in the measured phase".to_string());
    }
    if let Some(rate) = offered_rate {
        let offered = rate * measured_s;
        if (stats.sent as f64) < offered * SENT_FRACTION_MIN || stats.schedule_overflow > 0 {
            failures.push(format!(
                "offered rate not kept: sent {} of {:.0} scheduled ({} overflowed); \
                 the generator or the server is saturated",
                stats.sent, offered, stats.schedule_overflow
            ));
        }
    }
    failures
}

/// HdrHistogram's percentile distribution text, values in milliseconds
/// (what HdrHistogram's plotter and wrk2 print). `TotalCount` is the count
/// of samples at or below the row's value, as in HdrHistogram's
/// `outputPercentileDistribution`: cumulative, ending at the total.
pub fn hgrm(histogram: &Histogram<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut total_count = 0u64;
    for v in histogram.iter_quantiles(5) {
        total_count += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let inverse = if q < 1.0 {
            1.0 / (1.0 - q)
        } else {
            f64::INFINITY
        };
        let _ = writeln!(
            out,
            "{:>12.3} {:>14.12} {:>10} {:>14.2}",
            ms(v.value_iterated_to()),
            q,
            total_count,
            inverse
        );
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
        histogram.mean() / 1e6,
        histogram.stdev() / 1e6
    );
    let _ = writeln!(
        out,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        ms(histogram.max()),
        histogram.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn protocol_errors_and_missed_rate_fail_the_run() {
        let args = Args::parse_from(["loadgen", "--duration", "1s"]);
        let mut stats = Stats {
            sent: 100,
            responses: 100,
            ..Stats::default()
        };
        stats.record_latency(1000);
        assert!(Summary::new(&args, &stats, vec![]).passed());

        stats.protocol_errors = 1;
        let summary = Summary::new(&args, &stats, vec![]);
        assert!(!summary.passed());
        assert!(summary.table().contains("FAIL"));

        stats.protocol_errors = 0;
        let open = Args::parse_from(["loadgen", "--duration", "1s", "--rate", "1000"]);
        let summary = Summary::new(&open, &stats, vec![]);
        assert!(
            summary.failures[0].contains("offered rate not kept"),
            "{:?}",
            summary.failures
        );
        stats.sent = 990;
        assert!(Summary::new(&open, &stats, vec![]).passed());
        assert!(!Summary::new(&open, &stats, vec!["setup".into()]).passed());
    }

    #[test]
    fn json_and_hgrm_render() {
        let args = Args::parse_from(["loadgen", "--secret", "hidden"]);
        let mut stats = Stats::default();
        for v in 1..=100 {
            stats.record_latency(v * 10_000);
        }
        stats.responses = 100;
        stats.record_error(6);
        let summary = Summary::new(&args, &stats, vec![]);
        let json = serde_json::to_string(&summary).expect("serializable");
        assert!(json.contains("\"OVERLOADED\":1"));
        assert!(json.contains("\"connections\":16"));
        assert!(!json.contains("hidden"), "the secret must not be written");
        let text = hgrm(&stats.latency_ns);
        assert!(text.contains("Percentile"));
        assert!(text.contains("Total count    =          100"));
        assert!(summary.latency.p50_us > 490.0 && summary.latency.p50_us < 510.0);
    }

    /// Rows of an hgrm text: (value in ns, percentile, total count).
    fn parse_hgrm(text: &str) -> Vec<(u64, f64, u64)> {
        text.lines()
            .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
            .skip(1) // the column names
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(fields.len(), 4, "row {line:?}");
                let value_ms: f64 = fields[0].parse().expect("value");
                let percentile: f64 = fields[1].parse().expect("percentile");
                let total: u64 = fields[2].parse().expect("total count");
                ((value_ms * 1e6).round() as u64, percentile, total)
            })
            .collect()
    }

    /// Reads an hgrm file back into a histogram (each row's new samples at
    /// its value) and compares it with the one it was written from: with a
    /// per-row TotalCount, the rebuilt histogram has the wrong count and
    /// the wrong shape.
    #[test]
    fn hgrm_total_count_is_cumulative_and_reads_back() {
        let mut original = Stats::default();
        // 1..=1000 us once each, and a tail of ten 50 ms samples.
        for us in 1..=1000u64 {
            original.record_latency(us * 1000);
        }
        for _ in 0..10 {
            original.record_latency(50_000_000);
        }
        let original = original.latency_ns;
        let rows = parse_hgrm(&hgrm(&original));
        assert!(rows.len() > 20, "{} rows", rows.len());
        for pair in rows.windows(2) {
            assert!(pair[0].2 <= pair[1].2, "TotalCount went down: {pair:?}");
        }
        assert_eq!(rows.last().map(|r| r.2), Some(original.len()));

        let mut rebuilt =
            Histogram::<u64>::new_with_bounds(1, crate::stats::LATENCY_MAX_NS, 3).expect("bounds");
        let mut previous = 0u64;
        for &(value_ns, _, total) in &rows {
            let new_samples = total.checked_sub(previous).expect("cumulative column");
            rebuilt
                .record_n(value_ns.max(1), new_samples)
                .expect("in range");
            previous = total;
        }
        assert_eq!(rebuilt.len(), original.len());
        assert!(rebuilt.max().abs_diff(original.max()) <= 50_000, "max");
        // Rows are spaced at quantile ticks and the rebuilt histogram holds
        // each sample at its row's value, so compare at ticks.
        for q in [0.5, 0.75, 0.9] {
            let want = original.value_at_quantile(q) as f64;
            let got = rebuilt.value_at_quantile(q) as f64;
            assert!((got - want).abs() <= want * 0.03, "q {q}: {got} vs {want}");
        }
        for &(value_ns, percentile, total) in &rows {
            // TotalCount is the number of samples at or below the value
            // (printed to 1 us, so within a microsecond of it).
            let low = original.count_between(0, value_ns.saturating_sub(1_000));
            let high = original.count_between(0, value_ns + 1_000);
            assert!(
                (low..=high).contains(&total),
                "{total} not in {low}..={high}"
            );
            let fraction = total as f64 / original.len() as f64;
            assert!(
                fraction + 1e-9 >= percentile,
                "{total} below percentile {percentile}"
            );
        }
    }
}
