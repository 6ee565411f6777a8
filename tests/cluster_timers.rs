//! Nodes that run different membership timers: the timing rule spans two
//! configs (a node's lease, its observer's wait), so each row carries its
//! node's timers and nobody declares a node down, or takes its id over,
//! before that node's own lease has run out.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{
    eventually, get_json, login_eventually, player_owner, wait_members_up, LocalCluster,
    DOWN_AFTER_MS, FENCE_AFTER_MS, HEARTBEAT_MS,
};
use support::counter_of;
use wire::client::route;

/// Node 1's lease and wait: six times the cluster's.
const LONG_FENCE_MS: u64 = 6 * FENCE_AFTER_MS;
const LONG_DOWN_MS: u64 = LONG_FENCE_MS + 2 * HEARTBEAT_MS;

/// What an observer must wait for node 1's row: its lease and the margin.
const LONG_WAIT_MS: u64 = LONG_FENCE_MS + 2 * HEARTBEAT_MS;

/// The earliest a declaration may follow a kill: the node's last heartbeat
/// (its lease's start) may have been sent up to an interval before it, and
/// its observer's clock reads from the first read of it, a poll later.
const EARLIEST_AFTER_KILL_MS: u64 = LONG_WAIT_MS - 2 * HEARTBEAT_MS;

fn timers_of(member: &serde_json::Value) -> (u64, u64, u64) {
    let timers = &member["timers"];
    (
        timers["heartbeat_interval_ms"].as_u64().expect("heartbeat"),
        timers["fence_after_ms"].as_u64().expect("fence"),
        timers["down_after_ms"].as_u64().expect("down"),
    )
}

fn member(node: &support::ServeProcess, id: u64) -> serde_json::Value {
    let view = get_json(node.admin, "/cluster");
    view["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|member| member["node_id"] == id)
        .cloned()
        .expect("member listed")
}

fn a_node_with_a_longer_lease_is_declared_down_only_after_it(cluster: LocalCluster) {
    let long = cluster.start_with_timers(1, LONG_FENCE_MS, LONG_DOWN_MS);
    let short = cluster.start(2);
    wait_members_up(&long, &[2]);
    wait_members_up(&short, &[1]);
    // Each sees the other's timers in its row, and says they differ.
    assert_eq!(
        timers_of(&member(&short, 1)),
        (HEARTBEAT_MS, LONG_FENCE_MS, LONG_DOWN_MS)
    );
    assert_eq!(
        timers_of(&member(&long, 2)),
        (HEARTBEAT_MS, FENCE_AFTER_MS, DOWN_AFTER_MS)
    );
    assert_eq!(
        timers_of(&member(&long, 1)),
        (HEARTBEAT_MS, LONG_FENCE_MS, LONG_DOWN_MS)
    );
    let wait = format!("declared_down_after_ms={LONG_WAIT_MS}");
    short.assert_logged(&["other cluster timers", "node=1", &wait]);

    let mut client = long.connect();
    client.login(7, 1);
    let one = client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(counter_of(&one), 1);
    assert_eq!(player_owner(short.admin, 7).map(|(node, _)| node), Some(1));

    long.kill_9();
    let killed = Instant::now();
    let limit = Duration::from_millis(LONG_WAIT_MS + 3000);
    let declared = eventually(limit, "node 1 declared down", || {
        (member(&short, 1)["state"] == "down").then(|| killed.elapsed())
    });
    println!(
        "node 1 (lease {LONG_FENCE_MS} ms) declared down {declared:?} after its kill by a node \
         whose own down_after_ms is {DOWN_AFTER_MS}"
    );
    assert!(
        declared >= Duration::from_millis(EARLIEST_AFTER_KILL_MS),
        "declared {declared:?} after the kill, before its {LONG_FENCE_MS} ms lease could end"
    );
    // Then its player moves, its durable counter with it.
    let (mut moved, _) = login_eventually(short.gateway, 7, Duration::from_secs(5));
    let two = moved.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(counter_of(&two), 2);
}

fn a_restart_with_a_shorter_wait_waits_out_the_lease_of_the_process_it_replaces(
    cluster: LocalCluster,
) {
    let long = cluster.start_with_timers(1, LONG_FENCE_MS, LONG_DOWN_MS);
    long.kill_9();
    let killed = Instant::now();
    // The cluster's timers: its own down_after_ms would take the id after
    // DOWN_AFTER_MS of the row standing still.
    let again = cluster.start(1);
    let took = killed.elapsed();
    println!("the restart took the id {took:?} after the kill");
    assert!(
        took >= Duration::from_millis(EARLIEST_AFTER_KILL_MS),
        "took the id {took:?} after the kill, before the old lease ({LONG_FENCE_MS} ms) could end"
    );
    assert_eq!(get_json(again.admin, "/cluster")["incarnation"], 2);
    assert_eq!(
        timers_of(&member(&again, 1)),
        (HEARTBEAT_MS, FENCE_AFTER_MS, DOWN_AFTER_MS)
    );
}

on_every_store!(
    a_node_with_a_longer_lease_is_declared_down_only_after_it,
    a_restart_with_a_shorter_wait_waits_out_the_lease_of_the_process_it_replaces,
);
