//! What loadgen's integration tests share: a `guild-node` (the guild
//! example, which serves routerd's built-in types too) started on
//! loopback from the same target directory as this loadgen, a loadgen run
//! against it, and a blocking session to read what the node kept.

// Each test file uses its own part of this.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};

pub const SECRET: &str = "loadgen-custom-test-secret";

/// `guild-node` beside this test's loadgen, if it was built.
pub fn guild_node() -> Option<PathBuf> {
    let loadgen = Path::new(env!("CARGO_BIN_EXE_loadgen"));
    let path = loadgen.with_file_name("guild-node");
    if path.is_file() {
        return Some(path);
    }
    let why = format!("no {} (cargo build -p guild)", path.display());
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A `guild-node` on loopback with an in-memory store, killed on drop.
pub struct Node {
    child: Child,
    pub gateway: SocketAddr,
}

impl Node {
    pub fn start(binary: &Path, dir: &Path) -> Node {
        Node::start_with(binary, dir, "")
    }

    /// A node whose config ends with `extra` (sections of its own).
    pub fn start_with(binary: &Path, dir: &Path, extra: &str) -> Node {
        let gateway = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = dir.join("node.toml");
        std::fs::write(
            &config,
            format!(
                "[node]\nid = 1\ndata_dir = {:?}\n[cores]\ncount = 1\nrecv_buffers = 64\n\
                 [store]\nbackend = \"memory\"\n[gateway]\nlisten = \"{gateway}\"\n\
                 [admin]\nlisten = \"127.0.0.1:0\"\n[cluster]\nlisten = \"127.0.0.1:0\"\n\
                 [auth]\nsecret = \"{SECRET}\"\n{extra}",
                dir.join("data").display().to_string()
            ),
        )
        .expect("config written");
        let child = Command::new(binary)
            .arg("--config")
            .arg(&config)
            .env_remove("ROUTERD_AUTH_SECRET")
            .stderr(Stdio::null())
            .spawn()
            .expect("guild-node starts");
        let node = Node { child, gateway };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(gateway).is_err() {
            assert!(Instant::now() < deadline, "guild-node never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs loadgen against `node` with `args` (the workload among them), two
/// connections, one second, no warm-up (so every answer is measured and
/// counted); returns its JSON summary.
pub fn loadgen_run(node: &Node, dir: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let json = dir.join(format!("{name}.json"));
    let output = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--addr", &node.gateway.to_string(), "--secret", SECRET])
        .args(["--connections", "2", "--pipeline", "4", "--threads", "1"])
        .args(["--duration", "1s", "--warmup", "0s", "--quiet"])
        .arg("--json")
        .arg(&json)
        .arg("--hgrm")
        .arg(dir.join(format!("{name}.hgrm")))
        .args(args)
        .output()
        .expect("loadgen runs");
    assert!(
        output.status.success(),
        "loadgen {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&std::fs::read(json).expect("json written")).expect("json")
}

/// A logged-in blocking session, to read what the node kept.
pub struct Session {
    stream: TcpStream,
    decoder: FrameDecoder,
    seq: u32,
}

impl Session {
    pub fn login(node: &Node, player: u64) -> Session {
        let stream = TcpStream::connect(node.gateway).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut session = Session {
            stream,
            decoder: FrameDecoder::new(Peer::Server, 1 << 16),
            seq: 0,
        };
        let token = wire::token::mint(SECRET.as_bytes(), player, 4_000_000_000);
        assert_eq!(
            session.call(route::AUTH_LOGIN, token.as_bytes()),
            player.to_le_bytes()
        );
        session
    }

    /// Sends one request and returns its RESPONSE body (pushes skipped).
    pub fn call(&mut self, route_id: u32, body: &[u8]) -> Vec<u8> {
        self.seq += 1;
        let mut out = Vec::new();
        encode_frame(&mut out, FrameKind::Request, route_id, self.seq, body);
        self.stream.write_all(&out).expect("write");
        loop {
            if let Some(frame) = self.decoder.next_frame().expect("valid frames") {
                if frame.header.kind == FrameKind::Push {
                    continue;
                }
                assert_eq!(frame.header.kind, FrameKind::Response, "{:?}", frame.body);
                assert_eq!(frame.header.seq, self.seq);
                return frame.body.to_vec();
            }
            let buf = self.decoder.read_buf();
            let n = self.stream.read(buf).expect("read");
            assert!(n > 0, "the node closed the session");
            self.decoder.advance(n);
        }
    }
}

pub fn counter(body: &[u8]) -> i64 {
    i64::from_le_bytes(body.try_into().expect("an i64 counter"))
}

/// The sum of `players`' built-in counters (`player.get`) on `node`.
pub fn player_counters(node: &Node, players: &[u64]) -> i64 {
    players
        .iter()
        .map(|&player| counter(&Session::login(node, player).call(route::PLAYER_GET, b"")))
        .sum()
}
