//! A player's counter belongs to its object wherever it lives, and survives
//! the node: a clean shutdown saves every object (`interval`), and an
//! acknowledged `on_write` increment survives `kill -9`.

mod support;

use support::{counter_of, ServeProcess};
use wire::client::{route, FrameKind};

fn sqlite_node(dir: &std::path::Path, persist: &str) -> String {
    format!(
        "[node]\ndata_dir = \"{}\"\n[cores]\ncount = 2\nrecv_buffers = 64\n\
         [services.player]\npersist = \"{persist}\"\n",
        dir.join("data").display()
    )
}

#[test]
fn counters_survive_a_clean_restart_with_interval_persistence() {
    let dir = tempfile::tempdir().unwrap();
    let config = sqlite_node(dir.path(), "interval");
    let node = ServeProcess::start(dir.path(), &config);
    // Enough players to spread over both cores and need a batch at shutdown.
    let players: Vec<u64> = (1..=40).collect();
    for &player in &players {
        let mut client = node.connect();
        client.login(player, 1);
        let delta = player as i64;
        assert_eq!(
            counter_of(&client.call(route::PLAYER_INCR, 2, &delta.to_le_bytes())),
            delta
        );
        assert_eq!(
            counter_of(&client.call(route::PLAYER_INCR, 3, &delta.to_le_bytes())),
            2 * delta
        );
    }
    // The save interval is the default 600 s (`router.object_save_interval_ms`):
    // only the shutdown save can have persisted these.
    assert_eq!(node.stop().code(), Some(0));

    let node = ServeProcess::start(dir.path(), &config);
    for &player in &players {
        let mut client = node.connect();
        client.login(player, 1);
        assert_eq!(
            counter_of(&client.call(route::PLAYER_GET, 2, b"")),
            2 * player as i64,
            "player {player}"
        );
    }
    assert_eq!(node.stop().code(), Some(0));
}

#[test]
fn acknowledged_on_write_increments_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let config = sqlite_node(dir.path(), "on_write");
    let node = ServeProcess::start(dir.path(), &config);
    let mut client = node.connect();
    client.login(77, 1);
    // Keep increments in flight, and kill the node in the middle of them.
    let mut acknowledged = 0i64;
    let mut sent = 0i64;
    for seq in 2..40u32 {
        client.send(route::PLAYER_INCR, seq, &1i64.to_le_bytes());
        sent += 1;
    }
    for _ in 0..20 {
        let reply = client.recv();
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
        acknowledged = acknowledged.max(counter_of(&reply));
    }
    node.kill_9();
    assert!(acknowledged >= 20);

    let node = ServeProcess::start(dir.path(), &config);
    let mut client = node.connect();
    client.login(77, 1);
    let counter = counter_of(&client.call(route::PLAYER_GET, 2, b""));
    assert!(
        (acknowledged..=sent).contains(&counter),
        "counter {counter}: every acknowledged increment ({acknowledged}) must survive, \
         and no more than were sent ({sent})"
    );
    assert_eq!(node.stop().code(), Some(0));
}
