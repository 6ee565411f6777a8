//! Limits a client cannot get around, on a real node: a session's request
//! rate (`gateway.session_requests_per_sec_max`), and the rooms clients may
//! create (`services.room.created_per_session_max` and
//! `services.room.rooms_per_node_max`).

mod support;

use std::time::Instant;

use support::{Client, Reply, TestNode};
use wire::client::{encode_frame, route, ErrorCode, FrameKind};

const RATE_LIMITED: &str = r#"routerd_gateway_ingress_rejected_total{reason="rate_limited"}"#;

/// Sends every request of `requests` (route, seq, body) in one write, and
/// returns the frame answering each seq, in the order they came.
fn pipeline(client: &mut Client, requests: &[(u32, u32, Vec<u8>)]) -> Vec<Reply> {
    let mut bytes = Vec::new();
    for (route_id, seq, body) in requests {
        encode_frame(&mut bytes, FrameKind::Request, *route_id, *seq, body);
    }
    client.send_raw(&bytes);
    (0..requests.len()).map(|_| client.recv()).collect()
}

fn is_overloaded(reply: &Reply) -> bool {
    reply.kind == FrameKind::Error && reply.error_code() == ErrorCode::Overloaded as u16
}

#[test]
fn a_flooding_client_gets_overloaded_while_another_is_served() {
    let mut config = support::config();
    config.gateway.session_requests_per_sec_max = 200;
    config.gateway.session_request_burst_max = 50;
    let node = TestNode::start(config);
    let opened = Instant::now();
    let mut flooder = node.connect();
    flooder.login(1, 1);
    let mut steady = node.connect();
    steady.login(2, 1);

    let flood: Vec<(u32, u32, Vec<u8>)> = (2..1002)
        .map(|seq| (route::SYS_PING, seq, b"x".to_vec()))
        .collect();
    let mut bytes = Vec::new();
    for (route_id, seq, body) in &flood {
        encode_frame(&mut bytes, FrameKind::Request, *route_id, *seq, body);
    }
    flooder.send_raw(&bytes);
    // The other session is served normally meanwhile: its own bucket.
    for seq in 2..12u32 {
        let reply = steady.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        assert_eq!(support::counter_of(&reply), i64::from(seq) - 1);
    }
    let replies: Vec<Reply> = (0..flood.len()).map(|_| flooder.recv()).collect();
    let elapsed_s = opened.elapsed().as_secs_f64();

    let served = replies
        .iter()
        .filter(|r| r.kind == FrameKind::Response)
        .count();
    let refused: Vec<&Reply> = replies.iter().filter(|r| is_overloaded(r)).collect();
    assert_eq!(served + refused.len(), flood.len(), "nothing else answered");
    // The burst (less the login's token) at once, then the rate.
    let served_max = 50 + (200.0 * elapsed_s).ceil() as usize;
    assert!(
        (49..=served_max).contains(&served),
        "{served} served in {elapsed_s:.2} s, at most {served_max}"
    );
    assert!(refused.len() >= flood.len() - served_max);
    assert_eq!(
        refused[0].error_reason(),
        "session request rate over gateway.session_requests_per_sec_max"
    );
    node.wait_metric(RATE_LIMITED, refused.len() as i64);

    // The bucket refills: after a pause the flooder is served again.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let reply = flooder.call(route::SYS_PING, 5000, b"again");
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    assert_eq!(reply.body, b"again");
}

fn join_body(room_id: u64) -> Vec<u8> {
    room_id.to_le_bytes().to_vec()
}

/// Joins `rooms` one by one; returns how many joins were answered with a
/// member count, and asserts the others were OVERLOADED.
fn join_each(client: &mut Client, rooms: impl Iterator<Item = u64>, first_seq: u32) -> usize {
    let mut joined = 0;
    for (seq, room_id) in (first_seq..).zip(rooms) {
        let reply = client.call(route::ROOM_JOIN, seq, &join_body(room_id));
        match reply.kind {
            FrameKind::Response => joined += 1,
            _ => assert!(is_overloaded(&reply), "room {room_id}: {reply:?}"),
        }
    }
    joined
}

#[test]
fn a_client_joining_fresh_room_ids_is_stopped_at_the_bounds() {
    const PER_SESSION: usize = 16;
    const PER_NODE: usize = 40;
    let mut config = support::config();
    config.services.room.created_per_session_max = PER_SESSION as u32;
    config.services.room.rooms_per_node_max = PER_NODE;
    let node = TestNode::start(config);
    let mut flooder = node.connect();
    flooder.login(1, 1);

    // 10,000 fresh room ids, pipelined a hundred at a time.
    let mut created = Vec::new();
    let mut refused = 0;
    for batch in 0..100u64 {
        let requests: Vec<(u32, u32, Vec<u8>)> = (0..100u64)
            .map(|i| {
                let room_id = 1_000_000 + batch * 100 + i;
                let seq = 2 + (batch * 100 + i) as u32;
                (route::ROOM_JOIN, seq, join_body(room_id))
            })
            .collect();
        // Answers come in any order (the rooms live on both cores): the
        // seq names the room.
        for reply in pipeline(&mut flooder, &requests) {
            if reply.kind == FrameKind::Response {
                assert_eq!(reply.body, 1u32.to_le_bytes(), "the first member");
                created.push(1_000_000 + u64::from(reply.seq - 2));
            } else {
                assert!(is_overloaded(&reply), "{reply:?}");
                refused += 1;
            }
        }
    }
    assert_eq!(created.len(), PER_SESSION);
    assert_eq!(refused, 10_000 - PER_SESSION);
    // The node holds the flooder's player and the rooms it created, no more.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(
        node.metric("routerd_router_objects"),
        1 + PER_SESSION as i64
    );
    assert_eq!(
        node.metric("routerd_router_claims_total"),
        1 + PER_SESSION as i64
    );

    // A say in a room that does not exist is BAD_REQUEST and creates none.
    let mut say = 7u64.to_le_bytes().to_vec();
    say.extend_from_slice(b"hello?");
    let reply = flooder.call(route::ROOM_SAY, 20_000, &say);
    assert_eq!(reply.error_code(), ErrorCode::BadRequest as u16);
    // Leaving it is done (one is not a member) and creates none either.
    let reply = flooder.call(route::ROOM_LEAVE, 20_001, &join_body(7));
    assert_eq!((reply.kind, reply.body.len()), (FrameKind::Response, 0));
    assert_eq!(
        node.metric("routerd_router_claims_total"),
        1 + PER_SESSION as i64
    );

    // Reconnecting gives a new session's bound, but the node's bound holds:
    // 16 + 16 rooms, then 8 more of a third session's, then none.
    let mut again = node.connect();
    again.login(1, 1);
    assert_eq!(join_each(&mut again, 2_000_000..2_000_100, 2), PER_SESSION);
    let mut third = node.connect();
    third.login(3, 1);
    let left = PER_NODE - 2 * PER_SESSION;
    assert_eq!(join_each(&mut third, 3_000_000..3_000_100, 2), left);
    // Joining rooms that exist is limited by neither bound.
    assert_eq!(
        join_each(&mut third, created.iter().copied().take(3), 200),
        3
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    // Players 1 and 3 and the rooms: the node's bound.
    assert_eq!(node.metric("routerd_router_objects"), 2 + PER_NODE as i64);
    node.wait_metric(RATE_LIMITED, 0);
}

#[test]
fn in_a_cluster_only_joins_within_the_bound_create_rooms_on_any_node() {
    use support::cluster::{http_get, wait_members_up, LocalCluster};
    const PER_SESSION: usize = 4;
    let mut cluster = LocalCluster::new();
    cluster.extra = format!("[services.room]\ncreated_per_session_max = {PER_SESSION}\n");
    let a = cluster.start(1);
    let b = cluster.start(2);
    wait_members_up(&a, &[2]);
    wait_members_up(&b, &[1]);
    let exists = |room_id: u64| http_get(a.admin, &format!("/objects/room/{room_id}")).0 == 200;

    // 40 fresh rooms through node 1: rendezvous hashing places about half
    // on node 2, and the bound holds over both.
    let mut flooder = a.connect();
    flooder.login(1, 1);
    let mut created = Vec::new();
    for (seq, room_id) in (2..).zip(500..540u64) {
        let reply = flooder.call(route::ROOM_JOIN, seq, &join_body(room_id));
        if reply.kind == FrameKind::Response {
            created.push(room_id);
        } else {
            assert!(is_overloaded(&reply), "room {room_id}: {reply:?}");
        }
    }
    assert_eq!(created, (500..500 + PER_SESSION as u64).collect::<Vec<_>>());
    for room_id in 500..540u64 {
        assert_eq!(
            exists(room_id),
            created.contains(&room_id),
            "room {room_id}"
        );
    }
    let owners: Vec<u64> = created
        .iter()
        .map(|room_id| {
            let body = http_get(a.admin, &format!("/objects/room/{room_id}")).1;
            let record: serde_json::Value = serde_json::from_str(&body).unwrap();
            record["owner"].as_u64().unwrap()
        })
        .collect();
    // Rendezvous hashing of these ids over nodes 1 and 2 places the
    // created rooms on both: the bound holds for creations on either.
    assert!(owners.contains(&1) && owners.contains(&2), "{owners:?}");
    // A say in a room that does not exist creates it on no node.
    let mut say = 999u64.to_le_bytes().to_vec();
    say.extend_from_slice(b"anyone?");
    let reply = flooder.call(route::ROOM_SAY, 100, &say);
    assert_eq!(reply.error_code(), ErrorCode::BadRequest as u16);
    assert!(!exists(999));

    // Through node 2, a room node 1's player created is joined.
    let mut other = b.connect();
    other.login(2, 1);
    let reply = other.call(route::ROOM_JOIN, 2, &join_body(created[0]));
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    assert_eq!(reply.body, 2u32.to_le_bytes());
}
