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
//! lived.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{
    login_eventually, metric_at, object_owner, players_owned_by, wait_members_up, LocalCluster,
    FENCE_AFTER_MS,
};
use support::Client;
use wire::client::{route, FrameKind};

/// `room.say` in `room` by `client` as request `seq`: the count of members
/// the room pushed to (the pushes the sayer gets meanwhile are skipped).
fn say(client: &mut Client, room: u64, seq: u32) -> u32 {
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(b"anyone there?");
    client.send(route::ROOM_SAY, seq, &body);
    loop {
        let reply = client.recv();
        if reply.kind == FrameKind::Push {
            continue;
        }
        assert_eq!(reply.seq, seq, "{reply:?}");
        let count = reply.ok();
        return u32::from_le_bytes(count.try_into().expect("a u32 count"));
    }
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
        client.call(route::ROOM_JOIN, seq, &room.to_le_bytes()).ok();
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
    client.call(route::ROOM_JOIN, 2, &room.to_le_bytes()).ok();
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

on_every_store!(a_room_stops_counting_members_whose_node_restarted_or_died);
