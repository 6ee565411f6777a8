//! Pauses and signals on real processes: a node frozen past its lease but
//! not past `down_after_ms` loses nothing and serves again as the same
//! incarnation, on every core; SIGHUP stops a node as cleanly as SIGTERM.

mod support;

use std::time::Duration;

use support::cluster::{eventually, get_json, LocalCluster, DOWN_AFTER_MS, FENCE_AFTER_MS};
use support::{counter_of, Client};
use wire::client::route;

fn incr(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes()))
}

fn get(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_GET, seq, &[]))
}

/// A cluster whose players are saved only every 10 minutes (the default
/// policy's cadence): every increment of a test lives in memory only.
fn interval_cluster() -> LocalCluster {
    let mut cluster = LocalCluster::new();
    cluster.persist = "interval";
    cluster.extra = "[router]\nobject_save_interval_ms = 600000\n".into();
    cluster
}

/// Whether the node and every one of its cores serve, as `/cluster` says.
fn serving_everywhere(view: &serde_json::Value) -> bool {
    let cores = view["cores"].as_array().cloned().unwrap_or_default();
    view["serving"] == true
        && view["fenced"] == false
        && !cores.is_empty()
        && cores
            .iter()
            .all(|core| core["serving"] == true && core["fenced"] == false)
}

#[test]
fn a_freeze_past_the_lease_but_short_of_down_after_loses_nothing_on_any_core() {
    let cluster = interval_cluster();
    let node = cluster.start(1);
    // Players on both cores of the node, each with unsaved increments.
    let mut clients: Vec<(u64, Client)> = (1..=4)
        .map(|player| {
            let mut client = node.connect();
            client.login(player, 1);
            (player, client)
        })
        .collect();
    for (_, client) in clients.iter_mut() {
        for seq in 2..7 {
            incr(client, seq);
        }
    }
    eventually(Duration::from_secs(5), "every core serves", || {
        serving_everywhere(&get_json(node.admin, "/cluster")).then_some(())
    });
    // Frozen between fence_after and down_after: the lease runs out, and
    // there is no other node to declare this one down.
    node.freeze();
    std::thread::sleep(Duration::from_millis((FENCE_AFTER_MS + DOWN_AFTER_MS) / 2));
    node.thaw();
    let view = eventually(Duration::from_secs(5), "serving again", || {
        let view = get_json(node.admin, "/cluster");
        serving_everywhere(&view).then_some(view)
    });
    assert_eq!(view["incarnation"], 1, "the same incarnation: {view}");
    for (player, client) in clients.iter_mut() {
        assert_eq!(get(client, 10), 5, "player {player} kept its increments");
    }
    let metrics = support::cluster::http_get(node.admin, "/metrics").1;
    let dropped = metrics
        .lines()
        .find(|line| line.starts_with("routerd_router_unsaved_changes_dropped_total"))
        .expect("the drop counter is exported");
    assert!(dropped.ends_with(" 0"), "{dropped}");
}

#[test]
fn sighup_stops_the_node_cleanly_and_saves_what_it_held() {
    let cluster = interval_cluster();
    let node = cluster.start(1);
    let mut client = node.connect();
    client.login(42, 1);
    let added = counter_of(&client.call(route::PLAYER_INCR, 2, &100i64.to_le_bytes()));
    assert_eq!(added, 100);
    drop(client);
    let status = node.hang_up();
    assert!(status.success(), "SIGHUP is a clean stop: {status:?}");
    let again = cluster.start(1);
    let mut client = again.connect();
    client.login(42, 1);
    assert_eq!(get(&mut client, 2), 100, "saved at the stop");
}

#[test]
fn a_frozen_process_whose_id_was_taken_meanwhile_exits_instead_of_serving_it_twice() {
    let cluster = LocalCluster::new();
    let first = cluster.start(1);
    let mut client = first.connect();
    client.login(5, 1);
    assert_eq!(incr(&mut client, 2), 1);
    // Frozen long enough that a new process with the same id takes it
    // (its row stood still for down_after_ms).
    first.freeze();
    let second = cluster.start(1);
    assert_eq!(get_json(second.admin, "/cluster")["incarnation"], 2);
    let log = first.log.clone();
    first.thaw();
    // The first process finds incarnation 2 heartbeating on its id: it
    // must not take incarnation 3 over it, and exits.
    let status = first.wait_exit_within(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status:?}");
    let said = log.lock().unwrap().iter().cloned().collect::<Vec<_>>();
    assert!(
        said.iter()
            .any(|line| line.contains("node id 1 was taken by another process (incarnation 2)")),
        "{said:#?}"
    );
    let view = get_json(second.admin, "/cluster");
    assert_eq!(view["incarnation"], 2, "{view}");
    assert!(serving_everywhere(&view), "{view}");
    let mut client = second.connect();
    client.login(5, 1);
    assert_eq!(incr(&mut client, 2), 2, "the durable count, served once");
}
