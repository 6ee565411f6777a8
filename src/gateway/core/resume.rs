//! Resumable sessions (docs/protocol.md, section 12): a session whose
//! `auth.login` was a version-2 REQUEST numbers its pushes and keeps the
//! last `auth.resume_pushes_max` of them; when its connection ends by
//! itself it is detached, not finished: it stays bound (its player counts
//! as logged in, objects' pushes to it are numbered and kept) for
//! `auth.resume_window_ms`, and `auth.resume` with its token on a new
//! connection takes it back, every push after the client's last one
//! delivered again, in order.
//!
//! The session keeps its identity (its id and epoch) through a resume, so
//! the references objects hold to it (a room's member list, the player
//! object's login) keep reaching it: only the connection behind it
//! changes. A new connection is always a relay's front (see the driver's
//! `resume.rs`): its frames are handed to the session's core, and the
//! session's frames are written to a local outbox the driver pumps to the
//! front, on this core or another.
//!
//! Sans-IO like the rest of the core: the token comes from the driver (a
//! CSPRNG), `now` is passed in, and the node-wide token directory is fed
//! from [`TokenEvent`]s the driver takes.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use wire::client::{route, ErrorCode, FrameKind};

use super::ended_tokens::EndedTokens;
use super::push_ring::PushRing;
use super::{FastMap, GatewayCore, PushError};
use crate::gateway::outbox::Outbox;
use crate::gateway::NoticeKind;
use crate::gateway_addresses::Transport;

/// A session's resume token: 128 random bits, a secret of the session.
pub type ResumeToken = [u8; 16];

/// The `sys.kicked` reason of a connection whose session was resumed on
/// another one.
pub const RESUMED_ELSEWHERE_REASON: &str = "resumed elsewhere";

/// The server's resume settings (`auth.resume_window_ms`,
/// `auth.resume_pushes_max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumeSettings {
    /// How long a detached session waits for its client; zero: sessions
    /// are not resumable.
    pub window: Duration,
    /// Pushes a resumable session keeps for a resume.
    pub pushes_max: usize,
    /// Bytes of push bodies it keeps at most (`gateway.send_queue_bytes_max`:
    /// a connected client further behind is closed as a slow reader).
    pub bytes_max: usize,
    /// Detached sessions a core keeps at most (`for_core_of`): past
    /// it, the core's oldest detached session ends.
    pub detached_max: usize,
}

impl ResumeSettings {
    /// Resuming turned off.
    pub const OFF: ResumeSettings = ResumeSettings {
        window: Duration::ZERO,
        pushes_max: 0,
        bytes_max: 0,
        detached_max: 0,
    };

    pub fn new(window_ms: u64, pushes_max: u32, bytes_max: usize) -> ResumeSettings {
        ResumeSettings {
            window: Duration::from_millis(window_ms),
            pushes_max: pushes_max as usize,
            bytes_max,
            detached_max: usize::MAX,
        }
    }

    /// These settings for one of `cores` cores of a node that holds
    /// `sessions_max` sessions (`gateway.sessions_max`): a core keeps at
    /// most its share of that many detached sessions, so a node's detached
    /// sessions (which hold no connection, nor a slot of `sessions_max`)
    /// are at most about as many as its connected ones.
    pub fn for_core_of(self, sessions_max: u32, cores: usize) -> ResumeSettings {
        ResumeSettings {
            detached_max: (sessions_max as usize).div_ceil(cores.max(1)).max(1),
            ..self
        }
    }

    pub fn enabled(&self) -> bool {
        !self.window.is_zero() && self.pushes_max > 0
    }

    /// How long a token whose window passed is still answered `resume
    /// window expired` rather than `unknown session` (and a kicked
    /// session's, `session kicked`).
    fn ended_memory(&self) -> Duration {
        self.window.max(Duration::from_secs(60))
    }
}

/// Why `auth.resume` failed; its reason is the ERROR's, exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeRefusal {
    Expired,
    Unknown,
    PushesLost,
    /// The session was kicked (its `sys.kicked` may never have reached
    /// the client): as after that push, the client does not log in again
    /// by itself.
    Kicked,
    /// The session was kicked because its login's token expired: the
    /// client logs in with a fresh one.
    TokenExpired,
}

impl ResumeRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            ResumeRefusal::Expired => "resume window expired",
            ResumeRefusal::Unknown => "unknown session",
            ResumeRefusal::PushesLost => "pushes lost",
            ResumeRefusal::Kicked => "session kicked",
            ResumeRefusal::TokenExpired => super::TOKEN_EXPIRED_REASON,
        }
    }

    /// What a resume of a session kicked with the `sys.kicked` reason
    /// `reason` is told: the same as that push would have.
    fn after_kick(reason: &str) -> ResumeRefusal {
        if reason == super::TOKEN_EXPIRED_REASON {
            ResumeRefusal::TokenExpired
        } else {
            ResumeRefusal::Kicked
        }
    }

    pub fn code(self) -> ErrorCode {
        ErrorCode::AuthFailed
    }
}

/// A change the node-wide token directory must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenEvent {
    /// A session of this core holds `token` (or it remembers the token of
    /// a session that ended: expired, or kicked).
    Held(ResumeToken, u64),
    /// This core forgot `token`.
    Forgotten(ResumeToken),
}

/// Numbers a PUSH to a session whose resume state is `resume` if it is
/// resumable (and keeps it for a resume): `Some(seq)`, with `true` when the
/// session has no connection to write it to. `None`: a version-1 session,
/// or one whose login is not answered yet (seq 0).
pub(super) fn number_push(
    resume: &mut Option<Box<Resumable>>,
    route_id: u32,
    body: &[u8],
) -> Option<(u32, bool)> {
    let resume = resume.as_mut()?;
    if resume.is_offer() {
        return None;
    }
    Some((resume.ring.record(route_id, body), resume.detached))
}

/// Forgets every request in flight: their answers are dropped as late.
/// Counts a refused resume by its reason.
fn count_refusal(stats: &crate::metrics::GatewayStats, refusal: ResumeRefusal) {
    match refusal {
        ResumeRefusal::Expired => stats.resumes_refused_expired.inc(),
        ResumeRefusal::Unknown => stats.resumes_refused_unknown.inc(),
        ResumeRefusal::PushesLost => stats.resumes_refused_pushes_lost.inc(),
        ResumeRefusal::Kicked => stats.resumes_refused_kicked.inc(),
        ResumeRefusal::TokenExpired => stats.resumes_refused_token_expired.inc(),
    }
}

/// Ends the requests of the session's connection that ended or was
/// replaced: they leave the in-flight table, and the session moves on to
/// its next connection, so their answers, when they come, are dropped as
/// late (`Resumable::connection`), even for a seq the next connection
/// reuses. The client retries them (with their keys).
fn end_connection_requests(entry: &mut super::Entry) {
    if let Some(resume) = entry.resume.as_mut() {
        resume.connection = resume.connection.wrapping_add(1);
    }
    let inflight = &mut entry.inflight;
    let seqs: Vec<u32> = inflight.iter().map(|(seq, _)| seq).collect();
    for seq in seqs {
        inflight.remove(seq);
    }
}

/// The resume state of one resumable session.
#[derive(Debug)]
pub(super) struct Resumable {
    token: ResumeToken,
    pub(super) ring: PushRing,
    /// Whether the token may resume the session now: from the login until
    /// a resume, and again once the connection that resumed ends. A token
    /// used twice resumes once.
    armed: bool,
    /// The session has no connection.
    pub(super) detached: bool,
    /// When the detached session's window started (the first sweep after
    /// its connection ended: the core reads no clock of its own).
    detached_at: Option<Instant>,
    /// The relay front that carries the session's connection since its
    /// last resume (a session id, on any core of the node).
    front: Option<u64>,
    /// Which of the session's connections its requests now come from:
    /// moved on whenever one ends or a resume takes the session, so an
    /// answer to a request of an earlier connection, which the session's
    /// epoch cannot tell (a resume keeps it), is dropped as late even
    /// when the new connection reused its seq on the same route.
    pub(super) connection: u32,
}

impl Resumable {
    /// Offered to a login not answered yet: not resumable so far.
    pub(super) fn is_offer(&self) -> bool {
        !self.armed && !self.detached && self.front.is_none()
    }
}

/// The connection a resume moves its session to.
pub struct NewConnection {
    /// Its relay front: a session id, on any core of the node.
    pub front: u64,
    /// The transport of the listener that accepted it.
    pub transport: Transport,
    /// Where the session's frames go from now on: the driver pumps them to
    /// the front.
    pub outbox: Rc<Outbox>,
}

/// What a successful resume did, for the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resumed {
    pub session_id: u64,
    pub player_id: u64,
    /// Kept pushes delivered again.
    pub replayed: usize,
}

/// The core's resume bookkeeping beside its sessions.
#[derive(Default)]
pub(super) struct ResumeTables {
    pub(super) settings: Option<ResumeSettings>,
    /// Tokens of this core's resumable sessions.
    tokens: FastMap<ResumeToken, u64>,
    /// Tokens of sessions that ended while a resume could still come.
    ended: EndedTokens,
    /// Detached sessions, oldest first (the sweep walks these, not every
    /// session); sessions that ended since may stay until the sweep.
    detached: VecDeque<u64>,
    /// How many sessions are detached now (`detached` without those that
    /// ended), against `ResumeSettings::detached_max`.
    detached_count: usize,
    /// When the sweep last looked for expired tokens to forget.
    pruned_at: Option<Instant>,
    /// Changes for the node-wide directory (`take_token_events`).
    events: Vec<TokenEvent>,
}

impl ResumeTables {
    /// Whether a directory change waits to be taken.
    pub(super) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Remembers an ended session's token, within as many as the core
    /// keeps detached sessions (`detached_max`).
    fn remember_ended(&mut self, ended: (ResumeToken, ResumeRefusal, Option<Instant>)) {
        let max = self.settings.map_or(1, |settings| settings.detached_max);
        self.ended.insert(ended, max, &mut self.events);
    }
}

impl GatewayCore {
    /// Sessions of this core become resumable after a version-2 login
    /// (`OFF`: never).
    pub fn set_resume_settings(&mut self, settings: ResumeSettings) {
        self.resume.settings = Some(settings).filter(ResumeSettings::enabled);
    }

    /// Offers resuming to `session_id`, whose version-2 `auth.login` is
    /// pending: once its player object admits it, the login RESPONSE is
    /// followed by a `sys.session` PUSH with `token`. Ignored when resuming
    /// is off.
    pub fn offer_resume(&mut self, session_id: u64, token: ResumeToken) {
        let Some(settings) = self.resume.settings else {
            return;
        };
        if let Some(entry) = self.sessions.get_mut(&session_id) {
            entry.resume = Some(Box::new(Resumable {
                token,
                ring: PushRing::new(settings.pushes_max, settings.bytes_max),
                armed: false,
                detached: false,
                detached_at: None,
                front: None,
                connection: 0,
            }));
        }
    }

    /// After the login RESPONSE: a session offered resuming and now bound
    /// gets its `sys.session` PUSH, and its token counts; one refused
    /// forgets the offer.
    pub(super) fn settle_resume_offer(&mut self, session_id: u64, admitted: bool) {
        let Some(settings) = self.resume.settings else {
            return;
        };
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return;
        };
        let Some(resume) = entry.resume.as_mut().filter(|resume| !resume.armed) else {
            return;
        };
        if !admitted || !entry.session.is_logged_in() {
            entry.resume = None;
            return;
        }
        resume.armed = true;
        let token = resume.token;
        let mut body = token.to_vec();
        let window_ms = u32::try_from(settings.window.as_millis()).unwrap_or(u32::MAX);
        body.extend_from_slice(&window_ms.to_le_bytes());
        if let Some(old) = self.resume.tokens.insert(token, session_id) {
            // 128 random bits do not collide; a CSPRNG that repeats is a bug.
            tracing::error!(old, session_id, "a resume token was issued twice");
        }
        self.resume.events.push(TokenEvent::Held(token, session_id));
        if entry
            .outbox
            .push_frame(FrameKind::Push, route::SYS_SESSION, 0, &body)
            == Err(PushError::Full)
        {
            self.close_slow_reader(session_id);
        }
    }

    /// Whether a connection that ended must detach the session rather than
    /// finish it: a resumable session, logged in, whose connection ended
    /// by itself.
    pub(super) fn detaches(&self, session_id: u64) -> bool {
        self.sessions.get(&session_id).is_some_and(|entry| {
            entry.session.is_logged_in()
                && entry.session.is_live()
                && entry
                    .resume
                    .as_ref()
                    .is_some_and(|resume| resume.armed || resume.front.is_some())
        })
    }

    /// Detaches `session_id` from its connection (which is closed, or
    /// aborted): the session stays bound for the window.
    pub(super) fn detach(&mut self, session_id: u64, abort: bool) {
        let Some(entry) = self.sessions.get_mut(&session_id) else {
            return;
        };
        let Some(resume) = entry.resume.as_mut() else {
            return;
        };
        if resume.detached {
            return;
        }
        resume.detached = true;
        resume.detached_at = None;
        resume.armed = true;
        resume.front = None;
        end_connection_requests(entry);
        if let Some(transit) = entry.transit.as_mut() {
            transit.held.clear();
            transit.login = None;
        }
        entry.settle();
        let closed = Rc::new(Outbox::new(1));
        closed.close();
        let connection = std::mem::replace(&mut entry.outbox, closed);
        if abort {
            connection.abort();
        } else {
            connection.close();
        }
        self.resume.detached.push_back(session_id);
        self.resume.detached_count += 1;
        tracing::debug!(session_id, "session detached: resumable");
        self.bound_detached();
    }

    /// Past `detached_max` detached sessions, the oldest end first, as if
    /// their window had passed (counted in
    /// `routerd_gateway_detached_evicted_total`): a client that logs in
    /// and drops its connection over and over (as `multi` allows) cannot
    /// keep more sessions, each with its token and kept pushes, than the
    /// core's share of `gateway.sessions_max`.
    fn bound_detached(&mut self) {
        let max = self.resume.settings.map_or(usize::MAX, |s| s.detached_max);
        while self.resume.detached_count > max {
            let Some(oldest) = self.resume.detached.pop_front() else {
                break;
            };
            let detached = self
                .sessions
                .get(&oldest)
                .and_then(|entry| entry.resume.as_ref())
                .is_some_and(|resume| resume.detached);
            if detached {
                self.metrics.gateway.detached_evicted.inc();
                tracing::info!(
                    session_id = oldest,
                    "too many detached sessions: the oldest ends"
                );
                self.end_detached(oldest, None);
            }
        }
    }

    /// Resumes the session `token` names on a new connection (`via`):
    /// answers the `auth.resume` request `seq` with the player id, then
    /// every kept push after `last_seen`. The old connection, if open, is
    /// kicked. The session speaks as the new connection does from now on:
    /// in its listener's body codec, and a later `sys.redirect` names a
    /// listener of its transport (a client that resumed over plain TCP a
    /// session it logged in over WebSocket speaks plain TCP).
    pub fn resume(
        &mut self,
        token: &ResumeToken,
        last_seen: u32,
        seq: u32,
        via: NewConnection,
        now: Instant,
    ) -> Result<Resumed, ResumeRefusal> {
        let session_id = match self.resume_check(token, last_seen, now) {
            Ok(session_id) => session_id,
            Err(refusal) => {
                count_refusal(&self.metrics.gateway, refusal);
                return Err(refusal);
            }
        };
        self.metrics.gateway.sessions_resumed.inc();
        self.take_connection(session_id, via, now);
        let entry = self.sessions.get_mut(&session_id).expect("checked");
        let player_id = entry.session.player_id;
        let _ = entry.outbox.push_frame(
            FrameKind::Response,
            route::AUTH_RESUME,
            seq,
            &player_id.to_le_bytes(),
        );
        let mut replayed = 0;
        let resume = entry.resume.as_ref().expect("checked");
        for push in resume.ring.after(last_seen).into_iter().flatten() {
            let _ = entry
                .outbox
                .push_frame(FrameKind::Push, push.route_id, push.seq, &push.body);
            replayed += 1;
        }
        self.resume.detached.retain(|id| *id != session_id);
        tracing::info!(session_id, replayed, "session resumed");
        Ok(Resumed {
            session_id,
            player_id,
            replayed,
        })
    }

    /// The resumed session `session_id` moves to the connection `via`:
    /// the old one, if still open, is kicked (`resumed elsewhere`) and
    /// closed, the old one's requests end, and the session is served as
    /// one of `via`'s listener (its body codec, its transport).
    fn take_connection(&mut self, session_id: u64, via: NewConnection, now: Instant) {
        let profile = self.codecs.of(via.transport);
        let entry = self.sessions.get_mut(&session_id).expect("checked");
        entry.transport = via.transport;
        entry.session.protocol_profile = profile;
        let resume = entry.resume.as_mut().expect("checked");
        let was_detached = resume.detached;
        resume.detached = false;
        resume.detached_at = None;
        resume.armed = false;
        resume.front = Some(via.front);
        let old = std::mem::replace(&mut entry.outbox, via.outbox);
        if was_detached {
            self.resume.detached_count -= 1;
        } else {
            let _ = old.push_frame(
                FrameKind::Push,
                route::SYS_KICKED,
                0,
                RESUMED_ELSEWHERE_REASON.as_bytes(),
            );
            self.metrics.gateway.kicks.inc();
        }
        old.close();
        end_connection_requests(entry);
        if let Some(transit) = entry.transit.as_mut() {
            transit.held.clear();
        }
        entry.settle();
        entry.last_frame = now;
    }

    fn resume_check(
        &mut self,
        token: &ResumeToken,
        last_seen: u32,
        now: Instant,
    ) -> Result<u64, ResumeRefusal> {
        let window = self.resume.settings.map_or(Duration::ZERO, |s| s.window);
        let Some(&session_id) = self.resume.tokens.get(token) else {
            let ended = self.resume.ended.refusal(token);
            return Err(ended.unwrap_or(ResumeRefusal::Unknown));
        };
        let resume = self
            .sessions
            .get(&session_id)
            .and_then(|entry| entry.resume.as_ref())
            .ok_or(ResumeRefusal::Unknown)?;
        if !resume.armed {
            return Err(ResumeRefusal::Unknown);
        }
        if resume
            .detached_at
            .is_some_and(|at| now.saturating_duration_since(at) >= window)
        {
            self.end_detached(session_id, Some(now));
            return Err(ResumeRefusal::Expired);
        }
        if resume.ring.after(last_seen).is_none() {
            return Err(ResumeRefusal::PushesLost);
        }
        Ok(session_id)
    }

    /// The sweep: starts the window of sessions detached since the last
    /// one, ends those whose window passed (as a disconnect ends a
    /// session), and forgets expired tokens after a while. Returns how many
    /// sessions ended.
    pub fn expire_detached(&mut self, now: Instant) -> usize {
        let Some(settings) = self.resume.settings else {
            return 0;
        };
        let mut due = Vec::new();
        for &session_id in &self.resume.detached {
            let Some(resume) = self
                .sessions
                .get_mut(&session_id)
                .and_then(|entry| entry.resume.as_mut())
            else {
                continue;
            };
            let at = *resume.detached_at.get_or_insert(now);
            if now.saturating_duration_since(at) >= settings.window {
                due.push(session_id);
            }
        }
        for &session_id in &due {
            self.end_detached(session_id, Some(now));
        }
        let sessions = &self.sessions;
        self.resume
            .detached
            .retain(|id| sessions.get(id).is_some_and(|e| e.resume.is_some()));
        // Forgetting expired tokens walks them all: once a second is soon
        // enough.
        if self
            .resume
            .pruned_at
            .is_some_and(|at| now.saturating_duration_since(at) < Duration::from_secs(1))
        {
            return due.len();
        }
        self.resume.pruned_at = Some(now);
        let tables = &mut self.resume;
        let memory = settings.ended_memory();
        tables.ended.prune(now, memory, &mut tables.events);
        due.len()
    }

    /// A detached session whose window passed (at `now`; `None`: one
    /// ended to make room): it ends as a disconnect ends one, and its
    /// token is remembered as expired.
    fn end_detached(&mut self, session_id: u64, now: Option<Instant>) {
        let resume = self
            .sessions
            .get_mut(&session_id)
            .and_then(|entry| entry.resume.take());
        if let Some(resume) = resume {
            self.resume.tokens.remove(&resume.token);
            self.resume
                .remember_ended((resume.token, ResumeRefusal::Expired, now));
            if resume.detached {
                self.resume.detached_count -= 1;
            }
        }
        tracing::info!(session_id, "resume window passed: session ends");
        self.finish(session_id, NoticeKind::Disconnected, false);
    }

    /// `session_id` is kicked with the `sys.kicked` reason `reason`: a
    /// resumable session's token is remembered as an expired one is, so
    /// a resume with it is told of the kick (`session kicked`, or `token
    /// expired`) rather than `unknown session`. Its client may never have
    /// read the `sys.kicked` (its connection was lost before, or soon
    /// after): told `unknown session`, it would log in afresh and, under
    /// `kick_old`, kick the login that replaced it.
    pub(super) fn remember_kick(&mut self, session_id: u64, reason: &str) {
        let resume = self
            .sessions
            .get_mut(&session_id)
            .and_then(|entry| entry.resume.take());
        let Some(resume) = resume else {
            return;
        };
        if resume.detached {
            self.resume.detached_count -= 1;
        }
        if self.resume.tokens.remove(&resume.token).is_some() {
            let refusal = ResumeRefusal::after_kick(reason);
            self.resume.remember_ended((resume.token, refusal, None));
        }
    }

    /// A session ends for good: its token resumes nothing from now.
    pub(super) fn forget_resume(&mut self, resume: Option<Box<Resumable>>) {
        if let Some(resume) = resume {
            if resume.detached {
                self.resume.detached_count -= 1;
            }
            if self.resume.tokens.remove(&resume.token).is_some() {
                self.resume.events.push(TokenEvent::Forgotten(resume.token));
            }
        }
    }

    /// How many sessions are detached now (checked against the sessions).
    #[cfg(test)]
    pub(super) fn detached_sessions(&self) -> usize {
        let detached = self
            .sessions
            .values()
            .filter(|entry| entry.resume.as_ref().is_some_and(|resume| resume.detached))
            .count();
        assert_eq!(detached, self.resume.detached_count);
        detached
    }

    /// Changes for the node-wide token directory since the last call.
    pub fn take_token_events(&mut self, into: &mut Vec<TokenEvent>) {
        into.append(&mut self.resume.events);
    }

    /// Whether `front` carries `session_id`'s connection now (a frame it
    /// relayed may be run as the session's).
    pub fn carries(&self, session_id: u64, front: u64) -> bool {
        self.sessions
            .get(&session_id)
            .and_then(|entry| entry.resume.as_ref())
            .is_some_and(|resume| resume.front == Some(front))
    }

    /// The front `front` of `session_id` ended: the session detaches
    /// (unless another connection resumed it since).
    pub fn front_ended(&mut self, session_id: u64, front: u64) {
        if self.carries(session_id, front) {
            self.detach(session_id, false);
        }
    }
}
