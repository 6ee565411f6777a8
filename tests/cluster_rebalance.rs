//! `POST /rebalance` and `routerd rebalance`: objects move to their
//! rendezvous node, `cluster.rebalance_concurrency` at a time, with the
//! transfer's guarantees (state shipped, queued requests kept, nothing
//! failed) while clients keep using them; behind the admin token; and by
//! itself after a join with `cluster.rebalance_on_join`.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use routerd::builtins::player::player_key;
use routerd::router::rendezvous_score;
use routerd::store::NodeId;
use support::cluster::{
    eventually, get_json, http_get, http_post, login_eventually, player_owner, wait_members_up,
    LocalCluster,
};
use support::{counter_of, Client, ServeProcess};
use wire::client::{encode_keyed_request, route, ErrorCode, FrameKind};

const PLAYERS: u64 = 200;
const CONCURRENCY: u64 = 4;
const HAMMERS: u64 = 4;
const TOKEN: &str = "the rebalance test's admin token";
/// How long a hammering client waits for an answer: above the server's
/// request timeout (10 s), so a request the server gave up on comes back
/// as a TIMEOUT error (a failure) rather than as the client's impatience
/// on a loaded machine.
const ANSWER_WAIT: Duration = Duration::from_secs(12);

/// The node among `nodes` that rendezvous hashing gives `player`.
fn default_node(player: u64, nodes: &[u64]) -> u64 {
    let key = player_key(player);
    *nodes
        .iter()
        .max_by_key(|node| (rendezvous_score(key, NodeId(**node)), **node))
        .unwrap()
}

/// Logs in as `player` on `gateway` and increments once: the player is
/// created on the node the login reaches when that node is alone.
/// Creates `player` with its first increment. The login is retried: on a
/// busy machine the first one on a node just started can be refused
/// UNAVAILABLE, and this test is about the rebalance after.
fn create(gateway: SocketAddr, player: u64) {
    let (mut client, _) = login_eventually(gateway, player, Duration::from_secs(10));
    let reply = client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes());
    assert_eq!(counter_of(&reply), 1, "player {player} is new");
}

/// The counter of `player`, read on a fresh session.
fn counter(gateway: SocketAddr, player: u64) -> i64 {
    let mut client = Client::connect(gateway);
    client.login(player, 1);
    counter_of(&client.call(route::PLAYER_GET, 2, &[]))
}

/// What one hammering thread saw of its players.
#[derive(Default)]
struct Seen {
    sent: BTreeMap<u64, u64>,
    answered: BTreeMap<u64, u64>,
    acked: BTreeMap<u64, i64>,
    failures: Vec<String>,
    /// The longest wait for one answer.
    slowest: Duration,
    /// Attempts answered UNAVAILABLE or TIMEOUT and sent again with
    /// their key.
    retried: u64,
}

/// A session of `player` through `gateway` that waits `ANSWER_WAIT` for
/// an answer. Its login is retried for a few seconds, as `create`'s is.
fn hammer_session(gateway: SocketAddr, player: u64) -> routerd::testing::client::Client {
    let token = support::token(player, 3600);
    let started = std::time::Instant::now();
    loop {
        let mut client = routerd::testing::client::Client::connect(gateway, ANSWER_WAIT);
        let reply = client.call(route::AUTH_LOGIN, 1, token.as_bytes());
        if reply.kind == FrameKind::Response {
            return client;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "login of {player}: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Increments each of `players` in turn, one request in flight per
/// player, on one session each (odd players through `odd`, even through
/// `even`), until `stop`; every answer must be the counter plus one.
fn hammer(
    players: Vec<u64>,
    even: SocketAddr,
    odd: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        let mut sessions: Vec<(u64, routerd::testing::client::Client, i64, u32)> = players
            .iter()
            .map(|player| {
                let gateway = if player % 2 == 0 { even } else { odd };
                (*player, hammer_session(gateway, *player), 1, 2)
            })
            .collect();
        let mut key = 0u64;
        while !stop.load(Ordering::Acquire) {
            for (player, client, last, seq) in &mut sessions {
                key += 1;
                let reply = keyed_increment(client, seq, key, &mut seen);
                *seen.sent.entry(*player).or_default() += 1;
                *seen.answered.entry(*player).or_default() += 1;
                let good = reply.kind == FrameKind::Response;
                if good && counter_of(&reply) == *last + 1 {
                    *last += 1;
                    *seen.acked.entry(*player).or_default() += 1;
                } else {
                    seen.failures
                        .push(format!("player {player}: {reply:?} after {last}"));
                }
            }
        }
        seen
    })
}

/// One increment with request key `key`, sent again with the same key
/// while it is answered UNAVAILABLE or TIMEOUT (for up to `ANSWER_WAIT`):
/// a node whose lease lapsed on a loaded machine refuses for a moment,
/// which is correct, and the key makes the retry count once whether or
/// not the refused attempt ran. The final answer is returned.
fn keyed_increment(
    client: &mut routerd::testing::client::Client,
    seq: &mut u32,
    key: u64,
    seen: &mut Seen,
) -> routerd::testing::client::Reply {
    let started = std::time::Instant::now();
    loop {
        let mut frame = Vec::new();
        encode_keyed_request(
            &mut frame,
            route::PLAYER_INCR,
            *seq,
            key,
            &1i64.to_le_bytes(),
        );
        client.send_raw(&frame);
        let sent_at = std::time::Instant::now();
        let reply = client.recv();
        seen.slowest = seen.slowest.max(sent_at.elapsed());
        assert_eq!(reply.seq, *seq, "answers come in order: {reply:?}");
        *seq += 1;
        let uncertain = reply.kind == FrameKind::Error
            && [ErrorCode::Unavailable as u16, ErrorCode::Timeout as u16]
                .contains(&reply.error_code());
        if !uncertain || started.elapsed() > ANSWER_WAIT {
            return reply;
        }
        seen.retried += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn a_rebalance_under_load_gives_each_node_its_share_and_loses_nothing(mut cluster: LocalCluster) {
    cluster.persist = "interval";
    cluster.cluster_extra = format!("rebalance_concurrency = {CONCURRENCY}\n");
    let node1 = cluster.start(1);
    let players: Vec<u64> = (1..=PLAYERS).collect();
    for player in &players {
        create(node1.gateway, *player);
    }
    let node2 = cluster.start(2);
    wait_members_up(&node1, &[2]);
    wait_members_up(&node2, &[1]);
    eventually(Duration::from_secs(5), "node 1 holds every player", || {
        (get_json(node1.admin, "/cluster")["objects"] == PLAYERS).then_some(())
    });

    let stop = Arc::new(AtomicBool::new(false));
    let hammers: Vec<_> = (0..HAMMERS)
        .map(|thread| {
            let mine = players.iter().copied().filter(|p| p % HAMMERS == thread);
            hammer(mine.collect(), node1.gateway, node2.gateway, stop.clone())
        })
        .collect();
    // How many transfers run at once, as node 1 reports them while it
    // moves (sampled, so at most what really ran).
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        let admin = node1.admin;
        std::thread::spawn(move || {
            let mut most = 0;
            while sampling.load(Ordering::Acquire) {
                let status = get_json(admin, "/rebalance");
                most = most.max(status["moving"].as_u64().unwrap());
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        })
    };
    std::thread::sleep(Duration::from_millis(500));

    // Asked of node 2, which holds nothing: node 1 is asked in turn.
    let (status, body) = http_post(node2.admin, "/rebalance");
    assert_eq!(status, 202, "{body}");
    let started: serde_json::Value = serde_json::from_str(&body).unwrap();
    let asked: Vec<u64> = started["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["node_id"].as_u64().unwrap())
        .collect();
    assert_eq!(asked, [1, 2], "{started}");
    let done = |admin| {
        let status = get_json(admin, "/rebalance");
        (status["runs"] == 1 && status["running"] == false).then_some(status)
    };
    let on_node1 = eventually(Duration::from_secs(60), "node 1 rebalanced", || {
        done(node1.admin)
    });
    let on_node2 = eventually(Duration::from_secs(10), "node 2 rebalanced", || {
        done(node2.admin)
    });
    std::thread::sleep(Duration::from_millis(500));
    sampling.store(false, Ordering::Release);
    stop.store(true, Ordering::Release);
    let sampled_most = sampler.join().unwrap();
    let seen: Vec<Seen> = hammers.into_iter().map(|h| h.join().unwrap()).collect();

    // Every increment acknowledged once (a keyed retry counts once), each
    // answer the counter plus one.
    let failures: Vec<&String> = seen.iter().flat_map(|s| &s.failures).collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let total = |f: fn(&Seen) -> u64| seen.iter().map(f).sum::<u64>();
    let sent = total(|s| s.sent.values().sum());
    assert_eq!(sent, total(|s| s.answered.values().sum()));
    let slowest = seen.iter().map(|s| s.slowest).max().unwrap_or_default();
    let retried = total(|s| s.retried);
    println!(
        "rebalance: node 1 {on_node1}, node 2 {on_node2}; {sent} increments answered \
         ({retried} attempts sent again with their key), the slowest in {slowest:?}; sampled \
         at most {sampled_most} transfers at once"
    );

    // Each node owns its rendezvous share, and exactly the players
    // rendezvous hashing gives it.
    let expected_moves = players
        .iter()
        .filter(|p| default_node(**p, &[1, 2]) == 2)
        .count() as u64;
    let mut owned = BTreeMap::<u64, u64>::new();
    for player in &players {
        let owner = player_owner(node1.admin, *player).map(|(node, _)| node);
        assert_eq!(
            owner,
            Some(default_node(*player, &[1, 2])),
            "player {player}"
        );
        *owned.entry(owner.unwrap()).or_default() += 1;
    }
    println!("owned after the rebalance: {owned:?}");
    for node in [1, 2] {
        let count = owned.get(&node).copied().unwrap_or(0);
        assert!((80..=120).contains(&count), "node {node} owns {count}");
    }
    assert_eq!(on_node1["planned"], expected_moves);
    assert_eq!(on_node1["moved"], expected_moves);
    assert_eq!(on_node1["failed"], 0);
    assert_eq!(on_node1["moved_to"]["2"], expected_moves);
    assert_eq!(on_node2["planned"], 0, "node 2 held nothing of node 1's");
    // The bound held: never more than the concurrency in flight, and the
    // rebalance did run that many at once.
    assert!(sampled_most <= CONCURRENCY, "{sampled_most}");
    assert_eq!(on_node1["moving_max"], CONCURRENCY);
    let metric = |admin: SocketAddr, name: &str| -> u64 {
        let (_, text) = http_get(admin, "/metrics");
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(
        metric(node1.admin, "routerd_rebalance_moves_total"),
        expected_moves
    );
    assert_eq!(metric(node1.admin, "routerd_rebalance_failures_total"), 0);
    assert_eq!(metric(node1.admin, "routerd_rebalance_in_flight"), 0);

    // Counters exact: creation's 1 plus every acknowledged increment.
    for player in &players {
        let acked: i64 = seen.iter().filter_map(|s| s.acked.get(player)).sum();
        assert!(acked > 0, "player {player} was hammered");
        assert_eq!(
            counter(node2.gateway, *player),
            1 + acked,
            "player {player}"
        );
    }
}

/// Starts node `id` with the admin token and `[cluster]` extras of
/// `cluster`.
fn start_with_token(cluster: &LocalCluster, id: u64) -> ServeProcess {
    let dir = cluster.dir().join(format!("node-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    let text = format!(
        "{}\n[gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         token = {TOKEN:?}\n[auth]\nsecret = \"{}\"\n",
        cluster.body(id, "the test cluster's secret"),
        support::SECRET
    );
    std::fs::write(&path, text).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
    command.args(["serve", "--config"]).arg(&path);
    ServeProcess::spawn(command)
}

/// `routerd rebalance` with `args`: its exit code and what it printed.
fn cli(args: &[&str]) -> (i32, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"))
        .arg("rebalance")
        .args(args)
        .env_remove("ROUTERD_ADMIN_TOKEN")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

#[test]
fn a_join_rebalances_by_itself_and_the_call_needs_the_token() {
    let mut cluster = LocalCluster::new();
    cluster.cluster_extra = "rebalance_on_join = true\nrebalance_concurrency = 2\n".into();
    let node1 = start_with_token(&cluster, 1);
    let players: Vec<u64> = (1..=40).collect();
    for player in &players {
        create(node1.gateway, *player);
    }
    // Without the token: refused and counted, nothing starts.
    let (status, body) = http_post(node1.admin, "/rebalance");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("unauthorized"), "{body}");
    assert_eq!(get_json(node1.admin, "/rebalance")["runs"], 0);
    let (code, text) = cli(&["--admin", &node1.admin.to_string()]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("unauthorized"), "{text}");

    // Node 2 joins: node 1 moves node 2's share by itself.
    let node2 = start_with_token(&cluster, 2);
    wait_members_up(&node1, &[2]);
    let expected = players
        .iter()
        .filter(|p| default_node(**p, &[1, 2]) == 2)
        .count() as u64;
    let status = eventually(Duration::from_secs(30), "a rebalance on join", || {
        let status = get_json(node1.admin, "/rebalance");
        (status["runs"] == 1 && status["running"] == false).then_some(status)
    });
    assert_eq!(status["moved"], expected, "{status}");
    assert!(status["moving_max"].as_u64().unwrap() <= 2, "{status}");
    for player in &players {
        let owner = player_owner(node2.admin, *player).map(|(node, _)| node);
        assert_eq!(
            owner,
            Some(default_node(*player, &[1, 2])),
            "player {player}"
        );
    }
    for player in &players {
        assert_eq!(counter(node2.gateway, *player), 1, "player {player}");
    }

    // With the token, the command runs every node's and says what moved:
    // nothing is left to move.
    let (code, text) = cli(&["--admin", &node2.admin.to_string(), "--token", TOKEN]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("node 1: moved 0"), "{text}");
    assert!(text.contains("node 2: moved 0"), "{text}");
    assert_eq!(get_json(node1.admin, "/rebalance")["runs"], 2);
}

on_every_store!(a_rebalance_under_load_gives_each_node_its_share_and_loses_nothing);
