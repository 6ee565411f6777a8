//! An in-test server on loopback and a one-thread run against it: a fake
//! routerd gateway (that can answer wrong seqs). It speaks the protocol for
//! real, so the io_uring engine and the sans-IO connections are tested
//! together without a node.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};

use crate::cli::Args;
use crate::clock::now_ns;
use crate::runner::{run_thread, Context, Coordinator, Outcome, Plan};

/// The login secret of every fake server.
pub const SECRET: &str = "test";

/// What a fake gateway does besides answering.
#[derive(Clone, Debug, Default)]
pub struct Behaviour {
    /// Added to every answer's seq (0 for a correct server).
    pub seq_skew: u32,
}

/// A fake gateway on a free loopback port, one thread a connection.
pub fn gateway(behaviour: Behaviour) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let behaviour = behaviour.clone();
            std::thread::spawn(move || Session::default().serve(stream, &behaviour));
        }
    });
    addr
}

#[derive(Default)]
struct Session {
    player_id: Option<u64>,
    counter: i64,
}

impl Session {
    /// Answers every REQUEST with a RESPONSE of the same route: `auth.login`
    /// verifies the token and answers the player id, `player.incr` and
    /// `player.get` a counter, `room.join` one member, `room.say` one
    /// member plus a `room.message` PUSH to the sender itself, anything
    /// else an echo.
    fn serve(&mut self, mut stream: TcpStream, behaviour: &Behaviour) {
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
                    let id = player.to_le_bytes();
                    encode_frame(&mut out, FrameKind::Response, h.route_id, seq, &id);
                    continue;
                }
                self.answer(&mut out, h.route_id, seq, body);
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

/// Runs one generator thread (all connections) with `extra` flags against
/// `addr`: 200 ms of warm-up and 1 s measured unless `extra` says.
pub fn run_against(addr: SocketAddr, extra: &[&str]) -> Outcome {
    let mut argv = vec!["loadgen"];
    if !extra.contains(&"--warmup") {
        argv.extend(["--warmup", "200ms"]);
    }
    if !extra.contains(&"--duration") {
        argv.extend(["--duration", "1s"]);
    }
    argv.extend_from_slice(extra);
    let mut args = Args::parse_from(argv);
    args.addr = addr;
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
