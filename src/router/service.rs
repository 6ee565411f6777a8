//! What the router runs beside its managers: requests of stateless
//! services (no entry, no ownership: the handler runs where the request
//! landed).

use wire::ObjectKey;

use super::core::RouterCore;
use super::handler::HandlerOutput;
use super::output::emit;
use super::types::{ErrorCode, Request};

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
        emit(ctx, &request, &mut out);
    }
}
