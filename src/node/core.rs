//! What each core runs: its gateway, router, services port, cluster links
//! and (core 0) the membership agent, wired together from what the node
//! shares, until shutdown; then it releases its objects.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::port::{Port, PortParts};
use super::{MeshMessage, NodeShared};
use crate::catalog::CoreCatalog;
use crate::clock;
use crate::cluster::agent::{Agent, AgentParts};
use crate::cluster::follow::Follower;
use crate::cluster::incoming::{Dispatch, Incoming};
use crate::cluster::outgoing::{CoreLinks, LinkSettings, SUSPECT_AFTER_PINGS};
use crate::config::Config;
use crate::gateway::driver;
use crate::gateway::transport::Listener;
use crate::gateway::GatewayHandle;
use crate::ids::NodeId;
use crate::metrics::{CoreMetrics, RUNTIME_MIRROR_INTERVAL};
use crate::object::Registry;
use crate::ops::{self, CoreOps};
use crate::router::driver::{DriverParts, FrameSource, RouterDriver};
use crate::router::RouterCore;

/// The listeners one core serves: the gateway's, the edges' (TLS,
/// WebSocket) and its own cluster listener.
struct CoreListeners {
    gateway: shards::net::TcpListener,
    edges: Vec<(shards::net::TcpListener, Listener)>,
    cluster: shards::net::TcpListener,
}

pub(super) async fn core_main(mut core: shards::Core<MeshMessage>, shared: Arc<NodeShared>) {
    let Some(listeners) = bind_listeners(core.id(), &shared) else {
        return;
    };
    let metrics = shared.metrics.cores[core.id()].clone();
    let gateway = GatewayHandle::new(
        core.id(),
        core.mesh().clone(),
        &shared.gateway,
        metrics.clone(),
    );
    let settings = link_settings(&shared.config, core.id());
    let links = CoreLinks::new(
        settings.clone(),
        shared.view.clone(),
        metrics.clone(),
        gateway.answer_gate(),
    );
    let router = start_router(&core, &shared, &links, &gateway, &metrics);
    let _port = Port::connect(PortParts {
        router: router.clone(),
        gateway: gateway.clone(),
        catalog: CoreCatalog::new(shared.catalog.clone()),
        routes: shared.routes.clone(),
        view: shared.view.clone(),
        placement_grace: shared
            .config
            .gateway
            .place_sessions
            .then(|| Duration::from_millis(shared.config.cluster.redirect_grace_ms)),
    });
    serve_mesh(&mut core, &gateway, &router);
    let incoming = Incoming::new(
        settings,
        shared.view.clone(),
        dispatch_links(&gateway, &router, &metrics),
        links.clone(),
        metrics.clone(),
    );
    shards::spawn(incoming.clone().serve(listeners.cluster)).detach();
    serve_ops(&core, &shared, &gateway, &router);
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
    let agent = start_agent(&core, &shared, &metrics);
    shards::spawn(mirror_runtime(metrics.clone())).detach();
    core.ready();
    futures_lite::future::or(
        driver::serve(gateway, listeners.gateway, listeners.edges),
        core.shutdown().wait(),
    )
    .await;
    // Client IO has stopped being accepted; save and release every object
    // within most of the core's drain budget, then (the core that runs
    // membership) leave the cluster, leaving the rest for the runtime to
    // close the mesh.
    let stopping = Instant::now();
    let budget = core.shutdown_deadline();
    // A core whose releases did not all apply in time does not count as
    // released: the membership core then leaves without `left`, and
    // others wait `down_after_ms` before they claim what it held.
    if router.shutdown(budget * 4 / 5).await {
        shared.view.core_released();
    }
    if let Some(agent) = agent {
        agent.leave(stopping + budget * 19 / 20).await;
    }
}

/// Binds this core's listeners (the node reserved their addresses; every
/// core binds the same gateway and edge ones). `None`, logged: the core
/// cannot serve.
fn bind_listeners(core: usize, shared: &NodeShared) -> Option<CoreListeners> {
    let gateway = match shards::net::TcpListener::bind(shared.gateway_address) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(core, %error, "cannot bind the gateway listener");
            return None;
        }
    };
    let mut edges = Vec::new();
    for (address, kind) in &shared.edges {
        match shards::net::TcpListener::bind(*address) {
            Ok(listener) => edges.push((listener, kind.clone())),
            Err(error) => {
                tracing::error!(core, %address, %error, "cannot bind a client listener");
                return None;
            }
        }
    }
    let cluster = shared
        .cluster_listeners
        .lock()
        .ok()
        .and_then(|mut listeners| listeners.get_mut(core)?.take())
        .map(shards::net::TcpListener::from_std);
    match cluster {
        Some(Ok(cluster)) => Some(CoreListeners {
            gateway,
            edges,
            cluster,
        }),
        other => {
            let error = other.and_then(Result::err);
            tracing::error!(core, ?error, "cannot serve the cluster listener");
            None
        }
    }
}

/// How this core's links to the other nodes behave.
fn link_settings(config: &Config, core: usize) -> LinkSettings {
    let cluster = &config.cluster;
    LinkSettings {
        cluster: cluster.name.clone(),
        secret: cluster.secret.as_bytes().to_vec(),
        me: NodeId(config.node.id),
        core,
        queue_max: cluster.link_queue_max,
        ping_interval: Duration::from_millis(cluster.heartbeat_interval_ms),
        // As long as a silent peer may stay linked: a handshake on a live
        // network takes a round trip or two.
        handshake_timeout: Duration::from_millis(cluster.heartbeat_interval_ms)
            * SUSPECT_AFTER_PINGS,
    }
}

/// This core's router, told by its links of sends that failed and links
/// lost.
fn start_router(
    core: &shards::Core<MeshMessage>,
    shared: &NodeShared,
    links: &CoreLinks,
    gateway: &GatewayHandle,
    metrics: &Arc<CoreMetrics>,
) -> RouterDriver {
    let router = RouterDriver::new(DriverParts {
        node: NodeId(shared.config.node.id),
        boot_incarnation: shared.gateway.boot_incarnation,
        core_id: core.id(),
        core_count: core.count(),
        core: router_core(
            &shared.config,
            shared.gateway.boot_incarnation,
            &shared.registry,
        ),
        store: shared.store.clone(),
        mesh: core.mesh().clone(),
        links: Rc::new(links.clone()),
        metrics: metrics.clone(),
        request_timeout_ms: shared.config.gateway.request_timeout_ms,
        fence_after_ms: shared.config.cluster.fence_after_ms,
        answer_gate: gateway.answer_gate(),
        local_queue_max: shared.config.cores.mesh_queue_max,
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
    router
}

/// Serves the frames the node's other cores send this one: the gateway's,
/// then the router's.
fn serve_mesh(
    core: &mut shards::Core<MeshMessage>,
    gateway: &GatewayHandle,
    router: &RouterDriver,
) {
    let Some(inbox) = core.take_inbox() else {
        return;
    };
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

/// Where a message from another node goes: the gateway, then the router;
/// one neither handles is counted invalid.
fn dispatch_links(
    gateway: &GatewayHandle,
    router: &RouterDriver,
    metrics: &Arc<CoreMetrics>,
) -> Dispatch {
    let (gateway, router, metrics) = (gateway.clone(), router.clone(), metrics.clone());
    Rc::new(move |from, message, arrived_at| {
        let handled = gateway.handle_message(message)
            || router.handle_message(FrameSource::Node(from), message, || arrived_at);
        if !handled {
            // Valid, but not a message one node sends another.
            metrics.cluster.frames_invalid.inc();
            tracing::warn!(node = from.0, ?message, "link frame nobody handles");
        }
    })
}

/// Serves this core's end of the operations channel (drain, rebalance).
fn serve_ops(
    core: &shards::Core<MeshMessage>,
    shared: &NodeShared,
    gateway: &GatewayHandle,
    router: &RouterDriver,
) {
    let commands = shared
        .ops_commands
        .lock()
        .ok()
        .and_then(|mut commands| commands.get_mut(core.id())?.take());
    let Some(commands) = commands else {
        return;
    };
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

/// On core 0, the membership agent, running; `None` on the others.
fn start_agent(
    core: &shards::Core<MeshMessage>,
    shared: &NodeShared,
    metrics: &Arc<CoreMetrics>,
) -> Option<Rc<Agent>> {
    let membership = (core.id() == 0)
        .then(|| shared.membership.lock().ok()?.take())
        .flatten()?;
    let agent = Agent::new(AgentParts {
        membership,
        store: shared.store.clone(),
        view: shared.view.clone(),
        catalog: shared.catalog.clone(),
        metrics: metrics.clone(),
        heartbeat_deadline: Duration::from_millis(shared.config.cluster.heartbeat_deadline_ms()),
        request_deadline: Duration::from_millis(shared.config.store.request_timeout_ms),
        core_count: core.count(),
    });
    shards::spawn(agent.clone().run()).detach();
    Some(agent)
}

/// Copies the runtime's counters of this core into its metrics until the
/// core stops (the runtime keeps them on the core, unshared).
async fn mirror_runtime(metrics: Arc<CoreMetrics>) {
    loop {
        metrics.runtime.mirror_core();
        shards::sleep(RUNTIME_MIRROR_INTERVAL).await;
    }
}

/// One core's router state machine with the node's object types and
/// services (the registry is the only way a type reaches a core), owning
/// as `incarnation`: the records it writes name this start of the node,
/// not an earlier one (which the other nodes know ended, and would claim
/// from at once while this start still serves).
fn router_core(config: &Config, incarnation: u64, registry: &Registry) -> RouterCore {
    let node = NodeId(config.node.id);
    let now = clock::now_ms();
    // Retry jitter and the keys of the entries' hash (`router::core::
    // Entries`): from the operating system's generator, so a client that
    // chooses object ids cannot predict where they land.
    let seed = rand::random::<u64>();
    let mut core = RouterCore::new(node, config.router.clone(), seed, now);
    core.set_incarnation(incarnation);
    registry.register_all(&mut core, config.store.state_max_bytes);
    core
}
