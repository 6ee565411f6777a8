//! The driver of one core's gateway on the core's runtime (`shards`): the
//! accept loop on the core's SO_REUSEPORT listener, one task per
//! connection that reads (and runs the auth service) and writes, the
//! deadline timer, the idle sweep, and mesh dispatch of gateway messages.
//! All decisions are in [`GatewayCore`]; this file, `driver/connection.rs`
//! (the listeners and timers) and `driver/connection_task.rs` (a
//! connection's reads and writes) only perform IO and deliver effects.
//!
//! IO goes through the core's ring: a connection's one multishot receive
//! delivers every read into a buffer of the core's buffer ring (frames are
//! decoded where they lie, then the buffer is given back), and each batch
//! of answers leaves in one send operation. Both are queued and submitted
//! with every other connection's in the core's one kernel entry per loop
//! turn: no system call per connection or per batch.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shards::{Mesh, SendError};
use wire::client::ErrorCode;
use wire::frame::{ArchivedMessage, FrameBuf, Message};

use super::auth::{AuthService, AuthStep};
use super::body_codec::ListenerCodecs;
use super::core::{EgressRef, GatewayCore, HeldFrame, Limits, LoginOutcome};
use super::services_side::{LoginRequest, ServicesSide};
use super::session::Target;
use super::{session_core, Ingress, Notice};
use crate::answer_gate::AnswerGate;
use crate::config::GatewayConfig;
use crate::gateway_addresses::GatewayAddresses;
use crate::metrics::CoreMetrics;

mod closing;
mod connection;
mod connection_task;
mod pending;
mod resume;
pub use connection::serve;
pub use resume::ResumeHub;

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
    /// Resuming sessions: the settings, the token directory, the cores'
    /// mailboxes (`resume.rs`).
    pub resume: Arc<ResumeHub>,
}

struct CoreGateway {
    core_id: usize,
    node_id: u64,
    config: GatewayConfig,
    state: RefCell<GatewayCore>,
    auth: AuthService,
    services: RefCell<Option<Rc<dyn ServicesSide>>>,
    mesh: Mesh<FrameBuf>,
    sessions_open: Arc<AtomicU32>,
    metrics: Arc<CoreMetrics>,
    /// TLS handshakes running on this core, oldest first, against
    /// `tls_handshakes_max`: a connection's outbox (to close it) and its
    /// layers (who it is).
    handshakes: RefCell<pending::PendingSetups<PendingHandshake>>,
    /// What the connections' successful answers pass before they are
    /// written (`answer_gate`); the core's router publishes its lease there.
    answer_gate: Rc<AnswerGate>,
    /// Shared by the node's cores to resume sessions (`resume.rs`).
    resume: Arc<ResumeHub>,
    /// Connections closing while their writer waits (`closing.rs`).
    closing: RefCell<closing::Closing>,
}

/// A TLS connection whose handshake runs: its outbox and its layers, held
/// weakly (the connection's task owns them).
type PendingHandshake = (
    std::rc::Weak<super::outbox::Outbox>,
    std::rc::Weak<RefCell<super::transport::Layers>>,
);

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
        let mut state = GatewayCore::with_incarnation(
            core_id,
            shared.boot_incarnation,
            limits,
            metrics.clone(),
            shared.routes.clone(),
        );
        state.set_listener_codecs(ListenerCodecs::from_config(&shared.config));
        state.set_resume_settings(
            shared
                .resume
                .settings()
                .for_core_of(shared.config.sessions_max, mesh.core_count()),
        );
        let gateway = GatewayHandle(Rc::new(CoreGateway {
            core_id,
            node_id: shared.node_id,
            config: shared.config.clone(),
            state: RefCell::new(state),
            auth: AuthService::new(&shared.secret),
            services: RefCell::new(None),
            mesh,
            sessions_open: shared.sessions_open.clone(),
            metrics,
            handshakes: RefCell::new(pending::PendingSetups::new(
                shared.config.tls_handshakes_max as usize,
            )),
            answer_gate: Rc::new(AnswerGate::default()),
            resume: shared.resume.clone(),
            closing: RefCell::default(),
        }));
        // A fence drops the answers queued and not yet taken by a writer;
        // those a writer took wait at the gate and are dropped there.
        let weak = Rc::downgrade(&gateway.0);
        gateway.0.answer_gate.on_fence(Box::new(move || {
            if let Some(gateway) = weak.upgrade() {
                let closed = gateway.state.borrow_mut().drop_answers_made_before_fence();
                if closed > 0 {
                    tracing::warn!(
                        sessions = closed,
                        "fenced: sessions closed with the answers made before the fence"
                    );
                    // Their objects hear of it from a task of its own: the
                    // fence arrives inside the router's turn.
                    let gateway = GatewayHandle(gateway);
                    shards::spawn(async move { gateway.flush_notices() }).detach();
                }
            }
        }));
        gateway
    }

    /// The gate this core's answers pass before they are written; shared
    /// with the core's router (which publishes its lease there) and links.
    pub fn answer_gate(&self) -> Rc<AnswerGate> {
        self.0.answer_gate.clone()
    }

    /// Installs the services side of this core (see
    /// [`super::services_side`]).
    pub fn set_services_side(&self, port: Rc<dyn ServicesSide>) {
        *self.0.services.borrow_mut() = Some(port);
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
    /// to `player_id`: PUSH `sys.kicked` with `reason`, then the fixed close
    /// order of `GatewayCore::kick` (`shield.client.close` in docs/origins.md).
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

    /// Whether `session_id` (on whichever core owns it) is still bound as
    /// `bound`; if not, its target is told it was unbound
    /// (`GatewayCore::check_session`).
    pub fn check_session(&self, session_id: u64, bound: super::Binding) {
        if session_core(session_id) == self.0.core_id {
            self.0.state.borrow_mut().check_session(session_id, bound);
            self.flush_notices();
            return;
        }
        let message = Message::SessionCheck {
            client: super::client_wire(self.0.node_id, session_id, bound),
        };
        match FrameBuf::encode_local(&message) {
            Ok(frame) => self.route_to_owner(session_id, frame),
            Err(error) => tracing::warn!(%error, "cannot encode a session check"),
        }
    }

    /// An operator's PUSH to one of this core's sessions (see
    /// `GatewayCore::push_to`).
    pub fn push_to(
        &self,
        session_id: u64,
        player_id: u64,
        route_id: u32,
        body: &[u8],
    ) -> super::SessionPush {
        self.0
            .state
            .borrow_mut()
            .push_to(session_id, player_id, route_id, body)
    }

    /// The bind CAS (`apply_binding` in docs/origins.md) on a session this
    /// core owns (the services side calls it on the session's core). Counted.
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

    /// Closes this core's oldest session that never logged in, to admit a
    /// connection at the session cap; whether there was one.
    pub fn evict_unauthenticated(&self) -> bool {
        let evicted = self.0.state.borrow_mut().evict_unauthenticated();
        if evicted {
            self.flush_notices();
        }
        evicted
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
    /// `SessionKick`, `SessionCheck`); returns any other frame for the rest
    /// of the node.
    pub fn handle_mesh(&self, frame: FrameBuf) -> Option<FrameBuf> {
        if self.handle_message(frame.message()) {
            None
        } else {
            Some(frame)
        }
    }

    /// Handles a message if it is the gateway's, read where it lies (a
    /// link's frames are read in the link's buffer); `false` for any other.
    pub fn handle_message(&self, message: &ArchivedMessage) -> bool {
        match message {
            ArchivedMessage::ClientEgress { .. } => {
                self.gate(message);
                true
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
                true
            }
            ArchivedMessage::SessionCheck { client } => {
                let bound = super::Binding {
                    target: Target::Services,
                    player_id: client.player_id.to_native(),
                    session_epoch: client.session_epoch.to_native(),
                };
                self.0
                    .state
                    .borrow_mut()
                    .check_session(client.session_id.to_native(), bound);
                self.flush_notices();
                true
            }
            _ => false,
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

    fn gate(&self, message: &ArchivedMessage) {
        let ArchivedMessage::ClientEgress {
            session_id,
            session_epoch,
            player_id,
            kind,
            route_id,
            seq,
            body,
        } = message
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
            connection: None,
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
            Target::Services => {
                let port = self.0.services.borrow().clone();
                let Some(port) = port else {
                    return self.answer(&ingress, ErrorCode::Unavailable, "no player service");
                };
                // The port is this core's services side: a plain call, no
                // frame (see `super::services_side`).
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
        let (player_id, expiry_unix_s) = match step {
            AuthStep::Verified {
                player_id,
                expiry_unix_s,
            } => (player_id, expiry_unix_s),
            AuthStep::Resume {
                token,
                last_push_seq,
            } => return self.begin_resume(ingress.session_id, ingress.seq, token, last_push_seq),
            AuthStep::Answered => return,
        };
        let bound_epoch = {
            let mut state = self.0.state.borrow_mut();
            state.set_token_expiry(ingress.session_id, expiry_unix_s);
            state.begin_login(ingress.session_id, ingress.seq, player_id)
        };
        let Some(bound_epoch) = bound_epoch else {
            return self.answer(ingress, ErrorCode::BadRequest, "login in progress");
        };
        if ingress.request_key.is_some() {
            self.offer_resume(ingress.session_id);
        }
        let login = LoginRequest {
            gateway_node: self.0.node_id,
            session_id: ingress.session_id,
            session_epoch: ingress.binding.session_epoch,
            bound_epoch,
            player_id,
            seq: ingress.seq,
        };
        let port = self.0.services.borrow().clone();
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
        self.complete_login_placed(session_id, seq, outcome, None);
    }

    /// [`Self::complete_login`], then, when the session was bound and
    /// `owner` names the gateways of the node its player lives on (another
    /// node), `sys.redirect` there with `grace` (`GatewayCore::place_session`),
    /// before any answer to a request the session sent meanwhile.
    pub fn complete_login_placed(
        &self,
        session_id: u64,
        seq: u32,
        outcome: LoginOutcome<'_>,
        owner: Option<(Duration, &GatewayAddresses)>,
    ) {
        {
            let mut state = self.0.state.borrow_mut();
            let bound = state.complete_login(session_id, seq, outcome, Instant::now());
            if let (Some(_), Some((grace, owner))) = (bound, owner) {
                state.place_session(session_id, grace, owner);
            }
        }
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
                let held_again = self.0.state.borrow_mut().hold_again(session_id, frame);
                let Some(frame) = held_again else {
                    continue;
                };
                let ingress = self
                    .0
                    .state
                    .borrow_mut()
                    .on_held_request(session_id, &frame, now);
                if let Some(ingress) = ingress {
                    self.deliver(ingress, now);
                }
            }
        }
        self.flush_notices();
    }

    /// Delivers queued notices to the services side (and what resuming
    /// sessions owe other cores).
    fn flush_notices(&self) {
        if !self.0.state.borrow().has_queued_for_driver() {
            return;
        }
        self.flush_resume();
        let mut notices: Vec<Notice> = Vec::new();
        self.0.state.borrow_mut().take_notices(&mut notices);
        for notice in notices {
            if notice.binding.target != Target::Services {
                continue;
            }
            let port = self.0.services.borrow().clone();
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
