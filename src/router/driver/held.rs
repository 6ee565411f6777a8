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
    Reply {
        request: RequestId,
        outcome: Outcome,
        answered_at: Instant,
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

impl RouterDriver {
    /// Holds `held` to the end of the turn (`release_held`).
    pub(super) fn hold(&self, held: Held) {
        self.0.held.borrow_mut().push(held);
    }

    /// Sends what the turn held, in the order it was made: every answer
    /// unless the core, serving at the turn's start (`served_at_start`),
    /// may no longer serve at a reading taken now; then only the refusals
    /// (which changed nothing) with the pushes and kicks.
    pub(super) fn release_held(&self, served_at_start: bool) {
        let mut held = self.0.held.take();
        if held.is_empty() {
            self.0.held.replace(held);
            return;
        }
        let now_ms = self.checked_reading(clock::now_ms());
        let lapsed = served_at_start && !self.0.core.borrow().may_serve(now_ms);
        let mut withheld = 0u64;
        for item in held.drain(..) {
            match item {
                Held::Reply { outcome, .. } if lapsed && outcome.is_ok() => withheld += 1,
                Held::Reply {
                    request,
                    outcome,
                    answered_at,
                } => self.reply(request, outcome, answered_at),
                Held::Push {
                    client,
                    route_id,
                    body,
                } => self.push(client, route_id, body),
                Held::Kick { client } => self.kick(client),
            }
        }
        // Kept, so a turn allocates nothing once the vector has grown.
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
