//! The inputs off the request path, by family: membership (a member's
//! state, this node's lease, fence and rejoin, draining) and the
//! operator's (transfer, drain, shutdown). Rare beside requests, they are
//! applied here, so that `RouterDriver::apply` keeps the request arms
//! together and inline.

use std::cell::RefMut;

use super::{Input, RouterDriver, TRANSFER_WAITERS_MAX};
use crate::router::{RouterCore, TransferError};

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
