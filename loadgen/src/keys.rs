//! `--keys`: every `player.incr` carries a request key of its own, and one
//! whose outcome is uncertain (UNAVAILABLE, TIMEOUT, INTERNAL, or lost with
//! its connection) is sent again with the same key, as docs/protocol.md
//! (section 12) tells a client to: the server answers a key it remembers
//! with the answer it gave, so the increment counts once. The ledger says
//! what the keys came to; its `duplicates` (a counter value acknowledged to
//! two keys of one player, which exactly-once forbids) must stay 0.
//!
//! Retries are not measured: the first attempt's failure is what the
//! latency and error figures count; a retry only settles the increment.

use std::collections::VecDeque;

use serde::Serialize;

/// Attempts a key gets in all; then its outcome stays uncertain.
pub const ATTEMPTS_MAX: u32 = 8;

/// The pause before a key's first retry; it doubles with each attempt, up
/// to `PAUSE_MAX_NS`.
const PAUSE_MIN_NS: u64 = 20_000_000;
const PAUSE_MAX_NS: u64 = 1_000_000_000;

/// What a run's keyed increments came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KeyLedger {
    /// Keyed increments answered OK (each key once, whichever attempt).
    pub acknowledged: u64,
    /// Keys sent again after an uncertain outcome.
    pub retried: u64,
    /// Retry attempts sent.
    pub retries_sent: u64,
    /// Retried keys answered OK in the end.
    pub retried_acknowledged: u64,
    /// Retries answered with a counter below one the connection was shown
    /// before: only a remembered answer is that old (a lower bound of the
    /// retries the server answered from memory).
    pub answered_from_memory: u64,
    /// Keys whose outcome stayed uncertain: attempts used up, the
    /// connection moved to another player, or the run ended first.
    pub given_up: u64,
    /// Counter values acknowledged to two keys of one player; counted
    /// with `--ledger` (which keeps every value), `None` without.
    pub duplicates: Option<u64>,
}

impl KeyLedger {
    /// The report's line.
    pub fn row(&self) -> String {
        let duplicates = self.duplicates.map_or_else(
            || "not counted (needs --ledger)".to_string(),
            |n| n.to_string(),
        );
        format!(
            "  keys          acknowledged {}  retried {} (retries sent {}, acknowledged {}, \
             answered from memory {})  given up {}  duplicates {duplicates}\n",
            self.acknowledged,
            self.retried,
            self.retries_sent,
            self.retried_acknowledged,
            self.answered_from_memory,
            self.given_up
        )
    }

    pub fn merge(&mut self, other: &KeyLedger) {
        self.acknowledged += other.acknowledged;
        self.retried += other.retried;
        self.retries_sent += other.retries_sent;
        self.retried_acknowledged += other.retried_acknowledged;
        self.answered_from_memory += other.answered_from_memory;
        self.given_up += other.given_up;
    }
}

/// A key to send again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    pub key: u64,
    /// The first attempt's intended send time.
    pub intended_ns: u64,
    /// Attempts made so far.
    pub attempts: u32,
    pub due_ns: u64,
    /// The highest counter the connection was shown when it was sent.
    pub seen: Option<i64>,
}

/// One connection's keys waiting to be sent again, and the highest
/// counter its answers showed (its player's).
#[derive(Debug, Default)]
pub struct Retries {
    queue: VecDeque<Retry>,
    highest: Option<i64>,
}

impl Retries {
    /// Attempt `attempts` of `key` had an uncertain outcome at `now_ns`:
    /// queues its retry (true), or gives it up once its attempts are used.
    pub fn uncertain(
        &mut self,
        key: u64,
        intended_ns: u64,
        attempts: u32,
        now_ns: u64,
        ledger: &mut KeyLedger,
    ) -> bool {
        if attempts >= ATTEMPTS_MAX {
            ledger.given_up += 1;
            return false;
        }
        if attempts == 1 {
            ledger.retried += 1;
        }
        let pause = PAUSE_MIN_NS
            .saturating_mul(1 << (attempts - 1).min(16))
            .min(PAUSE_MAX_NS);
        self.queue.push_back(Retry {
            key,
            intended_ns,
            attempts,
            due_ns: now_ns + pause,
            seen: self.highest,
        });
        true
    }

    /// The next retry due by `now_ns`, counted as sent.
    pub fn take_due(&mut self, now_ns: u64, ledger: &mut KeyLedger) -> Option<Retry> {
        let due = self.queue.iter().position(|retry| retry.due_ns <= now_ns)?;
        ledger.retries_sent += 1;
        let mut retry = self.queue.remove(due)?;
        retry.seen = self.highest;
        Some(retry)
    }

    /// Attempt `attempts` of a key was answered OK with `counter`, the
    /// connection having been shown `seen` when the attempt was sent.
    pub fn acknowledged(
        &mut self,
        attempts: u32,
        counter: Option<i64>,
        seen: Option<i64>,
        ledger: &mut KeyLedger,
    ) {
        ledger.acknowledged += 1;
        if attempts > 1 {
            ledger.retried_acknowledged += 1;
            if counter.is_some() && counter < seen {
                ledger.answered_from_memory += 1;
            }
        }
        self.highest = self.highest.max(counter);
    }

    /// A counter an answer showed (a `player.get`, an unkeyed increment).
    pub fn shown(&mut self, counter: Option<i64>) {
        self.highest = self.highest.max(counter);
    }

    /// The connection moves to another player or the run ends: every key
    /// still waiting is given up; returns how many.
    pub fn give_up_all(&mut self, ledger: &mut KeyLedger) -> u64 {
        let count = self.queue.len() as u64;
        ledger.given_up += count;
        self.queue.clear();
        self.highest = None;
        count
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_retried_with_a_growing_pause_until_its_attempts_are_used() {
        let mut retries = Retries::default();
        let mut ledger = KeyLedger::default();
        assert!(retries.uncertain(9, 5, 1, 100, &mut ledger));
        assert_eq!(retries.take_due(100, &mut ledger), None);
        let first = retries
            .take_due(100 + PAUSE_MIN_NS, &mut ledger)
            .expect("due");
        assert_eq!((first.key, first.intended_ns, first.attempts), (9, 5, 1));
        assert!(retries.uncertain(9, 5, 2, 0, &mut ledger));
        assert_eq!(retries.take_due(PAUSE_MIN_NS, &mut ledger), None);
        assert!(retries.take_due(2 * PAUSE_MIN_NS, &mut ledger).is_some());
        assert!(!retries.uncertain(9, 5, ATTEMPTS_MAX, 0, &mut ledger));
        assert_eq!(
            ledger,
            KeyLedger {
                retried: 1,
                retries_sent: 2,
                given_up: 1,
                ..KeyLedger::default()
            }
        );
    }

    #[test]
    fn a_retry_answered_below_what_was_shown_came_from_memory() {
        let mut retries = Retries::default();
        let mut ledger = KeyLedger::default();
        retries.acknowledged(1, Some(4), None, &mut ledger);
        assert!(retries.uncertain(7, 0, 1, 0, &mut ledger));
        retries.acknowledged(1, Some(6), None, &mut ledger);
        let retry = retries.take_due(u64::MAX, &mut ledger).unwrap();
        assert_eq!(retry.seen, Some(6));
        // Key 7 ran at 5, before the increment that showed 6 was sent.
        retries.acknowledged(2, Some(5), Some(6), &mut ledger);
        // A retry that ran afresh shows more than anything before it.
        retries.acknowledged(2, Some(7), Some(6), &mut ledger);
        assert_eq!(
            (
                ledger.acknowledged,
                ledger.retried_acknowledged,
                ledger.answered_from_memory
            ),
            (4, 2, 1)
        );
    }
}
