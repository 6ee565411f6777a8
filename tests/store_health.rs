//! A node whose store keeps failing says so: `/healthz` answers 503 with
//! `store: <cause>`, `routerd_store_errors_total{op, kind}` counts the
//! failures, and once the store answers again `/healthz` is `ok`. On a
//! memory store with injected faults.

mod support;

use std::time::{Duration, Instant};

use routerd::store::Fault;
use support::cluster::http_get;
use support::{config, token, TestNode};
use wire::client::route;

/// Faults injected: more than the run of failures that marks the store
/// failing, few enough that the node consumes them in a moment.
const FAULTS: usize = 12;
const LIMIT: Duration = Duration::from_secs(10);

fn login_attempt(node: &TestNode, player: u64) {
    let mut client = node.connect();
    let _ = client.call(route::AUTH_LOGIN, 1, token(player, 3600).as_bytes());
}

fn errors(node: &TestNode, op: &str, kind: &str) -> i64 {
    node.metric(&format!(
        "routerd_store_errors_total{{op=\"{op}\",kind=\"{kind}\"}}"
    ))
}

#[test]
fn a_failing_store_turns_healthz_503_until_it_answers() {
    let (node, faults) = TestNode::start_with_faults(config());
    let deadline = Instant::now() + LIMIT;
    while http_get(node.admin(), "/healthz") != (200, "ok".to_string()) {
        assert!(Instant::now() < deadline, "the node never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(errors(&node, "load", "injected"), 0);
    assert!(faults.inject(Fault::Fail, FAULTS));
    // Logins load their player from the store, and fail.
    let mut player = 1;
    let failing = loop {
        login_attempt(&node, player);
        player += 1;
        let (status, body) = http_get(node.admin(), "/healthz");
        if status == 503 {
            break body;
        }
        assert!(Instant::now() < deadline, "healthz stayed {status} {body}");
    };
    assert_eq!(failing, "store: injected fault");
    assert!(errors(&node, "load", "injected") >= 1);
    let total: i64 = ["load", "write", "write_member", "list_members"]
        .iter()
        .map(|op| errors(&node, op, "injected"))
        .sum();
    assert!(total >= 3, "a run of failures was counted: {total}");
    // The node goes on using the store until the faults are spent; then
    // the store answers and healthz says so.
    loop {
        let (status, body) = http_get(node.admin(), "/healthz");
        if faults.pending() == 0 && status == 200 {
            assert_eq!(body, "ok");
            break;
        }
        if faults.pending() > 0 {
            login_attempt(&node, player);
            player += 1;
        }
        assert!(Instant::now() < deadline, "healthz stayed {status} {body}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A login is served again.
    let mut client = node.connect();
    client.login(player, 1);
}

/// A store that answers every heartbeat, but past its deadline (three
/// quarters of `heartbeat_interval_ms`), lapses the lease though each
/// write applies: a store failing, not a node. The heartbeats given up
/// are counted (`write_member`, outcome unknown), and `/healthz` says
/// the store fails until a heartbeat is answered in time.
#[test]
fn heartbeats_answered_too_late_are_counted_and_turn_healthz_503() {
    let (node, faults) = TestNode::start_with_faults(config());
    let deadline = Instant::now() + LIMIT;
    while http_get(node.admin(), "/healthz") != (200, "ok".to_string()) {
        assert!(Instant::now() < deadline, "the node never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Late, not lost: each call applies and answers after 1 s, well within
    // store.request_timeout_ms.
    assert!(faults.inject(Fault::Delay(Duration::from_secs(1)), FAULTS));
    let failing = loop {
        let (status, body) = http_get(node.admin(), "/healthz");
        if status == 503 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "healthz stayed {status} {body} with every heartbeat late ({} given up)",
            errors(&node, "write_member", "conflict_unknown")
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        failing.starts_with("store: write_member outcome unknown: no answer within"),
        "{failing}"
    );
    assert!(errors(&node, "write_member", "conflict_unknown") >= 3);
    // Answered in time again, the store is well again.
    loop {
        let (status, body) = http_get(node.admin(), "/healthz");
        if faults.pending() == 0 && status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "healthz stayed {status} {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
