//! Exactly-once with request keys (docs/protocol.md, section 12): every
//! keyed increment, retried or sent again as often as it was, takes effect
//! once while the object remembers its key.
//!
//! The checks weigh *logical* increments: the attempts of one key fold
//! into one, sent when its first attempt was and answered by its first
//! acknowledgement (or, without one, by its last attempt; uncertain if any
//! attempt was). A key stays one increment while the object can remember
//! it: an attempt sent after `KEYS_REMEMBERED` other keys of the player
//! were first sent since the key's first send may find it forgotten and run
//! again, so unless its answer shows it was remembered it starts a new
//! logical increment (a "forgotten" key, counted apart; see `forgotten`).
//! On the logical increments the rules of `check.rs` hold as for unkeyed
//! ones, and two more:
//!
//! - every attempt of a key that was acknowledged got the same value (a
//!   retry or a resend answered from memory);
//! - per player, with `A` logical increments acknowledged and `U` never
//!   acknowledged (given up while uncertain, or not retried: a burst's),
//!   the final counter `F` obeys `A - L <= F <= A + U`. `F - A` is the
//!   number of increments applied but never acknowledged; `L` is 0 under
//!   `on_write`, so there `F` counts each acknowledged key exactly once. Under
//!   `interval`, `L` counts the acknowledged increments lost with the state:
//!   those a later request (or the final read) did not see, each excused as
//!   `check.rs` excuses a loss (its owner was declared down or killed after
//!   it); the verdict names them.

use std::collections::BTreeMap;

use super::check::{ok_value, History, Verdict};
use super::client::{Kind, Op, Outcome};

/// `router.request_keys_max`: the keyed answers an object remembers per
/// player (the nodes run with the default).
pub const KEYS_REMEMBERED: usize = 128;

pub const TWO_VALUES: &str = "every attempt of a key gets the same value";
pub const EXACTLY_ONCE: &str =
    "final counter = acknowledged keys + at most the unacknowledged (less those lost with the state)";

/// What the clients' keys came to, for the summary.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Ledger {
    /// Distinct keys sent.
    pub keys: usize,
    /// Logical increments acknowledged.
    pub acknowledged: usize,
    /// Logical increments acknowledged after more than one attempt.
    pub retried: usize,
    /// Retries whose value was below one acknowledged to another key
    /// before the retry was sent: only a remembered answer is that old.
    pub remembered: usize,
    /// Acknowledged keys sent once more, and those answered alike.
    pub resent: usize,
    pub resent_alike: usize,
    /// Logical increments never acknowledged.
    pub unacknowledged: usize,
    /// Keys retried so late that they may have been forgotten.
    pub forgotten: usize,
    /// Per player, the final counter against its keys.
    pub finals: Vec<String>,
}

impl Ledger {
    pub fn render(&self) -> String {
        format!(
            "keys {}: acknowledged {}, retried {} (answered from memory, provably: {}), \
             resent after an acknowledgement {} (answered alike {}), never acknowledged {}, \
             retried after {KEYS_REMEMBERED} newer keys {}",
            self.keys,
            self.acknowledged,
            self.retried,
            self.remembered,
            self.resent,
            self.resent_alike,
            self.unacknowledged,
            self.forgotten
        ) + &self
            .finals
            .iter()
            .map(|line| format!("\n  {line}"))
            .collect::<String>()
    }
}

/// One logical increment: the attempts of one key the object could still
/// remember, in send order.
struct Life<'a> {
    attempts: Vec<&'a Op>,
}

impl Life<'_> {
    fn acked(&self) -> Option<&Op> {
        self.attempts
            .iter()
            .copied()
            .filter(|op| ok_value(op).is_some())
            .min_by_key(|op| op.answer_us)
    }

    /// The attempts folded into one operation.
    fn fold(&self) -> Op {
        let first = self.attempts[0];
        let last = self.attempts[self.attempts.len() - 1];
        let tries = self.attempts.len() as u32;
        if let Some(acked) = self.acked() {
            return Op {
                send_us: first.send_us,
                attempt: tries,
                ..acked.clone()
            };
        }
        let uncertain = self.attempts.iter().rev().find_map(|op| match &op.outcome {
            Outcome::Uncertain(why) => Some(why.clone()),
            _ => None,
        });
        Op {
            send_us: first.send_us,
            attempt: tries,
            outcome: match uncertain {
                Some(why) => Outcome::Uncertain(format!("{why} (last of {tries} attempts)")),
                None => first.outcome.clone(),
            },
            ..last.clone()
        }
    }
}

/// A player's keyed increments as logical increments.
fn lives_of<'a>(ops: &[&'a Op]) -> Vec<Life<'a>> {
    let mut by_key: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.kind == Kind::Incr && op.key != 0) {
        by_key.entry(op.key).or_default().push(op);
    }
    let mut first_sends: Vec<u64> = by_key
        .values()
        .map(|attempts| attempts.iter().map(|op| op.send_us).min().unwrap())
        .collect();
    first_sends.sort_unstable();
    let newer = |from: u64, to: u64| {
        first_sends.partition_point(|&at| at < to) - first_sends.partition_point(|&at| at <= from)
    };
    // The largest value acknowledged (to any key) before each time.
    let mut acks: Vec<(u64, i64)> = ops
        .iter()
        .filter(|op| op.kind == Kind::Incr)
        .filter_map(|op| Some((op.answer_us, ok_value(op)?)))
        .collect();
    acks.sort_unstable();
    for i in 1..acks.len() {
        acks[i].1 = acks[i].1.max(acks[i - 1].1);
    }
    let best_before = |at: u64| {
        let n = acks.partition_point(|ack| ack.0 < at);
        n.checked_sub(1).map(|i| acks[i].1)
    };
    let mut lives = Vec::new();
    for mut attempts in by_key.into_values() {
        attempts.sort_by_key(|op| op.send_us);
        let mut life = Life {
            attempts: Vec::new(),
        };
        for op in attempts {
            if let Some(first) = life.attempts.first() {
                if forgotten(&life, op, newer(first.send_us, op.send_us), best_before) {
                    lives.push(std::mem::replace(
                        &mut life,
                        Life {
                            attempts: Vec::new(),
                        },
                    ));
                }
            }
            life.attempts.push(op);
        }
        lives.push(life);
    }
    lives
}

/// Whether attempt `op` of `life`'s key, sent after `newer` other keys of
/// the player were first sent, may have found the key forgotten and run
/// again: a new logical increment. Not when the object cannot have moved
/// on (fewer than `KEYS_REMEMBERED` newer keys), nor when its answer shows
/// it was remembered: the value the key was acknowledged with before, or
/// one below a value acknowledged before the attempt was sent (a run of it
/// then would have given more). An uncertain one may have run again.
fn forgotten(life: &Life, op: &Op, newer: usize, best_before: impl Fn(u64) -> Option<i64>) -> bool {
    if newer < KEYS_REMEMBERED {
        return false;
    }
    let Some(value) = ok_value(op) else {
        return true;
    };
    let remembered = life.acked().and_then(ok_value) == Some(value)
        || best_before(op.send_us).is_some_and(|best| best > value);
    !remembered
}

impl History {
    /// The operations the checks weigh: unkeyed ones as they are, each
    /// keyed increment's attempts folded into logical increments; and the
    /// ledger of the keys.
    pub fn logical_ops(&self, verdict: &mut Verdict) -> (Vec<Op>, Ledger) {
        let mut by_player: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
        for op in &self.ops {
            by_player.entry(op.player).or_default().push(op);
        }
        let mut logical: Vec<Op> = Vec::new();
        let mut ledger = Ledger::default();
        for ops in by_player.values() {
            logical.extend(
                ops.iter()
                    .filter(|op| op.key == 0 || op.kind != Kind::Incr)
                    .map(|op| (*op).clone()),
            );
            let lives = lives_of(ops);
            let mut keys: Vec<u64> = lives.iter().map(|life| life.attempts[0].key).collect();
            keys.dedup();
            ledger.keys += keys.len();
            ledger.forgotten += lives.len() - keys.len();
            let folded: Vec<Op> = lives.iter().map(Life::fold).collect();
            // Acknowledgements in answer order, with the largest value so
            // far: what a retry sent later could not be below unless it
            // was answered from memory.
            let mut acks: Vec<(u64, i64)> = folded
                .iter()
                .filter_map(|op| Some((op.answer_us, ok_value(op)?)))
                .collect();
            acks.sort_unstable();
            for i in 1..acks.len() {
                acks[i].1 = acks[i].1.max(acks[i - 1].1);
            }
            let best_before = |at: u64| {
                let n = acks.partition_point(|ack| ack.0 < at);
                n.checked_sub(1).map(|i| acks[i].1)
            };
            for (life, op) in lives.iter().zip(&folded) {
                let Some(acked) = life.acked() else {
                    ledger.unacknowledged += 1;
                    continue;
                };
                ledger.acknowledged += 1;
                let value = ok_value(acked).unwrap();
                let before_ack = life
                    .attempts
                    .iter()
                    .filter(|attempt| attempt.send_us < acked.answer_us)
                    .count();
                if before_ack > 1 {
                    ledger.retried += 1;
                    if acked.attempt > 1 && best_before(acked.send_us).is_some_and(|v| v > value) {
                        ledger.remembered += 1;
                    }
                }
                for other in life.attempts.iter().filter(|a| a.send_us > acked.answer_us) {
                    ledger.resent += 1;
                    if ok_value(other) == Some(value) {
                        ledger.resent_alike += 1;
                    }
                }
                for other in &life.attempts {
                    let Some(again) = ok_value(other) else {
                        continue;
                    };
                    if again == value {
                        continue;
                    }
                    let later = if other.answer_us > acked.answer_us {
                        other
                    } else {
                        acked
                    };
                    match self.excuse(op, later.answer_us) {
                        Some(why) => verdict
                            .allowances
                            .push(format!("two values: {acked} and {other}: allowed, {why}")),
                        None => verdict.violate(TWO_VALUES, format!("{acked}\n      and {other}")),
                    }
                }
            }
            logical.extend(folded);
        }
        (logical, ledger)
    }

    /// The final counters against the acknowledged keys (see the module's
    /// rule), for the players whose increments carried keys.
    pub fn check_exactly_once(&self, verdict: &mut Verdict, by_player: &BTreeMap<u64, Vec<&Op>>) {
        for (&player, ops) in by_player {
            if !ops.iter().any(|op| op.key != 0) {
                continue;
            }
            let Some(last) = self
                .finals
                .iter()
                .filter(|read| read.player == player)
                .find_map(|read| Some((read.value.clone().ok()?, read.at_us)))
            else {
                continue;
            };
            let incrs = ops.iter().filter(|op| op.kind == Kind::Incr);
            let acked = incrs.clone().filter(|op| ok_value(op).is_some()).count() as i64;
            let open = incrs
                .filter(|op| matches!(op.outcome, Outcome::Uncertain(_)))
                .count() as i64;
            let lost = if self.interval {
                self.lost_with_state(verdict, player, ops, last)
            } else {
                0
            };
            let (value, _) = last;
            if let Some(ledger) = verdict.ledger.as_mut() {
                ledger.finals.push(format!(
                    "player {player}: final {value} = {acked} keys acknowledged - {lost} lost with the state + {} of {open} never acknowledged",
                    value - acked + lost
                ));
            }
            if value < acked - lost || value > acked + open {
                verdict.violate(
                    EXACTLY_ONCE,
                    format!(
                        "player {player}: final {value}, {acked} keys acknowledged ({lost} lost with the state), {open} never acknowledged"
                    ),
                );
            }
        }
    }

    /// Under `interval`, the acknowledged increments of `player` a later
    /// request or the final read did not see, excused by a loss of the
    /// state; a note names them.
    fn lost_with_state(
        &self,
        verdict: &mut Verdict,
        player: u64,
        ops: &[&Op],
        (final_value, final_us): (i64, u64),
    ) -> i64 {
        // Readers by send time, each with the smallest acknowledged value
        // it contradicts, and the smallest of those from each on.
        let mut readers: Vec<(u64, i64, u64)> = ops
            .iter()
            .filter_map(|op| {
                let value = ok_value(op)?;
                let contradicts = match op.kind {
                    Kind::Incr => value,
                    Kind::Get => value + 1,
                };
                Some((op.send_us, contradicts, op.answer_us))
            })
            .collect();
        readers.push((final_us, final_value + 1, final_us));
        readers.sort_unstable();
        let mut lowest = readers.clone();
        for i in (0..lowest.len().saturating_sub(1)).rev() {
            if lowest[i + 1].1 <= lowest[i].1 {
                lowest[i] = lowest[i + 1];
            }
        }
        let mut lost: Vec<(&Op, String)> = Vec::new();
        for op in ops.iter().filter(|op| op.kind == Kind::Incr) {
            let Some(value) = ok_value(op) else { continue };
            let first = readers.partition_point(|reader| reader.0 <= op.answer_us);
            let Some(&(_, contradicts, seen_us)) = lowest.get(first) else {
                continue;
            };
            if contradicts <= value {
                if let Some(why) = self.excuse(op, seen_us) {
                    lost.push((op, why));
                }
            }
        }
        if let Some((op, why)) = lost.first() {
            let values: Vec<i64> = lost.iter().filter_map(|(op, _)| ok_value(op)).collect();
            verdict.notes.push(format!(
                "player {player}: {} acknowledged keys lost with the state (values {}..={}), the first {op}: {why}",
                lost.len(),
                values.iter().min().unwrap(),
                values.iter().max().unwrap(),
            ));
        }
        lost.len() as i64
    }
}
