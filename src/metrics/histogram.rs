//! A latency histogram with fixed buckets, cheap enough for the cores.
//!
//! Every duration routerd measures (a client request, a store operation,
//! later a cluster link's round trip) uses the same buckets, from 50 us to
//! 10 s, so dashboards can put them side by side and a scrape needs no
//! per-histogram layout. A core records into its own histogram with a
//! relaxed load and store per field (no locked instruction); the admin
//! thread sums the cores' buckets when it renders. Buckets hold their own
//! counts, not cumulative ones, so a record touches one bucket.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::family::{Kind, Metric, Value};

/// Each finite bucket's inclusive upper bound in nanoseconds, and the same
/// bound in seconds as the `le` label shows it. One more bucket, `+Inf`,
/// counts the rest.
pub const BUCKET_BOUNDS: [(u64, &str); 17] = [
    (50_000, "0.00005"),
    (100_000, "0.0001"),
    (250_000, "0.00025"),
    (500_000, "0.0005"),
    (1_000_000, "0.001"),
    (2_500_000, "0.0025"),
    (5_000_000, "0.005"),
    (10_000_000, "0.01"),
    (25_000_000, "0.025"),
    (50_000_000, "0.05"),
    (100_000_000, "0.1"),
    (250_000_000, "0.25"),
    (500_000_000, "0.5"),
    (1_000_000_000, "1"),
    (2_500_000_000, "2.5"),
    (5_000_000_000, "5"),
    (10_000_000_000, "10"),
];

/// The finite buckets and `+Inf`.
const BUCKETS: usize = BUCKET_BOUNDS.len() + 1;

/// Durations by bucket, and their sum.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
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

/// The first bucket whose bound is at least `ns`. Most durations are short,
/// so a scan from the smallest bucket ends within a few comparisons.
fn bucket_of(ns: u64) -> usize {
    BUCKET_BOUNDS
        .iter()
        .position(|&(bound, _)| ns <= bound)
        .unwrap_or(BUCKET_BOUNDS.len())
}

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
    fn a_duration_lands_in_the_first_bucket_that_holds_it() {
        let histogram = Histogram::default();
        histogram.record(Duration::from_micros(50)); // le 0.00005, inclusive
        histogram.record(Duration::from_micros(51));
        histogram.record_shared(Duration::from_millis(3));
        histogram.record(Duration::from_secs(11));
        histogram.record(Duration::MAX);
        assert_eq!(histogram.bucket(0), 1);
        assert_eq!(histogram.bucket(1), 1);
        assert_eq!(histogram.bucket(6), 1);
        assert_eq!(histogram.bucket(BUCKET_BOUNDS.len()), 2);
        assert_eq!(histogram.count(), 5);
    }
}
