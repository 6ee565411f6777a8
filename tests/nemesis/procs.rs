//! The node processes of a run: `routerd serve` nodes (in a namespace of
//! their own when there are namespaces) with the timers drawn for the run,
//! and the busy loop that starves a CPU. Each is killed on drop, so a
//! panicking run leaves nothing behind.

use std::collections::VecDeque;
use std::io::BufRead;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::store::Store;
use super::support::netns::Net;
use super::support::SECRET;

/// Lines of a node's stderr kept for the report (its last words).
const STDERR_TAIL_MAX: usize = 40;

/// How long a start may take: a restart with a live-looking row waits
/// `down_after_ms` before it takes the id, on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Membership timers of the run (the config refuses down_after <
/// fence_after + 2 x heartbeat).
pub const HEARTBEAT_MS: u64 = 250;
pub const FENCE_AFTER_MS: u64 = 1000;
pub const DOWN_AFTER_MS: u64 = 2000;

/// How long a drain may move objects before the node gives up and exits
/// (a drain during a fault should end, not hold the run for the default
/// minute).
pub const DRAIN_TIMEOUT_MS: u64 = 10_000;

/// The gateway's request timeout: a request unanswered this long is
/// answered TIMEOUT (uncertain).
pub const REQUEST_TIMEOUT_MS: u64 = 3000;

/// `router.object_save_interval_ms` values a run draws from (with
/// `interval` persistence), each with whether a run draws it by default
/// (`NEMESIS_TIMERS=all`: every one): from a save every few heartbeats, so
/// saves and their retries meet every fault, to one every few faults. The
/// short ones still find known bugs (a stalled store's Indeterminate saves
/// dropping the owner's copy) and are off by default until they are fixed.
const SAVE_INTERVALS_MS: &[(u64, bool)] =
    &[(200, false), (500, false), (1000, false), (3000, true)];

/// `store.request_timeout_ms` values a run draws from, as above: below a
/// heartbeat (store calls go Indeterminate during any stall), around the
/// fencing timers, and the default.
const STORE_TIMEOUTS_MS: &[(u64, bool)] = &[
    (300, false),
    (600, false),
    (1500, false),
    (2000, true),
    (5000, true),
];

/// The timers of one run, drawn from its seed (or set by
/// `NEMESIS_SAVE_MS` and `NEMESIS_STORE_TIMEOUT_MS`), so that saves,
/// retries, Indeterminate outcomes, degradation and lease ends run during
/// the faults.
#[derive(Clone, Copy, Debug)]
pub struct Timers {
    pub save_interval_ms: u64,
    pub store_timeout_ms: u64,
    /// A node whose operator set a lease twice the others'
    /// (`fence_after_ms`, with the shortest `down_after_ms` its own config
    /// allows): the others must wait it out before they claim what it
    /// owns. Drawn with `NEMESIS_TIMERS=all` (or `NEMESIS_LONG_LEASE=N`).
    pub long_lease_node: Option<u64>,
}

impl Timers {
    /// The timers of the standalone tests: saves now and then, and a
    /// store timeout well past a heartbeat.
    pub const STEADY: Timers = Timers {
        save_interval_ms: 3000,
        store_timeout_ms: 2000,
        long_lease_node: None,
    };

    /// The `fence_after_ms` and `down_after_ms` of node `node_id`.
    pub fn lease_of(&self, node_id: u64) -> (u64, u64) {
        if self.long_lease_node == Some(node_id) {
            let fence = 2 * FENCE_AFTER_MS;
            (fence, fence + 2 * HEARTBEAT_MS)
        } else {
            (FENCE_AFTER_MS, DOWN_AFTER_MS)
        }
    }

    /// Draws from the values on by default, or from all of them when
    /// `NEMESIS_TIMERS=all`.
    pub fn draw(seed: u64) -> Timers {
        let every = match std::env::var("NEMESIS_TIMERS") {
            Ok(text) if text == "all" => true,
            Ok(text) if text == "default" => false,
            Ok(text) => panic!("NEMESIS_TIMERS is all or default, not {text:?}"),
            Err(_) => false,
        };
        // A stream of its own: the schedule drawn from the seed stays what
        // it was whatever the timers.
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x7469_6d65_7273);
        let mut pick = |values: &[(u64, bool)]| {
            let drawn: Vec<u64> = values
                .iter()
                .filter(|(_, by_default)| every || *by_default)
                .map(|(value, _)| *value)
                .collect();
            drawn[rng.random_range(0..drawn.len())]
        };
        let (save, timeout) = (pick(SAVE_INTERVALS_MS), pick(STORE_TIMEOUTS_MS));
        // Drawn after the others, so a seed keeps the values it drew before.
        let long_lease = (every && rng.random_range(0..2) == 0).then(|| rng.random_range(1..=3));
        let set = |name: &str, drawn: u64| match std::env::var(name) {
            Ok(text) => text
                .parse()
                .unwrap_or_else(|_| panic!("{name}={text:?} is not a number of ms")),
            Err(_) => drawn,
        };
        let long_lease_node = match std::env::var("NEMESIS_LONG_LEASE") {
            Ok(text) if text == "none" => None,
            Ok(text) => Some(
                text.parse()
                    .unwrap_or_else(|_| panic!("NEMESIS_LONG_LEASE={text:?} is a node id or none")),
            ),
            Err(_) => long_lease,
        };
        Timers {
            save_interval_ms: set("NEMESIS_SAVE_MS", save),
            store_timeout_ms: set("NEMESIS_STORE_TIMEOUT_MS", timeout),
            long_lease_node,
        }
    }
}

impl std::fmt::Display for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "object_save_interval_ms {}, store request_timeout_ms {}, heartbeat {HEARTBEAT_MS} ms, \
             fence_after {FENCE_AFTER_MS} ms, down_after {DOWN_AFTER_MS} ms",
            self.save_interval_ms, self.store_timeout_ms
        )?;
        match self.long_lease_node {
            Some(node) => {
                let (fence, down) = self.lease_of(node);
                write!(
                    f,
                    "; node {node}: fence_after {fence} ms, down_after {down} ms"
                )
            }
            None => Ok(()),
        }
    }
}

const CLUSTER_SECRET: &str = "the nemesis cluster's secret";

/// The admin token of every node (an admin endpoint off loopback needs one
/// to start); the nemesis's operator calls send it.
pub const ADMIN_TOKEN: &str = "the nemesis test's admin token";

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
    /// Its `cores.cpus` count.
    pub cores: usize,
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

/// What every node of a run shares.
pub struct NodeSpec {
    pub dir: PathBuf,
    pub persist: String,
    pub store_toml: String,
    pub timers: Timers,
    pub cpus: usize,
}

impl NodeSpec {
    pub fn new(dir: &Path, persist: &str, store: &Store, timers: Timers) -> NodeSpec {
        let timeout = timers.store_timeout_ms;
        let store_toml = match store {
            Store::Sqlite(sqlite) => format!(
                "[store]\nbackend = \"sqlite\"\npath = {:?}\nsynchronous = \"normal\"\n\
                 request_timeout_ms = {timeout}\n",
                sqlite.path.display().to_string()
            ),
            Store::Postgres(pg) => format!(
                "[store]\nbackend = \"postgres\"\nurl = {:?}\nrequest_timeout_ms = {timeout}\n",
                pg.url()
            ),
        };
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        NodeSpec {
            dir: dir.to_path_buf(),
            persist: persist.to_string(),
            store_toml,
            timers,
            cpus,
        }
    }

    /// The CPU node `node_id`'s first core is pinned to (the starvation
    /// fault's target).
    pub fn cpu_of(&self, node_id: u64) -> usize {
        (node_id as usize - 1) % self.cpus
    }

    /// The CPUs of node `node_id` run with `cores` cores: its own CPU
    /// first, then the next ones.
    fn cpus_of(&self, node_id: u64, cores: usize) -> String {
        let first = self.cpu_of(node_id);
        let cpus: Vec<String> = (0..cores)
            .map(|i| ((first + i) % self.cpus).to_string())
            .collect();
        cpus.join(", ")
    }

    fn config(&self, node_id: u64, serial: u32, host: &str, cores: usize) -> String {
        let data = self.dir.join(format!("data-{node_id}-{serial}"));
        let (fence, down) = self.timers.lease_of(node_id);
        let save = if self.persist == "interval" {
            format!(
                "[router]\nobject_save_interval_ms = {}\n",
                self.timers.save_interval_ms
            )
        } else {
            String::new()
        };
        format!(
            "[node]\nid = {node_id}\ndata_dir = {data:?}\n\
             [cores]\ncpus = [{cpus}]\nrecv_buffers = 64\nshutdown_deadline_ms = 3000\n\
             {store}\
             [cluster]\nlisten = \"{host}:0\"\nsecret = {CLUSTER_SECRET:?}\n\
             heartbeat_interval_ms = {HEARTBEAT_MS}\nfence_after_ms = {fence}\n\
             down_after_ms = {down}\ndrain_timeout_ms = {DRAIN_TIMEOUT_MS}\n\
             [gateway]\nlisten = \"{host}:0\"\nrequest_timeout_ms = {REQUEST_TIMEOUT_MS}\n\
             [admin]\nlisten = \"{host}:0\"\ntoken = {ADMIN_TOKEN:?}\n\
             [auth]\nsecret = {SECRET:?}\nduplicate_login = \"multi\"\n\
             {save}\
             [services.player]\npersist = {persist:?}\n",
            data = data.display().to_string(),
            cpus = self.cpus_of(node_id, cores),
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
        cores: usize,
    ) -> Result<NodeProc, String> {
        let address = net.map_or("127.0.0.1".to_string(), |net| net.host(host));
        let path = self.dir.join(format!("node-{node_id}-{serial}.toml"));
        std::fs::write(&path, self.config(node_id, serial, &address, cores)).unwrap();
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
            cores,
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
