//! The router's glommio driver: one per core, it performs the effects of
//! that core's [`RouterCore`] for real. Client requests come in from the
//! gateway (it is the gateway's [`PlayerPort`]), requests for objects of
//! other cores travel the mesh as `RouterRequest` frames, store requests go
//! through [`Store`] futures, timers are glommio timers, and answers go back
//! to the gateway core that holds the session as `ClientEgress` frames.
//!
//! All decisions stay in the state machine; this file only moves bytes.
//! This node runs alone for now (cluster links are a later piece of work):
//! a `SendToNode` effect finds no link, and a request in it is answered
//! UNAVAILABLE rather than left to time out.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hashbrown::HashMap;
use shards::{Mesh, SendError};
use wire::client::{encode_error_body, route, ErrorCode as WireErrorCode, FrameKind};
use wire::frame::{ArchivedMessage, FrameBuf, Message, RouterHead as WireHead};
use wire::{shard_of, ObjectKey};

use super::types::{
    ClientRef, Effect, ErrorCode, NodeMessage, Outcome, Request, RequestId, RouterHead,
    StoreFailure, StoreOp, StoreReply, StoreToken, Timer,
};
use super::RouterCore;
use crate::gateway::{GatewayHandle, PlayerPort};
use crate::metrics::{CoreMetrics, RouterStats};
use crate::services::{player, room};
use crate::store::{LoadError, NodeId, RouteVersion, Store, WriteError, WriteOutcome};

/// Requests of one core waiting for their answer. Each is also in the
/// gateway's in-flight table (bounded by `max_inflight` per session); this
/// bound only guards the driver's own memory.
pub const REPLY_ROUTES_MAX: usize = 1 << 20;

/// How often the router gauges (objects, caches, queued requests) are
/// recomputed for `/metrics`. Counting them walks every entry of the core,
/// so it runs on this period, not per request (which made each request
/// O(entries)); the gauges are at most this stale. Counters stay exact.
const GAUGES_MIRROR_INTERVAL: Duration = Duration::from_millis(250);

/// Bits of a request sequence number below the index of the core that made
/// it, so an answer finds its core without a shared table.
const REQUEST_CORE_SHIFT: u32 = 48;

/// Where the answer to one client request goes.
#[derive(Clone, Copy, Debug)]
struct ReplyRoute {
    session_id: u64,
    session_epoch: u32,
    player_id: u64,
    route_id: u32,
    client_seq: u32,
}

/// The answers this core waits for, expired after the gateway's request
/// timeout (the gateway has answered TIMEOUT by then).
#[derive(Default)]
struct ReplyRoutes {
    routes: HashMap<u64, ReplyRoute>,
    expiry: VecDeque<(u64, u64)>,
    next_serial: u64,
}

impl ReplyRoutes {
    fn insert(&mut self, core_id: usize, route: ReplyRoute, expires_ms: u64) -> Option<u64> {
        if self.routes.len() >= REPLY_ROUTES_MAX {
            return None;
        }
        self.next_serial = (self.next_serial + 1) & ((1 << REQUEST_CORE_SHIFT) - 1);
        let seq = (core_id as u64) << REQUEST_CORE_SHIFT | self.next_serial;
        self.routes.insert(seq, route);
        self.expiry.push_back((expires_ms, seq));
        Some(seq)
    }

    fn take(&mut self, seq: u64) -> Option<ReplyRoute> {
        self.routes.remove(&seq)
    }

    fn expire(&mut self, now_ms: u64) {
        while let Some(&(expires_ms, seq)) = self.expiry.front() {
            if expires_ms > now_ms {
                break;
            }
            self.expiry.pop_front();
            self.routes.remove(&seq);
        }
    }
}

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
    /// Effects are performed by one loop at a time; an event that arrives
    /// while it runs (a local Submit) only queues its effects for it.
    performing: Cell<bool>,
    unroutable_total: Cell<u64>,
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
            replies: RefCell::new(ReplyRoutes::default()),
            metrics: parts.metrics,
            request_timeout_ms: parts.request_timeout_ms,
            performing: Cell::new(false),
            unroutable_total: Cell::new(0),
        }));
        // RouterCore::new queued its first sweep timer.
        driver.perform_effects();
        driver.mirror_gauges();
        let weak = Rc::downgrade(&driver.0);
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(GAUGES_MIRROR_INTERVAL).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                RouterDriver(inner).mirror_gauges();
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
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
    }

    fn inner(&self) -> &Inner {
        &self.0
    }

    /// A client request of a session on this core, bound to its player.
    fn on_client_ingress(&self, ingress: ClientIngress) {
        let reply_route = ReplyRoute {
            session_id: ingress.client.session_id,
            session_epoch: ingress.client.session_epoch as u32,
            player_id: ingress.client.player_id,
            route_id: ingress.route_id,
            client_seq: ingress.seq,
        };
        let Some((key, op)) = target_of(ingress.route_id, ingress.client.player_id, &ingress.body)
        else {
            return self.answer_route(reply_route, Err(ErrorCode::BadRequest));
        };
        let now = now_ms();
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
        self.submit(RouterHead::local(key, self.inner().node), request);
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
        let core = shard_of(head.key, self.inner().core_count) as usize;
        if core == self.inner().core_id {
            return self.submit_here(head, request);
        }
        let frame = match FrameBuf::encode(&encode_request(&head, &request)) {
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
        self.inner()
            .core
            .borrow_mut()
            .on_request(now_ms(), head, request);
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
        loop {
            let effects: Vec<Effect> = self.inner().core.borrow_mut().drain_effects().collect();
            if effects.is_empty() {
                break;
            }
            for effect in effects {
                self.perform(effect);
            }
        }
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
        }
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
        match FrameBuf::encode(&message) {
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
        self.egress(Message::ClientEgress {
            session_id: route.session_id,
            session_epoch: route.session_epoch,
            player_id: route.player_id,
            kind: kind as u8,
            route_id: route.route_id,
            seq: route.client_seq,
            body,
        });
    }

    fn push(&self, client: ClientRef, route_id: u32, body: Vec<u8>) {
        if client.gateway_node != self.inner().node {
            let unroutable = &self.inner().unroutable_total;
            unroutable.set(unroutable.get() + 1);
            return;
        }
        self.egress(Message::ClientEgress {
            session_id: client.session_id,
            session_epoch: client.session_epoch as u32,
            player_id: client.player_id,
            kind: FrameKind::Push as u8,
            route_id,
            seq: 0,
            body,
        });
    }

    fn egress(&self, message: Message) {
        match FrameBuf::encode(&message) {
            Ok(frame) => self.inner().gateway.egress(frame),
            Err(error) => tracing::warn!(%error, "cannot encode a client egress"),
        }
    }

    fn store(&self, token: StoreToken, op: StoreOp) {
        let store = self.inner().store.clone();
        let driver = self.clone();
        glommio::spawn_local(async move {
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
        glommio::spawn_local(async move {
            glommio::timer::sleep(wait).await;
            driver.inner().core.borrow_mut().on_timer(now_ms(), timer);
            driver.perform_effects();
        })
        .detach();
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
        let counters = core.counters();
        let stats: &RouterStats = &self.inner().metrics.router;
        stats.saves.mirror(counters.saves_total);
        stats.cas_conflicts.mirror(counters.cas_conflicts_total);
        stats.forwards.mirror(counters.forwards_total);
        stats.transfers.mirror(counters.transfers_total);
        stats.pulls.mirror(counters.pulls_total);
        stats.repairs.mirror(counters.repair_attempts_total);
        stats.update_syncs.mirror(counters.update_syncs_sent_total);
        stats.unroutable.mirror(self.inner().unroutable_total.get());
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
                self.on_client_ingress(ClientIngress {
                    client: ClientRef {
                        gateway_node: NodeId(gateway_node.to_native()),
                        session_id: session_id.to_native(),
                        session_epoch: u64::from(session_epoch.to_native()),
                        player_id: player_id.to_native(),
                    },
                    route_id: route_id.to_native(),
                    seq: seq.to_native(),
                    body: body.to_vec(),
                });
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

/// The object and service op a client route addresses: a player's own
/// routes go to the player object (which relays room membership to the
/// room), `room.say` goes to the room. `None` when the body cannot name
/// the room.
fn target_of(route_id: u32, player_id: u64, body: &[u8]) -> Option<(ObjectKey, u32)> {
    let player = player::player_key(player_id);
    match route_id {
        route::SYS_PING => Some((player, player::OP_PING)),
        route::PLAYER_GET => Some((player, player::OP_GET)),
        route::PLAYER_INCR => Some((player, player::OP_INCR)),
        route::ROOM_JOIN => Some((player, player::OP_ROOM_JOIN)),
        route::ROOM_LEAVE => Some((player, player::OP_ROOM_LEAVE)),
        route::ROOM_SAY => {
            let room_id = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
            Some((room::room_key(room_id), room::OP_SAY))
        }
        _ => None,
    }
}

fn wire_error_code(code: ErrorCode) -> WireErrorCode {
    WireErrorCode::from_u16(code as u16).unwrap_or(WireErrorCode::Internal)
}

fn error_code_from_wire(code: u16) -> ErrorCode {
    match code {
        4 => ErrorCode::AuthFailed,
        5 => ErrorCode::BadRequest,
        6 => ErrorCode::Overloaded,
        7 => ErrorCode::Unavailable,
        _ => ErrorCode::Internal,
    }
}

fn encode_request(head: &RouterHead, request: &Request) -> Message {
    let client = request.client;
    Message::RouterRequest {
        head: WireHead {
            type_id: head.key.type_id,
            zone_id: head.key.zone_id,
            object_id: head.key.object_id,
            route_version: head.route_version.0,
            source_node: head.source_node.0,
            transfer_ttl: head.transfer_ttl,
        },
        origin_node: request.id.origin_node.0,
        request_seq: request.id.seq,
        op: request.op,
        needs_reply: u8::from(request.needs_reply),
        has_client: u8::from(client.is_some()),
        client_gateway_node: client.map_or(0, |c| c.gateway_node.0),
        client_session_id: client.map_or(0, |c| c.session_id),
        client_session_epoch: client.map_or(0, |c| c.session_epoch),
        client_player_id: client.map_or(0, |c| c.player_id),
        body: request.body.clone(),
    }
}

fn decode_request(message: &ArchivedMessage) -> Option<(RouterHead, Request)> {
    let ArchivedMessage::RouterRequest {
        head,
        origin_node,
        request_seq,
        op,
        needs_reply,
        has_client,
        client_gateway_node,
        client_session_id,
        client_session_epoch,
        client_player_id,
        body,
    } = message
    else {
        return None;
    };
    let head = RouterHead {
        key: ObjectKey::new(
            head.type_id.to_native(),
            head.zone_id.to_native(),
            head.object_id.to_native(),
        ),
        route_version: RouteVersion(head.route_version.to_native()),
        source_node: NodeId(head.source_node.to_native()),
        transfer_ttl: head.transfer_ttl.to_native(),
    };
    let client = (*has_client != 0).then(|| ClientRef {
        gateway_node: NodeId(client_gateway_node.to_native()),
        session_id: client_session_id.to_native(),
        session_epoch: client_session_epoch.to_native(),
        player_id: client_player_id.to_native(),
    });
    let request = Request {
        id: RequestId {
            origin_node: NodeId(origin_node.to_native()),
            seq: request_seq.to_native(),
        },
        op: op.to_native(),
        body: body.to_vec(),
        client,
        needs_reply: *needs_reply != 0,
    };
    Some((head, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_map_to_their_objects() {
        let (key, op) = target_of(route::PLAYER_INCR, 42, &[]).unwrap();
        assert_eq!((key, op), (player::player_key(42), player::OP_INCR));
        let (key, op) = target_of(route::ROOM_SAY, 42, &7u64.to_le_bytes()).unwrap();
        assert_eq!((key, op), (room::room_key(7), room::OP_SAY));
        assert_eq!(target_of(route::ROOM_SAY, 42, &[1, 2]), None);
        assert_eq!(target_of(route::AUTH_LOGIN, 42, &[]), None);
    }

    #[test]
    fn request_frames_round_trip() {
        let head = RouterHead {
            key: ObjectKey::new(2, 0, 42),
            route_version: RouteVersion(3),
            source_node: NodeId(1),
            transfer_ttl: 2,
        };
        let request = Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq: 1 << REQUEST_CORE_SHIFT | 5,
            },
            op: player::OP_INCR,
            body: 9i64.to_le_bytes().to_vec(),
            client: Some(ClientRef {
                gateway_node: NodeId(1),
                session_id: 77,
                session_epoch: 2,
                player_id: 42,
            }),
            needs_reply: true,
        };
        let frame = FrameBuf::encode(&encode_request(&head, &request)).unwrap();
        assert_eq!(decode_request(frame.message()), Some((head, request)));
    }

    #[test]
    fn reply_routes_expire_and_bound() {
        let mut routes = ReplyRoutes::default();
        let route = ReplyRoute {
            session_id: 1,
            session_epoch: 1,
            player_id: 1,
            route_id: 10,
            client_seq: 1,
        };
        let first = routes.insert(1, route, 100).unwrap();
        let second = routes.insert(1, route, 200).unwrap();
        assert_eq!(
            first >> REQUEST_CORE_SHIFT,
            1,
            "the core is in the high bits"
        );
        routes.expire(150);
        assert!(routes.take(first).is_none(), "expired");
        assert!(routes.take(second).is_some());
        assert!(routes.take(second).is_none(), "answered once");
    }
}
