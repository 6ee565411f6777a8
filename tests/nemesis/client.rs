//! The clients: sessions of each player on different nodes sending +1
//! increments and gets, one at a time, never retried, each recorded with
//! its send and answer times on the run's one monotonic clock.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use wire::client::{decode_error_body, encode_frame, route, FrameDecoder, FrameKind, Peer};

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
        )
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
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
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
}

impl Session {
    /// Runs until `stop`; returns every operation it made.
    pub fn run(self, gateways: Gateways, clock: Instant, stop: Arc<AtomicBool>) -> Vec<Op> {
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let mut ops = Vec::new();
        let mut conn: Option<Conn> = None;
        let mut seq: u32 = 0;
        let us = |at: Instant| at.duration_since(clock).as_micros() as u64;
        while !stop.load(Ordering::Acquire) {
            let Some(live) = conn.as_mut() else {
                let address = gateways.read().unwrap()[self.slot];
                conn = Conn::connect(address).and_then(|mut fresh| {
                    seq = seq.wrapping_add(1);
                    fresh.login(self.player, seq).then_some(fresh)
                });
                if conn.is_none() {
                    std::thread::sleep(RECONNECT_PAUSE);
                }
                continue;
            };
            let kind = if rng.random_bool(0.7) {
                Kind::Incr
            } else {
                Kind::Get
            };
            let (route_id, body) = match kind {
                Kind::Incr => (route::PLAYER_INCR, 1i64.to_le_bytes().to_vec()),
                Kind::Get => (route::PLAYER_GET, Vec::new()),
            };
            seq = seq.wrapping_add(1);
            let sent = Instant::now();
            let deadline = sent + Duration::from_millis(REQUEST_TIMEOUT_MS + ANSWER_MARGIN_MS);
            let answer = live.request(route_id, seq, &body, deadline);
            let answered = Instant::now();
            let lost = matches!(answer, Answer::Lost(_));
            ops.push(Op {
                player: self.player,
                session: self.session,
                slot: self.slot,
                kind,
                send_us: us(sent),
                answer_us: us(answered),
                outcome: outcome(answer),
            });
            if lost {
                // A new connection and login; the request is not retried.
                conn = None;
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(0..=THINK_MS_MAX)));
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
}

impl Burst {
    /// A logged-in session of `player` on `gateway`.
    pub fn open(
        gateway: SocketAddr,
        player: u64,
        session: usize,
        slot: usize,
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
        })
    }

    /// Writes `count` +1 increments in one write, says so on `written`,
    /// then reads their answers until `deadline` after the write; every
    /// one is an operation of the history.
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
        for i in 0..count {
            encode_frame(
                &mut bytes,
                FrameKind::Request,
                route::PLAYER_INCR,
                first_seq + i as u32,
                &1i64.to_le_bytes(),
            );
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
            .map(|answer| {
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
