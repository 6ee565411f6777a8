//! The node's configuration: one TOML file, every limit and timer a key with
//! a documented default. Unknown keys are errors naming the key, so a typo
//! never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod cluster;
mod secret;

pub use self::cluster::{
    ClusterConfig, CLUSTER_NAME_LEN_MAX, CLUSTER_SECRET_ENV, DEVELOPMENT_CLUSTER_SECRET,
};
use self::secret::SecretKey;
pub use self::secret::{Secret, SecretError, MASK};

/// Pool connections one store keeps at most (plus its membership
/// connection): a PostgreSQL backend process each, and a server's
/// `max_connections` is shared by every routerd node.
pub const POSTGRES_POOL_SIZE_MAX: usize = 64;

/// The effective configuration of one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub node: NodeConfig,
    pub cores: CoresConfig,
    pub gateway: GatewayConfig,
    pub admin: AdminConfig,
    pub auth: AuthConfig,
    pub store: StoreConfig,
    pub cluster: ClusterConfig,
    pub router: RouterConfig,
    pub services: ServicesConfig,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id in the cluster; never 0 (0 means "no owner").
    pub id: u64,
    /// Where the node keeps its files (the SQLite store by default).
    pub data_dir: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: 1,
            data_dir: PathBuf::from("./data"),
        }
    }
}

/// Core placement and per-core executor tuning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoresConfig {
    /// How many cores to run, pinned to CPUs 0..count. 0 means every CPU
    /// this process may run on. Ignored when `cpus` is set.
    pub count: usize,
    /// An explicit CPU list, one executor pinned to each.
    pub cpus: Option<Vec<usize>>,
    /// Submission queue entries of each core's io_uring ring (a power of
    /// two); its completion queue is eight times longer.
    pub ring_depth: u32,
    /// How each ring runs completion work: `defer` (Linux 6.1) or `coop`
    /// (Linux 6.0); see the runtime's notes on why it matters.
    pub ring_taskrun: RingTaskrun,
    /// Receive buffers in each core's buffer ring (a power of two): reads
    /// land there and are copied out at once, so this bounds bytes in
    /// flight per core, not per connection.
    pub recv_buffers: u16,
    /// Bytes of each receive buffer.
    pub recv_buffer_bytes: usize,
    /// Entries of each core's registered file table: a connection in it
    /// is named by index in the ring's operations, which saves the kernel
    /// a descriptor lookup per receive and send. Connections beyond it use
    /// their descriptor. Lowered to the open-file limit (`ulimit -n`); 0
    /// registers no table.
    pub registered_files: u32,
    /// Busy-spin this long before an idle executor parks; 0 parks at once.
    /// A dedicated benchmark node trades CPU for latency here.
    pub spin_before_park_us: u64,
    /// Scheduler shares of the latency-sensitive queue (client IO, routing).
    pub latency_shares: usize,
    /// Scheduler shares of the throughput queue (saves, cleanup sweeps).
    pub throughput_shares: usize,
    /// Frames that may wait in one core-to-core channel before sends to it
    /// fail and are counted.
    pub mesh_queue_max: usize,
    /// How long cores may take to drain their work at shutdown.
    pub shutdown_deadline_ms: u64,
}

impl Default for CoresConfig {
    fn default() -> Self {
        Self {
            count: 0,
            cpus: None,
            ring_depth: 256,
            ring_taskrun: RingTaskrun::Defer,
            recv_buffers: 512,
            recv_buffer_bytes: 16 * 1024,
            registered_files: 16 * 1024,
            spin_before_park_us: 0,
            latency_shares: 1000,
            throughput_shares: 100,
            mesh_queue_max: 4096,
            shutdown_deadline_ms: 5000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Client listen address; every core binds it with SO_REUSEPORT.
    pub listen: SocketAddr,
    /// Largest accepted frame body, in bytes.
    pub body_max_bytes: u32,
    /// Unanswered requests one session may have.
    pub inflight_max: u32,
    /// A request unanswered this long gets ERROR TIMEOUT from the gateway.
    pub request_timeout_ms: u64,
    /// A connection that sends nothing this long is closed.
    pub idle_timeout_ms: u64,
    /// Sessions this node holds at once, over all cores; more are refused.
    pub sessions_max: u32,
    /// Frames waiting to be written to one session; a session whose queue
    /// is full is a slow reader and is closed.
    pub send_queue_max: u32,
    /// Requests one session may send a second, sustained; one more is
    /// answered OVERLOADED before it reaches a service. 0: unlimited.
    pub session_requests_per_sec_max: u32,
    /// Requests one session may send at once above the sustained rate (the
    /// depth of its token bucket).
    pub session_request_burst_max: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            body_max_bytes: 65536,
            inflight_max: 1024,
            request_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            sessions_max: 100_000,
            send_queue_max: 4096,
            // Generous: one session of the benchmarks' busiest shape (16
            // sessions at pipeline 16, about 2.2M requests a second in all)
            // sends about 140,000 a second.
            session_requests_per_sec_max: 250_000,
            // Two windows of inflight_max: a client that pipelines up to
            // its in-flight bound is never refused for bursting.
            session_request_burst_max: 2 * 1024,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// HTTP listener for `/healthz` and `/metrics`.
    pub listen: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
        }
    }
}

/// How a core's io_uring runs completion work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RingTaskrun {
    /// `SINGLE_ISSUER | DEFER_TASKRUN`: completion work runs only when the
    /// core reaps, once per loop turn.
    #[default]
    Defer,
    /// `SINGLE_ISSUER | COOP_TASKRUN`: at the core's next system call.
    Coop,
}

/// What happens when a player logs in while already logged in elsewhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicateLogin {
    /// The old session gets `sys.kicked` and is closed; the new one binds.
    #[default]
    KickOld,
    /// The new login fails with AUTH_FAILED; the old session stays.
    Single,
    /// Both sessions stay bound.
    Multi,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HMAC-SHA256 key of login tokens. `ROUTERD_AUTH_SECRET` wins over it.
    pub secret: Secret,
    pub duplicate_login: DuplicateLogin,
}

/// The secret a fresh checkout uses, so that `routerd token` and a node
/// started without a config agree. A real deployment sets its own.
pub const DEVELOPMENT_SECRET: &str = "routerd-development-secret";

/// The environment variable that wins over `auth.secret`.
pub const AUTH_SECRET_ENV: &str = "ROUTERD_AUTH_SECRET";

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            secret: Secret::new(DEVELOPMENT_SECRET),
            duplicate_login: DuplicateLogin::KickOld,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreBackend {
    /// Embedded SQLite file: the default, and a local cluster when several
    /// processes share one file.
    #[default]
    Sqlite,
    /// Process memory: for tests only, nothing survives a restart.
    Memory,
    /// A ScyllaDB cluster, ownership CAS as lightweight transactions.
    Scylla,
    /// A PostgreSQL database (`store.url`), ownership CAS as conditional
    /// statements, group-committed over a small connection pool.
    Postgres,
}

/// `[store]` keys every backend reads (the `Store` handle's limits and the
/// bridge's queue).
const STORE_COMMON_KEYS: [&str; 5] = [
    "backend",
    "queue_max",
    "batch_max",
    "state_max_bytes",
    "request_timeout_ms",
];

impl StoreBackend {
    /// Every backend, for the key check's messages.
    pub const ALL: [StoreBackend; 4] = [
        StoreBackend::Sqlite,
        StoreBackend::Memory,
        StoreBackend::Scylla,
        StoreBackend::Postgres,
    ];

    /// The `[store]` keys this backend reads beyond the common ones. A key
    /// of another backend in a config file is an error naming it, so a
    /// setting never looks applied when it is not; a new backend lists its
    /// keys here.
    pub const fn keys(self) -> &'static [&'static str] {
        match self {
            StoreBackend::Sqlite => &["path", "synchronous"],
            StoreBackend::Memory => &[],
            StoreBackend::Scylla => &["nodes", "keyspace", "replication_factor"],
            StoreBackend::Postgres => &["url", "pool_size"],
        }
    }

    /// The name `store.backend` takes in a config file.
    pub const fn name(self) -> &'static str {
        match self {
            StoreBackend::Sqlite => "sqlite",
            StoreBackend::Memory => "memory",
            StoreBackend::Scylla => "scylla",
            StoreBackend::Postgres => "postgres",
        }
    }

    /// Whether this backend reads `[store]` key `key`.
    pub fn uses(self, key: &str) -> bool {
        STORE_COMMON_KEYS.contains(&key) || self.keys().contains(&key)
    }
}

/// SQLite's `synchronous` pragma. `full` makes every acknowledged commit
/// survive power loss; `normal` (in WAL mode) survives a process crash but
/// may lose the last commits on power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SqliteSynchronous {
    #[default]
    Full,
    Normal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Which backend; the keys below marked with a backend apply to it only
    /// (see [`StoreBackend::keys`]).
    pub backend: StoreBackend,
    /// sqlite: the database file; defaults to `<node.data_dir>/routerd.db`.
    pub path: Option<PathBuf>,
    /// sqlite: the `synchronous` pragma.
    pub synchronous: SqliteSynchronous,
    /// Requests waiting for the store thread; more are answered "overloaded".
    pub queue_max: usize,
    /// Writes applied in one group-commit transaction at most.
    pub batch_max: usize,
    /// Largest object state blob, in bytes.
    pub state_max_bytes: usize,
    /// A store request unanswered this long is Indeterminate.
    pub request_timeout_ms: u64,
    /// scylla: contact points, `host:port`.
    pub nodes: Vec<String>,
    /// scylla: the keyspace, created if absent.
    pub keyspace: String,
    /// scylla: the replication factor of a keyspace it creates.
    pub replication_factor: u32,
    /// PostgreSQL connection URL, `postgresql://user@host:5432/db`;
    /// `ROUTERD_STORE_URL` wins over it.
    pub url: String,
    /// PostgreSQL connections the store thread keeps, at most
    /// [`POSTGRES_POOL_SIZE_MAX`].
    pub pool_size: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: StoreBackend::Sqlite,
            path: None,
            synchronous: SqliteSynchronous::Full,
            queue_max: 65_536,
            batch_max: 1024,
            state_max_bytes: 1024 * 1024,
            request_timeout_ms: 5000,
            nodes: Vec::new(),
            keyspace: "routerd".to_string(),
            replication_factor: 1,
            url: String::new(),
            pool_size: 4,
        }
    }
}

/// The seed's router timers and limits, with the seed's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// A non-writable route cache older than this is refreshed on access.
    pub cache_update_interval_ms: u64,
    /// An idle route cache is freed after this.
    pub cache_free_timeout_ms: u64,
    /// An idle writable object is saved and degraded after this; it is also
    /// the ownership lock lifetime after the owner's last save.
    pub object_free_timeout_ms: u64,
    /// Writable objects are saved this often (refreshing the lock).
    pub object_save_interval_ms: u64,
    /// Upper bound of the randomised wait before a cache pull is retried.
    pub cache_retry_interval_ms: u64,
    /// Upper bound of the randomised wait before an object pull is retried.
    pub object_retry_interval_ms: u64,
    /// Pull attempts of one `mutable_cache` / `mutable_object` call (the
    /// seed's `retry_max_ttl`: a count of attempts, not a time).
    pub pull_attempts_max: u32,
    /// Forwarding hops a routed request may take (the seed's
    /// `transfer_max_ttl`: a count of hops, not a time).
    pub forward_hops_max: u32,
    /// Requests queued behind one migrating object; more are refused.
    pub pending_queue_max: usize,
    /// Objects and caches one core holds; past it new objects are refused.
    pub entries_per_core_max: usize,
    /// How long a transfer's old owner waits for the target's
    /// `router_transfer` ack before draining its pending queue anyway.
    pub transfer_ack_timeout_ms: u64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            cache_update_interval_ms: 1_800_000,
            cache_free_timeout_ms: 600_000,
            object_free_timeout_ms: 1_500_000,
            object_save_interval_ms: 600_000,
            cache_retry_interval_ms: 256,
            object_retry_interval_ms: 256,
            pull_attempts_max: 3,
            forward_hops_max: 16,
            pending_queue_max: 1024,
            entries_per_core_max: 1_000_000,
            transfer_ack_timeout_ms: 5_000,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Persist {
    /// Saved every `object_save_interval`, at degradation and at shutdown.
    /// Loses the changes since an object's last save only when this node
    /// was declared down and another node took the object over (a pause or
    /// a store outage shorter than `down_after_ms` loses nothing: see
    /// docs/cluster.md, "What each persistence policy can lose").
    #[default]
    Interval,
    /// A mutating request is acknowledged only after its save committed.
    OnWrite,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServicesConfig {
    pub player: PlayerConfig,
    pub room: RoomConfig,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlayerConfig {
    pub persist: Persist,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoomConfig {
    /// Members one room may have; a join past it is BAD_REQUEST.
    pub members_max: usize,
    /// When membership changes become durable.
    pub persist: Persist,
    /// Joins of rooms it is not in that one session may make with the
    /// right to create the room; past it, joining a room that exists still
    /// works and one that does not is OVERLOADED. 0: clients create no
    /// rooms.
    pub created_per_session_max: u32,
    /// Rooms a node may hold in memory and still create another; past it a
    /// join that would create one is OVERLOADED (rooms that exist still
    /// load, up to `router.entries_per_core_max`).
    pub rooms_per_node_max: usize,
}

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            members_max: 4096,
            persist: Persist::Interval,
            created_per_session_max: 64,
            rooms_per_node_max: 100_000,
        }
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config: {0}")]
    Invalid(String),
    #[error("unsafe config: {0}")]
    Secret(#[from] SecretError),
}

impl Config {
    /// Reads `path`, or the built-in defaults (those of
    /// `tuning/default.toml`) when there is none, then applies environment
    /// overrides and validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                Config::from_toml(&text).map_err(|message| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message,
                })?
            }
            None => Config::default(),
        };
        if let Ok(secret) = std::env::var(AUTH_SECRET_ENV) {
            config.auth.secret = Secret::new(secret);
        }
        if let Ok(url) = std::env::var("ROUTERD_STORE_URL") {
            config.store.url = url;
        }
        if let Ok(secret) = std::env::var(CLUSTER_SECRET_ENV) {
            config.cluster.secret = Secret::new(secret);
        }
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text; the error names the offending key.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|error: toml::de::Error| error.to_string())?;
        check_renamed_keys(&table)?;
        let config: Config = toml::from_str(text).map_err(|error| error.to_string())?;
        if let Some(toml::Value::Table(store)) = table.get("store") {
            check_store_keys(config.store.backend, store)?;
        }
        Ok(config)
    }

    /// Checks the relations between keys that serde alone cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_string()));
        if self.node.id == 0 {
            return invalid("node.id must not be 0 (0 means \"no owner\")");
        }
        if let Some(cpus) = &self.cores.cpus {
            if cpus.is_empty() {
                return invalid("cores.cpus must name at least one CPU");
            }
        }
        if !self.cores.ring_depth.is_power_of_two() || self.cores.ring_depth > 32_768 {
            return invalid("cores.ring_depth must be a power of two, at most 32768");
        }
        if !self.cores.recv_buffers.is_power_of_two() || self.cores.recv_buffers > 32_768 {
            return invalid("cores.recv_buffers must be a power of two, at most 32768");
        }
        if self.cores.recv_buffer_bytes == 0 || self.cores.recv_buffer_bytes > 1 << 20 {
            return invalid("cores.recv_buffer_bytes must be between 1 and 1048576");
        }
        if self.gateway.body_max_bytes == 0 || self.gateway.inflight_max == 0 {
            return invalid("gateway.body_max_bytes and gateway.inflight_max must be positive");
        }
        if self.gateway.request_timeout_ms == 0 || self.gateway.idle_timeout_ms == 0 {
            return invalid("gateway timeouts must be positive");
        }
        if self.gateway.session_requests_per_sec_max > 0
            && self.gateway.session_request_burst_max == 0
        {
            return invalid(
                "gateway.session_request_burst_max must be positive when \
                 gateway.session_requests_per_sec_max is set",
            );
        }
        if self.gateway.send_queue_max == 0 || self.cores.mesh_queue_max == 0 {
            return invalid("queue bounds must be positive");
        }
        self.check_secrets()?;
        if self.store.backend == StoreBackend::Scylla && self.store.nodes.is_empty() {
            return invalid("store.backend = \"scylla\" needs store.nodes");
        }
        if self.store.backend == StoreBackend::Postgres && self.store.url.is_empty() {
            return invalid("store.backend = \"postgres\" needs store.url (or ROUTERD_STORE_URL)");
        }
        if self.store.pool_size == 0 || self.store.pool_size > POSTGRES_POOL_SIZE_MAX {
            return invalid("store.pool_size must be between 1 and 64");
        }
        if self.store.queue_max == 0 || self.store.batch_max == 0 {
            return invalid("store.queue_max and store.batch_max must be positive");
        }
        if self.router.pull_attempts_max == 0 || self.router.forward_hops_max == 0 {
            return invalid(
                "router.pull_attempts_max and router.forward_hops_max must be positive",
            );
        }
        if self.router.object_save_interval_ms >= self.router.object_free_timeout_ms {
            return invalid(
                "router.object_save_interval_ms must be below router.object_free_timeout_ms, \
                 or a live owner's ownership lock would expire between saves",
            );
        }
        self.cluster.check_timing().map_err(ConfigError::Invalid)?;
        Ok(())
    }

    /// Every secret of the config, with the listeners it guards. A new
    /// secret is added here, and the rules of [`secret`] then hold for it
    /// too: not empty, not `check-config`'s mask, and not its development
    /// value where other machines can reach what it guards. The cluster's
    /// guards only the link listeners: a node whose gateway is public but
    /// whose links stay on loopback forms no cluster beyond the machine.
    fn secrets(&self) -> [SecretKey<'_>; 2] {
        let mut cluster = vec![("cluster.listen", self.cluster.listen)];
        cluster.extend(
            self.cluster
                .advertise
                .map(|address| ("cluster.advertise", address)),
        );
        [
            SecretKey {
                key: "auth.secret",
                env: AUTH_SECRET_ENV,
                development: DEVELOPMENT_SECRET,
                value: &self.auth.secret,
                listeners: vec![
                    ("gateway.listen", self.gateway.listen),
                    ("admin.listen", self.admin.listen),
                ],
            },
            SecretKey {
                key: "cluster.secret",
                env: CLUSTER_SECRET_ENV,
                development: DEVELOPMENT_CLUSTER_SECRET,
                value: &self.cluster.secret,
                listeners: cluster,
            },
        ]
    }

    /// The rules for secrets alone; [`Self::validate`] checks them too. A
    /// node checks them at start, so a config built in code cannot skip
    /// them.
    pub fn check_secrets(&self) -> Result<(), SecretError> {
        secret::check(&self.secrets())
    }

    /// The SQLite file this node uses.
    pub fn sqlite_path(&self) -> PathBuf {
        self.store
            .path
            .clone()
            .unwrap_or_else(|| self.node.data_dir.join("routerd.db"))
    }

    /// The effective configuration as TOML, defaults filled in, without
    /// the keys of store backends other than the chosen one (so the output
    /// loads back).
    pub fn to_toml(&self) -> String {
        let mut table = toml::Table::try_from(self).expect("a Config always serializes");
        if let Some(toml::Value::Table(store)) = table.get_mut("store") {
            store.retain(|key, _| self.store.backend.uses(key));
        }
        let mut text = toml::to_string_pretty(&table).expect("a TOML table always serializes");
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }
}

/// Keys renamed when the file's names were made uniform (`x_max`, unit
/// last, counts named as counts): an old config fails naming the new key
/// rather than only "unknown field".
const RENAMED_KEYS: [(&str, &str, &str); 6] = [
    ("gateway", "max_body", "body_max_bytes"),
    ("gateway", "max_inflight", "inflight_max"),
    ("gateway", "max_sessions", "sessions_max"),
    ("router", "retry_max_ttl", "pull_attempts_max"),
    ("router", "transfer_max_ttl", "forward_hops_max"),
    ("router", "entries_max_per_core", "entries_per_core_max"),
];

fn check_renamed_keys(table: &toml::Table) -> Result<(), String> {
    for (section, old, new) in RENAMED_KEYS {
        let present = table
            .get(section)
            .and_then(toml::Value::as_table)
            .is_some_and(|keys| keys.contains_key(old));
        if present {
            return Err(format!("{section}.{old} was renamed to {section}.{new}"));
        }
    }
    Ok(())
}

/// A `[store]` key the chosen backend does not read is an error naming it.
/// Unknown keys were reported by serde already.
fn check_store_keys(backend: StoreBackend, store: &toml::Table) -> Result<(), String> {
    for key in store.keys() {
        if backend.uses(key) {
            continue;
        }
        let owners: Vec<&str> = StoreBackend::ALL
            .iter()
            .filter(|other| other.keys().contains(&key.as_str()))
            .map(|other| other.name())
            .collect();
        return Err(format!(
            "store.{key} does not apply to store.backend = \"{}\" (it is read by: {})",
            backend.name(),
            owners.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let error = Config::from_toml("[gateway]\nmax_inflihgt = 3\n").unwrap_err();
        assert!(error.contains("max_inflihgt"), "{error}");
        let error = Config::from_toml("[gatewya]\n").unwrap_err();
        assert!(error.contains("gatewya"), "{error}");
    }

    #[test]
    fn defaults_are_the_seed_values() {
        let config = Config::default();
        assert_eq!(config.router.cache_update_interval_ms, 1_800_000);
        assert_eq!(config.router.cache_free_timeout_ms, 600_000);
        assert_eq!(config.router.object_free_timeout_ms, 1_500_000);
        assert_eq!(config.router.object_save_interval_ms, 600_000);
        assert_eq!(config.router.cache_retry_interval_ms, 256);
        assert_eq!(config.router.object_retry_interval_ms, 256);
        assert_eq!(config.router.pull_attempts_max, 3);
        assert_eq!(config.router.forward_hops_max, 16);
        assert_eq!(config.gateway.body_max_bytes, 65536);
        assert_eq!(config.gateway.inflight_max, 1024);
        assert_eq!(config.gateway.request_timeout_ms, 10_000);
        assert_eq!(config.gateway.idle_timeout_ms, 60_000);
        assert_eq!(config.services.player.persist, Persist::Interval);
        assert_eq!(config.auth.duplicate_login, DuplicateLogin::KickOld);
        config.validate().unwrap();
    }

    #[test]
    fn effective_config_round_trips_but_for_its_secrets() {
        let mut config = Config::default();
        config.auth.secret = Secret::new("hunter2-but-longer");
        let text = config.to_toml();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains(MASK), "{text}");
        let mut parsed = Config::from_toml(&text).unwrap();
        // Read back, the mask is refused rather than used as a key.
        assert_eq!(
            parsed.check_secrets(),
            Err(SecretError::Masked { key: "auth.secret" })
        );
        parsed.auth.secret = config.auth.secret.clone();
        parsed.cluster.secret = config.cluster.secret.clone();
        assert_eq!(parsed, config);
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn the_development_secret_is_refused_on_a_public_listener() {
        let mut config = Config::default();
        config.gateway.listen = "0.0.0.0:7400".parse().unwrap();
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("auth.secret"), "{error}");
        assert!(error.contains("ROUTERD_AUTH_SECRET"), "{error}");
        assert!(error.contains("gateway.listen"), "{error}");
        config.auth.secret = Secret::new("an operator's own secret");
        // Links on loopback: the cluster's development secret guards
        // nothing other machines reach.
        config.validate().unwrap();
        // The cluster secret obeys the same rule, named by its own key,
        // for the link listener and for the address advertised.
        config.cluster.listen = "10.1.2.3:7600".parse().unwrap();
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("cluster.secret"), "{error}");
        assert!(error.contains("ROUTERD_CLUSTER_SECRET"), "{error}");
        assert!(error.contains("cluster.listen"), "{error}");
        config.cluster.listen = "127.0.0.1:7600".parse().unwrap();
        config.cluster.advertise = Some("10.1.2.3:7600".parse().unwrap());
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("cluster.advertise"), "{error}");
        config.cluster.secret = Secret::new("the cluster's own secret");
        config.validate().unwrap();
    }

    #[test]
    fn issue_keys_parse() {
        let text = r#"
            [node]
            id = 3
            data_dir = "/tmp/x"
            [cores]
            cpus = [0, 1]
            [gateway]
            listen = "127.0.0.1:7500"
            body_max_bytes = 1024
            [auth]
            secret = "s"
            duplicate_login = "multi"
            [store]
            backend = "memory"
            [router]
            pull_attempts_max = 5
            [services.player]
            persist = "on_write"
        "#;
        let config = Config::from_toml(text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.node.id, 3);
        assert_eq!(config.cores.cpus, Some(vec![0, 1]));
        assert_eq!(config.auth.duplicate_login, DuplicateLogin::Multi);
        assert_eq!(config.store.backend, StoreBackend::Memory);
        assert_eq!(config.services.player.persist, Persist::OnWrite);
        assert_eq!(config.router.pull_attempts_max, 5);
    }

    #[test]
    fn relations_are_checked() {
        let mut config = Config::default();
        config.node.id = 0;
        assert!(config.validate().is_err());
        let mut config = Config::default();
        config.router.object_save_interval_ms = config.router.object_free_timeout_ms;
        assert!(config.validate().is_err());
        let mut config = Config::default();
        config.store.backend = StoreBackend::Postgres;
        assert!(config.validate().is_err(), "postgres without a url");
        config.store.url = "postgresql://routerd@127.0.0.1:5432/routerd".to_string();
        config.validate().unwrap();
        config.store.pool_size = 0;
        assert!(config.validate().is_err());
        config.store.pool_size = POSTGRES_POOL_SIZE_MAX + 1;
        assert!(config.validate().is_err());
        // A request rate needs a bucket to hold its tokens; no rate needs none.
        let mut config = Config::default();
        config.gateway.session_request_burst_max = 0;
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.contains("gateway.session_request_burst_max"),
            "{error}"
        );
        config.gateway.session_requests_per_sec_max = 0;
        config.validate().unwrap();
    }

    #[test]
    fn the_client_limits_parse_from_their_keys() {
        let text = "[gateway]\nsession_requests_per_sec_max = 10\nsession_request_burst_max = 3\n\
                    [services.room]\ncreated_per_session_max = 4\nrooms_per_node_max = 5\n";
        let config = Config::from_toml(text).unwrap();
        assert_eq!(config.gateway.session_requests_per_sec_max, 10);
        assert_eq!(config.gateway.session_request_burst_max, 3);
        assert_eq!(config.services.room.created_per_session_max, 4);
        assert_eq!(config.services.room.rooms_per_node_max, 5);
    }

    #[test]
    fn renamed_keys_parse_and_old_names_are_refused_naming_both() {
        let text = "[gateway]\nbody_max_bytes = 10\ninflight_max = 11\nsessions_max = 12\n\
                    [router]\npull_attempts_max = 13\nforward_hops_max = 14\n\
                    entries_per_core_max = 15\n";
        let config = Config::from_toml(text).unwrap();
        assert_eq!(config.gateway.body_max_bytes, 10);
        assert_eq!(config.gateway.inflight_max, 11);
        assert_eq!(config.gateway.sessions_max, 12);
        assert_eq!(config.router.pull_attempts_max, 13);
        assert_eq!(config.router.forward_hops_max, 14);
        assert_eq!(config.router.entries_per_core_max, 15);
        for (section, old, new) in RENAMED_KEYS {
            let error = Config::from_toml(&format!("[{section}]\n{old} = 1\n")).unwrap_err();
            assert!(error.contains(&format!("{section}.{old}")), "{error}");
            assert!(error.contains(&format!("{section}.{new}")), "{error}");
        }
    }

    #[test]
    fn a_key_of_another_store_backend_is_an_error_naming_it() {
        let cases = [
            ("sqlite", "keyspace = \"k\"", "store.keyspace"),
            ("sqlite", "nodes = []", "store.nodes"),
            ("memory", "path = \"x.db\"", "store.path"),
            ("scylla", "synchronous = \"normal\"", "store.synchronous"),
            ("scylla", "path = \"x.db\"", "store.path"),
        ];
        for (backend, line, key) in cases {
            let text = format!("[store]\nbackend = \"{backend}\"\nnodes = [\"h:1\"]\n{line}\n");
            let text = if backend == "scylla" {
                text
            } else {
                text.replace("nodes = [\"h:1\"]\n", "")
            };
            let error = Config::from_toml(&text).unwrap_err();
            assert!(error.contains(key), "{backend}: {error}");
        }
        // The default backend is sqlite, named or not.
        let error = Config::from_toml("[store]\nreplication_factor = 3\n").unwrap_err();
        assert!(error.contains("store.replication_factor"), "{error}");
        // Each backend's own keys and the common ones are accepted.
        Config::from_toml("[store]\npath = \"x.db\"\nsynchronous = \"normal\"\nqueue_max = 5\n")
            .unwrap();
        Config::from_toml(
            "[store]\nbackend = \"scylla\"\nnodes = [\"h:1\"]\nkeyspace = \"k\"\n\
             replication_factor = 3\nbatch_max = 7\n",
        )
        .unwrap();
    }

    #[test]
    fn every_store_key_is_common_or_declared_by_a_backend() {
        // A new [store] field must say which backend reads it, or the key
        // check above would refuse it for every backend.
        let store = StoreConfig {
            path: Some(PathBuf::from("x.db")),
            ..StoreConfig::default()
        };
        let table = toml::Table::try_from(&store).unwrap();
        for key in table.keys() {
            assert!(
                StoreBackend::ALL.iter().any(|backend| backend.uses(key)),
                "store.{key} is read by no backend"
            );
        }
        for backend in StoreBackend::ALL {
            let named = toml::Value::try_from(backend).unwrap();
            assert_eq!(named.as_str(), Some(backend.name()));
        }
    }

    #[test]
    fn effective_config_of_each_backend_loads_back() {
        for backend in StoreBackend::ALL {
            let mut config = Config::default();
            config.store.backend = backend;
            config.store.nodes = vec!["h:9042".to_string()];
            let text = config.to_toml();
            let parsed = Config::from_toml(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
            assert_eq!(parsed.store.backend, backend);
            // `path` is shown only when set.
            for key in ["synchronous", "nodes", "keyspace", "replication_factor"] {
                let shown = text
                    .lines()
                    .any(|line| line.starts_with(&format!("{key} =")));
                assert_eq!(shown, backend.keys().contains(&key), "{backend:?} {key}");
            }
        }
    }
}

#[cfg(test)]
mod tuning_tests {
    use super::*;

    fn profile(name: &str) -> Config {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tuning")
            .join(name);
        Config::load(Some(&path)).unwrap_or_else(|error| panic!("{name}: {error}"))
    }

    #[test]
    fn default_profile_is_the_built_in_default() {
        // `routerd serve` without --config must mean tuning/default.toml.
        let mut expected = Config::default();
        if let Ok(secret) = std::env::var(AUTH_SECRET_ENV) {
            expected.auth.secret = Secret::new(secret);
        }
        if let Ok(url) = std::env::var("ROUTERD_STORE_URL") {
            expected.store.url = url;
        }
        assert_eq!(profile("default.toml"), expected);
    }

    #[test]
    fn shipped_profiles_are_valid() {
        for entry in
            std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning")).unwrap()
        {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(Some(&path))
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            }
        }
    }
}
