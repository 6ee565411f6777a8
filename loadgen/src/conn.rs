//! One client connection as a sans-IO state machine: requests to send go
//! into `out`, received bytes go into the protocol's decoder, and every
//! answer is matched to its outstanding request (by seq for routerd, in
//! order for Redis). The io_uring driver (`engine.rs`) only moves bytes;
//! everything measured is decided here, so tests need no socket.
//!
//! The protocols live beside it: `conn_routerd.rs` (docs/protocol.md frames) and
//! `conn_resp.rs` (RESP2). Each turns bytes into [`Message`]s; this file
//! turns messages into phases, events and statistics, the same way for both.

use std::sync::Arc;

use wire::client::FrameError;

use crate::cli::Proto;
use crate::conn_resp::RespWire;
use crate::conn_routerd::RouterdWire;
use crate::custom::{Custom, Vars};
use crate::keys::Retries;
use crate::resp::RespError;
use crate::resume::{Resumable, Token};
use crate::stats::{Failure, Stats};
use crate::workload::Op;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Connected; nothing sent yet.
    Idle,
    /// `auth.login` sent, waiting for the player id.
    LoggingIn,
    /// Logged in, a setup request sent (`room.join`, or a custom
    /// workload's setup line), waiting for its answer.
    Joining,
    /// Set up: the workload may send.
    Ready,
    /// Told to move (`sys.redirect`) or moving to its next player: it sends
    /// nothing new and waits for the answers it is owed.
    Draining,
    /// Failed or closed; sends nothing more.
    Closed,
}

/// The half-open interval of intended send times that is measured; pushes
/// are measured when the time their sender wrote falls inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Window {
    pub fn contains(&self, t_ns: u64) -> bool {
        self.start_ns <= t_ns && t_ns < self.end_ns
    }

    /// A window no time falls in (setup, before the run starts).
    pub const NONE: Window = Window {
        start_ns: u64::MAX,
        end_ns: u64::MAX,
    };
}

/// A `sys.redirect` PUSH: move to `target` (`host:port`, may be empty)
/// within `grace_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    pub grace_ms: u32,
    pub target: String,
}

/// What the driver must know about an answer or a PUSH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    LoggedIn,
    Joined,
    /// Setup could not complete; the run cannot be measured. `transient`:
    /// the server could not answer it now (OVERLOADED, UNAVAILABLE,
    /// TIMEOUT), so a new connection may succeed.
    SetupFailed {
        reason: String,
        transient: bool,
    },
    /// The server replaced this session (duplicate login).
    Kicked,
    /// The server asked this connection to move; it is now `Draining`.
    Redirect(Redirect),
    /// `--resume`: the session was taken back on this connection; it is
    /// `Ready` (its rooms and setup are the session's, kept by the server).
    Resumed,
    /// `--resume`: the resume was refused; the connection is `Idle` again,
    /// to log in afresh.
    ResumeRefused,
}

/// What a request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Work(Op),
    Login,
    /// `auth.resume` (`--resume`), in place of a login.
    Resume,
    Join,
    /// The n-th setup request of a custom workload.
    Setup(u8),
}

/// A request waiting for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outstanding {
    pub kind: Kind,
    pub intended_ns: u64,
    /// Bytes of the workload payload (a ping echoes exactly these).
    pub payload_len: u32,
    pub measured: bool,
    /// `--keys`: the request key of a keyed `player.incr` (0 until the
    /// protocol gives it one), its attempt (1 for the first send), and the
    /// highest counter the connection was shown when a retry was sent.
    pub key: u64,
    pub attempts: u32,
    pub seen: Option<i64>,
}

/// A protocol's judgement of one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The answer fits the request; a `room.say` answer also says how many
    /// PUSHes the server sent, a `get` or `incr` answer the counter.
    Ok {
        pushes_promised: u32,
        counter: Option<i64>,
    },
    /// An ERROR frame or error reply. The reason is kept only for setup
    /// requests, whose failure is reported in words.
    Failed {
        failure: Failure,
        reason: Option<String>,
    },
    /// The answer's body does not fit the request: a protocol error.
    Malformed,
}

/// One thing a protocol decoded from the server's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Answer {
        request: Outstanding,
        verdict: Verdict,
    },
    /// An answer that matched no outstanding request, or a message a server
    /// must not send: a protocol error.
    Stray,
    /// A `room.message` PUSH, the send time its text carries (if any),
    /// and its push number (0 unless the session is resumable).
    RoomPush {
        sent_ns: Option<u64>,
        push_seq: u32,
    },
    /// A `sys.session` PUSH: the resume token, `None` if the body is
    /// malformed.
    SessionOffer(Option<Token>),
    Kicked,
    /// A `sys.redirect` PUSH; `None` if its body is malformed.
    Redirect(Option<Redirect>),
    /// A PUSH on a route of a custom workload's type: counted, not read.
    OtherPush {
        push_seq: u32,
    },
}

/// Why the server's byte stream cannot be read any further.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("routerd framing: {0:?}")]
    Frame(FrameError),
    #[error("RESP: {0}")]
    Resp(#[from] RespError),
}

/// Why a request could not be queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the connection has inflight_max requests outstanding")]
    Full,
    #[error("the connection is not ready to send")]
    NotReady,
    #[error("the protocol has no such request")]
    Unsupported,
}

/// The protocol half of a connection.
enum Wire {
    Routerd(RouterdWire),
    Resp(RespWire),
}

pub struct Conn {
    player_id: u64,
    room_id: u64,
    phase: Phase,
    inflight_max: usize,
    /// Workload requests queued since the last login (or key change).
    sent_since_login: u64,
    /// Encoded requests not yet handed to the kernel; bounded because each
    /// request in it is also outstanding.
    out: Vec<u8>,
    wire: Wire,
    /// When the last measured answer came, across reconnects: the gap to
    /// the next one is what a client of this connection waited.
    last_answer_ns: Option<u64>,
    /// `--workload custom`: its setup requests follow every login.
    custom: Option<Arc<Custom>>,
    /// `--keys`: increments to send again with their key.
    retries: Option<Retries>,
    /// `--resume`: the session to take back after a lost connection.
    resumable: Option<Resumable>,
}

impl Conn {
    pub fn new(
        proto: Proto,
        player_id: u64,
        room_id: u64,
        inflight_max: usize,
        max_body: u32,
    ) -> Conn {
        assert!(inflight_max > 0);
        let wire = match proto {
            Proto::Routerd => Wire::Routerd(RouterdWire::new(inflight_max, max_body)),
            Proto::Resp => Wire::Resp(RespWire::new(inflight_max, max_body, player_id)),
        };
        Conn {
            player_id,
            room_id,
            phase: Phase::Idle,
            inflight_max,
            sent_since_login: 0,
            out: Vec::with_capacity(4096),
            wire,
            last_answer_ns: None,
            custom: None,
            retries: None,
            resumable: None,
        }
    }

    /// Speaks `custom`'s requests, and sends its setup requests after every
    /// login before it is `Ready` (and says `LoggedIn`).
    pub fn with_custom(mut self, custom: Option<Arc<Custom>>) -> Conn {
        if let (Wire::Routerd(wire), Some(custom)) = (&mut self.wire, &custom) {
            wire.set_custom(Arc::clone(custom));
        }
        self.custom = custom;
        self
    }

    /// Keyed state-changing requests (`--keys`), and uncertain
    /// increments retried with their key; routerd's protocol only.
    pub fn with_keys(mut self, keys: bool) -> Conn {
        if let (Wire::Routerd(wire), true) = (&mut self.wire, keys) {
            wire.use_keys(self.player_id);
            self.retries = Some(Retries::default());
        }
        self
    }

    /// Sends the increments due to be retried (`--keys`) before any new
    /// request; true if it queued one.
    pub fn send_retries(&mut self, now_ns: u64, stats: &mut Stats) -> bool {
        let mut queued = false;
        while self.can_send() {
            let Some(retry) = self
                .retries
                .as_mut()
                .and_then(|retries| retries.take_due(now_ns, &mut stats.keys))
            else {
                break;
            };
            let request = Outstanding {
                kind: Kind::Work(Op::Incr),
                intended_ns: retry.intended_ns,
                payload_len: 0,
                measured: false,
                key: retry.key,
                attempts: retry.attempts + 1,
                seen: retry.seen,
            };
            if let Wire::Routerd(wire) = &mut self.wire {
                wire.queue(&mut self.out, request, &[], self.room_id);
                queued = true;
            }
        }
        queued
    }

    /// An increment whose outcome is uncertain: queued to be sent again
    /// with its key (true), or not keyed, or out of attempts.
    fn retry_later(&mut self, request: Outstanding, now_ns: u64, stats: &mut Stats) -> bool {
        match &mut self.retries {
            Some(retries) if request.key != 0 && request.kind == Kind::Work(Op::Incr) => retries
                .uncertain(
                    request.key,
                    request.intended_ns,
                    request.attempts,
                    now_ns,
                    &mut stats.keys,
                ),
            _ => false,
        }
    }

    /// Keys waiting to be sent again.
    pub fn retries_waiting(&self) -> usize {
        self.retries.as_ref().map_or(0, Retries::len)
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn player_id(&self) -> u64 {
        self.player_id
    }

    pub fn outstanding(&self) -> usize {
        match &self.wire {
            Wire::Routerd(wire) => wire.outstanding_len(),
            Wire::Resp(wire) => wire.outstanding_len(),
        }
    }

    pub fn sent_since_login(&self) -> u64 {
        self.sent_since_login
    }

    pub fn can_send(&self) -> bool {
        self.phase == Phase::Ready && self.outstanding() < self.inflight_max
    }

    /// Skips to `Ready` for workloads without login.
    pub fn skip_setup(&mut self) {
        assert_eq!(self.phase, Phase::Idle);
        self.phase = Phase::Ready;
    }

    pub fn start_login(&mut self, token: &str, now_ns: u64) {
        assert_eq!(self.phase, Phase::Idle);
        let queued = self.queue(Kind::Login, token.as_bytes(), now_ns, false);
        assert!(
            queued,
            "login is refused by validation for protocols without it"
        );
        self.phase = Phase::LoggingIn;
    }

    pub fn start_join(&mut self, now_ns: u64) {
        assert_eq!(self.phase, Phase::Ready);
        let queued = self.queue(Kind::Join, &[], now_ns, false);
        assert!(
            queued,
            "rooms are refused by validation for protocols without them"
        );
        self.phase = Phase::Joining;
    }

    /// Queues one workload request. `intended_ns` is when it should have
    /// been sent (now in closed loop, the schedule's time in open loop).
    pub fn send(
        &mut self,
        op: Op,
        payload: &[u8],
        intended_ns: u64,
        measured: bool,
        stats: &mut Stats,
    ) -> Result<(), SendError> {
        if self.phase != Phase::Ready {
            return Err(SendError::NotReady);
        }
        if !self.can_send() {
            return Err(SendError::Full);
        }
        if !self.queue(Kind::Work(op), payload, intended_ns, measured) {
            return Err(SendError::Unsupported);
        }
        self.sent_since_login += 1;
        if measured {
            stats.record_sent(op, intended_ns);
        }
        Ok(())
    }

    fn queue(&mut self, kind: Kind, payload: &[u8], intended_ns: u64, measured: bool) -> bool {
        let request = Outstanding {
            kind,
            intended_ns,
            payload_len: u32::try_from(payload.len()).expect("payloads are bounded by max_body"),
            measured,
            key: 0,
            attempts: 1,
            seen: None,
        };
        match &mut self.wire {
            Wire::Routerd(wire) => {
                wire.queue(&mut self.out, request, payload, self.room_id);
                true
            }
            Wire::Resp(wire) => wire.queue(&mut self.out, request, payload),
        }
    }

    /// Bytes waiting to be written; the driver takes them (swapping in an
    /// empty buffer) and writes them in order.
    pub fn out_mut(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Spare space for the next read; empty once the stream has failed.
    pub fn read_buf(&mut self) -> &mut [u8] {
        match &mut self.wire {
            Wire::Routerd(wire) => wire.read_buf(),
            Wire::Resp(wire) => wire.read_buf(),
        }
    }

    /// Marks `n` bytes of the last `read_buf` as received.
    pub fn advance(&mut self, n: usize) {
        match &mut self.wire {
            Wire::Routerd(wire) => wire.advance(n),
            Wire::Resp(wire) => wire.advance(n),
        }
    }

    /// Feeds bytes that arrived (tests; the engine reads into `read_buf`
    /// directly). Returns how many fit.
    #[cfg(test)]
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let spare = self.read_buf();
        let n = spare.len().min(bytes.len());
        spare[..n].copy_from_slice(&bytes[..n]);
        self.advance(n);
        n
    }

    /// Handles every complete message received. A decoding error is final:
    /// the connection must be closed, and it counts as a protocol error.
    pub fn receive(
        &mut self,
        now_ns: u64,
        window: Window,
        stats: &mut Stats,
        events: &mut Vec<Event>,
    ) -> Result<(), StreamError> {
        loop {
            let next = match &mut self.wire {
                Wire::Routerd(wire) => wire.next(self.player_id).map_err(StreamError::Frame),
                Wire::Resp(wire) => wire.next().map_err(StreamError::Resp),
            };
            let message = match next {
                Ok(Some(message)) => message,
                Ok(None) => {
                    if let Some(resumable) = &mut self.resumable {
                        resumable.read_done();
                    }
                    return Ok(());
                }
                Err(error) => {
                    stats.protocol_errors += 1;
                    self.phase = Phase::Closed;
                    return Err(error);
                }
            };
            self.apply(message, now_ns, window, stats, events);
        }
    }

    fn apply(
        &mut self,
        message: Message,
        now_ns: u64,
        window: Window,
        stats: &mut Stats,
        events: &mut Vec<Event>,
    ) {
        match message {
            Message::Answer { request, verdict } => match request.kind {
                Kind::Work(op) => {
                    let answered = Answered {
                        player_id: self.player_id,
                        now_ns,
                    };
                    if let (Verdict::Ok { .. }, true) = (&verdict, request.measured) {
                        if let Some(last) = self.last_answer_ns.replace(now_ns) {
                            stats.record_answer_gap(now_ns.saturating_sub(last));
                        }
                    }
                    let retried = self.keyed_answer(request, &verdict, now_ns, stats);
                    apply_work(op, request, verdict, answered, retried, stats)
                }
                Kind::Resume => self.apply_resume(verdict, stats, events),
                Kind::Login | Kind::Join | Kind::Setup(_) => {
                    self.apply_setup(request.kind, verdict, now_ns, events)
                }
            },
            Message::Stray | Message::Redirect(None) => stats.protocol_errors += 1,
            Message::RoomPush { sent_ns, push_seq } => {
                self.numbered_push(push_seq, stats);
                match sent_ns {
                    Some(sent_ns) if window.contains(sent_ns) => {
                        stats.pushes += 1;
                        stats.record_push_latency(now_ns.saturating_sub(sent_ns));
                    }
                    Some(_) => {}
                    None => stats.protocol_errors += 1,
                }
            }
            Message::OtherPush { push_seq } => {
                self.numbered_push(push_seq, stats);
                stats.other_pushes += 1;
            }
            Message::SessionOffer(offer) => match (&mut self.resumable, offer) {
                (Some(resumable), Some(token)) => resumable.offered(token),
                // Offered without a version-2 login, or malformed.
                _ => stats.protocol_errors += 1,
            },
            Message::Kicked => {
                stats.kicked += 1;
                events.push(Event::Kicked);
            }
            Message::Redirect(Some(redirect)) => {
                stats.redirects += 1;
                if self.phase != Phase::Closed {
                    self.phase = Phase::Draining;
                }
                events.push(Event::Redirect(redirect));
            }
        }
    }

    fn apply_setup(&mut self, kind: Kind, verdict: Verdict, now_ns: u64, events: &mut Vec<Event>) {
        let (step, expected_phase) = match kind {
            Kind::Login => ("auth.login".to_string(), Phase::LoggingIn),
            Kind::Join => ("room.join".to_string(), Phase::Joining),
            Kind::Setup(n) => (self.setup_name(n), Phase::Joining),
            Kind::Work(_) | Kind::Resume => unreachable!("not a setup request"),
        };
        if self.phase != expected_phase {
            // Moved on meanwhile (a redirect while logging in): the answer
            // changes nothing, but it is not an error either.
            return;
        }
        let verdict = match (kind, verdict) {
            (
                Kind::Setup(n),
                Verdict::Failed {
                    failure: Failure::Code(code),
                    ..
                },
            ) if self.setup_accepts(n, code) => Verdict::Ok {
                pushes_promised: 0,
                counter: None,
            },
            (_, verdict) => verdict,
        };
        match verdict {
            Verdict::Ok { .. } => {
                let next = match kind {
                    Kind::Login => 0,
                    Kind::Setup(n) => usize::from(n) + 1,
                    Kind::Join | Kind::Resume | Kind::Work(_) => usize::MAX,
                };
                if self.queue_setup(next, now_ns) {
                    return;
                }
                self.phase = Phase::Ready;
                events.push(if kind == Kind::Join {
                    Event::Joined
                } else {
                    Event::LoggedIn
                });
            }
            Verdict::Failed { failure, reason } => {
                self.phase = Phase::Closed;
                let transient = matches!(
                    failure,
                    Failure::Code(6..=8) // OVERLOADED, UNAVAILABLE, TIMEOUT
                );
                let code = match failure {
                    Failure::Code(code) => code.to_string(),
                    other => format!("{other:?}"),
                };
                events.push(Event::SetupFailed {
                    reason: format!("{step} failed: code {code} {}", reason.unwrap_or_default()),
                    transient,
                });
            }
            Verdict::Malformed => {
                self.phase = Phase::Closed;
                events.push(Event::SetupFailed {
                    reason: format!("{step}: an answer that does not fit the request"),
                    transient: false,
                });
            }
        }
    }

    /// Queues the custom workload's setup request `n`, if it has one.
    fn queue_setup(&mut self, n: usize, now_ns: u64) -> bool {
        let Some(custom) = self.custom.clone() else {
            return false;
        };
        let Some(request) = custom.setup.get(n) else {
            return false;
        };
        let mut body = Vec::new();
        let vars = Vars {
            player: self.player_id,
            seq: 0,
        };
        request.body.render(vars, &mut body);
        let step = u8::try_from(n).expect("setup requests are bounded");
        self.queue(Kind::Setup(step), &body, now_ns, false);
        self.phase = Phase::Joining;
        true
    }

    fn setup_name(&self, n: u8) -> String {
        self.custom
            .as_ref()
            .and_then(|custom| custom.setup.get(usize::from(n)))
            .map_or_else(|| format!("setup {n}"), |request| request.name.clone())
    }

    fn setup_accepts(&self, n: u8, code: u16) -> bool {
        self.custom
            .as_ref()
            .and_then(|custom| custom.setup.get(usize::from(n)))
            .is_some_and(|request| request.accept.contains(&code))
    }

    /// Stops queueing new requests; the answers owed still count.
    pub fn begin_drain(&mut self) {
        if self.phase != Phase::Closed {
            self.phase = Phase::Draining;
        }
    }

    /// What a keyed answer means for its key (`--keys`): an uncertain one
    /// is retried (true), an OK one counts once.
    fn keyed_answer(
        &mut self,
        request: Outstanding,
        verdict: &Verdict,
        now_ns: u64,
        stats: &mut Stats,
    ) -> bool {
        match verdict {
            Verdict::Ok { counter, .. } => {
                if let Some(retries) = &mut self.retries {
                    if request.key != 0 {
                        retries.acknowledged(
                            request.attempts,
                            *counter,
                            request.seen,
                            &mut stats.keys,
                        );
                    } else {
                        retries.shown(*counter);
                    }
                }
                false
            }
            Verdict::Failed {
                failure: Failure::Code(7..=9),
                ..
            } => self.retry_later(request, now_ns, stats),
            _ => false,
        }
    }

    /// The connection was closed (or replaced): what is still outstanding
    /// and measured is lost. The next connection starts as `player_id`
    /// with an empty stream, `Idle`. With `--keys`, its increments are
    /// sent again on the next connection if it is the same player's.
    pub fn reset(&mut self, player_id: u64, stats: &mut Stats) {
        let lost_player = self.player_id;
        let mut lost = Vec::new();
        self.for_each_outstanding(|request| lost.push(request));
        for request in lost {
            if let Kind::Work(op) = request.kind {
                if request.measured {
                    stats.record_failure(op, request.intended_ns, Failure::Lost);
                }
                let again = if player_id == lost_player {
                    self.retry_later(request, 0, stats)
                } else {
                    // Keys are per player: another player's connection
                    // cannot send it again.
                    if self.retries.is_some() && request.key != 0 && op == Op::Incr {
                        stats.keys.given_up += 1;
                    }
                    false
                };
                if op == Op::Incr && !again {
                    stats.ledger_uncertain(lost_player);
                }
            }
        }
        if player_id != lost_player {
            self.give_up_retries(stats);
            // A session is its player's: another player logs in afresh.
            self.forget_session();
        }
        self.player_id = player_id;
        self.phase = Phase::Idle;
        self.sent_since_login = 0;
        self.out.clear();
        match &mut self.wire {
            Wire::Routerd(wire) => wire.reset(),
            Wire::Resp(wire) => wire.reset(player_id),
        }
    }

    /// Redis has no sessions: the next requests go to `player_id`'s key on
    /// the same connection, and what is in flight is still owed.
    pub fn rekey(&mut self, player_id: u64) {
        let Wire::Resp(wire) = &mut self.wire else {
            panic!("only a RESP connection changes player without a new session");
        };
        wire.set_key(player_id);
        self.player_id = player_id;
        self.sent_since_login = 0;
    }

    /// Keys waiting to be sent again stay uncertain.
    fn give_up_retries(&mut self, stats: &mut Stats) {
        if let Some(retries) = &mut self.retries {
            for _ in 0..retries.give_up_all(&mut stats.keys) {
                stats.ledger_uncertain(self.player_id);
            }
        }
    }

    /// Ends the connection's run: what is still outstanding and measured
    /// was never answered.
    pub fn abandon(&mut self, stats: &mut Stats) {
        self.give_up_retries(stats);
        let mut unanswered = 0;
        let player_id = self.player_id;
        self.for_each_outstanding(|request| {
            if request.measured {
                unanswered += 1;
            }
            if request.kind == Kind::Work(Op::Incr) {
                stats.ledger_uncertain(player_id);
                if request.key != 0 {
                    stats.keys.given_up += 1;
                }
            }
        });
        stats.unanswered += unanswered;
        self.phase = Phase::Closed;
    }

    /// Takes every outstanding request out and hands it to `f`.
    fn for_each_outstanding(&mut self, f: impl FnMut(Outstanding)) {
        match &mut self.wire {
            Wire::Routerd(wire) => wire.take_outstanding().for_each(f),
            Wire::Resp(wire) => wire.take_outstanding().for_each(f),
        }
    }
}

/// Who got an answer, and when.
#[derive(Clone, Copy)]
struct Answered {
    player_id: u64,
    now_ns: u64,
}

/// `retried`: an uncertain increment that will be sent again with its
/// key, so it is not (yet) uncertain in the ledger.
fn apply_work(
    op: Op,
    request: Outstanding,
    verdict: Verdict,
    at: Answered,
    retried: bool,
    stats: &mut Stats,
) {
    match verdict {
        Verdict::Ok {
            pushes_promised,
            counter,
        } => {
            if request.measured {
                stats.record_response(op, request.intended_ns, at.now_ns);
                stats.pushes_expected += u64::from(pushes_promised);
            }
            // The ledger counts every acknowledged increment, measured or
            // not: the server's counter must hold all of them.
            if op == Op::Incr {
                stats.ledger_acked(at.player_id, counter, request.key != 0);
            }
        }
        Verdict::Failed { failure, .. } => {
            if request.measured {
                stats.record_failure(op, request.intended_ns, failure);
            }
            // An error after the request may have reached the object:
            // it may or may not have taken effect (docs/protocol.md).
            if op == Op::Incr && !retried && matches!(failure, Failure::Code(7..=9) | Failure::Lost)
            {
                stats.ledger_uncertain(at.player_id);
            }
        }
        Verdict::Malformed => stats.protocol_errors += 1,
    }
}

#[path = "conn_resume.rs"]
mod resuming;

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
