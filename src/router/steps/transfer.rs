//! The transfer step, the sender's side of a handoff: `transfer` (whether
//! it may start), `remove_object` (persisting the target as the owner with
//! the next route version) and shipping the state in `router_transfer`.
//! The target's side is a claim (`claim::accept_transfer`).

use wire::ObjectKey;

use super::Next;
use crate::router::ctx::{Ctx, StoreWait};
use crate::router::entry::{Entry, Io, PendingWrite, Transferring};
use crate::router::mutant::{self, Mutant};
use crate::router::output::after_failed_write;
use crate::router::types::{
    NodeMessage, RouterTransfer, StoreOp, StoreReply, Timer, TransferDone, TransferError,
    TransferOutcome,
};
use crate::store::{NodeId, WriteOutcome};

/// Why this node may not hand anything to `target` now, if it may not.
pub(crate) fn refusal(ctx: &Ctx, now_ms: u64, target: NodeId) -> Option<TransferError> {
    if ctx.is_shutting_down() {
        return Some(TransferError::ShuttingDown);
    }
    if !ctx.may_serve(now_ms) {
        return Some(TransferError::Fenced);
    }
    if target == ctx.node {
        return Some(TransferError::SameNode);
    }
    // The record names the target with its live incarnation; a target
    // without one could never confirm.
    let target_available = target.is_none() || ctx.live_incarnation(target).is_some();
    if !target_available {
        return Some(TransferError::TargetUnavailable);
    }
    if ctx
        .members
        .get(&target)
        .is_some_and(|member| member.draining)
    {
        return Some(TransferError::TargetDraining);
    }
    None
}

/// Whether the transfer of `entry` asked for now must wait (queued for the
/// end of its IO), or was refused, or starts now.
pub(crate) fn ask(
    entry: &mut Entry,
    target: NodeId,
    need_notify: bool,
) -> Result<Next, TransferError> {
    if !entry.is_writable() || entry.is_aside() {
        return Err(TransferError::NotWritable);
    }
    if entry.transferring.is_some() || entry.queued_transfer.is_some() {
        return Err(TransferError::InProgress);
    }
    // Held on_write outputs are settled by their save first (`on_flush`
    // starts it, the end of its IO starts the transfer).
    if entry.io.is_some() || entry.holds_outputs() {
        entry.queued_transfer = Some((target, need_notify));
        return Ok(Next::Done);
    }
    Ok(Next::Transfer {
        target,
        need_notify,
    })
}

/// Steps 1 and 2 of the handoff: transferring flag, then `remove_object`
/// persisting the new owner with the next route version through CAS.
pub(crate) fn start(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    target: NodeId,
    need_notify: bool,
) -> Next {
    assert!(entry.io.is_none(), "one IO per object at a time");
    assert!(
        entry.transferring.is_none(),
        "one transfer per object at a time"
    );
    let condition = entry.known_condition();
    let Some(object) = entry.object.as_ref() else {
        // Asked for while IO ran, and the IO lost the object meanwhile.
        let done = TransferDone {
            key,
            target,
            outcome: TransferOutcome::NotMoved,
            route_version: entry.route_version,
        };
        ctx.transfer_done(done);
        return Next::Done;
    };
    let route_version = entry.route_version.next();
    let state = object.state.encode();
    // The record names the target at its live incarnation, so that a
    // target that dies before confirming leaves a claimable record.
    let pending = PendingWrite {
        owner_node: target,
        owner_incarnation: ctx.live_incarnation(target).unwrap_or(0),
        route_version,
        save_timepoint_ms: now_ms,
    };
    let write = entry.begin_write(key, condition, pending, state.clone(), |write| Io::Remove {
        write,
    });
    ctx.next_transfer_id += 1;
    entry.transferring = Some(Transferring {
        target,
        need_notify,
        transfer_id: ctx.next_transfer_id,
        transfer_pending: Default::default(),
        shipped_state: state,
    });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
    Next::Done
}

/// The outcome of `remove_object`'s write (persisting `write`). The
/// entry's IO was taken off for it.
pub(crate) fn remove_reply(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    write: PendingWrite,
    reply: StoreReply,
) -> Next {
    let outcome = match reply {
        StoreReply::Written(applied @ WriteOutcome::Applied(cas_version)) => {
            if !mutant::active(Mutant::RemoveKeepsObject) {
                entry.downgrade();
            }
            entry.apply_written(write, &applied, now_ms);
            ctx.counters.transfers_total += 1;
            let Some(t) = entry.transferring.as_mut() else {
                return Next::Done;
            };
            if t.need_notify && !t.target.is_none() {
                let message = NodeMessage::RouterTransfer(RouterTransfer {
                    key,
                    transfer_id: t.transfer_id,
                    owner_incarnation: write.owner_incarnation,
                    route_version: write.route_version,
                    cas_version,
                    save_timepoint_ms: write.save_timepoint_ms,
                    state: std::mem::take(&mut t.shipped_state),
                });
                let timer = Timer::TransferAck {
                    key,
                    transfer_id: t.transfer_id,
                };
                let target = t.target;
                ctx.send(target, message);
                ctx.arm(now_ms + ctx.config.transfer_ack_timeout_ms, timer);
                return Next::Done;
            }
            TransferOutcome::Written
        }
        StoreReply::Written(outcome) => {
            ctx.counters.transfers_failed_total += 1;
            entry.downgrade();
            after_failed_write(ctx, entry, now_ms, &outcome);
            TransferOutcome::NotMoved
        }
        // Not applied: this node still owns the object and keeps it.
        _ => {
            ctx.counters.transfers_failed_total += 1;
            TransferOutcome::NotMoved
        }
    };
    Next::FinishTransfer(outcome)
}

/// Whether an answer (or its timeout) to transfer `transfer_id`'s
/// notification finds the handoff still waiting for it.
pub(crate) fn awaits_ack(entry: &Entry, transfer_id: u64) -> bool {
    entry
        .transferring
        .as_ref()
        .is_some_and(|t| t.transfer_id == transfer_id && entry.io.is_none())
}
