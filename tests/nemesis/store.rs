//! The store of a run and the ways it misbehaves: one SQLite file (on a
//! small filesystem of the run's own, which the nemesis fills up), or a
//! throwaway PostgreSQL server that the nemesis stops and freezes, reached
//! through a proxy of the test's own that resets and delays the nodes'
//! connections on demand.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use routerd::testing::postgres_server::{PgServer, PgServerError};

use super::support::netns::Net;

/// Connections the store's proxy carries at once (every node's pool, the
/// rejoins of fenced nodes, and connections a cut left hanging).
const PROXY_CONNECTIONS_MAX: usize = 256;

/// How often a proxied connection looks for a reset asked of it.
const PROXY_TICK: Duration = Duration::from_millis(20);

/// The size of the filesystem SQLite's file lives on: room for the run's
/// database and its WAL, little enough to fill in a moment.
const DISK_MB: u64 = 64;

fn signal(pid: u32, signal: i32) -> bool {
    // SAFETY: kill(2) has no memory effects; the pids are of processes this
    // test started.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// The store every node of a run shares.
pub enum Store {
    Sqlite(Sqlite),
    Postgres(Box<Postgres>),
}

/// One SQLite file, on a disk of its own when the run may mount one.
pub struct Sqlite {
    pub path: PathBuf,
    pub disk: Option<SmallDisk>,
}

impl Sqlite {
    /// The file under `dir`: on a small tmpfs mounted there when this
    /// process may mount (root), else on `dir`'s own filesystem (the run
    /// says the disk faults are skipped).
    pub fn open(dir: &Path) -> Sqlite {
        let mount = dir.join("disk");
        match SmallDisk::mount(&mount) {
            Ok(disk) => Sqlite {
                path: mount.join("cluster.db"),
                disk: Some(disk),
            },
            Err(why) => {
                println!("disk faults skipped: no small filesystem for SQLite's file ({why})");
                Sqlite {
                    path: dir.join("cluster.db"),
                    disk: None,
                }
            }
        }
    }
}

/// A tmpfs of `DISK_MB` mounted by the run, unmounted on drop; `fill`
/// takes every free byte (writes then fail with ENOSPC) and `empty`
/// gives them back.
pub struct SmallDisk {
    mount: PathBuf,
    filler: PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path) -> Result<SmallDisk, String> {
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            return Err("not root".into());
        }
        std::fs::create_dir_all(at).map_err(|error| error.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={DISK_MB}m"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|error| format!("mount: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            mount: at.to_path_buf(),
            filler: at.join("filler"),
        })
    }

    /// Writes the filler until the filesystem is full: the bytes it got.
    pub fn fill(&self) -> Result<u64, String> {
        let mut file = std::fs::File::create(&self.filler).map_err(|e| format!("filler: {e}"))?;
        let chunk = vec![0u8; 1 << 16];
        let mut written = 0u64;
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(error) => return Err(format!("filler: {error}")),
            }
        }
        // The last partial pages too: a byte at a time is too slow, a
        // small chunk is enough.
        let small = [0u8; 512];
        while let Ok(n) = file.write(&small) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        Ok(written)
    }

    pub fn empty(&self) {
        let _ = std::fs::remove_file(&self.filler);
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        self.empty();
        // Lazy: a node still holding the file must not keep the mount.
        let _ = Command::new("umount").arg("-l").arg(&self.mount).output();
    }
}

/// A throwaway PostgreSQL server of the run's own, which the nemesis may
/// stop, freeze and restart, and whose connections its proxy resets and
/// delays.
pub struct Postgres {
    pub server: PgServer,
    /// The address nodes use: the proxy's.
    pub address: SocketAddr,
    pub proxy: Proxy,
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
        // The server listens on loopback only; nodes in namespaces reach it
        // through the proxy on the store's own bridge address, nodes on
        // loopback through the proxy on loopback.
        let listen = net.map_or("127.0.0.1".to_string(), |net| net.store_address());
        let proxy = Proxy::start(&listen, direct)?;
        Ok(Some(Postgres {
            server,
            address: proxy.address,
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

    /// Every process the postmaster forked.
    fn children(&self, postmaster: i32) -> Vec<u32> {
        let mut pids = Vec::new();
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

    /// SIGSTOP to the postmaster first (it forks no backend while
    /// stopped), then to every process it forked.
    pub fn freeze(&self) {
        let Some(postmaster) = self.server.postmaster_pid() else {
            return;
        };
        let mut frozen = self.frozen.lock().unwrap();
        signal(postmaster as u32, libc::SIGSTOP);
        frozen.push(postmaster as u32);
        for pid in self.children(postmaster) {
            signal(pid, libc::SIGSTOP);
            frozen.push(pid);
        }
    }

    pub fn thaw(&self) {
        // Backends first, the postmaster last, as they were stopped.
        for pid in self.frozen.lock().unwrap().drain(..).rev() {
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
        self.proxy.control.stop.store(true, Ordering::Release);
    }
}

/// What the nemesis asks of the proxy's connections.
#[derive(Default)]
pub struct ProxyControl {
    stop: AtomicBool,
    /// Resets asked: the connections of this peer (every peer: `None`)
    /// open at that time are reset.
    resets: Mutex<Vec<(Option<IpAddr>, Instant)>>,
    /// Delays in force: every chunk a peer sends is held this long.
    delays: Mutex<HashMap<Option<IpAddr>, u64>>,
}

impl ProxyControl {
    fn reset_due(&self, peer: IpAddr, opened: Instant) -> bool {
        self.resets
            .lock()
            .unwrap()
            .iter()
            .any(|&(who, at)| at > opened && who.is_none_or(|who| who == peer))
    }

    fn delay(&self, peer: IpAddr) -> u64 {
        let delays = self.delays.lock().unwrap();
        delays
            .get(&Some(peer))
            .copied()
            .max(delays.get(&None).copied())
            .unwrap_or(0)
    }
}

/// A TCP proxy to the loopback-only PostgreSQL server: two copying threads
/// a connection, at most `PROXY_CONNECTIONS_MAX` at once.
pub struct Proxy {
    address: SocketAddr,
    control: Arc<ProxyControl>,
}

impl Proxy {
    fn start(host: &str, to: SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind((host, 0)).map_err(|error| format!("proxy: {error}"))?;
        let address = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let control = Arc::new(ProxyControl::default());
        let shared = control.clone();
        let open = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            while !shared.stop.load(Ordering::Acquire) {
                let Ok((inbound, peer)) = listener.accept() else {
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
                let (open, control) = (open.clone(), shared.clone());
                std::thread::spawn(move || {
                    splice(inbound, outbound, peer.ip(), &control);
                    open.fetch_sub(1, Ordering::AcqRel);
                });
            }
        });
        Ok(Proxy { address, control })
    }

    /// Resets (RST) every connection `peer` (every peer: `None`) has open
    /// now; the next ones it opens are carried as before.
    pub fn reset(&self, peer: Option<IpAddr>) {
        self.control
            .resets
            .lock()
            .unwrap()
            .push((peer, Instant::now()));
    }

    /// Holds every chunk `peer` (every peer: `None`) sends for `ms` (0:
    /// carried at once again).
    pub fn delay(&self, peer: Option<IpAddr>, ms: u64) {
        let mut delays = self.control.delays.lock().unwrap();
        if ms == 0 {
            delays.remove(&peer);
        } else {
            delays.insert(peer, ms);
        }
    }

    /// Every delay lifted.
    pub fn heal(&self) {
        self.control.delays.lock().unwrap().clear();
    }
}

/// Closes a socket with a reset rather than a FIN, once its last
/// descriptor is closed.
fn linger_zero(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the descriptor is open (borrowed from `stream`); the option
    // value is a valid `linger` of the size given.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// How a copying thread ended.
#[derive(PartialEq)]
enum Ended {
    Closed,
    Reset,
}

/// Copies `from` to `to` until either ends or a reset of `peer`'s
/// connections is asked; `delayed`: the node's direction, which delays
/// apply to.
fn pump(
    mut from: &TcpStream,
    mut to: &TcpStream,
    peer: IpAddr,
    opened: Instant,
    delayed: bool,
    control: &ProxyControl,
) -> Ended {
    let mut buffer = vec![0u8; 1 << 16];
    if from.set_read_timeout(Some(PROXY_TICK)).is_err() {
        return Ended::Closed;
    }
    loop {
        if control.reset_due(peer, opened) {
            return Ended::Reset;
        }
        match from.read(&mut buffer) {
            Ok(0) => return Ended::Closed,
            Ok(n) => {
                let hold = if delayed { control.delay(peer) } else { 0 };
                if hold > 0 {
                    std::thread::sleep(Duration::from_millis(hold));
                }
                if to.write_all(&buffer[..n]).is_err() {
                    return Ended::Closed;
                }
            }
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Ended::Closed,
        }
    }
}

/// Copies both ways until either side ends (then closes both) or a reset
/// is asked (then resets both).
fn splice(node: TcpStream, server: TcpStream, peer: IpAddr, control: &Arc<ProxyControl>) {
    let opened = Instant::now();
    let (node_read, server_write) = (node.try_clone().unwrap(), server.try_clone().unwrap());
    let shared = control.clone();
    let back = std::thread::spawn(move || {
        let ended = pump(&node_read, &server_write, peer, opened, true, &shared);
        if ended == Ended::Closed {
            let _ = server_write.shutdown(std::net::Shutdown::Both);
        }
        ended
    });
    let forth = pump(&server, &node, peer, opened, false, control);
    if forth == Ended::Closed {
        let _ = node.shutdown(std::net::Shutdown::Both);
    }
    let back = back.join().unwrap_or(Ended::Closed);
    if forth == Ended::Reset || back == Ended::Reset {
        // The last descriptors close with a reset: the node sees
        // ECONNRESET, the server a connection gone mid-transaction.
        linger_zero(&node);
        linger_zero(&server);
    }
}
