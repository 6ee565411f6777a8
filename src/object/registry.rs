//! What a node serves: the object types and services registered with the
//! `NodeBuilder`, checked together, and everything derived from them (the
//! route table, the actors the node advertises, each core's router
//! registrations).

use std::sync::Arc;

use super::adapter::{Keyed, ServiceAdapter};
use super::request_keys::{Bounds, SavedState, STATE_VERSION_BYTES};
use super::{ClientRoute, Object as _, ObjectKey, ObjectType, Pick, RouteKind, Service};
use crate::catalog::ActorConfig;
use crate::route::{RouteError, RouteTable, Served};
use crate::router::RouterCore;

/// Why a set of object types and services cannot be served together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two types or services declare one type id.
    #[error("type id {type_id} is taken twice: by {first} and by {second}")]
    DuplicateTypeId {
        /// The id.
        type_id: u32,
        /// The name of the one registered first.
        first: &'static str,
        /// The name of the one registered second.
        second: &'static str,
    },
    /// A type declares type id 0, which no key may carry.
    #[error("type id 0 ({name}) is not a type id")]
    ZeroTypeId {
        /// The type's name.
        name: &'static str,
    },
    /// Two types or services share one name.
    #[error("the name {name} is taken twice")]
    DuplicateName {
        /// The name.
        name: &'static str,
    },
    /// A type's objects can grow past what the store saves.
    #[error(
        "an object of type {name} can take {len} bytes, over the {room} that \
         store.state_max_bytes leaves for it: the store would refuse to save it"
    )]
    StateTooLarge {
        /// The type's name.
        name: &'static str,
        /// Its `ObjectType::state_len_max`.
        len: usize,
        /// What `store.state_max_bytes` leaves for the object's own bytes.
        room: usize,
    },
    /// Their routes do not make one table.
    #[error(transparent)]
    Routes(#[from] RouteError),
}

/// Registers an entry on a core, given `store.state_max_bytes`.
type RegisterFn = Arc<dyn Fn(&mut RouterCore, usize) + Send + Sync>;
/// An object type's [`super::Object::debug_view`] of a saved state
/// (`key`, the version that wrote it, the state).
type DebugFn = Arc<dyn Fn(ObjectKey, u16, &[u8]) -> Option<String> + Send + Sync>;

/// One registered type or service.
#[derive(Clone)]
struct Registered {
    type_id: u32,
    name: &'static str,
    routes: Vec<ClientRoute>,
    /// `Some` for a service: how its nodes share keys, and this node's
    /// weight.
    service: Option<(Pick, u32)>,
    /// `None` for a service other nodes run: this node knows its routes
    /// (so its clients may call it) but neither runs nor advertises it.
    register: Option<RegisterFn>,
    /// `Some` for an object type: its debug view of a saved state.
    debug: Option<DebugFn>,
    /// An object type's `ObjectType::state_len_max`.
    state_len_max: Option<usize>,
}

/// The object types and services of one node, in registration order.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Vec<Registered>,
}

impl Registry {
    pub fn add_object_type<T: ObjectType>(&mut self, kind: T) -> Result<(), RegistryError> {
        let kind = Arc::new(kind);
        let decoder = kind.clone();
        let entry = Registered {
            type_id: kind.type_id(),
            name: kind.name(),
            routes: kind.routes(),
            service: None,
            state_len_max: kind.state_len_max(),
            register: Some(Arc::new(move |core: &mut RouterCore, state_max| {
                let bounds = Bounds {
                    keys_max: core.config().request_keys_max,
                    state_max,
                };
                core.register(Box::new(Keyed::new(kind.clone(), bounds)))
            })),
            debug: Some(Arc::new(move |key, version, state| {
                let newest = decoder.state_version();
                if version == 0 || version > newest {
                    return None;
                }
                decoder.decode(key, version, state).ok()?.debug_view()
            })),
        };
        self.add(entry)
    }

    pub fn add_service<S: Service>(&mut self, service: S) -> Result<(), RegistryError> {
        let service = Arc::new(service);
        let entry = Registered {
            type_id: service.type_id(),
            name: service.name(),
            routes: service.routes(),
            service: Some((service.pick(), service.weight())),
            register: Some(Arc::new(move |core: &mut RouterCore, _| {
                core.register_service(Box::new(ServiceAdapter(service.clone())))
            })),
            debug: None,
            state_len_max: None,
        };
        self.add(entry)
    }

    /// The routes of a service that other nodes run: requests for them are
    /// sent to those nodes, and this node runs none of them.
    pub fn add_remote_service<S: Service>(&mut self, service: &S) -> Result<(), RegistryError> {
        let entry = Registered {
            type_id: service.type_id(),
            name: service.name(),
            routes: service.routes(),
            service: Some((service.pick(), service.weight())),
            register: None,
            debug: None,
            state_len_max: None,
        };
        self.add(entry)
    }

    fn add(&mut self, entry: Registered) -> Result<(), RegistryError> {
        if entry.type_id == 0 {
            return Err(RegistryError::ZeroTypeId { name: entry.name });
        }
        for other in &self.entries {
            if other.type_id == entry.type_id {
                return Err(RegistryError::DuplicateTypeId {
                    type_id: entry.type_id,
                    first: other.name,
                    second: entry.name,
                });
            }
            if other.name == entry.name {
                return Err(RegistryError::DuplicateName { name: entry.name });
            }
        }
        self.entries.push(entry);
        // Checked at each addition, so the error names the one that clashed.
        if let Err(error) = self.route_table() {
            self.entries.pop();
            return Err(error.into());
        }
        Ok(())
    }

    /// The object types' names and type ids, in registration order (the
    /// admin endpoint and the CLI name objects by them; services have no
    /// objects, so they are not among them).
    pub fn object_types(&self) -> Vec<(&'static str, u32)> {
        self.entries
            .iter()
            .filter(|entry| entry.service.is_none())
            .map(|entry| (entry.name, entry.type_id))
            .collect()
    }

    /// What the object type of `key` shows an operator of the state it
    /// saved (`saved`: the state as persisted, its version in front and
    /// any remembered answers of keyed requests after it), through
    /// [`super::Object::debug_view`]; `None` when the type gives no view,
    /// is not registered, or the state does not decode.
    pub fn debug_view(&self, key: ObjectKey, saved: &[u8]) -> Option<String> {
        let saved = SavedState::split(saved)?;
        let entry = self
            .entries
            .iter()
            .find(|entry| entry.type_id == key.type_id)?;
        (entry.debug.as_ref()?)(key, saved.version, saved.object)
    }

    /// The names of what is registered, object types and services, in
    /// registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|entry| entry.name).collect()
    }

    /// The gateway's table: the system routes and every declared route.
    pub fn route_table(&self) -> Result<RouteTable, RouteError> {
        RouteTable::build(self.entries.iter().flat_map(|entry| {
            let served = match entry.service {
                None => Served::Object,
                Some((pick, _)) => Served::Service(pick),
            };
            entry
                .routes
                .iter()
                .map(move |route| (*route, entry.type_id, served))
        }))
    }

    /// Refuses an object type whose objects can grow past what a saved
    /// state may hold (`store.state_max_bytes`, less the state version
    /// before the object's bytes).
    pub(crate) fn check_state_bounds(&self, state_max_bytes: usize) -> Result<(), RegistryError> {
        let room = state_max_bytes.saturating_sub(STATE_VERSION_BYTES);
        for entry in &self.entries {
            if let Some(len) = entry.state_len_max.filter(|len| *len > room) {
                return Err(RegistryError::StateTooLarge {
                    name: entry.name,
                    len,
                    room,
                });
            }
        }
        Ok(())
    }

    /// Registers every object type and service with one core's router,
    /// their states bound by `state_max_bytes` (`store.state_max_bytes`).
    pub fn register_all(&self, core: &mut RouterCore, state_max_bytes: usize) {
        for register in self
            .entries
            .iter()
            .filter_map(|entry| entry.register.as_ref())
        {
            register(core, state_max_bytes);
        }
    }

    /// What node `node_id` (its gateway at `address`) advertises to the
    /// catalog: one actor per type or service, with the request routes it
    /// takes as msgIds (a route's op is its id) and its weight.
    pub fn local_actors(&self, node_id: u64, address: &str) -> Vec<ActorConfig> {
        let address: Arc<str> = Arc::from(address);
        self.entries
            .iter()
            .enumerate()
            // A service that runs elsewhere is not advertised; the others
            // keep the actor id of their position all the same.
            .filter(|(_, entry)| entry.register.is_some())
            .map(|(index, entry)| ActorConfig {
                // One actor per type and node: the node id in the high bits
                // keeps ids unique across a cluster.
                actor_id: node_id << 16 | (index as u64 + 1),
                node_id,
                actor_type: entry.type_id,
                shard: 0,
                supported_msg_ids: entry
                    .routes
                    .iter()
                    .filter(|route| matches!(route.kind, RouteKind::Request { .. }))
                    .map(|route| route.id)
                    .collect::<Vec<u32>>()
                    .into(),
                weight: entry.service.map_or(1, |(_, weight)| weight),
                address: address.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{KeyFrom, ServiceContext};

    struct Echo(u32, &'static str, u32);

    impl Service for Echo {
        fn type_id(&self) -> u32 {
            self.0
        }
        fn name(&self) -> &'static str {
            self.1
        }
        fn routes(&self) -> Vec<ClientRoute> {
            vec![ClientRoute::request(self.2, "echo", KeyFrom::BodyHash)]
        }
        fn weight(&self) -> u32 {
            7
        }
        fn handle(&self, ctx: &mut ServiceContext<'_>) {
            let body = ctx.body().to_vec();
            ctx.answer(Ok(body));
        }
    }

    #[test]
    fn clashes_are_refused_naming_both() {
        let mut registry = crate::builtins::registry(&crate::config::Config::default());
        assert_eq!(registry.names(), vec!["player", "room"]);
        assert_eq!(
            registry.add_service(Echo(2, "echo", 300)),
            Err(RegistryError::DuplicateTypeId {
                type_id: 2,
                first: "player",
                second: "echo"
            })
        );
        assert_eq!(
            registry.add_service(Echo(0, "echo", 300)),
            Err(RegistryError::ZeroTypeId { name: "echo" })
        );
        assert_eq!(
            registry.add_service(Echo(200, "room", 300)),
            Err(RegistryError::DuplicateName { name: "room" })
        );
        assert!(matches!(
            registry.add_service(Echo(200, "echo", 22)),
            Err(RegistryError::Routes(RouteError::Duplicate {
                route_id: 22,
                ..
            }))
        ));
        assert_eq!(
            registry.names(),
            vec!["player", "room"],
            "nothing half-added"
        );
        registry.add_service(Echo(200, "echo", 300)).unwrap();
        let actors = registry.local_actors(5, "127.0.0.1:1");
        assert_eq!(actors.len(), 3);
        assert_eq!(actors[2].actor_type, 200);
        assert_eq!(actors[2].weight, 7);
        assert_eq!(&*actors[2].supported_msg_ids, &[300]);
        assert_eq!(
            registry
                .route_table()
                .unwrap()
                .target(300)
                .map(|t| t.served),
            Some(Served::Service(Pick::Rendezvous))
        );
    }

    /// A service other nodes run: its routes are in the table (requests go
    /// to its nodes), but this node neither runs nor advertises it, and
    /// what comes after it keeps the actor id of its position.
    #[test]
    fn a_remote_service_has_routes_and_no_actor() {
        let mut registry = crate::builtins::registry(&crate::config::Config::default());
        registry
            .add_remote_service(&Echo(200, "echo", 300))
            .unwrap();
        registry.add_service(Echo(201, "echo2", 301)).unwrap();
        let table = registry.route_table().unwrap();
        assert!(table.target(300).is_some());
        assert!(table.target(301).is_some());
        let actors = registry.local_actors(5, "127.0.0.1:1");
        let types: Vec<u32> = actors.iter().map(|actor| actor.actor_type).collect();
        assert_eq!(types, vec![2, 3, 201]);
        assert_eq!(actors[2].actor_id, 5 << 16 | 4);
        let mut core = RouterCore::new(
            crate::ids::NodeId(5),
            crate::config::RouterConfig::default(),
            1,
            0,
        );
        registry.register_all(&mut core, crate::config::PAYLOAD_MAX_BYTES);
        assert_eq!(
            registry.add_remote_service(&Echo(202, "echo", 302)),
            Err(RegistryError::DuplicateName { name: "echo" }),
            "a remote service's name is taken like any other"
        );
    }
}
