//! In-test servers on loopback and a one-thread run against them: a fake
//! routerd gateway (that can answer wrong seqs, redirect its sessions or
//! drop them), and a fake Redis. They speak the protocols for real, so the
//! io_uring engine, the sans-IO connections and the moves are tested
//! together without a node or a redis-server.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};

use crate::cli::Args;
use crate::clock::now_ns;
use crate::resp::{encode_command, Reply, RespDecoder};
use crate::runner::{run_thread, Context, Coordinator, Outcome, Plan};
use wire::client::route::SYS_REDIRECT;

/// The login secret of every fake server.
pub const SECRET: &str = "test";

/// What a fake gateway does besides answering.
#[derive(Clone, Debug, Default)]
pub struct Behaviour {
    /// Added to every answer's seq (0 for a correct server).
    pub seq_skew: u32,
    /// After this many workload requests on a connection, push a
    /// `sys.redirect` with this target (and keep answering).
    pub redirect_after: Option<(u64, String)>,
    /// After this many workload requests on a connection, drop it without
    /// answering the last ones read.
    pub close_after: Option<u64>,
    /// Right after each login's answer, push a `sys.redirect` with this
    /// target (as a node placing sessions on their player's node does).
    pub redirect_at_login: Option<String>,
}

/// What every connection of a fake gateway saw.
#[derive(Debug, Default)]
pub struct Record {
    /// Every successful login's player, in order.
    pub logins: Mutex<Vec<u64>>,
    /// Players with a live session right now.
    live: Mutex<HashSet<u64>>,
    /// Logins of a player whose earlier session stayed live (see
    /// `Record::take_live`): each would have kicked the other under
    /// `kick_old`.
    pub overlaps: AtomicU64,
    /// Workload requests answered.
    pub answered: AtomicU64,
    /// `sys.redirect` PUSHes sent.
    pub redirects: AtomicU64,
    /// Workload requests read after this connection's redirect was sent.
    pub after_redirect: AtomicU64,
}

/// How long a login waits for the player's previous connection to be seen
/// closed before it counts as an overlap.
const HANDOVER_WAIT: Duration = Duration::from_secs(2);

impl Record {
    /// Marks `player` live for a new login; false if another connection
    /// still holds it. A client hands a player to another connection after
    /// closing the old one, and this gateway learns of that close on the
    /// old connection's own thread, at its own time (a real gateway too):
    /// so an overlap is a player still held `HANDOVER_WAIT` later, not one
    /// whose close has not been read yet.
    fn take_live(&self, player: u64) -> bool {
        let deadline = std::time::Instant::now() + HANDOVER_WAIT;
        loop {
            let mut live = self.live.lock().expect("lock");
            if live.insert(player) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            drop(live);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A fake gateway on a free loopback port, one thread a connection.
pub fn gateway(behaviour: Behaviour) -> (SocketAddr, Arc<Record>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let record = Arc::new(Record::default());
    let shared = Arc::clone(&record);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let behaviour = behaviour.clone();
            let record = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut session = Session::default();
                session.serve(stream, &behaviour, &record);
                if let Some(player) = session.player_id {
                    record.live.lock().expect("lock").remove(&player);
                }
            });
        }
    });
    (addr, record)
}

#[derive(Default)]
struct Session {
    player_id: Option<u64>,
    counter: i64,
    requests: u64,
    redirected: bool,
}

impl Session {
    /// Answers every REQUEST with a RESPONSE of the same route: `auth.login`
    /// verifies the token and answers the player id, `player.incr` and
    /// `player.get` a counter, `room.join` one member, `room.say` one
    /// member plus a `room.message` PUSH to the sender itself, anything
    /// else an echo.
    fn serve(&mut self, mut stream: TcpStream, behaviour: &Behaviour, record: &Record) {
        let _ = stream.set_nodelay(true);
        let mut decoder = FrameDecoder::new(Peer::Client, 1 << 16);
        let mut out = Vec::new();
        loop {
            let n = match stream.read(decoder.read_buf()) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            decoder.advance(n);
            out.clear();
            while let Ok(Some(frame)) = decoder.next_frame() {
                let h = frame.header;
                let seq = h.seq.wrapping_add(behaviour.seq_skew);
                let body = frame.body;
                if h.route_id == route::AUTH_LOGIN {
                    let player = wire::token::verify(SECRET.as_bytes(), body, 0)
                        .expect("a token minted with the test secret");
                    self.player_id = Some(player);
                    record.logins.lock().expect("lock").push(player);
                    if !record.take_live(player) {
                        record.overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let id = player.to_le_bytes();
                    encode_frame(&mut out, FrameKind::Response, h.route_id, seq, &id);
                    if let Some(target) = &behaviour.redirect_at_login {
                        self.redirected = true;
                        let mut push = 2_000u32.to_le_bytes().to_vec();
                        push.extend_from_slice(target.as_bytes());
                        encode_frame(&mut out, FrameKind::Push, SYS_REDIRECT, 0, &push);
                        record.redirects.fetch_add(1, Ordering::SeqCst);
                    }
                    continue;
                }
                self.requests += 1;
                if self.redirected {
                    record.after_redirect.fetch_add(1, Ordering::SeqCst);
                }
                if behaviour.close_after.is_some_and(|n| self.requests >= n) {
                    // Gone, with whatever was read and not yet answered.
                    return;
                }
                self.answer(&mut out, h.route_id, seq, body);
                record.answered.fetch_add(1, Ordering::SeqCst);
                if let Some((after, target)) = &behaviour.redirect_after {
                    if self.requests == *after && !self.redirected {
                        self.redirected = true;
                        let mut push = 2_000u32.to_le_bytes().to_vec();
                        push.extend_from_slice(target.as_bytes());
                        encode_frame(&mut out, FrameKind::Push, SYS_REDIRECT, 0, &push);
                        record.redirects.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            if stream.write_all(&out).is_err() {
                return;
            }
        }
    }

    fn answer(&mut self, out: &mut Vec<u8>, route_id: u32, seq: u32, body: &[u8]) {
        let player_id = self.player_id.unwrap_or(0);
        match route_id {
            route::PLAYER_INCR | route::PLAYER_GET => {
                self.counter += 1;
                let counter = self.counter.to_le_bytes();
                encode_frame(out, FrameKind::Response, route_id, seq, &counter);
            }
            route::ROOM_JOIN => {
                encode_frame(out, FrameKind::Response, route_id, seq, &1u32.to_le_bytes());
            }
            route::ROOM_SAY => {
                let mut push = body[..8].to_vec();
                push.extend_from_slice(&player_id.to_le_bytes());
                push.extend_from_slice(&body[8..]);
                encode_frame(out, FrameKind::Push, route::ROOM_MESSAGE, 0, &push);
                encode_frame(out, FrameKind::Response, route_id, seq, &1u32.to_le_bytes());
            }
            _ => encode_frame(out, FrameKind::Response, route_id, seq, body),
        }
    }
}

/// What a fake Redis saw: each key's counter and the commands by name.
#[derive(Debug, Default)]
pub struct RedisRecord {
    pub counters: Mutex<HashMap<Vec<u8>, i64>>,
    pub commands: Mutex<HashMap<String, u64>>,
}

/// A fake Redis on a free loopback port: PING [msg], INCR key, GET key,
/// and `-ERR` for anything else. Commands are arrays, which the client's
/// decoder refuses by design, so it parses them by hand.
pub fn redis() -> (SocketAddr, Arc<RedisRecord>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let record = Arc::new(RedisRecord::default());
    let shared = Arc::clone(&record);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let record = Arc::clone(&shared);
            std::thread::spawn(move || serve_redis(stream, &record));
        }
    });
    (addr, record)
}

fn serve_redis(mut stream: TcpStream, record: &RedisRecord) {
    let _ = stream.set_nodelay(true);
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        let mut out = Vec::new();
        while let Some((args, used)) = parse_command(&pending) {
            pending.drain(..used);
            answer_redis(&args, record, &mut out);
        }
        if stream.write_all(&out).is_err() {
            return;
        }
    }
}

fn answer_redis(args: &[Vec<u8>], record: &RedisRecord, out: &mut Vec<u8>) {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    *record
        .commands
        .lock()
        .expect("lock")
        .entry(name.clone())
        .or_default() += 1;
    match (name.as_str(), args.len()) {
        ("PING", 1) => out.extend_from_slice(b"+PONG\r\n"),
        ("PING", 2) => {
            out.extend_from_slice(format!("${}\r\n", args[1].len()).as_bytes());
            out.extend_from_slice(&args[1]);
            out.extend_from_slice(b"\r\n");
        }
        ("INCR", 2) => {
            let mut counters = record.counters.lock().expect("lock");
            let counter = counters.entry(args[1].clone()).or_default();
            *counter += 1;
            out.extend_from_slice(format!(":{counter}\r\n").as_bytes());
        }
        ("GET", 2) => match record.counters.lock().expect("lock").get(&args[1]) {
            Some(value) => {
                let text = value.to_string();
                out.extend_from_slice(format!("${}\r\n{text}\r\n", text.len()).as_bytes());
            }
            None => out.extend_from_slice(b"$-1\r\n"),
        },
        _ => out.extend_from_slice(b"-ERR unknown command\r\n"),
    }
}

/// One `*<n>\r\n($<len>\r\n<bytes>\r\n)*` command, if complete.
fn parse_command(bytes: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(bytes: &[u8], from: usize) -> Option<(&[u8], usize)> {
        let end = bytes[from..].windows(2).position(|w| w == b"\r\n")? + from;
        Some((&bytes[from..end], end + 2))
    }
    let (head, mut at) = line(bytes, 0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len_line, data) = line(bytes, at)?;
        let len: usize = std::str::from_utf8(len_line.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if bytes.len() < data + len + 2 {
            return None;
        }
        args.push(bytes[data..data + len].to_vec());
        at = data + len + 2;
    }
    Some((args, at))
}

/// The fake Redis speaks the codec's own reply format back: checked once
/// here so a broken fake cannot pass the other tests.
#[test]
fn the_fake_redis_answers_in_resp() {
    let record = RedisRecord::default();
    let mut out = Vec::new();
    let mut commands = Vec::new();
    encode_command(&mut commands, &[b"INCR", b"k"]);
    encode_command(&mut commands, &[b"GET", b"k"]);
    encode_command(&mut commands, &[b"GET", b"none"]);
    encode_command(&mut commands, &[b"PING"]);
    let mut at = 0;
    while let Some((args, used)) = parse_command(&commands[at..]) {
        answer_redis(&args, &record, &mut out);
        at += used;
    }
    assert_eq!(at, commands.len());
    let mut decoder = RespDecoder::new(64);
    decoder.extend(&out);
    assert_eq!(decoder.next_reply(), Ok(Some(Reply::Integer(1))));
    assert_eq!(decoder.next_reply(), Ok(Some(Reply::Bulk(Some(b"1")))));
    assert_eq!(decoder.next_reply(), Ok(Some(Reply::Bulk(None))));
    assert_eq!(decoder.next_reply(), Ok(Some(Reply::Simple(b"PONG"))));
}

/// Runs one generator thread (all connections) with `extra` flags against
/// `addrs`: 200 ms of warm-up and 1 s measured unless `extra` says.
pub fn run_against(addrs: &[SocketAddr], extra: &[&str]) -> Outcome {
    let mut argv = vec!["loadgen"];
    if !extra.contains(&"--warmup") {
        argv.extend(["--warmup", "200ms"]);
    }
    if !extra.contains(&"--duration") {
        argv.extend(["--duration", "1s"]);
    }
    argv.extend_from_slice(extra);
    let mut args = Args::parse_from(argv);
    args.addrs = addrs.to_vec();
    args.validate().expect("valid test args");
    let coordinator = Arc::new(Coordinator::default());
    let ctx = Context {
        args: Arc::new(args.clone()),
        secret: Arc::new(SECRET.to_string()),
        coordinator: Arc::clone(&coordinator),
        progress: None,
    };
    let plan = Plan {
        thread_index: 0,
        cpu: None,
        first_conn: 0,
        conn_count: args.connections,
    };
    let handle = std::thread::spawn(move || run_thread(plan, ctx));
    let deadline = now_ns() + 10_000_000_000;
    while coordinator.ready.load(Ordering::SeqCst) == 0
        && !coordinator.failed.load(Ordering::SeqCst)
    {
        assert!(now_ns() < deadline, "setup did not finish");
        std::thread::sleep(Duration::from_millis(1));
    }
    coordinator.start_ns.store(now_ns(), Ordering::SeqCst);
    handle.join().expect("generator thread")
}
