//! `gateway.place_sessions`: a login on a node that does not own the
//! player is answered as always, then told (`sys.redirect`) where the
//! player lives, once; a client that stays is served on; one that follows
//! is served by the owner alone. A player nobody owns is created where
//! every new object is, on its rendezvous node: a login there is not
//! redirected, a login elsewhere is sent there. A node without the key
//! never redirects.

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::time::Duration;

use edge::{client_config, make_cert, tcp_connect, tls_connect, StreamClient, WsClient, WsEvent};
use routerd::builtins::player::player_key;
use routerd::router::rendezvous_score;
use routerd::store::NodeId;
use support::cluster::{metric_at, player_owner, wait_members_up, LocalCluster};
use support::{counter_of, Client, ServeProcess};
use wire::client::{route, FrameKind};

/// The grace the redirects carry; a session that ignores one is served
/// well past it.
const GRACE_MS: u64 = 300;

/// Starts node `id` of `cluster`, with `gateway.place_sessions = place`.
fn start(cluster: &LocalCluster, id: u64, place: bool) -> ServeProcess {
    start_with(cluster, id, &format!("place_sessions = {place}\n"))
}

/// Starts node `id` of `cluster` with `gateway` keys besides its listener.
fn start_with(cluster: &LocalCluster, id: u64, gateway: &str) -> ServeProcess {
    ServeProcess::spawn(cluster.command_with(id, gateway, ""))
}

/// Client requests a node's sessions had answered (locally, remotely).
fn answered(node: &ServeProcess) -> (i64, i64) {
    // The cores mirror these counts every quarter second.
    std::thread::sleep(Duration::from_millis(400));
    (
        metric_at(node.admin, "routerd_router_client_requests_local_total"),
        metric_at(node.admin, "routerd_router_client_requests_remote_total"),
    )
}

/// Sends `incr 1` as `seq` and returns the counter it answers; the next
/// frame must be that answer (no PUSH before it).
fn incr(client: &mut Client, seq: u32) -> i64 {
    let reply = client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
    assert_eq!(
        (reply.kind, reply.seq),
        (FrameKind::Response, seq),
        "{reply:?}"
    );
    counter_of(&reply)
}

/// The first player from `from` whose default node among 1..=3 is `node`
/// (where the router creates it).
fn player_placed_on(node: u64, from: u64) -> u64 {
    player_placed_among(node, &[1, 2, 3], from)
}

/// The first player from `from` whose default node among `nodes` is `node`.
fn player_placed_among(node: u64, nodes: &[u64], from: u64) -> u64 {
    (from..)
        .find(|player| {
            let key = player_key(*player);
            let default = nodes
                .iter()
                .max_by_key(|n| (rendezvous_score(key, NodeId(**n)), **n));
            default == Some(&node)
        })
        .unwrap()
}

/// The gateway a `sys.redirect` PUSH names.
fn redirected_to(push: &support::Reply) -> String {
    assert_eq!(
        (push.kind, push.route_id),
        (FrameKind::Push, route::SYS_REDIRECT),
        "{push:?}"
    );
    String::from_utf8(push.body[4..].to_vec()).unwrap()
}

#[test]
fn a_login_away_from_its_player_is_redirected_once_and_served_either_way() {
    let mut cluster = LocalCluster::new();
    cluster.cluster_extra = format!("redirect_grace_ms = {GRACE_MS}\n");
    let nodes: Vec<ServeProcess> = [(1, true), (2, true), (3, false)]
        .into_iter()
        .map(|(id, place)| start(&cluster, id, place))
        .collect();
    for (index, node) in nodes.iter().enumerate() {
        let others: Vec<u64> = (1..=3).filter(|id| *id != index as u64 + 1).collect();
        wait_members_up(node, &others);
    }
    let (node1, node2, node3) = (&nodes[0], &nodes[1], &nodes[2]);

    // Player p is created on node 1, its default node, where it first
    // logs in: no redirect.
    let p = player_placed_on(1, 42);
    let mut first = node1.connect();
    first.login(p, 1);
    assert_eq!(incr(&mut first, 2), 1, "no PUSH came before the answer");
    assert_eq!(player_owner(node1.admin, p).map(|(n, _)| n), Some(1));
    drop(first);

    // On node 2: answered, then told to go to node 1's gateway.
    let before = answered(node2);
    let mut away = node2.connect();
    away.login(p, 1);
    let push = away.recv();
    assert_eq!(
        (push.kind, push.route_id),
        (FrameKind::Push, route::SYS_REDIRECT)
    );
    assert_eq!(push.body[..4], (GRACE_MS as u32).to_le_bytes());
    assert_eq!(
        std::str::from_utf8(&push.body[4..]).unwrap(),
        node1.gateway.to_string(),
        "the owner's plain listener"
    );
    // Ignored: served on well past the grace, with no second redirect.
    for seq in 2..12u32 {
        assert_eq!(incr(&mut away, seq), i64::from(seq));
        std::thread::sleep(Duration::from_millis(GRACE_MS / 5));
    }
    let after = answered(node2);
    assert_eq!(
        after.1 - before.1,
        11,
        "the login and ten increments crossed to node 1"
    );
    assert_eq!(after.0, before.0, "none was answered on node 2");
    assert_eq!(
        metric_at(node2.admin, "routerd_gateway_placements_total"),
        1
    );
    assert_eq!(
        metric_at(node2.admin, "routerd_gateway_redirect_closed_total"),
        0
    );

    // Followed: node 1 serves it alone, and does not redirect again.
    let before1 = answered(node1);
    let mut home = node1.connect();
    home.login(p, 1);
    assert_eq!(incr(&mut home, 2), 12);
    let after1 = answered(node1);
    assert_eq!(after1.0 - before1.0, 2);
    assert_eq!(after1.1, before1.1);
    assert_eq!(
        metric_at(node1.admin, "routerd_gateway_placements_total"),
        0
    );
    drop(home);

    // A node without the key answers and says nothing.
    let mut elsewhere = node3.connect();
    elsewhere.login(p, 1);
    assert_eq!(incr(&mut elsewhere, 2), 13);
    assert_eq!(
        metric_at(node3.admin, "routerd_gateway_placements_total"),
        0
    );
    drop(elsewhere);

    // A new player logging in on its default node: created there, and no
    // redirect.
    let fresh = player_placed_on(2, 4242);
    let mut here = node2.connect();
    here.login(fresh, 1);
    assert_eq!(incr(&mut here, 2), 1);
    assert_eq!(player_owner(node2.admin, fresh).map(|(n, _)| n), Some(2));
    assert_eq!(
        metric_at(node2.admin, "routerd_gateway_placements_total"),
        1
    );
    // A new player logging in elsewhere: created on its default node, and
    // the session is sent there.
    let other = player_placed_on(1, 4242);
    let mut there = node2.connect();
    there.login(other, 1);
    let push = there.recv();
    assert_eq!(
        (push.kind, push.route_id),
        (FrameKind::Push, route::SYS_REDIRECT)
    );
    assert_eq!(
        std::str::from_utf8(&push.body[4..]).unwrap(),
        node1.gateway.to_string()
    );
    assert_eq!(incr(&mut there, 2), 1);
    assert_eq!(player_owner(node2.admin, other).map(|(n, _)| n), Some(1));
    assert_eq!(
        metric_at(node2.admin, "routerd_gateway_placements_total"),
        2
    );
}

/// A session is sent to the owner's listener of its own transport: a TLS
/// client to its TLS port, a WebSocket client to its WebSocket port.
#[test]
fn a_tls_or_websocket_session_is_placed_on_the_owners_listener_of_its_transport() {
    let cluster = LocalCluster::new();
    let cert = make_cert(cluster.dir(), "gateway");
    let gateway = format!(
        "place_sessions = true\ntls_listen = \"127.0.0.1:0\"\n\
         tls_cert_file = {:?}\ntls_key_file = {:?}\nwebsocket_listen = \"127.0.0.1:0\"\n",
        cert.cert_file.display().to_string(),
        cert.key_file.display().to_string()
    );
    let start_listening = |id: u64| {
        let node = ServeProcess::spawn(cluster.command_with(id, &gateway, ""));
        let tls = node
            .serving_address("tls")
            .expect("tls in the serving line");
        let ws = node
            .serving_address("websocket")
            .expect("websocket in the serving line");
        (node, (tls, ws))
    };
    let (node1, listeners1) = start_listening(1);
    let (node2, listeners2) = start_listening(2);
    let listeners = [listeners1, listeners2];
    wait_members_up(&node1, &[2]);
    wait_members_up(&node2, &[1]);
    let p = player_placed_among(1, &[1, 2], 42);
    let mut first = node1.connect();
    first.login(p, 1);
    assert_eq!(incr(&mut first, 2), 1);
    drop(first);

    let config = client_config(&cert.der, b"routerd");
    let mut tls = StreamClient::new(tls_connect(listeners[1].0, config));
    tls.login(p, 1);
    assert_eq!(redirected_to(&tls.recv()), listeners[0].0.to_string());
    assert_eq!(tls.incr(2), 2, "served on where it is");
    drop(tls);

    let mut ws = WsClient::upgrade(Box::new(tcp_connect(listeners[1].1)));
    ws.login(p, 1);
    match ws.next() {
        WsEvent::Frame(push) => assert_eq!(redirected_to(&push), listeners[0].1.to_string()),
        other => panic!("expected sys.redirect, got {other:?}"),
    }
    assert_eq!(ws.incr(2), 3);
    assert_eq!(
        metric_at(node2.admin, "routerd_gateway_placements_total"),
        2
    );
}
