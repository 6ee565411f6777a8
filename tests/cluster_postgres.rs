//! The cluster on the networked store: three nodes sharing one PostgreSQL
//! database (membership rows and ownership records both), a request served
//! across nodes, and a killed owner's player served by another node with
//! its durable counter. Runs on a throwaway server of its own; says it
//! skipped when PostgreSQL is not installed.

mod support;

use std::time::{Duration, Instant};

use routerd::store::postgres_server::{PgServer, PgServerError};
use support::cluster::{
    eventually, get_json, login_eventually, player_owner, wait_members_up, LocalCluster,
    DOWN_AFTER_MS,
};
use support::counter_of;
use wire::client::route;

#[test]
fn three_nodes_on_postgres_serve_across_and_fail_over() {
    let server = match PgServer::start() {
        Ok(server) => server,
        Err(PgServerError::Unavailable(why)) => {
            println!("skipped: {why}");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    server
        .psql("postgres", "CREATE DATABASE cluster")
        .expect("database created");
    let mut cluster = LocalCluster::new();
    cluster.store = Some(format!(
        "[store]\nbackend = \"postgres\"\nurl = {:?}\n",
        server.url("cluster")
    ));
    let nodes: Vec<_> = (1..=3).map(|id| cluster.start(id)).collect();
    wait_members_up(&nodes[0], &[2, 3]);
    wait_members_up(&nodes[1], &[1, 3]);
    wait_members_up(&nodes[2], &[1, 2]);

    // A player node 1 owns, used through node 2.
    let player = (1..)
        .find(|&player| {
            nodes[0].connect().login(player, 1);
            player_owner(nodes[0].admin, player).map(|(node, _)| node) == Some(1)
        })
        .unwrap();
    let (mut client, _) = login_eventually(nodes[1].gateway, player, Duration::from_secs(5));
    for (seq, want) in (2..6).zip(1..) {
        let reply = client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        assert_eq!(counter_of(&reply), want);
    }
    let mut nodes = nodes.into_iter();
    nodes.next().unwrap().kill_9();
    let killed = Instant::now();
    let (b, c) = (nodes.next().unwrap(), nodes.next().unwrap());
    let limit = Duration::from_millis(DOWN_AFTER_MS + 1000);
    let (mut moved, _) = login_eventually(c.gateway, player, limit);
    println!("failover on PostgreSQL took {:?}", killed.elapsed());
    let reply = moved.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(
        counter_of(&reply),
        5,
        "the acknowledged increments survived"
    );
    let owner = player_owner(b.admin, player).map(|(node, _)| node);
    assert!(matches!(owner, Some(2 | 3)), "{owner:?}");
    // Node 3 declared node 1 down; node 2 reads it at its next listing.
    eventually(Duration::from_secs(3), "node 2 sees node 1 down", || {
        let view = get_json(b.admin, "/cluster");
        let members = view["members"].as_array()?.clone();
        members
            .iter()
            .any(|m| m["node_id"] == 1 && m["state"] == "down")
            .then_some(())
    });
}
