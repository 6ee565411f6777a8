//! The router's driver: one per core, it performs the effects of
//! that core's [`RouterCore`] for real. Client requests come in from the
//! gateway (it is the gateway's [`PlayerPort`]), requests for objects of
//! other cores travel the mesh as `RouterRequest` frames, store requests go
//! through [`Store`] futures, timers are the core's timers, and answers go back
//! to the gateway: by a plain call for a session of this core (the gateway
//! and this driver share the core, so no frame is needed: DESIGN.md's rkyv
//! frames are for messages that cross cores), as `ClientEgress` frames over
//! the mesh for a session of another core.
//!
//! All decisions stay in the state machine; this file only moves bytes.
//! This node runs alone for now (cluster links are a later piece of work):
//! a `SendToNode` effect finds no link, and a request in it is answered
//! UNAVAILABLE rather than left to time out.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shards::{Mesh, SendError};
use wire::client::{encode_error_body, FrameKind};
use wire::frame::{ArchivedMessage, FrameBuf, Message};
use wire::{shard_of, ObjectKey};

mod frames;
mod replies;

use self::frames::{decode_request, encode_request, error_code_from_wire, wire_error_code};
use self::replies::{ReplyRoute, ReplyRoutes, REQUEST_CORE_SHIFT};
use super::types::{
    ClientRef, Effect, ErrorCode, NodeMessage, Outcome, Request, RequestId, RouterHead,
    StoreFailure, StoreOp, StoreReply, StoreToken, Timer,
};
use super::RouterCore;
use crate::catalog::CoreCatalog;
use crate::gateway::{EgressRef, GatewayHandle, Ingress, PlayerPort};
use crate::metrics::{CoreMetrics, RouterStats};
use crate::services::{player, room, PLAYER_TYPE_ID, ROOM_TYPE_ID};
use crate::store::{LoadError, NodeId, Store, WriteError, WriteOutcome};

/// How often the router gauges (objects, caches, queued requests) are
/// recomputed for `/metrics`. Counting them walks every entry of the core,
/// so it runs on this period, not per request (which made each request
/// O(entries)); the gauges are at most this stale. Counters stay exact.
const GAUGES_MIRROR_INTERVAL: Duration = Duration::from_millis(250);
/// How long an on_write flush waits after the batch that asked for it. A
/// task spawned without a wait runs before the executor polls the other
/// connections' sockets, so each connection's saves reached the store
/// alone, just after its group commit began, and waited a whole commit
/// more (32 connections x 16 pipelined incr: 55k/s). Waiting through one
/// reactor poll lets the reads that arrived meanwhile join the same flush
/// and the same commit (130k-315k/s on the same machine); the cost is this
/// much latency on a reply that waits for an fsync anyway.
const FLUSH_LINGER: Duration = Duration::from_micros(100);

/// What a driver needs from the node.
pub struct DriverParts {
    pub node: NodeId,
    pub core_id: usize,
    pub core_count: usize,
    pub core: RouterCore,
    pub store: Store,
    pub mesh: Mesh<FrameBuf>,
    pub gateway: GatewayHandle,
    pub metrics: Arc<CoreMetrics>,
    pub request_timeout_ms: u64,
    /// This core's view of the node's catalog: which local service takes
    /// each client route.
    pub catalog: CoreCatalog,
}

struct Inner {
    node: NodeId,
    core_id: usize,
    core_count: u32,
    core: RefCell<RouterCore>,
    store: Store,
    mesh: Mesh<FrameBuf>,
    gateway: GatewayHandle,
    replies: RefCell<ReplyRoutes>,
    metrics: Arc<CoreMetrics>,
    request_timeout_ms: u64,
    catalog: RefCell<CoreCatalog>,
    /// Effects are performed by one loop at a time; an event that arrives
    /// while it runs (a local Submit) only queues its effects for it.
    performing: Cell<bool>,
    /// The effects being performed, reused so a batch allocates nothing.
    effects: RefCell<Vec<Effect>>,
    wall_clock: WallClock,
    unroutable_total: Cell<u64>,
}

/// The wall clock (unix milliseconds) at an `Instant` the caller has read
/// already, from an anchor pair of readings: a `SystemTime` read per
/// request was 3.5% of a routed request's CPU. Re-anchored with the gauges
/// (every `GAUGES_MIRROR_INTERVAL`), so it follows a step of the wall clock
/// within that period and drifts from it by microseconds in between.
struct WallClock {
    instant: Cell<Instant>,
    unix_ms: Cell<u64>,
}

impl WallClock {
    fn new() -> WallClock {
        WallClock {
            instant: Cell::new(Instant::now()),
            unix_ms: Cell::new(now_ms()),
        }
    }

    fn reanchor(&self) {
        self.instant.set(Instant::now());
        self.unix_ms.set(now_ms());
    }

    fn ms_at(&self, at: Instant) -> u64 {
        let (anchor, unix_ms) = (self.instant.get(), self.unix_ms.get());
        match at.checked_duration_since(anchor) {
            Some(ahead) => unix_ms + ahead.as_millis() as u64,
            None => unix_ms.saturating_sub(anchor.duration_since(at).as_millis() as u64),
        }
    }
}

/// One core's router driver. Cheap to clone (an `Rc`); stays on its core.
#[derive(Clone)]
pub struct RouterDriver(Rc<Inner>);

/// Unix milliseconds: ownership lock expiry compares save timepoints
/// across nodes, so the router's clock is the wall clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl RouterDriver {
    pub fn new(parts: DriverParts) -> RouterDriver {
        let driver = RouterDriver(Rc::new(Inner {
            node: parts.node,
            core_id: parts.core_id,
            core_count: parts.core_count as u32,
            core: RefCell::new(parts.core),
            store: parts.store,
            mesh: parts.mesh,
            gateway: parts.gateway,
            replies: RefCell::new(ReplyRoutes::new(parts.request_timeout_ms)),
            metrics: parts.metrics,
            request_timeout_ms: parts.request_timeout_ms,
            catalog: RefCell::new(parts.catalog),
            performing: Cell::new(false),
            effects: RefCell::new(Vec::new()),
            wall_clock: WallClock::new(),
            unroutable_total: Cell::new(0),
        }));
        // RouterCore::new queued its first sweep timer.
        driver.perform_effects();
        driver.mirror_gauges();
        let weak = Rc::downgrade(&driver.0);
        shards::spawn(async move {
            loop {
                shards::sleep(GAUGES_MIRROR_INTERVAL).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let driver = RouterDriver(inner);
                driver.inner().wall_clock.reanchor();
                driver.mirror_gauges();
            }
        })
        .detach();
        driver
    }

    /// Handles a mesh frame if it is the router's; returns any other.
    pub fn handle_mesh(&self, frame: FrameBuf) -> Option<FrameBuf> {
        match frame.message() {
            ArchivedMessage::RouterRequest { .. } => {
                if let Some((head, request)) = decode_request(frame.message()) {
                    self.submit_here(head, request);
                }
                None
            }
            ArchivedMessage::RouterReply {
                request_seq,
                error_code,
                body,
                ..
            } => {
                let outcome = match error_code.to_native() {
                    0 => Ok(body.to_vec()),
                    code => Err(error_code_from_wire(code)),
                };
                self.answer_local(request_seq.to_native(), outcome);
                None
            }
            _ => Some(frame),
        }
    }

    /// Starts shutdown: every writable object is saved and released within
    /// `deadline`. Resolves when done or when the deadline passed.
    pub async fn shutdown(&self, deadline: Duration) {
        self.0
            .core
            .borrow_mut()
            .shutdown(now_ms(), deadline.as_millis() as u64);
        self.perform_effects();
        let started = std::time::Instant::now();
        while !self.0.core.borrow().is_shutdown_complete() && started.elapsed() < deadline {
            shards::sleep(Duration::from_millis(5)).await;
        }
    }

    fn inner(&self) -> &Inner {
        &self.0
    }

    /// A client request of a session on this core, bound to its player.
    fn on_client_ingress(&self, ingress: ClientIngress, now: Instant) {
        let reply_route = ReplyRoute {
            session_id: ingress.client.session_id,
            session_epoch: ingress.client.session_epoch as u32,
            player_id: ingress.client.player_id,
            route_id: ingress.route_id,
            client_seq: ingress.seq,
        };
        let target = target_of(
            &mut self.inner().catalog.borrow_mut(),
            ingress.route_id,
            ingress.client.player_id,
            &ingress.body,
        );
        let Some((key, op)) = target else {
            return self.answer_route(reply_route, Err(ErrorCode::BadRequest));
        };
        let now = self.inner().wall_clock.ms_at(now);
        let seq = {
            let mut replies = self.inner().replies.borrow_mut();
            replies.expire(now);
            replies.insert(
                self.inner().core_id,
                reply_route,
                now + self.inner().request_timeout_ms,
            )
        };
        let Some(seq) = seq else {
            return self.answer_route(reply_route, Err(ErrorCode::Overloaded));
        };
        let request = Request {
            id: RequestId {
                origin_node: self.inner().node,
                seq,
            },
            op,
            body: ingress.body,
            client: Some(ingress.client),
            needs_reply: true,
        };
        // The gateway's clock reading serves the core too.
        self.submit_with(RouterHead::local(key, self.inner().node), request, || now);
    }

    /// A one-way notification to a player object (bind, unbind).
    fn notify_player(&self, op: u32, client: ClientRef) {
        let request = Request {
            id: RequestId {
                origin_node: self.inner().node,
                seq: 0,
            },
            op,
            body: Vec::new(),
            client: Some(client),
            needs_reply: false,
        };
        let key = player::player_key(client.player_id);
        self.submit(RouterHead::local(key, self.inner().node), request);
    }

    /// Hands a request to the core that owns its key.
    fn submit(&self, head: RouterHead, request: Request) {
        self.submit_with(head, request, now_ms);
    }

    /// [`Self::submit`] with the clock to read if the request stays here
    /// (a caller that has read it already passes its reading).
    fn submit_with(&self, head: RouterHead, request: Request, clock: impl FnOnce() -> u64) {
        let core = shard_of(head.key, self.inner().core_count) as usize;
        if core == self.inner().core_id {
            return self.submit_here_at(clock(), head, request);
        }
        let frame = match FrameBuf::encode_local(&encode_request(&head, &request)) {
            Ok(frame) => frame,
            Err(error) => {
                tracing::warn!(%error, "cannot encode a router request");
                return self.fail_request(&request, ErrorCode::Internal);
            }
        };
        match self.inner().mesh.try_send(core, frame) {
            Ok(()) => {}
            Err(SendError::Full(_)) => self.fail_request(&request, ErrorCode::Overloaded),
            Err(_) => self.fail_request(&request, ErrorCode::Unavailable),
        }
    }

    fn submit_here(&self, head: RouterHead, request: Request) {
        self.submit_here_at(now_ms(), head, request);
    }

    fn submit_here_at(&self, now: u64, head: RouterHead, request: Request) {
        self.inner()
            .core
            .borrow_mut()
            .on_request(now, head, request);
        self.perform_effects();
    }

    fn fail_request(&self, request: &Request, code: ErrorCode) {
        if request.needs_reply {
            self.reply(request.id, Err(code));
        }
    }

    /// Performs queued effects until the core is quiet. Re-entrant calls
    /// (an effect that feeds the core again) return at once: the running
    /// loop picks their effects up.
    fn perform_effects(&self) {
        if self.inner().performing.replace(true) {
            return;
        }
        let mut effects = self.inner().effects.take();
        loop {
            self.inner().core.borrow_mut().take_effects(&mut effects);
            if effects.is_empty() {
                break;
            }
            for effect in effects.drain(..) {
                self.perform(effect);
            }
        }
        self.inner().effects.replace(effects);
        self.inner().performing.set(false);
        self.mirror_metrics();
    }

    fn perform(&self, effect: Effect) {
        match effect {
            Effect::Submit { head, request } => self.submit(head, request),
            Effect::Store { token, op } => self.store(token, op),
            Effect::ArmTimer { at_ms, timer } => self.arm(at_ms, timer),
            Effect::Reply { request, outcome } => self.reply(request, outcome),
            Effect::Push {
                client,
                route_id,
                body,
            } => self.push(client, route_id, body),
            Effect::Kick { client } => self.inner().gateway.kick(
                client.session_id,
                client.player_id,
                "logged in elsewhere",
            ),
            Effect::SendToNode { node, message } => self.unroutable(node, message),
            Effect::FlushSavesAfterBatch => self.flush_after_batch(),
        }
    }

    /// Starts the held on_write saves once the task delivering the current
    /// batch (a connection's read of pipelined frames, a store reply) has
    /// yielded and `FLUSH_LINGER` passed: every request of that batch, and
    /// of the other connections' reads polled meanwhile, shares its
    /// object's save, and the saves reach the store together.
    fn flush_after_batch(&self) {
        let driver = self.clone();
        shards::spawn(async move {
            shards::sleep(FLUSH_LINGER).await;
            driver.inner().core.borrow_mut().on_flush(now_ms());
            driver.perform_effects();
        })
        .detach();
    }

    /// No link to `node` exists yet: a request in the message is answered
    /// UNAVAILABLE at once, anything else is dropped and counted.
    fn unroutable(&self, node: NodeId, message: NodeMessage) {
        let unroutable = &self.inner().unroutable_total;
        unroutable.set(unroutable.get() + 1);
        tracing::debug!(node = node.0, "no link to node; message not sent");
        if let NodeMessage::Routed { request, .. } = message {
            self.fail_request(&request, ErrorCode::Unavailable);
        }
    }

    fn reply(&self, request: RequestId, outcome: Outcome) {
        if request.origin_node != self.inner().node {
            // Answers to other nodes need cluster links; count and drop
            // (their gateway answers TIMEOUT).
            let unroutable = &self.inner().unroutable_total;
            unroutable.set(unroutable.get() + 1);
            return;
        }
        let core = (request.seq >> REQUEST_CORE_SHIFT) as usize;
        if core == self.inner().core_id {
            return self.answer_local(request.seq, outcome);
        }
        let (error_code, body) = match outcome {
            Ok(body) => (0, body),
            Err(code) => (code as u16, Vec::new()),
        };
        let message = Message::RouterReply {
            origin_node: request.origin_node.0,
            request_seq: request.seq,
            error_code,
            body,
        };
        match FrameBuf::encode_local(&message) {
            // A reply that cannot cross is answered TIMEOUT by the gateway;
            // the mesh has counted it.
            Ok(frame) => drop(self.inner().mesh.try_send(core, frame)),
            Err(error) => tracing::warn!(%error, "cannot encode a router reply"),
        }
    }

    /// An answer for a request this core made.
    fn answer_local(&self, request_seq: u64, outcome: Outcome) {
        let route = self.inner().replies.borrow_mut().take(request_seq);
        match route {
            Some(route) => self.answer_route(route, outcome),
            // Expired: the gateway answered TIMEOUT already.
            None => self.inner().metrics.gateway.late_answers.inc(),
        }
    }

    fn answer_route(&self, route: ReplyRoute, outcome: Outcome) {
        let (kind, body) = match outcome {
            Ok(body) => (FrameKind::Response, body),
            Err(code) => (
                FrameKind::Error,
                encode_error_body(wire_error_code(code), ""),
            ),
        };
        self.inner().gateway.egress_ref(&EgressRef {
            session_id: route.session_id,
            session_epoch: route.session_epoch,
            player_id: route.player_id,
            kind: kind as u8,
            route_id: route.route_id,
            seq: route.client_seq,
            body: &body,
        });
    }

    fn push(&self, client: ClientRef, route_id: u32, body: Vec<u8>) {
        if client.gateway_node != self.inner().node {
            let unroutable = &self.inner().unroutable_total;
            unroutable.set(unroutable.get() + 1);
            return;
        }
        self.inner().gateway.egress_ref(&EgressRef {
            session_id: client.session_id,
            session_epoch: client.session_epoch as u32,
            player_id: client.player_id,
            kind: FrameKind::Push as u8,
            route_id,
            seq: 0,
            body: &body,
        });
    }

    fn store(&self, token: StoreToken, op: StoreOp) {
        let store = self.inner().store.clone();
        let driver = self.clone();
        shards::spawn(async move {
            let reply = perform_store_op(&store, op).await;
            driver
                .inner()
                .core
                .borrow_mut()
                .on_store_reply(now_ms(), token, reply);
            driver.perform_effects();
        })
        .detach();
    }

    fn arm(&self, at_ms: u64, timer: Timer) {
        let driver = self.clone();
        let wait = Duration::from_millis(at_ms.saturating_sub(now_ms()));
        let fire = async move {
            shards::sleep(wait).await;
            driver.inner().core.borrow_mut().on_timer(now_ms(), timer);
            driver.perform_effects();
        };
        // The periodic sweep (saves, degradation, cleanup) runs on the
        // background queue, so it yields to client traffic.
        match timer {
            Timer::Sweep => shards::spawn_background(fire).detach(),
            _ => shards::spawn(fire).detach(),
        }
    }

    /// The gauges: a walk over every entry, so periodic (see
    /// `GAUGES_MIRROR_INTERVAL`).
    fn mirror_gauges(&self) {
        let (objects, caches, queued) = self.inner().core.borrow().gauges();
        let stats: &RouterStats = &self.inner().metrics.router;
        stats.objects.set(objects as i64);
        stats.caches.set(caches as i64);
        stats.pending.set(queued as i64);
    }

    /// The counters: a few field copies, after every batch of effects.
    fn mirror_metrics(&self) {
        let core = self.inner().core.borrow();
        let metrics = &self.inner().metrics;
        metrics.router_counters.mirror(core.counters());
        metrics
            .router
            .unroutable
            .mirror(self.inner().unroutable_total.get());
    }
}

async fn perform_store_op(store: &Store, op: StoreOp) -> StoreReply {
    match op {
        StoreOp::Load(key) => match store.load(key).await {
            Ok(record) => StoreReply::Loaded(record),
            Err(LoadError::Overloaded) => StoreReply::Failed(StoreFailure::Busy),
            Err(_) => StoreReply::Failed(StoreFailure::Failed),
        },
        StoreOp::Write(write) => match store.write(write).await {
            Ok(outcome) => StoreReply::Written(outcome),
            Err(error) => StoreReply::Failed(write_failure(&error)),
        },
        StoreOp::WriteBatch(writes) => {
            let len = writes.len();
            match store.write_batch(writes).await {
                Ok(outcomes) if outcomes.len() == len => StoreReply::WrittenBatch(outcomes),
                // A short answer is a backend fault; the safe reading of
                // every write in it is "unknown".
                Ok(_) => StoreReply::WrittenBatch(vec![WriteOutcome::Indeterminate; len]),
                Err(error) => StoreReply::Failed(write_failure(&error)),
            }
        }
    }
}

/// Every `WriteError` means the write did not happen (a write that may
/// have happened is `WriteOutcome::Indeterminate`), so the router may retry.
fn write_failure(error: &WriteError) -> StoreFailure {
    match error {
        WriteError::Overloaded => StoreFailure::Busy,
        _ => StoreFailure::Failed,
    }
}

impl PlayerPort for RouterDriver {
    /// The in-core ingress: the gateway of this core hands the request over
    /// as a plain struct; its body is copied once, into the request.
    fn deliver_ingress<'a>(
        &self,
        gateway_node: u64,
        ingress: Ingress<'a>,
        now: Instant,
    ) -> Result<(), Ingress<'a>> {
        self.on_client_ingress(
            ClientIngress {
                client: ClientRef {
                    gateway_node: NodeId(gateway_node),
                    session_id: ingress.session_id,
                    session_epoch: u64::from(ingress.binding.session_epoch),
                    player_id: ingress.binding.player_id,
                },
                route_id: ingress.route_id,
                seq: ingress.seq,
                body: ingress.body.to_vec(),
            },
            now,
        );
        Ok(())
    }

    fn deliver(&self, frame: FrameBuf) -> Result<(), FrameBuf> {
        let (op, client) = match frame.message() {
            ArchivedMessage::ClientIngress {
                gateway_node,
                session_id,
                session_epoch,
                player_id,
                route_id,
                seq,
                body,
            } => {
                self.on_client_ingress(
                    ClientIngress {
                        client: ClientRef {
                            gateway_node: NodeId(gateway_node.to_native()),
                            session_id: session_id.to_native(),
                            session_epoch: u64::from(session_epoch.to_native()),
                            player_id: player_id.to_native(),
                        },
                        route_id: route_id.to_native(),
                        seq: seq.to_native(),
                        body: body.to_vec(),
                    },
                    Instant::now(),
                );
                return Ok(());
            }
            ArchivedMessage::SessionBound {
                gateway_node,
                session_id,
                session_epoch,
                player_id,
            } => (
                player::OP_BIND,
                (gateway_node, session_id, session_epoch, player_id),
            ),
            ArchivedMessage::SessionUnbound {
                gateway_node,
                session_id,
                session_epoch,
                player_id,
            }
            | ArchivedMessage::SessionDisconnected {
                gateway_node,
                session_id,
                session_epoch,
                player_id,
            } => (
                player::OP_UNBIND,
                (gateway_node, session_id, session_epoch, player_id),
            ),
            _ => return Err(frame),
        };
        let (gateway_node, session_id, session_epoch, player_id) = client;
        self.notify_player(
            op,
            ClientRef {
                gateway_node: NodeId(gateway_node.to_native()),
                session_id: session_id.to_native(),
                session_epoch: u64::from(session_epoch.to_native()),
                player_id: player_id.to_native(),
            },
        );
        Ok(())
    }
}

struct ClientIngress {
    client: ClientRef,
    route_id: u32,
    seq: u32,
    body: Vec<u8>,
}

/// The object and service op a client route addresses. The catalog's
/// local routes say which service takes the route; the service says which
/// object: a player's own routes go to the player object (which relays room
/// membership to the room), `room.say` to the room named by the body's first
/// eight bytes. Ops are numbered as the routes they serve. `None` when no
/// local service takes the route or the body cannot name the room.
fn target_of(
    catalog: &mut CoreCatalog,
    route_id: u32,
    player_id: u64,
    body: &[u8],
) -> Option<(ObjectKey, u32)> {
    let actor_type = catalog.lookup_local_routes(route_id).first()?.actor_type;
    let key = match actor_type {
        PLAYER_TYPE_ID => player::player_key(player_id),
        ROOM_TYPE_ID => room::room_key(u64::from_le_bytes(body.get(..8)?.try_into().ok()?)),
        _ => return None,
    };
    Some((key, route_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::client::route;

    #[test]
    fn routes_map_to_their_objects() {
        let catalog = std::sync::Arc::new(crate::catalog::Catalog::new());
        for actor in crate::services::local_actors(1, "127.0.0.1:1") {
            catalog.register_routes(actor).unwrap();
        }
        let mut view = CoreCatalog::new(catalog);
        let (key, op) = target_of(&mut view, route::PLAYER_INCR, 42, &[]).unwrap();
        assert_eq!((key, op), (player::player_key(42), player::OP_INCR));
        let (key, op) = target_of(&mut view, route::ROOM_SAY, 42, &7u64.to_le_bytes()).unwrap();
        assert_eq!((key, op), (room::room_key(7), room::OP_SAY));
        assert_eq!(target_of(&mut view, route::ROOM_SAY, 42, &[1, 2]), None);
        assert_eq!(target_of(&mut view, route::AUTH_LOGIN, 42, &[]), None);
    }
}
