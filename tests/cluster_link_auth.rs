//! Every frame between nodes is authenticated: a byte flipped on the wire
//! (by a proxy on loopback between two nodes) fails its record's MAC, the
//! link closes and counts it, and the next link carries the requests;
//! garbage where the first record's head should be is counted the same.
//! Connections that never send a Hello do not keep a peer's link out, and
//! a Hello without the secret learns nothing of the membership.
//! (A node with another cluster secret never links: `cluster_links.rs`.)

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use routerd::cluster::handshake::{message_len, Challenge, Hello, LINK_VERSION};
use support::cluster::{
    get_json, login_eventually, wait_members_up, LocalCluster, DOWN_AFTER_MS, FENCE_AFTER_MS,
    HEARTBEAT_MS,
};
use support::flood::SilentFlood;
use support::{counter_of, ServeProcess};
use wire::client::route;

/// The dialler's handshake bytes: its Hello (magic and kind, version, the
/// default cluster name "routerd" with its length, from node,
/// incarnation and core, to node and core, nonce) and its Proof (magic
/// and kind, HMAC-SHA256).
const DIALLER_HANDSHAKE_BYTES: usize = (5 + 2 + 1 + 7 + 8 + 8 + 2 + 8 + 2 + 16) + (5 + 32);
/// A byte inside the first record's body (past its 16-byte head).
const FLIP_AT: usize = DIALLER_HANDSHAKE_BYTES + 16 + 2;

/// Copies `from` to `to`; on the first connection only, flips one byte of
/// the dialler's side at `flip_at`.
fn pump(mut from: TcpStream, mut to: TcpStream, flip_at: Option<usize>, flipped: Arc<AtomicUsize>) {
    let mut seen = 0usize;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(at) = flip_at.filter(|&at| seen <= at && at < seen + n) {
            buf[at - seen] ^= 0x40;
            flipped.fetch_add(1, Ordering::SeqCst);
        }
        seen += n;
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// A proxy in front of `target` that tampers with the first connection's
/// byte `flip_at`.
fn tampering_proxy(target: u16, flip_at: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let flipped = Arc::new(AtomicUsize::new(0));
    let counted = flipped.clone();
    std::thread::spawn(move || {
        for (index, inbound) in listener.incoming().enumerate() {
            let Ok(inbound) = inbound else { continue };
            let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            let (back_in, back_out) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
            let flipped = counted.clone();
            let flip = (index == 0).then_some(flip_at);
            std::thread::spawn(move || pump(inbound, outbound, flip, flipped));
            let unused = counted.clone();
            std::thread::spawn(move || pump(back_out, back_in, None, unused));
        }
    });
    (port, flipped)
}

fn metric(node: &ServeProcess, name: &str) -> f64 {
    let text = support::cluster::http_get(node.admin, "/metrics").1;
    support::prometheus::parse(&text)
        .unwrap()
        .value(name, &[])
        .unwrap_or(0.0)
}

#[test]
fn a_tampered_link_record_closes_the_link_counts_and_the_cluster_recovers() {
    tampered_at(FLIP_AT);
}

/// Garbage after the handshake where a record's head should be fails
/// before any tag could be checked: an authentication failure too, not an
/// invalid frame.
#[test]
fn garbage_for_the_first_record_head_is_an_authentication_failure() {
    tampered_at(DIALLER_HANDSHAKE_BYTES);
}

/// Node 2 behind a proxy that flips the dialler's byte `flip_at` on the
/// first link: the link closes, counted as an authentication failure and
/// not as an invalid frame, and a later one carries the requests.
fn tampered_at(flip_at: usize) {
    let cluster = LocalCluster::new();
    // Node 2 (one core) listens for links on a known port and advertises
    // the proxy's, so node 1's link to it crosses the proxy.
    let dir = cluster.dir().join("proxied");
    std::fs::create_dir_all(&dir).unwrap();
    let (owner, flipped) = support::on_free_ports(|| {
        let listen = support::free_port();
        let (proxy, flipped) = tampering_proxy(listen, flip_at);
        let body = cluster
            .body(2, "the test cluster's secret")
            .replace("count = 2", "count = 1")
            .replace(
                "[cluster]\nlisten = \"127.0.0.1:0\"",
                &format!(
                    "[cluster]\nlisten = \"127.0.0.1:{listen}\"\nadvertise = \"127.0.0.1:{proxy}\""
                ),
            );
        assert!(
            body.contains(&format!("advertise = \"127.0.0.1:{proxy}\"")),
            "{body}"
        );
        ServeProcess::try_start(&dir, &body).map(|owner| (owner, flipped))
    });
    // Player 9 is placed on node 2, the only node yet.
    let mut direct = owner.connect();
    direct.login(9, 1);
    assert_eq!(
        counter_of(&direct.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes())),
        1
    );

    let front = cluster.start(1);
    wait_members_up(&front, &[2]);
    wait_members_up(&owner, &[1]);
    // Node 1 links to node 2 through the proxy: the first link's record is
    // altered, node 2 closes it; a later link carries the login.
    let (mut client, _) = login_eventually(front.gateway, 9, Duration::from_secs(15));
    let mut seq = 2;
    let counter = loop {
        let reply = client.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        seq += 1;
        if reply.kind == wire::client::FrameKind::Response {
            break counter_of(&reply);
        }
        assert!(
            seq < 200,
            "increments through node 1 keep failing: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(counter >= 2, "served by the owner: {counter}");
    assert_eq!(
        flipped.load(Ordering::SeqCst),
        1,
        "the proxy altered one byte"
    );
    assert!(
        metric(&owner, "routerd_link_auth_failures_total") >= 1.0,
        "node 2 counted the altered record"
    );
    assert_eq!(metric(&front, "routerd_link_auth_failures_total"), 0.0);
    assert_eq!(
        metric(&owner, "routerd_cluster_link_frames_invalid_total"),
        0.0
    );
    let view = get_json(front.admin, "/cluster");
    assert_eq!(view["state"], "up", "{view}");
}

/// 100 TCP connections to a link port that never send a Hello, reopened
/// as the node closes them, do not keep a real peer out: its link forms
/// at its first dial. Slow membership timers (a 1 s heartbeat, so a 3 s
/// handshake timeout) make the flood hold every pending slot the whole
/// time unless the node evicts silent connections for new ones.
#[test]
fn a_hundred_silent_connections_on_a_link_port_do_not_keep_a_peer_out() {
    const SILENT: usize = 100;
    let cluster = LocalCluster::new();
    let slow = |body: String| {
        body.replace(
            &format!("heartbeat_interval_ms = {HEARTBEAT_MS}\nfence_after_ms = {FENCE_AFTER_MS}\ndown_after_ms = {DOWN_AFTER_MS}"),
            "heartbeat_interval_ms = 1000\nfence_after_ms = 4000\ndown_after_ms = 8000",
        )
    };
    let dir = cluster.dir().join("flooded");
    std::fs::create_dir_all(&dir).unwrap();
    let (owner, listen) = support::on_free_ports(|| {
        let listen = support::free_port();
        let body = slow(cluster.body(2, "the test cluster's secret"))
            .replace("count = 2", "count = 1")
            .replace(
                "[cluster]\nlisten = \"127.0.0.1:0\"",
                &format!("[cluster]\nlisten = \"127.0.0.1:{listen}\""),
            );
        assert!(body.contains("heartbeat_interval_ms = 1000"), "{body}");
        ServeProcess::try_start(&dir, &body).map(|owner| (owner, listen))
    });
    let mut direct = owner.connect();
    direct.login(9, 1);
    assert_eq!(
        counter_of(&direct.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes())),
        1
    );

    // The flood: 100 silent connections, each reopened within 10 ms of
    // the node closing it.
    let flood = SilentFlood::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], listen)),
        SILENT,
        Duration::from_millis(10),
    );
    std::thread::sleep(Duration::from_millis(300));

    let front_body = slow(cluster.body(1, "the test cluster's secret"));
    let front_dir = cluster.dir().join("front");
    std::fs::create_dir_all(&front_dir).unwrap();
    let front = ServeProcess::start(&front_dir, &front_body);
    wait_members_up(&front, &[2]);
    let started = std::time::Instant::now();
    // Player 9 lives on node 2: served through node 1 only over its link.
    let (mut client, _) = login_eventually(front.gateway, 9, Duration::from_secs(5));
    let counter = counter_of(&client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes()));
    let took = started.elapsed();
    let reopened = flood.stop();
    let evicted = metric(&owner, "routerd_cluster_handshakes_evicted_total");
    eprintln!(
        "link formed through {SILENT} silent connections {took:?} after node 1 saw node 2 up \
         ({reopened} reopened, {evicted} evicted)"
    );
    assert_eq!(counter, 2, "served by the owner");
    assert!(
        took < Duration::from_secs(2),
        "the link took {took:?} to form"
    );
    assert!(evicted >= 1.0);

    // Without the secret a Hello learns nothing of the membership: naming
    // the member (node 1) at an incarnation it is past, or a node that is
    // no member, the answer is the same challenge, never a refusal.
    for (from_node, from_incarnation) in [(1, 0), (77, 1)] {
        let answer = first_answer(listen, from_node, from_incarnation);
        assert!(
            matches!(answer, Challenge::Proceed { .. }),
            "node {from_node} at incarnation {from_incarnation}: {answer:?}"
        );
    }
}

/// The acceptor's first answer to a Hello from `from_node` at
/// `from_incarnation` to node 2's core 0, on its link port `listen`.
fn first_answer(listen: u16, from_node: u64, from_incarnation: u64) -> Challenge {
    let mut stream = TcpStream::connect(("127.0.0.1", listen)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let hello = Hello {
        version: LINK_VERSION,
        cluster: "routerd".to_string(),
        from_node,
        from_incarnation,
        from_core: 0,
        to_node: 2,
        to_core: 0,
        nonce: [3; 16],
    };
    stream.write_all(&hello.encode()).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        if let Ok(Some(len)) = message_len(&answer) {
            if answer.len() >= len {
                return Challenge::decode(&answer[..len]).unwrap();
            }
        }
        let n = stream.read(&mut buf).expect("an answer");
        assert!(n > 0, "closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
}
