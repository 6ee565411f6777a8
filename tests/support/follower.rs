//! A client that behaves as a well-written game client should: one player,
//! one request at a time (`player.incr`, `player.get`, `sys.ping` in turn),
//! every answer checked; on `sys.redirect` it takes the answer it is owed,
//! closes, connects to the named gateway and logs in again; a connection
//! that closes under it is reconnected. Every request that did not get a
//! good answer is a failure, in words.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wire::client::{decode_error_body, encode_frame, route, FrameDecoder, FrameKind, Peer};

/// How long an answer may take: above the server's request timeout (10 s),
/// so a TIMEOUT comes as an ERROR rather than as silence.
const ANSWER_WAIT: Duration = Duration::from_secs(12);
/// Pause between two requests, so a few followers do not saturate a
/// debug build on a shared machine.
const PACE: Duration = Duration::from_millis(2);
/// Attempts to connect and log in again before a follower gives up.
const RECONNECTS_MAX: u32 = 100;

/// What one follower saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub player: u64,
    pub sent: u64,
    pub answered: u64,
    /// Every request that failed, in words.
    pub failures: Vec<String>,
    pub redirects: u64,
    /// Connections made again after one closed unasked.
    pub reconnects: u64,
    /// `player.incr` answered OK: each added 1.
    pub acked_increments: i64,
    /// The counter the last answer showed.
    pub last_counter: i64,
    pub longest_gap: Duration,
}

/// Gateways a follower may fall back to when its connection is lost;
/// tests replace them as nodes restart on new ports.
pub type Gateways = Arc<Mutex<Vec<SocketAddr>>>;

/// Starts a follower of `player` on `first`, until `stop` is set.
pub fn spawn(
    player: u64,
    first: SocketAddr,
    gateways: Gateways,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Report> {
    std::thread::spawn(move || {
        let mut follower = Follower {
            report: Report {
                player,
                ..Report::default()
            },
            gateways,
            base: None,
            last_answer: None,
            seq: 1,
            at: first,
        };
        follower.run(first, &stop);
        follower.report
    })
}

struct Follower {
    report: Report,
    gateways: Gateways,
    /// The counter at the first login: every answer after it must show
    /// this plus the increments acknowledged since.
    base: Option<i64>,
    last_answer: Option<Instant>,
    seq: u32,
    /// The gateway of the connection in use.
    at: SocketAddr,
}

/// Why a connection ended.
enum End {
    Stop,
    Redirected(String),
    Lost,
}

struct Connection {
    stream: TcpStream,
    decoder: FrameDecoder,
}

enum Frame {
    Answer {
        seq: u32,
        kind: FrameKind,
        body: Vec<u8>,
    },
    Redirect(String),
    Kicked,
    Other,
}

impl Connection {
    fn open(address: SocketAddr) -> Option<Connection> {
        let stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
        stream.set_nodelay(true).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .ok()?;
        Some(Connection {
            stream,
            decoder: FrameDecoder::new(Peer::Server, 1 << 20),
        })
    }

    fn send(&mut self, route_id: u32, seq: u32, body: &[u8]) -> bool {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
        self.stream.write_all(&bytes).is_ok()
    }

    /// The next frame, `Ok(None)` after a short silence, `Err` once the
    /// connection closed (or broke the protocol).
    fn next(&mut self) -> Result<Option<Frame>, ()> {
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => {
                    let body = frame.body.to_vec();
                    return Ok(Some(match (frame.header.kind, frame.header.route_id) {
                        (FrameKind::Push, route::SYS_REDIRECT) => {
                            let target = body.get(4..).unwrap_or_default();
                            Frame::Redirect(String::from_utf8_lossy(target).into_owned())
                        }
                        (FrameKind::Push, route::SYS_KICKED) => Frame::Kicked,
                        (FrameKind::Push, _) => Frame::Other,
                        (kind, _) => Frame::Answer {
                            seq: frame.header.seq,
                            kind,
                            body,
                        },
                    }));
                }
                Ok(None) => {}
                Err(_) => return Err(()),
            }
            match self.stream.read(self.decoder.read_buf()) {
                Ok(0) => return Err(()),
                Ok(n) => self.decoder.advance(n),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(_) => return Err(()),
            }
        }
    }
}

/// The requests a follower sends, in turn.
const ROUTES: [u32; 4] = [
    route::PLAYER_INCR,
    route::PLAYER_GET,
    route::PLAYER_INCR,
    route::SYS_PING,
];

impl Follower {
    fn run(&mut self, first: SocketAddr, stop: &AtomicBool) {
        let mut next = Some(first);
        let mut attempts = 0;
        while !stop.load(Ordering::Acquire) {
            let address = next.take().unwrap_or_else(|| self.fallback(attempts));
            let Some(mut connection) = Connection::open(address) else {
                attempts += 1;
                if attempts > RECONNECTS_MAX {
                    self.fail(format!("gave up connecting after {attempts} attempts"));
                    return;
                }
                std::thread::sleep(Duration::from_millis(20 * u64::from(attempts.min(10))));
                continue;
            };
            self.at = address;
            let end = match self.login(&mut connection) {
                Ok(()) => {
                    attempts = 0;
                    self.serve(&mut connection, stop)
                }
                Err(end) => {
                    attempts += 1;
                    end
                }
            };
            match end {
                End::Stop => return,
                End::Redirected(target) => {
                    self.report.redirects += 1;
                    next = target.parse().ok();
                }
                End::Lost => {
                    self.report.reconnects += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// Another gateway after a loss: the list in turn.
    fn fallback(&self, attempt: u32) -> SocketAddr {
        let gateways = self.gateways.lock().unwrap();
        gateways[attempt as usize % gateways.len()]
    }

    fn fail(&mut self, what: String) {
        let at = self.at;
        self.report.failures.push(format!("{what} (through {at})"));
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    /// Logs in; a refusal is a failed request.
    fn login(&mut self, connection: &mut Connection) -> Result<(), End> {
        let token = super::token(self.report.player, 3600);
        let (kind, body, redirect) = self.call(connection, route::AUTH_LOGIN, token.as_bytes())?;
        if kind != FrameKind::Response {
            let code = decode_error_body(&body).map(|(code, _)| code);
            self.fail(format!("login: ERROR {code:?}"));
            return Err(End::Lost);
        }
        match redirect {
            Some(target) => Err(End::Redirected(target)),
            None => Ok(()),
        }
    }

    /// Sends requests until told to move, the connection is lost or the
    /// test stops.
    fn serve(&mut self, connection: &mut Connection, stop: &AtomicBool) -> End {
        let mut turn = 0;
        loop {
            if stop.load(Ordering::Acquire) {
                return End::Stop;
            }
            let route_id = ROUTES[turn % ROUTES.len()];
            turn += 1;
            let body: Vec<u8> = match route_id {
                route::PLAYER_INCR => 1i64.to_le_bytes().to_vec(),
                route::SYS_PING => b"ping".to_vec(),
                _ => Vec::new(),
            };
            let (kind, answer, redirect) = match self.call(connection, route_id, &body) {
                Ok(answered) => answered,
                Err(end) => return end,
            };
            self.check(route_id, kind, &answer);
            if let Some(target) = redirect {
                return End::Redirected(target);
            }
            std::thread::sleep(PACE);
        }
    }

    /// One request and its answer, with a redirect that came meanwhile.
    #[allow(clippy::type_complexity)]
    fn call(
        &mut self,
        connection: &mut Connection,
        route_id: u32,
        body: &[u8],
    ) -> Result<(FrameKind, Vec<u8>, Option<String>), End> {
        let seq = self.next_seq();
        if !connection.send(route_id, seq, body) {
            return Err(End::Lost);
        }
        self.report.sent += 1;
        let deadline = Instant::now() + ANSWER_WAIT;
        let mut redirect = None;
        loop {
            match connection.next() {
                Ok(Some(Frame::Answer {
                    seq: answered,
                    kind,
                    body,
                })) => {
                    if answered != seq {
                        self.fail(format!("seq {answered}: an answer to no request in flight"));
                        continue;
                    }
                    self.report.answered += 1;
                    let now = Instant::now();
                    if let Some(last) = self.last_answer.replace(now) {
                        self.report.longest_gap = self.report.longest_gap.max(now - last);
                    }
                    return Ok((kind, body, redirect));
                }
                Ok(Some(Frame::Redirect(target))) => redirect = Some(target),
                Ok(Some(Frame::Kicked)) => {
                    self.fail(format!(
                        "route {route_id}: kicked with the request in flight"
                    ));
                    return Err(End::Lost);
                }
                Ok(Some(Frame::Other)) => {}
                Ok(None) if Instant::now() < deadline => {}
                Ok(None) => {
                    self.fail(format!(
                        "route {route_id}: no answer within {ANSWER_WAIT:?}"
                    ));
                    return Err(End::Lost);
                }
                Err(()) => {
                    self.fail(format!(
                        "route {route_id}: connection lost with the request in flight"
                    ));
                    return Err(End::Lost);
                }
            }
        }
    }

    /// Checks one answer: OK, and a counter that is the base plus every
    /// increment acknowledged (so an increment lost or applied twice shows).
    fn check(&mut self, route_id: u32, kind: FrameKind, body: &[u8]) {
        if kind != FrameKind::Response {
            let code = decode_error_body(body).map(|(code, _)| code);
            self.fail(format!("route {route_id}: ERROR {code:?}"));
            return;
        }
        if route_id == route::SYS_PING {
            return;
        }
        let Ok(bytes) = <[u8; 8]>::try_from(body) else {
            self.fail(format!("route {route_id}: a body of {} bytes", body.len()));
            return;
        };
        let counter = i64::from_le_bytes(bytes);
        if route_id == route::PLAYER_INCR {
            self.report.acked_increments += 1;
        }
        let base = *self
            .base
            .get_or_insert(counter - self.report.acked_increments);
        let expected = base + self.report.acked_increments;
        if counter != expected {
            self.fail(format!(
                "route {route_id}: counter {counter}, expected {expected}"
            ));
        }
        self.report.last_counter = counter;
    }
}
