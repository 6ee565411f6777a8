//! Per-thread measurements, merged once at the end (and per second for the
//! progress line). Latencies are nanoseconds in HdrHistograms with 3
//! significant digits, one per kind of request; merging two histograms is
//! exact at that precision. A per-second series (by intended send time)
//! keeps coarser histograms, so a stall shows where it happened.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hdrhistogram::Histogram;
use wire::client::{ErrorCode, APP_CODE_MIN};

use crate::workload::Op;

/// Largest latency a histogram tracks; larger values are clamped to it (and
/// still counted) so a pathological stall cannot lose a sample.
pub const LATENCY_MAX_NS: u64 = 120_000_000_000;

/// Seconds the series keeps: an hour. Later seconds are still measured in
/// the totals, only not broken down by second.
pub const SERIES_SECONDS_MAX: usize = 3600;

/// Slots of a failure count: index = code for docs/protocol.md's codes 1..=9,
/// 0 for a code this generator does not know, then a Redis error reply, a
/// request lost with its connection, and an object type's own application
/// code (32768 and up, docs/protocol.md section 4).
pub const FAILURE_SLOTS: usize = 13;
const SLOT_RESP_ERROR: usize = 10;
const SLOT_LOST: usize = 11;
const SLOT_APP_CODE: usize = 12;

/// Why a measured request did not get its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// An ERROR frame with this code.
    Code(u16),
    /// A Redis error reply (`-ERR ...`).
    RespError,
    /// Its connection closed before the answer came.
    Lost,
}

impl Failure {
    pub fn slot(self) -> usize {
        match self {
            Failure::Code(code) if code >= APP_CODE_MIN => SLOT_APP_CODE,
            Failure::Code(code) => ErrorCode::from_u16(code).map_or(0, |known| known as usize),
            Failure::RespError => SLOT_RESP_ERROR,
            Failure::Lost => SLOT_LOST,
        }
    }
}

/// Name of a failure slot, as the table and the JSON print it.
pub fn failure_slot_name(slot: usize) -> &'static str {
    match slot {
        SLOT_RESP_ERROR => "RESP_ERROR",
        SLOT_LOST => "CONNECTION_LOST",
        SLOT_APP_CODE => "APP_CODE",
        _ => u16::try_from(slot)
            .ok()
            .and_then(ErrorCode::from_u16)
            .map_or("UNKNOWN_CODE", ErrorCode::name),
    }
}

/// What one kind of request got.
#[derive(Clone, Debug)]
pub struct OpStats {
    /// Successful answers, from intended send time to receipt.
    pub latency_ns: Histogram<u64>,
    /// Requests queued whose intended send time fell in the measured phase.
    pub sent: u64,
    /// Successful answers to them.
    pub responses: u64,
    /// Failed ones, by `Failure::slot`.
    pub failed: [u64; FAILURE_SLOTS],
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            latency_ns: latency_histogram(),
            sent: 0,
            responses: 0,
            failed: [0; FAILURE_SLOTS],
        }
    }
}

impl OpStats {
    pub fn failures(&self) -> u64 {
        self.failed.iter().sum()
    }

    fn merge(&mut self, other: &OpStats) {
        self.latency_ns
            .add(&other.latency_ns)
            .expect("histograms with equal bounds merge");
        self.sent += other.sent;
        self.responses += other.responses;
        for (mine, theirs) in self.failed.iter_mut().zip(other.failed) {
            *mine += theirs;
        }
    }
}

/// One second of the measured phase, by intended send time.
#[derive(Clone, Debug)]
pub struct Second {
    pub sent: u64,
    pub responses: u64,
    pub failed: u64,
    /// 2 significant digits and u32 counts: 11 KiB a second, so an hour of
    /// series stays within tens of MiB per thread.
    pub latency_ns: Histogram<u32>,
}

impl Default for Second {
    fn default() -> Self {
        Second {
            sent: 0,
            responses: 0,
            failed: 0,
            // Constant bounds hdrhistogram accepts; 1 us resolution.
            latency_ns: Histogram::new_with_bounds(1_000, LATENCY_MAX_NS, 2)
                .expect("constant histogram bounds"),
        }
    }
}

/// Everything one thread counted during the measured phase.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Per kind of request, indexed by `Op::index`.
    pub ops: [OpStats; Op::COUNT],
    /// `room.message` PUSHes, from the sender's timestamp to receipt.
    pub push_latency_ns: Histogram<u64>,
    /// Answers that matched no outstanding request, malformed bodies,
    /// undecodable bytes, unexpected PUSH routes. Any of them fails the run.
    pub protocol_errors: u64,
    /// Measured requests still unanswered at the end of the drain, on a
    /// connection that was still open.
    pub unanswered: u64,
    /// Open-loop requests whose intended time came while the connection's
    /// waiting queue was full: the offered rate was not kept.
    pub schedule_overflow: u64,
    /// `room.message` PUSHes received carrying a measured send time.
    pub pushes: u64,
    /// Sum of the member counts of measured `room.say` answers: the PUSHes
    /// the server said it sent.
    pub pushes_expected: u64,
    /// `sys.kicked` PUSHes received.
    pub kicked: u64,
    /// PUSHes on a custom workload type's own routes (guild messages, say).
    pub other_pushes: u64,
    /// Connections that closed or failed and were not (or could no longer
    /// be) reconnected. Any of them fails the run.
    pub connections_lost: u64,
    /// Connections re-established after they closed (`--reconnect`).
    pub reconnects: u64,
    /// `sys.redirect` PUSHes received (and followed).
    pub redirects: u64,
    /// Connect attempts that failed after setup.
    pub connect_failures: u64,
    /// Logins after setup that moved a connection to its next player
    /// (`--players`).
    pub player_switches: u64,
    /// Logins after setup answered OVERLOADED, UNAVAILABLE or TIMEOUT and
    /// tried again on a new connection (`--reconnect`).
    pub login_retries: u64,
    /// The longest time one connection waited between two measured
    /// successful answers, across its reconnects and redirects.
    pub longest_answer_gap_ns: u64,
    /// Bytes received from the server in the measured phase (what the
    /// socket gave: TLS records and WebSocket framing included).
    pub bytes_in: u64,
    /// Bytes the socket took to send in the measured phase.
    pub bytes_out: u64,
    /// Per player, its increments (`--ledger`); `None` when not asked for.
    pub ledger: Option<BTreeMap<u64, PlayerLedger>>,
    /// What the keyed increments came to (`--keys`).
    pub keys: crate::keys::KeyLedger,
    /// What the resumes and the pushes' numbers came to (`--resume`).
    pub resume: crate::resume::ResumeLedger,
    /// Second 0 of the series (the start of the measured phase).
    series_origin_ns: u64,
    series: Vec<Second>,
}

fn latency_histogram() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 *
    // low, sigfig <= 5), so this cannot fail.
    Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("constant histogram bounds")
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            ops: Default::default(),
            push_latency_ns: latency_histogram(),
            protocol_errors: 0,
            unanswered: 0,
            schedule_overflow: 0,
            pushes: 0,
            pushes_expected: 0,
            kicked: 0,
            other_pushes: 0,
            connections_lost: 0,
            reconnects: 0,
            redirects: 0,
            connect_failures: 0,
            player_switches: 0,
            login_retries: 0,
            longest_answer_gap_ns: 0,
            bytes_in: 0,
            bytes_out: 0,
            ledger: None,
            keys: Default::default(),
            resume: Default::default(),
            series_origin_ns: u64::MAX,
            series: Vec::new(),
        }
    }
}

/// The few figures the progress line needs, cheap to send each second.
#[derive(Clone, Debug)]
pub struct Progress {
    pub responses: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub failures: u64,
    pub protocol_errors: u64,
    pub latency_ns: Histogram<u64>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            responses: 0,
            bytes_in: 0,
            bytes_out: 0,
            failures: 0,
            protocol_errors: 0,
            latency_ns: latency_histogram(),
        }
    }
}

impl Progress {
    pub fn merge(&mut self, other: &Progress) {
        self.responses += other.responses;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.failures += other.failures;
        self.protocol_errors += other.protocol_errors;
        self.latency_ns
            .add(&other.latency_ns)
            .expect("histograms with equal bounds merge");
    }
}

/// What one player's increments came to: every `player.incr` answered OK
/// added one (the counter must hold `acked`, plus at most `uncertain`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlayerLedger {
    pub acked: u64,
    /// The highest counter an answer showed.
    pub max_counter: Option<i64>,
    /// Increments whose outcome is unknown: answered UNAVAILABLE, TIMEOUT
    /// or INTERNAL, or lost with their connection, or unanswered at the
    /// end (with `--keys`: given up after their retries).
    pub uncertain: u64,
    /// `--keys`: the counter values keyed increments were answered with,
    /// and how many came a second time (exactly-once forbids it).
    pub keyed_values: BTreeSet<i64>,
    pub duplicates: u64,
}

impl Stats {
    /// Keeps a ledger of every player's increments from now on.
    pub fn enable_ledger(&mut self) {
        self.ledger.get_or_insert_with(BTreeMap::new);
    }

    /// An increment of `player_id` answered OK, showing `counter`.
    pub fn ledger_acked(&mut self, player_id: u64, counter: Option<i64>, keyed: bool) {
        if let Some(ledger) = self.ledger.as_mut() {
            let entry = ledger.entry(player_id).or_default();
            entry.acked += 1;
            entry.max_counter = entry.max_counter.max(counter);
            if let (true, Some(value)) = (keyed, counter) {
                if !entry.keyed_values.insert(value) {
                    entry.duplicates += 1;
                }
            }
        }
    }

    /// `--keys`: the keys' ledger, its duplicates counted if `--ledger`
    /// kept the values.
    pub fn key_ledger(&self) -> crate::keys::KeyLedger {
        crate::keys::KeyLedger {
            duplicates: self.keyed_duplicates(),
            ..self.keys
        }
    }

    /// `--keys` with `--ledger`: counter values acknowledged to two keys
    /// of one player.
    pub fn keyed_duplicates(&self) -> Option<u64> {
        let ledger = self.ledger.as_ref()?;
        Some(ledger.values().map(|entry| entry.duplicates).sum())
    }

    /// An increment of `player_id` whose outcome is unknown.
    pub fn ledger_uncertain(&mut self, player_id: u64) {
        if let Some(ledger) = self.ledger.as_mut() {
            ledger.entry(player_id).or_default().uncertain += 1;
        }
    }

    /// One connection waited `gap_ns` between two answers.
    pub fn record_answer_gap(&mut self, gap_ns: u64) {
        self.longest_answer_gap_ns = self.longest_answer_gap_ns.max(gap_ns);
    }

    /// Starts the per-second series at the measured phase's start.
    pub fn start_series(&mut self, origin_ns: u64) {
        self.series_origin_ns = origin_ns;
    }

    fn second(&mut self, intended_ns: u64) -> Option<&mut Second> {
        let index = intended_ns.checked_sub(self.series_origin_ns)? / 1_000_000_000;
        let index = usize::try_from(index).ok()?;
        if index >= SERIES_SECONDS_MAX {
            return None;
        }
        if self.series.len() <= index {
            self.series.resize_with(index + 1, Second::default);
        }
        Some(&mut self.series[index])
    }

    pub fn record_sent(&mut self, op: Op, intended_ns: u64) {
        self.ops[op.index()].sent += 1;
        if let Some(second) = self.second(intended_ns) {
            second.sent += 1;
        }
    }

    pub fn record_response(&mut self, op: Op, intended_ns: u64, now_ns: u64) {
        let latency_ns = now_ns.saturating_sub(intended_ns).clamp(1, LATENCY_MAX_NS);
        let stats = &mut self.ops[op.index()];
        stats.responses += 1;
        stats.latency_ns.saturating_record(latency_ns);
        if let Some(second) = self.second(intended_ns) {
            second.responses += 1;
            second.latency_ns.saturating_record(latency_ns);
        }
    }

    pub fn record_failure(&mut self, op: Op, intended_ns: u64, failure: Failure) {
        self.ops[op.index()].failed[failure.slot()] += 1;
        if let Some(second) = self.second(intended_ns) {
            second.failed += 1;
        }
    }

    pub fn record_push_latency(&mut self, latency_ns: u64) {
        self.push_latency_ns
            .saturating_record(latency_ns.clamp(1, LATENCY_MAX_NS));
    }

    pub fn sent(&self) -> u64 {
        self.ops.iter().map(|o| o.sent).sum()
    }

    pub fn responses(&self) -> u64 {
        self.ops.iter().map(|o| o.responses).sum()
    }

    /// Failed requests of every kind, by slot.
    pub fn failed(&self) -> [u64; FAILURE_SLOTS] {
        let mut failed = [0; FAILURE_SLOTS];
        for op in &self.ops {
            for (total, count) in failed.iter_mut().zip(op.failed) {
                *total += count;
            }
        }
        failed
    }

    pub fn failures(&self) -> u64 {
        self.failed().iter().sum()
    }

    /// Requests lost with their connection.
    #[cfg(test)]
    pub fn lost(&self) -> u64 {
        self.failed()[SLOT_LOST]
    }

    /// The latency of every successful answer, whatever its kind.
    pub fn latency_ns(&self) -> Histogram<u64> {
        let mut total = latency_histogram();
        for op in &self.ops {
            total
                .add(&op.latency_ns)
                .expect("histograms with equal bounds merge");
        }
        total
    }

    pub fn series(&self) -> &[Second] {
        &self.series
    }

    /// When second 0 of the series began, on the wall clock (the series
    /// runs on the monotonic clock; the interval log wants a date).
    pub fn series_start_wall(&self) -> std::time::SystemTime {
        let now_ns = crate::clock::now_ns();
        let ago = Duration::from_nanos(now_ns.saturating_sub(self.series_origin_ns));
        let now = std::time::SystemTime::now();
        now.checked_sub(ago).unwrap_or(now)
    }

    pub fn progress(&self) -> Progress {
        Progress {
            responses: self.responses(),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            failures: self.failures(),
            protocol_errors: self.protocol_errors,
            latency_ns: self.latency_ns(),
        }
    }

    /// Adds `other` into `self`. Histograms share bounds, so `add` cannot
    /// fail on range; an error would be a bug here. Threads share one
    /// measured phase, so their series line up second by second.
    pub fn merge(&mut self, other: &Stats) {
        for (mine, theirs) in self.ops.iter_mut().zip(&other.ops) {
            mine.merge(theirs);
        }
        self.push_latency_ns
            .add(&other.push_latency_ns)
            .expect("histograms with equal bounds merge");
        self.protocol_errors += other.protocol_errors;
        self.unanswered += other.unanswered;
        self.schedule_overflow += other.schedule_overflow;
        self.pushes += other.pushes;
        self.pushes_expected += other.pushes_expected;
        self.kicked += other.kicked;
        self.other_pushes += other.other_pushes;
        self.connections_lost += other.connections_lost;
        self.reconnects += other.reconnects;
        self.redirects += other.redirects;
        self.connect_failures += other.connect_failures;
        self.player_switches += other.player_switches;
        self.login_retries += other.login_retries;
        self.longest_answer_gap_ns = self.longest_answer_gap_ns.max(other.longest_answer_gap_ns);
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.keys.merge(&other.keys);
        self.resume.merge(&other.resume);
        if let Some(theirs) = &other.ledger {
            let mine = self.ledger.get_or_insert_with(BTreeMap::new);
            for (player, their) in theirs {
                let entry = mine.entry(*player).or_default();
                entry.acked += their.acked;
                entry.uncertain += their.uncertain;
                entry.max_counter = entry.max_counter.max(their.max_counter);
                entry.duplicates += their.duplicates;
                for &value in &their.keyed_values {
                    if !entry.keyed_values.insert(value) {
                        entry.duplicates += 1;
                    }
                }
            }
        }
        // Threads share one measured phase, so one origin.
        self.series_origin_ns = self.series_origin_ns.min(other.series_origin_ns);
        if self.series.len() < other.series.len() {
            self.series.resize_with(other.series.len(), Second::default);
        }
        for (mine, theirs) in self.series.iter_mut().zip(&other.series) {
            mine.sent += theirs.sent;
            mine.responses += theirs.responses;
            mine.failed += theirs.failed;
            mine.latency_ns
                .add(&theirs.latency_ns)
                .expect("histograms with equal bounds merge");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn merge_is_exact_and_keeps_extremes() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        for v in 1..=1000u64 {
            a.record_sent(Op::Ping, 0);
            a.record_response(Op::Ping, 0, v * 1000); // 1 us .. 1 ms
        }
        // One 5 s outlier on another thread, and two failures.
        b.record_response(Op::Incr, 0, 5_000_000_000);
        b.record_failure(Op::Incr, 0, Failure::Code(6));
        b.record_failure(Op::Get, 0, Failure::Code(77));
        let mut merged = Stats::default();
        merged.merge(&a);
        merged.merge(&b);
        let latency = merged.latency_ns();
        assert_eq!(latency.len(), 1001);
        assert_eq!(merged.sent(), 1000);
        assert_eq!(merged.responses(), 1001);
        assert_eq!(merged.failed()[6], 1);
        assert_eq!(merged.failed()[0], 1);
        assert_eq!(merged.failures(), 2);
        assert_eq!(merged.ops[Op::Incr.index()].failures(), 1);
        assert_eq!(merged.ops[Op::Get.index()].failed[0], 1);
        let max = latency.max();
        assert!((4_990_000_000..=5_010_000_000).contains(&max), "max {max}");
        let p50 = latency.value_at_quantile(0.5);
        assert!((499_000..=502_000).contains(&p50), "p50 {p50}");
        // Merging in the other order gives the same distribution.
        let mut other_order = Stats::default();
        other_order.merge(&b);
        other_order.merge(&a);
        assert_eq!(other_order.latency_ns(), latency);
        assert_eq!(failure_slot_name(6), "OVERLOADED");
        assert_eq!(failure_slot_name(0), "UNKNOWN_CODE");
        assert_eq!(failure_slot_name(Failure::Lost.slot()), "CONNECTION_LOST");
        assert_eq!(failure_slot_name(Failure::RespError.slot()), "RESP_ERROR");
        assert_eq!(failure_slot_name(Failure::Code(32770).slot()), "APP_CODE");
        assert_eq!(
            failure_slot_name(Failure::Code(32767).slot()),
            "UNKNOWN_CODE"
        );
    }

    #[test]
    fn out_of_range_latencies_are_clamped_not_lost() {
        let mut stats = Stats::default();
        stats.record_response(Op::Ping, 10, 10);
        stats.record_response(Op::Ping, 0, u64::MAX);
        assert_eq!(stats.latency_ns().len(), 2);
        assert!(stats.latency_ns().max() >= LATENCY_MAX_NS);
    }

    /// Each answer lands in the second its request was due in, and two
    /// threads' series add up second by second.
    #[test]
    fn the_series_follows_intended_send_time() {
        let origin = 100 * S;
        let mut a = Stats::default();
        a.start_series(origin);
        // Before the series: counted in the totals, not in a second.
        a.record_sent(Op::Ping, origin - 1);
        a.record_response(Op::Ping, origin - 1, origin + 5);
        for (second, latency_ms) in [(0u64, 1u64), (0, 1), (2, 300)] {
            let intended = origin + second * S + S / 2;
            a.record_sent(Op::Incr, intended);
            a.record_response(Op::Incr, intended, intended + latency_ms * 1_000_000);
        }
        a.record_failure(Op::Incr, origin + S, Failure::Lost);
        let mut b = Stats::default();
        b.start_series(origin);
        b.record_sent(Op::Get, origin + 3 * S);
        let mut merged = Stats::default();
        merged.merge(&a);
        merged.merge(&b);
        let series = merged.series();
        assert_eq!(series.len(), 4);
        assert_eq!(
            series.iter().map(|s| s.sent).collect::<Vec<_>>(),
            [2, 0, 1, 1]
        );
        assert_eq!(
            series.iter().map(|s| s.responses).collect::<Vec<_>>(),
            [2, 0, 1, 0]
        );
        assert_eq!(series[1].failed, 1);
        let p99_second_2 = series[2].latency_ns.value_at_quantile(0.99);
        assert!((297_000_000..=303_000_000).contains(&p99_second_2));
        assert!(series[0].latency_ns.max() < 1_100_000);
        assert_eq!(merged.responses(), 4);

        // The series is bounded.
        let mut far = Stats::default();
        far.start_series(0);
        far.record_sent(Op::Ping, SERIES_SECONDS_MAX as u64 * S);
        assert!(far.series().is_empty());
        assert_eq!(far.sent(), 1);
    }
}
