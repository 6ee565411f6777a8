//! The connections a core is still setting up (a TLS handshake), oldest
//! first, against `gateway.tls_handshakes_max`. At the bound one is
//! evicted rather than the newest refused: the oldest of those that have
//! sent nothing yet (no whole ClientHello), else the oldest of all. So
//! connections that never speak cannot keep real clients out: each holds
//! its slot only until `tls_handshakes_max` newer ones arrived (or its
//! first-bytes deadline, `gateway.tls_client_hello_timeout_ms`, passed),
//! and a real client, whose ClientHello follows its connect, is not
//! evicted for them while any of them is pending.

use std::collections::VecDeque;

/// A bounded queue of pending setups, oldest first; sans-IO (the driver
/// closes what it evicts).
pub(super) struct PendingSetups<T> {
    max: usize,
    queue: VecDeque<T>,
}

impl<T> PendingSetups<T> {
    pub fn new(max: usize) -> PendingSetups<T> {
        PendingSetups {
            max: max.max(1),
            queue: VecDeque::new(),
        }
    }

    /// Admits `entry`; at the bound one pending entry is removed first and
    /// returned, for the caller to close and count: the oldest that
    /// `is_silent`, else the oldest.
    pub fn admit(&mut self, entry: T, is_silent: impl Fn(&T) -> bool) -> Option<T> {
        let evicted = if self.queue.len() >= self.max {
            let at = self.queue.iter().position(is_silent).unwrap_or(0);
            self.queue.remove(at)
        } else {
            None
        };
        self.queue.push_back(entry);
        evicted
    }

    /// The entry `is` picks is done (finished, failed or closed): its slot
    /// is free. `false` if it was not pending (evicted before).
    pub fn release(&mut self, is: impl Fn(&T) -> bool) -> bool {
        match self.queue.iter().position(is) {
            Some(at) => {
                self.queue.remove(at);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_bound_the_oldest_is_evicted_and_the_newest_admitted() {
        let silent = |_: &u32| false;
        let mut pending = PendingSetups::new(3);
        assert_eq!(pending.admit(1, silent), None);
        assert_eq!(pending.admit(2, silent), None);
        assert_eq!(pending.admit(3, silent), None);
        assert_eq!(pending.admit(4, silent), Some(1));
        assert_eq!(pending.admit(5, silent), Some(2));
        assert_eq!(pending.queue.len(), 3);
        // One done in the middle frees its slot; an evicted one is gone.
        assert!(pending.release(|&n| n == 4));
        assert!(!pending.release(|&n| n == 1));
        assert_eq!(pending.admit(6, silent), None);
        assert_eq!(pending.admit(7, silent), Some(3));
    }

    #[test]
    fn the_silent_go_first() {
        // Odd numbers have spoken (a real client's ClientHello arrived).
        let silent = |n: &u32| n.is_multiple_of(2);
        let mut pending = PendingSetups::new(3);
        for n in [1, 2, 3] {
            assert_eq!(pending.admit(n, silent), None);
        }
        assert_eq!(pending.admit(4, silent), Some(2));
        assert_eq!(pending.admit(6, silent), Some(4));
        // Only those that spoke are left but the newest: the oldest goes.
        assert_eq!(pending.admit(5, silent), Some(6));
        assert_eq!(pending.admit(7, silent), Some(1));
    }
}
