//! One monotonic clock in nanoseconds for every thread of the generator.
//!
//! `CLOCK_MONOTONIC` is system-wide on Linux, so a timestamp taken on one
//! thread (and carried in a `room.say` text) can be subtracted from one taken
//! on another thread of this process.

/// Nanoseconds since an arbitrary, fixed point (boot).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec, and CLOCK_MONOTONIC is
    // always supported on Linux, so the call only writes into `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
        assert!(a > 0);
    }
}
