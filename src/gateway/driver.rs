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

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
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
use super::{session_core, Ingress, Notice};
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
    pub fn redirect_all(&self, grace: Duration, targets: Vec<String>) {
        self.0
            .state
            .borrow_mut()
            .redirect_all(Instant::now(), grace, targets);
    }

    /// The gateways later redirects name.
    pub fn set_redirect_targets(&self, targets: Vec<String>) {
        self.0.state.borrow_mut().set_redirect_targets(targets);
    }

    /// Sessions open on this core.
    pub fn session_count(&self) -> usize {
        self.0.state.borrow().session_count()
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
        let AuthStep::Verified { player_id } = step else {
            return;
        };
        let bound_epoch =
            self.0
                .state
                .borrow_mut()
                .begin_login(ingress.session_id, ingress.seq, player_id);
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

/// Serves the gateway on `listener` until the future is dropped. Also
/// starts the deadline timer and the idle sweep.
pub async fn serve(gateway: GatewayHandle, listener: TcpListener) {
    shards::spawn(expire_loop(gateway.clone())).detach();
    shards::spawn(idle_loop(gateway.clone())).detach();
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
        shards::spawn(connection(gateway.clone(), stream)).detach();
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

/// Closes sessions silent for `idle_timeout_ms`. A sweep on a period
/// rather than a timeout on every read: a read timeout is a timer insert
/// and removal plus a clock read per read, on the ping path's every batch.
async fn idle_loop(gateway: GatewayHandle) {
    let idle = Duration::from_millis(gateway.0.config.idle_timeout_ms.max(1));
    let tick = (idle / 10).clamp(Duration::from_millis(1), MAX_IDLE_TICK);
    loop {
        shards::sleep(tick).await;
        let closed = gateway
            .0
            .state
            .borrow_mut()
            .close_idle(Instant::now(), idle);
        if closed > 0 {
            gateway.flush_notices();
        }
    }
}

/// One connection: registers its session, runs the writer task, reads and
/// handles frames until the connection ends, then closes the session.
async fn connection(gateway: GatewayHandle, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let outbox = Rc::new(Outbox::new(gateway.0.config.send_queue_max as usize));
    let session_id = gateway
        .0
        .state
        .borrow_mut()
        .open_session(outbox.clone(), Instant::now());
    let stream = Rc::new(stream);
    let writer = shards::spawn(write_loop(stream.clone(), outbox.clone()));
    let reason = read_loop(&gateway, session_id, &stream, &outbox).await;
    if let Some(reason) = reason {
        gateway.0.state.borrow_mut().close(session_id, reason);
        gateway.flush_notices();
    }
    writer.await;
    drop(stream);
    gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
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
        let mut rest: &[u8] = &received;
        while !rest.is_empty() {
            // Frames whole in the received buffer are handled where they
            // lie: no copy, and a connection whose frames arrive whole
            // never allocates a decoding buffer of its own.
            loop {
                match decoder.next_frame_in(&mut rest) {
                    Ok(Some(frame)) => handle_frame(gateway, session_id, frame, now),
                    Ok(None) => break,
                    Err(error) => return protocol_violation(gateway, session_id, error),
                }
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
            loop {
                match decoder.next_frame() {
                    Ok(Some(frame)) => handle_frame(gateway, session_id, frame, now),
                    Ok(None) => break,
                    Err(error) => return protocol_violation(gateway, session_id, error),
                }
            }
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
async fn write_loop(stream: Rc<TcpStream>, outbox: Rc<Outbox>) {
    let mut batch = Vec::new();
    let mut in_flight: Option<SendOp> = None;
    loop {
        let step = poll_fn(|cx| outbox.poll_take(cx, &mut batch)).await;
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
            // Finish: everything queued before the close is sent.
            break;
        };
        // The sent buffer carries the batch after this one.
        spare.clear();
        in_flight = Some(stream.start_send(std::mem::replace(&mut batch, spare)));
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
