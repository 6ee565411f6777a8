//! `POST /drain`: a node hands its objects to the others, tells its
//! clients where to go (`sys.redirect`), closes their sessions once they
//! left or their grace ended, leaves the cluster and exits 0, with no
//! request failed for clients that follow the redirect. Done to each node
//! in turn, that is a rolling restart with zero failed requests and zero
//! lost increments.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use routerd::builtins::player::player_key;
use routerd::router::rendezvous_score;
use routerd::store::NodeId;
use support::cluster::{
    eventually, get_json, http_get, member_state, player_owner, post_json, wait_members_up,
    LocalCluster,
};
use support::follower::{self, Gateways, Report};
use support::{counter_of, ServeProcess};
use wire::client::{route, FrameKind};

fn start_all(cluster: &LocalCluster, ids: &[u64]) -> Vec<ServeProcess> {
    let nodes: Vec<ServeProcess> = ids.iter().map(|id| cluster.start(*id)).collect();
    wait_all_up(&nodes, ids);
    nodes
}

fn wait_all_up(nodes: &[ServeProcess], ids: &[u64]) {
    for (node, id) in nodes.iter().zip(ids) {
        let others: Vec<u64> = ids.iter().copied().filter(|other| other != id).collect();
        wait_members_up(node, &others);
    }
}

/// Players whose default node among 1..=3 is `node`.
fn players_placed_on(node: u64, count: usize) -> Vec<u64> {
    (1000..)
        .filter(|player| {
            let key = player_key(*player);
            (1..=3u64).max_by_key(|n| (rendezvous_score(key, NodeId(*n)), *n)) == Some(node)
        })
        .take(count)
        .collect()
}

/// Every follower's report once `stop` is set.
fn finish(stop: &AtomicBool, followers: Vec<std::thread::JoinHandle<Report>>) -> Vec<Report> {
    stop.store(true, Ordering::Release);
    followers
        .into_iter()
        .map(|follower| follower.join().expect("a follower ran to its end"))
        .collect()
}

/// The counter of `player`, read through `gateway` on a fresh session.
fn counter(gateway: SocketAddr, player: u64) -> i64 {
    let mut client = support::Client::connect(gateway);
    client.login(player, 1);
    counter_of(&client.call(route::PLAYER_GET, 2, &[]))
}

/// Asserts no follower failed and every acknowledged increment is in its
/// player's counter; prints the figures.
fn check(reports: &[Report], gateway: SocketAddr, what: &str) {
    let failures: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.failures
                .iter()
                .map(move |f| format!("player {}: {f}", r.player))
        })
        .collect();
    let total = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    let gap = reports
        .iter()
        .map(|r| r.longest_gap)
        .max()
        .unwrap_or_default();
    println!(
        "{what}: {} clients, sent {}, answered {}, failed {}, redirects {}, reconnects {}, \
         longest gap {gap:?}",
        reports.len(),
        total(|r| r.sent),
        total(|r| r.answered),
        failures.len(),
        total(|r| r.redirects),
        total(|r| r.reconnects),
    );
    assert!(failures.is_empty(), "{failures:#?}");
    for report in reports {
        assert_eq!(report.sent, report.answered, "player {}", report.player);
        assert!(
            report.acked_increments > 0,
            "player {} made progress",
            report.player
        );
        assert_eq!(
            counter(gateway, report.player),
            report.acked_increments,
            "player {}: every acknowledged increment, once",
            report.player
        );
    }
}

#[test]
fn a_drained_node_hands_over_objects_and_sessions_and_exits_0() {
    let mut cluster = LocalCluster::new();
    cluster.cluster_extra = "redirect_grace_ms = 2000\n".into();
    let mut nodes = start_all(&cluster, &[1, 2, 3]);
    let gateways: Gateways = Arc::new(Mutex::new(vec![nodes[1].gateway, nodes[2].gateway]));
    let stop = Arc::new(AtomicBool::new(false));
    // Six players node 1 owns, two it does not; all connected to node 1.
    let mut players = players_placed_on(1, 6);
    players.extend(players_placed_on(2, 2));
    let followers: Vec<_> = players
        .iter()
        .map(|player| follower::spawn(*player, nodes[0].gateway, gateways.clone(), stop.clone()))
        .collect();
    // A client that ignores the redirect: it is answered until its grace
    // ends, then closed.
    let mut ignoring = nodes[0].connect();
    ignoring.login(77, 1);
    eventually(Duration::from_secs(5), "node 1 owns its players", || {
        players[..6]
            .iter()
            .all(|p| player_owner(nodes[0].admin, *p).map(|(n, _)| n) == Some(1))
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));

    let drained_at = Instant::now();
    let (status, body) = post_json(nodes[0].admin, "/drain");
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        http_get(nodes[0].admin, "/healthz"),
        (503, "draining".to_string())
    );
    let (status, again) = post_json(nodes[0].admin, "/drain");
    assert_eq!(
        (status, &again["draining"]),
        (202, &serde_json::json!(true))
    );

    let mut redirected = false;
    let mut seq = 2;
    let mut last_ok = Instant::now();
    loop {
        ignoring.send(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        let mut answered = false;
        while !answered {
            match ignoring.try_recv() {
                Some(reply) if reply.kind == FrameKind::Push => {
                    assert_eq!(reply.route_id, route::SYS_REDIRECT, "{reply:?}");
                    redirected = true;
                }
                Some(reply) => {
                    assert_eq!(reply.seq, seq);
                    match reply.kind {
                        FrameKind::Response => last_ok = Instant::now(),
                        // After the grace: told to go, never a TIMEOUT.
                        _ => assert_eq!(reply.error_code(), 7, "{reply:?}"),
                    }
                    answered = true;
                }
                None => break,
            }
        }
        if !answered {
            break;
        }
        seq += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(redirected, "the ignoring client was told to move");
    let served_for = last_ok.duration_since(drained_at);
    assert!(
        served_for >= Duration::from_millis(1500),
        "answered through the grace: {served_for:?}"
    );

    let drained = nodes.remove(0);
    let status = drained.wait_exit_within(Duration::from_secs(15));
    println!("drain to exit: {:?}", drained_at.elapsed());
    assert!(status.success(), "{status:?}");
    std::thread::sleep(Duration::from_millis(300));
    let reports = finish(&stop, followers);
    for report in &reports {
        assert!(
            report.redirects >= 1,
            "player {} was redirected",
            report.player
        );
    }
    check(&reports, nodes[0].gateway, "drain");
    assert_eq!(member_state(nodes[0].admin, 1).as_deref(), Some("left"));
    for player in &players {
        let owner = player_owner(nodes[0].admin, *player).map(|(n, _)| n);
        assert!(matches!(owner, Some(2 | 3)), "player {player} on {owner:?}");
    }
    assert_eq!(get_json(nodes[0].admin, "/cluster")["state"], "up");
}

#[test]
fn a_rolling_restart_under_load_fails_no_request_and_loses_no_increment() {
    let mut cluster = LocalCluster::new();
    cluster.cluster_extra = "redirect_grace_ms = 2000\n".into();
    let ids = [1, 2, 3];
    let mut nodes = start_all(&cluster, &ids);
    let gateways: Gateways = Arc::new(Mutex::new(nodes.iter().map(|n| n.gateway).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let followers: Vec<_> = (0..9u64)
        .map(|i| {
            let first = nodes[(i % 3) as usize].gateway;
            follower::spawn(500 + i, first, gateways.clone(), stop.clone())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    for index in 0..nodes.len() {
        let id = ids[index];
        let (status, body) = post_json(nodes[index].admin, "/drain");
        assert_eq!(status, 202, "{body}");
        let old = nodes.remove(index);
        assert!(old.wait_exit_within(Duration::from_secs(15)).success());
        nodes.insert(index, cluster.start(id));
        wait_all_up(&nodes, &ids);
        *gateways.lock().unwrap() = nodes.iter().map(|n| n.gateway).collect();
        assert_eq!(
            get_json(nodes[index].admin, "/cluster")["incarnation"],
            2,
            "node {id} came back as its next incarnation"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    println!("rolling restart of 3 nodes took {:?}", started.elapsed());
    let reports = finish(&stop, followers);
    check(&reports, nodes[0].gateway, "rolling restart");
    // Every record names its owner's live incarnation: a restarted node
    // owns as its new start, never as the one that left (which the others
    // would claim from at once).
    for report in &reports {
        let record = get_json(
            nodes[0].admin,
            &format!("/objects/player/{}", report.player),
        );
        assert_eq!(record["owner_live"], true, "{record}");
        assert_eq!(record["owner_incarnation"], 2, "{record}");
    }
}
