//! Memory per session: the resident set of a one-core routerd node before
//! and after CONNECTIONS client connections (each answered one `sys.ping`,
//! then idle), per connection; then after every one of them logged in as a
//! player of its own, per player. Both are read against a baseline taken
//! after `WARM_UP` sessions did the same, so one-time costs (code paged in
//! by the first session) are not charged per session. For scale, the same
//! per-connection figure for `bench/echo` on the same runtime (each
//! connection echoed a frame, then idle). The kernel's socket buffers are not in a
//! process's resident set, so they are not counted.
//!
//! Run: `bench/memory_per_session.sh [CONNECTIONS]` (builds and runs this
//! with the release node and echo).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::http_get;
use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};

const SECRET: &str = "memory-per-session-bench-secret";
/// Goals of the runtime issue, in bytes.
const IDLE_CONNECTION_GOAL_BYTES: f64 = 1024.0;
const PLAYER_GOAL_BYTES: f64 = 1536.0;
/// Requests written before their answers are read: bounds what waits in
/// the node's and the kernel's buffers at once.
const BATCH_MAX: usize = 500;
/// How long the resident set must hold still before it is read.
const SETTLE: Duration = Duration::from_millis(1500);
const WAIT_MAX: Duration = Duration::from_secs(120);
/// Sessions opened, pinged and logged in before the baseline is read (and
/// kept open): the first connection and the first login fault in what any
/// number of sessions share, about 400 KiB of the node's code alone, which
/// a baseline taken at start would charge to the measured connections.
const WARM_UP: usize = 100;

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        let line = status
            .lines()
            .find(|line| line.starts_with("VmRSS:"))
            .expect("VmRSS in /proc status");
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|kib| kib.parse().ok())
            .expect("VmRSS in kB");
        kib * 1024
    }

    /// The resident set once it has stopped moving (allocator and kernel
    /// work after the last answer).
    fn settled_rss_bytes(&self) -> u64 {
        let mut last = self.rss_bytes();
        loop {
            std::thread::sleep(SETTLE);
            let now = self.rss_bytes();
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

fn start_routerd(routerd: &str, dir: &std::path::Path) -> (Server, SocketAddr, SocketAddr) {
    let path = dir.join("node.toml");
    let config = format!(
        "[node]\nid = 1\ndata_dir = {data:?}\n[cores]\ncpus = [0]\n\
         [store]\nbackend = \"sqlite\"\npath = {db:?}\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\nidle_timeout_ms = 3600000\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [cluster]\nlisten = \"127.0.0.1:0\"\n[auth]\nsecret = \"{SECRET}\"\n",
        data = dir.join("data").display().to_string(),
        db = dir.join("node.db").display().to_string(),
    );
    std::fs::write(&path, config).unwrap();
    let (child, gateway, admin) = bench::spawn_node(routerd, &path);
    (Server { child }, gateway, admin)
}

fn start_echo(echo: &str, listen: SocketAddr) -> Server {
    let child = Command::new(echo)
        .args(["--listen", &listen.to_string(), "--cpus", "0"])
        .stderr(Stdio::null())
        .spawn()
        .expect("echo starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(listen).is_err() {
        assert!(
            Instant::now() < deadline,
            "echo does not listen on {listen}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Server { child }
}

/// The value of an unlabelled series of `/metrics`.
fn metric(admin: SocketAddr, name: &str) -> f64 {
    let body = http_get(admin, "/metrics");
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

fn wait_metric(admin: SocketAddr, name: &str, at_least: f64) {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let value = metric(admin, name);
        if value >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} = {value}, wanted {at_least}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Client {
    stream: TcpStream,
    decoder: FrameDecoder,
}

impl Client {
    fn connect(address: SocketAddr) -> Client {
        let stream = TcpStream::connect(address).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            stream,
            decoder: FrameDecoder::new(Peer::Server, 1 << 16),
        }
    }

    fn send(&mut self, route_id: u32, seq: u32, body: &[u8]) {
        let mut frame = Vec::new();
        encode_frame(&mut frame, FrameKind::Request, route_id, seq, body);
        self.stream.write_all(&frame).expect("send");
    }

    /// The kind of the next answer (pushes skipped).
    fn answer(&mut self) -> FrameKind {
        loop {
            if let Some(frame) = self.decoder.next_frame().expect("a valid frame") {
                if frame.header.kind != FrameKind::Push {
                    return frame.header.kind;
                }
                continue;
            }
            let n = self
                .stream
                .read(self.decoder.read_buf())
                .expect("an answer");
            assert!(n > 0, "the node closed a connection");
            self.decoder.advance(n);
        }
    }
}

/// Sends one request per client in batches of `BATCH_MAX`, and asserts
/// each is answered with a response.
fn call_all(clients: &mut [Client], request: impl Fn(usize, &mut Client)) {
    for (batch, chunk) in clients.chunks_mut(BATCH_MAX).enumerate() {
        for (index, client) in chunk.iter_mut().enumerate() {
            request(batch * BATCH_MAX + index, client);
        }
        for client in chunk.iter_mut() {
            assert_eq!(client.answer(), FrameKind::Response);
        }
    }
}

fn per(bytes_after: u64, bytes_before: u64, count: usize) -> f64 {
    (bytes_after as f64 - bytes_before as f64) / count as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (routerd, echo) = match (args.get(1), args.get(2)) {
        (Some(routerd), Some(echo)) => (routerd.clone(), echo.clone()),
        _ => {
            eprintln!("usage: memory_per_session ROUTERD ECHO [CONNECTIONS]");
            std::process::exit(2);
        }
    };
    let connections: usize = args
        .get(3)
        .map_or(10_000, |n| n.parse().expect("CONNECTIONS"));
    let dir = std::env::temp_dir().join(format!("routerd-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let (node, gateway, admin) = start_routerd(&routerd, &dir);
    let started = node.settled_rss_bytes();
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    // Players 1..=WARM_UP are the warm-up's, the measured ones follow.
    let log_in = |first_player: usize| {
        move |index: usize, client: &mut Client| {
            let player = (first_player + index) as u64;
            let token = wire::token::mint(SECRET.as_bytes(), player, expiry);
            client.send(route::AUTH_LOGIN, 2, token.as_bytes());
        }
    };
    let mut warm: Vec<Client> = (0..WARM_UP).map(|_| Client::connect(gateway)).collect();
    call_all(&mut warm, ping);
    call_all(&mut warm, log_in(1));
    wait_metric(admin, "routerd_router_objects", WARM_UP as f64);
    let warmed = node.settled_rss_bytes();
    let mut clients: Vec<Client> = (0..connections).map(|_| Client::connect(gateway)).collect();
    call_all(&mut clients, ping);
    wait_metric(
        admin,
        "routerd_gateway_sessions_active",
        (WARM_UP + connections) as f64,
    );
    let connected = node.settled_rss_bytes();
    call_all(&mut clients, log_in(1 + WARM_UP));
    wait_metric(
        admin,
        "routerd_router_objects",
        (WARM_UP + connections) as f64,
    );
    let logged_in = node.settled_rss_bytes();
    drop(clients);
    drop(warm);
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
    let idle = per(connected, warmed, connections);
    let player = per(logged_in, connected, connections);
    let kib = |bytes: u64| bytes as f64 / 1024.0;
    println!(
        "routerd RSS: {:.0} KiB at start, {:.0} KiB after {WARM_UP} warm-up sessions, {:.0} KiB \
         with {connections} more idle connections, {:.0} KiB with them logged in",
        kib(started),
        kib(warmed),
        kib(connected),
        kib(logged_in)
    );
    println!(
        "per idle connection: routerd {idle:.0} B (goal <= {IDLE_CONNECTION_GOAL_BYTES:.0} B: {})",
        verdict(idle <= IDLE_CONNECTION_GOAL_BYTES),
    );
    println!(
        "per logged-in player, beyond its connection: {player:.0} B (goal <= \
         {PLAYER_GOAL_BYTES:.0} B: {})",
        verdict(player <= PLAYER_GOAL_BYTES)
    );

    let listen: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let echo = start_echo(&echo, listen);
    // The echo answers each frame with a response carrying its body.
    let mut echo_warm: Vec<Client> = (0..WARM_UP).map(|_| Client::connect(listen)).collect();
    call_all(&mut echo_warm, ping);
    let echo_started = echo.settled_rss_bytes();
    let mut echo_clients: Vec<Client> = (0..connections).map(|_| Client::connect(listen)).collect();
    call_all(&mut echo_clients, ping);
    let echo_connected = echo.settled_rss_bytes();
    drop(echo_clients);
    drop(echo_warm);
    drop(echo);
    let echo_idle = per(echo_connected, echo_started, connections);
    println!(
        "echo RSS: {:.0} KiB after {WARM_UP} warm-up connections, {:.0} KiB with \
         {connections} more idle connections",
        kib(echo_started),
        kib(echo_connected)
    );
    println!(
        "per idle connection: echo {echo_idle:.0} B; routerd/echo {:.2}",
        idle / echo_idle
    );
}

/// A `sys.ping` carrying the client's index.
fn ping(index: usize, client: &mut Client) {
    client.send(route::SYS_PING, 1, &(index as u64).to_le_bytes());
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}
