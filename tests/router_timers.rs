//! The router's background timers (the router design's, docs/origins.md) on
//! a real node, set short: periodic saves, idle object degradation and idle
//! cache cleanup.

mod support;

use std::time::{Duration, Instant};

use support::{counter_of, TestNode};
use wire::client::route;

fn wait_until(node: &TestNode, what: &str, done: impl Fn(&TestNode) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done(node) {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen:\n{}",
            node.metrics()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_objects_are_saved_degraded_and_their_caches_freed() {
    let mut config = support::config();
    config.router.object_save_interval_ms = 100;
    config.router.object_free_timeout_ms = 400;
    config.router.cache_free_timeout_ms = 300;
    config.router.cache_update_interval_ms = 1000;
    let node = TestNode::start(config);
    let mut client = node.connect();
    client.login(9, 1);
    assert_eq!(
        counter_of(&client.call(route::PLAYER_INCR, 2, &5i64.to_le_bytes())),
        5
    );
    // Gauges are recomputed periodically, so wait for them.
    wait_until(&node, "the object gauge", |n| {
        n.metric("routerd_router_objects") == 1
    });

    // Periodic saves happen while the object lives.
    wait_until(&node, "a periodic save", |n| {
        n.metric("routerd_router_saves_total") >= 2
    });
    // Left alone, it is saved and degraded, and its cache freed after.
    wait_until(&node, "degradation", |n| {
        n.metric("routerd_router_degrades_total") == 1
    });
    wait_until(&node, "cache cleanup", |n| {
        n.metric("routerd_router_caches_freed_total") == 1
    });
    wait_until(&node, "empty gauges", |n| {
        n.metric("routerd_router_objects") == 0 && n.metric("routerd_router_caches") == 0
    });

    // The next request loads it back with its state.
    assert_eq!(counter_of(&client.call(route::PLAYER_GET, 3, b"")), 5);
    wait_until(&node, "the reload", |n| {
        n.metric("routerd_router_objects") == 1
    });
}
