//! The gateway's per-core state machine (sans-IO): the session registry,
//! ingress validation, request accounting, the egress gate, kick and close.
//!
//! It does no IO and reads no clock: the driver passes `now` in, frames for
//! a client go into each session's [`Outbox`], and notices for targets are
//! queued for the driver to deliver ([`GatewayCore::take_notices`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use wire::client::{encode_error_body, ErrorCode, FrameError, FrameKind, Header};

use super::inflight::{InFlight, InFlightTable, SeqHash};
use super::outbox::{Outbox, PushError};
use super::rate::{RequestBucket, RequestRate};
use super::session::{Binding, EpochExpired, Session, Target, K_ANY_EPOCH};
use super::{session_core, Ingress, Notice, NoticeKind};
use crate::store::Transport;
use crate::config::GatewayConfig;
use crate::metrics::{CoreMetrics, GatewayStats};
use crate::route::{Direction, RouteTable};

type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// The limits the state machine enforces, from [`GatewayConfig`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub inflight_max: usize,
    pub request_timeout: Duration,
    pub send_queue_max: usize,
    /// The per-session request rate limit; `None`: unlimited.
    pub request_rate: Option<RequestRate>,
}

impl From<&GatewayConfig> for Limits {
    fn from(config: &GatewayConfig) -> Self {
        Limits {
            inflight_max: config.inflight_max as usize,
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            send_queue_max: config.send_queue_max as usize,
            request_rate: RequestRate::new(
                config.session_requests_per_sec_max,
                config.session_request_burst_max,
            ),
        }
    }
}

/// A frame for a client, from a session's target (a RESPONSE, ERROR or
/// PUSH), borrowed from a `ClientEgress` message or built locally.
#[derive(Clone, Copy, Debug)]
pub struct EgressRef<'a> {
    pub session_id: u64,
    pub session_epoch: u32,
    pub player_id: u64,
    pub kind: u8,
    pub route_id: u32,
    pub seq: u32,
    pub body: &'a [u8],
}

/// Why the egress gate dropped a frame, in the gate's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressRejected {
    #[error("unknown session")]
    UnknownSession,
    #[error("stale epoch")]
    StaleEpoch,
    #[error("owner mismatch")]
    OwnerMismatch,
    #[error("route not found")]
    RouteNotFound,
    #[error("direction rejected")]
    DirectionRejected,
    /// A RESPONSE or ERROR for a request that is no longer in flight (it
    /// timed out, or was answered already): request accounting, not one of
    /// the six checks.
    #[error("late answer")]
    LateAnswer,
    #[error("send failed")]
    SendFailed,
}

/// Why a bind failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("unknown session")]
    UnknownSession,
    #[error(transparent)]
    EpochExpired(#[from] EpochExpired),
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    PeerClosed,
    ProtocolViolation,
    Idle,
    SlowReader,
    Shutdown,
    /// The grace of a `sys.redirect` ended.
    Redirected,
}

struct Entry {
    session: Session,
    /// A login waiting for its player object's decision (see
    /// `begin_login`); requests that arrive meanwhile wait in `held`.
    login: Option<PendingLogin>,
    /// Requests read while a login was pending, replayed in order once it
    /// ends (bounded by `inflight_max`).
    held: Vec<HeldFrame>,
    inflight: InFlightTable,
    /// Whether the session has its one entry in `GatewayCore::deadlines`.
    armed: bool,
    /// When its last complete frame arrived (or it opened): a session
    /// silent for `idle_timeout` is closed by `close_idle`.
    last_frame: Instant,
    outbox: Rc<Outbox>,
    /// Told to move (`sys.redirect`): its grace ends then.
    redirect_until: Option<Instant>,
    /// The grace ended with answers still owed: new requests are refused,
    /// and the session closes once nothing is owed.
    closing: bool,
    /// The session's request rate limit (`Limits::request_rate`).
    bucket: RequestBucket,
    /// The listener's transport: a `sys.redirect` names another node's
    /// listener of the same one, so the client keeps speaking as it does.
    transport: Transport,
}

/// A login of one session waiting for the player object.
#[derive(Clone, Copy, Debug)]
struct PendingLogin {
    /// The `auth.login` request's seq.
    seq: u32,
    player_id: u64,
}

/// A request read while its session's login was pending: header and body,
/// replayed through `on_request` when the login ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldFrame {
    pub header: Header,
    pub body: Vec<u8>,
}

/// How a login the player object decided ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginOutcome<'a> {
    /// Bind the session to the player.
    Admitted,
    /// Answer this ERROR; the session stays logged out.
    Refused(ErrorCode, &'a str),
}

/// A request the egress gate saw answered, for the latency histogram.
#[derive(Clone, Copy)]
struct Answered {
    /// The route's index in the node's `RouteTable`.
    route_index: usize,
    deadline: Instant,
}

/// Logs a warning at most once per `WARN_INTERVAL` per reason, with the
/// count suppressed since, so a flood of stale replies cannot flood the log.
#[derive(Default)]
struct WarnLimiter {
    last: Option<Instant>,
    suppressed: u64,
}

const WARN_INTERVAL: Duration = Duration::from_secs(1);

impl WarnLimiter {
    fn warn(&mut self, now: Instant, reason: EgressRejected, session_id: u64, route_id: u32) {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < WARN_INTERVAL => {
                self.suppressed += 1;
            }
            _ => {
                tracing::warn!(%reason, session_id, route_id, suppressed = self.suppressed, "egress dropped");
                self.last = Some(now);
                self.suppressed = 0;
            }
        }
    }
}

/// One core's gateway state. See the module documentation.
pub struct GatewayCore {
    core_id: u64,
    next_serial: u64,
    limits: Limits,
    sessions: FastMap<u64, Entry>,
    /// When to look at a session's in-flight table for TIMEOUTs: at most
    /// one entry per session (`Entry::armed`), at or before the earliest
    /// deadline it had when armed. A request arms its session only if it is
    /// not armed already, and an answer touches nothing here, so the ping
    /// path costs no deadline bookkeeping beyond the in-flight table (a
    /// queue entry per request, trimmed per answer, was a measurable share
    /// of it). `expire` re-arms a session that still has requests in flight
    /// at its earliest remaining deadline: a session costs one heap push per
    /// `request_timeout` however many requests it sends. Entries of closed
    /// sessions stay until due, so the heap holds at most the live sessions
    /// plus those closed within the last `request_timeout`.
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Scratch for `expire`: the seqs of one session that are due, with
    /// their route and deadline.
    due: Vec<(u32, u32, Instant)>,
    metrics: Arc<CoreMetrics>,
    notices: Vec<Notice>,
    warn: [WarnLimiter; 7],
    /// Seeds of the sessions' in-flight tables: a generator seeded from the
    /// OS once per core, so no client can predict its table's hash.
    hash_seeds: SmallRng,
    /// The node's incarnation at start, in every session id: a reference to
    /// a session of an earlier run of this node never names a session of
    /// this one.
    boot_incarnation: u64,
    /// Sessions whose login ended with requests held: the driver replays
    /// them (`take_released`).
    released: Vec<u64>,
    /// The node's routes: what the ingress checks and the egress gate
    /// check against.
    routes: Arc<RouteTable>,
    /// Set once the node drains (`redirect_all`).
    redirecting: Option<Redirecting>,
}

impl GatewayCore {
    /// A core of a node that started with incarnation `boot_incarnation`
    /// and serves `routes`.
    pub fn with_incarnation(
        core_id: usize,
        boot_incarnation: u64,
        limits: Limits,
        metrics: Arc<CoreMetrics>,
        routes: Arc<RouteTable>,
    ) -> GatewayCore {
        assert!(
            core_id <= wire::ids::CORE_MAX,
            "a session id names its core"
        );
        GatewayCore {
            boot_incarnation,
            released: Vec::new(),
            core_id: core_id as u64,
            next_serial: 1,
            limits,
            sessions: FastMap::default(),
            deadlines: BinaryHeap::new(),
            due: Vec::new(),
            metrics,
            notices: Vec::new(),
            warn: Default::default(),
            hash_seeds: SmallRng::from_entropy(),
            routes,
            redirecting: None,
        }
    }

    fn stats(&self) -> &GatewayStats {
        &self.metrics.gateway
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Registers a new connection's session (epoch 0, bound to auth) and
    /// returns its id (`wire::ids`): naming its owning core, unique on this
    /// node and not reused by a later run of it.
    pub fn open_session(&mut self, outbox: Rc<Outbox>, now: Instant) -> u64 {
        let session_id = wire::ids::make(
            self.core_id as usize,
            self.boot_incarnation,
            self.next_serial,
        );
        debug_assert_eq!(session_core(session_id), self.core_id as usize);
        // 2^40 sessions on one core outlive any process; wrapping would
        // skip 0 and keep ids unique among live sessions in practice.
        self.next_serial = (self.next_serial + 1) & wire::ids::LOCAL_MASK;
        self.sessions.insert(
            session_id,
            Entry {
                session: Session::new(),
                login: None,
                held: Vec::new(),
                inflight: InFlightTable::new(SeqHash::random(&mut self.hash_seeds)),
                armed: false,
                last_frame: now,
                outbox,
                redirect_until: None,
                closing: false,
                bucket: RequestBucket::new(now),
                // Every session comes through the plain listener today.
                transport: Transport::Plain,
            },
        );
        self.stats().sessions_accepted.inc();
        self.stats().sessions_active.add(1);
        // A client that connects to a draining node is told to move at once.
        self.redirect(session_id, now);
        session_id
    }

    pub fn session(&self, session_id: u64) -> Option<&Session> {
        self.sessions.get(&session_id).map(|entry| &entry.session)
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Entries in the deadline heap, due or not (for tests of its bound).
    #[cfg(test)]
    fn deadline_entries(&self) -> usize {
        self.deadlines.len()
    }

    pub fn inflight_count(&self, session_id: u64) -> usize {
        self.sessions
            .get(&session_id)
            .map_or(0, |entry| entry.inflight.len())
    }

    /// Ingress of one decoded REQUEST read from the session's connection,
    /// checked in docs/protocol.md's order: the session's request rate
    /// first, then route exists, direction, auth, then in-flight limits. A
    /// rejected request is answered here with its ERROR (and counted) and
    /// never reaches a service; an accepted one is recorded in flight and
    /// returned, with a snapshot of the live binding, for the driver to
    /// deliver to `binding.target`.
    pub fn on_request<'a>(
        &mut self,
        session_id: u64,
        header: Header,
        body: &'a [u8],
        now: Instant,
    ) -> Option<Ingress<'a>> {
        let entry = self.sessions.get_mut(&session_id)?;
        entry.last_frame = now;
        if let Some(rate) = &self.limits.request_rate {
            if !entry.bucket.admit(rate, now) {
                self.metrics.gateway.ingress_rate_limited.inc();
                self.push_error(
                    session_id,
                    header.route_id,
                    header.seq,
                    ErrorCode::Overloaded,
                    "session request rate over gateway.session_requests_per_sec_max",
                );
                return None;
            }
        }
        self.admit(session_id, header, body, now)
    }

    /// A request that waited behind a login, replayed once it ended
    /// (`take_released`): checked like [`Self::on_request`] but for the
    /// rate, which it was charged when it was read.
    pub fn on_held_request<'a>(
        &mut self,
        session_id: u64,
        header: Header,
        body: &'a [u8],
        now: Instant,
    ) -> Option<Ingress<'a>> {
        self.admit(session_id, header, body, now)
    }

    /// The ingress checks after the rate.
    fn admit<'a>(
        &mut self,
        session_id: u64,
        header: Header,
        body: &'a [u8],
        now: Instant,
    ) -> Option<Ingress<'a>> {
        let limits = self.limits;
        let entry = self.sessions.get_mut(&session_id)?;
        if entry.closing {
            // The redirect's grace is over: the client was told where to go.
            self.metrics.gateway.redirect_refused.inc();
            self.push_error(
                session_id,
                header.route_id,
                header.seq,
                ErrorCode::Unavailable,
                "node draining: reconnect to another gateway",
            );
            return None;
        }
        if entry.login.is_some() {
            // The login's outcome decides how these are checked: hold them
            // until it ends, in order, within the session's in-flight bound.
            if entry.held.len() + entry.inflight.len() >= limits.inflight_max {
                self.metrics.gateway.ingress_overloaded.inc();
                self.push_error(
                    session_id,
                    header.route_id,
                    header.seq,
                    ErrorCode::Overloaded,
                    "too many requests behind a login",
                );
            } else {
                entry.held.push(HeldFrame {
                    header,
                    body: body.to_vec(),
                });
            }
            return None;
        }
        let stats = &self.metrics.gateway;
        let route_id = header.route_id;
        let seq = header.seq;
        let rejection = match self.routes.lookup(route_id) {
            None => {
                stats.ingress_unknown_route.inc();
                Some((ErrorCode::UnknownRoute, "unknown route"))
            }
            Some(route) if route.direction != Direction::ClientToServer => {
                stats.ingress_direction_rejected.inc();
                Some((ErrorCode::DirectionRejected, "server-to-client route"))
            }
            Some(route) if route.requires_auth && !entry.session.is_logged_in() => {
                stats.ingress_auth_required.inc();
                Some((ErrorCode::AuthRequired, "login first"))
            }
            Some(_) if entry.inflight.contains(seq) => {
                stats.ingress_bad_request.inc();
                Some((ErrorCode::BadRequest, "duplicate in-flight seq"))
            }
            Some(_) if entry.inflight.len() >= limits.inflight_max => {
                stats.ingress_overloaded.inc();
                Some((ErrorCode::Overloaded, "too many in-flight requests"))
            }
            Some(_)
                if route_id == wire::client::route::AUTH_LOGIN && entry.session.is_logged_in() =>
            {
                stats.ingress_bad_request.inc();
                Some((ErrorCode::BadRequest, "already logged in"))
            }
            Some(_) => None,
        };
        if let Some((code, reason)) = rejection {
            self.push_error(session_id, route_id, seq, code, reason);
            return None;
        }
        let deadline = now + limits.request_timeout;
        entry.inflight.insert(seq, InFlight { route_id, deadline });
        if !entry.armed {
            entry.armed = true;
            self.deadlines.push(Reverse((deadline, session_id)));
        }
        Some(Ingress {
            session_id,
            binding: entry.session.binding(),
            route_id,
            seq,
            body,
        })
    }

    /// Starts the login of `session_id` as `player_id` by its in-flight
    /// `auth.login` request `seq` (the token was verified): the player
    /// object decides (duplicate logins are decided there, cluster-wide),
    /// and until `complete_login` the session's further requests wait.
    /// Returns the epoch the session will have once bound (the player
    /// object addresses its pushes with it), or `None` if the session is
    /// gone or already logging in.
    pub fn begin_login(&mut self, session_id: u64, seq: u32, player_id: u64) -> Option<u32> {
        let entry = self.sessions.get_mut(&session_id)?;
        if entry.login.is_some() || !entry.session.is_live() {
            return None;
        }
        entry.login = Some(PendingLogin { seq, player_id });
        entry.session.session_epoch.checked_add(1)
    }

    /// The player object's decision on the login `seq` of `session_id`:
    /// binds the session (the epoch compare-and-set) and answers the login
    /// with the player id, or answers the refusal. Requests held meanwhile
    /// are released for the driver to replay (`take_released`). Returns the
    /// new binding, if the session was bound. A decision for a login that
    /// is no longer pending (timed out, session closed) is dropped and
    /// counted as a late answer.
    pub fn complete_login(
        &mut self,
        session_id: u64,
        seq: u32,
        outcome: LoginOutcome<'_>,
        now: Instant,
    ) -> Option<Binding> {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            self.metrics.gateway.late_answers.inc();
            return None;
        };
        let pending = match entry.login {
            Some(pending) if pending.seq == seq => pending,
            _ => {
                self.metrics.gateway.late_answers.inc();
                return None;
            }
        };
        entry.login = None;
        if !entry.held.is_empty() {
            self.released.push(session_id);
        }
        let Some(inflight) = entry.inflight.remove(seq) else {
            self.metrics.gateway.late_answers.inc();
            return None;
        };
        let epoch = entry.session.session_epoch;
        if let Some((route_index, _)) = self.routes.lookup_indexed(inflight.route_id) {
            let answered = Answered {
                route_index,
                deadline: inflight.deadline,
            };
            self.record_latency(answered, now);
        }
        let (kind, body, binding) = match outcome {
            LoginOutcome::Admitted => {
                match self.apply_binding(session_id, Target::Player, pending.player_id, epoch) {
                    Ok(binding) => (
                        FrameKind::Response,
                        pending.player_id.to_le_bytes().to_vec(),
                        Some(binding),
                    ),
                    // Nothing else binds a session while its login is
                    // pending; a failed bind is a bug, answered as one.
                    Err(_) => (
                        FrameKind::Error,
                        encode_error_body(ErrorCode::Internal, ""),
                        None,
                    ),
                }
            }
            LoginOutcome::Refused(code, reason) => {
                (FrameKind::Error, encode_error_body(code, reason), None)
            }
        };
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return binding;
        };
        let pushed = entry.outbox.push_frame(kind, inflight.route_id, seq, &body);
        if pushed == Err(PushError::Full) {
            self.close_slow_reader(session_id);
        }
        binding
    }

    /// Sessions whose held requests the driver must replay now, with the
    /// requests, in arrival order.
    pub fn take_released(&mut self, into: &mut Vec<(u64, Vec<HeldFrame>)>) {
        for session_id in std::mem::take(&mut self.released) {
            if let Some(entry) = self.sessions.get_mut(&session_id) {
                if entry.login.is_none() {
                    into.push((session_id, std::mem::take(&mut entry.held)));
                }
            }
        }
    }

    /// The seed's `apply_binding` on one session, counted: `binds` for a
    /// winner, `binds_epoch_expired` for a loser.
    pub fn apply_binding(
        &mut self,
        session_id: u64,
        target: Target,
        player_id: u64,
        expected_epoch: u32,
    ) -> Result<Binding, BindError> {
        let entry = self
            .sessions
            .get_mut(&session_id)
            .ok_or(BindError::UnknownSession)?;
        match entry
            .session
            .apply_binding(target, player_id, expected_epoch)
        {
            Ok(binding) => {
                self.metrics.gateway.binds.inc();
                Ok(binding)
            }
            Err(expired) => {
                self.metrics.gateway.binds_epoch_expired.inc();
                tracing::warn!(session_id, %expired, "bind lost the epoch race");
                Err(expired.into())
            }
        }
    }

    /// The egress gate: the seed's six checks in order, then the write.
    /// Fire-and-forget: a rejected frame is counted and logged (rate
    /// limited), never answered.
    pub fn egress(&mut self, egress: &EgressRef<'_>, now: Instant) -> Result<(), EgressRejected> {
        self.egress_with_clock(egress, || now)
    }

    /// [`Self::egress`] that reads `clock` only when it answers a request
    /// (for the request latency histogram) or must log a drop: the driver
    /// passes `Instant::now`, so a PUSH costs no clock read.
    pub fn egress_with_clock(
        &mut self,
        egress: &EgressRef<'_>,
        clock: impl FnOnce() -> Instant,
    ) -> Result<(), EgressRejected> {
        let result = self.gate(egress);
        if let Ok(Some(answered)) = result {
            self.record_latency(answered, clock());
            return Ok(());
        }
        if let Err(reason) = result {
            let stats = &self.metrics.gateway;
            let (counter, slot) = match reason {
                EgressRejected::UnknownSession => (&stats.egress_unknown_session, 0),
                EgressRejected::StaleEpoch => (&stats.egress_stale_epoch, 1),
                EgressRejected::OwnerMismatch => (&stats.egress_owner_mismatch, 2),
                EgressRejected::RouteNotFound => (&stats.egress_route_not_found, 3),
                EgressRejected::DirectionRejected => (&stats.egress_direction_rejected, 4),
                EgressRejected::LateAnswer => (&stats.late_answers, 5),
                EgressRejected::SendFailed => (&stats.egress_send_failed, 6),
            };
            counter.inc();
            self.warn[slot].warn(clock(), reason, egress.session_id, egress.route_id);
        }
        result.map(drop)
    }

    /// Records how long an answered request took, from its arrival (its
    /// deadline less the request timeout: the in-flight table keeps no
    /// second timestamp) to `now`. One `Instant` subtraction: the request
    /// timeout less the time left before the deadline, or plus the time
    /// past it (an answer the timer has not expired yet).
    fn record_latency(&self, answered: Answered, now: Instant) {
        let timeout = self.limits.request_timeout;
        let elapsed = match answered.deadline.checked_duration_since(now) {
            Some(left) => timeout.saturating_sub(left),
            None => timeout + now.duration_since(answered.deadline),
        };
        self.metrics.requests.record(answered.route_index, elapsed);
    }

    /// The egress gate; `Some` when the frame answered a request in flight.
    fn gate(&mut self, egress: &EgressRef<'_>) -> Result<Option<Answered>, EgressRejected> {
        // 1. registry hit
        let entry = self
            .sessions
            .get_mut(&egress.session_id)
            .ok_or(EgressRejected::UnknownSession)?;
        // 2. epoch equal
        if egress.session_epoch != entry.session.session_epoch {
            return Err(EgressRejected::StaleEpoch);
        }
        // 3. owner player_id equal
        if egress.player_id != entry.session.player_id {
            return Err(EgressRejected::OwnerMismatch);
        }
        // 4. route exists
        let (route_index, route) = self
            .routes
            .lookup_indexed(egress.route_id)
            .ok_or(EgressRejected::RouteNotFound)?;
        // 5. direction allows server-to-client: a PUSH on a server-to-client
        // route, or the RESPONSE/ERROR answering a client's REQUEST.
        let kind = FrameKind::from_u8(egress.kind);
        let allowed = match kind {
            Some(FrameKind::Push) => route.direction == Direction::ServerToClient,
            Some(FrameKind::Response) | Some(FrameKind::Error) => {
                route.direction == Direction::ClientToServer
            }
            _ => false,
        };
        let Some(kind) = kind.filter(|_| allowed) else {
            return Err(EgressRejected::DirectionRejected);
        };
        // Request accounting: an answer must close an in-flight request of
        // the same route, else it is late (timed out already) and dropped.
        let mut answered = None;
        if kind != FrameKind::Push {
            match entry.inflight.remove(egress.seq) {
                Some(inflight) if inflight.route_id == egress.route_id => {
                    answered = Some(Answered {
                        route_index,
                        deadline: inflight.deadline,
                    });
                }
                Some(other) => {
                    // Another route's request under this seq stays in flight.
                    entry.inflight.insert(egress.seq, other);
                    return Err(EgressRejected::LateAnswer);
                }
                None => return Err(EgressRejected::LateAnswer),
            }
        }
        // 6. the session's bounded send queue
        let pushed = entry
            .outbox
            .push_frame(kind, egress.route_id, egress.seq, egress.body);
        match pushed {
            Ok(()) => Ok(answered),
            Err(PushError::Closed) => Err(EgressRejected::SendFailed),
            Err(PushError::Full) => {
                self.close_slow_reader(egress.session_id);
                Err(EgressRejected::SendFailed)
            }
        }
    }

    /// Answers an in-flight request with an ERROR from the gateway itself
    /// (its target could not be reached, or it timed out).
    pub fn answer_error(
        &mut self,
        session_id: u64,
        seq: u32,
        code: ErrorCode,
        reason: &str,
    ) -> bool {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return false;
        };
        let Some(inflight) = entry.inflight.remove(seq) else {
            return false;
        };
        self.push_error(session_id, inflight.route_id, seq, code, reason);
        true
    }

    /// Answers TIMEOUT to every request whose deadline is at or before
    /// `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while let Some(&Reverse((at, session_id))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            let Some(entry) = self.sessions.get_mut(&session_id) else {
                continue; // closed since it was armed
            };
            entry.armed = false;
            let mut earliest_left: Option<Instant> = None;
            for (seq, inflight) in entry.inflight.iter() {
                if inflight.deadline <= now {
                    self.due.push((seq, inflight.route_id, inflight.deadline));
                } else if earliest_left.is_none_or(|left| inflight.deadline < left) {
                    earliest_left = Some(inflight.deadline);
                }
            }
            for &(seq, _, _) in &self.due {
                entry.inflight.remove(seq);
                // A login that timed out ends: its session stays logged
                // out, and what waited behind it is released.
                if entry.login.is_some_and(|login| login.seq == seq) {
                    entry.login = None;
                    if !entry.held.is_empty() {
                        self.released.push(session_id);
                    }
                }
            }
            if let Some(left) = earliest_left {
                entry.armed = true;
                self.deadlines.push(Reverse((left, session_id)));
            }
            let mut due = std::mem::take(&mut self.due);
            // Answer in seq order: a map's iteration order is arbitrary.
            due.sort_unstable();
            for &(seq, route_id, deadline) in &due {
                self.metrics.gateway.timeouts.inc();
                if let Some((route_index, _)) = self.routes.lookup_indexed(route_id) {
                    let answered = Answered {
                        route_index,
                        deadline,
                    };
                    self.record_latency(answered, now);
                }
                expired += 1;
                self.push_error(
                    session_id,
                    route_id,
                    seq,
                    ErrorCode::Timeout,
                    "no answer in time",
                );
            }
            due.clear();
            self.due = due;
        }
        expired
    }

    /// Closes every session whose last complete frame is `idle` or more
    /// before `now` (a silent client, or one stuck in a half frame);
    /// returns how many. A walk over the core's sessions, so the driver
    /// runs it on a period (a fraction of `idle`), not per read.
    pub fn close_idle(&mut self, now: Instant, idle: Duration) -> usize {
        let idle_sessions: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, entry)| now.saturating_duration_since(entry.last_frame) >= idle)
            .map(|(&session_id, _)| session_id)
            .collect();
        for &session_id in &idle_sessions {
            self.close(session_id, CloseReason::Idle);
        }
        idle_sessions.len()
    }

    /// When `expire` may next have work: at or before the earliest deadline
    /// of a request in flight (a request answered since its session was
    /// armed can leave it earlier).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _))| *at)
    }

    /// `shield.client.close` in the seed's fixed order: PUSH `sys.kicked`
    /// (docs/protocol.md), then 1. `Unbound` to the current target with the last
    /// epoch, 2. invalidate with `K_ANY_EPOCH`, 3. remove from the registry,
    /// 4. close the connection (after the queued frames, so the client
    /// reads `sys.kicked`); an empty reason is recorded as "kicked".
    /// With `only_player`, the session is kicked only while bound to that
    /// player. Returns whether a session was kicked.
    pub fn kick(&mut self, session_id: u64, only_player: Option<u64>, reason: &str) -> bool {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return false;
        };
        if only_player.is_some_and(|player| player != entry.session.player_id) {
            return false;
        }
        let reason = if reason.is_empty() { "kicked" } else { reason };
        // Best effort: a full queue still gets closed below.
        let _ = entry.outbox.push_frame(
            FrameKind::Push,
            wire::client::route::SYS_KICKED,
            0,
            reason.as_bytes(),
        );
        self.metrics.gateway.kicks.inc();
        tracing::info!(session_id, reason, "session kicked");
        self.finish(session_id, NoticeKind::Unbound, false);
        true
    }

    /// A connection that ended by itself (the bridge's `on_disconnect`).
    /// Notifies the target with `Disconnected` only if the binding is still
    /// live: after a kick the session is gone and nothing more is sent.
    pub fn close(&mut self, session_id: u64, reason: CloseReason) -> bool {
        if !self.sessions.contains_key(&session_id) {
            return false;
        }
        match reason {
            CloseReason::Idle => self.metrics.gateway.idle_closed.inc(),
            CloseReason::SlowReader => self.metrics.gateway.slow_readers_closed.inc(),
            _ => {}
        }
        let abort = matches!(reason, CloseReason::SlowReader);
        self.finish(session_id, NoticeKind::Disconnected, abort);
        true
    }

    /// A protocol violation: one ERROR frame saying why, then close.
    pub fn protocol_violation(&mut self, session_id: u64, error: FrameError) {
        self.metrics.gateway.ingress_protocol_violation.inc();
        if let Some(entry) = self.sessions.get(&session_id) {
            let _ = entry
                .outbox
                .push_error(0, 0, ErrorCode::BadRequest, &error.to_string());
        }
        self.close(session_id, CloseReason::ProtocolViolation);
    }

    /// Notices for targets queued since the last call, in order.
    pub fn take_notices(&mut self, into: &mut Vec<Notice>) {
        into.append(&mut self.notices);
    }

    fn close_slow_reader(&mut self, session_id: u64) {
        tracing::warn!(session_id, "send queue full: closing a slow reader");
        self.close(session_id, CloseReason::SlowReader);
    }

    /// Queues a gateway-originated ERROR; a full queue closes the session.
    fn push_error(
        &mut self,
        session_id: u64,
        route_id: u32,
        seq: u32,
        code: ErrorCode,
        reason: &str,
    ) {
        let Some(entry) = self.sessions.get(&session_id) else {
            return;
        };
        if entry.outbox.push_error(route_id, seq, code, reason) == Err(PushError::Full) {
            self.close_slow_reader(session_id);
        }
    }

    /// The common tail of kick and close: notify (if live), invalidate,
    /// remove, close.
    fn finish(&mut self, session_id: u64, notice: NoticeKind, abort: bool) {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return;
        };
        let last = entry.session.binding();
        if entry.session.is_live() {
            match notice {
                NoticeKind::Unbound => self.metrics.gateway.notices_unbound.inc(),
                NoticeKind::Disconnected => self.metrics.gateway.notices_disconnected.inc(),
            }
            self.notices.push(Notice {
                kind: notice,
                session_id,
                binding: last,
            });
        }
        // Unconditional: from here every reference to the session is stale,
        // before the socket is actually closed.
        let invalidated = entry.session.apply_binding(Target::None, 0, K_ANY_EPOCH);
        debug_assert!(invalidated.is_ok() || last.session_epoch == K_ANY_EPOCH - 1);
        let Some(entry) = self.sessions.remove(&session_id) else {
            return;
        };
        self.metrics.gateway.sessions_active.add(-1);
        if abort {
            entry.outbox.abort();
        } else {
            entry.outbox.close();
        }
    }
}

#[path = "core_redirect.rs"]
mod redirect;
pub use self::redirect::redirect_body;
use self::redirect::Redirecting;

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
