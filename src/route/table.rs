//! The gateway's route table: `route_id -> {direction, requires_auth}` for
//! the ingress checks and the egress gate, and where the requests of each
//! route go (an object type or a stateless service, and how the key comes
//! out of the request) for the services' port. A node builds it once, at
//! start, from routerd's system routes and the routes its object types and
//! services declare (`ClientRoute`); every core shares it.

use wire::client::route;

use super::declare::{ClientRoute, KeyFrom, Pick, RouteBody, RouteKind, OP_RESERVED_MIN};

/// Who may initiate a frame on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The client sends REQUESTs; the server answers with RESPONSE or ERROR.
    ClientToServer,
    /// The server sends PUSHes; a client may not send it.
    ServerToClient,
}

/// What the gateway knows about one route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteDescriptor {
    pub route_id: u32,
    pub name: &'static str,
    pub direction: Direction,
    pub requires_auth: bool,
    /// What its bodies are: a listener's body codec applies to `Json`.
    pub body: RouteBody,
}

/// What serves the requests of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// An object type: the request goes to the object's owner.
    Object,
    /// A stateless service: the request goes to one node that runs it,
    /// picked this way.
    Service(Pick),
}

/// Where the requests of one route go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteTarget {
    pub type_id: u32,
    pub key: KeyFrom,
    pub served: Served,
}

const fn c2s(route_id: u32, name: &'static str, requires_auth: bool) -> RouteDescriptor {
    RouteDescriptor {
        route_id,
        name,
        direction: Direction::ClientToServer,
        requires_auth,
        body: RouteBody::Bytes,
    }
}

const fn s2c(route_id: u32, name: &'static str) -> RouteDescriptor {
    RouteDescriptor {
        route_id,
        name,
        direction: Direction::ServerToClient,
        requires_auth: false,
        body: RouteBody::Bytes,
    }
}

/// The routes of the gateway itself, on every node whatever it serves:
/// login and resume (answered by the auth service) and the pushes the
/// gateway writes. (`sys.ping` is the player type's: before login the auth service
/// echoes it, after login the player object does.)
pub const SYSTEM_ROUTES: [RouteDescriptor; 5] = [
    c2s(route::AUTH_LOGIN, "auth.login", false),
    c2s(route::AUTH_RESUME, "auth.resume", false),
    s2c(route::SYS_SESSION, "sys.session"),
    s2c(route::SYS_KICKED, "sys.kicked"),
    s2c(route::SYS_REDIRECT, "sys.redirect"),
];

/// Routes one node serves at most, system routes included: bounds the
/// table and the per-route latency histograms of every core.
pub const ROUTES_MAX: usize = 256;

/// Why a set of declared routes cannot make a table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("route {route_id} is declared twice: as {first} and as {second}")]
    Duplicate {
        route_id: u32,
        first: &'static str,
        second: &'static str,
    },
    #[error("route {route_id} ({name}): route ids must be between 1 and {}", OP_RESERVED_MIN - 1)]
    OutOfRange { route_id: u32, name: &'static str },
    #[error("route {route_id} has an empty name")]
    Unnamed { route_id: u32 },
    #[error("{count} routes, more than the {ROUTES_MAX} a node serves")]
    TooMany { count: usize },
}

/// Route ids below this are found by direct indexing ([`RouteTable`]'s
/// `by_id`); the protocol's and the examples' ids are all far below it. A
/// larger id is still served, by a binary search. The index costs two
/// bytes per id, so at most 8 KiB per node.
const DIRECT_IDS_MAX: u32 = 4096;

/// The routes of one node, sorted by id. Immutable once built.
#[derive(Clone, Debug)]
pub struct RouteTable {
    routes: Box<[RouteDescriptor]>,
    /// Beside `routes`, index for index.
    targets: Box<[Option<RouteTarget>]>,
    /// For each id up to the largest declared one below `DIRECT_IDS_MAX`:
    /// its position in `routes` plus one, or 0 when no route has that id.
    /// Every request looks its route up three times (ingress, the
    /// services' port, the egress gate): a binary search there was a chain
    /// of dependent loads, about 2% of a core's time per lookup; this is
    /// one load.
    by_id: Box<[u16]>,
}

impl RouteTable {
    /// The system routes and `declared`, each with what serves it (push
    /// routes have no target). Refuses duplicate ids, ids outside
    /// `1..OP_RESERVED_MIN`, empty names, and more than `ROUTES_MAX`.
    pub fn build(
        declared: impl IntoIterator<Item = (ClientRoute, u32, Served)>,
    ) -> Result<RouteTable, RouteError> {
        let mut entries: Vec<(RouteDescriptor, Option<RouteTarget>)> =
            SYSTEM_ROUTES.iter().map(|route| (*route, None)).collect();
        for (route, type_id, served) in declared {
            if route.id == 0 || route.id >= OP_RESERVED_MIN {
                return Err(RouteError::OutOfRange {
                    route_id: route.id,
                    name: route.name,
                });
            }
            if route.name.is_empty() {
                return Err(RouteError::Unnamed { route_id: route.id });
            }
            let entry = match route.kind {
                RouteKind::Request { key, requires_auth } => (
                    RouteDescriptor {
                        body: route.body,
                        ..c2s(route.id, route.name, requires_auth)
                    },
                    Some(RouteTarget {
                        type_id,
                        key,
                        served,
                    }),
                ),
                RouteKind::Push => (s2c(route.id, route.name), None),
            };
            entries.push(entry);
        }
        if entries.len() > ROUTES_MAX {
            return Err(RouteError::TooMany {
                count: entries.len(),
            });
        }
        entries.sort_by_key(|(route, _)| route.route_id);
        if let Some(pair) = entries
            .windows(2)
            .find(|w| w[0].0.route_id == w[1].0.route_id)
        {
            return Err(RouteError::Duplicate {
                route_id: pair[0].0.route_id,
                first: pair[0].0.name,
                second: pair[1].0.name,
            });
        }
        let (routes, targets): (Vec<RouteDescriptor>, Vec<_>) = entries.into_iter().unzip();
        let direct_ids = routes
            .iter()
            .map(|route| route.route_id + 1)
            .filter(|&end| end <= DIRECT_IDS_MAX)
            .max()
            .unwrap_or(0);
        let mut by_id = vec![0u16; direct_ids as usize];
        for (index, route) in routes.iter().enumerate() {
            if let Some(slot) = by_id.get_mut(route.route_id as usize) {
                // At most ROUTES_MAX routes: the position fits.
                *slot = index as u16 + 1;
            }
        }
        Ok(RouteTable {
            routes: routes.into(),
            targets: targets.into(),
            by_id: by_id.into(),
        })
    }

    /// The descriptor of `route_id`, if the route exists.
    pub fn lookup(&self, route_id: u32) -> Option<&RouteDescriptor> {
        self.lookup_indexed(route_id).map(|(_, route)| route)
    }

    /// [`Self::lookup`] with the route's index in [`Self::routes`], by
    /// which per-route metrics are kept.
    pub fn lookup_indexed(&self, route_id: u32) -> Option<(usize, &RouteDescriptor)> {
        let index = match self.by_id.get(route_id as usize) {
            Some(&0) => return None,
            Some(&position) => usize::from(position) - 1,
            None if route_id < DIRECT_IDS_MAX => return None,
            None => self
                .routes
                .binary_search_by_key(&route_id, |route| route.route_id)
                .ok()?,
        };
        Some((index, &self.routes[index]))
    }

    /// Where the requests of `route_id` go; `None` for a route no object
    /// or service serves (login, pushes, unknown ids).
    pub fn target(&self, route_id: u32) -> Option<RouteTarget> {
        let (index, _) = self.lookup_indexed(route_id)?;
        self.targets[index]
    }

    /// Every route, sorted by id.
    pub fn routes(&self) -> &[RouteDescriptor] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable {
        crate::testing::builtin_routes()
    }

    #[test]
    fn table_matches_protocol() {
        let table = table();
        let ping = table.lookup(1).unwrap();
        assert_eq!(
            (ping.direction, ping.requires_auth),
            (Direction::ClientToServer, false)
        );
        assert!(!table.lookup(2).unwrap().requires_auth);
        // auth.resume (version 2) is the auth service's too.
        assert!(!table.lookup(3).unwrap().requires_auth);
        assert_eq!(table.target(3), None);
        for id in [10, 11, 20, 21, 22] {
            let route = table.lookup(id).unwrap();
            assert!(route.requires_auth, "{}", route.name);
            assert_eq!(route.direction, Direction::ClientToServer);
            assert!(table.target(id).is_some(), "{}", route.name);
        }
        for id in [100, 101, 102, 103] {
            assert_eq!(
                table.lookup(id).unwrap().direction,
                Direction::ServerToClient
            );
            assert_eq!(table.target(id), None);
        }
        assert_eq!(table.target(2), None, "login is the auth service's");
        assert!(table.lookup(0).is_none());
        assert!(table.lookup(4).is_none());
        assert!(table.lookup(u32::MAX).is_none());
        assert_eq!(table.routes().len(), 12);
    }

    #[test]
    fn a_bad_declaration_is_refused_with_its_reason() {
        let route = |id, name| {
            (
                ClientRoute::request(id, name, KeyFrom::BodyU64),
                100,
                Served::Object,
            )
        };
        assert_eq!(
            RouteTable::build([route(200, "a"), route(200, "b")]).unwrap_err(),
            RouteError::Duplicate {
                route_id: 200,
                first: "a",
                second: "b"
            }
        );
        assert!(matches!(
            RouteTable::build([route(2, "my.login")]),
            Err(RouteError::Duplicate { route_id: 2, .. })
        ));
        assert!(matches!(
            RouteTable::build([route(0, "zero")]),
            Err(RouteError::OutOfRange { route_id: 0, .. })
        ));
        assert!(matches!(
            RouteTable::build([route(OP_RESERVED_MIN, "events")]),
            Err(RouteError::OutOfRange { .. })
        ));
        assert_eq!(
            RouteTable::build([route(300, "")]).unwrap_err(),
            RouteError::Unnamed { route_id: 300 }
        );
        let many = (1000..1000 + ROUTES_MAX as u32).map(|id| route(id, "r"));
        assert!(matches!(
            RouteTable::build(many),
            Err(RouteError::TooMany { .. })
        ));
        let table = RouteTable::build([route(300, "guild.join")]).unwrap();
        assert_eq!(
            table.target(300),
            Some(RouteTarget {
                type_id: 100,
                key: KeyFrom::BodyU64,
                served: Served::Object
            })
        );
    }

    #[test]
    fn route_ids_are_unique_and_sorted() {
        let table = table();
        for pair in table.routes().windows(2) {
            assert!(pair[0].route_id < pair[1].route_id);
        }
    }

    #[test]
    fn ids_on_either_side_of_the_direct_index_are_found_and_only_they() {
        let declared = [
            7,
            DIRECT_IDS_MAX - 1,
            DIRECT_IDS_MAX,
            DIRECT_IDS_MAX + 1,
            70_000,
        ];
        let table = RouteTable::build(declared.map(|id| {
            (
                ClientRoute::request(id, "r", KeyFrom::BodyU64),
                100,
                Served::Object,
            )
        }))
        .unwrap();
        for (index, route) in table.routes().iter().enumerate() {
            assert_eq!(
                table.lookup_indexed(route.route_id).map(|(at, _)| at),
                Some(index),
                "route {}",
                route.route_id
            );
        }
        for id in (0..DIRECT_IDS_MAX + 8).chain([69_999, 70_001, OP_RESERVED_MIN, u32::MAX]) {
            let known = table.routes().iter().any(|route| route.route_id == id);
            assert_eq!(table.lookup(id).is_some(), known, "route {id}");
            // The system routes (login, pushes) have no target.
            assert_eq!(
                table.target(id).is_some(),
                declared.contains(&id),
                "route {id}"
            );
        }
    }
}
