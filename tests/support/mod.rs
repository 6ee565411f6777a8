//! The integration tests' harness: the shared test client
//! (`routerd::testing::client`) with the tests' secret, and real nodes on
//! loopback (`TestNode` in this process, `ServeProcess` a `routerd serve`
//! child). What several tests share beside: local clusters (`cluster`), the
//! admin endpoint's HTTP client (`http`), network namespaces with cuts
//! (`netns`), a player side that admits every login (`port`), the two-process store race (`store_race`), a flood of silent
//! connections (`flood`), a well-behaved game client (`follower`), a
//! strict exposition parser (`prometheus`) and what a migrated store does
//! with member rows from before their timers (`member_timers`).
#![allow(dead_code)]

pub mod cluster;
pub mod flood;
pub mod follower;
pub mod http;
pub mod member_timers;
pub mod netns;
pub mod port;
pub mod prometheus;
pub mod store_race;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use routerd::config::{Config, DuplicateLogin, StoreBackend};
use routerd::node::Node;
use routerd::store::{open_memory, MemoryFaults};
use wire::client::FrameKind;

pub const SECRET: &str = "gateway-test-secret";

/// How long a test waits for any one frame before failing.
pub const READ_TIMEOUT: Duration = Duration::from_secs(3);

pub fn config() -> Config {
    let mut config = Config::default();
    config.cores.count = 2;
    config.cores.recv_buffers = 64;
    config.cores.shutdown_deadline_ms = 1000;
    config.gateway.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config.cluster.listen = "127.0.0.1:0".parse().unwrap();
    config.store.backend = StoreBackend::Memory;
    config.auth.secret = SECRET.into();
    config.auth.duplicate_login = DuplicateLogin::KickOld;
    config
}

/// A node that stops when dropped.
pub struct TestNode {
    node: Option<Node>,
}

impl TestNode {
    pub fn start(config: Config) -> TestNode {
        TestNode {
            node: Some(Node::start(config).expect("node starts")),
        }
    }

    /// A node on a memory store whose faults the test injects.
    pub fn start_with_faults(config: Config) -> (TestNode, MemoryFaults) {
        let (store, faults) = open_memory(&config.store);
        let node = Node::start_with_store(config, store).expect("node starts");
        (TestNode { node: Some(node) }, faults)
    }

    pub fn gateway(&self) -> SocketAddr {
        self.node.as_ref().unwrap().gateway_address()
    }

    /// The WebSocket listener's address (`gateway.websocket_listen`).
    pub fn websocket(&self) -> SocketAddr {
        self.node
            .as_ref()
            .unwrap()
            .websocket_address()
            .expect("a WebSocket listener")
    }

    /// The TLS listener's address (`gateway.tls_listen`).
    pub fn tls(&self) -> SocketAddr {
        self.node
            .as_ref()
            .unwrap()
            .tls_address()
            .expect("a TLS listener")
    }

    pub fn admin(&self) -> SocketAddr {
        self.node.as_ref().unwrap().admin_address()
    }

    pub fn shutdown_handle(&self) -> shards::ShutdownHandle {
        self.node.as_ref().unwrap().shutdown_handle()
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.gateway())
    }

    /// The value of one line of `/metrics`, e.g.
    /// `routerd_gateway_egress_rejected_total{reason="stale_epoch"}`.
    pub fn metric(&self, name: &str) -> i64 {
        let text = self.metrics();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
    }

    /// The whole HTTP response to `GET /metrics`, head and body.
    pub fn metrics(&self) -> String {
        let address = self.node.as_ref().unwrap().admin_address();
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        let head = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    /// Polls `metric` until it equals `want` (counters move on the cores a
    /// little after the client sees the effect).
    pub fn wait_metric(&self, name: &str, want: i64) {
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        loop {
            let got = self.metric(name);
            if got == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} = {got}, want {want}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown_handle().trigger();
            let _ = node.wait();
        }
    }
}

pub use routerd::testing::client::Reply;

/// The shared test client (`routerd::testing::client`) with this harness's
/// read timeout and secret; every method of the shared one through `Deref`.
pub struct Client(routerd::testing::client::Client);

impl Client {
    pub fn connect(address: SocketAddr) -> Client {
        Client(routerd::testing::client::Client::connect(
            address,
            READ_TIMEOUT,
        ))
    }

    /// Logs in as `player_id` with a fresh token; asserts success.
    pub fn login(&mut self, player_id: u64, seq: u32) {
        self.0.login(SECRET.as_bytes(), player_id, seq);
    }
}

impl std::ops::Deref for Client {
    type Target = routerd::testing::client::Client;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A loopback port free a moment ago, for a config that must name its
/// port before the node starts: start that node through
/// [`on_free_ports`].
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a node on ports `start` picks free before the node binds them,
/// and again on other ports when one was taken meanwhile (this binary's
/// other tests start nodes and clients beside it, and a client's
/// ephemeral port comes from the same range). A test that can bind on port
/// 0 and read the address back ([`ServeProcess::serving_address`]) needs
/// none of this; one whose config must name the port before the node
/// starts (a restart on the same ports, a proxy in front) does.
pub fn on_free_ports<T>(mut start: impl FnMut() -> Result<T, String>) -> T {
    for _ in 0..3 {
        match start() {
            Ok(started) => return started,
            Err(why) if why.contains("still listens") || why.contains("in use") => {
                eprintln!("started again on other ports: {why}")
            }
            Err(why) => panic!("{why}"),
        }
    }
    panic!("no free ports in three tries");
}

/// A loopback port nothing listens on, and the socket that keeps it so:
/// bound without `listen`, so a connection to it is refused, and no other
/// process can take the port while the test holds the socket (a port
/// merely free a moment ago could be).
pub fn refusing_port() -> (socket2::Socket, u16) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    socket.bind(&any.into()).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    (socket, port)
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token for `player_id` valid for `ttl_secs` from now.
pub fn token(player_id: u64, ttl_secs: u64) -> String {
    routerd::testing::client::token(SECRET.as_bytes(), player_id, ttl_secs)
}

/// A `routerd serve` child process on loopback with its own config file.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    /// The last lines the process wrote on stderr (at most `LOG_LINES_MAX`).
    pub log: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// Lines of a process's stderr a test keeps.
const LOG_LINES_MAX: usize = 2_000;

impl ServeProcess {
    /// Starts `routerd serve --config <dir>/node.toml` with `body` as the
    /// config (on port 0 for both listeners) and waits until it serves.
    pub fn start(dir: &std::path::Path, body: &str) -> ServeProcess {
        Self::try_start(dir, body).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Self::start`], or why the node did not come up, with its log.
    pub fn try_start(dir: &std::path::Path, body: &str) -> Result<ServeProcess, String> {
        ServeProcess::try_spawn(Self::command(dir, body))
    }

    /// The command [`Self::start`] runs, for a test that changes how the
    /// process starts (its limits) before [`Self::spawn`].
    pub fn command(dir: &std::path::Path, body: &str) -> std::process::Command {
        let path = dir.join("node.toml");
        // Every core's link listener on a free port, unless the test set
        // its own [cluster].
        let cluster = if body.contains("[cluster]") {
            ""
        } else {
            "[cluster]\nlisten = \"127.0.0.1:0\"\n"
        };
        let text = format!(
            "{body}\n[gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [auth]\nsecret = \"{SECRET}\"\n{cluster}"
        );
        std::fs::write(&path, text).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
        command.args(["serve", "--config"]).arg(&path);
        command
    }

    /// Starts `routerd serve --config <path>` with the config as it is and
    /// waits until it serves.
    pub fn serve_file(path: &std::path::Path) -> ServeProcess {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
        command.args(["serve", "--config"]).arg(path);
        ServeProcess::spawn(command)
    }

    /// Runs `command` (a `routerd serve` with its config, maybe wrapped,
    /// e.g. in `ip netns exec`) and waits until it serves.
    pub fn spawn(command: std::process::Command) -> ServeProcess {
        Self::try_spawn(command).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Self::spawn`], or why the node did not come up, with its log.
    pub fn try_spawn(mut command: std::process::Command) -> Result<ServeProcess, String> {
        use std::io::BufRead;
        let mut child = command
            .env_remove("ROUTERD_AUTH_SECRET")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("routerd starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // ROUTERD_TEST_LOGS=1 passes the node's log through, for debugging.
        let echo = std::env::var_os("ROUTERD_TEST_LOGS").is_some();
        let pid = child.id();
        let log = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if echo {
                    eprintln!("[{pid}] {line}");
                }
                // Kept before the addresses are sent: the start returns on
                // them, and a test may then look for this very line.
                let addresses = routerd::serving_addresses(&line);
                {
                    let mut kept = kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    if kept.len() == LOG_LINES_MAX {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
                if let Some(addresses) = addresses {
                    let _ = tx.send(addresses);
                }
            }
        });
        let (gateway, admin) = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addresses) => addresses,
            // Ended, or silent: what it logged says why.
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                let lines = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
                let how = match error {
                    std::sync::mpsc::RecvTimeoutError::Timeout => "logged no addresses in 20 s",
                    std::sync::mpsc::RecvTimeoutError::Disconnected => "ended before it served",
                };
                return Err(format!("routerd {how}; its log:\n{}", lines.join("\n")));
            }
        };
        Ok(ServeProcess {
            child,
            gateway,
            admin,
            log,
        })
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.gateway)
    }

    /// Where the listener `name` (`tls`, `websocket`) is bound, as the
    /// `routerd serving` line says: a test binds it on port 0 and reads the
    /// port here, rather than picking a free one another process may take
    /// before the node binds it. `None` when that listener is off.
    pub fn serving_address(&self, name: &str) -> Option<SocketAddr> {
        let log = self.log.lock().unwrap_or_else(|poison| poison.into_inner());
        let line = log.iter().find(|line| line.contains("routerd serving"))?;
        let rest = line.split(&format!(" {name}=")).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    }

    /// Asserts that a line the process logged holds every one of `words`
    /// (its log in the message otherwise).
    pub fn assert_logged(&self, words: &[&str]) {
        let log = self.log.lock().unwrap_or_else(|poison| poison.into_inner());
        let said = log
            .iter()
            .any(|line| words.iter().all(|word| line.contains(word)));
        assert!(said, "no line with {words:?} in {log:?}");
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child this test owns and has not
        // reaped, so the pid cannot have been reused.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal delivered");
    }

    /// SIGTERM, then waits for the exit status (which must come soon).
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }

    /// Waits for the process to exit on its own (a drain): its status, or
    /// a panic after `limit`.
    pub fn wait_exit_within(mut self, limit: Duration) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "routerd did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGHUP (what a closed terminal sends), then waits for the exit
    /// status.
    pub fn hang_up(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGHUP);
        self.wait_exit()
    }

    /// SIGSTOP: the process stays, frozen, with its sockets open.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after `freeze`.
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill_9(mut self) {
        self.signal(libc::SIGKILL);
        self.wait_exit();
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "routerd did not exit"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `i64` of a RESPONSE body (player.get / player.incr).
pub fn counter_of(reply: &Reply) -> i64 {
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    i64::from_le_bytes(reply.body.as_slice().try_into().expect("an i64 body"))
}

/// Runs `command` (a `routerd serve` that should stop by itself, e.g.
/// refusing to start) until it exits: its status and what it wrote on
/// stderr, or `None` if it still runs after `limit` (it is killed).
pub fn run_to_exit(
    mut command: std::process::Command,
    limit: Duration,
) -> Option<(std::process::ExitStatus, String)> {
    let mut child = command
        .env_remove("ROUTERD_AUTH_SECRET")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("routerd starts");
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut stderr)
                .expect("stderr read");
            return Some((status, stderr));
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills the child after `limit` unless `finished` is set first, so a
/// stuck child fails the test instead of hanging it.
pub fn watchdog(pid: u32, limit: Duration) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let finished = std::sync::Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    std::thread::spawn(move || {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if flag.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: kill(2) with a pid we spawned and have not reaped (the
        // test reaps it only after setting `finished`) has no memory effects.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    });
    finished
}
