//! Every request gets an answer unless its loss is provable: the network
//! lost the message carrying it, or the process holding it ended. The
//! router must answer the others within a deadline of simulated time that
//! leaves out the time their holder was paused (a frozen process answers
//! nothing, and clients wait).

use std::collections::{BTreeMap, BTreeSet};

use super::check::Invariant;
use super::world::World;
use crate::router::RequestId;

/// An answer may take this long (true time, pauses of its holder left
/// out). Every wait in the router is bounded far below it: repairs and
/// pull retries (a few store round trips), forwarding hops, the transfer
/// ack timeout, the queue behind one object's IO.
pub(super) const ANSWER_DEADLINE_MS: u64 = 3_000;

struct Pending {
    /// The node whose process holds the request (or its message).
    at: u64,
    deadline_ms: u64,
}

#[derive(Default)]
pub(super) struct Answers {
    pending: BTreeMap<RequestId, Pending>,
    /// (deadline, request) of every pending request, earliest first.
    deadlines: BTreeSet<(u64, RequestId)>,
}

impl Answers {
    /// A client sent `request` to its gateway `node` at `now_ms`.
    pub fn sent(&mut self, request: RequestId, node: u64, now_ms: u64) {
        let deadline_ms = now_ms + ANSWER_DEADLINE_MS;
        self.pending.insert(
            request,
            Pending {
                at: node,
                deadline_ms,
            },
        );
        self.deadlines.insert((deadline_ms, request));
    }

    /// `request` is now held by `node` (routed there, or submitted there).
    pub fn moved(&mut self, request: RequestId, node: u64) {
        if let Some(pending) = self.pending.get_mut(&request) {
            pending.at = node;
        }
    }

    pub fn answered(&mut self, request: RequestId) {
        if let Some(pending) = self.pending.remove(&request) {
            self.deadlines.remove(&(pending.deadline_ms, request));
        }
    }

    /// Provably lost: nobody can answer it.
    pub fn lost(&mut self, request: RequestId) {
        self.answered(request);
    }

    /// `node`'s process ended: what it held is lost.
    pub fn node_lost(&mut self, node: u64) {
        let lost: Vec<RequestId> = self
            .pending
            .iter()
            .filter(|(_, pending)| pending.at == node)
            .map(|(id, _)| *id)
            .collect();
        for request in lost {
            self.answered(request);
        }
    }

    /// `node` resumed after `paused_ms`: what it holds gets that much
    /// longer.
    pub fn resumed(&mut self, node: u64, paused_ms: u64) {
        for (request, pending) in self.pending.iter_mut() {
            if pending.at == node {
                self.deadlines.remove(&(pending.deadline_ms, *request));
                pending.deadline_ms += paused_ms;
                self.deadlines.insert((pending.deadline_ms, *request));
            }
        }
    }

    /// The earliest request whose deadline passed before `now_ms`, its
    /// holder's pause so far left out (`paused_for(node)`: how long the
    /// process holding it has been frozen, if it is): a pause is added to
    /// the deadline only when the process resumes (`resumed`), and one
    /// still going excuses the wait as much.
    fn overdue(&self, now_ms: u64, paused_for: impl Fn(u64) -> u64) -> Option<(u64, RequestId)> {
        self.deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline < now_ms)
            .find(|(deadline, request)| {
                let paused_ms = self.at(*request).map_or(0, &paused_for);
                deadline.saturating_add(paused_ms) < now_ms
            })
            .copied()
    }

    fn at(&self, request: RequestId) -> Option<u64> {
        self.pending.get(&request).map(|pending| pending.at)
    }

    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

impl World {
    /// No request went unanswered past its deadline.
    pub(super) fn check_answers(&self) -> Result<(), String> {
        if self.safety.is_disabled(Invariant::RequestUnanswered) {
            return Ok(());
        }
        let paused_for = |node: u64| {
            self.nodes
                .get(&node)
                .and_then(|n| n.paused.as_ref())
                .map_or(0, |pause| self.now_ms.saturating_sub(pause.since_ms))
        };
        let Some((deadline, request)) = self.answers.overdue(self.now_ms, paused_for) else {
            return Ok(());
        };
        let key = self.ops.get(&request).map(|op| op.key);
        Err(format!(
            "[{}] {request:?} for {key:?}, last at node {:?}, has no answer {} ms after \
             its deadline",
            Invariant::RequestUnanswered.name(),
            self.answers.at(request),
            self.now_ms - deadline,
        ))
    }

    /// At the end of the calm phase: every request was answered or lost
    /// provably.
    pub(super) fn check_all_answered(&self) -> Result<(), String> {
        if self.answers.outstanding() == 0 || self.safety.is_disabled(Invariant::RequestUnanswered)
        {
            return Ok(());
        }
        let (request, pending) = self.answers.pending.first_key_value().expect("outstanding");
        Err(format!(
            "[{}] {request:?}, last at node {}, never answered",
            Invariant::RequestUnanswered.name(),
            pending.at
        ))
    }
}
