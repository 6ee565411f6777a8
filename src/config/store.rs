//! The `store` section: which backend holds the ownership records, and
//! its bounds.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{store_url, PAYLOAD_MAX_BYTES};

/// Pool connections one store keeps at most (plus its membership
/// connection): a PostgreSQL backend process each, and a server's
/// `max_connections` is shared by every routerd node.
pub const POSTGRES_POOL_SIZE_MAX: usize = 64;

/// The shortest `store.request_timeout_ms`: a store answers within a few
/// milliseconds when well, and a request whose time has run out is
/// answered timed out without being run (0 dropped every one).
pub const STORE_REQUEST_TIMEOUT_MIN_MS: u64 = 100;

/// The longest `store.request_timeout_ms` (10 minutes): the backends
/// derive their own timeouts from it, SQLite's busy timeout (an `i32` of
/// milliseconds) and PostgreSQL's `statement_timeout` and, twice it,
/// `idle_in_transaction_session_timeout` (under 2^30 ms, or the server
/// refuses the session's settings).
pub const STORE_REQUEST_TIMEOUT_MAX_MS: u64 = 600_000;

const _: () = assert!(STORE_REQUEST_TIMEOUT_MAX_MS * 2 < 1 << 30);

/// The ownership store's backend.
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
    /// Every commit is synced to disk.
    #[default]
    Full,
    /// Commits are synced at WAL checkpoints only.
    Normal,
}

/// `[store]`: the backend and the bounds every backend keeps.
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
    /// A store request unanswered this long is Indeterminate; between
    /// [`STORE_REQUEST_TIMEOUT_MIN_MS`] and [`STORE_REQUEST_TIMEOUT_MAX_MS`].
    pub request_timeout_ms: u64,
    /// scylla: contact points, `host:port`.
    pub nodes: Vec<String>,
    /// scylla: the keyspace, created if absent.
    pub keyspace: String,
    /// scylla: the replication factor of a keyspace it creates.
    pub replication_factor: u32,
    /// PostgreSQL connection URL, `postgresql://user@host:5432/db`;
    /// `ROUTERD_STORE_URL` wins over it. Shown with its password masked
    /// (`store_url.rs`).
    #[serde(serialize_with = "store_url::serialize")]
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
            state_max_bytes: PAYLOAD_MAX_BYTES,
            request_timeout_ms: 5000,
            nodes: Vec::new(),
            keyspace: "routerd".to_string(),
            replication_factor: 1,
            url: String::new(),
            pool_size: 4,
        }
    }
}
