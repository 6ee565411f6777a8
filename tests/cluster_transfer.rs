//! `POST /objects/{type}/{id}/transfer?to=N`: an object moves between
//! nodes under load with every request answered once and in order, and a
//! transfer that cannot be made is refused with its documented reason
//! while the object keeps serving.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::cluster::{
    eventually, member_state, player_owner, post_json, wait_members_up, LocalCluster,
};
use support::{counter_of, Client, ServeProcess};
use wire::client::{route, FrameKind};

fn incr(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes()))
}

fn three(cluster: &LocalCluster) -> Vec<ServeProcess> {
    let nodes: Vec<ServeProcess> = (1..=3).map(|id| cluster.start(id)).collect();
    for (i, node) in nodes.iter().enumerate() {
        let others: Vec<u64> = (1..=3).filter(|id| *id != i as u64 + 1).collect();
        wait_members_up(node, &others);
    }
    nodes
}

fn transfer_path(player: u64, to: u64) -> String {
    format!("/objects/player/{player}/transfer?to={to}")
}

/// Moves `player` to node `to` through `admin`; asserts it moved.
fn move_to(admin: std::net::SocketAddr, player: u64, to: u64) -> u64 {
    let (status, body) = post_json(admin, &transfer_path(player, to));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["owner"], to, "{body}");
    body["route_version"].as_u64().expect("a route version")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
fn a_player_hammered_from_a_third_node_moves_back_and_forth_and_loses_nothing() {
    const MOVES: u64 = 20;
    const PIPELINE: u32 = 4;
    let cluster = LocalCluster::new();
    let nodes = three(&cluster);
    let player = 7;
    // The session lives on node 3; the player is placed on node 1.
    let mut client = nodes[2].connect();
    client.login(player, 1);
    assert_eq!(incr(&mut client, 2), 1);
    if player_owner(nodes[0].admin, player).map(|(node, _)| node) != Some(1) {
        move_to(nodes[2].admin, player, 1);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let hammer = std::thread::spawn({
        let stop = stop.clone();
        move || {
            // Seqs 3.. with PIPELINE in flight; every answer must be the
            // one RESPONSE of a seq in flight.
            let mut answers: Vec<(u32, i64)> = Vec::new();
            let mut next_seq = 3u32;
            let mut in_flight = 0;
            loop {
                while in_flight < PIPELINE && !stop.load(Ordering::Acquire) {
                    client.send(route::PLAYER_INCR, next_seq, &1i64.to_le_bytes());
                    next_seq += 1;
                    in_flight += 1;
                }
                if in_flight == 0 {
                    return (answers, next_seq);
                }
                let reply = client.recv();
                assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
                assert_eq!(reply.route_id, route::PLAYER_INCR);
                answers.push((reply.seq, counter_of(&reply)));
                in_flight -= 1;
            }
        }
    });

    let mut latencies = Vec::new();
    let mut last_version = 0;
    for i in 0..MOVES {
        std::thread::sleep(Duration::from_millis(30));
        let to = if i % 2 == 0 { 2 } else { 1 };
        // Alternately through the owner and through node 3, which forwards.
        let admin = if i % 3 == 0 {
            nodes[2].admin
        } else {
            nodes[(3 - to) as usize - 1].admin
        };
        let started = Instant::now();
        let version = move_to(admin, player, to);
        latencies.push(started.elapsed());
        assert!(version > last_version, "route versions only grow");
        last_version = version;
        assert_eq!(
            player_owner(nodes[2].admin, player).map(|(n, _)| n),
            Some(to)
        );
    }
    std::thread::sleep(Duration::from_millis(30));
    stop.store(true, Ordering::Release);
    let (mut answers, next_seq) = hammer.join().expect("the hammer saw only good answers");

    // Every request answered exactly once, and in seq order the counter
    // grows by one each time: nothing lost, nothing applied twice.
    answers.sort_unstable();
    let seqs: Vec<u32> = answers.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (3..next_seq).collect::<Vec<_>>());
    for (i, (seq, value)) in answers.iter().enumerate() {
        assert_eq!(*value, i as i64 + 2, "seq {seq}");
    }
    let acknowledged = answers.len() as i64 + 1;
    let mut check = nodes[0].connect();
    check.login(player, 1);
    assert_eq!(
        counter_of(&check.call(route::PLAYER_GET, 2, &[])),
        acknowledged
    );
    latencies.sort_unstable();
    println!(
        "{MOVES} transfers under load ({} increments): p50 {:?}, p99 {:?}, max {:?}",
        answers.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().unwrap()
    );
}

#[test]
fn a_transfer_that_cannot_be_made_is_refused_and_the_object_keeps_serving() {
    let mut cluster = LocalCluster::new();
    // Long enough for node 2 to stay draining while a silent session holds
    // it.
    cluster.cluster_extra = "redirect_grace_ms = 4000\n".into();
    let mut nodes = three(&cluster);
    let player = 5;
    let mut client = nodes[0].connect();
    client.login(player, 1);
    let mut seq = 2;
    let mut served = |client: &mut Client, expected: i64| {
        assert_eq!(incr(client, seq), expected);
        seq += 1;
    };
    served(&mut client, 1);
    if player_owner(nodes[0].admin, player).map(|(node, _)| node) != Some(1) {
        move_to(nodes[1].admin, player, 1);
    }
    let admin = nodes[1].admin;

    // Bad calls.
    let (status, body) = post_json(admin, &transfer_path(999_999, 2));
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("no_such_object"))
    );
    let (status, body) = post_json(admin, &format!("/objects/player/{player}/transfer"));
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, _) = post_json(admin, &transfer_path(player, 0));
    assert_eq!(status, 400);
    let (status, body) = post_json(admin, &transfer_path(player, 42));
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("unknown_node")),
        "{body}"
    );
    // Where it is already: nothing to do.
    let (status, body) = post_json(admin, &transfer_path(player, 1));
    assert_eq!((status, &body["moved"]), (200, &serde_json::json!(false)));
    served(&mut client, 2);

    // To a draining node: node 2 drains, held open by a silent session.
    let mut silent = nodes[1].connect();
    let (status, body) = post_json(nodes[1].admin, "/drain");
    assert_eq!(status, 202, "{body}");
    let redirect = silent.recv();
    assert_eq!(
        (redirect.kind, redirect.route_id),
        (FrameKind::Push, route::SYS_REDIRECT)
    );
    eventually(
        Duration::from_secs(3),
        "node 1 sees node 2 draining",
        || (member_state(nodes[0].admin, 2)? == "draining").then_some(()),
    );
    let (status, body) = post_json(nodes[2].admin, &transfer_path(player, 2));
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("target_draining")),
        "{body}"
    );
    served(&mut client, 3);
    // The silent session is closed after its grace; the node exits 0.
    silent.expect_closed_within(Duration::from_secs(6));
    let drained = nodes.remove(1);
    assert!(drained.wait_exit_within(Duration::from_secs(10)).success());

    // To a down node: node 3 is killed and declared down.
    let killed = nodes.remove(1);
    killed.kill_9();
    eventually(Duration::from_secs(5), "node 1 sees node 3 down", || {
        (member_state(nodes[0].admin, 3)? == "down").then_some(())
    });
    let (status, body) = post_json(nodes[0].admin, &transfer_path(player, 3));
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("target_unavailable")),
        "{body}"
    );
    served(&mut client, 4);
    assert_eq!(
        player_owner(nodes[0].admin, player).map(|(n, _)| n),
        Some(1)
    );
}
