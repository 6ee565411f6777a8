//! The transfer step, the sender's side of a handoff: `transfer` (whether
//! it may start), `remove_object` (persisting the target as the owner with
//! the next route version) and shipping the state in `router_transfer`.
//! The target's side is a claim (`claim::accept_transfer`).

use wire::ObjectKey;

use super::Next;
use crate::ids::NodeId;
use crate::router::ctx::{Ctx, StoreWait};
use crate::router::entry::{Entry, Io, PendingWrite, Transferring};
use crate::router::mutant::{self, Mutant};
use crate::router::output::{
    after_failed_write, drop_copy, refuse_during_retry, schedule_write_retry,
};
use crate::router::types::{
    NodeMessage, RouterTransfer, StoreOp, StoreReply, Timer, TransferDone, TransferError,
    TransferOutcome,
};
use crate::store::{CasVersion, WriteOutcome};

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
    // A node id membership never reported is not a member that is down
    // for now: calling again will not help.
    if !target.is_none() && !ctx.knows(target) {
        return Some(TransferError::UnknownNode);
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
    ctx.next_transfer_id += 1;
    entry.transferring = Some(Box::new(Transferring {
        target,
        need_notify,
        transfer_id: ctx.next_transfer_id,
        transfer_pending: Default::default(),
        shipped_state: state,
    }));
    resend(ctx, key, entry, now_ms, pending)
}

/// Writes the handoff's removal (`pending`: the target as the owner, the
/// next route version) by CAS on the record as known, with the state the
/// handoff ships: the first attempt, or another after one whose outcome
/// is unknown (the same content, so either one applying leaves the same
/// record) or after finding an earlier save of the copy applied.
pub(crate) fn resend(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    pending: PendingWrite,
) -> Next {
    assert!(entry.io.is_none(), "one IO per object at a time");
    let Some(transferring) = entry.transferring.as_ref() else {
        return Next::Done;
    };
    let state = transferring.shipped_state.clone();
    let condition = entry.known_condition();
    let pending = PendingWrite {
        save_timepoint_ms: now_ms,
        ..pending
    };
    let write = entry.begin_write(key, condition, pending, state, |write| Io::Remove { write });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
    Next::Done
}

/// The outcome of `remove_object`'s write (persisting `write`). The
/// entry's IO was taken off for it. Applied: the record names the target,
/// the copy goes and the state is shipped. A conflict with a record an own
/// write of unknown outcome left: an earlier attempt of this removal
/// applied (as if this one had), or an earlier save of the copy did (the
/// removal goes again on it). Another conflict: another node owns the
/// object, and the copy is dropped and counted. No known outcome: the copy
/// is kept and blocked, and the removal goes again after a backoff.
pub(crate) fn remove_reply(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    write: PendingWrite,
    reply: StoreReply,
) -> Next {
    let reply = match reply {
        StoreReply::Written(WriteOutcome::Conflict(Some(record)))
            if entry.retried_write_left(&record) =>
        {
            StoreReply::Written(WriteOutcome::Applied(record.cas_version))
        }
        reply => reply,
    };
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
                notify_target(ctx, key, t, write, cas_version, now_ms);
                return Next::Done;
            }
            TransferOutcome::Written
        }
        StoreReply::Written(WriteOutcome::Conflict(Some(record)))
            if entry.own_write_left(&record).is_some() =>
        {
            // A save of the copy whose answer was lost applied (a transfer
            // may start while its retry waits): the copy is still this
            // node's, one version on, and the removal goes again on it.
            ctx.counters.cas_conflicts_total += 1;
            entry.adopt_own_record(&record, now_ms);
            return Next::Remove(write);
        }
        StoreReply::Written(WriteOutcome::Indeterminate) => {
            ctx.counters.store_indeterminate_total += 1;
            entry.write_unknown();
            return retry_later(ctx, key, entry, now_ms, write);
        }
        StoreReply::Written(outcome) => {
            // Another node owns the record now: the copy is dropped, with
            // what no save made durable, counted.
            ctx.counters.transfers_failed_total += 1;
            let owner = match &outcome {
                WriteOutcome::Conflict(Some(record)) => Some(record.owner_node),
                _ => None,
            };
            drop_copy(ctx, key, entry, owner, "another node owns it now");
            after_failed_write(ctx, entry, now_ms, &outcome);
            TransferOutcome::NotMoved
        }
        // Not applied, but an earlier attempt may still apply: only an
        // outcome tells whether the record names the target.
        _ if entry.may_have_given_up(ctx.node) => {
            return retry_later(ctx, key, entry, now_ms, write);
        }
        // Not applied: this node still owns the object and keeps it.
        _ => {
            ctx.counters.transfers_failed_total += 1;
            TransferOutcome::NotMoved
        }
    };
    Next::FinishTransfer(outcome)
}

/// `router_transfer`: ships the state the removal persisted to the target,
/// which confirms it by CAS on `cas_version`, and waits for its ack.
fn notify_target(
    ctx: &mut Ctx,
    key: ObjectKey,
    t: &mut Transferring,
    write: PendingWrite,
    cas_version: CasVersion,
    now_ms: u64,
) {
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
    ctx.send(t.target, message);
    ctx.arm(now_ms + ctx.config.transfer_ack_timeout_ms, timer);
}

/// Keeps the copy and its handoff while whether the removal `write`
/// applied is unknown: nothing runs on the copy until the removal, armed
/// to go again, settles it.
fn retry_later(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    write: PendingWrite,
) -> Next {
    schedule_write_retry(ctx, key, entry, now_ms);
    entry.io = Some(Box::new(Io::RemoveRetry { write }));
    refuse_during_retry(ctx, entry);
    Next::Done
}

/// Whether an answer (or its timeout) to transfer `transfer_id`'s
/// notification finds the handoff still waiting for it.
pub(crate) fn awaits_ack(entry: &Entry, transfer_id: u64) -> bool {
    entry
        .transferring
        .as_ref()
        .is_some_and(|t| t.transfer_id == transfer_id && entry.io.is_none())
}
