//! The events that enter a step from outside the state machine: a
//! request, a message from another node, a timer. Each finds what it is
//! for and hands it to the dispatcher (`core.rs`) as the `Next` it starts;
//! none runs a step itself.

use wire::ObjectKey;

use super::core::{checked, run_route, RouterCore};
use super::entry::{Entry, Manager, Waiter};
use super::handler::timer_event;
use super::steps::Next;
use super::types::{ErrorCode, NodeMessage, Request, RouterHead, Timer, TransferOutcome};
use crate::store::{NodeId, RouteVersion};

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

    /// A request entering at this core: from the gateway or a handler
    /// (`RouterHead::local`) or routed from another node.
    pub fn on_request(&mut self, now_ms: u64, head: RouterHead, request: Request) {
        self.ctx.counters.requests_total += 1;
        let waiter = Waiter {
            head,
            request,
            repairs: 0,
            fresh_pull: false,
            send_attempts: 0,
            unreachable: None,
        };
        self.dispatch(now_ms, waiter);
    }

    /// A message `SendToNode` emitted did not leave: the link to `node`
    /// refused it (queue full, link down). A request is re-resolved once,
    /// from a fresh read of its route, and sent again only to another node
    /// (else answered UNAVAILABLE); a transfer notification ends the
    /// handoff at once (its pending queue drains, as on an ack timeout);
    /// acks and route syncs are left to the peer's timeouts and later
    /// requests.
    pub fn on_send_failed(&mut self, now_ms: u64, node: NodeId, message: NodeMessage) {
        self.ctx.counters.send_failures_total += 1;
        match message {
            NodeMessage::Routed { head, request } => {
                let key = head.key;
                if let Some(entry) = self.entry_mut(key) {
                    // The route that sent it there is suspect: re-read it.
                    if !entry.is_writable() {
                        entry.last_refresh_ms = None;
                    }
                }
                let waiter = Waiter {
                    head: RouterHead {
                        forward_hops: head.forward_hops.saturating_sub(1),
                        ..head
                    },
                    request,
                    repairs: 0,
                    fresh_pull: false,
                    send_attempts: 1,
                    unreachable: Some(node),
                };
                self.dispatch(now_ms, waiter);
            }
            NodeMessage::RouterTransfer(transfer) => {
                self.transfer_ack_timeout(now_ms, transfer.key, transfer.transfer_id)
            }
            // The catalog picked that node; this core has no catalog to
            // pick another, so the request is answered now.
            NodeMessage::ServiceRequest { request, .. } => {
                self.ctx.reply(&request, Err(ErrorCode::Unavailable.into()))
            }
            NodeMessage::TransferAck { .. } | NodeMessage::RouterUpdateSync { .. } => {}
        }
    }

    /// `router_update_sync`: updates only an existing cache with an older
    /// route version; ignores missing caches, newer caches and objects.
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
        if entry.is_writable() || entry.route_version >= route_version {
            return;
        }
        entry.set_route(owner_node, owner_incarnation, route_version);
        entry.last_refresh_ms = Some(now_ms);
        checked(key, entry);
        self.ctx.counters.update_syncs_applied_total += 1;
    }

    pub fn on_timer(&mut self, now_ms: u64, timer: Timer) {
        match timer {
            Timer::WriteRetry { key } => self.retry_write(now_ms, key),
            Timer::Sweep => self.sweep(now_ms),
            Timer::PullRetry { key } => self.retry_pull(now_ms, key),
            Timer::TransferAck { key, transfer_id } => {
                self.transfer_ack_timeout(now_ms, key, transfer_id)
            }
            Timer::ShutdownDeadline => self.shutdown_deadline(now_ms),
            Timer::Object {
                key,
                activation,
                tag,
            } => self.on_object_timer(now_ms, key, activation, tag),
        }
    }

    /// Re-issues the read of a pull that got EAGAIN.
    pub(crate) fn retry_pull(&mut self, now_ms: u64, key: ObjectKey) {
        self.run_on(now_ms, key, Next::PullAgain);
    }

    /// Timer `tag` of the activation `activation` of `key` fired: the
    /// object gets a timer event, in order with its requests, if it is
    /// still writable on this core. A copy dropped since (degraded, moved,
    /// fenced) took its timers with it.
    pub(crate) fn on_object_timer(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        activation: u64,
        tag: u64,
    ) {
        if !self.entry_mut(key).is_some_and(|entry| entry.is_writable()) {
            return;
        }
        self.ctx.counters.object_timers_total += 1;
        let waiter = Waiter {
            head: RouterHead::local(key, self.ctx.node),
            request: timer_event(activation, tag),
            repairs: 0,
            fresh_pull: false,
            send_attempts: 0,
            unreachable: None,
        };
        self.run_on(now_ms, key, Next::Route(waiter));
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

    /// Routes one request: runs it here, queues it, or sends it on. Every
    /// path ends in exactly one of: queued, sent, answered.
    pub(crate) fn dispatch(&mut self, now_ms: u64, waiter: Waiter) {
        let ctx = &mut self.ctx;
        let key = waiter.head.key;
        if ctx.shutdown.as_ref().is_some_and(|s| s.expired) {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
            return;
        }
        let Some(manager) = self.managers.get_mut(&key.type_id) else {
            ctx.reply(&waiter.request, Err(ErrorCode::BadRequest.into()));
            return;
        };
        let Manager { kind, entries } = manager;
        let entry = match entries.entry(key) {
            hashbrown::hash_map::Entry::Occupied(occupied) => occupied.into_mut(),
            hashbrown::hash_map::Entry::Vacant(vacant) => {
                if ctx.entries_total >= ctx.config.entries_per_core_max {
                    ctx.counters.entries_full_total += 1;
                    ctx.reply(&waiter.request, Err(ErrorCode::Overloaded.into()));
                    return;
                }
                ctx.entries_total += 1;
                vacant.insert(Entry::new(now_ms))
            }
        };
        run_route(ctx, kind.as_ref(), key, entry, now_ms, waiter);
        checked(key, entry);
    }
}
