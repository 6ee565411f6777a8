//! The clients: sessions of each player on different nodes sending +1
//! increments and gets, one at a time, each recorded with its send and
//! answer times on the run's one monotonic clock. Without request keys
//! (the default) an increment is never retried. With them
//! (`NEMESIS_KEYS=1`) every increment carries a key of its own, and one
//! whose outcome is uncertain is sent again with that key, on the next
//! node and a new connection, until answered or `RETRY_DEADLINE`
//! (docs/protocol.md, section 12). A share of acknowledged keys is sent
//! once more, as a client that lost the answer would: the answer must be
//! the one already given.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use wire::client::{
    decode_error_body, encode_frame, encode_keyed_request, route, FrameDecoder, FrameKind, Peer,
};

use super::procs::REQUEST_TIMEOUT_MS;

/// How long a client waits for an answer past the gateway's own request
/// timeout before it counts the request as unanswered and closes.
const ANSWER_MARGIN_MS: u64 = 2000;

/// How long a login may take before the session gives up on the
/// connection and dials again.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(3);

/// The wait before dialling a node again after a failed connect or login.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// Think time between two requests of one session, in milliseconds (a
/// bound on the load the clients put on a two-core machine).
const THINK_MS_MAX: u64 = 40;

/// Largest frame body a client accepts.
const BODY_MAX: u32 = 1 << 16;

/// How long a keyed increment is retried after its first send before the
/// session gives it up (its outcome then stays uncertain).
const RETRY_DEADLINE: Duration = Duration::from_secs(30);

/// How long a session that was told to stop still retries the increment
/// it holds (the cluster has settled by then: retries succeed at once).
const STOP_DRAIN: Duration = Duration::from_secs(10);

/// The first and the longest wait between two attempts of one key.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(1000);

/// The share of acknowledged keys sent once more.
const RESEND_SHARE: f64 = 0.05;

/// The bits of a key below the session number: keys are unique per player
/// across its sessions (bursts included).
const KEY_SESSION_SHIFT: u32 = 40;

/// A player's unique key for a session's `count`-th keyed increment.
pub fn request_key(session: usize, count: u64) -> u64 {
    ((session as u64 + 1) << KEY_SESSION_SHIFT) | count
}

/// The gateway address of each node slot, updated when a slot's process
/// is replaced.
pub type Gateways = Arc<RwLock<Vec<SocketAddr>>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Incr,
    Get,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok(i64),
    /// An error the protocol says did not take effect (codes 1 to 6).
    Failed(u16),
    /// May or may not have taken effect: UNAVAILABLE, TIMEOUT, INTERNAL, a
    /// code this client does not know, or no answer at all.
    Uncertain(String),
}

/// One request and what came of it.
#[derive(Clone, Debug)]
pub struct Op {
    pub player: u64,
    pub session: usize,
    pub slot: usize,
    pub kind: Kind,
    pub send_us: u64,
    pub answer_us: u64,
    pub outcome: Outcome,
    /// The request key (0: none).
    pub key: u64,
    /// 1 for a key's first send, then 2, 3 ... for its retries and resend.
    pub attempt: u32,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "player {} session {} (node slot {}) {:?} sent {:.3}s answered {:.3}s: {:?}",
            self.player,
            self.session,
            self.slot + 1,
            self.kind,
            self.send_us as f64 / 1e6,
            self.answer_us as f64 / 1e6,
            self.outcome
        )?;
        if self.key != 0 {
            write!(f, " (key {:#x} attempt {})", self.key, self.attempt)?;
        }
        Ok(())
    }
}

/// The answer to one request.
pub enum Answer {
    Response(Vec<u8>),
    Error(u16),
    /// The connection closed, or nothing came before the deadline.
    Lost(&'static str),
}

/// One client connection.
pub struct Conn {
    stream: TcpStream,
    decoder: FrameDecoder,
}

impl Conn {
    pub fn connect(address: SocketAddr) -> Option<Conn> {
        let stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
        stream.set_nodelay(true).ok()?;
        Some(Conn {
            stream,
            decoder: FrameDecoder::new(Peer::Server, BODY_MAX),
        })
    }

    /// Sends one request and waits for its answer until `deadline`.
    pub fn request(&mut self, route_id: u32, seq: u32, body: &[u8], deadline: Instant) -> Answer {
        self.keyed_request(route_id, seq, 0, body, deadline)
    }

    /// Sends one request with `key` (0: a version-1 request) and waits for
    /// its answer until `deadline`.
    pub fn keyed_request(
        &mut self,
        route_id: u32,
        seq: u32,
        key: u64,
        body: &[u8],
        deadline: Instant,
    ) -> Answer {
        let mut bytes = Vec::new();
        if key == 0 {
            encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
        } else {
            encode_keyed_request(&mut bytes, route_id, seq, key, body);
        }
        if self.stream.write_all(&bytes).is_err() {
            return Answer::Lost("write failed");
        }
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    let header = frame.header;
                    if header.kind == FrameKind::Push {
                        continue;
                    }
                    if header.route_id == 0 {
                        // A frame-level ERROR: the server closes next.
                        return Answer::Lost("protocol error");
                    }
                    if header.seq != seq || header.route_id != route_id {
                        continue;
                    }
                    return match header.kind {
                        FrameKind::Response => Answer::Response(frame.body.to_vec()),
                        _ => match decode_error_body(frame.body) {
                            Some((code, _)) => Answer::Error(code),
                            None => Answer::Lost("bad error body"),
                        },
                    };
                }
                Ok(None) => {}
                Err(_) => return Answer::Lost("bad frame"),
            }
            let now = Instant::now();
            if now >= deadline {
                return Answer::Lost("no answer in time");
            }
            let wait = (deadline - now).max(Duration::from_millis(1));
            if self.stream.set_read_timeout(Some(wait)).is_err() {
                return Answer::Lost("socket");
            }
            match self.stream.read(self.decoder.read_buf()) {
                Ok(0) => return Answer::Lost("closed"),
                Ok(n) => self.decoder.advance(n),
                Err(error)
                    if error.kind() == std::io::ErrorKind::WouldBlock
                        || error.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return Answer::Lost("reset"),
            }
        }
    }

    /// Logs in as `player`: true once bound.
    pub fn login(&mut self, player: u64, seq: u32) -> bool {
        let token = super::support::token(player, 3600);
        let deadline = Instant::now() + LOGIN_TIMEOUT;
        matches!(
            self.request(route::AUTH_LOGIN, seq, token.as_bytes(), deadline),
            Answer::Response(body) if body == player.to_le_bytes()
        )
    }
}

fn counter(body: &[u8]) -> Option<i64> {
    Some(i64::from_le_bytes(body.try_into().ok()?))
}

/// Classifies an answer as docs/protocol.md does.
pub fn outcome(answer: Answer) -> Outcome {
    match answer {
        Answer::Response(body) => match counter(&body) {
            Some(value) => Outcome::Ok(value),
            None => Outcome::Uncertain(format!("a {}-byte answer", body.len())),
        },
        Answer::Error(code @ 1..=6) => Outcome::Failed(code),
        Answer::Error(7) => Outcome::Uncertain("UNAVAILABLE".into()),
        Answer::Error(8) => Outcome::Uncertain("TIMEOUT".into()),
        Answer::Error(9) => Outcome::Uncertain("INTERNAL".into()),
        Answer::Error(code) => Outcome::Uncertain(format!("code {code}")),
        Answer::Lost(why) => Outcome::Uncertain(why.into()),
    }
}

/// One session of one player, bound to one node slot.
pub struct Session {
    pub player: u64,
    pub session: usize,
    pub slot: usize,
    pub seed: u64,
    /// Increments carry request keys and uncertain ones are retried.
    pub keyed: bool,
}

/// A keyed increment the session holds until it is answered.
struct Pending {
    key: u64,
    /// Attempts sent so far.
    attempts: u32,
    /// Attempts and failed dials: the next attempt goes to the node slot
    /// this many after the session's own.
    turn: usize,
    deadline: Instant,
    /// Acknowledged already: sent once more, as after a lost answer.
    resend: bool,
}

impl Session {
    /// Runs until `stop` (and the increment it holds is answered or given
    /// up); returns every operation it made.
    pub fn run(self, gateways: Gateways, clock: Instant, stop: Arc<AtomicBool>) -> Vec<Op> {
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let mut ops = Vec::new();
        let mut conn: Option<(usize, Conn)> = None;
        let mut seq: u32 = 0;
        let mut keys_sent: u64 = 0;
        let mut pending: Option<Pending> = None;
        let mut drain_until: Option<Instant> = None;
        let us = |at: Instant| at.duration_since(clock).as_micros() as u64;
        loop {
            if stop.load(Ordering::Acquire) {
                let until = *drain_until.get_or_insert_with(|| Instant::now() + STOP_DRAIN);
                if pending.is_none() || Instant::now() >= until {
                    break;
                }
            }
            if pending
                .as_ref()
                .is_some_and(|held| Instant::now() >= held.deadline)
            {
                // Given up: its outcome stays uncertain.
                pending = None;
            }
            let nodes = gateways.read().unwrap().len();
            let slot = pending
                .as_ref()
                .map_or(self.slot, |held| (self.slot + held.turn) % nodes);
            if conn.as_ref().is_none_or(|(at, _)| *at != slot) {
                let address = gateways.read().unwrap()[slot];
                conn = Conn::connect(address).and_then(|mut fresh| {
                    seq = seq.wrapping_add(1);
                    fresh.login(self.player, seq).then_some((slot, fresh))
                });
                if conn.is_none() {
                    if let Some(held) = pending.as_mut() {
                        held.turn += 1;
                    }
                    std::thread::sleep(RECONNECT_PAUSE);
                }
                continue;
            }
            let live = &mut conn.as_mut().unwrap().1;
            let kind = if pending.is_some() || rng.random_bool(0.7) {
                Kind::Incr
            } else {
                Kind::Get
            };
            let (route_id, body) = match kind {
                Kind::Incr => (route::PLAYER_INCR, 1i64.to_le_bytes().to_vec()),
                Kind::Get => (route::PLAYER_GET, Vec::new()),
            };
            if kind == Kind::Incr && self.keyed && pending.is_none() {
                keys_sent += 1;
                pending = Some(Pending {
                    key: request_key(self.session, keys_sent),
                    attempts: 0,
                    turn: 0,
                    deadline: Instant::now() + RETRY_DEADLINE,
                    resend: false,
                });
            }
            let (key, attempt) = pending.as_mut().map_or((0, 1), |held| {
                held.attempts += 1;
                held.turn += 1;
                (held.key, held.attempts)
            });
            seq = seq.wrapping_add(1);
            let sent = Instant::now();
            let deadline = sent + Duration::from_millis(REQUEST_TIMEOUT_MS + ANSWER_MARGIN_MS);
            let answer = live.keyed_request(route_id, seq, key, &body, deadline);
            let answered = Instant::now();
            if matches!(answer, Answer::Lost(_)) {
                // A new connection and login (and, for a keyed increment,
                // a retry on the next node).
                conn = None;
            }
            let outcome = outcome(answer);
            let mut pause = Duration::from_millis(rng.random_range(0..=THINK_MS_MAX));
            if let Some(held) = pending.as_mut() {
                match &outcome {
                    Outcome::Uncertain(_) if !held.resend => {
                        pause = (RETRY_PAUSE_MIN * 2u32.pow(held.attempts.min(4) - 1))
                            .min(RETRY_PAUSE_MAX);
                    }
                    Outcome::Ok(_) if !held.resend && rng.random_bool(RESEND_SHARE) => {
                        held.resend = true;
                    }
                    _ => pending = None,
                }
            }
            ops.push(Op {
                player: self.player,
                session: self.session,
                slot,
                kind,
                send_us: us(sent),
                answer_us: us(answered),
                outcome,
                key,
                attempt,
            });
            std::thread::sleep(pause);
        }
        ops
    }
}

/// Reads `player`'s counter through a fresh session on `gateway`,
/// retrying (a get changes nothing) until `limit`.
pub fn read_counter(gateway: SocketAddr, player: u64, limit: Duration) -> Result<i64, String> {
    let started = Instant::now();
    let mut last = String::from("no attempt");
    while started.elapsed() < limit {
        if let Some(mut conn) = Conn::connect(gateway) {
            if conn.login(player, 1) {
                let deadline = Instant::now() + Duration::from_secs(3);
                match outcome(conn.request(route::PLAYER_GET, 2, &[], deadline)) {
                    Outcome::Ok(value) => return Ok(value),
                    other => last = format!("{other:?}"),
                }
            } else {
                last = "login failed".into();
            }
        } else {
            last = "connect failed".into();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

/// A pipelining client: one session that writes many increments at once
/// and then reads their answers, so the node works through them in a few
/// long loop turns.
pub struct Burst {
    conn: Conn,
    player: u64,
    session: usize,
    slot: usize,
    keyed: bool,
}

impl Burst {
    /// A logged-in session of `player` on `gateway`.
    pub fn open(
        gateway: SocketAddr,
        player: u64,
        session: usize,
        slot: usize,
        keyed: bool,
    ) -> Result<Burst, String> {
        let mut conn = Conn::connect(gateway).ok_or("connect failed")?;
        if !conn.login(player, 1) {
            return Err("login failed".into());
        }
        Ok(Burst {
            conn,
            player,
            session,
            slot,
            keyed,
        })
    }

    /// Writes `count` +1 increments in one write, says so on `written`,
    /// then reads their answers until `deadline` after the write; every
    /// one is an operation of the history. Keyed bursts are not retried:
    /// their unanswered keys stay uncertain.
    pub fn run(
        mut self,
        count: usize,
        clock: Instant,
        written: std::sync::mpsc::Sender<()>,
        wait: Duration,
    ) -> Vec<Op> {
        let us = |at: Instant| at.duration_since(clock).as_micros() as u64;
        let mut bytes = Vec::new();
        let first_seq = 2u32;
        let key = |i: usize| {
            if self.keyed {
                request_key(self.session, i as u64 + 1)
            } else {
                0
            }
        };
        for i in 0..count {
            let (seq, body) = (first_seq + i as u32, 1i64.to_le_bytes());
            if self.keyed {
                encode_keyed_request(&mut bytes, route::PLAYER_INCR, seq, key(i), &body);
            } else {
                encode_frame(
                    &mut bytes,
                    FrameKind::Request,
                    route::PLAYER_INCR,
                    seq,
                    &body,
                );
            }
        }
        let sent = Instant::now();
        let wrote = self.conn.stream.write_all(&bytes).is_ok();
        let _ = written.send(());
        let mut answers: Vec<Option<(Instant, Outcome)>> = vec![None; count];
        let deadline = Instant::now() + wait;
        while wrote && answers.iter().any(Option::is_none) {
            let Some((seq, outcome)) = self.conn.next_answer(deadline) else {
                break;
            };
            if let Some(slot) = seq
                .checked_sub(first_seq)
                .and_then(|i| answers.get_mut(i as usize))
            {
                *slot = Some((Instant::now(), outcome));
            }
        }
        let unanswered = Instant::now();
        answers
            .into_iter()
            .enumerate()
            .map(|(i, answer)| {
                let (at, outcome) = answer.unwrap_or((
                    unanswered,
                    Outcome::Uncertain("no answer to a pipelined request".into()),
                ));
                Op {
                    player: self.player,
                    session: self.session,
                    slot: self.slot,
                    kind: Kind::Incr,
                    send_us: us(sent),
                    answer_us: us(at),
                    outcome,
                    key: key(i),
                    attempt: 1,
                }
            })
            .collect()
    }
}

impl Conn {
    /// The next answer of any request (its seq and outcome) before
    /// `deadline`, or `None` once the connection ends or time is up.
    fn next_answer(&mut self, deadline: Instant) -> Option<(u32, Outcome)> {
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    let header = frame.header;
                    if header.kind == FrameKind::Push || header.route_id == 0 {
                        if header.route_id == 0 {
                            return None;
                        }
                        continue;
                    }
                    let answer = match header.kind {
                        FrameKind::Response => Answer::Response(frame.body.to_vec()),
                        _ => match decode_error_body(frame.body) {
                            Some((code, _)) => Answer::Error(code),
                            None => Answer::Lost("bad error body"),
                        },
                    };
                    return Some((header.seq, outcome(answer)));
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).max(Duration::from_millis(1));
            self.stream.set_read_timeout(Some(wait)).ok()?;
            match self.stream.read(self.decoder.read_buf()) {
                Ok(0) => return None,
                Ok(n) => self.decoder.advance(n),
                Err(error)
                    if error.kind() == std::io::ErrorKind::WouldBlock
                        || error.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return None,
            }
        }
    }
}
