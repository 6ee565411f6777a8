//! A request entering this core (from its gateway, a handler, or routed
//! from another node), and a message a link could not carry.

use crate::ids::NodeId;
use crate::router::core::{checked, run_route, RouterCore};
use crate::router::entry::{Entry, Manager, Waiter};
use crate::router::types::{ErrorCode, NodeMessage, Request, RouterHead};

impl RouterCore {
    /// A request entering at this core: from the gateway or a handler
    /// (`RouterHead::local`) or routed from another node.
    pub fn on_request(&mut self, now_ms: u64, head: RouterHead, request: Request) {
        self.ctx.counters.requests_total += 1;
        self.ctx.hot.count(now_ms, head.key);
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
                vacant.insert(Box::new(Entry::new(now_ms)))
            }
        };
        run_route(ctx, kind.as_ref(), key, entry, now_ms, waiter);
        checked(key, entry);
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
}
