//! One-way events that met their object while the core may not serve.
//!
//! A lapsed lease or a fence pauses the core: a request is answered
//! UNAVAILABLE and its client retries, but a one-way event (an object's
//! timer, a message from another object, the answer to a `ctx.call`, a
//! gateway notice) has nobody to retry it. Dropping it stopped a room's
//! self-arming tick for good, left a call waiting for its answer forever,
//! and leaked the object's count of pending timers. They wait here instead,
//! in arrival order, and run again once the core may serve (a heartbeat
//! extended the lease, or the node rejoined).

use std::collections::VecDeque;

use super::entry::Waiter;

/// Events kept at most: past it (or past the bytes below) an event is
/// dropped and counted. A lapse lasts about a heartbeat; this holds the
/// timers of tens of thousands of objects firing in it.
const PAUSED_EVENTS_MAX: usize = 65_536;
/// Bytes of event bodies kept at most.
const PAUSED_BYTES_MAX: usize = 64 << 20;

#[derive(Default)]
pub(crate) struct PausedEvents {
    waiters: VecDeque<Waiter>,
    bytes: usize,
}

impl PausedEvents {
    /// Keeps `waiter` for later; false (and it is dropped) when the bound
    /// is reached.
    pub fn keep(&mut self, waiter: Waiter) -> bool {
        let bytes = waiter.request.body.len();
        if self.waiters.len() >= PAUSED_EVENTS_MAX || self.bytes + bytes > PAUSED_BYTES_MAX {
            return false;
        }
        self.bytes += bytes;
        self.waiters.push_back(waiter);
        true
    }

    /// Whether an event waits.
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Every event kept, oldest first; none are left.
    pub fn take(&mut self) -> VecDeque<Waiter> {
        self.bytes = 0;
        std::mem::take(&mut self.waiters)
    }
}
