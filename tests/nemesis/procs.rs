//! The real processes of a run: `routerd serve` nodes (in a namespace of
//! their own when there are namespaces), the store (one SQLite file, or a
//! throwaway PostgreSQL server reached through a proxy on the bridge), and
//! the busy loop that starves a CPU. Each is killed or thawed on drop, so a
//! panicking run leaves nothing behind.

use std::collections::VecDeque;
use std::io::BufRead;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use routerd::testing::postgres_server::{PgServer, PgServerError};

use super::support::netns::Net;
use super::support::SECRET;

/// Lines of a node's stderr kept for the report (its last words).
const STDERR_TAIL_MAX: usize = 40;

/// How long a start may take: a restart with a live-looking row waits
/// `down_after_ms` before it takes the id, on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections the store's proxy carries at once (every node's pool, the
/// rejoins of fenced nodes, and connections a cut left hanging).
const PROXY_CONNECTIONS_MAX: usize = 256;

/// Membership timers of the run (the config refuses down_after <
/// fence_after + 2 x heartbeat).
pub const HEARTBEAT_MS: u64 = 250;
pub const FENCE_AFTER_MS: u64 = 1000;
pub const DOWN_AFTER_MS: u64 = 2000;

/// The gateway's request timeout: a request unanswered this long is
/// answered TIMEOUT (uncertain).
pub const REQUEST_TIMEOUT_MS: u64 = 3000;

/// `object_save_interval_ms` with `interval` persistence: several saves
/// happen during a run, and many increments are in memory only at any time.
pub const SAVE_INTERVAL_MS: u64 = 3000;

const CLUSTER_SECRET: &str = "the nemesis cluster's secret";

fn signal(pid: u32, signal: i32) -> bool {
    // SAFETY: kill(2) has no memory effects; the pids are of processes this
    // test started and has not reaped.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// One `routerd serve` process.
pub struct NodeProc {
    pub node_id: u64,
    /// The namespace host it runs in (0: loopback, no namespaces).
    pub host: usize,
    /// Which start of the run this is, for the report.
    pub serial: u32,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    child: Child,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Set when the process is gone (or about to be): its poller stops.
    pub retired: Arc<AtomicBool>,
    exit: Option<ExitStatus>,
}

impl NodeProc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn freeze(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    pub fn thaw(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// The exit status once it exited on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// SIGKILL (works on a frozen process too) and reap.
    pub fn kill_9(&mut self) {
        self.retired.store(true, Ordering::Release);
        if self.exited().is_none() {
            signal(self.pid(), libc::SIGKILL);
            self.exit = self.child.wait().ok();
        }
    }

    /// The last lines it wrote on stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail.lock().unwrap().iter().cloned().collect()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// The store every node of a run shares.
pub enum Store {
    Sqlite(PathBuf),
    Postgres(Box<Postgres>),
}

/// A throwaway PostgreSQL server of the run's own, which the nemesis may
/// stop, freeze and restart.
pub struct Postgres {
    pub server: PgServer,
    /// The address nodes use: the proxy on the bridge, or the server
    /// itself on loopback.
    pub address: SocketAddr,
    proxy: Option<Proxy>,
    frozen: Mutex<Vec<u32>>,
}

const DATABASE: &str = "nemesis";

impl Postgres {
    /// A server with an empty database, or `Ok(None)` when PostgreSQL is
    /// not installed (the caller says it skipped).
    pub fn start(net: Option<&Net>) -> Result<Option<Postgres>, String> {
        let server = match PgServer::start() {
            Ok(server) => server,
            Err(PgServerError::Unavailable(why)) => {
                println!("skipped: {why}");
                return Ok(None);
            }
            Err(error) => return Err(error.to_string()),
        };
        server.psql("postgres", &format!("CREATE DATABASE {DATABASE}"))?;
        let direct: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
        let (address, proxy) = match net {
            // The server listens on loopback only; nodes in namespaces
            // reach it through a proxy on the store's own bridge address.
            Some(net) => {
                let proxy = Proxy::start(&net.store_address(), direct)?;
                (proxy.address, Some(proxy))
            }
            None => (direct, None),
        };
        Ok(Some(Postgres {
            server,
            address,
            proxy,
            frozen: Mutex::new(Vec::new()),
        }))
    }

    pub fn url(&self) -> String {
        format!(
            "postgresql://postgres@{}:{}/{DATABASE}",
            self.address.ip(),
            self.address.port()
        )
    }

    /// The postmaster and every backend it forked.
    fn pids(&self) -> Vec<u32> {
        let Some(postmaster) = self.server.postmaster_pid() else {
            return Vec::new();
        };
        let mut pids = vec![postmaster as u32];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The parent pid is the second field after the parenthesized
            // command name (which may hold spaces).
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|field| field.parse::<i32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// SIGSTOP to the postmaster and its backends.
    pub fn freeze(&self) {
        let pids = self.pids();
        for &pid in &pids {
            signal(pid, libc::SIGSTOP);
        }
        *self.frozen.lock().unwrap() = pids;
    }

    pub fn thaw(&self) {
        for pid in self.frozen.lock().unwrap().drain(..) {
            signal(pid, libc::SIGCONT);
        }
    }

    /// True while the postmaster runs.
    pub fn running(&self) -> bool {
        self.server
            .postmaster_pid()
            .is_some_and(|pid| signal(pid as u32, 0))
    }

    pub fn stop(&self) -> Result<(), String> {
        self.server.stop_immediate()
    }

    pub fn restart(&self) -> Result<(), String> {
        self.server.start_again()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // A frozen server would not stop: the server's own drop waits for it.
        self.thaw();
        if let Some(proxy) = &self.proxy {
            proxy.stop.store(true, Ordering::Release);
        }
    }
}

/// A TCP proxy on the bridge to the loopback-only PostgreSQL server: two
/// copying threads a connection, at most `PROXY_CONNECTIONS_MAX` at once.
struct Proxy {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(host: &str, to: SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind((host, 0)).map_err(|error| format!("proxy: {error}"))?;
        let address = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let open = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            while !flag.load(Ordering::Acquire) {
                let Ok((inbound, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                if open.load(Ordering::Acquire) >= PROXY_CONNECTIONS_MAX {
                    println!("store proxy: {PROXY_CONNECTIONS_MAX} connections open, one refused");
                    continue;
                }
                let Ok(outbound) = TcpStream::connect_timeout(&to, Duration::from_secs(1)) else {
                    // The server is stopped: the node sees its connection
                    // closed, as it would without the proxy.
                    continue;
                };
                inbound.set_nonblocking(false).unwrap();
                open.fetch_add(1, Ordering::AcqRel);
                let open = open.clone();
                std::thread::spawn(move || {
                    splice(inbound, outbound);
                    open.fetch_sub(1, Ordering::AcqRel);
                });
            }
        });
        Ok(Proxy { address, stop })
    }
}

/// Copies both ways until either side ends, then closes both.
fn splice(a: TcpStream, b: TcpStream) {
    let (mut a_read, mut b_write) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a_read, &mut b_write);
        let _ = b_write.shutdown(std::net::Shutdown::Both);
    });
    let (mut b_read, mut a_write) = (b, a);
    let _ = std::io::copy(&mut b_read, &mut a_write);
    let _ = a_write.shutdown(std::net::Shutdown::Both);
    let _ = back.join();
}

/// What every node of a run shares.
pub struct NodeSpec {
    pub dir: PathBuf,
    pub persist: String,
    pub store_toml: String,
    pub cpus: usize,
}

impl NodeSpec {
    pub fn new(dir: &Path, persist: &str, store: &Store) -> NodeSpec {
        let store_toml = match store {
            Store::Sqlite(path) => format!(
                "[store]\nbackend = \"sqlite\"\npath = {:?}\nsynchronous = \"normal\"\n",
                path.display().to_string()
            ),
            Store::Postgres(pg) => format!(
                "[store]\nbackend = \"postgres\"\nurl = {:?}\nrequest_timeout_ms = 2000\n",
                pg.url()
            ),
        };
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        NodeSpec {
            dir: dir.to_path_buf(),
            persist: persist.to_string(),
            store_toml,
            cpus,
        }
    }

    /// The CPU node `node_id` is pinned to (the starvation fault's target).
    pub fn cpu_of(&self, node_id: u64) -> usize {
        (node_id as usize - 1) % self.cpus
    }

    fn config(&self, node_id: u64, serial: u32, host: &str) -> String {
        let data = self.dir.join(format!("data-{node_id}-{serial}"));
        let save = if self.persist == "interval" {
            format!("[router]\nobject_save_interval_ms = {SAVE_INTERVAL_MS}\n")
        } else {
            String::new()
        };
        format!(
            "[node]\nid = {node_id}\ndata_dir = {data:?}\n\
             [cores]\ncpus = [{cpu}]\nrecv_buffers = 64\nshutdown_deadline_ms = 3000\n\
             {store}\
             [cluster]\nlisten = \"{host}:0\"\nsecret = {CLUSTER_SECRET:?}\n\
             heartbeat_interval_ms = {HEARTBEAT_MS}\nfence_after_ms = {FENCE_AFTER_MS}\n\
             down_after_ms = {DOWN_AFTER_MS}\n\
             [gateway]\nlisten = \"{host}:0\"\nrequest_timeout_ms = {REQUEST_TIMEOUT_MS}\n\
             [admin]\nlisten = \"{host}:0\"\ntoken = {admin_token:?}\n\
             [auth]\nsecret = {SECRET:?}\nduplicate_login = \"multi\"\n\
             {save}\
             [services.player]\npersist = {persist:?}\n",
            data = data.display().to_string(),
            // An admin endpoint off loopback needs one to start.
            admin_token = "the nemesis test's admin token",
            cpu = self.cpu_of(node_id),
            store = self.store_toml,
            persist = self.persist,
        )
    }

    /// Starts node `node_id` on `host` (of `net`, or loopback) and waits
    /// until it serves; `Err` carries its exit and last words when it
    /// stopped first.
    pub fn start(
        &self,
        net: Option<&Net>,
        host: usize,
        node_id: u64,
        serial: u32,
    ) -> Result<NodeProc, String> {
        let address = net.map_or("127.0.0.1".to_string(), |net| net.host(host));
        let path = self.dir.join(format!("node-{node_id}-{serial}.toml"));
        std::fs::write(&path, self.config(node_id, serial, &address)).unwrap();
        let mut command = match net {
            Some(net) => net.command_in(host, env!("CARGO_BIN_EXE_routerd")),
            None => Command::new(env!("CARGO_BIN_EXE_routerd")),
        };
        command.args(["serve", "--config"]).arg(&path);
        let mut child = command
            .env_remove("ROUTERD_AUTH_SECRET")
            .env_remove("ROUTERD_CLUSTER_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("spawn routerd: {error}"))?;
        let stderr = child.stderr.take().unwrap();
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = tail.clone();
        let echo = std::env::var_os("ROUTERD_TEST_LOGS").is_some();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if echo {
                    eprintln!("[node {node_id}#{serial}] {line}");
                }
                if let Some(addresses) = routerd::serving_addresses(&line) {
                    let _ = tx.send(addresses);
                }
                let mut lines = lines.lock().unwrap();
                if lines.len() == STDERR_TAIL_MAX {
                    lines.pop_front();
                }
                lines.push_back(line);
            }
        });
        let mut node = NodeProc {
            node_id,
            host,
            serial,
            gateway: "0.0.0.0:0".parse().unwrap(),
            admin: "0.0.0.0:0".parse().unwrap(),
            child,
            stderr_tail: tail,
            retired: Arc::new(AtomicBool::new(false)),
            exit: None,
        };
        let started = Instant::now();
        loop {
            if let Ok((gateway, admin)) = rx.recv_timeout(Duration::from_millis(50)) {
                node.gateway = gateway;
                node.admin = admin;
                return Ok(node);
            }
            if let Some(status) = node.exited() {
                // Let the reader thread catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return Err(format!(
                    "node {node_id} (start {serial}) exited with {status} before serving:\n  {}",
                    node.stderr_tail().join("\n  ")
                ));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "node {node_id} (start {serial}) not serving after {START_TIMEOUT:?}:\n  {}",
                    node.stderr_tail().join("\n  ")
                ));
            }
        }
    }
}

/// A busy loop on one CPU at nice -20, killed on drop.
pub struct Starver {
    child: Child,
}

impl Starver {
    pub fn start(cpu: usize) -> Result<Starver, String> {
        let mut command = Command::new("taskset");
        command
            .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setpriority is async-signal-safe and touches no memory
        // of the parent; it runs in the forked child before exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setpriority(libc::PRIO_PROCESS, 0, -20) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|error| format!("busy loop: {error}"))?;
        Ok(Starver { child })
    }
}

impl Drop for Starver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
