//! A throwaway PostgreSQL server for tests and benchmarks: `initdb` into a
//! fresh directory, started on a free loopback port, stopped and removed
//! when dropped. Tests that kill or stop their server use one of their own
//! instead of a shared one. A server can also be made a streaming standby
//! of another (`PgServer::standby_of`), for the tests of synchronous
//! replication.
//!
//! PostgreSQL refuses to run as root, so under root the server runs as the
//! unprivileged `postgres` user. The binaries are found in
//! `ROUTERD_PG_BIN`, then `PATH`, then Debian's `/usr/lib/postgresql/N/bin`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Ports tried before `start` gives up: another process may take a free
/// port between the check and the server's bind.
const START_ATTEMPTS: usize = 5;

/// Seconds `pg_ctl` waits for a start or a stop.
const PG_CTL_WAIT_SECS: &str = "60";

/// The superuser `initdb` creates; loopback connections need no password.
pub const SUPERUSER: &str = "postgres";

/// A running throwaway server.
pub struct PgServer {
    bin: PathBuf,
    root: PathBuf,
    data: PathBuf,
    port: u16,
    /// The uid and gid the server runs as, when this process is root.
    user: Option<(u32, u32)>,
}

/// Why a server could not be had: `Unavailable` means "skip", not "fail".
#[derive(Debug)]
pub enum PgServerError {
    /// No PostgreSQL binaries, or no unprivileged user to run them as.
    Unavailable(String),
    /// The binaries are there but the server did not start.
    Failed(String),
}

impl std::fmt::Display for PgServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgServerError::Unavailable(why) => write!(f, "no PostgreSQL server: {why}"),
            PgServerError::Failed(why) => write!(f, "PostgreSQL server failed: {why}"),
        }
    }
}

impl PgServer {
    /// Creates a data directory and starts a server on a free port.
    pub fn start() -> Result<PgServer, PgServerError> {
        let server = PgServer::unstarted()?;
        server.init()?;
        server.start_on_a_free_port()
    }

    /// A streaming-replication standby of `primary`: a base backup of it
    /// (`pg_basebackup -R`, which writes the connection to the primary and
    /// `standby.signal`), started on a free port of its own. `primary` must
    /// not wait for a synchronous standby yet: the backup's checkpoint is a
    /// commit of its own.
    pub fn standby_of(primary: &PgServer) -> Result<PgServer, PgServerError> {
        let server = PgServer::unstarted()?;
        if !server.bin.join("pg_basebackup").is_file() {
            return Err(PgServerError::Unavailable(
                "pg_basebackup not found beside initdb".to_string(),
            ));
        }
        let output = server
            .command("pg_basebackup")
            .arg("-D")
            .arg(&server.data)
            .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-p"])
            .arg(primary.port.to_string())
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .output();
        check("pg_basebackup", output).map_err(PgServerError::Failed)?;
        server.start_on_a_free_port()
    }

    /// A fresh directory (owned by the server's user) and the binaries,
    /// before any data directory is made in it.
    fn unstarted() -> Result<PgServer, PgServerError> {
        let bin = find_bin().ok_or_else(|| {
            PgServerError::Unavailable(
                "initdb not found (set ROUTERD_PG_BIN, or install Debian's postgresql)".to_string(),
            )
        })?;
        let user = server_user()?;
        let root = unique_dir().map_err(|error| PgServerError::Failed(error.to_string()))?;
        let data = root.join("data");
        let server = PgServer {
            bin,
            root,
            data,
            port: 0,
            user,
        };
        // From here on, dropping the server removes the directory.
        if let Some((uid, gid)) = server.user {
            std::os::unix::fs::chown(&server.root, Some(uid), Some(gid))
                .map_err(|error| PgServerError::Failed(format!("chown: {error}")))?;
        }
        Ok(server)
    }

    fn start_on_a_free_port(mut self) -> Result<PgServer, PgServerError> {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            self.port = free_port().map_err(|error| PgServerError::Failed(error.to_string()))?;
            match self.start_again() {
                Ok(()) => return Ok(self),
                Err(error) => last_error = error,
            }
        }
        Err(PgServerError::Failed(last_error))
    }

    fn init(&self) -> Result<(), PgServerError> {
        // --no-sync: the directory is thrown away; the server itself still
        // fsyncs its commits.
        let output = self
            .command("initdb")
            .arg("-D")
            .arg(&self.data)
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale"])
            .arg("--no-sync")
            .output();
        check("initdb", output).map_err(PgServerError::Failed)
    }

    /// Starts the server (again) on its port and data directory.
    pub fn start_again(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=100",
            self.port,
            self.data.display()
        );
        let output = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-o", &options, "-w", "-t", PG_CTL_WAIT_SECS, "-l"])
            .arg(self.root.join("server.log"))
            .arg("start")
            .output();
        check("pg_ctl start", output)
    }

    /// Stops the server the way a crash would (`-m immediate`: no
    /// checkpoint, every connection cut).
    pub fn stop_immediate(&self) -> Result<(), String> {
        let output = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", PG_CTL_WAIT_SECS, "stop"])
            .output();
        check("pg_ctl stop", output)
    }

    /// Stops this standby's WAL receiver where it stands (SIGSTOP), as a
    /// standby that hangs or lags without end: it receives no more WAL and
    /// acknowledges none, while the rest of the standby answers queries.
    /// It goes on when the guard is dropped.
    pub fn stop_wal_receiver(&self) -> Result<StoppedProcess, String> {
        let pid = self.psql("postgres", "SELECT pid FROM pg_stat_wal_receiver")?;
        let pid: i32 = pid
            .parse()
            .map_err(|_| format!("no WAL receiver: {pid:?}"))?;
        // SAFETY: kill has no memory preconditions; the pid is the
        // server's own WAL receiver, named by the server a moment ago.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(format!("kill: {}", std::io::Error::last_os_error()));
        }
        Ok(StoppedProcess { pid })
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `database` on this server, as the superuser.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgresql://{SUPERUSER}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// The postmaster's pid, from its pid file.
    pub fn postmaster_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Runs `sql` with psql in `database`; returns its unaligned output.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, String> {
        let output = self.psql_command(database).args(["-c", sql]).output();
        let output = output.map_err(|error| format!("psql: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "psql: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// A psql command on `database` that stops at the first error, for a
    /// caller that feeds it statements on stdin.
    pub fn psql_command(&self, database: &str) -> Command {
        let mut command = Command::new(self.bin.join("psql"));
        command
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-d", database])
            .arg("-p")
            .arg(self.port.to_string());
        command
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command.stdin(Stdio::null());
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        command
    }
}

/// A server process stopped by SIGSTOP; dropping the guard continues it
/// (SIGCONT), on a test's failure too, so that the server can be stopped.
pub struct StoppedProcess {
    pid: i32,
}

impl StoppedProcess {
    /// Lets the process go on.
    pub fn resume(self) {}
}

impl Drop for StoppedProcess {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Immediate: the data is thrown away, a checkpoint would be wasted.
        drop(self.stop_immediate());
        drop(std::fs::remove_dir_all(&self.root));
    }
}

fn check(what: &str, output: std::io::Result<Output>) -> Result<(), String> {
    let output = output.map_err(|error| format!("{what}: {error}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

fn has_bin(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "psql"]
        .iter()
        .all(|program| dir.join(program).is_file())
}

fn find_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ROUTERD_PG_BIN") {
        return Some(PathBuf::from(dir)).filter(|dir| has_bin(dir));
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(dir) = std::env::split_paths(&path).find(|dir| has_bin(dir)) {
            return Some(dir);
        }
    }
    // Debian installs the server outside PATH, one directory a version.
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_bin(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

/// The user to run the server as: none when this process is not root;
/// `postgres` from /etc/passwd when it is.
fn server_user() -> Result<Option<(u32, u32)>, PgServerError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [name, _, uid, gid, ..] if *name == SUPERUSER => {
                    Some((uid.parse().ok()?, gid.parse().ok()?))
                }
                _ => None,
            }
        })
        .map(Some)
        .ok_or_else(|| {
            PgServerError::Unavailable(
                "running as root and there is no 'postgres' user to run the server as".to_string(),
            )
        })
}

fn unique_dir() -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "routerd-pg-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
