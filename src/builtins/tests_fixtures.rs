//! What the built-ins' unit tests share: a session and a request as the
//! gateway of node 1 would hand them in, and one core run until quiet.

use std::collections::VecDeque;

use super::player::PlayerType;
use super::room::RoomType;
use crate::config::{DuplicateLogin, Persist, RouterConfig};
use crate::ids::NodeId;
use crate::router::{ClientRef, Effect, Outcome, Request, RequestId, RouterCore, RouterHead};
use crate::store::MemoryTable;

/// A session of `player_id` on node 1's gateway, at binding epoch 1.
pub(super) fn client(player_id: u64, session_id: u64) -> ClientRef {
    ClientRef {
        gateway_node: NodeId(1),
        session_id,
        session_epoch: 1,
        player_id,
    }
}

/// A request for `op` from node 1 that waits for its answer.
pub(super) fn request(op: u32, body: Vec<u8>, client: Option<ClientRef>) -> Request {
    Request {
        id: RequestId {
            origin_node: NodeId(1),
            seq: 1,
        },
        op,
        body,
        client,
        needs_reply: true,
        keyed: false,
    }
}

/// The player type, saving on write, under `duplicate_login`, whose
/// sessions may each create `created_per_session_max` rooms.
pub(super) fn player_type(
    duplicate_login: DuplicateLogin,
    created_per_session_max: u32,
) -> PlayerType {
    PlayerType {
        persist: Persist::OnWrite,
        duplicate_login,
        created_per_session_max,
    }
}

/// The one core of node 1, serving `player` and, if given, `room`.
pub(super) fn core_serving(player: PlayerType, room: Option<RoomType>) -> RouterCore {
    let mut core = RouterCore::new(NodeId(1), RouterConfig::default(), 1, 0);
    let mut registry = crate::object::Registry::default();
    registry.add_object_type(player).unwrap();
    if let Some(room) = room {
        registry.add_object_type(room).unwrap();
    }
    registry.register_all(&mut core, crate::config::PAYLOAD_MAX_BYTES);
    core
}

/// One node, one core: performs Store and Submit effects until quiet and
/// returns the replies and pushes.
pub(super) fn settle(core: &mut RouterCore, table: &mut MemoryTable) -> Vec<Effect> {
    let mut out = Vec::new();
    let mut queue: VecDeque<Effect> = core.drain_effects().collect();
    while let Some(effect) = queue.pop_front() {
        match effect {
            Effect::Store { token, op } => {
                let reply = crate::testing::answer_store(table, op);
                core.on_store_reply(0, token, reply);
            }
            Effect::Submit { head, request } => core.on_request(0, head, *request),
            Effect::FlushSavesAfterBatch => core.on_flush(0),
            effect @ (Effect::Reply { .. }
            | Effect::Push { .. }
            | Effect::Kick { .. }
            | Effect::CheckSession { .. }
            | Effect::SessionGone { .. }) => out.push(effect),
            _ => {}
        }
        queue.extend(core.drain_effects());
    }
    out
}

/// Request `seq` of session `c` for `op` on `key`, routed to this core.
pub(super) fn send(
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
        ..request(op, body, Some(c))
    };
    core.on_request(0, RouterHead::local(key, NodeId(1)), request);
}

/// The unbind a gateway sends `c`'s player when the session ended (one-way).
pub(super) fn unbind(core: &mut RouterCore, seq: u64, c: ClientRef) {
    let request = Request {
        id: RequestId {
            origin_node: NodeId(1),
            seq,
        },
        needs_reply: false,
        ..request(super::player::OP_UNBIND, Vec::new(), Some(c))
    };
    let key = super::player::player_key(c.player_id);
    core.on_request(0, RouterHead::local(key, NodeId(1)), request);
}

/// The reply `effects` hold for request `seq`.
pub(super) fn outcome_of(effects: &[Effect], seq: u64) -> Option<Outcome> {
    effects.iter().find_map(|effect| match effect {
        Effect::Reply { request, outcome } if request.seq == seq => Some(outcome.clone()),
        _ => None,
    })
}
