//! The gateway's route table: docs/protocol.md's routes reduced to what
//! the gateway validates, `route_id -> {direction, requires_auth}`, and nothing
//! else (no handler, schema or service address: the gateway does no business
//! dispatch).

use wire::client::route;

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
}

const fn c2s(route_id: u32, name: &'static str, requires_auth: bool) -> RouteDescriptor {
    RouteDescriptor {
        route_id,
        name,
        direction: Direction::ClientToServer,
        requires_auth,
    }
}

const fn s2c(route_id: u32, name: &'static str) -> RouteDescriptor {
    RouteDescriptor {
        route_id,
        name,
        direction: Direction::ServerToClient,
        requires_auth: false,
    }
}

/// The descriptor table, in code, exactly docs/protocol.md's route table
/// (tests/protocol_doc.rs holds the two equal).
pub const ROUTES: [RouteDescriptor; 10] = [
    c2s(route::SYS_PING, "sys.ping", false),
    c2s(route::AUTH_LOGIN, "auth.login", false),
    c2s(route::PLAYER_GET, "player.get", true),
    c2s(route::PLAYER_INCR, "player.incr", true),
    c2s(route::ROOM_JOIN, "room.join", true),
    c2s(route::ROOM_LEAVE, "room.leave", true),
    c2s(route::ROOM_SAY, "room.say", true),
    s2c(route::ROOM_MESSAGE, "room.message"),
    s2c(route::SYS_KICKED, "sys.kicked"),
    s2c(route::SYS_REDIRECT, "sys.redirect"),
];

/// The descriptor of `route_id`, if the route exists. Ten routes: a linear
/// scan over a few cache lines beats any hashing.
pub fn lookup(route_id: u32) -> Option<&'static RouteDescriptor> {
    lookup_indexed(route_id).map(|(_, route)| route)
}

/// [`lookup`] with the route's index in [`ROUTES`], by which per-route
/// metrics are kept.
pub fn lookup_indexed(route_id: u32) -> Option<(usize, &'static RouteDescriptor)> {
    ROUTES
        .iter()
        .enumerate()
        .find(|(_, route)| route.route_id == route_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_protocol() {
        let ping = lookup(1).unwrap();
        assert_eq!(
            (ping.direction, ping.requires_auth),
            (Direction::ClientToServer, false)
        );
        assert!(!lookup(2).unwrap().requires_auth);
        for id in [10, 11, 20, 21, 22] {
            let route = lookup(id).unwrap();
            assert!(route.requires_auth, "{}", route.name);
            assert_eq!(route.direction, Direction::ClientToServer);
        }
        for id in [100, 101, 102] {
            assert_eq!(lookup(id).unwrap().direction, Direction::ServerToClient);
        }
        assert!(lookup(0).is_none());
        assert!(lookup(3).is_none());
        assert!(lookup(u32::MAX).is_none());
    }

    #[test]
    fn route_ids_are_unique() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert_ne!(a.route_id, b.route_id);
            }
        }
    }
}
