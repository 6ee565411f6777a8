//! Sessions that end without an unbind reaching their player (their node
//! died): the player stops counting them at the first push that finds the
//! node declared down, and takes a session back when it asks again.

use super::player;
use super::room::{self, RoomType};
use super::tests_fixtures::{client, core_serving, outcome_of, player_type, send, settle, unbind};
use crate::config::{DuplicateLogin, Persist};
use crate::ids::NodeId;
use crate::router::{ClientRef, Effect, RouterCore};
use crate::store::{MemberState, MemoryTable};

const ROOM: u64 = 5;

fn core() -> RouterCore {
    let player = player_type(DuplicateLogin::KickOld, 64);
    let room = RoomType {
        persist: Persist::Interval,
        ..RoomType::default()
    };
    core_serving(player, Some(room))
}

/// Logs `c` in as its player and joins it to the room.
fn log_in_and_join(core: &mut RouterCore, table: &mut MemoryTable, seq: u64, c: ClientRef) {
    let key = player::player_key(c.player_id);
    send(core, seq, key, player::OP_BIND, Vec::new(), c);
    let join = ROOM.to_le_bytes().to_vec();
    send(core, seq + 1, key, player::OP_ROOM_JOIN, join, c);
    let effects = settle(core, table);
    assert!(
        matches!(outcome_of(&effects, seq + 1), Some(Ok(_))),
        "{effects:?}"
    );
}

/// `room.say` by `c`: the sessions pushed to, the sessions found gone, and
/// the count the room answered.
fn say(
    core: &mut RouterCore,
    table: &mut MemoryTable,
    seq: u64,
    c: ClientRef,
) -> (Vec<u64>, Vec<ClientRef>, u32) {
    let mut body = ROOM.to_le_bytes().to_vec();
    body.extend_from_slice(b"hello");
    send(core, seq, room::room_key(ROOM), room::OP_SAY, body, c);
    let effects = settle(core, table);
    let pushed = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Push { client, .. } => Some(client.session_id),
            _ => None,
        })
        .collect();
    let gone = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::SessionGone { client } => Some(*client),
            _ => None,
        })
        .collect();
    let count = match outcome_of(&effects, seq) {
        Some(Ok(body)) => u32::from_le_bytes(body.try_into().expect("a u32 count")),
        other => panic!("say answered {other:?}"),
    };
    (pushed, gone, count)
}

/// A push to a session of a node membership declared down tells its player
/// the session is gone (as its gateway would tell it of a close),
/// and the room stops counting it. A session of a later start of that node
/// is not judged. Once the node is back, a session of its that asks its
/// player again is taken back, and the room pushes to it again.
#[test]
fn a_session_of_a_node_declared_down_is_unbound_at_its_first_push() {
    let mut table = MemoryTable::default();
    let mut core = core();
    // Draining, so that every object is placed here, on node 1.
    core.on_member(NodeId(2), 1, MemberState::Draining);
    let here = client(1, 1);
    let there = ClientRef {
        gateway_node: NodeId(2),
        ..client(2, wire::ids::make(0, 1, 2))
    };
    log_in_and_join(&mut core, &mut table, 1, here);
    log_in_and_join(&mut core, &mut table, 3, there);
    assert_eq!(
        say(&mut core, &mut table, 5, here),
        (vec![here.session_id, there.session_id], vec![], 2)
    );

    core.on_member(NodeId(2), 1, MemberState::Down);
    // The room still counts the member, and pushes to it; its player
    // hears the session is gone.
    assert_eq!(
        say(&mut core, &mut table, 6, here),
        (vec![here.session_id, there.session_id], vec![there], 2)
    );
    assert_eq!(core.counters().pushes_to_ended_sessions_total, 1);
    // The driver delivers that as the session's unbind: the player tells
    // the room, which counts the member logged out.
    unbind(&mut core, 7, there);
    settle(&mut core, &mut table);
    assert_eq!(
        say(&mut core, &mut table, 8, here),
        (vec![here.session_id], vec![], 1)
    );

    // A session of the node's next start, not heard of yet, is not judged.
    let next_start = ClientRef {
        gateway_node: NodeId(2),
        ..client(3, wire::ids::make(0, 2, 3))
    };
    log_in_and_join(&mut core, &mut table, 9, next_start);
    assert_eq!(
        say(&mut core, &mut table, 11, here),
        (vec![here.session_id, next_start.session_id], vec![], 2)
    );

    // The node was only fenced and rejoins: its session asks its player,
    // which takes it back and tells the room.
    core.on_member(NodeId(2), 2, MemberState::Draining);
    send(
        &mut core,
        12,
        player::player_key(2),
        player::OP_GET,
        Vec::new(),
        there,
    );
    let effects = settle(&mut core, &mut table);
    assert!(
        matches!(outcome_of(&effects, 12), Some(Ok(_))),
        "{effects:?}"
    );
    let (mut pushed, gone, count) = say(&mut core, &mut table, 13, here);
    pushed.sort_unstable();
    let mut all = vec![here.session_id, there.session_id, next_start.session_id];
    all.sort_unstable();
    assert_eq!((pushed, gone, count), (all, vec![], 3));
}
