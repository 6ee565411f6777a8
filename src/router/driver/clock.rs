//! The router's clock: milliseconds of the monotonic clock since a
//! process-wide anchor, the same on every core of the node.
//!
//! Every duration the router measures (lock observation, route cache age,
//! the membership lease) is measured on this node's own monotonic clock,
//! so no decision compares two nodes' clocks, and a wall-clock step (NTP,
//! an operator) changes none of them.

use std::sync::OnceLock;
use std::time::Instant;

static ANCHOR: OnceLock<Instant> = OnceLock::new();

fn anchor() -> Instant {
    *ANCHOR.get_or_init(Instant::now)
}

/// Milliseconds since the anchor, at least 1 (0 is never a time).
pub fn now_ms() -> u64 {
    ms_at(Instant::now())
}

/// The clock's reading at `at` (an `Instant` the caller read already).
pub fn ms_at(at: Instant) -> u64 {
    at.saturating_duration_since(anchor()).as_millis() as u64 + 1
}

/// The `Instant` of reading `ms`.
pub fn instant_at(ms: u64) -> Instant {
    anchor() + std::time::Duration::from_millis(ms.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn readings_grow_and_convert_both_ways() {
        let first = now_ms();
        assert!(first >= 1);
        std::thread::sleep(Duration::from_millis(5));
        let later = now_ms();
        assert!(later >= first + 5);
        assert_eq!(ms_at(instant_at(later)), later);
    }
}
