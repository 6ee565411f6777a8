//! What the router runs beside its managers: requests of stateless
//! services (no entry, no ownership: the handler runs where the request
//! landed) and the timers objects armed.

use wire::ObjectKey;

use super::core::{Manager, RouterCore};
use super::dispatch::{dispatch_entry, release};
use super::entry::Waiter;
use super::handler::{timer_event, HandlerOutput};
use super::types::{ErrorCode, Request, RouterHead};

impl RouterCore {
    /// A request for the stateless service of `key.type_id`, picked to run
    /// on this node (by this node's catalog, or by the node that sent it).
    /// Answered UNAVAILABLE when this node does not run that service (the
    /// sender's catalog was stale) or its shutdown deadline passed.
    pub fn on_service_request(&mut self, _now_ms: u64, key: ObjectKey, request: Request) {
        let ctx = &mut self.ctx;
        ctx.counters.requests_total += 1;
        let expired = ctx.shutdown.as_ref().is_some_and(|s| s.expired);
        let service = self.services.get(&key.type_id).filter(|_| !expired);
        let Some(service) = service else {
            ctx.reply(&request, Err(ErrorCode::Unavailable.into()));
            return;
        };
        let mut out = HandlerOutput::default();
        service.handle(key, &request, &mut out);
        ctx.counters.service_requests_total += 1;
        // A stateless service has no key to be called back on; its adapter
        // never asks for either, and nothing is armed for a service here.
        debug_assert!(out.calls.is_empty() && out.timers.is_empty());
        out.calls.clear();
        out.timers.clear();
        release(ctx, &request, &mut out);
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
        let ctx = &mut self.ctx;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return;
        };
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        if !entry.is_writable() {
            return;
        }
        ctx.counters.object_timers_total += 1;
        let waiter = Waiter {
            head: RouterHead::local(key, ctx.node),
            request: timer_event(activation, tag),
            repairs: 0,
            fresh_pull: false,
            send_attempts: 0,
            unreachable: None,
        };
        dispatch_entry(ctx, kind.as_ref(), key, entry, now_ms, waiter);
    }
}
