//! A room counts a member logged in only while the member's session
//! stands. A session whose node was killed never closes, so no unbind
//! tells its player; a push to it does instead:
//! - its node started again: the new start does not know the session and
//!   releases it when a push names it
//!   (`routerd_gateway_stale_sessions_released_total`);
//! - its node is gone for good: once membership declared the node down, a
//!   push to its session tells the player too
//!   (`routerd_router_pushes_to_ended_sessions_total`).
//!
//! `room.say` answers how many members the room counts logged in: before
//! either rule, it counted the dead sessions for as long as the room
//! lived. A node that was only frozen past its lease keeps its sessions
//! through its fence: the first request of such a session takes it back.

mod support;

use std::time::{Duration, Instant};

use routerd::testing::client::Reply;
use support::cluster::{
    login_eventually, metric_at, object_owner, players_owned_by, wait_members_up, LocalCluster,
    FENCE_AFTER_MS,
};
use support::Client;
use wire::client::{route, FrameKind};

/// The answer to request `seq`, skipping the pushes that come first.
fn call(client: &mut Client, route_id: u32, seq: u32, body: &[u8]) -> Reply {
    client.send(route_id, seq, body);
    loop {
        let reply = client.recv();
        if reply.kind != FrameKind::Push {
            assert_eq!(reply.seq, seq, "{reply:?}");
            return reply;
        }
    }
}

/// What `say` says as request `seq`.
fn said(seq: u32) -> String {
    format!("say {seq}")
}

/// `room.say` in `room` by `client` as request `seq`: the count of members
/// the room pushed to.
fn say(client: &mut Client, room: u64, seq: u32) -> u32 {
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(said(seq).as_bytes());
    let count = call(client, route::ROOM_SAY, seq, &body).ok();
    u32::from_le_bytes(count.try_into().expect("a u32 count"))
}

/// Says in `room` every 50 ms until the room counts `want` members logged
/// in; how long that took.
fn say_until(client: &mut Client, room: u64, seq: &mut u32, want: u32) -> Duration {
    let started = Instant::now();
    loop {
        *seq += 1;
        let count = say(client, room, *seq);
        if count == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the room still counts {count} members logged in, want {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Joins `client` to a room node `owner_id` holds (creating one): tries
/// room ids in turn, leaving each that was placed elsewhere.
fn join_room_of(client: &mut Client, node: &support::ServeProcess, owner_id: u64) -> u64 {
    for (seq, room) in (1000..1032u64).enumerate() {
        let seq = 100 + 2 * seq as u32;
        call(client, route::ROOM_JOIN, seq, &room.to_le_bytes()).ok();
        if object_owner(node.admin, "room", room).is_some_and(|(id, _)| id == owner_id) {
            return room;
        }
        client
            .call(route::ROOM_LEAVE, seq + 1, &room.to_le_bytes())
            .ok();
    }
    panic!("no room placed on node {owner_id}");
}

fn join(client: &mut Client, room: u64) {
    call(client, route::ROOM_JOIN, 2, &room.to_le_bytes()).ok();
}

fn a_room_stops_counting_members_whose_node_restarted_or_died(cluster: LocalCluster) {
    // Node 1 is killed; its row asks for a long wait before it is declared
    // down, so its restart comes first.
    let survivor = cluster.start(2);
    let doomed = cluster.start_with_timers(1, FENCE_AFTER_MS, 10_000);
    wait_members_up(&survivor, &[1]);
    wait_members_up(&doomed, &[2]);
    // The room and the players live on node 2; the sayer is logged in
    // there, the two other members on node 1.
    let players = players_owned_by(&survivor, 2, 3);
    let (mut sayer, _) = login_eventually(survivor.gateway, players[0], Duration::from_secs(5));
    let room = join_room_of(&mut sayer, &survivor, 2);
    let log_in_and_join = |gateway| -> Vec<Client> {
        players[1..]
            .iter()
            .map(|&player| {
                let (mut member, _) = login_eventually(gateway, player, Duration::from_secs(5));
                join(&mut member, room);
                member
            })
            .collect()
    };
    let members = log_in_and_join(doomed.gateway);
    let mut seq = 1_000;
    say_until(&mut sayer, room, &mut seq, 3);

    // Node 1 is killed and started again before anyone declared it down:
    // the new start does not know the sessions the room pushes to.
    doomed.kill_9();
    drop(members);
    let restarted = cluster.start(1);
    wait_members_up(&survivor, &[1]);
    let took = say_until(&mut sayer, room, &mut seq, 1);
    println!("the room counted the restarted node's old sessions out after {took:?}");
    assert!(
        metric_at(
            restarted.admin,
            "routerd_gateway_stale_sessions_released_total"
        ) >= 2,
        "the new start released both sessions"
    );

    // Both log in again there; then node 1 dies for good.
    let members = log_in_and_join(restarted.gateway);
    say_until(&mut sayer, room, &mut seq, 3);
    let killed = Instant::now();
    restarted.kill_9();
    drop(members);
    say_until(&mut sayer, room, &mut seq, 1);
    println!(
        "the room counted the dead node's sessions out {:?} after the kill",
        killed.elapsed()
    );
    assert!(
        metric_at(
            survivor.admin,
            "routerd_router_pushes_to_ended_sessions_total"
        ) >= 2
    );
}

fn a_session_that_outlived_its_node_s_fence_is_taken_back_at_its_next_request(
    cluster: LocalCluster,
) {
    let survivor = cluster.start(2);
    let frozen = cluster.start(1);
    wait_members_up(&survivor, &[1]);
    wait_members_up(&frozen, &[2]);
    let players = players_owned_by(&survivor, 2, 2);
    let (mut sayer, _) = login_eventually(survivor.gateway, players[0], Duration::from_secs(5));
    let room = join_room_of(&mut sayer, &survivor, 2);
    let (mut member, _) = login_eventually(frozen.gateway, players[1], Duration::from_secs(5));
    join(&mut member, room);
    let mut seq = 1_000;
    say_until(&mut sayer, room, &mut seq, 2);

    // Node 1 frozen past down_after_ms: declared down, so the next push to
    // its session unbinds the member's player.
    frozen.freeze();
    say_until(&mut sayer, room, &mut seq, 1);
    frozen.thaw();
    wait_members_up(&frozen, &[2]);
    wait_members_up(&survivor, &[1]);

    // It fenced and rejoined with its sessions: the member's next request
    // takes its session back, and the room pushes to it again.
    let reply = call(&mut member, route::PLAYER_GET, 3, &[]);
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    say_until(&mut sayer, room, &mut seq, 2);
    let last = said(seq);
    loop {
        let push = member.recv();
        if push.kind == FrameKind::Push && push.body.ends_with(last.as_bytes()) {
            break;
        }
    }
}

on_every_store!(
    a_room_stops_counting_members_whose_node_restarted_or_died,
    a_session_that_outlived_its_node_s_fence_is_taken_back_at_its_next_request,
);
