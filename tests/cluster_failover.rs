//! A node that dies, freezes or leaves: its objects move to the nodes that
//! remain within the membership timers, their durable state intact, and a
//! node that comes back does so as a new incarnation that never serves
//! what it held before.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{
    eventually, get_json, login_eventually, player_owner, wait_members_up, LocalCluster,
    DOWN_AFTER_MS,
};
use support::{counter_of, Client, ServeProcess};
use wire::client::{route, FrameKind};

fn incr(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes()))
}

fn pair(cluster: &LocalCluster) -> (ServeProcess, ServeProcess) {
    let a = cluster.start(1);
    let b = cluster.start(2);
    wait_members_up(&a, &[2]);
    wait_members_up(&b, &[1]);
    (a, b)
}

fn member_state(node: &ServeProcess, id: u64) -> Option<(String, u64)> {
    let cluster = get_json(node.admin, "/cluster");
    let member = cluster["members"]
        .as_array()?
        .iter()
        .find(|m| m["node_id"] == id)?
        .clone();
    Some((
        member["state"].as_str()?.to_string(),
        member["incarnation"].as_u64()?,
    ))
}

fn a_killed_node_is_declared_down_and_its_objects_move_within_down_after(cluster: LocalCluster) {
    let (a, b) = pair(&cluster);
    let mut client = a.connect();
    client.login(7, 1);
    assert_eq!(incr(&mut client, 2), 1);
    assert_eq!(incr(&mut client, 3), 2);
    a.kill_9();
    let killed = Instant::now();

    let limit = Duration::from_millis(DOWN_AFTER_MS + 1000);
    let (mut moved, _) = login_eventually(b.gateway, 7, limit);
    let failover = killed.elapsed();
    println!("failover took {failover:?} (down_after {DOWN_AFTER_MS} ms)");
    assert!(failover < limit, "{failover:?}");
    assert_eq!(incr(&mut moved, 2), 3, "the durable counter moved with it");
    assert_eq!(member_state(&b, 1), Some(("down".into(), 1)));
    assert_eq!(player_owner(b.admin, 7), Some((2, 1)));

    // Node 1 restarts: it was declared down, so it joins at once, as
    // incarnation 2, and serves player 7 through node 2.
    let again = cluster.start(1);
    assert_eq!(get_json(again.admin, "/cluster")["incarnation"], 2);
    wait_members_up(&b, &[1]);
    let mut through = again.connect();
    through.login(7, 1);
    assert_eq!(incr(&mut through, 2), 4);
}

fn a_second_process_with_the_id_of_a_live_node_is_refused(cluster: LocalCluster) {
    let a = cluster.start(1);
    let (status, stderr) = cluster.run_to_exit(1, Duration::from_secs(20));
    assert!(!status.success());
    assert!(
        stderr.contains("node id 1 is held by a live process"),
        "{stderr}"
    );
    // The live node was not disturbed.
    let mut client = a.connect();
    client.login(3, 1);
    assert_eq!(incr(&mut client, 2), 1);
    assert_eq!(get_json(a.admin, "/cluster")["incarnation"], 1);
}

fn a_frozen_node_is_fenced_and_comes_back_as_a_new_incarnation(cluster: LocalCluster) {
    let (a, b) = pair(&cluster);
    let mut old = a.connect();
    old.login(7, 1);
    assert_eq!(incr(&mut old, 2), 1);

    a.freeze();
    let frozen = Instant::now();
    let (mut moved, _) = login_eventually(b.gateway, 7, Duration::from_secs(5));
    println!("moved after {:?} frozen", frozen.elapsed());
    assert_eq!(incr(&mut moved, 2), 2);
    a.thaw();

    // Node 1 finds itself declared down, fences, and rejoins.
    eventually(Duration::from_secs(5), "node 1 rejoins", || {
        let view = get_json(a.admin, "/cluster");
        (view["incarnation"] == 2 && view["fenced"] == false).then_some(())
    });
    // Node 2 sees the new incarnation up too: before that it refuses the
    // links of an incarnation it does not know, and the request below
    // would wait for a link retry.
    wait_members_up(&b, &[1]);
    // The old session's login was superseded while its node was frozen
    // (the kick could not reach it): it is refused or closed, never served.
    old.send(route::PLAYER_INCR, 3, &1i64.to_le_bytes());
    match old.try_recv() {
        None => {}
        Some(reply) if reply.kind == FrameKind::Error => {}
        Some(reply) if reply.kind == FrameKind::Push && reply.route_id == route::SYS_KICKED => {}
        Some(reply) => panic!("the superseded session was served: {reply:?}"),
    }
    let mut again = a.connect();
    again.login(7, 1);
    assert_eq!(incr(&mut again, 2), 3);
    assert_eq!(player_owner(a.admin, 7).map(|(node, _)| node), Some(2));
}

fn a_node_that_leaves_cleanly_hands_its_objects_over_at_once(cluster: LocalCluster) {
    let (a, b) = pair(&cluster);
    let mut client = a.connect();
    client.login(9, 1);
    assert_eq!(incr(&mut client, 2), 1);
    drop(client);
    assert!(a.stop().success());
    let stopped = Instant::now();
    eventually(Duration::from_secs(2), "node 2 sees node 1 left", || {
        (member_state(&b, 1)?.0 == "left").then_some(())
    });
    let (mut moved, _) = login_eventually(b.gateway, 9, Duration::from_secs(5));
    let handover = stopped.elapsed();
    println!("handover took {handover:?}");
    assert!(
        handover < Duration::from_millis(DOWN_AFTER_MS),
        "{handover:?}: a left node's objects are claimable without waiting"
    );
    assert_eq!(incr(&mut moved, 2), 2);
}

/// The row of a node that left is deleted after `cluster.left_retention_ms`
/// (the other node drops it from its view), and a later start of that id
/// takes the incarnation after the one that left, from the tombstone the
/// deletion kept.
fn the_row_of_a_node_that_left_is_deleted_and_its_id_starts_higher(mut cluster: LocalCluster) {
    cluster.cluster_extra = format!("left_retention_ms = {DOWN_AFTER_MS}");
    let (a, b) = pair(&cluster);
    assert_eq!(member_state(&b, 1), Some(("up".into(), 1)));
    assert!(a.stop().success());
    eventually(Duration::from_secs(3), "node 2 sees node 1 left", || {
        (member_state(&b, 1)?.0 == "left").then_some(())
    });
    eventually(
        Duration::from_millis(5 * DOWN_AFTER_MS),
        "node 1's row deleted",
        || member_state(&b, 1).is_none().then_some(()),
    );
    let again = cluster.start(1);
    assert_eq!(get_json(again.admin, "/cluster")["incarnation"], 2);
    wait_members_up(&b, &[1]);
    assert_eq!(member_state(&b, 1), Some(("up".into(), 2)));
}

/// What one client saw of its player while the owner was killed.
struct Trace {
    player: u64,
    /// Acknowledged counter values, in order.
    acked: Vec<i64>,
    /// When the first answer after the kill came, from the kill.
    recovered_after: Option<Duration>,
    errors: u32,
}

fn under_load_a_killed_owner_loses_no_acknowledged_increment_and_no_two_nodes_serve_one_player(
    cluster: LocalCluster,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let a = cluster.start(1);
    let b = cluster.start(2);
    let c = cluster.start(3);
    for node in [&a, &b, &c] {
        let others: Vec<u64> = [1, 2, 3]
            .into_iter()
            .filter(|&id| get_json(node.admin, "/cluster")["node_id"] != id)
            .collect();
        wait_members_up(node, &others);
    }
    // Players are placed by rendezvous over the members: keep six that
    // landed on node 1.
    let players: Vec<u64> = (1..)
        .filter(|&player| {
            // Retried: a node on a loaded machine may refuse a moment.
            login_eventually(a.gateway, player, Duration::from_secs(5));
            player_owner(b.admin, player).map(|(node, _)| node) == Some(1)
        })
        .take(6)
        .collect();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let gateways = [b.gateway, c.gateway];
    let workers: Vec<_> = players
        .iter()
        .map(|&player| {
            let gateway = gateways[player as usize % 2];
            let (killed_at, stop) = (killed_at.clone(), stop.clone());
            std::thread::spawn(move || {
                // The session moves to a surviving node's gateway (the old
                // one on node 1 is kicked); the player stays on node 1.
                let (mut client, _) = login_eventually(gateway, player, Duration::from_secs(5));
                let mut trace = Trace {
                    player,
                    acked: Vec::new(),
                    recovered_after: None,
                    errors: 0,
                };
                let mut seq = 2;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    client.send(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
                    let reply = match client.try_recv() {
                        Some(reply) => reply,
                        None => {
                            // Closed (a kick while the player moved): log in
                            // again on the same gateway.
                            client = login_eventually(gateway, player, Duration::from_secs(5)).0;
                            continue;
                        }
                    };
                    assert_eq!(reply.seq, seq, "answers come in order: {reply:?}");
                    match reply.kind {
                        FrameKind::Response => {
                            trace.acked.push(counter_of(&reply));
                            let killed = *killed_at.lock().unwrap();
                            if let (Some(killed), None) = (killed, trace.recovered_after) {
                                if trace.errors > 0 {
                                    trace.recovered_after = Some(killed.elapsed());
                                }
                            }
                        }
                        FrameKind::Error => {
                            trace.errors += 1;
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        _ => panic!("unexpected {reply:?}"),
                    }
                }
                trace
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    a.kill_9();
    *killed_at.lock().unwrap() = Some(Instant::now());
    std::thread::sleep(Duration::from_millis(DOWN_AFTER_MS + 1500));
    stop.store(true, Ordering::Relaxed);
    let traces: Vec<Trace> = workers.into_iter().map(|w| w.join().unwrap()).collect();

    // Detection takes `DOWN_AFTER_MS`; the rest is the survivors' watch
    // noticing it, the claim's CAS and the load itself (six clients and
    // three nodes on two cores): 1.84 s and 1.92 s were seen on a machine
    // also running builds.
    let limit = Duration::from_millis(DOWN_AFTER_MS + 1500);
    for trace in &traces {
        assert!(trace.acked.len() > 5, "player {} barely ran", trace.player);
        // Strictly increasing: no acknowledged increment lost, and never
        // two nodes serving one player (their answers would repeat or go
        // back).
        for pair in trace.acked.windows(2) {
            assert!(
                pair[1] > pair[0],
                "player {}: {} then {}",
                trace.player,
                pair[0],
                pair[1]
            );
        }
        if trace.errors > 0 {
            let recovered = trace.recovered_after.expect("served again after the kill");
            println!(
                "player {} served again {recovered:?} after the kill",
                trace.player
            );
            assert!(recovered <= limit, "player {}: {recovered:?}", trace.player);
        }
        // The durable value holds every acknowledged increment.
        let node = [&b, &c][trace.player as usize % 2];
        let (mut client, _) = login_eventually(node.gateway, trace.player, Duration::from_secs(5));
        let now = counter_of(&client.call(route::PLAYER_GET, 2, &[]));
        assert!(
            now >= *trace.acked.last().unwrap(),
            "player {}",
            trace.player
        );
        assert_ne!(
            player_owner(b.admin, trace.player).map(|(node, _)| node),
            Some(1)
        );
    }
}

on_every_store!(
    a_killed_node_is_declared_down_and_its_objects_move_within_down_after,
    a_second_process_with_the_id_of_a_live_node_is_refused,
    a_frozen_node_is_fenced_and_comes_back_as_a_new_incarnation,
    a_node_that_leaves_cleanly_hands_its_objects_over_at_once,
    the_row_of_a_node_that_left_is_deleted_and_its_id_starts_higher,
    under_load_a_killed_owner_loses_no_acknowledged_increment_and_no_two_nodes_serve_one_player,
);
