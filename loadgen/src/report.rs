//! What a run found: the verdict (which conditions fail it), the human
//! table and the JSON document, each with the figures of every kind of
//! request and, in the JSON, one line per second. The `.hgrm` files are
//! `hgrm.rs`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::{Counter, Histogram};
use serde::Serialize;

use crate::cli::Args;
use crate::stats::{failure_slot_name, Failure, OpStats, Stats, FAILURE_SLOTS};
use crate::workload::Op;

/// Open loop: below this fraction of the offered sends, the generator (or
/// the server's backpressure) did not keep the schedule, and the latency
/// figures describe a lighter load than asked for.
pub const SENT_FRACTION_MIN: f64 = 0.95;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub mean_us: f64,
    /// Standard deviation (wrk's `Stdev`).
    pub stdev_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    pub fn of<T: Counter>(histogram: &Histogram<T>) -> Percentiles {
        let us = |ns: u64| ns as f64 / 1000.0;
        Percentiles {
            count: histogram.len(),
            mean_us: histogram.mean() / 1000.0,
            stdev_us: histogram.stdev() / 1000.0,
            p50_us: us(histogram.value_at_quantile(0.50)),
            p90_us: us(histogram.value_at_quantile(0.90)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            p999_us: us(histogram.value_at_quantile(0.999)),
            p9999_us: us(histogram.value_at_quantile(0.9999)),
            max_us: us(histogram.max()),
        }
    }
}

/// The figures of one kind of request.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OpSummary {
    pub sent: u64,
    pub responses: u64,
    pub throughput: f64,
    /// Failed requests by reason: ERROR codes, `RESP_ERROR`,
    /// `CONNECTION_LOST`.
    pub failed: BTreeMap<&'static str, u64>,
    pub latency: Percentiles,
}

/// One second of the measured phase, by intended send time.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SecondSummary {
    pub second: usize,
    pub sent: u64,
    pub responses: u64,
    pub failed: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub config: Args,
    pub machine_cpus: usize,
    pub mode: &'static str,
    pub measured_s: f64,
    pub offered_rate: Option<f64>,
    pub sent_rate: f64,
    /// Successful answers per second in the measured phase: the headline
    /// (wrk2's `Requests/sec`).
    pub throughput: f64,
    /// Bytes received and sent in the measured phase, and per second.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub bytes_in_per_s: f64,
    pub bytes_out_per_s: f64,
    pub sent: u64,
    pub responses: u64,
    /// Error answers (ERROR frames, Redis error replies) by code.
    pub errors: BTreeMap<&'static str, u64>,
    /// Requests lost with a connection that closed before their answer.
    pub lost: u64,
    /// Every request that failed: `errors` plus `lost`.
    pub failed: u64,
    pub protocol_errors: u64,
    pub unanswered: u64,
    pub schedule_overflow: u64,
    pub connections_lost: u64,
    pub kicked: u64,
    pub redirects: u64,
    pub reconnects: u64,
    pub connect_failures: u64,
    pub player_switches: u64,
    pub login_retries: u64,
    /// The longest one connection waited between two successful answers
    /// in the measured phase, reconnects and redirects included.
    pub longest_answer_gap_ms: f64,
    /// `--keys`: what the keyed increments came to, retries included (the
    /// whole run, not only the measured phase); absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<crate::keys::KeyLedger>,
    /// `--resume`: cuts, resumes, refusals by reason, fresh logins, and
    /// the check of every push's number (the whole run); absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume: Option<crate::resume::ResumeLedger>,
    pub latency: Percentiles,
    pub pushes: u64,
    pub pushes_expected: u64,
    pub push_latency: Option<Percentiles>,
    /// PUSHes on a custom workload type's own routes (not timed).
    pub other_pushes: u64,
    /// Per kind of request sent (`ping`, `get`, `incr`, `say`, or a
    /// custom request's name).
    pub ops: BTreeMap<String, OpSummary>,
    pub series: Vec<SecondSummary>,
    /// Connections that could not go on, in words.
    pub warnings: Vec<String>,
    /// Why the run failed; empty means it passed.
    pub failures: Vec<String>,
}

fn by_name(
    failed: &[u64; FAILURE_SLOTS],
    keep: impl Fn(usize) -> bool,
) -> BTreeMap<&'static str, u64> {
    failed
        .iter()
        .enumerate()
        .filter(|&(slot, count)| *count > 0 && keep(slot))
        .map(|(slot, count)| (failure_slot_name(slot), *count))
        .collect()
}

/// `bytes` in wrk's units: `512.00B`, `1.50KB`, `12.25MB`, `1.02GB`
/// (powers of 1024).
pub(crate) fn bytes(bytes: f64) -> String {
    let mut value = bytes;
    for unit in ["B", "KB", "MB", "GB"] {
        if value < 1024.0 || unit == "GB" {
            return format!("{value:.2}{unit}");
        }
        value /= 1024.0;
    }
    unreachable!("GB ends the loop")
}

/// The command-line spelling of a value.
fn value_name<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

fn op_summary(stats: &OpStats, measured_s: f64) -> OpSummary {
    OpSummary {
        sent: stats.sent,
        responses: stats.responses,
        throughput: stats.responses as f64 / measured_s,
        failed: by_name(&stats.failed, |_| true),
        latency: Percentiles::of(&stats.latency_ns),
    }
}

impl Summary {
    pub fn new(
        args: &Args,
        stats: &Stats,
        setup_errors: Vec<String>,
        warnings: Vec<String>,
    ) -> Summary {
        let measured_s = args.duration.as_secs_f64();
        let failed = stats.failed();
        let lost_slot = Failure::Lost.slot();
        let offered_rate = args.rate.map(|r| r as f64);
        let mut failures = setup_errors;
        if failures.is_empty() {
            failures.extend(verdict(stats, offered_rate, measured_s));
        }
        let ops = Op::ALL
            .iter()
            .map(|op| (args.op_name(*op), &stats.ops[op.index()]))
            .filter(|(_, o)| o.sent > 0 || o.responses > 0 || o.failures() > 0)
            .map(|(name, o)| (name, op_summary(o, measured_s)))
            .collect();
        let series = second_summaries(stats);
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
            sent_rate: stats.sent() as f64 / measured_s,
            throughput: stats.responses() as f64 / measured_s,
            bytes_in: stats.bytes_in,
            bytes_out: stats.bytes_out,
            bytes_in_per_s: stats.bytes_in as f64 / measured_s,
            bytes_out_per_s: stats.bytes_out as f64 / measured_s,
            sent: stats.sent(),
            responses: stats.responses(),
            errors: by_name(&failed, |slot| slot != lost_slot),
            lost: failed[lost_slot],
            failed: failed.iter().sum(),
            protocol_errors: stats.protocol_errors,
            unanswered: stats.unanswered,
            schedule_overflow: stats.schedule_overflow,
            connections_lost: stats.connections_lost,
            kicked: stats.kicked,
            redirects: stats.redirects,
            reconnects: stats.reconnects,
            connect_failures: stats.connect_failures,
            player_switches: stats.player_switches,
            login_retries: stats.login_retries,
            longest_answer_gap_ms: stats.longest_answer_gap_ns as f64 / 1e6,
            keys: args.keys.then(|| stats.key_ledger()),
            resume: args.resume.then_some(stats.resume),
            latency: Percentiles::of(&stats.latency_ns()),
            pushes: stats.pushes,
            pushes_expected: stats.pushes_expected,
            push_latency: (!stats.push_latency_ns.is_empty())
                .then(|| Percentiles::of(&stats.push_latency_ns)),
            other_pushes: stats.other_pushes,
            ops,
            series,
            warnings,
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
        let workload = value_name(&c.workload);
        let proto = value_name(&c.proto);
        let _ = writeln!(
            out,
            "loadgen: {workload} ({proto}) {} loop, {} connections x depth {}, {} player(s), {} thread(s), {:.1} s measured ({} CPUs on this machine)",
            self.mode,
            c.connections,
            c.pipeline,
            c.player_count(),
            c.threads,
            self.measured_s,
            self.machine_cpus
        );
        if let Some(rate) = self.offered_rate {
            let _ = writeln!(out, "  offered       {rate:>12.0} req/s");
        }
        let _ = writeln!(out, "  sent          {:>12.0} req/s", self.sent_rate);
        let _ = writeln!(out, "  throughput    {:>12.0} responses/s", self.throughput);
        let l = &self.latency;
        let _ = writeln!(
            out,
            "  latency (us)  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  p99.99 {:.1}  max {:.1}  mean {:.1}  stdev {:.1}",
            l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.p9999_us, l.max_us, l.mean_us, l.stdev_us
        );
        let _ = writeln!(
            out,
            "  transfer      in {}/s  out {}/s",
            bytes(self.bytes_in_per_s),
            bytes(self.bytes_out_per_s)
        );
        if self.ops.len() > 1 {
            self.op_rows(&mut out);
        }
        self.push_rows(&mut out);
        self.failure_rows(&mut out);
        self.move_rows(&mut out);
        if let Some(keys) = &self.keys {
            out += &keys.row();
        }
        if let Some(resume) = &self.resume {
            out += &resume.row();
        }
        self.verdict_rows(&mut out);
        out
    }

    /// The pushes received, and how fast they were delivered.
    fn push_rows(&self, out: &mut String) {
        if let Some(p) = &self.push_latency {
            let _ = writeln!(
                out,
                "  pushes        {} received / {} promised; delivery (us) p50 {:.1}  p99 {:.1}  max {:.1}",
                self.pushes, self.pushes_expected, p.p50_us, p.p99_us, p.max_us
            );
        }
        if self.other_pushes > 0 {
            let _ = writeln!(
                out,
                "  pushes        {} on the type's own routes",
                self.other_pushes
            );
        }
    }

    /// The requests that failed, by code, and what went unanswered.
    fn failure_rows(&self, out: &mut String) {
        let mut failed: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if self.lost > 0 {
            failed.push(format!("CONNECTION_LOST={}", self.lost));
        }
        let _ = writeln!(
            out,
            "  failed        {}",
            if failed.is_empty() {
                "none".to_string()
            } else {
                format!("{}: {}", self.failed, failed.join(" "))
            }
        );
        let _ = writeln!(
            out,
            "  unanswered {}  protocol errors {}  connections lost {}  kicked {}",
            self.unanswered, self.protocol_errors, self.connections_lost, self.kicked
        );
    }

    /// Redirects, reconnects and switches, when the run moved sessions.
    fn move_rows(&self, out: &mut String) {
        let c = &self.config;
        if c.reconnect || self.redirects + self.reconnects + self.player_switches > 0 {
            let _ = writeln!(
                out,
                "  moves         redirects {}  reconnects {}  connect failures {}  player switches {}  login retries {}",
                self.redirects,
                self.reconnects,
                self.connect_failures,
                self.player_switches,
                self.login_retries
            );
            let _ = writeln!(
                out,
                "  longest gap   {:.1} ms between two answers on one connection",
                self.longest_answer_gap_ms
            );
        }
    }

    /// The warnings, then PASS or each failure.
    fn verdict_rows(&self, out: &mut String) {
        for warning in &self.warnings {
            let _ = writeln!(out, "  warning       {warning}");
        }
        // The lines wrk and wrk2 end with, for the scripts that read them.
        let _ = writeln!(
            out,
            "  {} requests in {:.2}s, {} read, {} written",
            self.responses,
            self.measured_s,
            bytes(self.bytes_in as f64),
            bytes(self.bytes_out as f64)
        );
        let _ = writeln!(out, "Requests/sec: {:>12.2}", self.throughput);
        let _ = writeln!(out, "Transfer/sec: {:>12}", bytes(self.bytes_in_per_s));
        if self.passed() {
            let _ = writeln!(out, "  result        PASS");
        } else {
            for failure in &self.failures {
                let _ = writeln!(out, "  FAIL          {failure}");
            }
        }
    }

    fn op_rows(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  per op        {:>12} {:>12} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "answers/s", "sent", "failed", "p50 us", "p99 us", "p99.9 us", "max us"
        );
        for (name, op) in &self.ops {
            let failed: u64 = op.failed.values().sum();
            let l = &op.latency;
            let _ = writeln!(
                out,
                "    {name:<11} {:>12.0} {:>12} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                op.throughput, op.sent, failed, l.p50_us, l.p99_us, l.p999_us, l.max_us
            );
        }
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
    if let Some(duplicates) = stats.keyed_duplicates().filter(|&n| n > 0) {
        failures.push(format!(
            "{duplicates} counter values acknowledged to two keys of one player (--keys promises once)"
        ));
    }
    failures.extend(stats.resume.violation());
    if stats.responses() == 0 && stats.failures() == 0 && stats.pushes == 0 {
        failures.push("no answers in the measured phase".to_string());
    }
    if let Some(rate) = offered_rate {
        let offered = rate * measured_s;
        let sent = stats.sent();
        if (sent as f64) < offered * SENT_FRACTION_MIN || stats.schedule_overflow > 0 {
            failures.push(format!(
                "offered rate not kept: sent {} of {:.0} scheduled ({} overflowed); \
                 the generator or the server is saturated",
                sent, offered, stats.schedule_overflow
            ));
        }
    }
    failures
}

/// Each measured second's counts and latency, for the plot.
fn second_summaries(stats: &Stats) -> Vec<SecondSummary> {
    stats
        .series()
        .iter()
        .enumerate()
        .map(|(second, s)| {
            let latency = Percentiles::of(&s.latency_ns);
            SecondSummary {
                second,
                sent: s.sent,
                responses: s.responses,
                failed: s.failed,
                p50_us: latency.p50_us,
                p99_us: latency.p99_us,
                max_us: latency.max_us,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Failure;
    use clap::Parser;

    fn answered(stats: &mut Stats, op: Op, count: u64, latency_ns: u64) {
        for _ in 0..count {
            stats.record_sent(op, 0);
            stats.record_response(op, 0, latency_ns);
        }
    }

    #[test]
    fn protocol_errors_and_missed_rate_fail_the_run() {
        let args = Args::parse_from(["loadgen", "--duration", "1s"]);
        let mut stats = Stats::default();
        answered(&mut stats, Op::Ping, 100, 1000);
        assert!(Summary::new(&args, &stats, vec![], vec![]).passed());

        stats.protocol_errors = 1;
        let summary = Summary::new(&args, &stats, vec![], vec![]);
        assert!(!summary.passed());
        assert!(summary.table().contains("FAIL"));

        stats.protocol_errors = 0;
        let open = Args::parse_from(["loadgen", "--duration", "1s", "--rate", "1000"]);
        let summary = Summary::new(&open, &stats, vec![], vec![]);
        assert!(
            summary.failures[0].contains("offered rate not kept"),
            "{:?}",
            summary.failures
        );
        answered(&mut stats, Op::Ping, 890, 1000);
        assert!(Summary::new(&open, &stats, vec![], vec![]).passed());
        assert!(!Summary::new(&open, &stats, vec!["setup".into()], vec![]).passed());
    }

    #[test]
    fn json_renders_without_the_secret() {
        let args = Args::parse_from(["loadgen", "--secret", "hidden"]);
        let mut stats = Stats::default();
        for v in 1..=100 {
            stats.record_sent(Op::Ping, 0);
            stats.record_response(Op::Ping, 0, v * 10_000);
        }
        stats.record_failure(Op::Ping, 0, Failure::Code(6));
        let summary = Summary::new(&args, &stats, vec![], vec![]);
        let json = serde_json::to_string(&summary).expect("serializable");
        assert!(json.contains("\"OVERLOADED\":1"));
        assert!(json.contains("\"connections\":16"));
        assert!(!json.contains("hidden"), "the secret must not be written");
        assert!(summary.latency.p50_us > 490.0 && summary.latency.p50_us < 510.0);
    }

    /// A mixed run reports each kind of request on its own: the slow gets
    /// do not hide behind the fast pings in the table or the JSON.
    #[test]
    fn the_mixed_workload_is_reported_per_op() {
        let args = Args::parse_from(["loadgen", "--workload", "mixed", "--duration", "2s"]);
        let mut stats = Stats::default();
        answered(&mut stats, Op::Ping, 900, 100_000); // 100 us
        answered(&mut stats, Op::Get, 100, 5_000_000); // 5 ms
        stats.record_sent(Op::Incr, 0);
        stats.record_failure(Op::Incr, 0, Failure::Lost);
        stats.record_sent(Op::Incr, 0);
        stats.record_failure(Op::Incr, 0, Failure::Code(7));
        let summary = Summary::new(&args, &stats, vec![], vec![]);
        assert_eq!(summary.ops.len(), 3);
        let get = &summary.ops["get"];
        assert_eq!(get.responses, 100);
        assert!((get.throughput - 50.0).abs() < 1e-9);
        assert!(get.latency.p50_us > 4_900.0, "{}", get.latency.p50_us);
        assert!(summary.ops["ping"].latency.p99_us < 110.0);
        // Over all ops the gets are only the top 10%.
        assert!(summary.latency.p50_us < 110.0);
        assert_eq!(summary.ops["incr"].failed["CONNECTION_LOST"], 1);
        assert_eq!(summary.ops["incr"].failed["UNAVAILABLE"], 1);
        assert_eq!(summary.lost, 1);
        assert_eq!(summary.failed, 2);
        assert_eq!(summary.errors.get("UNAVAILABLE"), Some(&1));
        assert!(!summary.errors.contains_key("CONNECTION_LOST"));

        let table = summary.table();
        let get_row = table
            .lines()
            .find(|l| l.trim_start().starts_with("get "))
            .expect("a get row");
        assert!(get_row.contains("5"), "{get_row}");
        assert!(table.contains("CONNECTION_LOST=1"), "{table}");

        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&summary).expect("json")).expect("parse");
        assert_eq!(json["ops"]["get"]["responses"], 100);
        assert!(
            json["ops"]["get"]["latency"]["p99_us"]
                .as_f64()
                .expect("p99")
                > 4_900.0
        );
        assert_eq!(json["ops"]["incr"]["failed"]["UNAVAILABLE"], 1);
    }

    /// What wrk and wrk2 users look for: `Requests/sec`, `Transfer/sec`,
    /// the requests-in-duration line, and the latency's stdev.
    #[test]
    fn the_table_speaks_wrk_s_names_with_bytes_and_stdev() {
        let args = Args::parse_from(["loadgen", "--duration", "2s"]);
        let mut stats = Stats::default();
        answered(&mut stats, Op::Ping, 500, 100_000);
        answered(&mut stats, Op::Ping, 500, 300_000);
        stats.bytes_in = 3 * 1024 * 1024;
        stats.bytes_out = 2048;
        let summary = Summary::new(&args, &stats, vec![], vec![]);
        assert!(
            (summary.latency.stdev_us - 100.0).abs() < 1.0,
            "{:?}",
            summary.latency
        );
        assert!((summary.bytes_in_per_s - 1.5 * 1024.0 * 1024.0).abs() < 1e-6);
        let table = summary.table();
        assert!(table.contains("Requests/sec:       500.00"), "{table}");
        assert!(table.contains("Transfer/sec:       1.50MB"), "{table}");
        assert!(
            table.contains("  1000 requests in 2.00s, 3.00MB read, 2.00KB written"),
            "{table}"
        );
        assert!(table.contains("in 1.50MB/s  out 1.00KB/s"), "{table}");
        assert!(table.contains("stdev 100.0"), "{table}");
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&summary).expect("json")).expect("parse");
        assert_eq!(json["bytes_out"], 2048);
        assert!(json["latency"]["stdev_us"].as_f64().is_some());
    }

    #[test]
    fn the_json_has_one_entry_per_second() {
        let args = Args::parse_from(["loadgen", "--duration", "3s"]);
        let mut stats = Stats::default();
        let origin = 1_000_000_000_000;
        stats.start_series(origin);
        for second in 0..3u64 {
            for i in 0..(10 * (second + 1)) {
                let intended = origin + second * 1_000_000_000 + i;
                stats.record_sent(Op::Ping, intended);
                stats.record_response(Op::Ping, intended, intended + (second + 1) * 1_000_000);
            }
        }
        let summary = Summary::new(&args, &stats, vec![], vec![]);
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&summary).expect("json")).expect("parse");
        let series = json["series"].as_array().expect("series");
        assert_eq!(series.len(), 3);
        for (second, entry) in series.iter().enumerate() {
            assert_eq!(entry["second"], second);
            assert_eq!(entry["responses"], 10 * (second + 1));
            let p99 = entry["p99_us"].as_f64().expect("p99");
            let want = 1_000.0 * (second + 1) as f64;
            assert!((p99 - want).abs() < want * 0.02, "second {second}: {p99}");
        }
    }
}
