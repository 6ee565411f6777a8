//! A bound on how long a closing connection may take to send what it owes.
//!
//! A session closed gracefully (the peer's end of stream, a protocol
//! violation, an idle close, a kick) leaves the session table at once, but
//! its connection's task lives on until its writer has sent the answers
//! queued before the close. A peer that stopped reading (a zero receive
//! window) keeps that last send in the kernel for as long as it keeps the
//! TCP connection up: the task, its session slot, its socket, the send's
//! buffer and its queue stayed with it for good, where no idle sweep or
//! eviction sees them (both walk the session table). Each connection whose
//! read side ends while its writer still waits is watched here, and one
//! still writing `CLOSE_FLUSH_MAX` later is aborted: what it owes is
//! dropped and the socket shut down (its send fails), counted in
//! `routerd_gateway_close_flush_timeouts_total`.
//!
//! A sorted queue, not a timer per connection: every deadline is the same
//! length after its start, so entries are appended in deadline order, and
//! the idle sweep pops the due ones from the front. A connection whose
//! task ended sooner is dropped there unseen (its outbox is held weakly).

use std::collections::VecDeque;
use std::rc::Weak;
use std::time::{Duration, Instant};

use crate::gateway::outbox::{Outbox, OutboxState};

/// How long a closing connection may take to send what it owes.
pub(crate) const CLOSE_FLUSH_MAX: Duration = Duration::from_secs(5);

/// A core's connections that are closing while their writer waits, in
/// deadline order.
#[derive(Default)]
pub(crate) struct Closing {
    watched: VecDeque<(Instant, Weak<Outbox>)>,
}

impl Closing {
    /// Watches the connection of `outbox`, whose read side ended at `now`
    /// while its writer still waits.
    pub(crate) fn watch(&mut self, outbox: Weak<Outbox>, now: Instant) {
        self.watched.push_back((now + CLOSE_FLUSH_MAX, outbox));
    }

    /// Aborts the watched connections still writing at their deadline;
    /// returns how many it aborted.
    pub(crate) fn abort_overdue(&mut self, now: Instant) -> u64 {
        let mut aborted = 0;
        while let Some((deadline, _)) = self.watched.front() {
            if *deadline > now {
                break;
            }
            let (_, outbox) = self.watched.pop_front().expect("a front entry");
            if let Some(outbox) = outbox.upgrade() {
                if outbox.state() != OutboxState::Aborted {
                    outbox.abort();
                    aborted += 1;
                }
            }
        }
        aborted
    }

    /// Connections watched, ended or not (for the tests of the bound).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.watched.len()
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    #[test]
    fn a_connection_still_writing_at_its_deadline_is_aborted() {
        let mut closing = Closing::default();
        let start = Instant::now();
        let stuck = Rc::new(Outbox::with_bounds(16, 1024));
        stuck.close();
        let flushed = Rc::new(Outbox::with_bounds(16, 1024));
        flushed.close();
        closing.watch(Rc::downgrade(&stuck), start);
        closing.watch(Rc::downgrade(&flushed), start + Duration::from_millis(1));
        let ended = Rc::new(Outbox::with_bounds(16, 1024));
        closing.watch(Rc::downgrade(&ended), start + Duration::from_millis(2));
        drop(ended);
        // Before the deadline nothing is touched.
        assert_eq!(closing.abort_overdue(start + CLOSE_FLUSH_MAX / 2), 0);
        assert_eq!(stuck.state(), OutboxState::Closing);
        // The second one's writer got its send out and aborted itself
        // meanwhile (a failed send): not counted again.
        flushed.abort();
        let after = start + CLOSE_FLUSH_MAX + Duration::from_millis(5);
        assert_eq!(closing.abort_overdue(after), 1);
        assert_eq!(stuck.state(), OutboxState::Aborted);
        assert_eq!(closing.len(), 0);
    }

    #[test]
    fn only_due_entries_leave_the_queue() {
        let mut closing = Closing::default();
        let start = Instant::now();
        let outboxes: Vec<Rc<Outbox>> = (0..3)
            .map(|_| Rc::new(Outbox::with_bounds(16, 1024)))
            .collect();
        for (i, outbox) in outboxes.iter().enumerate() {
            closing.watch(Rc::downgrade(outbox), start + Duration::from_secs(i as u64));
        }
        let at = start + CLOSE_FLUSH_MAX + Duration::from_millis(1500);
        assert_eq!(closing.abort_overdue(at), 2);
        assert_eq!(closing.len(), 1);
        assert_eq!(outboxes[2].state(), OutboxState::Open);
    }
}
