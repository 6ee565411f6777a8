//! What a router turn sends to clients, held to the turn's end.
//!
//! A turn hands its answers, pushes and kicks out after its last input, not
//! after each one. A process stopped inside a busy turn (`SIGSTOP`, a
//! starved CPU) for longer than `cluster.down_after_ms` would otherwise
//! write, once it resumes, answers it made before the pause and had queued
//! in user space: past its lease, after another node took its objects over
//! from their last save. Under `interval` those answers acknowledge changes
//! the new owner never saw, and a client's next request reads below them.
//! (The clock reading every few dozen inputs, `turn_clock`, keeps the turn
//! from judging new inputs on the stale lease; it cannot call back what was
//! already handed out.)
//!
//! So at the turn's end the clock is read once more: when the core could
//! serve at the turn's start and may no longer, the turn's successful
//! answers are withheld and counted
//! (`routerd_router_answers_withheld_total`); their requests stay
//! uncertain, as a client's timeout already says. Refusals, pushes and kicks
//! go out as made, in order. A core that could not serve at the turn's start
//! made its answers knowing it (an `on_write` answer its applied save
//! released): they go out. An answer written to the socket before a pause
//! is the kernel's to deliver, and was made and sent inside the lease.

use std::time::Instant;

use super::RouterDriver;
use crate::clock;
use crate::router::{ClientRef, Outcome, RequestId};

/// One thing a turn sends to a client (or to a node on a client's behalf).
pub(super) enum Held {
    /// Timed at the turn's clock reading, as every answer of the turn is.
    Reply {
        request: RequestId,
        outcome: Outcome,
    },
    Push {
        client: ClientRef,
        route_id: u32,
        body: Vec<u8>,
    },
    Kick {
        client: ClientRef,
    },
}

/// What one turn holds, in the order it was made (sans IO: the driver
/// sends what `release` hands it).
#[derive(Default)]
pub(super) struct HeldTurn {
    items: Vec<Held>,
    /// Bytes of the pushes' bodies held.
    bytes: usize,
}

/// What a turn holds at most before it ends early (`is_full`): a turn of
/// 1,024 `room.say` to a room of 4,096 members made 4 M pushes, gigabytes
/// held until its end. The input that passes the bound is handled whole.
const HELD_ITEMS_MAX: usize = 65_536;
const HELD_BYTES_MAX: usize = 32 << 20;

impl HeldTurn {
    /// Holds what `build` makes, built in its slot (`in_place.rs`: an
    /// answer moved through the stack into the vector was a stalled wide
    /// load on the path of every answer).
    #[inline(always)]
    pub(super) fn push_with(&mut self, build: impl FnOnce() -> Held) {
        crate::in_place::push_in_place(&mut self.items, build);
        if let Some(Held::Push { body, .. }) = self.items.last() {
            self.bytes += body.len();
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether the turn holds as much as it may: it ends before its next
    /// input.
    pub(super) fn is_full(&self) -> bool {
        self.items.len() >= HELD_ITEMS_MAX || self.bytes >= HELD_BYTES_MAX
    }

    /// Hands `send` what the turn held, in order: all of it, or, when the
    /// lease `lapsed` during the turn, all but the successful answers.
    /// Returns how many answers were withheld. The vector is kept, so a
    /// turn allocates nothing once it has grown.
    pub(super) fn release(&mut self, lapsed: bool, mut send: impl FnMut(Held)) -> u64 {
        let mut withheld = 0;
        self.bytes = 0;
        for item in self.items.drain(..) {
            match item {
                Held::Reply { outcome, .. } if lapsed && outcome.is_ok() => withheld += 1,
                item => send(item),
            }
        }
        withheld
    }
}

/// Whether the lease ran out during the turn: the core could serve at the
/// turn's start and may not at its end. A core that could not serve at the
/// start made its answers knowing it.
pub(super) fn lapsed_during_turn(served_at_start: bool, may_serve_now: bool) -> bool {
    served_at_start && !may_serve_now
}

impl RouterDriver {
    /// Holds what `build` makes to the end of the turn (`release_held`).
    #[inline(always)]
    pub(super) fn hold(&self, build: impl FnOnce() -> Held) {
        self.0.held.borrow_mut().push_with(build);
    }

    /// Publishes the core's lease to its answers' writers: none (no
    /// cluster), its end, or 0 while fenced.
    pub(super) fn publish_lease(&self) {
        let core = self.0.core.borrow();
        let until_ms = if core.is_fenced() {
            Some(0)
        } else {
            core.lease_until_ms()
        };
        self.0.answer_gate.publish(until_ms);
    }

    /// Sends what the turn held (`HeldTurn::release`), judged at a clock
    /// reading taken now; `served_at_start`: whether the core could serve
    /// at the turn's start; `polled_at`: the turn's reading, which its
    /// answers are timed at.
    pub(super) fn release_held(&self, served_at_start: bool, polled_at: Instant) {
        let mut held = self.0.held.take();
        if held.is_empty() {
            self.0.held.replace(held);
            return;
        }
        let now_ms = self.checked_reading(clock::now_ms());
        let may_serve_now = self.0.core.borrow().may_serve(now_ms);
        let lapsed = lapsed_during_turn(served_at_start, may_serve_now);
        let withheld = held.release(lapsed, |item| match item {
            Held::Reply { request, outcome } => self.reply(request, outcome, polled_at),
            Held::Push {
                client,
                route_id,
                body,
            } => self.push(client, route_id, body),
            Held::Kick { client } => self.kick(client),
        });
        self.0.held.replace(held);
        if withheld > 0 {
            self.0
                .answers_withheld_total
                .set(self.0.answers_withheld_total.get() + withheld);
            tracing::warn!(
                withheld,
                "answers made before a pause withheld: the lease ran out before they could be sent"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeId;
    use crate::router::ErrorCode;

    fn reply(seq: u64, outcome: Outcome) -> Held {
        Held::Reply {
            request: RequestId {
                origin_node: NodeId(1),
                seq,
            },
            outcome,
        }
    }

    fn client() -> ClientRef {
        ClientRef {
            gateway_node: NodeId(1),
            session_id: 7,
            session_epoch: 1,
            player_id: 9,
        }
    }

    /// A turn: an acknowledged increment, a push, a refusal, a kick and a
    /// second answer, in that order.
    fn turn() -> HeldTurn {
        let mut turn = HeldTurn::default();
        turn.push_with(|| reply(1, Ok(vec![1])));
        turn.push_with(|| Held::Push {
            client: client(),
            route_id: 300,
            body: vec![2],
        });
        turn.push_with(|| reply(2, Err(ErrorCode::BadRequest.into())));
        turn.push_with(|| Held::Kick { client: client() });
        turn.push_with(|| reply(3, Ok(vec![3])));
        turn
    }

    /// What left, one letter an item: a(nswer) with its seq, p(ush), k(ick).
    fn sent(turn: &mut HeldTurn, lapsed: bool) -> (String, u64) {
        let mut sent = String::new();
        let withheld = turn.release(lapsed, |item| match item {
            Held::Reply { request, .. } => sent.push_str(&format!("a{}", request.seq)),
            Held::Push { .. } => sent.push('p'),
            Held::Kick { .. } => sent.push('k'),
        });
        (sent, withheld)
    }

    /// A fan-out's pushes fill a turn by bytes or by count; releasing it
    /// empties it for the next.
    #[test]
    fn a_turn_is_full_at_its_bound_of_pushes() {
        let mut turn = HeldTurn::default();
        let push = |bytes: usize| Held::Push {
            client: client(),
            route_id: 100,
            body: vec![0; bytes],
        };
        for _ in 0..31 {
            turn.push_with(|| push(1 << 20));
        }
        assert!(!turn.is_full());
        turn.push_with(|| push(1 << 20));
        assert!(turn.is_full(), "32 MiB of bodies");
        turn.release(false, drop);
        assert!(!turn.is_full());
        for _ in 0..HELD_ITEMS_MAX {
            turn.push_with(|| push(0));
        }
        assert!(turn.is_full(), "as many pushes as a turn holds");
    }

    #[test]
    fn a_turn_inside_its_lease_sends_everything_in_order() {
        assert_eq!(sent(&mut turn(), false), ("a1pa2ka3".into(), 0));
    }

    #[test]
    fn a_lease_that_ran_out_during_the_turn_withholds_only_the_successful_answers() {
        let mut turn = turn();
        assert_eq!(sent(&mut turn, true), ("pa2k".into(), 2));
        // Released once: the next turn starts empty.
        assert!(turn.is_empty());
    }

    #[test]
    fn only_a_lease_held_at_the_start_and_lost_by_the_end_counts_as_lapsed() {
        assert!(lapsed_during_turn(true, false));
        assert!(!lapsed_during_turn(true, true));
        // Not serving at the start: its answers (refusals, or an `on_write`
        // answer its applied save released) were made knowing it.
        assert!(!lapsed_during_turn(false, false));
        assert!(!lapsed_during_turn(false, true));
    }
}
