//! A latency histogram with fixed buckets, cheap enough for the cores.
//!
//! Every duration routerd measures (a client request, a store operation,
//! a cluster link's round trip) uses the same buckets, so dashboards can
//! put them side by side and a scrape needs no per-histogram layout.
//!
//! The layout is log-linear, from 1 us to 10 s: each decade is cut into
//! linear steps. Where routerd answers (10 us to 10 ms: a request served
//! from memory takes tens of microseconds, one that waits for the store a
//! few milliseconds) a decade has nine steps (1, 2, ... 9 times its start),
//! so `histogram_quantile` is off by at most one step, 10 % of the value;
//! below (1 us to 10 us) and above (10 ms to 10 s) a decade has three
//! (1, 2, 5), enough to see that something is slow and how slow. 40
//! buckets and `+Inf`.
//!
//! A core records into its own histogram with a relaxed load and store per
//! field (no locked instruction); the admin thread sums the cores' buckets
//! when it renders. Buckets hold their own counts, not cumulative ones, so
//! a record touches one bucket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::family::{Kind, Metric, Value};

/// Each finite bucket's inclusive upper bound in nanoseconds, and the same
/// bound in seconds as the `le` label shows it. One more bucket, `+Inf`,
/// counts the rest.
pub const BUCKET_BOUNDS: [(u64, &str); BUCKET_BOUNDS_LEN] = [
    (1_000, "0.000001"),
    (2_000, "0.000002"),
    (5_000, "0.000005"),
    (10_000, "0.00001"),
    (20_000, "0.00002"),
    (30_000, "0.00003"),
    (40_000, "0.00004"),
    (50_000, "0.00005"),
    (60_000, "0.00006"),
    (70_000, "0.00007"),
    (80_000, "0.00008"),
    (90_000, "0.00009"),
    (100_000, "0.0001"),
    (200_000, "0.0002"),
    (300_000, "0.0003"),
    (400_000, "0.0004"),
    (500_000, "0.0005"),
    (600_000, "0.0006"),
    (700_000, "0.0007"),
    (800_000, "0.0008"),
    (900_000, "0.0009"),
    (1_000_000, "0.001"),
    (2_000_000, "0.002"),
    (3_000_000, "0.003"),
    (4_000_000, "0.004"),
    (5_000_000, "0.005"),
    (6_000_000, "0.006"),
    (7_000_000, "0.007"),
    (8_000_000, "0.008"),
    (9_000_000, "0.009"),
    (10_000_000, "0.01"),
    (20_000_000, "0.02"),
    (50_000_000, "0.05"),
    (100_000_000, "0.1"),
    (200_000_000, "0.2"),
    (500_000_000, "0.5"),
    (1_000_000_000, "1"),
    (2_000_000_000, "2"),
    (5_000_000_000, "5"),
    (10_000_000_000, "10"),
];

/// How many finite buckets [`BUCKET_BOUNDS`] has.
pub const BUCKET_BOUNDS_LEN: usize = 40;

/// The finite buckets and `+Inf`.
const BUCKETS: usize = BUCKET_BOUNDS.len() + 1;

/// Durations by bucket, and their sum.
#[derive(Debug)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records `elapsed` from the one thread that writes this histogram
    /// (its core): no locked instruction, so no cost to other cores. Two
    /// writers would lose counts; use [`Self::record_shared`] for those.
    pub fn record(&self, elapsed: Duration) {
        let ns = nanos(elapsed);
        let bucket = &self.counts[bucket_of(ns)];
        bucket.store(bucket.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.sum_ns.store(
            self.sum_ns.load(Ordering::Relaxed).wrapping_add(ns),
            Ordering::Relaxed,
        );
    }

    /// Records `elapsed` from any thread, with atomic additions: for a
    /// histogram several threads write (the store's, written by whichever
    /// core awaited the operation), never on a per-request path.
    pub fn record_shared(&self, elapsed: Duration) {
        let ns = nanos(elapsed);
        self.counts[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The count of bucket `index` alone (not cumulative); `index` is
    /// `BUCKET_BOUNDS.len()` for `+Inf`.
    pub fn bucket(&self, index: usize) -> u64 {
        self.counts[index].load(Ordering::Relaxed)
    }

    /// Durations recorded, over every bucket.
    pub fn count(&self) -> u64 {
        (0..BUCKETS).map(|index| self.bucket(index)).sum()
    }

    /// The sum of the durations recorded, in nanoseconds (wraps after 584
    /// years of summed latency).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns.load(Ordering::Relaxed)
    }
}

impl Metric for Histogram {
    const KIND: Kind = Kind::Histogram;

    fn value(&self) -> Value<'_> {
        Value::Distribution(self)
    }
}

fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

/// The first bucket whose bound is at least `ns` (`BUCKET_BOUNDS.len()`,
/// `+Inf`, past the last). Every answered request comes here, so up to
/// 10 ms the bucket is computed, not searched: the binary search compiles
/// to six loads, each waiting for the comparison before it (recording a
/// request's latency took 4.8 % of a core loaded at pipeline 16, most of
/// it there, against 0.8 % before the buckets were log-linear). A request
/// answered in the loop turn it arrived in is recorded at a few
/// microseconds, so the first decade has its own arms; the range arms
/// predict, as a request's decade rarely changes from one to the next.
/// Past 10 ms, rare, the bounds are searched.
fn bucket_of(ns: u64) -> usize {
    // `ns` is in (decade, 10 * decade], so it needs the bound `k * decade`
    // with k = 2 ... 10, the bucket `first + k`.
    let linear = |decade: u64, first: usize| first + ns.div_ceil(decade) as usize;
    match ns {
        0..=1_000 => 0,
        1_001..=2_000 => 1,
        2_001..=5_000 => 2,
        5_001..=10_000 => 3,
        10_001..=100_000 => linear(10_000, FINE_FIRST - 2),
        100_001..=1_000_000 => linear(100_000, FINE_FIRST + 7),
        1_000_001..=10_000_000 => linear(1_000_000, FINE_FIRST + 16),
        _ => BUCKET_BOUNDS.partition_point(|&(bound, _)| bound < ns),
    }
}

/// The index of the first linear bucket (20 us), after 1, 2, 5 and 10 us.
const FINE_FIRST: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_bounds_and_bounds_grow() {
        for (bound, le) in BUCKET_BOUNDS {
            let seconds: f64 = le.parse().unwrap();
            assert_eq!((seconds * 1e9).round() as u64, bound, "{le}");
        }
        assert!(BUCKET_BOUNDS.windows(2).all(|pair| pair[0].0 < pair[1].0));
    }

    #[test]
    fn the_computed_bucket_is_the_searched_one() {
        let searched = |ns: u64| BUCKET_BOUNDS.partition_point(|&(bound, _)| bound < ns);
        let mut edges = vec![0, 1, u64::MAX - 1, u64::MAX];
        for (bound, _) in BUCKET_BOUNDS {
            edges.extend([bound - 1, bound, bound + 1]);
        }
        let steps = (0..200_000u64).map(|i| i * 61); // every 61 ns to 12.2 ms
        for ns in edges.into_iter().chain(steps) {
            assert_eq!(bucket_of(ns), searched(ns), "{ns} ns");
        }
    }

    #[test]
    fn a_duration_lands_in_the_first_bucket_that_holds_it() {
        let histogram = Histogram::default();
        histogram.record(Duration::from_nanos(1)); // le 0.000001
        histogram.record(Duration::from_micros(50)); // le 0.00005, inclusive
        histogram.record(Duration::from_micros(51)); // le 0.00006
        histogram.record_shared(Duration::from_millis(3)); // le 0.003
        histogram.record(Duration::from_secs(10)); // le 10
        histogram.record(Duration::from_secs(11));
        histogram.record(Duration::MAX);
        let index = |le: &str| BUCKET_BOUNDS.iter().position(|b| b.1 == le).unwrap();
        assert_eq!(histogram.bucket(0), 1);
        assert_eq!(histogram.bucket(index("0.00005")), 1);
        assert_eq!(histogram.bucket(index("0.00006")), 1);
        assert_eq!(histogram.bucket(index("0.003")), 1);
        assert_eq!(histogram.bucket(index("10")), 1);
        assert_eq!(histogram.bucket(BUCKET_BOUNDS.len()), 2);
        assert_eq!(histogram.count(), 7);
    }

    #[test]
    fn the_layout_is_log_linear_from_1_us_to_10_s() {
        assert_eq!(BUCKET_BOUNDS[0].0, 1_000);
        assert_eq!(BUCKET_BOUNDS[BUCKET_BOUNDS_LEN - 1].0, 10_000_000_000);
        // Nine linear steps per decade from 10 us to 10 ms: a bucket's
        // width is at most its lower bound's tenth of a decade.
        let dense: Vec<u64> = BUCKET_BOUNDS
            .iter()
            .map(|b| b.0)
            .filter(|&ns| (10_000..10_000_000).contains(&ns))
            .collect();
        assert_eq!(dense.len(), 27);
        for pair in dense.windows(2) {
            let decade = 10u64.pow(pair[0].ilog10());
            assert_eq!(pair[1] - pair[0], decade, "{pair:?}");
        }
        // Three steps (1, 2, 5) in every other decade.
        let sparse = BUCKET_BOUNDS.len() - dense.len() - 1;
        assert_eq!(sparse, 3 + 9);
    }
}
