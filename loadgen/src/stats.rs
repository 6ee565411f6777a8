//! Per-thread measurements, merged once at the end (and per second for the
//! progress line). Latencies are nanoseconds in HdrHistograms with 3
//! significant digits; merging two histograms is exact at that precision.

use hdrhistogram::Histogram;
use wire::client::ErrorCode;

/// Largest latency a histogram tracks; larger values are clamped to it (and
/// still counted) so a pathological stall cannot lose a sample.
pub const LATENCY_MAX_NS: u64 = 120_000_000_000;

/// Slots of `errors_by_code`: index = code for codes 1..=9, index 0 for a
/// code this generator does not know.
pub const ERROR_SLOTS: usize = 10;

/// Everything one thread counted during the measured phase.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Successful answers, from intended send time to receipt.
    pub latency_ns: Histogram<u64>,
    /// `room.message` PUSHes, from the sender's timestamp to receipt.
    pub push_latency_ns: Histogram<u64>,
    /// Requests handed to the kernel whose intended send time fell in the
    /// measured phase.
    pub sent: u64,
    /// RESPONSE frames to measured requests.
    pub responses: u64,
    /// ERROR frames to measured requests, by code (see `ERROR_SLOTS`).
    pub errors_by_code: [u64; ERROR_SLOTS],
    /// Answers that matched no outstanding seq or route, malformed bodies,
    /// undecodable frames, unexpected PUSH routes. Any of them fails the run.
    pub protocol_errors: u64,
    /// Measured requests still unanswered at the end of the drain.
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
    /// Connections that closed or failed before the end.
    pub connections_lost: u64,
}

fn latency_histogram() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 *
    // low, sigfig <= 5), so this cannot fail.
    Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("constant histogram bounds")
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            latency_ns: latency_histogram(),
            push_latency_ns: latency_histogram(),
            sent: 0,
            responses: 0,
            errors_by_code: [0; ERROR_SLOTS],
            protocol_errors: 0,
            unanswered: 0,
            schedule_overflow: 0,
            pushes: 0,
            pushes_expected: 0,
            kicked: 0,
            connections_lost: 0,
        }
    }
}

impl Stats {
    pub fn record_latency(&mut self, latency_ns: u64) {
        self.latency_ns
            .saturating_record(latency_ns.clamp(1, LATENCY_MAX_NS));
    }

    pub fn record_push_latency(&mut self, latency_ns: u64) {
        self.push_latency_ns
            .saturating_record(latency_ns.clamp(1, LATENCY_MAX_NS));
    }

    pub fn record_error(&mut self, code: u16) {
        let slot = match ErrorCode::from_u16(code) {
            Some(known) => known as usize,
            None => 0,
        };
        self.errors_by_code[slot] += 1;
    }

    pub fn errors(&self) -> u64 {
        self.errors_by_code.iter().sum()
    }

    /// Adds `other` into `self`. Histograms share bounds, so `add` cannot
    /// fail on range; an error would be a bug here.
    pub fn merge(&mut self, other: &Stats) {
        self.latency_ns
            .add(&other.latency_ns)
            .expect("histograms with equal bounds merge");
        self.push_latency_ns
            .add(&other.push_latency_ns)
            .expect("histograms with equal bounds merge");
        self.sent += other.sent;
        self.responses += other.responses;
        for (mine, theirs) in self.errors_by_code.iter_mut().zip(other.errors_by_code) {
            *mine += theirs;
        }
        self.protocol_errors += other.protocol_errors;
        self.unanswered += other.unanswered;
        self.schedule_overflow += other.schedule_overflow;
        self.pushes += other.pushes;
        self.pushes_expected += other.pushes_expected;
        self.kicked += other.kicked;
        self.connections_lost += other.connections_lost;
    }
}

/// Name of an `errors_by_code` slot.
pub fn error_slot_name(slot: usize) -> &'static str {
    u16::try_from(slot)
        .ok()
        .and_then(ErrorCode::from_u16)
        .map_or("UNKNOWN_CODE", ErrorCode::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_exact_and_keeps_extremes() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        for v in 1..=1000u64 {
            a.record_latency(v * 1000); // 1 µs .. 1 ms
        }
        b.record_latency(5_000_000_000); // one 5 s outlier on another thread
        b.record_error(6);
        b.record_error(77);
        b.sent = 3;
        a.sent = 1000;
        let mut merged = Stats::default();
        merged.merge(&a);
        merged.merge(&b);
        assert_eq!(merged.latency_ns.len(), 1001);
        assert_eq!(merged.sent, 1003);
        assert_eq!(merged.errors_by_code[6], 1);
        assert_eq!(merged.errors_by_code[0], 1);
        assert_eq!(merged.errors(), 2);
        let max = merged.latency_ns.max();
        assert!((4_990_000_000..=5_010_000_000).contains(&max), "max {max}");
        let p50 = merged.latency_ns.value_at_quantile(0.5);
        assert!((499_000..=502_000).contains(&p50), "p50 {p50}");
        // Merging in the other order gives the same distribution.
        let mut other_order = Stats::default();
        other_order.merge(&b);
        other_order.merge(&a);
        assert_eq!(other_order.latency_ns, merged.latency_ns);
        assert_eq!(error_slot_name(6), "OVERLOADED");
        assert_eq!(error_slot_name(0), "UNKNOWN_CODE");
    }

    #[test]
    fn out_of_range_latencies_are_clamped_not_lost() {
        let mut stats = Stats::default();
        stats.record_latency(0);
        stats.record_latency(u64::MAX);
        assert_eq!(stats.latency_ns.len(), 2);
        assert!(stats.latency_ns.max() >= LATENCY_MAX_NS);
    }
}
