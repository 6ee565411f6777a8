//! The node's configuration: one TOML file, every limit and timer a key with
//! a documented default. Unknown keys are errors naming the key, so a typo
//! never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    /// Bytes of io_uring registered buffer memory per executor. Locked
    /// memory is scarce (`ulimit -l`), so the default is small.
    pub io_memory_bytes: usize,
    /// Submission queue depth of each executor's rings.
    pub ring_depth: usize,
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
            io_memory_bytes: 512 * 1024,
            ring_depth: 128,
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
    pub max_body: u32,
    /// Unanswered requests one session may have.
    pub max_inflight: u32,
    /// A request unanswered this long gets ERROR TIMEOUT from the gateway.
    pub request_timeout_ms: u64,
    /// A connection that sends nothing this long is closed.
    pub idle_timeout_ms: u64,
    /// Sessions this node holds at once, over all cores; more are refused.
    pub max_sessions: u32,
    /// Frames waiting to be written to one session; a session whose queue
    /// is full is a slow reader and is closed.
    pub send_queue_max: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            max_body: 65536,
            max_inflight: 1024,
            request_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_sessions: 100_000,
            send_queue_max: 4096,
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
    pub secret: String,
    pub duplicate_login: DuplicateLogin,
}

/// The secret a fresh checkout uses, so that `routerd token` and a node
/// started without a config agree. A real deployment sets its own.
pub const DEVELOPMENT_SECRET: &str = "routerd-development-secret";

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            secret: DEVELOPMENT_SECRET.to_string(),
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
    pub backend: StoreBackend,
    /// SQLite file; defaults to `<node.data_dir>/routerd.db`.
    pub path: Option<PathBuf>,
    pub synchronous: SqliteSynchronous,
    /// Requests waiting for the store thread; more are answered "overloaded".
    pub queue_max: usize,
    /// Writes applied in one group-commit transaction at most.
    pub batch_max: usize,
    /// Largest object state blob, in bytes.
    pub state_max_bytes: usize,
    /// A store request unanswered this long is Indeterminate.
    pub request_timeout_ms: u64,
    /// Scylla contact points, `host:port`.
    pub nodes: Vec<String>,
    pub keyspace: String,
    pub replication_factor: u32,
    /// PostgreSQL connection URL, `postgresql://user@host:5432/db`;
    /// `ROUTERD_STORE_URL` wins over it.
    pub url: String,
    /// PostgreSQL connections the store thread keeps, at most
    /// `store::POSTGRES_POOL_SIZE_MAX`.
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
    /// Pull attempts of one `mutable_cache` / `mutable_object` call.
    pub retry_max_ttl: u32,
    /// Forwarding hops a routed request may take.
    pub transfer_max_ttl: u32,
    /// Requests queued behind one migrating object; more are refused.
    pub pending_queue_max: usize,
    /// Objects and caches one core holds; past it new objects are refused.
    pub entries_max_per_core: usize,
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
            retry_max_ttl: 3,
            transfer_max_ttl: 16,
            pending_queue_max: 1024,
            entries_max_per_core: 1_000_000,
            transfer_ack_timeout_ms: 5_000,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Persist {
    /// Saved every `object_save_interval`, at degradation and at shutdown.
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
}

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            members_max: 4096,
            persist: Persist::Interval,
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
        if let Ok(secret) = std::env::var("ROUTERD_AUTH_SECRET") {
            config.auth.secret = secret;
        }
        if let Ok(url) = std::env::var("ROUTERD_STORE_URL") {
            config.store.url = url;
        }
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text; the error names the offending key.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|error| error.to_string())
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
        if self.gateway.max_body == 0 || self.gateway.max_inflight == 0 {
            return invalid("gateway.max_body and gateway.max_inflight must be positive");
        }
        if self.gateway.request_timeout_ms == 0 || self.gateway.idle_timeout_ms == 0 {
            return invalid("gateway timeouts must be positive");
        }
        if self.gateway.send_queue_max == 0 || self.cores.mesh_queue_max == 0 {
            return invalid("queue bounds must be positive");
        }
        if self.auth.secret.is_empty() {
            return invalid("auth.secret must not be empty");
        }
        if self.store.backend == StoreBackend::Scylla && self.store.nodes.is_empty() {
            return invalid("store.backend = \"scylla\" needs store.nodes");
        }
        if self.store.backend == StoreBackend::Postgres && self.store.url.is_empty() {
            return invalid("store.backend = \"postgres\" needs store.url (or ROUTERD_STORE_URL)");
        }
        if self.store.pool_size == 0 || self.store.pool_size > crate::store::POSTGRES_POOL_SIZE_MAX
        {
            return invalid("store.pool_size must be between 1 and 64");
        }
        if self.store.queue_max == 0 || self.store.batch_max == 0 {
            return invalid("store.queue_max and store.batch_max must be positive");
        }
        if self.router.retry_max_ttl == 0 || self.router.transfer_max_ttl == 0 {
            return invalid("router.retry_max_ttl and router.transfer_max_ttl must be positive");
        }
        if self.router.object_save_interval_ms >= self.router.object_free_timeout_ms {
            return invalid(
                "router.object_save_interval_ms must be below router.object_free_timeout_ms, \
                 or a live owner's ownership lock would expire between saves",
            );
        }
        Ok(())
    }

    /// The SQLite file this node uses.
    pub fn sqlite_path(&self) -> PathBuf {
        self.store
            .path
            .clone()
            .unwrap_or_else(|| self.node.data_dir.join("routerd.db"))
    }

    /// The effective configuration as TOML, defaults filled in.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a Config always serializes")
    }
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
        assert_eq!(config.router.retry_max_ttl, 3);
        assert_eq!(config.router.transfer_max_ttl, 16);
        assert_eq!(config.gateway.max_body, 65536);
        assert_eq!(config.gateway.max_inflight, 1024);
        assert_eq!(config.gateway.request_timeout_ms, 10_000);
        assert_eq!(config.gateway.idle_timeout_ms, 60_000);
        assert_eq!(config.services.player.persist, Persist::Interval);
        assert_eq!(config.auth.duplicate_login, DuplicateLogin::KickOld);
        config.validate().unwrap();
    }

    #[test]
    fn effective_config_round_trips() {
        let config = Config::default();
        let text = config.to_toml();
        assert_eq!(Config::from_toml(&text).unwrap(), config);
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
            max_body = 1024
            [auth]
            secret = "s"
            duplicate_login = "multi"
            [store]
            backend = "memory"
            [router]
            retry_max_ttl = 5
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
        assert_eq!(config.router.retry_max_ttl, 5);
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
        config.store.pool_size = crate::store::POSTGRES_POOL_SIZE_MAX + 1;
        assert!(config.validate().is_err());
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
        if let Ok(secret) = std::env::var("ROUTERD_AUTH_SECRET") {
            expected.auth.secret = secret;
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
