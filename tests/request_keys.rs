//! Request keys through real nodes (docs/protocol.md, section 12): a keyed
//! `player.incr` retried after its answer gets that answer again and the
//! counter moves once, on another connection too; with `on_write`, a retry
//! that reaches the player's new owner after `kill -9` of the old one still
//! gets the original answer, and one whose effect is its pushes (a
//! `room.say`) does not push again; a version-2 frame too short for its
//! key is a protocol violation.

mod support;

use std::time::Duration;

use routerd::testing::client::Reply;
use support::cluster::{
    login_eventually, object_owner, players_owned_by, wait_members_up, LocalCluster, DOWN_AFTER_MS,
};
use support::{counter_of, Client};
use wire::client::{encode_keyed_request, route, ErrorCode, FrameKind};

/// A `player.incr` by `delta` with `key`, as a version-2 REQUEST.
fn keyed_incr(client: &mut Client, seq: u32, key: u64, delta: i64) -> i64 {
    let mut frame = Vec::new();
    encode_keyed_request(
        &mut frame,
        route::PLAYER_INCR,
        seq,
        key,
        &delta.to_le_bytes(),
    );
    client.send_raw(&frame);
    let reply = client.recv();
    assert_eq!(reply.seq, seq, "{reply:?}");
    counter_of(&reply)
}

fn get(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_GET, seq, &[]))
}

fn a_keyed_incr_retried_after_its_answer_is_answered_the_same_and_counts_once(
    cluster: LocalCluster,
) {
    let node = cluster.start(1);
    let mut client = node.connect();
    client.login(7, 1);
    assert_eq!(keyed_incr(&mut client, 2, 0xfeed, 5), 5);
    assert_eq!(keyed_incr(&mut client, 3, 0xfeed, 5), 5, "the retry");
    assert_eq!(get(&mut client, 4), 5, "counted once");
    // Key 0 is no key: both run.
    assert_eq!(keyed_incr(&mut client, 5, 0, 1), 6);
    assert_eq!(keyed_incr(&mut client, 6, 0, 1), 7);
    // Version-1 requests on the same connection are as before.
    let plain = counter_of(&client.call(route::PLAYER_INCR, 7, &1i64.to_le_bytes()));
    assert_eq!(plain, 8);
    // A retry on a new connection (the first one lost) is the same player's.
    drop(client);
    let mut again = node.connect();
    again.login(7, 1);
    assert_eq!(keyed_incr(&mut again, 2, 0xfeed, 5), 5);
    assert_eq!(get(&mut again, 3), 8);
    // Another player's key 0xfeed is another request.
    let mut other = node.connect();
    other.login(8, 1);
    assert_eq!(keyed_incr(&mut other, 2, 0xfeed, 3), 3);

    // A version-2 REQUEST shorter than its key: an ERROR, then the close.
    let mut bad = node.connect();
    let mut frame = Vec::new();
    encode_keyed_request(&mut frame, route::SYS_PING, 1, 0, b"");
    frame[12] = 4; // body_len 4
    frame.truncate(16 + 4);
    bad.send_raw(&frame);
    let reply = bad.recv();
    assert_eq!(reply.kind, FrameKind::Error);
    assert_eq!(reply.error_code(), ErrorCode::BadRequest as u16);
    assert!(reply.error_reason().contains("request key"), "{reply:?}");
    bad.expect_closed();
}

fn a_retry_at_the_new_owner_after_kill_9_gets_the_original_answer(cluster: LocalCluster) {
    assert_eq!(cluster.persist, "on_write");
    let a = cluster.start(1);
    let b = cluster.start(2);
    wait_members_up(&a, &[2]);
    wait_members_up(&b, &[1]);
    let mut client = a.connect();
    client.login(7, 1);
    assert_eq!(keyed_incr(&mut client, 2, 41, 5), 5);
    assert_eq!(keyed_incr(&mut client, 3, 42, 2), 7);
    a.kill_9();

    // The client saw its answer, but retries as if it had not (a lost
    // answer looks the same to it): at node 2, once the player moved.
    let limit = Duration::from_millis(DOWN_AFTER_MS + 5000);
    let (mut moved, _) = login_eventually(b.gateway, 7, limit);
    assert_eq!(keyed_incr(&mut moved, 2, 41, 5), 5, "the original answer");
    assert_eq!(keyed_incr(&mut moved, 3, 42, 2), 7, "the original answer");
    assert_eq!(get(&mut moved, 4), 7, "neither retry ran again");
    assert_eq!(keyed_incr(&mut moved, 5, 43, 1), 8, "a new key runs");
}

/// A keyed `room.say` of `text` in `room` as request `seq`: the reply
/// (pushes before it skipped).
fn keyed_say(client: &mut Client, seq: u32, key: u64, room: u64, text: &str) -> Reply {
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(text.as_bytes());
    let mut frame = Vec::new();
    encode_keyed_request(&mut frame, route::ROOM_SAY, seq, key, &body);
    client.send_raw(&frame);
    reply_skipping_pushes(client, seq).1
}

/// The reply to `seq`, and how many `room.message` pushes came before it.
fn reply_skipping_pushes(client: &mut Client, seq: u32) -> (usize, Reply) {
    let mut messages = 0;
    loop {
        let frame = client.recv();
        match frame.kind {
            FrameKind::Push if frame.route_id == route::ROOM_MESSAGE => messages += 1,
            FrameKind::Push => {}
            _ => {
                assert_eq!(frame.seq, seq, "{frame:?}");
                return (messages, frame);
            }
        }
    }
}

/// The `room.message` pushes `client` received before a ping's answer.
fn messages_received(client: &mut Client, seq: u32) -> usize {
    client.send(route::SYS_PING, seq, &[]);
    reply_skipping_pushes(client, seq).0
}

/// Joins `client` to a room node 1 holds (creating one): tries room ids in
/// turn, leaving each that was placed elsewhere.
fn join_room_of_node_1(client: &mut Client, node: &support::ServeProcess) -> u64 {
    for room in 1000..1064u64 {
        client.call(route::ROOM_JOIN, 2, &room.to_le_bytes()).ok();
        if object_owner(node.admin, "room", room).is_some_and(|(id, _)| id == 1) {
            return room;
        }
        client.call(route::ROOM_LEAVE, 3, &room.to_le_bytes()).ok();
    }
    panic!("no room placed on node 1");
}

fn a_keyed_say_retried_at_the_new_owner_after_kill_9_does_not_push_again(
    mut cluster: LocalCluster,
) {
    cluster.extra = "[services.room]\npersist = \"on_write\"\n".to_string();
    let doomed = cluster.start(1);
    let survivor = cluster.start(2);
    wait_members_up(&doomed, &[2]);
    wait_members_up(&survivor, &[1]);
    // The two members' players and sessions live on node 2, the room on
    // node 1, which dies right after the say is answered.
    let players = players_owned_by(&survivor, 2, 2);
    let mut sayer = survivor.connect();
    sayer.login(players[0], 1);
    let mut listener = survivor.connect();
    listener.login(players[1], 1);
    let room = join_room_of_node_1(&mut sayer, &survivor);
    listener.call(route::ROOM_JOIN, 2, &room.to_le_bytes()).ok();
    let answer = keyed_say(&mut sayer, 4, 77, room, "once").ok();
    let pushed = listener.recv();
    assert_eq!(pushed.route_id, route::ROOM_MESSAGE, "{pushed:?}");
    doomed.kill_9();

    // The sayer saw its answer but retries as if it had not, until the
    // room's new owner answers.
    let limit = Duration::from_millis(DOWN_AFTER_MS + 5000);
    let started = std::time::Instant::now();
    let mut seq = 5;
    let retried = loop {
        let reply = keyed_say(&mut sayer, seq, 77, room, "once");
        if reply.kind == FrameKind::Response {
            break reply.ok();
        }
        assert!(started.elapsed() < limit, "still refused: {reply:?}");
        std::thread::sleep(Duration::from_millis(50));
        seq += 1;
    };
    assert_eq!(retried, answer, "the original answer");
    // A second run's pushes would have left with its answer; the room and
    // both sessions are on node 2 now, so they would have arrived by then.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        messages_received(&mut listener, 4),
        0,
        "the say was remembered durably before its answer, so it did not run again"
    );
}

on_every_store!(
    a_keyed_incr_retried_after_its_answer_is_answered_the_same_and_counts_once,
    a_retry_at_the_new_owner_after_kill_9_gets_the_original_answer,
    a_keyed_say_retried_at_the_new_owner_after_kill_9_does_not_push_again,
);
