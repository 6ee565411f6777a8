//! What the console shows by object type, on one node: `GET
//! /calls-by-type` counts each answer under the type its route addresses
//! (the built-in player, a scripted type), a refusal as refused and a
//! script's failure as an error; and `GET /objects/{type}/{id}` shows a
//! scripted object's saved state as its JSON.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::cluster::{eventually, get_json};
use support::{config, Client, TestNode};
use wire::client::{route, ErrorCode, FrameKind};

const COUNTER_ADD: u32 = 2001;
const INVENTORY_ADD: u32 = 2101;
const FAIL_NOW: u32 = 2951;

/// A type whose one route always fails the way a buggy script does: a
/// runtime error, answered INTERNAL.
const FAILING_SCRIPT: &str = r#"
return {
  type_id = 295, name = "failing", version = 1,
  routes = { { id = 2951, name = "failing.now", key = "player", codec = "json" } },
  init = function(key) return {} end,
  handlers = {
    ["failing.now"] = function(ctx, state, req) error("broken on purpose") end,
  },
}
"#;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scripts")
}

fn node_with_scripts(dir: &Path) -> TestNode {
    let mut config = config();
    config.scripts.dir = Some(dir.to_path_buf());
    TestNode::start(config)
}

/// The answer's code: `None` for a RESPONSE.
fn answered(client: &mut Client, route: u32, seq: u32, body: &[u8]) -> Option<u16> {
    let reply = client.call(route, seq, body);
    match reply.kind {
        FrameKind::Response => None,
        FrameKind::Error => Some(reply.error_code()),
        other => panic!("{other:?}"),
    }
}

fn row<'a>(shown: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    shown["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["type"] == name)
        .unwrap_or_else(|| panic!("no row for {name}: {shown}"))
}

#[test]
fn calls_are_counted_by_the_type_their_route_addresses() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        examples().join("counter.luau"),
        dir.path().join("counter.luau"),
    )
    .unwrap();
    std::fs::write(dir.path().join("failing.luau"), FAILING_SCRIPT).unwrap();
    let node = node_with_scripts(dir.path());
    let mut client = node.connect();
    client.login(7, 1);

    for seq in 2..5 {
        let one = 1i64.to_le_bytes();
        assert_eq!(answered(&mut client, route::PLAYER_INCR, seq, &one), None);
    }
    // A 1-byte body: refused, not the server's failure.
    let refused = answered(&mut client, route::PLAYER_INCR, 5, &[1]);
    assert_eq!(refused, Some(ErrorCode::BadRequest as u16));
    for seq in 6..8 {
        assert_eq!(
            answered(&mut client, COUNTER_ADD, seq, br#"{"by": 2}"#),
            None
        );
    }
    let refused = answered(&mut client, COUNTER_ADD, 8, br#"{"by": "two"}"#);
    assert_eq!(refused, Some(ErrorCode::BadRequest as u16));
    let failed = answered(&mut client, FAIL_NOW, 9, b"{}");
    assert_eq!(failed, Some(ErrorCode::Internal as u16));

    // The cores count as they answer; the scrape may be a little behind.
    let shown = eventually(Duration::from_secs(3), "every answer counted", || {
        let shown = get_json(node.admin(), "/calls-by-type");
        (row(&shown, "failing")["calls"] == 1 && row(&shown, "counter")["calls"] == 3)
            .then_some(shown)
    });
    let player = row(&shown, "player");
    assert_eq!(player["kind"], "object");
    assert_eq!(
        (
            &player["calls"],
            &player["ok"],
            &player["refused"],
            &player["errors"]
        ),
        (&4.into(), &3.into(), &1.into(), &0.into()),
        "{player}"
    );
    assert!(player["p99_ms"].as_f64().unwrap() > 0.0, "{player}");
    let routes = player["routes"].as_array().unwrap();
    assert!(routes.iter().any(|name| name == "player.incr"), "{player}");

    let counter = row(&shown, "counter");
    assert_eq!(
        (&counter["ok"], &counter["refused"], &counter["errors"]),
        (&2.into(), &1.into(), &0.into()),
        "{counter}"
    );
    assert_eq!(
        counter["codes"],
        serde_json::json!({"OK": 2, "BAD_REQUEST": 1})
    );
    assert_eq!(
        counter["routes"],
        serde_json::json!(["counter.add", "counter.get", "counter.raw"])
    );

    let failing = row(&shown, "failing");
    assert_eq!(
        (
            &failing["errors"],
            &failing["refused"],
            &failing["error_ratio"]
        ),
        (&1.into(), &0.into(), &1.0.into()),
        "{failing}"
    );
    assert_eq!(failing["codes"], serde_json::json!({"INTERNAL": 1}));

    // The room takes no client route (room.* go through the player).
    assert_eq!(row(&shown, "room")["calls"], 0);
    // Each row's cumulative buckets end at its timed answers.
    let buckets = shown["le"].as_array().unwrap().len();
    assert_eq!(player["latency"].as_array().unwrap().len(), buckets);
    assert_eq!(player["latency"][buckets - 1], 4);

    // Read only, and only under a Host the endpoint answers to.
    let posted = support::http::request(node.admin(), "POST", "/calls-by-type", &[], "");
    assert_eq!(posted.status, 405, "{}", posted.body);
    let head =
        "GET /calls-by-type HTTP/1.1\r\nHost: elsewhere.example\r\nConnection: close\r\n\r\n";
    let elsewhere = support::http::exchange(node.admin(), head, b"");
    assert_eq!(elsewhere.status, 421, "{}", elsewhere.body);
}

#[test]
fn a_scripted_objects_state_is_shown_as_its_json() {
    let node = node_with_scripts(&examples());
    let mut client = node.connect();
    client.login(7, 1);
    assert_eq!(answered(&mut client, COUNTER_ADD, 2, br#"{"by": 5}"#), None);
    let sword = br#"{"item": "sword", "count": 2}"#;
    assert_eq!(answered(&mut client, INVENTORY_ADD, 3, sword), None);

    // Both types save on write: the answers came after the saves.
    let counter = get_json(node.admin(), "/objects/counter/7");
    assert_eq!(
        counter["state"]["debug"],
        serde_json::json!({"n": 5}),
        "{counter}"
    );
    let inventory = get_json(node.admin(), "/objects/inventory/7");
    assert_eq!(
        inventory["state"]["debug"],
        serde_json::json!({"items": {"sword": 2}, "received": 0}),
        "{inventory}"
    );
}
