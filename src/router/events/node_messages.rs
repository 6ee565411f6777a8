//! What other nodes send: routed requests, `router_update_sync`, a
//! transfer's shipped state (`router_transfer`) and its ack.

use wire::ObjectKey;

use crate::ids::{NodeId, RouteVersion};
use crate::router::core::{checked, run, RouterCore};
use crate::router::ctx::ack;
use crate::router::entry::{Entry, Manager};
use crate::router::mutant::{self, Mutant};
use crate::router::steps::{claim, transfer, Next};
use crate::router::types::{NodeMessage, RouterTransfer, TransferOutcome};

impl RouterCore {
    /// Every node-to-node message, from `from_node`.
    pub fn on_node_message(&mut self, now_ms: u64, from_node: NodeId, message: NodeMessage) {
        match message {
            NodeMessage::Routed { head, request } => self.on_request(now_ms, head, request),
            NodeMessage::RouterUpdateSync {
                key,
                owner_node,
                owner_incarnation,
                route_version,
            } => self.on_router_update_sync(
                now_ms,
                key,
                owner_node,
                owner_incarnation,
                route_version,
            ),
            NodeMessage::RouterTransfer(transfer) => {
                self.on_router_transfer(now_ms, from_node, transfer)
            }
            NodeMessage::TransferAck {
                key,
                transfer_id,
                accepted,
            } => self.on_transfer_ack(now_ms, key, transfer_id, accepted),
            NodeMessage::ServiceRequest { key, request } => {
                self.on_service_request(now_ms, key, request)
            }
        }
    }

    /// `router_update_sync`: updates only an existing cache with an older
    /// route version; ignores missing caches, newer caches and objects, and
    /// an entry with a write in flight: that write's answer is what moves
    /// its route (a claim that applied names a route the sync's sender
    /// may already have moved past, and an entry never adopts its own
    /// write below the route it knows). A read in flight adopts only a
    /// record not older than the route the sync set.
    pub fn on_router_update_sync(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        owner_node: NodeId,
        owner_incarnation: u64,
        route_version: RouteVersion,
    ) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let writing = entry.io.as_ref().is_some_and(|io| !io.is_pull());
        if entry.is_writable() || writing || entry.route_version >= route_version {
            return;
        }
        entry.set_route(owner_node, owner_incarnation, route_version);
        entry.last_refresh_ms = Some(now_ms);
        checked(key, entry);
        self.ctx.counters.update_syncs_applied_total += 1;
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
                vacant.insert(Box::new(Entry::new(now_ms)))
            }
        };
        let next = claim::accept_transfer(ctx, kind.as_ref(), entry, now_ms, from_node, transfer);
        run(ctx, kind.as_ref(), key, entry, now_ms, next);
        checked(key, entry);
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

    /// The end of a transfer's notification (answered, refused, or timed
    /// out): the handoff ends and its pending queue drains either way.
    pub(crate) fn end_notify(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        transfer_id: u64,
        outcome: TransferOutcome,
    ) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        if !transfer::awaits_ack(entry, transfer_id) {
            return;
        }
        if outcome == TransferOutcome::NoAnswer {
            self.ctx.counters.transfer_ack_timeouts_total += 1;
        }
        let accepted = outcome == TransferOutcome::Confirmed;
        // The leak `finish_transfer` closes, planted back: the handoff never ends, or
        // ends dropping its queue.
        if !accepted && mutant::active(Mutant::PendingNotRedispatched) {
            return;
        }
        if !accepted && mutant::active(Mutant::PendingDropped) {
            if let Some(entry) = self.entry_mut(key) {
                entry.transferring = None;
            }
            return;
        }
        self.run_on(now_ms, key, Next::FinishTransfer(outcome));
    }
}
