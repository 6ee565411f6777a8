//! The driver of one core's gateway on the core's runtime (`shards`): the
//! accept loop on the core's SO_REUSEPORT listener, a reader (which also
//! runs the auth service) and a writer task per connection, the deadline
//! timer, the idle sweep, and mesh dispatch of gateway messages. All
//! decisions are in [`GatewayCore`]; this file only performs IO and
//! delivers effects.
//!
//! IO goes through the core's ring: the reader's one multishot receive
//! delivers every read into a buffer of the core's buffer ring (copied
//! into the frame decoder, then given back), and the writer sends each
//! batch of answers with one send operation. Both are queued and submitted
//! with every other connection's in the core's one kernel entry per loop
//! turn: no system call per connection or per batch.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shards::net::{SendOp, TcpListener, TcpStream};
use shards::{Mesh, SendError};
use wire::client::{ErrorCode, FrameDecoder, FrameError, FrameRef, Peer};
use wire::frame::{ArchivedMessage, FrameBuf, Message};

use super::auth::{AuthService, AuthStep};
use super::core::{CloseReason, EgressRef, GatewayCore, HeldFrame, Limits, LoginOutcome};
use super::outbox::{Outbox, WriterStep};
use super::player::{LoginRequest, PlayerPort};
use super::session::Target;
use super::transport::tls::HandshakeKind;
use super::transport::{Layers, Listener, Opened, Refusal, Transport};
use super::{session_core, Ingress, Notice};
use crate::store::GatewayAddresses;
use crate::config::GatewayConfig;
use crate::metrics::CoreMetrics;

/// The deadline timer's tick: TIMEOUT answers are at most this late.
const MAX_TIMER_TICK: Duration = Duration::from_millis(50);
/// The idle sweep's longest period: an idle session is closed at most
/// this late (and at most a tenth of `idle_timeout_ms` late below it).
const MAX_IDLE_TICK: Duration = Duration::from_secs(1);

/// What a core's gateway shares with everything else on the node.
pub struct GatewayShared {
    pub node_id: u64,
    /// The node's incarnation when it started (in every session id).
    pub boot_incarnation: u64,
    pub config: GatewayConfig,
    pub secret: Vec<u8>,
    /// Sessions open on the node, over all cores, against `sessions_max`.
    pub sessions_open: Arc<AtomicU32>,
    /// The node's routes (system routes and those its types declared).
    pub routes: Arc<crate::route::RouteTable>,
}

struct CoreGateway {
    core_id: usize,
    node_id: u64,
    config: GatewayConfig,
    state: RefCell<GatewayCore>,
    auth: AuthService,
    player: RefCell<Option<Rc<dyn PlayerPort>>>,
    mesh: Mesh<FrameBuf>,
    sessions_open: Arc<AtomicU32>,
    metrics: Arc<CoreMetrics>,
    /// TLS handshakes running on this core, against `tls_handshakes_max`.
    handshakes: Cell<u32>,
}

/// One core's gateway. Cheap to clone (an `Rc`); stays on its core.
#[derive(Clone)]
pub struct GatewayHandle(Rc<CoreGateway>);

impl GatewayHandle {
    pub fn new(
        core_id: usize,
        mesh: Mesh<FrameBuf>,
        shared: &GatewayShared,
        metrics: Arc<CoreMetrics>,
    ) -> GatewayHandle {
        let limits = Limits::from(&shared.config);
        GatewayHandle(Rc::new(CoreGateway {
            core_id,
            node_id: shared.node_id,
            config: shared.config.clone(),
            state: RefCell::new(GatewayCore::with_incarnation(
                core_id,
                shared.boot_incarnation,
                limits,
                metrics.clone(),
                shared.routes.clone(),
            )),
            auth: AuthService::new(&shared.secret),
            player: RefCell::new(None),
            mesh,
            sessions_open: shared.sessions_open.clone(),
            metrics,
            handshakes: Cell::new(0),
        }))
    }

    /// Installs the player side of this core (see [`super::player`]).
    pub fn set_player_port(&self, port: Rc<dyn PlayerPort>) {
        *self.0.player.borrow_mut() = Some(port);
    }

    /// A `ClientEgress` frame from a session's target, on any core: routed
    /// to the session's owning core and through the egress gate there.
    /// Fire-and-forget; a frame that cannot reach the core is counted as
    /// `send_failed`.
    pub fn egress(&self, frame: FrameBuf) {
        let session_id = match frame.message() {
            ArchivedMessage::ClientEgress { session_id, .. } => session_id.to_native(),
            _ => return,
        };
        self.route_to_owner(session_id, frame);
    }

    /// A frame for a client from a session's target on this core, as a
    /// plain struct: a session of this core goes straight into the egress
    /// gate (an in-core call, so no frame: docs/architecture.md: rkyv frames are for
    /// messages that cross cores), any other is encoded as a `ClientEgress`
    /// frame for its owning core. Fire-and-forget, like [`Self::egress`].
    pub fn egress_ref(&self, egress: &EgressRef<'_>, clock: impl FnOnce() -> Instant) {
        if session_core(egress.session_id) == self.0.core_id {
            let _ = self.0.state.borrow_mut().egress_with_clock(egress, clock);
            self.flush_notices();
            return;
        }
        let message = Message::ClientEgress {
            session_id: egress.session_id,
            session_epoch: egress.session_epoch,
            player_id: egress.player_id,
            kind: egress.kind,
            route_id: egress.route_id,
            seq: egress.seq,
            body: egress.body.to_vec(),
        };
        match FrameBuf::encode_local(&message) {
            Ok(frame) => self.route_to_owner(egress.session_id, frame),
            Err(error) => tracing::warn!(%error, "cannot encode a client egress"),
        }
    }

    /// Kicks `session_id` (on whichever core owns it) if it is still bound
    /// to `player_id`: PUSH `sys.kicked` with `reason`, then the seed's
    /// close order.
    pub fn kick(&self, session_id: u64, player_id: u64, reason: &str) {
        if session_core(session_id) == self.0.core_id {
            self.0
                .state
                .borrow_mut()
                .kick(session_id, Some(player_id), reason);
            self.flush_notices();
            return;
        }
        let message = Message::SessionKick {
            session_id,
            player_id,
            reason: reason.as_bytes().to_vec(),
        };
        match FrameBuf::encode_local(&message) {
            Ok(frame) => self.route_to_owner(session_id, frame),
            Err(error) => tracing::warn!(%error, "cannot encode a kick"),
        }
    }

    /// The seed's bind CAS on a session this core owns (the player side
    /// calls it on the session's core). Counted.
    pub fn apply_binding(
        &self,
        session_id: u64,
        target: Target,
        player_id: u64,
        expected_epoch: u32,
    ) -> Result<super::Binding, super::BindError> {
        self.0
            .state
            .borrow_mut()
            .apply_binding(session_id, target, player_id, expected_epoch)
    }

    /// The node drains: tells every session of this core (and every one
    /// opened from now on) to move to one of `targets` within `grace`, and
    /// closes each when its grace ended and nothing is owed to it.
    pub fn redirect_all(&self, grace: Duration, targets: Vec<GatewayAddresses>) {
        self.0
            .state
            .borrow_mut()
            .redirect_all(Instant::now(), grace, targets);
    }

    /// The gateways later redirects name.
    pub fn set_redirect_targets(&self, targets: Vec<GatewayAddresses>) {
        self.0.state.borrow_mut().set_redirect_targets(targets);
    }

    /// Sessions open on this core.
    pub fn session_count(&self) -> usize {
        self.0.state.borrow().session_count()
    }

    /// A page of this core's sessions (see `GatewayCore::sessions_page`).
    pub fn sessions_page(
        &self,
        player: Option<u64>,
        after: Option<u64>,
        limit: usize,
    ) -> Vec<super::SessionRow> {
        self.0.state.borrow().sessions_page(player, after, limit)
    }

    /// Handles a mesh frame if it is the gateway's (`ClientEgress`,
    /// `SessionKick`); returns any other frame for the rest of the node.
    pub fn handle_mesh(&self, frame: FrameBuf) -> Option<FrameBuf> {
        match frame.message() {
            ArchivedMessage::ClientEgress { .. } => {
                self.gate(&frame);
                None
            }
            ArchivedMessage::SessionKick {
                session_id,
                player_id,
                reason,
            } => {
                let reason = String::from_utf8_lossy(reason.as_slice());
                self.0.state.borrow_mut().kick(
                    session_id.to_native(),
                    Some(player_id.to_native()),
                    &reason,
                );
                self.flush_notices();
                None
            }
            _ => Some(frame),
        }
    }

    fn route_to_owner(&self, session_id: u64, frame: FrameBuf) {
        let owner = session_core(session_id);
        if owner == self.0.core_id {
            self.handle_mesh(frame);
            return;
        }
        match self.0.mesh.try_send(owner, frame) {
            Ok(()) => {}
            Err(SendError::ToSelf(frame)) => {
                self.handle_mesh(frame);
            }
            Err(_) => self.0.metrics.gateway.egress_send_failed.inc(),
        }
    }

    fn gate(&self, frame: &FrameBuf) {
        let ArchivedMessage::ClientEgress {
            session_id,
            session_epoch,
            player_id,
            kind,
            route_id,
            seq,
            body,
        } = frame.message()
        else {
            return;
        };
        let egress = EgressRef {
            session_id: session_id.to_native(),
            session_epoch: session_epoch.to_native(),
            player_id: player_id.to_native(),
            kind: *kind,
            route_id: route_id.to_native(),
            seq: seq.to_native(),
            body: body.as_slice(),
        };
        let _ = self
            .0
            .state
            .borrow_mut()
            .egress_with_clock(&egress, Instant::now);
        self.flush_notices();
    }

    /// Delivers one accepted ingress to its snapshotted target. The auth
    /// service answers in place, before the next frame of the batch is
    /// read: a request pipelined behind `auth.login` sees the session
    /// logged in.
    fn deliver(&self, ingress: Ingress<'_>, now: Instant) {
        match ingress.binding.target {
            Target::Auth => self.authenticate(&ingress, now),
            Target::Player => {
                let port = self.0.player.borrow().clone();
                let Some(port) = port else {
                    return self.answer(&ingress, ErrorCode::Unavailable, "no player service");
                };
                // The port is this core's player side: a plain call, no
                // frame (see `super::player`).
                if let Err(ingress) = port.deliver_ingress(self.0.node_id, ingress, now) {
                    self.answer(&ingress, ErrorCode::Unavailable, "player unavailable");
                }
            }
            Target::None => {}
        }
    }

    fn answer(&self, ingress: &Ingress<'_>, code: ErrorCode, reason: &str) {
        self.0
            .state
            .borrow_mut()
            .answer_error(ingress.session_id, ingress.seq, code, reason);
    }

    /// Runs the auth service on one ingress; a verified login goes to its
    /// player object, which decides it (see `complete_login`).
    fn authenticate(&self, ingress: &Ingress<'_>, now: Instant) {
        // The wall clock matters only to a login's token expiry.
        let now_unix_s = if ingress.route_id == wire::client::route::AUTH_LOGIN {
            unix_now_s()
        } else {
            0
        };
        let step = self
            .0
            .auth
            .handle(&mut self.0.state.borrow_mut(), ingress, now, now_unix_s);
        let AuthStep::Verified {
            player_id,
            expiry_unix_s,
        } = step
        else {
            return;
        };
        let bound_epoch = {
            let mut state = self.0.state.borrow_mut();
            state.set_token_expiry(ingress.session_id, expiry_unix_s);
            state.begin_login(ingress.session_id, ingress.seq, player_id)
        };
        let Some(bound_epoch) = bound_epoch else {
            return self.answer(ingress, ErrorCode::BadRequest, "login in progress");
        };
        let login = LoginRequest {
            gateway_node: self.0.node_id,
            session_id: ingress.session_id,
            session_epoch: ingress.binding.session_epoch,
            bound_epoch,
            player_id,
            seq: ingress.seq,
        };
        let port = self.0.player.borrow().clone();
        let handed = port.map(|port| port.login(login, now));
        if !matches!(handed, Some(Ok(()))) {
            self.complete_login(
                login.session_id,
                login.seq,
                LoginOutcome::Refused(ErrorCode::Unavailable, "player unavailable"),
            );
        }
    }

    /// The player object's decision on a login this core handed it: binds
    /// the session or answers the refusal, then replays what the session
    /// sent meanwhile.
    pub fn complete_login(&self, session_id: u64, seq: u32, outcome: LoginOutcome<'_>) {
        self.0
            .state
            .borrow_mut()
            .complete_login(session_id, seq, outcome, Instant::now());
        self.flush_notices();
        self.replay_released();
    }

    /// Replays, through the ingress checks and in order, the requests that
    /// waited behind logins that have ended.
    fn replay_released(&self) {
        let mut released: Vec<(u64, Vec<HeldFrame>)> = Vec::new();
        self.0.state.borrow_mut().take_released(&mut released);
        let now = Instant::now();
        for (session_id, frames) in released {
            for frame in frames {
                let ingress = self.0.state.borrow_mut().on_held_request(
                    session_id,
                    frame.header,
                    &frame.body,
                    now,
                );
                if let Some(ingress) = ingress {
                    self.deliver(ingress, now);
                }
            }
        }
        self.flush_notices();
    }

    /// Delivers queued notices to the player side.
    fn flush_notices(&self) {
        let mut notices: Vec<Notice> = Vec::new();
        self.0.state.borrow_mut().take_notices(&mut notices);
        for notice in notices {
            if notice.binding.target != Target::Player {
                continue;
            }
            let port = self.0.player.borrow().clone();
            if let (Some(port), Ok(frame)) = (port, notice.to_frame(self.0.node_id)) {
                let _ = port.deliver(frame);
            }
        }
    }
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// Serves the gateway on `listener` (plain TCP) and on each of `edges`
/// (TLS, WebSocket) until the future is dropped. Also starts the deadline
/// timer and the idle sweep.
pub async fn serve(gateway: GatewayHandle, listener: TcpListener, edges: Vec<(TcpListener, Listener)>) {
    shards::spawn(expire_loop(gateway.clone())).detach();
    shards::spawn(idle_loop(gateway.clone())).detach();
    let mut loops: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>> =
        vec![Box::pin(accept_loop(gateway.clone(), listener, Listener::Plain))];
    for (listener, kind) in edges {
        loops.push(Box::pin(accept_loop(gateway.clone(), listener, kind)));
    }
    // The accept loops never end: wait on all of them until dropped.
    poll_fn(|cx| {
        for accept in &mut loops {
            let _ = accept.as_mut().poll(cx);
        }
        Poll::<()>::Pending
    })
    .await;
}

async fn accept_loop(gateway: GatewayHandle, listener: TcpListener, kind: Listener) {
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                // Out of file descriptors and the like: do not spin.
                shards::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let max = gateway.0.config.sessions_max;
        let admitted = gateway
            .0
            .sessions_open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .is_ok();
        if !admitted {
            gateway.0.metrics.gateway.sessions_refused.inc();
            drop(stream);
            continue;
        }
        if !stream.is_registered() {
            gateway.0.metrics.gateway.sessions_unregistered.inc();
        }
        let transport = match edge_transport(&gateway, &kind) {
            Some(transport) => transport,
            None => {
                drop(stream);
                gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
        };
        let advertised_as = kind.advertised_as();
        shards::spawn(connection(gateway.clone(), stream, transport, advertised_as)).detach();
    }
}

/// The transport of a connection accepted on `kind`; `None` if it must be
/// closed at once (the core runs `tls_handshakes_max` handshakes).
fn edge_transport(gateway: &GatewayHandle, kind: &Listener) -> Option<Transport> {
    if kind.is_tls() {
        if gateway.0.handshakes.get() >= gateway.0.config.tls_handshakes_max {
            gateway.0.metrics.gateway.tls_refused_handshakes_max.inc();
            return None;
        }
        gateway.0.handshakes.set(gateway.0.handshakes.get() + 1);
    }
    match Transport::for_listener(kind, gateway.0.config.body_max_bytes) {
        Ok(transport) => Some(transport),
        Err(error) => {
            tracing::warn!(%error, "cannot start a TLS connection");
            if kind.is_tls() {
                gateway.0.handshakes.set(gateway.0.handshakes.get() - 1);
            }
            None
        }
    }
}

async fn expire_loop(gateway: GatewayHandle) {
    let tick =
        (gateway.0.config.request_timeout_ms / 10).clamp(1, MAX_TIMER_TICK.as_millis() as u64);
    loop {
        shards::sleep(Duration::from_millis(tick)).await;
        let now = Instant::now();
        let mut state = gateway.0.state.borrow_mut();
        if state
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
        {
            state.expire(now);
        }
        // Redirected sessions whose grace ended (nothing when not draining).
        state.close_redirected(now);
        drop(state);
        gateway.flush_notices();
        // Logins that timed out release the requests held behind them.
        gateway.replay_released();
    }
}

/// Closes sessions silent for `idle_timeout_ms`, and kicks those whose
/// token expired (docs/protocol.md, section 2). A sweep on a period
/// rather than a timeout on every read: a read timeout is a timer insert
/// and removal plus a clock read per read, on the ping path's every batch.
async fn idle_loop(gateway: GatewayHandle) {
    let idle = Duration::from_millis(gateway.0.config.idle_timeout_ms.max(1));
    let tick = (idle / 10).clamp(Duration::from_millis(1), MAX_IDLE_TICK);
    loop {
        shards::sleep(tick).await;
        let closed = {
            let mut state = gateway.0.state.borrow_mut();
            state.close_idle(Instant::now(), idle) + state.kick_expired(unix_now_s())
        };
        if closed > 0 {
            gateway.flush_notices();
        }
    }
}

/// One connection: registers its session, runs the writer task, reads and
/// handles frames until the connection ends, then closes the session.
async fn connection(
    gateway: GatewayHandle,
    stream: TcpStream,
    transport: Transport,
    advertised_as: crate::store::Transport,
) {
    let _ = stream.set_nodelay(true);
    let outbox = Rc::new(Outbox::new(gateway.0.config.send_queue_max as usize));
    let session_id = gateway
        .0
        .state
        .borrow_mut()
        .open_session_via(outbox.clone(), advertised_as, Instant::now());
    let stream = Rc::new(stream);
    let writer = shards::spawn(write_loop(stream.clone(), outbox.clone(), transport.clone()));
    let reason = match &transport {
        Transport::Plain => read_loop(&gateway, session_id, &stream, &outbox).await,
        Transport::Layered(layers) => {
            if layers.borrow().is_handshaking() {
                shards::spawn(handshake_watch(
                    gateway.clone(),
                    Rc::downgrade(&stream),
                    Rc::downgrade(layers),
                ))
                .detach();
            }
            let reason = read_layered(&gateway, session_id, &stream, &outbox, layers).await;
            if layers.borrow().is_handshaking() {
                // Ended before its handshake finished: its slot is free.
                gateway.0.handshakes.set(gateway.0.handshakes.get() - 1);
            }
            reason
        }
    };
    if let Some(reason) = reason {
        gateway.0.state.borrow_mut().close(session_id, reason);
        gateway.flush_notices();
    }
    writer.await;
    drop(stream);
    gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
}

/// Closes a TLS connection whose handshake has not finished within
/// `tls_handshake_timeout_ms` (a peer that never finishes would otherwise
/// hold a handshake slot until the idle sweep). Holds the connection only
/// weakly: one that ended sooner is gone when the timer fires.
async fn handshake_watch(
    gateway: GatewayHandle,
    stream: std::rc::Weak<TcpStream>,
    layers: std::rc::Weak<RefCell<Layers>>,
) {
    shards::sleep(Duration::from_millis(gateway.0.config.tls_handshake_timeout_ms)).await;
    let (Some(stream), Some(layers)) = (stream.upgrade(), layers.upgrade()) else {
        return;
    };
    if layers.borrow().is_handshaking() {
        gateway.0.metrics.gateway.tls_refused_handshake_timeout.inc();
        // The reader sees the end of the stream and closes the session.
        stream.shutdown();
    }
}

/// Reads until the connection ends; returns how, or `None` if the session
/// was already closed by the gateway (kick, slow reader, idle sweep).
async fn read_loop(
    gateway: &GatewayHandle,
    session_id: u64,
    stream: &TcpStream,
    outbox: &Outbox,
) -> Option<CloseReason> {
    let mut decoder = FrameDecoder::new(Peer::Client, gateway.0.config.body_max_bytes);
    loop {
        let received = match stream.recv().await {
            Ok(Some(received)) => received,
            Ok(None) | Err(_) => return Some(CloseReason::PeerClosed),
        };
        // The one clock reading of the batch: deadlines, idleness and the
        // router's clock all use it.
        let now = Instant::now();
        outbox.begin_reader_batch();
        if let Err(error) = decode_frames(gateway, session_id, &mut decoder, &received, now) {
            return protocol_violation(gateway, session_id, error);
        }
        // The buffer goes back to the core's ring before anything waits.
        drop(received);
        gateway.flush_notices();
        outbox.end_reader_batch();
        // Closed by the gateway meanwhile (kick, slow reader): the writer
        // shuts the socket down; nothing more to read.
        gateway.0.state.borrow().session(session_id)?;
    }
}

/// Handles every frame of `bytes` (one receive's protocol bytes), keeping
/// a cut frame in `decoder` for the next.
fn decode_frames(
    gateway: &GatewayHandle,
    session_id: u64,
    decoder: &mut FrameDecoder,
    bytes: &[u8],
    now: Instant,
) -> Result<(), FrameError> {
    {
        let mut rest: &[u8] = bytes;
        while !rest.is_empty() {
            // Frames whole in the received buffer are handled where they
            // lie: no copy, and a connection whose frames arrive whole
            // never allocates a decoding buffer of its own.
            while let Some(frame) = decoder.next_frame_in(&mut rest)? {
                handle_frame(gateway, session_id, frame, now);
            }
            if rest.is_empty() {
                break;
            }
            // A frame cut by the receive (or behind one): the decoder keeps
            // it until the rest arrives. It takes what fits; after the
            // frames below are drained, it always has room again (or has
            // failed).
            let taken = decoder.extend(rest);
            rest = &rest[taken..];
            while let Some(frame) = decoder.next_frame()? {
                handle_frame(gateway, session_id, frame, now);
            }
        }
    }
    Ok(())
}

/// [`read_loop`] for a TLS or WebSocket connection: each receive is opened
/// by the transport's layers first, and what they owe the peer (handshake
/// messages, the upgrade's answer, pongs) wakes the writer.
async fn read_layered(
    gateway: &GatewayHandle,
    session_id: u64,
    stream: &TcpStream,
    outbox: &Outbox,
    layers: &RefCell<Layers>,
) -> Option<CloseReason> {
    let mut decoder = FrameDecoder::new(Peer::Client, gateway.0.config.body_max_bytes);
    loop {
        let received = match stream.recv().await {
            Ok(Some(received)) => received,
            Ok(None) | Err(_) => return Some(CloseReason::PeerClosed),
        };
        let now = Instant::now();
        let opened = layers.borrow_mut().open(&received);
        drop(received);
        note_progress(gateway, &mut layers.borrow_mut());
        if let Opened::Close(refusal) = opened {
            count_refusal(gateway, refusal);
            // What the layers owe (an alert, the HTTP refusal, a close
            // frame) goes out before the writer shuts the socket down.
            return Some(CloseReason::PeerClosed);
        }
        let bytes = layers.borrow_mut().take_opened();
        outbox.begin_reader_batch();
        let decoded = decode_frames(gateway, session_id, &mut decoder, &bytes, now);
        layers.borrow_mut().give_back_opened(bytes);
        if let Err(error) = decoded {
            return protocol_violation(gateway, session_id, error);
        }
        gateway.flush_notices();
        outbox.end_reader_batch();
        if layers.borrow().wants_write() {
            outbox.wake_writer();
        }
        gateway.0.state.borrow().session(session_id)?;
    }
}

/// Counts a finished handshake (freeing its slot) and an upgrade.
fn note_progress(gateway: &GatewayHandle, layers: &mut Layers) {
    let stats = &gateway.0.metrics.gateway;
    if let Some(kind) = layers.take_handshake_done() {
        gateway.0.handshakes.set(gateway.0.handshakes.get() - 1);
        match kind {
            HandshakeKind::Full => stats.tls_handshakes_full.inc(),
            HandshakeKind::Resumed => stats.tls_handshakes_resumed.inc(),
        }
    }
    if layers.take_upgraded() {
        stats.websocket_upgrades.inc();
    }
}

fn count_refusal(gateway: &GatewayHandle, refusal: Refusal) {
    let stats = &gateway.0.metrics.gateway;
    let counter = match refusal {
        Refusal::TlsPlaintext => &stats.tls_refused_plaintext,
        Refusal::TlsBadHandshake => &stats.tls_refused_bad_handshake,
        Refusal::TlsError => &stats.tls_refused_tls_error,
        Refusal::WebSocketUpgrade(400) => &stats.websocket_refused_400,
        Refusal::WebSocketUpgrade(403) => &stats.websocket_refused_403,
        Refusal::WebSocketUpgrade(404) => &stats.websocket_refused_404,
        Refusal::WebSocketUpgrade(_) => &stats.websocket_refused_431,
        Refusal::WebSocketProtocol(1003) => &stats.websocket_closed_1003,
        Refusal::WebSocketProtocol(1009) => &stats.websocket_closed_1009,
        Refusal::WebSocketProtocol(_) => &stats.websocket_closed_1002,
        Refusal::PeerClosed => return,
    };
    counter.inc();
}

/// Hands one client frame to the gateway's state machine, and what it
/// lets through to its service.
fn handle_frame(gateway: &GatewayHandle, session_id: u64, frame: FrameRef<'_>, now: Instant) {
    let ingress =
        gateway
            .0
            .state
            .borrow_mut()
            .on_request(session_id, frame.header, frame.body, now);
    if let Some(ingress) = ingress {
        gateway.deliver(ingress, now);
    }
}

/// The stream cannot be resynchronised: the session is closed (counted
/// by the state machine); the read loop ends with nothing more to report.
fn protocol_violation(
    gateway: &GatewayHandle,
    session_id: u64,
    error: FrameError,
) -> Option<CloseReason> {
    gateway
        .0
        .state
        .borrow_mut()
        .protocol_violation(session_id, error);
    gateway.flush_notices();
    None
}

/// Drains the session's outbox into the socket, one send per batch, until
/// the outbox closes; then shuts the socket down, which also ends the
/// reader's pending receive.
///
/// A send is awaited only when the next batch (or the end) needs the
/// socket: by then it has nearly always completed, and its completion
/// woke nobody. At pipeline 1 that is one task wake-up and poll fewer per
/// answer than awaiting each send at once.
async fn write_loop(stream: Rc<TcpStream>, outbox: Rc<Outbox>, transport: Transport) {
    let mut batch = Vec::new();
    let mut in_flight: Option<SendOp> = None;
    loop {
        // A layered transport may owe the peer bytes with no answer queued
        // (a handshake message, a pong): that is a batch too.
        let step = poll_fn(|cx| match outbox.poll_take(cx, &mut batch) {
            Poll::Pending if transport.wants_write() => Poll::Ready(WriterStep::Write),
            step => step,
        })
        .await;
        if matches!(step, WriterStep::Abort) {
            // Queued frames are dropped; a send in flight is left to the
            // kernel (its buffer stays with the operation until it ends).
            break;
        }
        // A batch or the end needs the socket: the send before must be done.
        let mut spare = match in_flight.take() {
            None => Vec::new(),
            Some(send) => match finish_send(&stream, &outbox, send).await {
                Some(sent) => sent,
                None => {
                    outbox.abort();
                    break;
                }
            },
        };
        let WriterStep::Write = step else {
            // Finish: everything queued before the close is sent, then the
            // layers' goodbyes (an alert or close_notify, a close frame).
            if let Transport::Layered(layers) = &transport {
                spare.clear();
                layers.borrow_mut().finish(&mut spare);
                if !spare.is_empty() {
                    let _ = finish_send(&stream, &outbox, stream.start_send(spare)).await;
                }
            }
            break;
        };
        // The sent buffer carries the batch after this one.
        spare.clear();
        let wire = match &transport {
            Transport::Plain => std::mem::replace(&mut batch, spare),
            Transport::Layered(layers) => {
                // One seal per batch: one WebSocket message, one write
                // into rustls.
                layers.borrow_mut().seal(&batch, &mut spare);
                batch.clear();
                spare
            }
        };
        if wire.is_empty() {
            batch = wire;
            continue;
        }
        in_flight = Some(stream.start_send(wire));
    }
    // shutdown(2) wakes the reader with end-of-stream and tells the peer
    // we are done; the descriptor itself is closed when the stream drops.
    stream.shutdown();
}

/// Waits for `send` and sends what it left of its buffer, racing an abort
/// of the outbox (a client that stopped reading cannot hold the writer
/// forever). The buffer back on success; `None` if the send failed or the
/// outbox was aborted meanwhile.
async fn finish_send(stream: &TcpStream, outbox: &Outbox, send: SendOp) -> Option<Vec<u8>> {
    let write = async {
        let (sent, buf) = send.await;
        match sent {
            Ok(n) if n == buf.len() => Some(buf),
            Ok(0) | Err(_) => None,
            Ok(n) => {
                // Boxed: a send cut short is rare, and unboxed its state
                // would sit in the writer's future of every connection.
                let (rest, _) = Box::pin(stream.send_all(buf[n..].to_vec())).await;
                rest.ok().map(|()| buf)
            }
        }
    };
    let aborted = async {
        poll_fn(|cx| outbox.poll_aborted(cx)).await;
        None
    };
    futures_lite::future::or(write, aborted).await
}
