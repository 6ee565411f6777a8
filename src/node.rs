//! Assembly of one node: cores, gateway listeners, admin endpoint, signals.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::{CorePlacement, Runtime, RuntimeConfig, ShutdownHandle};

use crate::admin::{Admin, AdminState, NodePhase};
use crate::catalog::{Catalog, CoreCatalog};
use crate::cluster::agent::{self, Agent, AgentParts, JoinError};
use crate::cluster::follow::Follower;
use crate::cluster::incoming::Incoming;
use crate::cluster::membership::{Advertisement, Membership};
use crate::cluster::outgoing::{CoreLinks, LinkSettings, SUSPECT_AFTER_PINGS};
use crate::cluster::view::{ClusterView, Peer, Standing};
use crate::config::{Config, RingTaskrun};
use crate::gateway::driver::{self, GatewayShared};
use crate::gateway::routes::RouteTable;
use crate::gateway::GatewayHandle;
use crate::metrics::NodeMetrics;
use crate::object::{Registry, RegistryError};
use crate::ops::drain::DrainStatus;
use crate::ops::{self, CoreCommands, CoreOps, Ops, OpsParts};
use crate::router::driver::{clock, DriverParts, FrameSource, RouterDriver};
use crate::router::RouterCore;
use crate::services::port::{PortParts, ServicesPort};
use crate::store::{MemberState, NodeId, OpenError, Store};

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
    #[error("cannot serve these object types and services: {0}")]
    Objects(#[from] RegistryError),
}

/// The message type cores exchange over the mesh: one rkyv frame in one
/// aligned buffer, read in place by the receiving core without validation.
pub type MeshMessage = wire::frame::FrameBuf;

/// A running node.
pub struct Node {
    runtime: Runtime,
    admin: Admin,
    gateway_address: SocketAddr,
    shutdown: ShutdownHandle,
    phase: NodePhase,
    view: Arc<ClusterView>,
}

/// What every core shares.
struct NodeShared {
    config: Config,
    gateway_address: SocketAddr,
    metrics: Arc<NodeMetrics>,
    gateway: GatewayShared,
    store: Store,
    catalog: Arc<Catalog>,
    view: Arc<ClusterView>,
    /// Membership, for core 0 to take and run.
    membership: Mutex<Option<Membership>>,
    /// Each core's cluster listener, bound before the join so its address
    /// could be advertised; each core takes its own.
    cluster_listeners: Mutex<Vec<Option<std::net::TcpListener>>>,
    /// The object types and services every core registers.
    registry: Registry,
    /// The routes they declared, with the system's.
    routes: Arc<RouteTable>,
    /// Each core's end of the operations channel; each core takes its own.
    ops_commands: Mutex<Vec<Option<CoreCommands>>>,
    drain: Arc<DrainStatus>,
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
        let mut metrics = NodeMetrics::with_routes(core_count, routes.clone());
        metrics.store = Some(store.probe());
        // Port 0 asks for any free port; every core must then bind the same
        // one, so reserve it first and hold it until the cores have bound.
        let reservation = reserve(config.gateway.listen)?;
        let gateway_address =
            reservation
                .local_addr()
                .map_err(|source| NodeError::GatewayBind {
                    address: config.gateway.listen,
                    source,
                })?;
        // Bound before the join: the membership row advertises where the
        // admin endpoint and each core's links are.
        let admin_listener =
            std::net::TcpListener::bind(config.admin.listen).map_err(|source| {
                NodeError::AdminBind {
                    address: config.admin.listen,
                    source,
                }
            })?;
        let admin_address = admin_listener
            .local_addr()
            .map_err(|source| NodeError::AdminBind {
                address: config.admin.listen,
                source,
            })?;
        let cluster_listeners = bind_cluster(&config, core_count)?;
        // The node's own services feed the catalog's local routes; the
        // remote registry is fed by cluster membership.
        let catalog = Arc::new(Catalog::new());
        let actors = registry.local_actors(config.node.id, &gateway_address.to_string());
        for actor in actors.clone() {
            catalog.register_routes(actor)?;
        }
        let advertisement = Advertisement {
            gateway: gateway_address.to_string(),
            admin: admin_address.to_string(),
            cluster: cluster_listeners
                .iter()
                .enumerate()
                .map(|(core, (_, port))| config.cluster.advertised(core, *port).to_string())
                .collect(),
            core_count: core_count as u32,
            actors: agent::advertised(&actors),
        };
        let me = NodeId(config.node.id);
        let membership = Membership::new(me, &config.cluster, advertisement);
        let joined = agent::join(&store, membership, JOIN_TIMEOUT)?;
        tracing::info!(
            node = me.0,
            incarnation = joined.incarnation,
            "joined the cluster"
        );
        let view = Arc::new(ClusterView::new(
            me,
            core_count,
            Standing {
                incarnation: joined.incarnation,
                lease_until_ms: joined.lease_until_ms,
                fenced: false,
                state: MemberState::Joining,
            },
        ));
        view.update(|_, peers| {
            for row in &joined.peers {
                peers.insert(row.node_id, Peer::from_row(row));
            }
        });
        for row in &joined.peers {
            agent::feed_catalog(&catalog, row);
        }
        let shutdown = ShutdownHandle::new();
        let phase = NodePhase::new(shutdown.clone());
        let (ops, ops_commands) = Ops::new(OpsParts {
            core_count,
            view: view.clone(),
            store: store.clone(),
            phase: phase.clone(),
            shutdown: shutdown.clone(),
        });
        let shared = Arc::new(NodeShared {
            store,
            catalog,
            config: config.clone(),
            gateway_address,
            metrics: Arc::new(metrics.clone()),
            gateway: GatewayShared {
                node_id: config.node.id,
                boot_incarnation: joined.incarnation,
                config: config.gateway.clone(),
                // `Config::load` already let ROUTERD_AUTH_SECRET win.
                secret: config.auth.secret.clone().into_bytes(),
                sessions_open: Arc::new(AtomicU32::new(0)),
                routes: routes.clone(),
            },
            view: view.clone(),
            membership: Mutex::new(Some(joined.membership)),
            cluster_listeners: Mutex::new(
                cluster_listeners
                    .into_iter()
                    .map(|(listener, _)| Some(listener))
                    .collect(),
            ),
            registry,
            routes,
            ops_commands: Mutex::new(ops_commands.into_iter().map(Some).collect()),
            drain: ops.drain_status().clone(),
        });
        let runtime = Runtime::start::<MeshMessage, _, _>(&runtime_config, shutdown.clone(), {
            let shared = shared.clone();
            move |core| core_main(core, shared.clone())
        });
        let runtime = match runtime {
            Ok(runtime) => runtime,
            Err(error) => {
                shared.leave_unstarted();
                return Err(error.into());
            }
        };
        metrics.mesh = runtime.mesh_stats().to_vec();
        let admin = Admin::serve(
            admin_listener,
            AdminState {
                phase: phase.clone(),
                metrics: Arc::new(metrics),
                cluster: Some(view.clone()),
                store: Some(shared.store.clone()),
                ops: Some(ops),
            },
        );
        let admin = match admin {
            Ok(admin) => admin,
            Err(source) => {
                // The cores are up: stop them rather than leave them behind.
                shutdown.trigger();
                let _ = runtime.join();
                return Err(NodeError::AdminBind {
                    address: config.admin.listen,
                    source,
                });
            }
        };
        if let Err(error) = runtime.wait_ready(READY_TIMEOUT) {
            shutdown.trigger();
            let _ = runtime.join();
            return Err(error.into());
        }
        drop(reservation);
        view.request_state(MemberState::Up);
        phase.set_serving();
        Ok(Node {
            runtime,
            admin,
            gateway_address,
            shutdown,
            phase,
            view,
        })
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

    pub fn admin_address(&self) -> SocketAddr {
        self.admin.address()
    }

    pub fn core_count(&self) -> usize {
        self.runtime.core_count()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Stops on SIGINT or SIGTERM.
    pub fn stop_on_signals(&self) -> Result<(), NodeError> {
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
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

/// Binds each core's cluster listener: `cluster.listen`'s port + core, or
/// any free port each (port 0). Returns each with the port it bound.
fn bind_cluster(
    config: &Config,
    core_count: usize,
) -> Result<Vec<(std::net::TcpListener, u16)>, NodeError> {
    (0..core_count)
        .map(|core| {
            let address = config.cluster.listen_for(core);
            let bind = || -> std::io::Result<(std::net::TcpListener, u16)> {
                let socket = socket2::Socket::new(
                    socket2::Domain::for_address(address),
                    socket2::Type::STREAM,
                    None,
                )?;
                socket.set_reuse_address(true)?;
                socket.bind(&address.into())?;
                socket.listen(1024)?;
                let listener: std::net::TcpListener = socket.into();
                let port = listener.local_addr()?.port();
                Ok((listener, port))
            };
            bind().map_err(|source| NodeError::ClusterBind {
                address,
                core,
                source,
            })
        })
        .collect()
}

/// Binds `address` with SO_REUSEPORT so the cores can bind it beside this
/// reservation.
fn reserve(address: SocketAddr) -> Result<std::net::TcpListener, NodeError> {
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_port(true)?;
        socket.set_reuse_address(true)?;
        socket.bind(&address.into())?;
        Ok(socket.into())
    };
    bind().map_err(|source| NodeError::GatewayBind { address, source })
}

async fn core_main(mut core: shards::Core<MeshMessage>, shared: Arc<NodeShared>) {
    let listener = match shards::net::TcpListener::bind(shared.gateway_address) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(core = core.id(), %error, "cannot bind the gateway listener");
            return;
        }
    };
    let cluster_listener = shared
        .cluster_listeners
        .lock()
        .ok()
        .and_then(|mut listeners| listeners.get_mut(core.id())?.take())
        .map(shards::net::TcpListener::from_std);
    let cluster_listener = match cluster_listener {
        Some(Ok(listener)) => listener,
        other => {
            let error = other.and_then(Result::err);
            tracing::error!(
                core = core.id(),
                ?error,
                "cannot serve the cluster listener"
            );
            return;
        }
    };
    let metrics = shared.metrics.cores[core.id()].clone();
    let gateway = GatewayHandle::new(
        core.id(),
        core.mesh().clone(),
        &shared.gateway,
        metrics.clone(),
    );
    let cluster = &shared.config.cluster;
    let settings = LinkSettings {
        cluster: cluster.name.clone(),
        secret: cluster.secret.as_bytes().to_vec(),
        me: NodeId(shared.config.node.id),
        core: core.id(),
        queue_max: cluster.link_queue_max,
        ping_interval: Duration::from_millis(cluster.heartbeat_interval_ms),
        // As long as a silent peer may stay linked: a handshake on a live
        // network takes a round trip or two.
        handshake_timeout: Duration::from_millis(cluster.heartbeat_interval_ms)
            * SUSPECT_AFTER_PINGS,
    };
    let links = CoreLinks::new(settings.clone(), shared.view.clone(), metrics.clone());
    let router = RouterDriver::new(DriverParts {
        node: NodeId(shared.config.node.id),
        boot_incarnation: shared.gateway.boot_incarnation,
        core_id: core.id(),
        core_count: core.count(),
        core: router_core(
            &shared.config,
            core.id(),
            shared.gateway.boot_incarnation,
            &shared.registry,
        ),
        store: shared.store.clone(),
        mesh: core.mesh().clone(),
        links: Rc::new(links.clone()),
        metrics: metrics.clone(),
        request_timeout_ms: shared.config.gateway.request_timeout_ms,
    });
    links.set_router_hooks(
        Rc::new({
            let router = router.clone();
            move |node, frame| router.send_failed(node, frame)
        }),
        Rc::new({
            let router = router.clone();
            move |node| router.link_lost(node)
        }),
    );
    let _port = ServicesPort::connect(PortParts {
        router: router.clone(),
        gateway: gateway.clone(),
        catalog: CoreCatalog::new(shared.catalog.clone()),
        routes: shared.routes.clone(),
        view: shared.view.clone(),
    });
    if let Some(inbox) = core.take_inbox() {
        let (gateway, router) = (gateway.clone(), router.clone());
        inbox
            .serve(Rc::new(move |from, frame| {
                let unhandled = gateway
                    .handle_mesh(frame)
                    .and_then(|frame| router.handle_frame(FrameSource::Core, frame));
                if let Some(frame) = unhandled {
                    tracing::warn!(from, message = ?frame.message(), "mesh frame nobody handles");
                }
            }))
            .detach();
    }
    let incoming = Incoming::new(
        settings,
        shared.view.clone(),
        Rc::new({
            let (gateway, router, metrics) = (gateway.clone(), router.clone(), metrics.clone());
            move |from, frame| {
                let unhandled = gateway
                    .handle_mesh(frame)
                    .and_then(|frame| router.handle_frame(FrameSource::Node(from), frame));
                if let Some(frame) = unhandled {
                    // Valid, but not a message one node sends another.
                    metrics.cluster.frames_invalid.inc();
                    tracing::warn!(node = from.0, message = ?frame.message(), "link frame nobody handles");
                }
            }
        }),
        links.clone(),
        metrics.clone(),
    );
    shards::spawn(incoming.clone().serve(cluster_listener)).detach();
    let commands = shared
        .ops_commands
        .lock()
        .ok()
        .and_then(|mut commands| commands.get_mut(core.id())?.take());
    if let Some(commands) = commands {
        let core_ops = CoreOps {
            core: core.id(),
            core_count: core.count(),
            router: router.clone(),
            gateway: gateway.clone(),
            view: shared.view.clone(),
            drain: shared.drain.clone(),
            cluster: shared.config.cluster.clone(),
        };
        shards::spawn(ops::serve_core(commands, core_ops)).detach();
    }
    shards::spawn(
        Follower {
            core: core.id(),
            view: shared.view.clone(),
            links,
            incoming,
            router: router.clone(),
        }
        .run(),
    )
    .detach();
    let agent = (core.id() == 0)
        .then(|| shared.membership.lock().ok()?.take())
        .flatten()
        .map(|membership| {
            Agent::new(AgentParts {
                membership,
                store: shared.store.clone(),
                view: shared.view.clone(),
                catalog: shared.catalog.clone(),
                metrics: metrics.clone(),
                heartbeat_deadline: Duration::from_millis(cluster.heartbeat_deadline_ms()),
                request_deadline: Duration::from_millis(shared.config.store.request_timeout_ms),
                core_count: core.count(),
            })
        });
    if let Some(agent) = &agent {
        shards::spawn(agent.clone().run()).detach();
    }
    core.ready();
    futures_lite::future::or(driver::serve(gateway, listener), core.shutdown().wait()).await;
    // Client IO has stopped being accepted; save and release every object
    // within most of the core's drain budget, then (the core that runs
    // membership) leave the cluster, leaving the rest for the runtime to
    // close the mesh.
    let stopping = Instant::now();
    let budget = core.shutdown_deadline();
    router.shutdown(budget * 4 / 5).await;
    shared.view.core_released();
    if let Some(agent) = agent {
        agent.leave(stopping + budget * 19 / 20).await;
    }
}

/// One core's router state machine with the node's object types and
/// services (the registry is the only way a type reaches a core), owning
/// as `incarnation`: the records it writes name this start of the node,
/// not an earlier one (which the other nodes know ended, and would claim
/// from at once while this start still serves).
fn router_core(
    config: &Config,
    core_id: usize,
    incarnation: u64,
    registry: &Registry,
) -> RouterCore {
    let node = NodeId(config.node.id);
    let now = clock::now_ms();
    // Retry jitter only: distinct per core and per start, no need to repeat.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
        ^ ((core_id as u64) << 32)
        ^ config.node.id;
    let mut core = RouterCore::new(node, config.router.clone(), seed, now);
    core.set_incarnation(incarnation);
    registry.register_all(&mut core);
    core
}
