//! The built-in business objects docs/protocol.md describes, as sans-IO
//! router object types. Each reaches the router only through its public manager
//! API (`router::ObjectType` / `ObjectState`); the gateway turns client
//! frames into `router::Request`s with these op codes and back.
//!
//! Room presence (who of a room's members is logged in, on which session):
//! the player object is told of every bind and unbind by the gateway, keeps
//! the list of rooms it joined, and on each bind/unbind sends a one-way
//! `room::OP_PRESENCE` to each of them. A room therefore knows every logged-in
//! member's current `ClientRef` without asking at `say` time, so `say`
//! answers at once with the count it pushed to. The gateway's egress gate
//! still refuses a PUSH to a stale epoch, so a late presence is harmless.

pub mod player;
pub mod port;
pub mod room;

mod codec;

use std::sync::Arc;

use wire::client::route;

use crate::catalog::ActorConfig;

/// The router type ids of the built-in objects (type 1 is the router's own
/// test counter).
pub const PLAYER_TYPE_ID: u32 = 2;
pub const ROOM_TYPE_ID: u32 = 3;

/// The actors this node hosts, as the catalog's local routes: which client
/// routes (msgIds) each built-in service takes. Service ops are numbered as
/// the client routes they serve, so a route's op is its id.
pub fn local_actors(node_id: u64, address: &str) -> Vec<ActorConfig> {
    let actor = |index: u64, actor_type: u32, msg_ids: &[u32]| ActorConfig {
        // One actor per service and node: the node id in the high bits keeps
        // ids unique across a cluster.
        actor_id: node_id << 16 | index,
        node_id,
        actor_type,
        shard: 0,
        supported_msg_ids: msg_ids.into(),
        weight: 1,
        address: Arc::from(address),
    };
    vec![
        actor(
            1,
            PLAYER_TYPE_ID,
            &[
                route::SYS_PING,
                route::PLAYER_GET,
                route::PLAYER_INCR,
                route::ROOM_JOIN,
                route::ROOM_LEAVE,
            ],
        ),
        actor(2, ROOM_TYPE_ID, &[route::ROOM_SAY]),
    ]
}

#[cfg(test)]
mod actor_tests {
    use super::*;

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
    use std::collections::VecDeque;

    use super::player::{self, PlayerType};
    use super::room::{self, RoomType};
    use crate::config::{DuplicateLogin, Persist, RouterConfig};
    use crate::router::{
        ClientRef, Effect, Request, RequestId, RouterCore, RouterHead, StoreOp, StoreReply,
    };
    use crate::store::{MemoryTable, NodeId};

    /// One node, one core: performs Store and Submit effects until quiet and
    /// returns the replies and pushes.
    fn settle(core: &mut RouterCore, table: &mut MemoryTable) -> Vec<Effect> {
        let mut out = Vec::new();
        let mut queue: VecDeque<Effect> = core.drain_effects().collect();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Store { token, op } => {
                    let reply = match op {
                        StoreOp::Load(key) => StoreReply::Loaded(table.load(key)),
                        StoreOp::Write(write) => StoreReply::Written(table.write(&write)),
                        StoreOp::WriteBatch(writes) => StoreReply::WrittenBatch(
                            writes.iter().map(|w| table.write(w)).collect(),
                        ),
                    };
                    core.on_store_reply(0, token, reply);
                }
                Effect::Submit { head, request } => core.on_request(0, head, request),
                Effect::FlushSavesAfterBatch => core.on_flush(0),
                effect @ (Effect::Reply { .. } | Effect::Push { .. } | Effect::Kick { .. }) => {
                    out.push(effect)
                }
                _ => {}
            }
            queue.extend(core.drain_effects());
        }
        out
    }

    fn client(player_id: u64, session_id: u64) -> ClientRef {
        ClientRef {
            gateway_node: NodeId(1),
            session_id,
            session_epoch: 1,
            player_id,
        }
    }

    fn send(
        core: &mut RouterCore,
        seq: u64,
        key: wire::ObjectKey,
        op: u32,
        body: Vec<u8>,
        c: ClientRef,
    ) {
        let request = Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq,
            },
            op,
            body,
            client: Some(c),
            needs_reply: true,
        };
        core.on_request(0, RouterHead::local(key, NodeId(1)), request);
    }

    #[test]
    fn login_join_and_say_through_the_router() {
        let mut table = MemoryTable::default();
        let mut core = RouterCore::new(NodeId(1), RouterConfig::default(), 1, 0);
        core.register(Box::new(PlayerType {
            persist: Persist::OnWrite,
            duplicate_login: DuplicateLogin::KickOld,
        }));
        core.register(Box::new(RoomType {
            persist: Persist::Interval,
            members_max: 8,
        }));
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
}
