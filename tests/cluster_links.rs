//! Nodes that share a store form a cluster: a request that reaches one
//! node for an object another node owns is served there and answered
//! here; pushes and kicks reach sessions on other nodes; a node with the
//! wrong cluster secret never links.

mod support;

use std::time::Duration;

use support::cluster::{get_json, player_owner, wait_members_up, LocalCluster};
use support::{counter_of, Client};
use wire::client::{route, ErrorCode, FrameKind};

/// The session was told why (`sys.kicked`) and closed.
fn expect_kicked(client: &mut Client) {
    let push = client.recv();
    assert_eq!(
        (push.kind, push.route_id),
        (FrameKind::Push, route::SYS_KICKED),
        "{push:?}"
    );
    client.expect_closed();
}

fn incr(client: &mut Client, seq: u32) -> i64 {
    counter_of(&client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes()))
}

fn a_player_owned_by_one_node_is_served_through_another_and_kicked_across(cluster: LocalCluster) {
    let a = cluster.start(1);
    let b = cluster.start(2);
    wait_members_up(&a, &[2]);
    wait_members_up(&b, &[1]);

    // The first login places player 7 on node 1.
    let mut first = a.connect();
    first.login(7, 1);
    assert_eq!(incr(&mut first, 2), 1);
    assert_eq!(player_owner(b.admin, 7).map(|(node, _)| node), Some(1));

    // The same player through node 2: its requests cross to node 1.
    let mut second = b.connect();
    second.login(7, 1);
    expect_kicked(&mut first);
    assert_eq!(incr(&mut second, 2), 2);
    assert_eq!(incr(&mut second, 3), 3);
    assert_eq!(player_owner(a.admin, 7).map(|(node, _)| node), Some(1));

    // Back through node 1: the session on node 2 is kicked across.
    let mut third = a.connect();
    third.login(7, 1);
    expect_kicked(&mut second);
    assert_eq!(incr(&mut third, 2), 4);

    let metric = |node: &support::ServeProcess, name: &str| {
        let text = support::cluster::http_get(node.admin, "/metrics").1;
        let exposition = support::prometheus::parse(&text).unwrap();
        exposition.value(name, &[]).unwrap_or(0.0)
    };
    let frames_sent = metric(&b, "routerd_cluster_link_frames_sent_total");
    assert!(frames_sent >= 3.0);
    // Every frame went in a sealed record; a record holds one or more
    // frames (or only a ping), a 5-byte head and a 16-byte MAC.
    let records_sent = metric(&b, "routerd_cluster_link_records_sent_total");
    let record_bytes = metric(&b, "routerd_cluster_link_record_bytes_sent_total");
    assert!(records_sent >= 1.0, "{records_sent}");
    assert!(
        record_bytes >= 21.0 * records_sent,
        "{record_bytes} for {records_sent}"
    );
    assert!(metric(&a, "routerd_cluster_link_frames_received_total") >= 3.0);
    let view = get_json(a.admin, "/cluster");
    assert_eq!(view["incarnation"], 1, "{view}");
    // Each member once, itself included; node 2 reached node 1 over links
    // that are up (links report every second).
    support::cluster::eventually(Duration::from_secs(3), "node 2 links up", || {
        let view = get_json(b.admin, "/cluster");
        let members = view["members"].as_array()?.clone();
        let ids: Vec<_> = members.iter().map(|m| m["node_id"].as_u64()).collect();
        assert_eq!(ids, vec![Some(1), Some(2)], "{view}");
        let me = &members[1];
        assert_eq!(
            (me["link"].as_str(), me["state"].as_str()),
            (Some("self"), Some("up"))
        );
        (members[0]["link"] == "up").then_some(())
    });
    let record = get_json(b.admin, "/objects/player/7");
    assert_eq!(
        (
            &record["type"],
            &record["id"],
            &record["owner"],
            &record["owner_incarnation"]
        ),
        (&"player".into(), &7.into(), &1.into(), &1.into()),
        "{record}"
    );
    assert!(record["route_version"].as_u64().is_some(), "{record}");
    let (status, _) = support::cluster::http_get(b.admin, "/objects/player/123456");
    assert_eq!(status, 404);
}

fn a_room_fans_out_to_sessions_on_three_nodes(cluster: LocalCluster) {
    let nodes: Vec<_> = (1..=3).map(|id| cluster.start(id)).collect();
    for (index, node) in nodes.iter().enumerate() {
        let others: Vec<u64> = (1..=3).filter(|&id| id != index as u64 + 1).collect();
        wait_members_up(node, &others);
    }
    let room = 99u64;
    let mut clients: Vec<Client> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let mut client = node.connect();
            client.login(100 + index as u64, 1);
            client
        })
        .collect();
    for (index, client) in clients.iter_mut().enumerate() {
        let reply = client.call(route::ROOM_JOIN, 2, &room.to_le_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        let members = u32::from_le_bytes(reply.body.as_slice().try_into().unwrap());
        assert_eq!(members, index as u32 + 1);
    }
    let mut body = room.to_le_bytes().to_vec();
    body.extend_from_slice(b"hello, cluster");
    clients[0].send(route::ROOM_SAY, 3, &body);
    let mut answered = false;
    let mut pushed = false;
    while !(answered && pushed) {
        let frame = clients[0].recv();
        match frame.kind {
            FrameKind::Response => {
                let count = u32::from_le_bytes(frame.body.as_slice().try_into().unwrap());
                assert_eq!(count, 3, "every member is logged in");
                answered = true;
            }
            FrameKind::Push => pushed = true,
            _ => panic!("unexpected {frame:?}"),
        }
    }
    for client in &mut clients[1..] {
        let push = client.recv();
        assert_eq!(
            (push.kind, push.route_id),
            (FrameKind::Push, route::ROOM_MESSAGE)
        );
        assert_eq!(&push.body[16..], b"hello, cluster");
    }
}

fn a_node_with_another_secret_never_links(cluster: LocalCluster) {
    let a = cluster.start(1);
    let mut owner = a.connect();
    owner.login(5, 1);
    assert_eq!(incr(&mut owner, 2), 1);
    let stranger = cluster.start_with_secret(2, "not the cluster's secret");
    // It sees node 1 in the shared table, but no link comes up: requests
    // for node 1's objects fail, and both sides count the refusal.
    let mut client = stranger.connect();
    let reply = client.call(route::AUTH_LOGIN, 1, support::token(5, 3600).as_bytes());
    assert_eq!(reply.kind, FrameKind::Error, "{reply:?}");
    assert_eq!(
        reply.error_code(),
        ErrorCode::Unavailable as u16,
        "{reply:?}"
    );
    let refused = |node: &support::ServeProcess| {
        let text = support::cluster::http_get(node.admin, "/metrics").1;
        support::prometheus::parse(&text)
            .unwrap()
            .value(
                "routerd_cluster_handshakes_refused_total",
                &[("reason", "bad_secret")],
            )
            .unwrap_or(0.0)
    };
    assert!(refused(&stranger) >= 1.0, "the stranger's dial was refused");
    // Node 1 dials the stranger when it sends to it (a kick of the
    // stranger's session would): here nothing does, so only the
    // stranger's side is sure to have counted.
    let _ = refused(&a);
    assert_eq!(incr(&mut owner, 3), 2, "node 1 serves on, unharmed");
    drop(client);
    std::thread::sleep(Duration::from_millis(50));
}

on_every_store!(
    a_player_owned_by_one_node_is_served_through_another_and_kicked_across,
    a_room_fans_out_to_sessions_on_three_nodes,
    a_node_with_another_secret_never_links,
);
