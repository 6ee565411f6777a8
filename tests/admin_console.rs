//! What the console reads, on a two-node cluster of `routerd serve`
//! processes: the console's files and their content types, listings with
//! paging (objects of a type on a node, sessions by player), `/config`
//! with its secrets masked, the log filter changed at run time, requests
//! forwarded to another member (`/nodes/{id}/...`), and each peer's
//! heartbeat age and link state in `/metrics`.

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use support::cluster::{eventually, get_json, login_eventually, wait_members_up, LocalCluster};
use wire::client::{route, FrameKind};

/// One request: status, the content type and the body.
fn request(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let answer = support::http::request(admin, method, path, &[], body);
    let content_type = answer
        .header("content-type")
        .unwrap_or_default()
        .to_string();
    (answer.status, content_type, answer.body)
}

fn json(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (status, content_type, text) = request(admin, method, path, body);
    assert_eq!(content_type, "application/json", "{path}: {text}");
    let value = serde_json::from_str(&text).unwrap_or_else(|error| panic!("{path}: {error}"));
    (status, value)
}

#[test]
fn the_console_and_the_admin_api_it_reads() {
    let cluster = LocalCluster::new();
    let one = cluster.start(1);
    let two = cluster.start(2);
    wait_members_up(&one, &[2]);
    wait_members_up(&two, &[1]);

    // The console's files, compiled into the binary.
    let (status, content_type, page) = request(one.admin, "GET", "/console/", "");
    assert_eq!(
        (status, content_type.as_str()),
        (200, "text/html; charset=utf-8")
    );
    assert!(page.contains("console.js"), "{page}");
    for (file, want) in [
        ("console.js", "text/javascript; charset=utf-8"),
        ("metrics.js", "text/javascript; charset=utf-8"),
        ("charts.js", "text/javascript; charset=utf-8"),
        ("panels.js", "text/javascript; charset=utf-8"),
        ("types.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("index.html", "text/html; charset=utf-8"),
    ] {
        let (status, content_type, body) =
            request(one.admin, "GET", &format!("/console/{file}"), "");
        assert_eq!((status, content_type.as_str()), (200, want), "{file}");
        assert!(!body.is_empty(), "{file}");
    }
    assert_eq!(request(one.admin, "GET", "/console/nothing.js", "").0, 404);
    assert_eq!(request(one.admin, "GET", "/console", "").0, 301);
    assert_eq!(request(one.admin, "POST", "/console/", "").0, 405);

    // The config, with every secret masked.
    let (status, config) = json(one.admin, "GET", "/config", "");
    assert_eq!(status, 200);
    assert_eq!(config["node"]["id"], 1);
    assert_eq!(config["cluster"]["secret"], routerd::config::MASK);
    assert_eq!(config["auth"]["secret"], routerd::config::MASK);
    let (_, _, text) = request(one.admin, "GET", "/config", "");
    assert!(!text.contains("the test cluster's secret"), "{text}");

    // The log filter, at run time.
    assert_eq!(json(one.admin, "GET", "/log-level", "").1["filter"], "info");
    let (status, set) = json(
        one.admin,
        "PUT",
        "/log-level",
        "info,routerd::cluster=debug",
    );
    assert_eq!(
        (status, set["filter"].as_str()),
        (200, Some("info,routerd::cluster=debug"))
    );
    assert_eq!(
        json(one.admin, "GET", "/log-level", "").1["filter"],
        "info,routerd::cluster=debug"
    );
    let (status, refused) = json(one.admin, "PUT", "/log-level", "routerd=loudest");
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("bad_filter"))
    );
    assert_eq!(
        json(one.admin, "GET", "/log-level", "").1["filter"],
        "info,routerd::cluster=debug"
    );
    assert_eq!(request(one.admin, "DELETE", "/log-level", "").0, 405);

    // Five players log in on node 1 and touch their objects.
    let players: Vec<u64> = (11..16).collect();
    let clients: Vec<_> = players
        .iter()
        .map(|&player| {
            let (mut client, _) = login_eventually(one.gateway, player, Duration::from_secs(10));
            let reply = client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes());
            assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
            client
        })
        .collect();

    // Sessions: counted per core, searched by player, paged.
    let (status, sessions) = json(one.admin, "GET", "/sessions", "");
    assert_eq!(status, 200);
    assert_eq!(sessions["total"], 5);
    let per_core: u64 = sessions["cores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|core| core["sessions"].as_u64().unwrap())
        .sum();
    assert_eq!(per_core, 5);
    let (_, found) = json(one.admin, "GET", "/sessions?player=13", "");
    let rows = found["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{found}");
    assert_eq!(rows[0]["player_id"], 13);
    assert_eq!(
        json(one.admin, "GET", "/sessions?player=99", "").1["sessions"],
        serde_json::json!([])
    );
    let (_, first) = json(one.admin, "GET", "/sessions?limit=2", "");
    assert_eq!(first["sessions"].as_array().unwrap().len(), 2);
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut after = None::<u64>;
    loop {
        let path = match after {
            None => "/sessions?limit=2".to_string(),
            Some(after) => format!("/sessions?limit=2&after={after}"),
        };
        let (_, page) = json(one.admin, "GET", &path, "");
        for row in page["sessions"].as_array().unwrap() {
            assert!(seen.insert(row["player_id"].as_u64().unwrap()), "{page}");
        }
        match page["next_after"].as_u64() {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, players.iter().copied().collect());
    for bad in [
        "/sessions?limit=501",
        "/sessions?limit=0",
        "/sessions?player=x",
        "/sessions?what=1",
    ] {
        let (status, refused) = json(one.admin, "GET", bad, "");
        assert_eq!(
            (status, refused["error"].as_str()),
            (400, Some("bad_request")),
            "{bad}"
        );
    }

    // Objects of a type on each node, paged, through node 1 (node 2's by
    // forwarding): the writable players of both are the five.
    let mut writable = BTreeSet::new();
    for node in [1, 2] {
        let mut after = None::<u64>;
        loop {
            let path = match after {
                None => format!("/nodes/{node}/objects/player?limit=2"),
                Some(after) => format!("/nodes/{node}/objects/player?limit=2&after={after}"),
            };
            let (status, page) = json(one.admin, "GET", &path, "");
            assert_eq!(status, 200, "{page}");
            assert_eq!(page["node_id"], node);
            let rows = page["objects"].as_array().unwrap();
            assert!(rows.len() <= 2);
            for row in rows.iter().filter(|row| row["writable"] == true) {
                assert_eq!(row["owner"], node, "{row}");
                assert!(writable.insert(row["id"].as_u64().unwrap()), "{row}");
            }
            match page["next_after"].as_u64() {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    assert_eq!(writable, players.iter().copied().collect());
    assert_eq!(
        json(one.admin, "GET", "/objects/room", "").1["objects"],
        serde_json::json!([])
    );
    assert_eq!(json(one.admin, "GET", "/objects/nosuchtype", "").0, 400);

    // Forwarding: another member's metrics as it answers them, errors
    // as JSON, no second hop.
    let (status, content_type, scrape) = request(one.admin, "GET", "/nodes/2/metrics", "");
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    assert!(scrape.contains("routerd_build_info"), "{scrape}");
    let (status, _, own) = request(one.admin, "GET", "/nodes/1/cluster", "");
    assert_eq!(status, 200);
    assert!(own.contains("\"node_id\":1"), "{own}");
    assert_eq!(
        json(one.admin, "GET", "/nodes/2/cluster", "").1["node_id"],
        2
    );
    let (status, unknown) = json(one.admin, "GET", "/nodes/9/metrics", "");
    assert_eq!(
        (status, unknown["error"].as_str()),
        (404, Some("unknown_node"))
    );
    assert_eq!(
        json(one.admin, "GET", "/nodes/2/nodes/1/metrics", "").0,
        400
    );
    // Empty segments hide no second `/nodes`: neither a loop between the
    // two nodes nor a path this node answers as its own, level after
    // level (which overflowed the admin thread's stack and aborted the
    // node, for one unauthenticated GET).
    assert_eq!(
        json(one.admin, "GET", "/nodes/2//nodes/1/metrics", "").0,
        400
    );
    let deep = format!("/nodes/1{}/metrics", "//nodes/1".repeat(1500));
    assert_eq!(json(one.admin, "GET", &deep, "").0, 400);
    assert_eq!(json(one.admin, "GET", "/nodes/1//cluster", "").0, 200);
    assert_eq!(json(one.admin, "GET", "/nodes/x/metrics", "").0, 400);

    // Each peer's heartbeat age and link state, as node 1 sees node 2.
    let line = |scrape: &str, name: &str| -> Option<f64> {
        scrape.lines().find_map(|line| {
            line.strip_prefix(&format!("{name}{{node=\"2\"}} "))?
                .parse()
                .ok()
        })
    };
    eventually(Duration::from_secs(5), "node 2's link up", || {
        let (_, _, scrape) = request(one.admin, "GET", "/metrics", "");
        (line(&scrape, "routerd_cluster_peer_link_up") == Some(1.0)).then_some(())
    });
    let (_, _, scrape) = request(one.admin, "GET", "/metrics", "");
    assert_eq!(line(&scrape, "routerd_cluster_peer_up"), Some(1.0));
    let age = line(&scrape, "routerd_cluster_peer_heartbeat_age_seconds").expect("an age");
    // Heartbeats every 100 ms: a second without one would have fenced it.
    assert!((0.0..1.0).contains(&age), "{age}");
    let cluster_view = get_json(one.admin, "/cluster");
    assert_eq!(cluster_view["members"].as_array().unwrap().len(), 2);
    drop(clients);
}

/// What the console's history, hottest objects, sessions search and push
/// read: node 1's own history fills with the load's samples; the player a
/// client keeps busy tops node 1's hottest objects; a player logged in on
/// node 2 is found from node 1 with `scope=cluster`, and a push through
/// node 1 reaches that session as a `room.message` of room 0 from the
/// system; a push to the wrong player or a bad text is refused; a request
/// whose `Host` names another address is refused 421 on these paths too.
#[test]
fn history_hot_objects_a_search_across_the_cluster_and_a_push() {
    let cluster = LocalCluster::new();
    let one = cluster.start(1);
    let two = cluster.start(2);
    wait_members_up(&one, &[2]);
    wait_members_up(&two, &[1]);

    let (mut busy, _) = login_eventually(one.gateway, 21, Duration::from_secs(10));
    for seq in 2..202 {
        let reply = busy.call(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    }
    let (mut away, _) = login_eventually(two.gateway, 22, Duration::from_secs(10));

    // The hottest objects of node 1: player 21, its 200 increments and its
    // login's requests.
    let (status, hot) = json(one.admin, "GET", "/hot-objects", "");
    assert_eq!(status, 200, "{hot}");
    assert_eq!(hot["node_id"], 1);
    let top = &hot["objects"][0];
    assert_eq!(
        (top["type"].as_str(), top["id"].as_u64()),
        (Some("player"), Some(21)),
        "{hot}"
    );
    assert!(top["requests"].as_u64().unwrap() >= 200, "{hot}");
    assert!(hot["covered_ms"].as_u64().unwrap() > 0, "{hot}");
    assert_eq!(request(one.admin, "POST", "/hot-objects", "").0, 405);

    // The history: a sample every 5 s, the load's among the first.
    let samples = eventually(Duration::from_secs(15), "two samples", || {
        let (status, history) = json(one.admin, "GET", "/history", "");
        assert_eq!(status, 200, "{history}");
        assert_eq!(history["every_ms"], 5000);
        let samples = history["samples"].as_array().unwrap().clone();
        (samples.len() >= 2).then_some(samples)
    });
    assert!(
        samples
            .iter()
            .any(|s| s["requests_per_s"].as_f64() > Some(0.0)),
        "{samples:?}"
    );
    assert_eq!(samples[0]["sessions"].as_f64(), Some(1.0), "{samples:?}");
    let last = samples.last().unwrap()["at_ms"].as_u64().unwrap();
    // Wall-clock times, as a browser's `Date.now()` reads them.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now_ms.abs_diff(last) < 60_000, "{last} against {now_ms}");
    let (_, later) = json(one.admin, "GET", &format!("/history?since={last}"), "");
    assert_eq!(later["samples"], serde_json::json!([]));
    assert_eq!(json(one.admin, "GET", "/history?since=x", "").0, 400);
    assert_eq!(
        json(one.admin, "GET", "/nodes/2/history", "").1["node_id"],
        2
    );

    // Player 22's session, found from node 1 on node 2.
    let (status, found) = json(one.admin, "GET", "/sessions?player=22&scope=cluster", "");
    assert_eq!(status, 200, "{found}");
    let nodes = found["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{found}");
    assert_eq!(nodes[0]["sessions"], serde_json::json!([]), "{found}");
    let on_two = nodes.iter().find(|node| node["node_id"] == 2).unwrap();
    let session = on_two["sessions"][0]["session_id"].as_u64().expect("found");
    assert_eq!(on_two["sessions"][0]["player_id"], 22);
    let (status, refused) = json(one.admin, "GET", "/sessions?scope=cluster", "");
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("bad_request"))
    );
    assert_eq!(json(one.admin, "GET", "/sessions?scope=all", "").0, 400);

    // A push to it, through node 1.
    let push = format!("/nodes/2/sessions/{session}/push?player=22");
    let (status, pushed) = json(one.admin, "POST", &push, "hello, player 22");
    assert_eq!(
        (status, pushed["pushed"].as_bool()),
        (200, Some(true)),
        "{pushed}"
    );
    let message = away.recv();
    assert_eq!(
        (message.kind, message.route_id),
        (FrameKind::Push, route::ROOM_MESSAGE),
        "{message:?}"
    );
    assert_eq!(&message.body[..16], &[0u8; 16]);
    assert_eq!(&message.body[16..], b"hello, player 22");
    // Another player's, a session of node 1 it is not, a bad text.
    let wrong = format!("/nodes/2/sessions/{session}/push?player=21");
    assert_eq!(
        json(one.admin, "POST", &wrong, "x").1["error"],
        "no_such_session"
    );
    let here = format!("/sessions/{session}/push?player=22");
    assert_eq!(json(one.admin, "POST", &here, "x").0, 404);
    assert_eq!(json(one.admin, "POST", &push, "").1["error"], "bad_request");
    let long = "x".repeat(1025);
    assert_eq!(json(one.admin, "POST", &push, &long).0, 400);

    // The Host check holds on the new paths.
    for (method, path) in [
        ("GET", "/history"),
        ("GET", "/hot-objects"),
        ("POST", push.as_str()),
    ] {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: elsewhere.example\r\nContent-Length: 1\r\n\r\n"
        );
        let answer = support::http::exchange(one.admin, &head, b"x");
        assert_eq!(answer.status, 421, "{method} {path}: {}", answer.body);
    }
    drop((busy, away));
}
