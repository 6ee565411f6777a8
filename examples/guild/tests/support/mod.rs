//! A tiny harness for the guild example's tests: `guild-node` processes on
//! loopback sharing one SQLite file (routerd's local-cluster mode), with
//! fast membership timers, and a client over routerd's shared test client.
//! The same pattern as routerd's own `tests/support/cluster.rs`, for a
//! binary of your own.
#![allow(dead_code)]

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod guild;

use wire::client::FrameKind;

pub const SECRET: &str = "guild-test-secret";
/// How long a test waits for any one frame.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the nodes of one test keep their configs and their shared store.
pub struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    pub fn new() -> Cluster {
        Cluster {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The config of node `id`: one core with few buffers (the locked
    /// memory of a test runner is small), the shared SQLite file, fast
    /// membership timers (down_after >= fence_after + 2 x heartbeat).
    fn config(&self, id: u64) -> String {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        format!(
            "[node]\nid = {id}\ndata_dir = {data:?}\n\
             [cores]\ncount = 1\nrecv_buffers = 64\nshutdown_deadline_ms = 3000\n\
             [store]\nbackend = \"sqlite\"\npath = {db:?}\nsynchronous = \"normal\"\n\
             [cluster]\nlisten = \"127.0.0.1:0\"\nsecret = \"the guild cluster's secret\"\n\
             heartbeat_interval_ms = 100\nfence_after_ms = 400\ndown_after_ms = 800\n\
             [gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [auth]\nsecret = \"{SECRET}\"\n",
            data = path(&format!("data-{id}")),
            db = path("cluster.db"),
        )
    }

    /// Starts `guild-node` as node `id` with `args` and waits until it
    /// serves.
    pub fn start(&self, id: u64, args: &[&str]) -> GuildNode {
        let config = self.dir.path().join(format!("node-{id}.toml"));
        std::fs::write(&config, self.config(id)).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_guild-node"));
        command.arg("--config").arg(&config).args(args);
        GuildNode::spawn(command)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A `guild-node` child process.
pub struct GuildNode {
    child: Child,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
}

impl GuildNode {
    fn spawn(mut command: Command) -> GuildNode {
        let mut child = command
            .env_remove("ROUTERD_AUTH_SECRET")
            .stderr(Stdio::piped())
            .spawn()
            .expect("guild-node starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // GUILD_TEST_LOGS=1 passes the node's log through, for debugging.
        let echo = std::env::var_os("GUILD_TEST_LOGS").is_some();
        let pid = child.id();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if echo {
                    eprintln!("[{pid}] {line}");
                }
                if let Some(addresses) = routerd::serving_addresses(&line) {
                    let _ = tx.send(addresses);
                }
            }
        });
        let Ok((gateway, admin)) = rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("guild-node did not log its addresses (GUILD_TEST_LOGS=1 shows its log)");
        };
        GuildNode {
            child,
            gateway,
            admin,
        }
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.gateway)
    }

    /// SIGTERM: the node saves its objects and leaves the cluster.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on the pid of a child this test owns and has not
        // reaped, so the pid cannot have been reused.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0);
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(15), "no exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The state (`up`, `left`, ...) this node's `/cluster` gives member
    /// `id`.
    pub fn member_state(&self, id: u64) -> Option<String> {
        let cluster = get_json(self.admin, "/cluster");
        let member = cluster["members"]
            .as_array()?
            .iter()
            .find(|member| member["node_id"] == id)?
            .clone();
        Some(member["state"].as_str()?.to_string())
    }

    /// Waits until this node sees each of `peers` up.
    pub fn wait_up(&self, peers: &[u64]) {
        eventually(Duration::from_secs(10), "members up", || {
            peers
                .iter()
                .all(|&id| self.member_state(id).as_deref() == Some("up"))
                .then_some(())
        });
    }
}

impl Drop for GuildNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on an admin endpoint, as JSON.
pub fn get_json(address: SocketAddr, path: &str) -> serde_json::Value {
    call_json(address, "GET", path)
}

/// `method path` on an admin endpoint, as JSON.
pub fn call_json(address: SocketAddr, method: &str, path: &str) -> serde_json::Value {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|error| panic!("{path}: {error}: {response}"))
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after
/// `limit`.
pub fn eventually<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub use routerd::testing::client::Reply;

/// A client on one connection that numbers its requests and keeps the
/// pushes that come before an answer, over routerd's shared test client
/// (`routerd::testing::client`); answers and pushes come in the order the
/// node sent them.
pub struct Client {
    connection: routerd::testing::client::Client,
    seq: u32,
    /// Pushes that arrived while `call` waited for an answer.
    pending: std::collections::VecDeque<Reply>,
}

impl Client {
    pub fn connect(address: SocketAddr) -> Client {
        Client {
            connection: routerd::testing::client::Client::connect(address, READ_TIMEOUT),
            seq: 0,
            pending: Default::default(),
        }
    }

    /// Sends a request with the next seq; returns the seq.
    pub fn send(&mut self, route_id: u32, body: &[u8]) -> u32 {
        self.seq += 1;
        self.connection.send(route_id, self.seq, body);
        self.seq
    }

    /// The next frame; panics on timeout or end of stream.
    pub fn recv(&mut self) -> Reply {
        self.connection.recv()
    }

    /// Sends one request and returns its answer; pushes that come first
    /// are kept for `push`.
    pub fn call(&mut self, route_id: u32, body: &[u8]) -> Reply {
        let seq = self.send(route_id, body);
        let mut pushes = Vec::new();
        loop {
            let frame = self.recv();
            if frame.kind == FrameKind::Push {
                pushes.push(frame);
                continue;
            }
            assert_eq!(frame.seq, seq, "{frame:?}");
            self.pending.extend(pushes);
            return frame;
        }
    }

    /// The next push (one `call` kept, or the next frame, which must be
    /// one).
    pub fn push(&mut self) -> Reply {
        let frame = match self.pending.pop_front() {
            Some(frame) => frame,
            None => self.recv(),
        };
        assert_eq!(frame.kind, FrameKind::Push, "{frame:?}");
        frame
    }

    /// Logs in as `player_id` with a token minted with the test secret.
    pub fn login(&mut self, player_id: u64) {
        self.seq += 1;
        self.connection
            .login(SECRET.as_bytes(), player_id, self.seq);
    }
}
