//! The gateway's per-core state machine (sans-IO): the session registry,
//! ingress validation, request accounting, the egress gate, kick and close.
//!
//! It does no IO and reads no clock: the driver passes `now` in, frames for
//! a client go into each session's [`Outbox`], and notices for targets are
//! queued for the driver to deliver ([`GatewayCore::take_notices`]).
//!
//! One [`GatewayCore`] holds every session of a core; its methods are split
//! by the sub-state of a session they act on, each file an `impl` block
//! over the same state:
//! - this file: the registry, a session's opening and its end (kick,
//!   close, protocol violation, idle), shared by every sub-state;
//! - [`login`]: the handshake, from `auth.login` to the binding (requests
//!   held behind a pending login, the epoch compare-and-set);
//! - [`requests`]: a session's requests: the ingress checks, in-flight
//!   accounting and TIMEOUT;
//! - [`egress`]: frames for the client: the six-check gate and the
//!   request latency it records;
//! - [`redirect`]: a draining node moving its sessions away, and a
//!   session placed on its player's node;
//! - [`resume`]: resumable sessions: the token, the detached session and
//!   its window, `auth.resume`; [`push_ring`]: the numbered pushes kept;
//! - [`relay`]: a connection that resumed a session, relaying to it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::num::NonZeroU64;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wire::client::{ErrorCode, FrameError, FrameKind};

use super::body_codec::ListenerCodecs;
use super::inflight::InFlightTable;
use super::outbox::{Outbox, PushError};
use super::rate::{RequestBucket, RequestRate};
use super::session::{Session, Target, K_ANY_EPOCH};
use super::{session_core, Notice, NoticeKind};
use crate::config::GatewayConfig;
use crate::gateway_addresses::Transport;
use crate::metrics::{CoreMetrics, GatewayStats};
use crate::page::smallest_by_key;
use crate::route::RouteTable;

mod egress;
mod ended_tokens;
mod login;
mod push_ring;
mod redirect;
mod relay;
mod requests;
mod resume;
mod slots;

use self::egress::WarnLimiter;
pub use self::egress::{EgressRef, EgressRejected};
use self::login::PendingLogin;
pub use self::login::{BindError, HeldFrame, LoginOutcome};
pub use self::redirect::redirect_body;
use self::redirect::Redirecting;
use self::relay::RelayTables;
use self::resume::{number_push, Resumable, ResumeTables};
pub use self::resume::{
    NewConnection, ResumeRefusal, ResumeSettings, ResumeToken, Resumed, TokenEvent,
    RESUMED_ELSEWHERE_REASON,
};

/// What became of an operator's PUSH to one session ([`GatewayCore::push_to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionPush {
    /// Queued for the client.
    Queued,
    /// No session of that id bound to that player on this core.
    NoSession,
    /// Its send queue is full (or closing): the push was dropped.
    QueueFull,
}

/// One session as the admin endpoint lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub session_id: u64,
    /// 0 before a login.
    pub player_id: u64,
    pub session_epoch: u32,
    /// Requests of the session waiting for their answer.
    pub inflight: usize,
}

type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// The limits the state machine enforces, from [`GatewayConfig`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub inflight_max: usize,
    pub request_timeout: Duration,
    pub send_queue_max: usize,
    /// The per-session request rate limit; `None`: unlimited.
    pub request_rate: Option<RequestRate>,
    /// The longest body a frame to a client may carry (`gateway.body_max_bytes`).
    pub body_max: usize,
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
            body_max: config.body_max_bytes as usize,
        }
    }
}

/// The `sys.kicked` reason of a session whose token expired
/// (docs/protocol.md, section 2).
pub const TOKEN_EXPIRED_REASON: &str = "token expired";

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
    /// The node fenced with answers made before the fence still queued
    /// (`drop_answers_made_before_fence`).
    Fenced,
    /// It had not logged in, and a new connection needed its slot at the
    /// session cap (`evict_unauthenticated`).
    Evicted,
}

struct Entry {
    session: Session,
    /// A login or a redirect under way; `None` for a session with neither
    /// (nearly every one, nearly all the time).
    transit: Option<Box<Transit>>,
    inflight: InFlightTable,
    /// Whether the session has its one entry in `GatewayCore::deadlines`.
    armed: bool,
    /// When its last complete frame arrived (or it opened): a session
    /// silent for `idle_timeout` is closed by `close_idle`.
    last_frame: Instant,
    outbox: Rc<Outbox>,
    /// Told where its player lives (`place_session`): a session gets that
    /// `sys.redirect` once, whatever its later logins.
    placed: bool,
    /// The grace ended with answers still owed: new requests are refused,
    /// and the session closes once nothing is owed.
    closing: bool,
    /// The session's request rate limit (`Limits::request_rate`).
    bucket: RequestBucket,
    /// The expiry (unix seconds) of the token of its last verified login:
    /// once logged in, the session is kicked from that second on
    /// (`kick_expired`).
    token_expiry_unix_s: Option<NonZeroU64>,
    /// The listener's transport: a `sys.redirect` names another node's
    /// listener of the same one, so the client keeps speaking as it does.
    transport: Transport,
    /// A resumable session's token, kept pushes and window (`resume`).
    resume: Option<Box<Resumable>>,
}

impl Entry {
    /// The connection its requests come from now (`Resumable::
    /// connection`; 0 for a session that cannot be resumed, whose
    /// connection is its whole life).
    fn connection(&self) -> u32 {
        self.resume.as_ref().map_or(0, |resume| resume.connection)
    }
}

/// What a session has only while a login or a redirect is under way, or
/// while it fronts a resumed session, boxed in its entry
/// (`Entry::transit`) and dropped once none is (`Entry::settle`): held
/// inline, these bytes were in every entry.
#[derive(Default)]
struct Transit {
    /// A login waiting for its player object's decision (see
    /// `begin_login`); requests that arrive meanwhile wait in `held`.
    login: Option<PendingLogin>,
    /// Requests read while a login was pending, replayed in order once it
    /// ends (bounded by `inflight_max`).
    held: Vec<HeldFrame>,
    /// Told to move (`sys.redirect`): its grace ends then.
    redirect_until: Option<Instant>,
    /// A relay front (a connection that resumed a session): the session
    /// its frames go to; 0 for any other.
    relay_to: u64,
}

impl Entry {
    fn login(&self) -> Option<PendingLogin> {
        self.transit.as_ref().and_then(|transit| transit.login)
    }

    /// Whether one more frame may wait behind the session's login: held
    /// and in-flight requests together stay under `inflight_max`.
    fn may_hold_another(&self, inflight_max: usize) -> bool {
        let held = self
            .transit
            .as_ref()
            .map_or(0, |transit| transit.held.len());
        held + self.inflight.len() < inflight_max
    }

    /// The session this connection fronts (`relay`), or 0.
    fn relay_to(&self) -> u64 {
        self.transit.as_ref().map_or(0, |transit| transit.relay_to)
    }

    /// Makes this connection the front of `session_id` (0: no longer one).
    fn set_relay_to(&mut self, session_id: u64) {
        self.transit().relay_to = session_id;
        self.settle();
    }

    fn redirect_until(&self) -> Option<Instant> {
        self.transit
            .as_ref()
            .and_then(|transit| transit.redirect_until)
    }

    /// The transit, made if the session had none.
    fn transit(&mut self) -> &mut Transit {
        self.transit.get_or_insert_with(Box::default)
    }

    /// Drops the transit once nothing is under way.
    fn settle(&mut self) {
        let settled = self.transit.as_ref().is_some_and(|transit| {
            transit.login.is_none()
                && transit.held.is_empty()
                && transit.redirect_until.is_none()
                && transit.relay_to == 0
        });
        if settled {
            self.transit = None;
        }
    }
}

/// The most bytes a session's entry takes: every connection has one, and
/// 128 is an allocator size class (the next is 160).
const ENTRY_BYTES_MAX: usize = 128;
const _: () = assert!(std::mem::size_of::<Entry>() <= ENTRY_BYTES_MAX);

/// One core's gateway state. See the module documentation.
pub struct GatewayCore {
    core_id: u64,
    next_serial: u64,
    limits: Limits,
    /// Every session's entry, boxed: a hash table's slots are as large as
    /// what it holds, and at 10,000 sessions it has 16,384 of them, so an
    /// inline 224-byte entry cost about 380 bytes a session; boxed, a slot
    /// is 16 bytes and the entry its own 128 (`ENTRY_BYTES_MAX`).
    sessions: FastMap<u64, Box<Entry>>,
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
    warn: [WarnLimiter; 8],
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
    /// The body codec of each listener: a session's profile.
    codecs: ListenerCodecs,
    /// Resumable sessions' tokens, the detached ones, relays (`resume`).
    resume: ResumeTables,
    /// Relay fronts' frames and ends for other cores (`relay`).
    relays: RelayTables,
    /// Sessions that opened without a login, for eviction at the session
    /// cap (`slots`).
    unauthenticated: slots::Unauthenticated,
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
            routes,
            redirecting: None,
            codecs: ListenerCodecs::default(),
            resume: ResumeTables::default(),
            relays: RelayTables::default(),
            unauthenticated: Default::default(),
        }
    }

    /// The body codec of each listener (`gateway.body_codec` and the
    /// others): sessions opened from now on take their listener's.
    pub fn set_listener_codecs(&mut self, codecs: ListenerCodecs) {
        self.codecs = codecs;
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
        self.open_session_via(outbox, Transport::Plain, now)
    }

    /// [`Self::open_session`] for a connection accepted on a listener of
    /// `transport`: a later `sys.redirect` names another node's listener
    /// of the same transport.
    pub fn open_session_via(
        &mut self,
        outbox: Rc<Outbox>,
        transport: Transport,
        now: Instant,
    ) -> u64 {
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
            Box::new(Entry {
                session: Session {
                    protocol_profile: self.codecs.of(transport),
                    ..Session::new()
                },
                transit: None,
                inflight: InFlightTable::new(),
                armed: false,
                last_frame: now,
                outbox,
                placed: false,
                closing: false,
                bucket: RequestBucket::new(now),
                token_expiry_unix_s: None,
                transport,
                resume: None,
            }),
        );
        self.note_unauthenticated(session_id);
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

    /// A page of this core's sessions, for the admin endpoint: the `limit`
    /// smallest session ids above `after`, of `player` only if given, in
    /// id order. One walk of the sessions, holding no more than twice the
    /// page (`page::smallest_by_key`).
    pub fn sessions_page(
        &self,
        player: Option<u64>,
        after: Option<u64>,
        limit: usize,
    ) -> Vec<SessionRow> {
        let walk = self
            .sessions
            .iter()
            .filter(|(id, entry)| {
                after.is_none_or(|after| **id > after)
                    && player.is_none_or(|player| entry.session.player_id == player)
            })
            .map(|(id, entry)| SessionRow {
                session_id: *id,
                player_id: entry.session.player_id,
                session_epoch: entry.session.session_epoch,
                inflight: entry.inflight.len(),
            });
        smallest_by_key(walk, limit, |row| row.session_id)
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

    /// `shield.client.close` in a fixed order: PUSH `sys.kicked`
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
        self.remember_kick(session_id, reason);
        self.finish(session_id, NoticeKind::Unbound, false);
        true
    }

    /// An operator's PUSH (`route_id`, `body`) to session `session_id`
    /// while it is bound to `player_id` (a session id is never reused; the
    /// player check makes a stale listing harmless).
    pub fn push_to(
        &mut self,
        session_id: u64,
        player_id: u64,
        route_id: u32,
        body: &[u8],
    ) -> SessionPush {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return SessionPush::NoSession;
        };
        if player_id == 0 || entry.session.player_id != player_id {
            return SessionPush::NoSession;
        }
        let seq = match number_push(&mut entry.resume, route_id, body) {
            Some((_, true)) => return SessionPush::Queued, // kept for a resume
            Some((seq, false)) => seq,
            None => 0,
        };
        match entry
            .outbox
            .push_frame(FrameKind::Push, route_id, seq, body)
        {
            Ok(()) => SessionPush::Queued,
            Err(_) => SessionPush::QueueFull,
        }
    }

    /// A connection that ended by itself (the bridge's `on_disconnect`).
    /// Notifies the target with `Disconnected` only if the binding is still
    /// live: after a kick the session is gone and nothing more is sent.
    pub fn close(&mut self, session_id: u64, reason: CloseReason) -> bool {
        let Some(entry) = self.sessions.get(&session_id) else {
            return false;
        };
        let by_itself = matches!(
            reason,
            CloseReason::PeerClosed | CloseReason::Idle | CloseReason::SlowReader
        );
        if by_itself && entry.resume.as_ref().is_some_and(|resume| resume.detached) {
            return false; // no connection to close
        }
        if by_itself && self.detaches(session_id) {
            match reason {
                CloseReason::Idle => self.metrics.gateway.idle_closed.inc(),
                CloseReason::SlowReader => self.metrics.gateway.slow_readers_closed.inc(),
                _ => {}
            }
            self.detach(session_id, reason == CloseReason::SlowReader);
            return true;
        }
        match reason {
            CloseReason::Idle => self.metrics.gateway.idle_closed.inc(),
            CloseReason::SlowReader => self.metrics.gateway.slow_readers_closed.inc(),
            CloseReason::Fenced => self.metrics.gateway.sessions_closed_at_fence.inc(),
            _ => {}
        }
        let abort = matches!(
            reason,
            CloseReason::SlowReader | CloseReason::Fenced | CloseReason::Evicted
        );
        self.finish(session_id, NoticeKind::Disconnected, abort);
        true
    }

    /// [`Self::close`] from the connection whose send queue is `outbox`:
    /// nothing if the session has another connection now (it was resumed
    /// on a new one).
    pub fn close_connection(
        &mut self,
        session_id: u64,
        outbox: &Rc<Outbox>,
        reason: CloseReason,
    ) -> bool {
        self.holds_connection(session_id, outbox) && self.close(session_id, reason)
    }

    /// Whether `session_id` is open and writes to `outbox` (its connection's).
    pub fn holds_connection(&self, session_id: u64, outbox: &Rc<Outbox>) -> bool {
        self.sessions
            .get(&session_id)
            .is_some_and(|entry| Rc::ptr_eq(&entry.outbox, outbox))
    }

    /// The node fenced: a successful answer still queued for a session was
    /// made by the incarnation that ended, maybe after another node took
    /// its object over, and never leaves (`answer_gate`). Each such session
    /// is closed with its queue dropped; its client's requests stay
    /// uncertain. Returns how many were closed.
    pub fn drop_answers_made_before_fence(&mut self) -> usize {
        let holding: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, entry)| entry.outbox.holds_answers())
            .map(|(session_id, _)| *session_id)
            .collect();
        for session_id in &holding {
            self.close(*session_id, CloseReason::Fenced);
        }
        holding.len()
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

    /// Whether notices or resume bookkeeping wait for the driver: checked
    /// after every receive and answer, where nearly always nothing does.
    pub fn has_queued_for_driver(&self) -> bool {
        !self.notices.is_empty() || self.resume.has_events() || self.relays.has_queued()
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
        let Some(mut entry) = self.sessions.remove(&session_id) else {
            return;
        };
        self.metrics.gateway.sessions_active.add(-1);
        self.forget_resume(entry.resume.take());
        if entry.relay_to() != 0 {
            self.front_closed(session_id, entry.relay_to());
        }
        if abort {
            entry.outbox.abort();
        } else {
            entry.outbox.close();
        }
    }
}

#[cfg(test)]
mod tests;
