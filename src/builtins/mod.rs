//! The built-in business objects docs/protocol.md describes. Each is
//! written with routerd's public object API ([`crate::object`]) and
//! nothing else, and registered the way a user's type is ([`registry`],
//! which `NodeBuilder::new` starts from); `tests/builtins_public_api.rs`
//! holds them to it.
//! (The seam between the gateway and the router, which object or service
//! each client route addresses, is `node::port`.)
//!
//! Room presence (who of a room's members is logged in, on which session):
//! the player object is told of every bind and unbind by the gateway, keeps
//! the list of rooms it joined, and on each bind/unbind sends a one-way
//! `room::OP_PRESENCE` to each of them. A room therefore knows every logged-in
//! member's current `ClientRef` without asking at `say` time, so `say`
//! answers at once with the count it pushed to. The gateway's egress gate
//! still refuses a PUSH to a stale epoch, so a late presence is harmless.

pub mod player;
pub mod room;
mod saved;

use crate::config::Config;
use crate::object::Registry;
use crate::route::RouteTable;

/// The router type ids of the built-in objects (type 1 is the router's own
/// test counter).
pub const PLAYER_TYPE_ID: u32 = 2;
pub const ROOM_TYPE_ID: u32 = 3;

pub use self::saved::{decode_saved, saved_version, SavedSession, SavedState};

/// The built-in object types as `config` sets them up, registered exactly
/// as a user's types are (`NodeBuilder::new` starts from this).
pub(crate) fn registry(config: &Config) -> Registry {
    let mut registry = Registry::default();
    let added = registry
        .add_object_type(player::PlayerType {
            persist: config.services.player.persist,
            duplicate_login: config.auth.duplicate_login,
            created_per_session_max: config.services.room.created_per_session_max,
        })
        .and_then(|()| {
            registry.add_object_type(room::RoomType {
                persist: config.services.room.persist,
                members_max: config.services.room.members_max,
                rooms_per_node_max: config.services.room.rooms_per_node_max,
                rooms_live: room::RoomCount::default(),
            })
        });
    // Two fixed types with fixed, distinct ids and routes.
    added.expect("the built-in types register");
    registry
}

/// The route table of a node that serves the built-in types only:
/// docs/protocol.md's table (`tests/protocol_doc.rs` holds the two equal).
pub fn builtin_routes() -> RouteTable {
    registry(&Config::default())
        .route_table()
        .expect("the built-in routes make a table")
}

#[cfg(test)]
mod tests_fixtures;

#[cfg(test)]
mod tests_rooms;

#[cfg(test)]
mod tests_sessions;

#[cfg(test)]
mod actor_tests {
    use super::*;
    use wire::client::route;

    fn local_actors(node_id: u64, address: &str) -> Vec<crate::catalog::ActorConfig> {
        registry(&Config::default()).local_actors(node_id, address)
    }

    #[test]
    fn service_ops_are_the_routes_they_serve() {
        assert_eq!(player::OP_PING, route::SYS_PING);
        assert_eq!(player::OP_GET, route::PLAYER_GET);
        assert_eq!(player::OP_INCR, route::PLAYER_INCR);
        assert_eq!(player::OP_ROOM_JOIN, route::ROOM_JOIN);
        assert_eq!(player::OP_ROOM_LEAVE, route::ROOM_LEAVE);
        assert_eq!(room::OP_SAY, route::ROOM_SAY);
    }

    #[test]
    fn every_client_route_after_login_has_one_local_actor() {
        let actors = local_actors(3, "127.0.0.1:7400");
        for route_id in [
            route::SYS_PING,
            route::PLAYER_GET,
            route::PLAYER_INCR,
            route::ROOM_JOIN,
            route::ROOM_LEAVE,
            route::ROOM_SAY,
        ] {
            let serving = actors.iter().filter(|a| a.supports(route_id)).count();
            assert_eq!(serving, 1, "route {route_id}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::player;
    use super::room::{self, RoomType};
    use super::tests_fixtures::{
        client, core_serving, outcome_of, player_type, send, settle, unbind,
    };
    use crate::config::{DuplicateLogin, Persist};
    use crate::ids::NodeId;
    use crate::router::{ClientRef, Effect, RequestId};
    use crate::store::{MemberState, MemoryTable};

    #[test]
    fn login_join_and_say_through_the_router() {
        let mut table = MemoryTable::default();
        let player = player_type(DuplicateLogin::KickOld, 64);
        let room = RoomType {
            persist: Persist::Interval,
            members_max: 8,
            ..RoomType::default()
        };
        let mut core = core_serving(player, Some(room));
        for player_id in [1, 2] {
            send(
                &mut core,
                player_id,
                player::player_key(player_id),
                player::OP_BIND,
                Vec::new(),
                client(player_id, player_id),
            );
            send(
                &mut core,
                10 + player_id,
                player::player_key(player_id),
                player::OP_ROOM_JOIN,
                5u64.to_le_bytes().to_vec(),
                client(player_id, player_id),
            );
        }
        let effects = settle(&mut core, &mut table);
        let answered = effects
            .iter()
            .filter(|e| matches!(e, Effect::Reply { outcome: Ok(_), .. }))
            .count();
        assert_eq!(answered, 4, "{effects:?}");
        // Player 2 logs in again on session 20: the old one is kicked and the
        // room learns the new session.
        send(
            &mut core,
            30,
            player::player_key(2),
            player::OP_BIND,
            Vec::new(),
            client(2, 20),
        );
        let effects = settle(&mut core, &mut table);
        assert!(effects.contains(&Effect::Kick {
            client: client(2, 2)
        }));
        let mut body = 5u64.to_le_bytes().to_vec();
        body.extend_from_slice(b"hello");
        send(
            &mut core,
            40,
            room::room_key(5),
            room::OP_SAY,
            body,
            client(1, 1),
        );
        let effects = settle(&mut core, &mut table);
        let sessions: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Push { client, .. } => Some(client.session_id),
                _ => None,
            })
            .collect();
        assert_eq!(sessions, vec![1, 20]);
        assert!(effects.contains(&Effect::Reply {
            request: RequestId {
                origin_node: NodeId(1),
                seq: 40
            },
            outcome: Ok(2u32.to_le_bytes().to_vec()),
        }));
        // The player's on_write state (room list) is durable.
        let record = table.load(player::player_key(2)).expect("player saved");
        assert!(!record.state.is_empty());
    }

    /// Under `single`, a login refused because another session is bound
    /// asks that session's gateway whether it still stands; a session of
    /// a node membership has declared down is gone without asking. The
    /// refused client's next try finds the player free once it was
    /// unbound.
    #[test]
    fn a_login_refused_under_single_asks_after_the_session_in_its_way() {
        let mut table = MemoryTable::default();
        let mut core = core_serving(player_type(DuplicateLogin::Single, 64), None);
        core.on_member(NodeId(2), 1, MemberState::Up);
        let key = player::player_key(7);
        let here = client(7, 1);
        let elsewhere = ClientRef {
            gateway_node: NodeId(2),
            ..client(7, 2)
        };
        send(&mut core, 1, key, player::OP_BIND, Vec::new(), elsewhere);
        send(&mut core, 2, key, player::OP_BIND, Vec::new(), here);
        let effects = settle(&mut core, &mut table);
        assert!(
            matches!(outcome_of(&effects, 1), Some(Ok(_))),
            "{effects:?}"
        );
        assert!(
            matches!(outcome_of(&effects, 2), Some(Err(_))),
            "{effects:?}"
        );
        assert!(
            effects.contains(&Effect::CheckSession { client: elsewhere }),
            "{effects:?}"
        );
        // Node 2 declared down: its session is gone, no question asked.
        core.on_member(NodeId(2), 1, MemberState::Down);
        send(&mut core, 3, key, player::OP_BIND, Vec::new(), here);
        let effects = settle(&mut core, &mut table);
        assert!(
            matches!(outcome_of(&effects, 3), Some(Err(_))),
            "{effects:?}"
        );
        assert!(
            effects.contains(&Effect::SessionGone { client: elsewhere }),
            "{effects:?}"
        );
        // The answer (the gateway's unbind, here the one for a gone node)
        // frees the player for the next try.
        unbind(&mut core, 4, elsewhere);
        send(&mut core, 5, key, player::OP_BIND, Vec::new(), here);
        let effects = settle(&mut core, &mut table);
        assert!(
            matches!(outcome_of(&effects, 5), Some(Ok(_))),
            "{effects:?}"
        );
    }

    #[test]
    fn only_a_join_within_both_bounds_creates_a_room() {
        use crate::router::ErrorCode;
        let mut table = MemoryTable::default();
        let rooms = RoomType {
            rooms_per_node_max: 2,
            ..RoomType::default()
        };
        let rooms_live = rooms.rooms_live.clone();
        let player_type = player_type(DuplicateLogin::KickOld, 1);
        let mut core = core_serving(player_type, Some(rooms));
        let (one, two) = (client(1, 1), client(2, 2));
        let player = player::player_key;
        send(&mut core, 1, player(1), player::OP_BIND, Vec::new(), one);
        send(&mut core, 2, player(2), player::OP_BIND, Vec::new(), two);
        settle(&mut core, &mut table);
        // A say in a room that does not exist, sent straight to it as the
        // router would route it: refused, nothing created.
        let mut say = 5u64.to_le_bytes().to_vec();
        say.extend_from_slice(b"hi");
        send(&mut core, 3, room::room_key(5), room::OP_SAY, say, one);
        // Player 1's one creating join creates room 5.
        let body = |room_id: u64| room_id.to_le_bytes().to_vec();
        send(&mut core, 4, player(1), player::OP_ROOM_JOIN, body(5), one);
        let effects = settle(&mut core, &mut table);
        let refused = outcome_of(&effects, 3).unwrap().unwrap_err();
        assert_eq!(refused, ErrorCode::BadRequest);
        assert_eq!(
            refused.reason(),
            Some("not a member of the room: it does not exist")
        );
        assert_eq!(
            outcome_of(&effects, 4),
            Some(Ok(1u32.to_le_bytes().to_vec()))
        );
        assert!(table.load(room::room_key(5)).is_some());
        // Player 2 creates room 7 with its one right: the node holds two
        // rooms now, its bound.
        send(&mut core, 5, player(2), player::OP_ROOM_JOIN, body(7), two);
        let effects = settle(&mut core, &mut table);
        assert_eq!(
            outcome_of(&effects, 5),
            Some(Ok(1u32.to_le_bytes().to_vec()))
        );
        assert_eq!(rooms_live.get(), 2);
        // Past their sessions' bound: room 6 is not created, but room 5,
        // which exists, is still joined.
        send(&mut core, 6, player(1), player::OP_ROOM_JOIN, body(6), one);
        send(&mut core, 7, player(2), player::OP_ROOM_JOIN, body(5), two);
        let effects = settle(&mut core, &mut table);
        let refused = outcome_of(&effects, 6).unwrap().unwrap_err();
        assert_eq!(refused, ErrorCode::Overloaded);
        assert!(table.load(room::room_key(6)).is_none());
        assert_eq!(
            outcome_of(&effects, 7),
            Some(Ok(2u32.to_le_bytes().to_vec()))
        );
        // A new session of player 1 may create again, but the node may not.
        let again = client(1, 10);
        send(&mut core, 8, player(1), player::OP_BIND, Vec::new(), again);
        send(
            &mut core,
            9,
            player(1),
            player::OP_ROOM_JOIN,
            body(8),
            again,
        );
        let effects = settle(&mut core, &mut table);
        let refused = outcome_of(&effects, 9).unwrap().unwrap_err();
        assert_eq!(refused, ErrorCode::Overloaded);
        assert!(table.load(room::room_key(8)).is_none());
        assert_eq!(rooms_live.get(), 2);
    }
}
