//! `transfer`, `remove_object` and `router_transfer`: the ordered handoff of a
//! writable object to another node, shipping its state.

use wire::ObjectKey;

use super::core::{Ctx, Manager, RouterCore, StoreWait};
use super::dispatch::dispatch_entry;
use super::entry::{Entry, Io, PendingWrite, Transferring};
use super::handler::ObjectType;
use super::io::{after_failed_write, claimed, finish_io};
use super::mutant::{self, Mutant};
use super::types::{
    NodeMessage, RouterTransfer, StoreOp, StoreReply, Timer, TransferDone, TransferOutcome,
};
use crate::store::{NodeId, WriteCondition, WriteOutcome};

/// Why `transfer` refused to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferError {
    UnknownType,
    /// This core holds no writable copy of the key.
    NotWritable,
    SameNode,
    /// A transfer of this key is already in progress or queued.
    InProgress,
    ShuttingDown,
    /// Membership does not know the target up (unknown, down or left).
    TargetUnavailable,
    /// The target drains: no object is placed on it.
    TargetDraining,
    /// This node is fenced, or its lease ran out: it moves nothing until
    /// it serves again.
    Fenced,
}

impl RouterCore {
    /// `transfer(key, target, need_notify)`: persist `target` as the owner
    /// with a higher route version, downgrade, then (with `need_notify`)
    /// ship the state to `target` in `router_transfer` and wait for its ack.
    /// Requests arriving meanwhile wait in the pending queue and are all
    /// re-dispatched at the end, whatever the outcome. A `target` of 0
    /// releases ownership. Starts after the object's in-flight IO.
    pub fn transfer(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        target: NodeId,
        need_notify: bool,
    ) -> Result<(), TransferError> {
        let ctx = &mut self.ctx;
        if ctx.is_shutting_down() {
            return Err(TransferError::ShuttingDown);
        }
        if !ctx.may_serve(now_ms) {
            return Err(TransferError::Fenced);
        }
        if target == ctx.node {
            return Err(TransferError::SameNode);
        }
        // The record names the target with its live incarnation; a target
        // without one could never confirm.
        let target_available = target.is_none() || ctx.live_incarnation(target).is_some();
        if !target_available {
            return Err(TransferError::TargetUnavailable);
        }
        if ctx
            .members
            .get(&target)
            .is_some_and(|member| member.draining)
        {
            return Err(TransferError::TargetDraining);
        }
        let manager = self
            .managers
            .get_mut(&key.type_id)
            .ok_or(TransferError::UnknownType)?;
        let entry = manager
            .entries
            .get_mut(&key)
            .filter(|entry| entry.is_writable() && !entry.is_aside())
            .ok_or(TransferError::NotWritable)?;
        if entry.transferring.is_some() || entry.queued_transfer.is_some() {
            return Err(TransferError::InProgress);
        }
        // Held on_write outputs are settled by their save first (`on_flush`
        // starts it, its `finish_io` starts the transfer).
        if entry.io.is_some() || entry.holds_outputs() {
            entry.queued_transfer = Some((target, need_notify));
            return Ok(());
        }
        start_transfer(ctx, key, entry, now_ms, target, need_notify);
        Ok(())
    }

    /// `router_transfer` at the target: confirm the shipped state by CAS on
    /// the CAS version the sender's write produced, then ack. Refuses (acks
    /// false) when it knows a newer route or is busy with this key.
    pub fn on_router_transfer(&mut self, now_ms: u64, from_node: NodeId, transfer: RouterTransfer) {
        let ctx = &mut self.ctx;
        let key = transfer.key;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return ack(ctx, from_node, key, transfer.transfer_id, false);
        };
        let entry = match entries.entry(key) {
            hashbrown::hash_map::Entry::Occupied(occupied) => occupied.into_mut(),
            hashbrown::hash_map::Entry::Vacant(vacant) => {
                if ctx.is_shutting_down() || ctx.entries_total >= ctx.config.entries_per_core_max {
                    return ack(ctx, from_node, key, transfer.transfer_id, false);
                }
                ctx.entries_total += 1;
                vacant.insert(Entry::new(now_ms))
            }
        };
        if entry.is_writable() {
            // A duplicate notification of a handoff already confirmed.
            let accepted = entry.route_version >= transfer.route_version;
            return ack(ctx, from_node, key, transfer.transfer_id, accepted);
        }
        let refused = ctx.is_shutting_down()
            || !ctx.may_serve(now_ms)
            || entry.route_version > transfer.route_version
            || entry.io.is_some()
            || entry.transferring.is_some();
        if refused {
            return ack(ctx, from_node, key, transfer.transfer_id, false);
        }
        let Ok(state) = kind.decode(key, Some(&transfer.state)) else {
            return ack(ctx, from_node, key, transfer.transfer_id, false);
        };
        // The sender's write named this node (incarnation as the sender knew
        // it); the confirmation below rewrites it with this incarnation.
        entry.set_route(ctx.node, transfer.owner_incarnation, transfer.route_version);
        entry.set_cas(transfer.cas_version, now_ms);
        entry.last_refresh_ms = Some(now_ms);
        entry.last_access_ms = now_ms;
        entry.claiming = Some(state);
        let pending = PendingWrite {
            owner_node: ctx.node,
            owner_incarnation: ctx.incarnation,
            route_version: transfer.route_version,
            save_timepoint_ms: now_ms,
        };
        let io = Io::TransferClaim {
            from: from_node,
            transfer_id: transfer.transfer_id,
        };
        let condition = WriteCondition::CasEquals(transfer.cas_version);
        let write = entry.begin_write(io, key, condition, pending, transfer.state);
        ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
    }

    /// The target's answer to `router_transfer`: the handoff ends and the
    /// pending queue drains either way.
    pub fn on_transfer_ack(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        transfer_id: u64,
        accepted: bool,
    ) {
        let outcome = if accepted {
            TransferOutcome::Confirmed
        } else {
            TransferOutcome::Refused
        };
        self.end_notify(now_ms, key, transfer_id, outcome);
    }

    pub(crate) fn transfer_ack_timeout(&mut self, now_ms: u64, key: ObjectKey, transfer_id: u64) {
        self.end_notify(now_ms, key, transfer_id, TransferOutcome::NoAnswer);
    }

    fn end_notify(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        transfer_id: u64,
        outcome: TransferOutcome,
    ) {
        let ctx = &mut self.ctx;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return;
        };
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        let waiting = entry
            .transferring
            .as_ref()
            .is_some_and(|t| t.transfer_id == transfer_id && entry.io.is_none());
        if waiting {
            if outcome == TransferOutcome::NoAnswer {
                ctx.counters.transfer_ack_timeouts_total += 1;
            }
            let accepted = outcome == TransferOutcome::Confirmed;
            if !accepted && mutant::active(Mutant::PendingNotRedispatched) {
                return;
            }
            if !accepted && mutant::active(Mutant::PendingDropped) {
                entry.transferring = None;
                return;
            }
            finish_transfer(ctx, kind.as_ref(), key, entry, now_ms, outcome);
        }
    }
}

fn ack(ctx: &mut Ctx, to: NodeId, key: ObjectKey, transfer_id: u64, accepted: bool) {
    if to != ctx.node && !to.is_none() {
        let message = NodeMessage::TransferAck {
            key,
            transfer_id,
            accepted,
        };
        ctx.send(to, message);
    }
}

/// Steps 1 and 2 of the handoff: transferring flag, then `remove_object`
/// persisting the new owner with the next route version through CAS.
pub(crate) fn start_transfer(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    target: NodeId,
    need_notify: bool,
) {
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
        return;
    };
    let cas_version = entry
        .cas_version
        .expect("a writable object always knows its record's CAS version");
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
    let condition = WriteCondition::CasEquals(cas_version);
    let write = entry.begin_write(Io::Remove, key, condition, pending, state.clone());
    ctx.next_transfer_id += 1;
    entry.transferring = Some(Transferring {
        target,
        need_notify,
        transfer_id: ctx.next_transfer_id,
        transfer_pending: Default::default(),
        shipped_state: state,
    });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
}

/// The outcome of `remove_object`'s write.
pub(crate) fn remove_reply(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    reply: StoreReply,
) {
    entry.io = None;
    let outcome = match reply {
        StoreReply::Written(WriteOutcome::Applied(cas_version)) => {
            let pending = entry
                .pending_write
                .take()
                .expect("a removal has a pending write");
            if !mutant::active(Mutant::RemoveKeepsObject) {
                entry.downgrade();
            }
            entry.apply_write(pending, cas_version, now_ms);
            ctx.counters.transfers_total += 1;
            let Some(t) = entry.transferring.as_mut() else {
                return;
            };
            if t.need_notify && !t.target.is_none() {
                let message = NodeMessage::RouterTransfer(RouterTransfer {
                    key,
                    transfer_id: t.transfer_id,
                    owner_incarnation: pending.owner_incarnation,
                    route_version: pending.route_version,
                    cas_version,
                    save_timepoint_ms: pending.save_timepoint_ms,
                    state: std::mem::take(&mut t.shipped_state),
                });
                let timer = Timer::TransferAck {
                    key,
                    transfer_id: t.transfer_id,
                };
                let target = t.target;
                ctx.send(target, message);
                ctx.arm(now_ms + ctx.config.transfer_ack_timeout_ms, timer);
                return;
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
    entry.pending_write = None;
    finish_transfer(ctx, kind, key, entry, now_ms, outcome);
}

/// The last step, on every outcome: release the migration flag, then
/// re-dispatch every pending request exactly once with the route as it now
/// is (forwarded to the new owner, run here, or answered). The seed's
/// defect (b), fixed: no branch returns before this. Whoever waits for the
/// transfer learns `outcome` first.
fn finish_transfer(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    outcome: TransferOutcome,
) {
    let Some(transferring) = entry.transferring.take() else {
        return;
    };
    ctx.transfer_done(TransferDone {
        key,
        target: transferring.target,
        outcome,
        route_version: entry.route_version,
    });
    for waiter in transferring.transfer_pending {
        dispatch_entry(ctx, kind, key, entry, now_ms, waiter);
    }
    if entry.io.is_none() {
        finish_io(ctx, kind, key, entry, now_ms, false);
    }
}

/// The target's confirmation write of `router_transfer`.
pub(crate) fn transfer_claim_reply(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    (from_node, transfer_id): (NodeId, u64),
    reply: StoreReply,
) {
    let mut fresh = false;
    let accepted = match reply {
        StoreReply::Written(WriteOutcome::Applied(cas_version)) => {
            claimed(ctx, entry, cas_version, now_ms)
        }
        StoreReply::Written(outcome) => {
            fresh = after_failed_write(ctx, entry, now_ms, &outcome);
            false
        }
        _ => false,
    };
    ack(ctx, from_node, key, transfer_id, accepted);
    finish_io(ctx, kind, key, entry, now_ms, fresh);
}
