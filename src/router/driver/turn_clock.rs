//! The clock reading the inputs of one router turn are judged at.
//!
//! A turn handles up to `INPUTS_PER_TURN_MAX` inputs, and requests are
//! judged (the lease among others) at a clock reading rather than at one
//! read per request, which would cost a few percent of the core at high
//! rates. A reading taken once at the turn's start is wrong when the turn
//! itself is long: a process stopped (`SIGSTOP`, a starved CPU) inside a
//! busy turn for longer than `cluster.down_after_ms` would resume and
//! answer the rest of the turn's requests at the old reading, inside a
//! lease that ran out meanwhile, after another node took its objects over.
//! So the clock is read again every `INPUTS_PER_READING` inputs: an input
//! is judged at most that many inputs after the reading it uses, the same
//! bound as one poll's lateness for a short turn.
//!
//! A pause hidden from the clock (`clock::PauseTimer`) shows only in the
//! kernel's timer, which costs a system call to read inside a turn. It is
//! read once at the end of a long turn, before the answers the turn held
//! leave (`held`): a pause inside the turn ends the lease there, and every
//! answer the turn made is withheld. Read with every clock reading, it was
//! a `read` for every 41 requests at full load (16 connections x pipeline
//! 16); read once a long turn, one for every 137.

use super::RouterDriver;
use crate::clock::PauseTimer;

/// Inputs judged at one clock reading at most.
pub(super) const INPUTS_PER_READING: usize = 32;

/// One turn's clock: the reading its next input is judged at.
pub(super) struct TurnClock {
    reading_ms: u64,
    inputs_at_reading: usize,
    /// Whether a reading was taken after the first.
    long: bool,
}

impl TurnClock {
    /// A turn whose first reading is `reading_ms`.
    pub(super) fn new(reading_ms: u64) -> TurnClock {
        TurnClock {
            reading_ms,
            inputs_at_reading: 0,
            long: false,
        }
    }

    /// Whether the turn judged more inputs than one reading may: a pause
    /// could then have hidden inside it, between readings.
    pub(super) fn was_long(&self) -> bool {
        self.long
    }

    /// The reading the next input is judged at: the current one, or a
    /// fresh one from `read` when the current one judged
    /// `INPUTS_PER_READING` inputs already. Readings never go back.
    pub(super) fn next(&mut self, read: impl FnOnce() -> u64) -> u64 {
        if self.inputs_at_reading == INPUTS_PER_READING {
            self.reading_ms = self.reading_ms.max(read());
            self.inputs_at_reading = 0;
            self.long = true;
        }
        self.inputs_at_reading += 1;
        self.reading_ms
    }
}

/// The barrier after a pause no clock counted (`clock::PauseTimer`: the
/// kernel's timer counted it): the lease ends at once, and only a lease
/// from a heartbeat sent after the pause renews it (one sent before says
/// nothing of the time the pause hid, in which another node may have
/// declared this one down and claimed its objects).
pub(super) struct PauseBarrier {
    timer: PauseTimer,
    fence_after_ms: u64,
    /// Leases from heartbeats sent before this reading renew nothing.
    renew_from_ms: u64,
}

impl PauseBarrier {
    pub(super) fn new(fence_after_ms: u64) -> PauseBarrier {
        PauseBarrier {
            timer: PauseTimer::new(),
            fence_after_ms,
            renew_from_ms: 0,
        }
    }

    /// Whether a lease to `until_ms` (a heartbeat's send time +
    /// `fence_after_ms`) came from a heartbeat sent after the last pause.
    pub(super) fn admits(&self, until_ms: u64) -> bool {
        until_ms >= self.renew_from_ms.saturating_add(self.fence_after_ms)
    }
}

impl RouterDriver {
    /// The clock reading `now_ms` at a turn's start, checked against the
    /// kernel's timer as the core last saw it (no system call: the ring
    /// watches the timer, and a turn starts after a kernel entry reaped
    /// what it fired): when a pause hid from the clock, the core's lease
    /// ends now, before any input is judged at this reading.
    pub(super) fn checked_reading(&self, now_ms: u64) -> u64 {
        let hidden = self.0.pause.borrow_mut().timer.check(now_ms);
        self.after_check(now_ms, hidden)
    }

    /// [`RouterDriver::checked_reading`] at the end of a long turn, which
    /// no kernel entry interrupted: the timer is read now (a system call
    /// per long turn).
    pub(super) fn checked_reading_now(&self, now_ms: u64) -> u64 {
        let hidden = self.0.pause.borrow_mut().timer.check_now(now_ms);
        self.after_check(now_ms, hidden)
    }

    fn after_check(&self, now_ms: u64, hidden: Option<u64>) -> u64 {
        let mut barrier = self.0.pause.borrow_mut();
        if let Some(hidden_ms) = hidden {
            barrier.renew_from_ms = now_ms;
            tracing::warn!(
                hidden_ms,
                core = self.0.core_id,
                "a pause no clock counted: serving nothing until a heartbeat sent after it applies"
            );
            self.0.core.borrow_mut().end_lease(now_ms);
        }
        now_ms
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::router::driver::INPUTS_PER_TURN_MAX;

    /// A process stopped for 10 s after the 100th input of a full turn: the
    /// inputs after it are judged at the time it resumed, within
    /// `INPUTS_PER_READING` inputs, not at the turn's start.
    #[test]
    fn a_pause_inside_a_turn_is_seen_within_a_few_dozen_inputs() {
        let clock = Cell::new(1_000);
        let mut turn = TurnClock::new(clock.get());
        let mut judged = Vec::new();
        for input in 0..INPUTS_PER_TURN_MAX {
            if input == 100 {
                clock.set(11_000);
            }
            judged.push(turn.next(|| clock.get()));
        }
        assert!(judged[..100].iter().all(|at| *at == 1_000));
        let first_late = judged.iter().position(|at| *at == 11_000).unwrap();
        assert!((100..=100 + INPUTS_PER_READING).contains(&first_late));
        assert!(judged[first_late..].iter().all(|at| *at == 11_000));
    }

    /// Only a turn that judged inputs past its first reading reads the
    /// kernel's timer at its end (a system call).
    #[test]
    fn a_turn_is_long_once_it_took_a_second_reading() {
        let mut turn = TurnClock::new(1_000);
        for _ in 0..INPUTS_PER_READING {
            turn.next(|| 1_000);
        }
        assert!(!turn.was_long());
        turn.next(|| 1_001);
        assert!(turn.was_long());
    }

    #[test]
    fn only_a_heartbeat_sent_after_a_pause_renews_the_lease() {
        let mut barrier = PauseBarrier::new(400);
        assert!(barrier.admits(400));
        barrier.renew_from_ms = 10_000;
        // Sent at 9_900, answered after the pause: renews nothing.
        assert!(!barrier.admits(9_900 + 400));
        assert!(barrier.admits(10_000 + 400));
    }

    #[test]
    fn one_reading_serves_a_few_dozen_inputs() {
        let reads = Cell::new(0);
        let mut turn = TurnClock::new(1);
        for _ in 0..INPUTS_PER_TURN_MAX {
            turn.next(|| {
                reads.set(reads.get() + 1);
                1
            });
        }
        assert_eq!(reads.get(), INPUTS_PER_TURN_MAX / INPUTS_PER_READING - 1);
    }
}
