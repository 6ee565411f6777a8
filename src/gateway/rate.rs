//! The per-session request rate limit: a token bucket kept as one
//! timestamp (the generic cell rate algorithm), so admitting a request is
//! two additions and a comparison, with no division and no clock read: the
//! driver's `now` is the bucket's only time.

use std::time::{Duration, Instant};

/// `gateway.session_requests_per_sec_max` and
/// `gateway.session_request_burst_max` in the form the check uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRate {
    /// The time one request's token takes to refill (1 s / rate).
    interval: Duration,
    /// How far ahead of `now` the bucket's theoretical arrival time may be
    /// and still admit: (burst - 1) x interval, so a full bucket admits
    /// `burst` requests at one instant.
    tolerance: Duration,
}

impl RequestRate {
    /// The limit of `per_sec_max` requests a second with bursts of
    /// `burst_max`; `None` (no limit) when either is 0.
    pub fn new(per_sec_max: u32, burst_max: u32) -> Option<RequestRate> {
        if per_sec_max == 0 || burst_max == 0 {
            return None;
        }
        // Rounded down: a rate that does not divide a second is enforced a
        // little generously, never more strictly than configured.
        let interval = Duration::from_nanos(1_000_000_000 / u64::from(per_sec_max));
        // At most 1e9 requests a second: a 0 interval would admit anything.
        let interval = interval.max(Duration::from_nanos(1));
        Some(RequestRate {
            interval,
            tolerance: interval * (burst_max - 1),
        })
    }
}

/// One session's bucket. It starts full.
#[derive(Clone, Copy, Debug)]
pub struct RequestBucket {
    /// When the bucket would next be full again if nothing more arrived
    /// (the theoretical arrival time of the next request).
    full_at: Instant,
}

impl RequestBucket {
    pub fn new(now: Instant) -> RequestBucket {
        RequestBucket { full_at: now }
    }

    /// Takes one token at `now`; `false` (and nothing taken) when the
    /// bucket is empty. A `now` earlier than a previous one (the driver's
    /// readings are monotonic, a replay may reuse an older one) only makes
    /// the check stricter.
    #[inline]
    pub fn admit(&mut self, rate: &RequestRate, now: Instant) -> bool {
        let start = self.full_at.max(now);
        if start > now + rate.tolerance {
            return false;
        }
        self.full_at = start + rate.interval;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_unlimited() {
        assert_eq!(RequestRate::new(0, 10), None);
        assert_eq!(RequestRate::new(10, 0), None);
        assert!(RequestRate::new(1, 1).is_some());
    }

    #[test]
    fn a_full_bucket_admits_the_burst_then_refills_at_the_rate() {
        // 1000 a second: one token a millisecond, bursts of 5.
        let rate = RequestRate::new(1000, 5).unwrap();
        let start = Instant::now();
        let mut bucket = RequestBucket::new(start);
        for i in 0..5 {
            assert!(bucket.admit(&rate, start), "request {i} of the burst");
        }
        assert!(!bucket.admit(&rate, start), "the sixth at once");
        assert!(!bucket.admit(&rate, start + Duration::from_micros(999)));
        assert!(bucket.admit(&rate, start + Duration::from_millis(1)));
        assert!(!bucket.admit(&rate, start + Duration::from_millis(1)));
        // Idle long enough and it is full again, but never fuller.
        let later = start + Duration::from_secs(10);
        for i in 0..5 {
            assert!(bucket.admit(&rate, later), "request {i} after the pause");
        }
        assert!(!bucket.admit(&rate, later));
    }

    #[test]
    fn a_steady_stream_at_the_rate_is_never_refused() {
        let rate = RequestRate::new(1000, 1).unwrap();
        let start = Instant::now();
        let mut bucket = RequestBucket::new(start);
        for i in 0..10_000u64 {
            assert!(bucket.admit(&rate, start + Duration::from_millis(i)), "{i}");
        }
        assert!(!bucket.admit(&rate, start + Duration::from_micros(9_999_500)));
    }

    #[test]
    fn a_refused_request_takes_nothing() {
        let rate = RequestRate::new(1000, 2).unwrap();
        let start = Instant::now();
        let mut bucket = RequestBucket::new(start);
        assert!(bucket.admit(&rate, start));
        assert!(bucket.admit(&rate, start));
        for _ in 0..1000 {
            assert!(!bucket.admit(&rate, start));
        }
        // Refused requests did not push the refill further away.
        assert!(bucket.admit(&rate, start + Duration::from_millis(1)));
    }
}
