//! A node's start, in the order it must happen: bind what the membership
//! row advertises, work out where others reach it, join the cluster, build
//! what the cores share, then run the cores and the admin endpoint. Each
//! phase hands the next what it made; `Node::start_registered` reads as
//! the list of them.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::{Runtime, RuntimeConfig, ShutdownHandle};

use super::core::core_main;
use super::incarnation_record;
use super::listeners::{bind_cluster, reserve};
use super::{
    advertised, advertised_listeners, edge_listeners, EdgeAddresses, MeshMessage, Node, NodeError,
    NodeShared, READY_TIMEOUT,
};
use crate::admin::{Admin, AdminState, Advertised};
use crate::catalog::Catalog;
use crate::cluster::agent::{self, Joined};
use crate::cluster::membership::{Advertisement, Membership};
use crate::cluster::view::{ClusterView, Peer, Standing};
use crate::config::{Config, GatewayConfig, StoreBackend};
use crate::gateway::driver::{GatewayShared, ResumeHub};
use crate::gateway::transport::Listener;
use crate::gateway::ResumeSettings;
use crate::gateway_addresses::GatewayAddresses;
use crate::ids::NodeId;
use crate::metrics::NodeMetrics;
use crate::object::Registry;
use crate::ops::drain::DrainStatus;
use crate::ops::{CoreCommands, NodePhase, Ops, OpsParts};
use crate::route::RouteTable;
use crate::store::{MemberState, Store};

/// The wait between two reads of this node's row before its join.
const OWN_ROW_RETRY: Duration = Duration::from_millis(100);

/// The listeners a start binds before it joins (its membership row says
/// where they are); the reservations are held until the cores have bound
/// the same addresses.
pub(super) struct Bound {
    reservation: TcpListener,
    gateway_address: SocketAddr,
    edges: Vec<(SocketAddr, Listener)>,
    edge_addresses: EdgeAddresses,
    edge_reservations: Vec<TcpListener>,
    admin_listener: TcpListener,
    /// `admin.listen`, as configured, for errors.
    admin_listen: SocketAddr,
    admin_address: SocketAddr,
    /// Each core's cluster listener, with the port it bound.
    cluster_listeners: Vec<(TcpListener, u16)>,
}

/// Where other nodes and clients reach this one, which is not where it
/// bound when it listens on `0.0.0.0` behind an address of its own.
pub(super) struct Reached {
    gateway: SocketAddr,
    admin: SocketAddr,
    gateway_addresses: GatewayAddresses,
    cluster: Vec<SocketAddr>,
}

/// The node's metrics, before the cores run: per core, by route, with the
/// store's probe and the object types' names.
pub(super) fn node_metrics(
    store: &Store,
    registry: &Registry,
    routes: &Arc<RouteTable>,
    core_count: usize,
) -> NodeMetrics {
    let mut metrics = NodeMetrics::with_routes(core_count, routes.clone());
    metrics.store = Some(Arc::new(store.probe()));
    // The metrics count objects by (type id, name).
    metrics.types = registry
        .object_types()
        .into_iter()
        .map(|(name, type_id)| (type_id, name))
        .collect();
    metrics
}

/// Binds the gateway's, the edges', the admin endpoint's and every core's
/// cluster listener, and starts watching the TLS files.
pub(super) fn bind(
    config: &Config,
    core_count: usize,
    metrics: &NodeMetrics,
) -> Result<Bound, NodeError> {
    // Port 0 asks for any free port; every core must then bind the same
    // one, so reserve it first and hold it until the cores have bound.
    let reservation = reserve(config.gateway.listen)?;
    let tls = crate::gateway::transport::tls::setup(&config.gateway)?;
    let (edges, edge_addresses, edge_reservations) = edge_listeners(config, tls.as_ref())?;
    if let Some(tls) = &tls {
        crate::gateway::transport::tls::watch(tls, &config.gateway, metrics.cores[0].clone());
    }
    let gateway_address = reservation
        .local_addr()
        .map_err(|source| NodeError::GatewayBind {
            address: config.gateway.listen,
            source,
        })?;
    let admin_bind = |source| NodeError::AdminBind {
        address: config.admin.listen,
        source,
    };
    let admin_listener = TcpListener::bind(config.admin.listen).map_err(admin_bind)?;
    let admin_address = admin_listener.local_addr().map_err(admin_bind)?;
    Ok(Bound {
        reservation,
        gateway_address,
        edges,
        edge_addresses,
        edge_reservations,
        admin_listener,
        admin_listen: config.admin.listen,
        admin_address,
        cluster_listeners: bind_cluster(config, core_count)?,
    })
}

impl Reached {
    pub(super) fn of(config: &Config, bound: &Bound) -> Reached {
        let gateway = advertised(config.gateway.advertise, bound.gateway_address);
        Reached {
            gateway,
            admin: advertised(config.admin.advertise, bound.admin_address),
            gateway_addresses: advertised_listeners(
                gateway,
                config.gateway.advertise,
                &bound.edges,
            ),
            cluster: bound
                .cluster_listeners
                .iter()
                .enumerate()
                .map(|(core, (_, port))| config.cluster.advertised(core, *port))
                .collect(),
        }
    }

    /// An address the others could not reach, with the key that sets it:
    /// an unspecified one (`0.0.0.0`, `::`), which a node that dials it
    /// takes for its own machine.
    fn unreachable(&self) -> Option<(&'static str, SocketAddr)> {
        // Each gateway transport is advertised on gateway.advertise's host.
        let gateways = self
            .gateway_addresses
            .iter()
            .filter_map(|(_, address)| address.parse().ok())
            .map(|address| ("gateway.advertise", address));
        [
            ("gateway.advertise", self.gateway),
            ("admin.advertise", self.admin),
        ]
        .into_iter()
        .chain(gateways)
        .chain(
            self.cluster
                .iter()
                .map(|address| ("cluster.advertise", *address)),
        )
        .find(|(_, address)| address.ip().is_unspecified())
    }

    /// An address the others could not reach, when nodes on other machines
    /// may join this one (its links are reached off loopback): a member
    /// that joins after this node started would read it. A node whose
    /// links listen on loopback is joined from its own machine at most.
    fn unreachable_off_machine(&self) -> Option<(&'static str, SocketAddr)> {
        if self
            .cluster
            .iter()
            .all(|address| address.ip().is_loopback())
        {
            return None;
        }
        self.unreachable()
    }
}

/// Registers the node's own services in a new catalog (its local routes;
/// the remote registry is fed by cluster membership) and joins the
/// cluster, advertising them and where this node is reached.
pub(super) fn join(
    config: &Config,
    store: &Store,
    registry: &Registry,
    reached: &Reached,
    core_count: usize,
) -> Result<(Arc<Catalog>, Joined), NodeError> {
    // Refused before the row is written, alone too: others may join later.
    if let Some((key, address)) = reached.unreachable_off_machine() {
        return Err(NodeError::UnreachableOffMachine { key, address });
    }
    let catalog = Arc::new(Catalog::new());
    let actors = registry.local_actors(config.node.id, &reached.gateway.to_string());
    for actor in actors.clone() {
        catalog.register_routes(actor)?;
    }
    let advertisement = Advertisement {
        gateway: reached.gateway_addresses.encode(),
        admin: reached.admin.to_string(),
        cluster: reached.cluster.iter().map(ToString::to_string).collect(),
        core_count: core_count as u32,
        actors: agent::advertised(&actors),
    };
    let me = NodeId(config.node.id);
    let membership = Membership::new(me, &config.cluster, advertisement);
    let started = Instant::now();
    if config.store.backend != StoreBackend::Memory {
        let row = own_row(store, me, super::JOIN_TIMEOUT)?;
        incarnation_record::check_before_join(&config.node.data_dir, me.0, row)?;
    }
    let left = super::JOIN_TIMEOUT.saturating_sub(started.elapsed());
    let joined = agent::join(store, membership, left)?;
    // The memory store forgets every node at each start, by design.
    if config.store.backend != StoreBackend::Memory {
        let data_dir = &config.node.data_dir;
        if let Err(error) = incarnation_record::check_and_record(data_dir, me.0, joined.incarnation)
        {
            agent::leave_blocking(store, joined.membership);
            return Err(error.into());
        }
    }
    // Alone, with links on loopback, an unspecified address harms no one
    // (a node on its own is the common single-machine case); beside other
    // live members it would send them and the clients they redirect
    // nowhere.
    if joined.peers.iter().any(|row| !row.state.is_ended()) {
        if let Some((key, address)) = reached.unreachable() {
            agent::leave_blocking(store, joined.membership);
            return Err(NodeError::Unreachable { key, address });
        }
    }
    tracing::info!(
        node = me.0,
        incarnation = joined.incarnation,
        "joined the cluster"
    );
    for row in &joined.peers {
        agent::feed_catalog(&catalog, row);
    }
    Ok((catalog, joined))
}

/// The incarnation of node `me`'s row as the store holds it (`None`: no
/// row), read again until the store answers or `give_up` has passed. A
/// read that failed is no answer: joining without it would write the row
/// the check before the join is there to keep out of a store that never
/// saw this node (`incarnation_record::check_before_join`).
fn own_row(store: &Store, me: NodeId, give_up: Duration) -> Result<Option<u64>, NodeError> {
    let started = Instant::now();
    loop {
        let error = match futures_lite::future::block_on(store.poll_members(vec![me])) {
            Ok(poll) => {
                let row = poll.rows.iter().find(|row| row.node_id == me);
                return Ok(row.map(|row| row.incarnation));
            }
            Err(error) => error,
        };
        if started.elapsed() >= give_up {
            return Err(NodeError::OwnRowUnread {
                waited: give_up,
                cause: error.to_string(),
            });
        }
        tracing::debug!(%error, "reading this node's membership row again");
        std::thread::sleep(OWN_ROW_RETRY);
    }
}

/// The node's view of the cluster as the join left it.
pub(super) fn cluster_view(me: NodeId, core_count: usize, joined: &Joined) -> Arc<ClusterView> {
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
    view
}

/// What the cores share, as the phases before made it.
pub(super) struct Parts {
    pub config: Config,
    pub store: Store,
    pub registry: Registry,
    pub routes: Arc<RouteTable>,
    pub metrics: NodeMetrics,
    pub catalog: Arc<Catalog>,
    pub view: Arc<ClusterView>,
    pub joined: Joined,
    pub ops_commands: Vec<CoreCommands>,
    pub drain: Arc<DrainStatus>,
    /// The client sessions the node holds at most (`open_files.rs`).
    pub sessions_cap: u32,
}

/// The operations (drain, rebalance) every core and the admin endpoint
/// share, and each core's end of their channel.
pub(super) fn ops(
    config: &Config,
    core_count: usize,
    view: &Arc<ClusterView>,
    store: &Store,
    phase: &NodePhase,
    shutdown: &ShutdownHandle,
    metrics: &NodeMetrics,
) -> (Ops, Vec<CoreCommands>) {
    Ops::new(OpsParts {
        core_count,
        view: view.clone(),
        store: store.clone(),
        phase: phase.clone(),
        shutdown: shutdown.clone(),
        token: config.admin.token.clone(),
        rebalance_concurrency: config.cluster.rebalance_concurrency,
        rebalance_on_join: config.cluster.rebalance_on_join,
        metrics: metrics.admin.clone(),
    })
}

impl NodeShared {
    /// What the cores share; the cluster listeners and the edges move
    /// out of `bound` to the cores, the reservations stay.
    pub(super) fn new(parts: Parts, bound: &mut Bound) -> NodeShared {
        let Parts {
            config,
            store,
            registry,
            routes,
            metrics,
            catalog,
            view,
            joined,
            ops_commands,
            drain,
            sessions_cap,
        } = parts;
        let cluster_listeners = std::mem::take(&mut bound.cluster_listeners);
        NodeShared {
            store,
            catalog,
            gateway_address: bound.gateway_address,
            edges: std::mem::take(&mut bound.edges),
            metrics: Arc::new(metrics),
            gateway: GatewayShared {
                node_id: config.node.id,
                boot_incarnation: joined.incarnation,
                // `sessions_max` lowered to fit the open-file limit.
                config: GatewayConfig {
                    sessions_max: sessions_cap,
                    ..config.gateway.clone()
                },
                // `Config::load` already let ROUTERD_AUTH_SECRET win.
                secret: config.auth.secret.clone().into_bytes(),
                sessions_open: Arc::new(AtomicU32::new(0)),
                routes: routes.clone(),
                resume: Arc::new(ResumeHub::new(ResumeSettings::new(
                    config.auth.resume_window_ms,
                    config.auth.resume_pushes_max,
                    config.gateway.send_queue_bytes_max as usize,
                ))),
            },
            config,
            view,
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
            drain,
        }
    }
}

/// Runs the cores on `shared` (core 0 takes the membership out of it); a
/// runtime that will not start takes the incarnation out of the cluster
/// again.
pub(super) fn run_cores(
    runtime_config: &RuntimeConfig,
    shutdown: &ShutdownHandle,
    shared: &Arc<NodeShared>,
) -> Result<Runtime, NodeError> {
    let runtime = Runtime::start::<MeshMessage, _, _>(runtime_config, shutdown.clone(), {
        let shared = shared.clone();
        move |core| core_main(core, shared.clone())
    });
    runtime.map_err(|error| {
        shared.leave_unstarted();
        error.into()
    })
}

/// What the admin endpoint serves: the node's phase, metrics (the mesh's
/// included, now the cores run), view, store, operations and addresses.
pub(super) fn admin_state(
    shared: &NodeShared,
    metrics: NodeMetrics,
    ops: Ops,
    reached: &Reached,
    phase: &NodePhase,
    scripts: Option<Arc<crate::scripts::Library>>,
) -> AdminState {
    AdminState {
        phase: phase.clone(),
        metrics: Arc::new(metrics),
        cluster: Some(shared.view.clone()),
        store: Some(shared.store.clone()),
        ops: Some(ops),
        config: Some(Arc::new(shared.config.clone())),
        token: shared.config.admin.token.clone(),
        advertised: Some(Advertised {
            gateway: reached.gateway_addresses.clone(),
            admin: reached.admin.to_string(),
        }),
        object_types: shared.registry.object_types(),
        access: crate::admin::Access::new(&shared.config.admin),
        history: Default::default(),
        debug_view: Some({
            let registry = shared.registry.clone();
            Arc::new(move |key, saved| registry.debug_view(key, saved))
        }),
        scripts,
    }
}

/// Serves the admin endpoint, waits for every core to serve, and lets go
/// of the reservations: the node is up. On a failure the cores, up, are
/// stopped rather than left behind.
pub(super) fn serve(
    admin: AdminState,
    bound: Bound,
    runtime: Runtime,
    phase: NodePhase,
    shutdown: ShutdownHandle,
) -> Result<Node, NodeError> {
    let view = admin
        .cluster
        .clone()
        .expect("a node's admin state has its view");
    let admin_listen = bound.admin_listen;
    let ready = Admin::serve(bound.admin_listener, admin)
        .map_err(|source| NodeError::AdminBind {
            address: admin_listen,
            source,
        })
        .and_then(|admin| {
            runtime.wait_ready(READY_TIMEOUT)?;
            Ok(admin)
        });
    let admin = match ready {
        Ok(admin) => admin,
        Err(error) => {
            shutdown.trigger();
            let _ = runtime.join();
            return Err(error);
        }
    };
    drop(bound.reservation);
    drop(bound.edge_reservations);
    view.request_state(MemberState::Up);
    phase.set_serving();
    Ok(Node {
        runtime,
        admin,
        gateway_address: bound.gateway_address,
        edges: bound.edge_addresses,
        shutdown,
        phase,
        view,
    })
}

#[cfg(test)]
#[path = "start_tests.rs"]
mod tests;
