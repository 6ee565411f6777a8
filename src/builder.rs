//! [`NodeBuilder`]: the one place a node's object types and services are
//! registered, built-in or yours.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::Config;
use crate::node::{Node, NodeError};
use crate::object::{ObjectType, Registry, RegistryError, Service};
use crate::scripts::{Library, ScriptError};
use crate::store::Store;

/// Assembles a node: its config, its object types and services, and
/// optionally a store opened by the caller.
///
/// ```ignore
/// routerd::NodeBuilder::new(config)   // the built-in player and room
///     .object_type(Guild)
///     .service(GuildSearch { node_id: 1, weight: 1 })
///     .serve()?;                      // until SIGINT, SIGTERM or SIGHUP
/// ```
///
/// A clash (two types with one type id or name, two declarations of one
/// route id, a route id out of range) is an error of [`Self::start`] that
/// names both sides.
pub struct NodeBuilder {
    config: Config,
    store: Option<Store>,
    registry: Registry,
    /// The first registration refused; `start` returns it.
    refused: Option<RegistryError>,
    /// The scripted types of `[scripts] dir`, or why they cannot be served.
    scripts: Result<Option<Arc<Library>>, ScriptError>,
}

impl NodeBuilder {
    /// A node serving the built-in object types (player, room), set up by
    /// `config`, and what is added to it. Sessions log in to the player
    /// type: a node without it cannot log anyone in.
    pub fn new(config: Config) -> NodeBuilder {
        let registry = crate::builtins::registry(&config);
        NodeBuilder {
            config,
            store: None,
            registry,
            refused: None,
            scripts: Ok(None),
        }
        .scripts()
    }

    /// A node serving only what is added to it (tests, or a node that
    /// brings its own player type with type id 2).
    pub fn without_builtins(config: Config) -> NodeBuilder {
        NodeBuilder {
            config,
            store: None,
            registry: Registry::default(),
            refused: None,
            scripts: Ok(None),
        }
        .scripts()
    }

    /// Loads the scripted types `[scripts] dir` holds (after the built-in
    /// types, before the program's own) and registers them on every core.
    fn scripts(mut self) -> NodeBuilder {
        self.scripts = Library::load(&self.config);
        if let Ok(Some(library)) = &self.scripts {
            if self.refused.is_none() {
                self.refused = library.register(&mut self.registry).err();
            }
        }
        self
    }

    /// Serves the object type `kind` on every core.
    pub fn object_type<T: ObjectType>(mut self, kind: T) -> NodeBuilder {
        if self.refused.is_none() {
            self.refused = self.registry.add_object_type(kind).err();
        }
        self
    }

    /// Runs the stateless service `service` on every core, and advertises
    /// it in the membership table so that every node can send it requests.
    pub fn service<S: Service>(mut self, service: S) -> NodeBuilder {
        if self.refused.is_none() {
            self.refused = self.registry.add_service(service).err();
        }
        self
    }

    /// Knows the routes of `service` without running it here: this node's
    /// clients may call it, and their requests go to the nodes that run it
    /// (UNAVAILABLE while none does). Every node of a cluster should know
    /// the same routes, whichever nodes run them.
    pub fn remote_service<S: Service>(mut self, service: S) -> NodeBuilder {
        if self.refused.is_none() {
            self.refused = self.registry.add_remote_service(&service).err();
        }
        self
    }

    /// Uses `store` instead of opening the one `config` names.
    pub fn store(mut self, store: Store) -> NodeBuilder {
        self.store = Some(store);
        self
    }

    /// The names of the object types and services registered so far, in
    /// order.
    pub fn registered(&self) -> Vec<&'static str> {
        self.registry.names()
    }

    /// Everything [`Self::start`] refuses before it binds or opens
    /// anything: a registration refused, a `[services.<name>]` nothing
    /// registered, a secret the listeners make unsafe, clashing routes, an
    /// object type that can outgrow `store.state_max_bytes`, TLS files that
    /// do not load. `routerd check-config` runs exactly this, so
    /// a config it accepts fails `serve` only for the machine (a port
    /// taken, a store down).
    pub fn check(&self) -> Result<(), NodeError> {
        if let Err(error) = &self.scripts {
            return Err(error.clone().into());
        }
        if let Some(refused) = &self.refused {
            return Err(refused.clone().into());
        }
        self.config
            .services
            .check_registered(&self.registry.names())?;
        self.config.check_secrets()?;
        self.registry.route_table().map_err(RegistryError::from)?;
        self.registry
            .check_state_bounds(self.config.store.state_max_bytes)?;
        crate::gateway::transport::tls::setup(&self.config.gateway)?;
        Ok(())
    }

    /// Starts every core and the admin endpoint; returns once every core
    /// serves.
    pub fn start(self) -> Result<Node, NodeError> {
        self.check()?;
        let scripts = self.scripts.ok().flatten();
        Node::start_registered(self.config, self.store, self.registry, scripts)
    }

    /// Starts the node and serves until SIGINT, SIGTERM or SIGHUP, then stops it
    /// cleanly (every object saved and released, the cluster left): what
    /// `routerd serve` does.
    pub fn serve(self) -> Result<(), NodeError> {
        let node = self.start()?;
        node.stop_on_signals()?;
        let off = || "off".to_string();
        tracing::info!(
            node = node.cluster().me().0,
            incarnation = node.cluster().snapshot().me.incarnation,
            gateway = %node.gateway_address(),
            tls = %node.tls_address().map_or_else(off, |address| address.to_string()),
            websocket = %node.websocket_address().map_or_else(off, |address| address.to_string()),
            admin = %node.admin_address(),
            cores = node.core_count(),
            "routerd serving"
        );
        node.wait()?;
        tracing::info!("routerd stopped");
        Ok(())
    }
}

/// The gateway and admin addresses of the `routerd serving` log line that
/// [`NodeBuilder::serve`] writes once every core serves, for a program that
/// starts a node on port 0 and reads where it listens from its log.
pub fn serving_addresses(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let field = |name: &str| {
        let rest = line.split(name).nth(1)?;
        rest.split_whitespace().next()?.parse::<SocketAddr>().ok()
    };
    Some((field("gateway=")?, field("admin=")?))
}
