//! The node's configuration: one TOML file, every limit and timer a key with
//! a documented default. Unknown keys are errors naming the key, so a typo
//! never silently falls back to a default.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod address;
mod body_codec;
mod cluster;
mod load;
mod scripts;
mod secret;
mod store;
mod store_url;
#[cfg(test)]
mod tests;

pub use self::body_codec::BodyCodec;
pub use self::cluster::{
    ClusterConfig, CLUSTER_NAME_LEN_MAX, CLUSTER_SECRET_ENV, DEVELOPMENT_CLUSTER_SECRET,
    REBALANCE_CONCURRENCY_MAX,
};
pub use self::scripts::ScriptsConfig;
use self::secret::SecretKey;
pub use self::secret::{Secret, SecretError, MASK};
pub use self::store::{
    SqliteSynchronous, StoreBackend, StoreConfig, POSTGRES_POOL_SIZE_MAX,
    STORE_REQUEST_TIMEOUT_MAX_MS, STORE_REQUEST_TIMEOUT_MIN_MS,
};

/// The largest request body (`gateway.body_max_bytes`) and object state
/// (`store.state_max_bytes`) a config may allow: what one frame between
/// nodes carries with its headers (`wire::frame::MAX_FRAME_LEN`, less a
/// margin far above a routed request's or a transfer's own fields). A
/// request to an object on another node, or a transfer, of more could
/// never be sent: the same request would work or fail by where its object
/// lives.
pub const PAYLOAD_MAX_BYTES: usize = wire::frame::MAX_FRAME_LEN - 4096;

/// The shortest `router.object_save_interval_ms`,
/// `router.object_free_timeout_ms` and `router.cache_free_timeout_ms`: the
/// router sweeps every entry of a core at a quarter of the shortest, and a
/// save interval near zero saves every object on every sweep.
pub const ROUTER_SWEEP_TIMERS_MIN_MS: u64 = 100;

/// The shortest `cores.shutdown_deadline_ms`. A clean stop saves and
/// releases every object (a store write for each batch of them) within
/// four fifths of the deadline, then writes `left` before nineteen
/// twentieths of it, and the cores end at the deadline whatever is still
/// in flight: under a second, even a store that answers at once in a few
/// milliseconds leaves a node with many objects unreleased, its unsaved
/// changes lost to the node that claims them.
pub const SHUTDOWN_DEADLINE_MIN_MS: u64 = 1_000;

/// The largest `cores.mesh_queue_max`. Every core-to-core channel holds
/// that many slots from the start (C·(C−1) channels on C cores); a node
/// also refuses a bound whose channels would take more than
/// `shards::MESH_BYTES_MAX` on its number of cores.
pub const MESH_QUEUE_MAX: usize = 65_536;

/// The effective configuration of one node.
/// The whole configuration: one section a concern, as the TOML file has them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[node]`: this node's identity and data directory.
    pub node: NodeConfig,
    /// `[cores]`: how many cores, their rings and buffers.
    pub cores: CoresConfig,
    /// `[gateway]`: the client listener and the session limits.
    pub gateway: GatewayConfig,
    /// `[admin]`: the admin HTTP endpoint.
    pub admin: AdminConfig,
    /// `[auth]`: login tokens and the duplicate-login policy.
    pub auth: AuthConfig,
    /// `[store]`: the ownership store's backend and its limits.
    pub store: StoreConfig,
    /// `[cluster]`: membership timers and the links between nodes.
    pub cluster: ClusterConfig,
    /// `[router]`: route caches, saves, retries and their bounds.
    pub router: RouterConfig,
    /// `[services]`: the built-in objects' settings (`services.player`,
    /// `services.room`) and those of the types and services a program
    /// registers (`services.<name>`).
    pub services: ServicesConfig,
    /// `[scripts]`: the Luau object types the node loads, and their bounds.
    pub scripts: ScriptsConfig,
}

/// The largest node id: the SQL stores keep ids as signed 64-bit integers
/// and page the membership table in their order, which is the ids' order
/// only up to here.
pub const NODE_ID_MAX: u64 = i64::MAX as u64;

/// `[node]`: who this node is and where it keeps its files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id in the cluster; never 0 (0 means "no owner"), at
    /// most `NODE_ID_MAX`.
    pub id: u64,
    /// Where the node keeps its files: the SQLite store by default, and
    /// `node-<id>.incarnation`, the incarnation of its last run, by which
    /// it knows a store that never saw it.
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
    /// Receive buffers one connection may hold at once: at the bound its
    /// receive stops until its reader gives one back, and bytes a burst
    /// brought past it are copied out of the ring (counted), so one slow
    /// reader cannot take the buffers of the core's other connections.
    pub recv_buffers_per_conn_max: u32,
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
    /// fail and are counted; also the messages of a core's objects to
    /// objects of that core that may wait before the next one does. Each
    /// channel's slots are allocated at start: 1 to `MESH_QUEUE_MAX`, and
    /// less on many cores (`shards::MESH_BYTES_MAX` over every channel).
    pub mesh_queue_max: usize,
    /// How long cores may take to drain their work at shutdown: saving
    /// and releasing every object, then writing `left`. At least
    /// `SHUTDOWN_DEADLINE_MIN_MS`.
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
            recv_buffers_per_conn_max: 32,
            registered_files: 16 * 1024,
            spin_before_park_us: 0,
            latency_shares: 1000,
            throughput_shares: 100,
            mesh_queue_max: 4096,
            shutdown_deadline_ms: 5000,
        }
    }
}

/// `[gateway]`: the client listener and what one session may do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Client listen address; every core binds it with SO_REUSEPORT. A
    /// host name is resolved when the config is read.
    #[serde(deserialize_with = "address::deserialize")]
    pub listen: SocketAddr,
    /// The plain listener's address as clients reach it: what the
    /// membership row advertises and `sys.redirect` names. Default: the
    /// bound address; port 0: the bound port. Required (an address that is
    /// not `0.0.0.0` or `::`) when `listen` is unspecified and the cluster
    /// has other members, or this node's links are reached off loopback.
    pub advertise: Option<SocketAddr>,
    /// Largest accepted frame body, in bytes.
    pub body_max_bytes: u32,
    /// Unanswered requests one session may have.
    pub inflight_max: u32,
    /// A request unanswered this long gets ERROR TIMEOUT from the gateway.
    pub request_timeout_ms: u64,
    /// A connection that sends nothing this long is closed.
    pub idle_timeout_ms: u64,
    /// Sessions this node holds at once, over all cores; more are refused.
    /// It bounds the detached sessions waiting for a resume as well, apart
    /// (docs/protocol.md, 8).
    pub sessions_max: u32,
    /// Frames waiting to be written to one session; a session whose queue
    /// is full is a slow reader and is closed.
    pub send_queue_max: u32,
    /// Bytes waiting to be written to one session; a session whose queue
    /// holds more is a slow reader and is closed, as at `send_queue_max`.
    pub send_queue_bytes_max: u32,
    /// Requests one session may send a second, sustained; one more is
    /// answered OVERLOADED before it reaches a service. 0: unlimited.
    pub session_requests_per_sec_max: u32,
    /// Requests one session may send at once above the sustained rate (the
    /// depth of its token bucket).
    pub session_request_burst_max: u32,
    /// A second client listener speaking TLS (rustls, records in
    /// userspace), the same protocol inside; none when unset.
    pub tls_listen: Option<SocketAddr>,
    /// The certificate chain (PEM) of the TLS listeners; re-read when the
    /// file changes (checked every `tls_reload_interval_ms`).
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) matching `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// A TLS connection whose whole ClientHello has not arrived this long
    /// after accept is closed (a silent or dribbling client holds a
    /// handshake slot no longer).
    pub tls_client_hello_timeout_ms: u64,
    /// A TLS handshake not finished this long after accept is closed.
    pub tls_handshake_timeout_ms: u64,
    /// TLS handshakes one core runs at once; a connection accepted past
    /// it evicts (closes) the oldest one still handshaking.
    pub tls_handshakes_max: u32,
    /// How often the certificate and key files are checked for a change.
    pub tls_reload_interval_ms: u64,
    /// A client listener speaking WebSocket (RFC 6455, upgrade on `/`);
    /// none when unset.
    pub websocket_listen: Option<SocketAddr>,
    /// The WebSocket listener speaks TLS (`wss://`) with the certificate
    /// of `tls_cert_file`.
    pub websocket_tls: bool,
    /// `Origin` values a WebSocket upgrade may carry; empty: any.
    pub websocket_origins: Vec<String>,
    /// A WebSocket connection whose upgrade request has not been read
    /// whole this long after accept (over TLS: after the handshake) is
    /// closed.
    pub websocket_upgrade_timeout_ms: u64,
    /// Places sessions on their player's node: a login answered by
    /// another up node (the player's object lives there) is followed by a
    /// `sys.redirect` to that node's listener of the session's transport,
    /// once per session, so steady-state requests stay on one node. The
    /// session is not closed: a client that stays is served as before.
    pub place_sessions: bool,
    /// How the clients of `listen` encode the bodies of `json` routes:
    /// `"none"` (JSON, passed through) or `"msgpack"` (docs/scripts.md).
    pub body_codec: BodyCodec,
    /// The same for `tls_listen`.
    pub tls_body_codec: BodyCodec,
    /// The same for `websocket_listen`.
    pub websocket_body_codec: BodyCodec,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            advertise: None,
            body_max_bytes: 65536,
            inflight_max: 1024,
            request_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            sessions_max: 100_000,
            send_queue_max: 4096,
            // A session that stops reading holds at most about twice this
            // (the queue, and the batch whose send waits): 10,000 of them
            // about 5 GiB, under a tenth of the 64 GB node
            // docs/capacity.md sizes (docs/protocol.md, section 8).
            send_queue_bytes_max: 256 * 1024,
            // Generous: one session of the benchmarks' busiest shape (16
            // sessions at pipeline 16, about 2.2M requests a second in all)
            // sends about 140,000 a second.
            session_requests_per_sec_max: 250_000,
            // Two windows of inflight_max: a client that pipelines up to
            // its in-flight bound is never refused for bursting.
            session_request_burst_max: 2 * 1024,
            tls_listen: None,
            tls_cert_file: None,
            tls_key_file: None,
            // A ClientHello is one packet a round trip after the TCP
            // handshake: 1.5 s leaves room for a slow mobile network.
            tls_client_hello_timeout_ms: 1_500,
            tls_handshake_timeout_ms: 10_000,
            tls_handshakes_max: 256,
            tls_reload_interval_ms: 5_000,
            websocket_listen: None,
            websocket_tls: false,
            websocket_origins: Vec::new(),
            websocket_upgrade_timeout_ms: 2_000,
            place_sessions: false,
            body_codec: BodyCodec::None,
            tls_body_codec: BodyCodec::None,
            websocket_body_codec: BodyCodec::None,
        }
    }
}

/// `[admin]`: where the admin endpoint listens and who may change things
/// through it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// HTTP listener for `/healthz`, `/livez`, `/readyz`, `/metrics` and
    /// the operations. A host name is resolved when the config is read.
    #[serde(deserialize_with = "address::deserialize")]
    pub listen: SocketAddr,
    /// The bearer token every mutating call (a transfer, a drain) must
    /// present as `Authorization: Bearer <token>`; `ROUTERD_ADMIN_TOKEN`
    /// wins. Required when `listen` is off loopback; every node of a
    /// cluster sets the same one (a node forwards calls to another with
    /// its own).
    pub token: Option<Secret>,
    /// The address other nodes and the CLI reach the endpoint at, as the
    /// membership row advertises it; default: the bound address. Port 0:
    /// the bound port.
    pub advertise: Option<SocketAddr>,
    /// Host names a request may name in `Host` besides the endpoint's own
    /// addresses, loopback and `localhost` (`"*"`: any); another is
    /// refused 421, so a DNS-rebinding page reads nothing.
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://ops.example.com`) whose pages may make mutating
    /// calls besides the endpoint's own (`"*"`: any); another is refused
    /// 403 (CSRF).
    pub allowed_origins: Vec<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            token: None,
            advertise: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// The environment variable that wins over `admin.token`.
pub const ADMIN_TOKEN_ENV: &str = "ROUTERD_ADMIN_TOKEN";

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

/// `[auth]`: how logins are verified and what a second login does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HMAC-SHA256 key of login tokens. `ROUTERD_AUTH_SECRET` wins over it.
    pub secret: Secret,
    /// What a second login of a logged-in player does.
    pub duplicate_login: DuplicateLogin,
    /// A resumable session's wait for its client (docs/protocol.md, 12); 0: off.
    pub resume_window_ms: u64,
    /// Pushes a resumable session keeps for a resume.
    pub resume_pushes_max: u32,
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
            resume_window_ms: 30_000,
            resume_pushes_max: 1024,
        }
    }
}

/// The router's timers and limits, with their defaults.
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
    /// Pull attempts of one `mutable_cache` / `mutable_object` call
    /// (`retry_max_ttl` in docs/origins.md: a count of attempts, not a time).
    pub pull_attempts_max: u32,
    /// Forwarding hops a routed request may take (`transfer_max_ttl` in
    /// docs/origins.md: a count of hops, not a time).
    pub forward_hops_max: u32,
    /// Requests queued behind one migrating object; more are refused.
    pub pending_queue_max: usize,
    /// Objects and caches one core holds; past it new objects are refused.
    pub entries_per_core_max: usize,
    /// How long a transfer's old owner waits for the target's
    /// `router_transfer` ack before draining its pending queue anyway.
    pub transfer_ack_timeout_ms: u64,
    /// Answers of keyed requests an object remembers per requesting player
    /// (docs/protocol.md, section 12); 0 remembers none.
    pub request_keys_max: usize,
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
            request_keys_max: 128,
        }
    }
}

/// When an object's changes become durable.
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

/// `[services]`: the built-in objects' settings, and a section of its own
/// for each object type or service a program registers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServicesConfig {
    /// `[services.player]`.
    pub player: PlayerConfig,
    /// `[services.room]`.
    pub room: RoomConfig,
    /// `[services.<name>]` of a registered type or service (`guild`): its
    /// own keys, which it reads with [`ServicesConfig::section`]. A section
    /// whose name nothing registered is refused when the node starts
    /// ([`ServicesConfig::check_registered`]), so a typo is not ignored.
    #[serde(flatten)]
    pub custom: std::collections::BTreeMap<String, toml::Table>,
}

impl ServicesConfig {
    /// `[services.<name>]` read as `T` (its `Default` when the file has no
    /// such section); the error names the section and the bad key.
    pub fn section<T>(&self, name: &str) -> Result<T, ConfigError>
    where
        T: serde::de::DeserializeOwned + Default,
    {
        match self.custom.get(name) {
            None => Ok(T::default()),
            Some(table) => table.clone().try_into().map_err(|error: toml::de::Error| {
                ConfigError::Invalid(format!("[services.{name}]: {}", error.message()))
            }),
        }
    }

    /// Refuses a `[services.<name>]` section whose name is none of
    /// `registered` (the node's object types and services).
    pub fn check_registered(&self, registered: &[&str]) -> Result<(), ConfigError> {
        match self
            .custom
            .keys()
            .find(|name| !registered.contains(&name.as_str()))
        {
            None => Ok(()),
            Some(name) => Err(ConfigError::Invalid(format!(
                "[services.{name}] names no registered object type or service (this node \
                 registers {})",
                registered.join(", ")
            ))),
        }
    }
}

/// `[services.player]`: the player object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlayerConfig {
    /// When a player's changes become durable.
    pub persist: Persist,
}

/// `[services.room]`: the room object and its bounds.
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
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file named.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration (an unknown key, a
    /// wrong type); `message` names the key.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file named.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The values do not pass validation; the message says which and why.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// A secret is missing or unsafe for a networked node.
    #[error("unsafe config: {0}")]
    Secret(#[from] SecretError),
}
