//! The router's steps: each a function of one entry (with the core's
//! context) and the event it meets, doing that event's own effects and
//! returning what happens next ([`Next`]). A step never calls another step
//! and no step file imports another: the dispatcher (`core.rs`) is the one
//! place that chains them, so every path through the state machine can be
//! read there.
//!
//! - `route`: a request meets an entry (`filter_router_msg`,
//!   `mutable_cache`, `mutable_object`'s start, `send_msg`, the handler).
//! - `pull`: `pull_cache` / `pull_object` reads and their answers, and the
//!   claim rule deciding whether a read goes on to a claim.
//! - `claim`: the claim write (`pull_object`'s, or a `router_transfer`
//!   target's confirmation) and its answer.
//! - `save`: `save_object` (periodic, on_write, degradation), a fenced
//!   copy's write-back, and their answers.
//! - `transfer`: `transfer` / `remove_object`, the sender's side of a
//!   handoff.
//! - `release`: shutdown's releases, their answers, and its deadline.

use super::entry::{PendingWrite, Waiter};
use super::types::TransferOutcome;
use crate::ids::NodeId;
use crate::store::RouteRecord;

pub(crate) mod claim;
pub(crate) mod pull;
pub(crate) mod release;
pub(crate) mod route;
pub(crate) mod save;
pub(crate) mod transfer;

/// What happens after a step, for the dispatcher to run. Each variant is
/// the start of one step (or the end of an IO, which re-runs `route` for
/// every request that waited).
pub(crate) enum Next {
    /// The event is done with: its effects are queued.
    Done,
    /// Route this request (`route::route`).
    Route(Waiter),
    /// Queue the request behind the entry's IO in flight (bounded).
    Queue(Waiter),
    /// Read the record (`pull::start`), the request queued behind the read.
    Pull { object: bool, waiter: Waiter },
    /// Read the record again after an EAGAIN (`pull::retry`), if the pull
    /// still waits for it.
    PullAgain,
    /// Write the claim on the record the pull read (`claim::start`).
    Claim(Option<RouteRecord>),
    /// Save the copy (`save::start`); `degrade` gives ownership up.
    Save { degrade: bool },
    /// Write a copy kept aside by a fence back (`save::start_readopt`)
    /// unless an IO already runs, then queue the request, if any, behind
    /// that IO.
    Readopt(Option<Waiter>),
    /// The entry's IO ended: every request that waited is routed again
    /// (`fresh_pull`: the route was just read), then a write-back or a
    /// transfer that waited for the IO starts.
    FinishIo { fresh_pull: bool },
    /// Start the handoff of the copy (`transfer::start`).
    Transfer { target: NodeId, need_notify: bool },
    /// Write the handoff's removal of the copy again (`transfer::resend`),
    /// the same owner and route as its earlier attempt.
    Remove(PendingWrite),
    /// The handoff ended with `TransferOutcome`: its pending requests are
    /// routed again, exactly once each.
    FinishTransfer(TransferOutcome),
}
