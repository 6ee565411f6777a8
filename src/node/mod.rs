//! Assembly of one node: cores, gateway listeners, admin endpoint, signals.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shards::{CorePlacement, Runtime, RuntimeConfig, ShutdownHandle};

use self::listeners::reserve;

use crate::admin::Admin;
use crate::catalog::Catalog;
use crate::cluster::agent::{self, JoinError};
use crate::cluster::membership::Membership;
use crate::cluster::view::ClusterView;
use crate::config::{Config, RingTaskrun};
use crate::gateway::driver::GatewayShared;
use crate::gateway::transport::tls::TlsSetup;
use crate::gateway::transport::Listener;
use crate::gateway_addresses::GatewayAddresses;
use crate::ids::NodeId;
use crate::metrics::NodeMetrics;
use crate::object::{Registry, RegistryError};
use crate::ops::drain::DrainStatus;
use crate::ops::CoreCommands;
use crate::ops::NodePhase;
use crate::route::RouteTable;
use crate::store::{OpenError, Store};

mod core;
mod incarnation_record;
mod listeners;
mod open_files;
mod port;
mod start;

/// How long the cores may take to bind their listeners and report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a start may wait for the store to give it an incarnation (a
/// restart after a crash waits `down_after_ms` of it).
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a node could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot reserve the gateway address {address}: {source}")]
    GatewayBind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot bind the admin address {address}: {source}")]
    AdminBind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot bind the cluster address {address} (core {core}): {source}")]
    ClusterBind {
        address: SocketAddr,
        core: usize,
        source: std::io::Error,
    },
    #[error("cannot join the cluster: {0}")]
    Join(#[from] JoinError),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Store(#[from] OpenError),
    #[error("cannot register this node's services in the catalog: {0}")]
    Catalog(#[from] crate::catalog::AdvertiseError),
    #[error(transparent)]
    Runtime(#[from] shards::RuntimeError),
    #[error("refusing to start: {0}")]
    Secret(#[from] crate::config::SecretError),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] crate::gateway::transport::tls::TlsSetupError),
    #[error("cannot serve these object types and services: {0}")]
    Objects(#[from] RegistryError),
    #[error(
        "refusing to start: {key} would advertise {address}, which other members cannot \
         reach, and the cluster has other members: set {key} to the address they reach \
         this node at"
    )]
    Unreachable {
        key: &'static str,
        address: SocketAddr,
    },
    #[error(
        "refusing to start: {key} would advertise {address}, which no other machine can reach, \
         and this node's links are reached off loopback, so a node of another machine may join \
         and read it: set {key} to the address the others reach this node at (alone, an \
         unspecified address is taken only while cluster.listen, or cluster.advertise, is a \
         loopback address)"
    )]
    UnreachableOffMachine {
        key: &'static str,
        address: SocketAddr,
    },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot serve the scripts: {0}")]
    Scripts(#[from] crate::scripts::ScriptError),
    #[error(transparent)]
    OpenFiles(#[from] open_files::TooFewFiles),
    #[error(transparent)]
    StoreForgot(#[from] incarnation_record::RecordError),
    #[error(
        "refusing to start: cannot read this node's membership row within {waited:?} (last \
         answer: {cause}), and the start must check it against the incarnation this node \
         remembers before it joins"
    )]
    OwnRowUnread { waited: Duration, cause: String },
}

/// The message type cores exchange over the mesh: one rkyv frame in one
/// aligned buffer, read in place by the receiving core without validation.
pub type MeshMessage = wire::frame::FrameBuf;

/// A running node.
pub struct Node {
    runtime: Runtime,
    admin: Admin,
    gateway_address: SocketAddr,
    edges: EdgeAddresses,
    shutdown: ShutdownHandle,
    phase: NodePhase,
    view: Arc<ClusterView>,
}

/// Where the TLS and WebSocket client listeners are bound, if configured.
#[derive(Clone, Copy, Debug, Default)]
struct EdgeAddresses {
    tls: Option<SocketAddr>,
    websocket: Option<SocketAddr>,
}

/// What every core shares.
pub(super) struct NodeShared {
    pub(super) config: Config,
    pub(super) gateway_address: SocketAddr,
    /// The TLS and WebSocket client listeners: where every core binds
    /// each, and what it speaks.
    pub(super) edges: Vec<(SocketAddr, Listener)>,
    pub(super) metrics: Arc<NodeMetrics>,
    pub(super) gateway: GatewayShared,
    pub(super) store: Store,
    pub(super) catalog: Arc<Catalog>,
    pub(super) view: Arc<ClusterView>,
    /// Membership, for core 0 to take and run.
    pub(super) membership: Mutex<Option<Membership>>,
    /// Each core's cluster listener, bound before the join so its address
    /// could be advertised; each core takes its own.
    pub(super) cluster_listeners: Mutex<Vec<Option<std::net::TcpListener>>>,
    /// The object types and services every core registers.
    pub(super) registry: Registry,
    /// The routes they declared, with the system's.
    pub(super) routes: Arc<RouteTable>,
    /// Each core's end of the operations channel; each core takes its own.
    pub(super) ops_commands: Mutex<Vec<Option<CoreCommands>>>,
    pub(super) drain: Arc<DrainStatus>,
}

impl Node {
    /// Starts a node serving the built-in object types, with every core
    /// and the admin endpoint, and returns once every core serves. The
    /// same as `NodeBuilder::new(config).start()`.
    pub fn start(config: Config) -> Result<Node, NodeError> {
        crate::NodeBuilder::new(config).start()
    }

    /// Starts a node on a store the caller opened: tests hand in a memory
    /// store whose faults they control.
    pub fn start_with_store(config: Config, store: Store) -> Result<Node, NodeError> {
        crate::NodeBuilder::new(config).store(store).start()
    }

    /// Starts a node serving what `registry` holds (`NodeBuilder::start`).
    pub(crate) fn start_registered(
        config: Config,
        store: Option<Store>,
        registry: Registry,
        scripts: Option<Arc<crate::scripts::Library>>,
    ) -> Result<Node, NodeError> {
        // Here as well as in `Config::load`: a config built in code (tests,
        // embedders) must not skip the rules for secrets.
        config.check_secrets()?;
        let routes = Arc::new(registry.route_table().map_err(RegistryError::from)?);
        let store = match store {
            Some(store) => store,
            None => Store::open(&config)?,
        };
        let runtime_config = runtime_config(&config);
        let core_count = runtime_config.placement.core_count();
        check_mesh(&config, core_count)?;
        let open_files = open_files_budget(&config, core_count)?;
        let mut metrics = start::node_metrics(&store, &registry, &routes, core_count);
        // Bound before the join: the membership row advertises where the
        // gateway, the admin endpoint and each core's links are.
        let mut bound = start::bind(&config, core_count, &metrics)?;
        let reached = start::Reached::of(&config, &bound);
        let (catalog, joined) = start::join(&config, &store, &registry, &reached, core_count)?;
        let view = start::cluster_view(NodeId(config.node.id), core_count, &joined);
        let shutdown = ShutdownHandle::new();
        let phase = NodePhase::new(shutdown.clone());
        let (ops, ops_commands) = start::ops(
            &config, core_count, &view, &store, &phase, &shutdown, &metrics,
        );
        let parts = start::Parts {
            drain: ops.drain_status().clone(),
            metrics: metrics.clone(),
            config,
            store,
            registry,
            routes,
            catalog,
            view,
            joined,
            ops_commands,
            sessions_cap: open_files.sessions_cap,
        };
        let shared = Arc::new(NodeShared::new(parts, &mut bound));
        let runtime = start::run_cores(&runtime_config, &shutdown, &shared)?;
        metrics.mesh = runtime.mesh_stats().to_vec();
        let admin = start::admin_state(&shared, metrics, ops, &reached, &phase, scripts);
        start::serve(admin, bound, runtime, phase, shutdown)
    }

    /// The node's view of the cluster: members, its incarnation and lease.
    pub fn cluster(&self) -> &Arc<ClusterView> {
        &self.view
    }

    /// The node's phase as `/healthz` reports it; draining sets it.
    pub fn phase(&self) -> &NodePhase {
        &self.phase
    }

    pub fn gateway_address(&self) -> SocketAddr {
        self.gateway_address
    }

    /// Where the TLS client listener is bound (`gateway.tls_listen`).
    pub fn tls_address(&self) -> Option<SocketAddr> {
        self.edges.tls
    }

    /// Where the WebSocket client listener is bound
    /// (`gateway.websocket_listen`).
    pub fn websocket_address(&self) -> Option<SocketAddr> {
        self.edges.websocket
    }

    pub fn admin_address(&self) -> SocketAddr {
        self.admin.address()
    }

    pub fn core_count(&self) -> usize {
        self.runtime.core_count()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Stops cleanly (every object saved and released, `left` written,
    /// exit status 0) on SIGINT, SIGTERM or SIGHUP. SIGHUP's default action
    /// would end the process with nothing saved, and a node started from a
    /// terminal gets one when the terminal closes: here it is a clean stop
    /// like the others (nothing in the config can be reloaded safely while
    /// the node runs).
    pub fn stop_on_signals(&self) -> Result<(), NodeError> {
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ])
        .map_err(NodeError::Signals)?;
        let shutdown = self.shutdown.clone();
        std::thread::Builder::new()
            .name("routerd-signals".to_string())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    tracing::info!(signal, "stopping");
                    shutdown.trigger();
                }
            })
            .map_err(NodeError::Signals)?;
        Ok(())
    }

    /// Waits until every core has stopped (after a signal or
    /// [`ShutdownHandle::trigger`]).
    pub fn wait(self) -> Result<(), NodeError> {
        let result = self.runtime.join();
        drop(self.admin);
        Ok(result?)
    }
}

/// The address a listener bound at `bound` is advertised at: `configured`
/// (its port taken from `bound` when it is 0), or `bound` itself.
fn advertised(configured: Option<SocketAddr>, bound: SocketAddr) -> SocketAddr {
    match configured {
        Some(mut address) => {
            if address.port() == 0 {
                address.set_port(bound.port());
            }
            address
        }
        None => bound,
    }
}

/// Every gateway listener as the membership row advertises it: the plain
/// one at `plain`, each TLS or WebSocket one at its own bound port, on the
/// host of `gateway.advertise` when that is set (a node behind an address
/// of its own is reached there on every port), else where it bound.
fn advertised_listeners(
    plain: SocketAddr,
    configured: Option<SocketAddr>,
    edges: &[(SocketAddr, Listener)],
) -> GatewayAddresses {
    let mut addresses = GatewayAddresses::plain(plain.to_string());
    for (bound, listener) in edges {
        let mut reached = *bound;
        if let Some(configured) = configured {
            reached.set_ip(configured.ip());
        }
        addresses.set(listener.advertised_as(), reached.to_string());
    }
    addresses
}

/// Raises the open-file limit as far as the process may and sizes the
/// client sessions to fit it (`open_files.rs`).
fn open_files_budget(config: &Config, cores: usize) -> Result<open_files::OpenFiles, NodeError> {
    let limit = open_files::raise_soft_limit().unwrap_or_else(|error| {
        // Unreadable: count on the common default rather than on nothing.
        tracing::warn!(%error, "cannot read the open-file limit; assuming 1024");
        1024
    });
    let store_connections = match config.store.backend {
        crate::config::StoreBackend::Postgres => config.store.pool_size,
        _ => 0,
    };
    let sessions_max = config.gateway.sessions_max;
    let files = open_files::OpenFiles::of(limit, cores, store_connections, sessions_max)?;
    // Said at every start: with the default sessions_max the limit sets
    // the cap on most machines, and an operator sizing a node needs both.
    tracing::info!(
        open_files = files.limit,
        kept = files.kept,
        sessions_max,
        sessions_cap = files.sessions_cap,
        "client sessions take what the open-file limit (ulimit -n) leaves after what the node \
         keeps for links, the store and the admin endpoint"
    );
    Ok(files)
}

/// Refuses, before anything is bound or joined, a `cores.mesh_queue_max`
/// whose channels between `core_count` cores would take more memory than
/// the runtime allows (they are allocated when it starts), naming the key
/// and the largest bound this many cores may have.
fn check_mesh(config: &Config, core_count: usize) -> Result<(), crate::config::ConfigError> {
    let queue_max = config.cores.mesh_queue_max;
    let bytes = shards::mesh_bytes::<MeshMessage>(core_count, queue_max);
    if bytes <= shards::MESH_BYTES_MAX {
        return Ok(());
    }
    let per_slot = shards::mesh_bytes::<MeshMessage>(core_count, 1).max(1);
    let most = shards::MESH_BYTES_MAX / per_slot;
    Err(crate::config::ConfigError::Invalid(format!(
        "cores.mesh_queue_max = {queue_max} on {core_count} cores would take {} MiB up front \
         (each of the {} channels between two cores holds that many slots), over {} MiB: set \
         it to at most {most} on this many cores, or run fewer (cores.count, cores.cpus)",
        bytes >> 20,
        core_count * core_count.saturating_sub(1),
        shards::MESH_BYTES_MAX >> 20,
    )))
}

fn runtime_config(config: &Config) -> RuntimeConfig {
    let placement = match &config.cores.cpus {
        Some(cpus) => CorePlacement::Cpus(cpus.clone()),
        None if config.cores.count == 0 => {
            CorePlacement::Count(shards::allowed_cpus().len().max(1))
        }
        None => CorePlacement::Count(config.cores.count),
    };
    let mut runtime = RuntimeConfig::new(placement);
    runtime.ring_depth = config.cores.ring_depth;
    runtime.ring_taskrun = match config.cores.ring_taskrun {
        RingTaskrun::Defer => shards::TaskRun::Defer,
        RingTaskrun::Coop => shards::TaskRun::Coop,
    };
    runtime.recv_buffers = config.cores.recv_buffers;
    runtime.recv_buffer_bytes = config.cores.recv_buffer_bytes;
    runtime.recv_buffers_per_conn_max = config.cores.recv_buffers_per_conn_max;
    runtime.registered_files = config.cores.registered_files;
    runtime.spin_before_park = Duration::from_micros(config.cores.spin_before_park_us);
    runtime.latency_shares = config.cores.latency_shares;
    runtime.throughput_shares = config.cores.throughput_shares;
    runtime.mesh_queue_max = config.cores.mesh_queue_max;
    runtime.shutdown_deadline = Duration::from_millis(config.cores.shutdown_deadline_ms);
    runtime
}

impl NodeShared {
    /// The cores never ran: take this incarnation out of the cluster now,
    /// so a retry does not wait for it to be declared down.
    fn leave_unstarted(&self) {
        let membership = self.membership.lock().ok().and_then(|mut m| m.take());
        if let Some(membership) = membership {
            agent::leave_blocking(&self.store, membership);
        }
    }
}

/// Reserves the TLS and WebSocket listeners' addresses (port 0: any free
/// one, the same on every core) and says what each speaks. The
/// reservations are held until the cores have bound.
#[allow(clippy::type_complexity)]
fn edge_listeners(
    config: &Config,
    tls: Option<&TlsSetup>,
) -> Result<
    (
        Vec<(SocketAddr, Listener)>,
        EdgeAddresses,
        Vec<std::net::TcpListener>,
    ),
    NodeError,
> {
    let gateway = &config.gateway;
    let mut edges = Vec::new();
    let mut addresses = EdgeAddresses::default();
    let mut reservations = Vec::new();
    let mut bind = |address: SocketAddr| -> Result<SocketAddr, NodeError> {
        let reservation = reserve(address)?;
        let bound = reservation
            .local_addr()
            .map_err(|source| NodeError::GatewayBind { address, source })?;
        reservations.push(reservation);
        Ok(bound)
    };
    if let (Some(address), Some(tls)) = (gateway.tls_listen, tls) {
        let bound = bind(address)?;
        addresses.tls = Some(bound);
        edges.push((bound, Listener::Tls(tls.gateway.clone())));
    }
    if let Some(address) = gateway.websocket_listen {
        let bound = bind(address)?;
        addresses.websocket = Some(bound);
        let tls = tls.filter(|_| gateway.websocket_tls);
        edges.push((
            bound,
            Listener::WebSocket {
                tls: tls.map(|tls| tls.websocket.clone()),
                origins: gateway.websocket_origins.clone().into(),
            },
        ));
    }
    Ok((edges, addresses, reservations))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway_addresses::Transport;

    /// The mesh's channels are allocated at start, C·(C−1) of them: a
    /// bound that fits a few cores is refused on many, naming the key and
    /// what would fit.
    #[test]
    fn a_mesh_queue_bound_too_large_for_the_cores_is_refused() {
        let mut config = Config::default();
        config.cores.mesh_queue_max = crate::config::MESH_QUEUE_MAX;
        check_mesh(&config, 2).unwrap();
        check_mesh(&config, 16).unwrap();
        let error = check_mesh(&config, 64).unwrap_err().to_string();
        assert!(
            error.contains("cores.mesh_queue_max = 65536 on 64 cores"),
            "{error}"
        );
        let most: usize = error
            .split("at most ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the largest that fits: {error}"));
        config.cores.mesh_queue_max = most;
        check_mesh(&config, 64).unwrap();
        config.cores.mesh_queue_max = most + 1;
        assert!(check_mesh(&config, 64).is_err());
        // The default fits the cores of a large machine.
        check_mesh(&Config::default(), 128).unwrap();
    }

    #[test]
    fn edge_listeners_are_advertised_on_the_advertised_host_with_their_own_port() {
        let websocket = Listener::WebSocket {
            tls: None,
            origins: Vec::new().into(),
        };
        let bound_ws: SocketAddr = "0.0.0.0:7480".parse().unwrap();
        let edges = [(bound_ws, websocket)];
        let plain: SocketAddr = "10.0.0.5:7400".parse().unwrap();
        let behind = advertised_listeners(plain, Some(plain), &edges);
        assert_eq!(behind.get(Transport::Plain), Some("10.0.0.5:7400"));
        assert_eq!(behind.get(Transport::Ws), Some("10.0.0.5:7480"));
        assert_eq!(behind.get(Transport::Tls), None);
        // Without gateway.advertise each listener is reached where it bound.
        let bound: SocketAddr = "127.0.0.1:7400".parse().unwrap();
        let local = advertised_listeners(bound, None, &edges);
        assert_eq!(local.get(Transport::Ws), Some("0.0.0.0:7480"));
    }
}
