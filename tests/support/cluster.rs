//! A cluster of real `routerd serve` processes on loopback, sharing one
//! SQLite file (the embedded store's local-cluster mode), with fast
//! membership timers so that failures are detected in about a second.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Client, ServeProcess};

/// Membership timers of the test clusters (the rule: down_after >=
/// fence_after + 2 x heartbeat).
pub const HEARTBEAT_MS: u64 = 100;
pub const FENCE_AFTER_MS: u64 = 400;
pub const DOWN_AFTER_MS: u64 = 800;

/// Where the nodes of one test keep their configs and their shared store.
pub struct LocalCluster {
    /// The PostgreSQL server of a cluster on PostgreSQL (dropped last).
    postgres: Option<routerd::testing::postgres_server::PgServer>,
    dir: tempfile::TempDir,
    starts: std::cell::Cell<u32>,
    /// Extra TOML for every node (sections after the defaults).
    pub extra: String,
    /// The `[store]` section; default: the shared SQLite file.
    pub store: Option<String>,
    /// Extra `[cluster]` keys for every node.
    pub cluster_extra: String,
    /// The players' persistence policy (`[services.player] persist`).
    pub persist: &'static str,
    /// Cores of every node (`[cores] count`).
    pub cores: usize,
}

/// The admin token of nodes whose admin endpoint listens off loopback
/// (`listeners_on`).
pub const ADMIN_TOKEN: &str = "the test cluster's admin token";

/// The TOML of the client-facing listeners on `host` (any free port), the
/// test auth secret and, since an admin endpoint off loopback needs one,
/// the test admin token: what `ServeProcess::start` adds on loopback.
pub fn listeners_on(host: &str) -> String {
    format!(
        "[gateway]\nlisten = \"{host}:0\"\n[admin]\nlisten = \"{host}:0\"\n\
         token = {ADMIN_TOKEN:?}\n[auth]\nsecret = \"{}\"\n",
        super::SECRET
    )
}

impl Default for LocalCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalCluster {
    pub fn new() -> LocalCluster {
        LocalCluster {
            postgres: None,
            dir: tempfile::tempdir().unwrap(),
            starts: std::cell::Cell::new(0),
            extra: String::new(),
            store: None,
            cluster_extra: String::new(),
            persist: "on_write",
            cores: 2,
        }
    }

    /// A cluster whose nodes share a database on a throwaway PostgreSQL
    /// server of its own, or `None` (and a line saying so) when PostgreSQL
    /// is not installed.
    pub fn postgres() -> Option<LocalCluster> {
        use routerd::testing::postgres_server::{PgServer, PgServerError};
        let server = match PgServer::start() {
            Ok(server) => server,
            Err(PgServerError::Unavailable(why)) => {
                println!("skipped: {why}");
                return None;
            }
            Err(error) => panic!("{error}"),
        };
        server
            .psql("postgres", "CREATE DATABASE cluster")
            .expect("database created");
        let mut cluster = LocalCluster::new();
        cluster.store = Some(format!(
            "[store]\nbackend = \"postgres\"\nurl = {:?}\n",
            server.url("cluster")
        ));
        cluster.postgres = Some(server);
        Some(cluster)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("cluster.db")
    }

    /// The config of node `id`, whose cluster secret is `secret`.
    pub fn body(&self, id: u64, secret: &str) -> String {
        self.body_on(id, secret, "127.0.0.1")
    }

    /// The config of node `id` whose links listen on `host`.
    pub fn body_on(&self, id: u64, secret: &str, host: &str) -> String {
        format!(
            "[node]\nid = {id}\ndata_dir = {data:?}\n\
             [cores]\ncount = {cores}\nrecv_buffers = 64\nshutdown_deadline_ms = 3000\n\
             {store}\
             [cluster]\nlisten = \"{host}:0\"\nsecret = {secret:?}\n\
             heartbeat_interval_ms = {HEARTBEAT_MS}\nfence_after_ms = {FENCE_AFTER_MS}\n\
             down_after_ms = {DOWN_AFTER_MS}\n{cluster_extra}\n\
             [services.player]\npersist = {persist:?}\n{extra}",
            data = self
                .dir
                .path()
                .join(format!("data-{id}"))
                .display()
                .to_string(),
            store = self.store.clone().unwrap_or_else(|| format!(
                "[store]\nbackend = \"sqlite\"\npath = {:?}\nsynchronous = \"normal\"\n",
                self.db().display().to_string()
            )),
            extra = self.extra,
            cluster_extra = self.cluster_extra,
            cores = self.cores,
            persist = self.persist,
        )
    }

    /// Starts node `id` and waits until it serves.
    pub fn start(&self, id: u64) -> ServeProcess {
        self.start_with_secret(id, "the test cluster's secret")
    }

    pub fn start_with_secret(&self, id: u64, secret: &str) -> ServeProcess {
        self.start_body(&self.body(id, secret))
    }

    /// Starts node `id` with a lease and a down timer of its own instead
    /// of the cluster's (the heartbeat interval stays `HEARTBEAT_MS`).
    pub fn start_with_timers(
        &self,
        id: u64,
        fence_after_ms: u64,
        down_after_ms: u64,
    ) -> ServeProcess {
        let body = self
            .body(id, "the test cluster's secret")
            .replace(
                &format!("fence_after_ms = {FENCE_AFTER_MS}\n"),
                &format!("fence_after_ms = {fence_after_ms}\n"),
            )
            .replace(
                &format!("down_after_ms = {DOWN_AFTER_MS}\n"),
                &format!("down_after_ms = {down_after_ms}\n"),
            );
        self.start_body(&body)
    }

    /// The command that starts node `id` on loopback with `keys` added to
    /// its `[auth]` section (the test secret is there already), for a test
    /// that changes how the process starts before `ServeProcess::spawn`.
    pub fn command_with_auth(&self, id: u64, keys: &str) -> std::process::Command {
        self.command_with(id, "", keys)
    }

    /// [`Self::command_with_auth`] with `gateway` keys added to the
    /// `[gateway]` section (its listener is there already) too.
    pub fn command_with(&self, id: u64, gateway: &str, auth: &str) -> std::process::Command {
        let dir = self.dir.path().join(format!("node-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("node.toml");
        let body = format!(
            "{}\n[gateway]\nlisten = \"127.0.0.1:0\"\n{gateway}[admin]\nlisten = \"127.0.0.1:0\"\n\
             [auth]\nsecret = {:?}\n{auth}",
            self.body(id, "the test cluster's secret"),
            super::SECRET
        );
        std::fs::write(&config, body).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
        command.args(["serve", "--config"]).arg(&config);
        command
    }

    fn start_body(&self, body: &str) -> ServeProcess {
        let start = self.starts.get() + 1;
        self.starts.set(start);
        let dir = self.dir.path().join(format!("start-{start}"));
        std::fs::create_dir_all(&dir).unwrap();
        ServeProcess::start(&dir, body)
    }
}

impl LocalCluster {
    /// Runs node `id` expecting it to exit on its own (a refused start):
    /// its exit status and what it printed on stderr.
    pub fn run_to_exit(&self, id: u64, limit: Duration) -> (std::process::ExitStatus, String) {
        let dir = self.dir.path().join(format!("exit-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.toml");
        let body = format!(
            "{}\n{}",
            self.body(id, "the test cluster's secret"),
            listeners_on("127.0.0.1")
        );
        std::fs::write(&path, body).unwrap();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
        command.args(["serve", "--config"]).arg(&path);
        super::run_to_exit(command, limit)
            .unwrap_or_else(|| panic!("node {id} still running after {limit:?}"))
    }
}

/// `GET path` on an admin endpoint: the status and the body.
pub fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    http(address, "GET", path)
}

/// `POST path` (empty body) on an admin endpoint: the status and the body.
pub fn http_post(address: SocketAddr, path: &str) -> (u16, String) {
    http(address, "POST", path)
}

/// `POST path` as JSON, whatever the status.
pub fn post_json(address: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = http_post(address, path);
    let json =
        serde_json::from_str(&body).unwrap_or_else(|error| panic!("{path}: {error}: {body}"));
    (status, json)
}

fn http(address: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let answer = super::http::request(address, method, path, &[], "");
    (answer.status, answer.body)
}

/// `GET path` as JSON.
pub fn get_json(address: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = http_get(address, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|error| panic!("{path}: {error}: {body}"))
}

/// The state node `node` sees member `id` in.
pub fn member_state(node: SocketAddr, id: u64) -> Option<String> {
    let cluster = get_json(node, "/cluster");
    let member = cluster["members"]
        .as_array()?
        .iter()
        .find(|m| m["node_id"] == id)?
        .clone();
    Some(member["state"].as_str()?.to_string())
}

/// Polls `check` every 20 ms until it returns `Some`, or panics with
/// `what` after `limit`.
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

/// Waits until `node` sees every one of `peers` up (and itself serving).
pub fn wait_members_up(node: &ServeProcess, peers: &[u64]) {
    eventually(Duration::from_secs(10), "members up", || {
        let cluster = get_json(node.admin, "/cluster");
        let up = |id: u64| {
            cluster["members"]
                .as_array()?
                .iter()
                .find(|m| m["node_id"] == id)
                .filter(|m| m["state"] == "up")
                .map(|_| ())
        };
        (cluster["state"] == "up" && peers.iter().all(|&id| up(id).is_some())).then_some(())
    })
}

/// The value of one line of a node's `/metrics`, e.g.
/// `routerd_gateway_sessions_active`.
pub fn metric_at(admin: SocketAddr, name: &str) -> i64 {
    let (_, text) = http_get(admin, "/metrics");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

/// Polls `name` on the node at `admin` until it equals `want`, for 5 s at
/// most.
pub fn wait_metric_at(admin: SocketAddr, name: &str, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = metric_at(admin, name);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} = {got}, want {want}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `count` players node `owner_id` owns, found by logging players in at
/// that node (`node`) and out again.
pub fn players_owned_by(node: &ServeProcess, owner_id: u64, count: usize) -> Vec<u64> {
    let players: Vec<u64> = (1..64)
        .filter(|&player| {
            let (client, _) = login_eventually(node.gateway, player, Duration::from_secs(10));
            let owned = player_owner(node.admin, player).is_some_and(|(id, _)| id == owner_id);
            client.shutdown();
            owned
        })
        .take(count)
        .collect();
    assert_eq!(players.len(), count, "node {owner_id} owns {count} players");
    wait_metric_at(node.admin, "routerd_gateway_sessions_active", 0);
    players
}

/// The node id and incarnation `/objects/player/<id>` names as owner.
pub fn player_owner(admin: SocketAddr, player_id: u64) -> Option<(u64, u64)> {
    object_owner(admin, "player", player_id)
}

/// The node id and incarnation `/objects/<type_name>/<id>` names as owner.
pub fn object_owner(admin: SocketAddr, type_name: &str, id: u64) -> Option<(u64, u64)> {
    let (status, body) = http_get(admin, &format!("/objects/{type_name}/{id}"));
    if status != 200 {
        return None;
    }
    let record: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some((
        record["owner"].as_u64()?,
        record["owner_incarnation"].as_u64()?,
    ))
}

/// Logs in (a fresh connection each try) until the login is answered OK,
/// or panics after `limit`; returns the client and how long it took.
pub fn login_eventually(
    gateway: SocketAddr,
    player_id: u64,
    limit: Duration,
) -> (Client, Duration) {
    let started = Instant::now();
    loop {
        let mut client = Client::connect(gateway);
        let reply = client.call(
            wire::client::route::AUTH_LOGIN,
            1,
            super::token(player_id, 3600).as_bytes(),
        );
        if reply.kind == wire::client::FrameKind::Response {
            return (client, started.elapsed());
        }
        assert!(
            started.elapsed() < limit,
            "login of {player_id} still failing after {limit:?}: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs each scenario (a `fn(LocalCluster)`) twice: on a shared SQLite
/// file (`<scenario>::on_sqlite`) and on a throwaway PostgreSQL server
/// (`<scenario>::on_postgres`, which says it skipped without PostgreSQL).
#[macro_export]
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn on_sqlite() {
                super::$scenario($crate::support::cluster::LocalCluster::new());
            }

            #[test]
            fn on_postgres() {
                if let Some(cluster) = $crate::support::cluster::LocalCluster::postgres() {
                    super::$scenario(cluster);
                }
            }
        }
    )*};
}
