//! The claim step: the CAS write that makes this node the owner, either
//! `pull_object`'s claim on the record it read or a `router_transfer`
//! target's confirmation of the state shipped to it, and their answers.

use wire::ObjectKey;

use super::Next;
use crate::ids::NodeId;
use crate::router::ctx::{ack, Ctx, StoreWait};
use crate::router::entry::{Entry, Io, PendingWrite, Writable};
use crate::router::handler::{ObjectState, ObjectType};
use crate::router::mutant::{self, Mutant};
use crate::router::output::{after_failed_write, fail_waiters};
use crate::router::types::{ErrorCode, RouterTransfer, StoreOp, StoreReply};
use crate::store::{RouteRecord, WriteCondition, WriteOutcome};

/// The claim write: CAS on the record read, this node as owner, a route
/// version above both the record's and the entry's.
pub(crate) fn start(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    record: Option<RouteRecord>,
) -> Next {
    let state = match kind.decode(key, record.as_ref().map(|r| r.state.as_slice())) {
        Ok(state) => state,
        Err(_) => {
            entry.io = None;
            fail_waiters(ctx, entry, ErrorCode::Internal);
            return Next::Done;
        }
    };
    let known = record.as_ref().map_or(entry.route_version, |r| {
        r.route_version.max(entry.route_version)
    });
    let route_version = if mutant::active(Mutant::ClaimKeepsRouteVersion) {
        known
    } else {
        known.next()
    };
    let (condition, bytes) = match record {
        Some(record) => (WriteCondition::CasEquals(record.cas_version), record.state),
        None => (WriteCondition::Absent, state.encode()),
    };
    let pending = PendingWrite {
        owner_node: ctx.node,
        owner_incarnation: ctx.incarnation,
        route_version,
        save_timepoint_ms: now_ms,
    };
    let write = entry.begin_write(key, condition, pending, bytes, |write| Io::Claim {
        write,
        state,
    });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
    Next::Done
}

/// The answer to `pull_object`'s claim (`write`, making `state` writable).
pub(crate) fn reply(
    ctx: &mut Ctx,
    entry: &mut Entry,
    now_ms: u64,
    (write, state): (PendingWrite, Box<dyn ObjectState>),
    reply: StoreReply,
) -> Next {
    let mut fresh = false;
    match reply {
        StoreReply::Written(outcome @ WriteOutcome::Applied(_)) => {
            claimed(ctx, entry, write, state, &outcome, now_ms);
        }
        StoreReply::Written(outcome) => fresh = after_failed_write(ctx, entry, now_ms, &outcome),
        // Not applied: the route is unchanged; the waiters try again.
        _ => {}
    }
    Next::FinishIo { fresh_pull: fresh }
}

/// `router_transfer` at the target, with the entry it found or made for
/// the key: confirm the shipped state by CAS on the CAS version the
/// sender's write produced (the ack follows the answer). Refuses (acks
/// false) when it knows a newer route or is busy with this key.
pub(crate) fn accept_transfer(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    entry: &mut Entry,
    now_ms: u64,
    from_node: NodeId,
    transfer: RouterTransfer,
) -> Next {
    let key = transfer.key;
    if entry.is_writable() {
        // A duplicate notification of a handoff already confirmed.
        let accepted = entry.route_version >= transfer.route_version;
        ack(ctx, from_node, key, transfer.transfer_id, accepted);
        return Next::Done;
    }
    let refused = ctx.is_shutting_down()
        || !ctx.may_serve(now_ms)
        || entry.route_version > transfer.route_version
        || entry.io.is_some()
        || entry.transferring.is_some();
    if refused {
        ack(ctx, from_node, key, transfer.transfer_id, false);
        return Next::Done;
    }
    let Ok(state) = kind.decode(key, Some(&transfer.state)) else {
        ack(ctx, from_node, key, transfer.transfer_id, false);
        return Next::Done;
    };
    // The sender's write named this node (incarnation as the sender knew
    // it); the confirmation below rewrites it with this incarnation.
    entry.set_route(ctx.node, transfer.owner_incarnation, transfer.route_version);
    entry.set_cas(transfer.cas_version, now_ms);
    entry.last_refresh_ms = Some(now_ms);
    entry.last_access_ms = now_ms;
    let pending = PendingWrite {
        owner_node: ctx.node,
        owner_incarnation: ctx.incarnation,
        route_version: transfer.route_version,
        save_timepoint_ms: now_ms,
    };
    let condition = WriteCondition::CasEquals(transfer.cas_version);
    let transfer_id = transfer.transfer_id;
    let write = entry.begin_write(key, condition, pending, transfer.state, |write| {
        Io::TransferClaim {
            from: from_node,
            transfer_id,
            write,
            state,
        }
    });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
    Next::Done
}

/// The answer to the target's confirmation write: acked to the sender
/// (accepted iff this node now owns the object).
pub(crate) fn transfer_reply(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    (from_node, transfer_id): (NodeId, u64),
    (write, state): (PendingWrite, Box<dyn ObjectState>),
    reply: StoreReply,
) -> Next {
    let mut fresh = false;
    let accepted = match reply {
        StoreReply::Written(outcome @ WriteOutcome::Applied(_)) => {
            claimed(ctx, entry, write, state, &outcome, now_ms)
        }
        StoreReply::Written(outcome) => {
            fresh = after_failed_write(ctx, entry, now_ms, &outcome);
            false
        }
        _ => false,
    };
    ack(ctx, from_node, key, transfer_id, accepted);
    Next::FinishIo { fresh_pull: fresh }
}

/// A claim's write applied (a pull's claim, or a transfer target's): the
/// entry becomes writable with the state decoded for it, unless the node
/// fenced meanwhile: then the record names this node's ended incarnation,
/// which any node may claim, and nothing is served from it here.
fn claimed(
    ctx: &mut Ctx,
    entry: &mut Entry,
    write: PendingWrite,
    state: Box<dyn ObjectState>,
    applied: &WriteOutcome,
    now_ms: u64,
) -> bool {
    if !ctx.may_serve(now_ms) || ctx.incarnation != write.owner_incarnation {
        entry.apply_written(write, applied, now_ms);
        entry.last_refresh_ms = None;
        return false;
    }
    let previous_owner = entry.owner_node;
    if !previous_owner.is_none() && previous_owner != ctx.node {
        ctx.counters.dead_owner_claims_total += 1;
    }
    assert!(entry.object.is_none(), "a writable object is claimed once");
    entry.apply_written(write, applied, now_ms);
    entry.object = Some(Writable {
        state,
        changes_unsaved: 0,
        changes_in_write: 0,
        last_save_ms: now_ms,
        aside: false,
        held: Vec::new(),
        held_failed: 0,
    });
    ctx.counters.claims_total += 1;
    true
}
