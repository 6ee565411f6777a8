//! The inputs off the request path, by family: membership (a member's
//! state, this node's lease, fence and rejoin, draining, a node or link
//! lost) and the operator's (transfer, drain, shutdown, the listings).
//! Rare beside requests, they are applied here, so that
//! `RouterDriver::apply` keeps the request arms together and inline.

use std::cell::RefMut;
use std::time::Instant;

use super::{Input, RouterDriver, TRANSFER_WAITERS_MAX};
use crate::clock;
use crate::ids::NodeId;
use crate::router::{ErrorCode, RouterCore, TransferError};

impl RouterDriver {
    /// A membership input, applied to `core` (borrowed for it).
    pub(super) fn apply_membership(
        &self,
        mut core: RefMut<'_, RouterCore>,
        now: u64,
        input: Input,
    ) {
        match input {
            Input::Member {
                node,
                incarnation,
                state,
            } => core.on_member(node, incarnation, state),
            Input::Lease { until_ms } if self.0.pause.borrow().admits(until_ms) => {
                core.extend_lease(now, until_ms)
            }
            Input::Lease { .. } => {}
            Input::LeaseEnd { at_ms } => core.end_lease(at_ms),
            Input::Fence => {
                core.fence(now);
                drop(core);
                // At once, not at the turn's end: what waits to be written
                // was made by the incarnation that just ended.
                self.0.answer_gate.fence();
            }
            Input::Rejoin {
                incarnation,
                lease_until_ms,
            } => core.rejoin(now, incarnation, lease_until_ms),
            Input::Draining(draining) => core.set_draining(draining),
            Input::LinkLost { .. } => {}
            _ => unreachable!("apply hands only membership inputs to apply_membership"),
        }
    }

    /// An operator's input, applied to `core` (borrowed for it).
    pub(super) fn apply_operator(&self, mut core: RefMut<'_, RouterCore>, now: u64, input: Input) {
        match input {
            Input::Shutdown { deadline_ms } => core.shutdown(now, deadline_ms),
            Input::Transfer { key, target, done } => {
                let busy = self.0.transfer_waiters.borrow().len() >= TRANSFER_WAITERS_MAX;
                let started = if busy {
                    Err(TransferError::InProgress)
                } else {
                    core.transfer(now, key, target, true)
                };
                match started {
                    Ok(()) => {
                        self.0.transfer_waiters.borrow_mut().insert(key, done);
                    }
                    Err(error) => {
                        drop(core);
                        done(Err(error));
                    }
                }
            }
            Input::Drain { concurrency } => {
                core.start_drain(concurrency);
                core.drain_step(now);
            }
            Input::DrainStep => core.drain_step(now),
            _ => unreachable!("apply hands only operator inputs to apply_operator"),
        }
    }
}

impl RouterDriver {
    /// Abandons the requests waiting on `node`, then applies `input` (its
    /// end in membership).
    pub(super) fn abandon_then(&self, now_ms: u64, node: NodeId, input: Input) {
        self.abandon_requests_to(now_ms, node);
        if let Input::Member {
            node,
            incarnation,
            state,
        } = input
        {
            self.0.core.borrow_mut().on_member(node, incarnation, state);
        }
    }

    /// The requests this core sent `node` will get no answer from it (it
    /// ended, or the link that carried them broke): answered TIMEOUT now
    /// (see `forwarded`).
    pub(super) fn abandon_requests_to(&self, now_ms: u64, node: NodeId) {
        let abandoned = self.0.forwarded.borrow_mut().take_node(now_ms, node);
        if !abandoned.is_empty() {
            tracing::debug!(
                node = node.0,
                requests = abandoned.len(),
                "answering the requests a lost node held"
            );
        }
        for request in abandoned {
            self.reply(request, Err(ErrorCode::Timeout.into()), Instant::now());
        }
    }

    /// A page of this core's entries of `type_id` (see
    /// `RouterCore::objects_page`), for the admin endpoint's listing.
    pub fn objects_page(
        &self,
        type_id: u32,
        after: Option<u64>,
        limit: usize,
    ) -> Vec<crate::router::EntryView> {
        self.0.core.borrow().objects_page(type_id, after, limit)
    }

    /// This core's hottest objects (see `RouterCore::hot_objects`).
    pub fn hot_objects(&self) -> (Vec<crate::router::HotObject>, u64) {
        self.0.core.borrow_mut().hot_objects(clock::now_ms())
    }
}
