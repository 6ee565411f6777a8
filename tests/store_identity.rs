//! A node remembers the incarnation its store gave it (in its data_dir):
//! restarted against a store that never saw it (a path or URL edited to
//! another database, a store that lost its data), it refuses to start
//! rather than serve a second copy of every object; restarted against its
//! own store, or one restored from a backup, it serves.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{counter_of, ServeProcess};
use wire::client::route;

fn body(dir: &Path, db: &Path) -> String {
    format!(
        "[node]\nid = 1\ndata_dir = {:?}\n[cores]\ncount = 1\nrecv_buffers = 64\n\
         [store]\nbackend = \"sqlite\"\npath = {:?}\n",
        dir.join("data").display().to_string(),
        db.display().to_string()
    )
}

/// Serves node 1 on `db`, adds one to player 7 and stops cleanly; the
/// counter it answered.
fn run_once(dir: &Path, db: &Path) -> i64 {
    let node = ServeProcess::start(dir, &body(dir, db));
    let mut client = node.connect();
    client.login(7, 1);
    let counter = counter_of(&client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes()));
    drop(client);
    assert_eq!(node.stop().code(), Some(0));
    counter
}

/// Runs `routerd serve` on `db` until it exits (within 20 s): its status
/// and stderr.
fn run_to_exit(dir: &Path, db: &Path) -> (Option<i32>, String) {
    let command = ServeProcess::command(dir, &body(dir, db));
    let (status, stderr) = support::run_to_exit(command, Duration::from_secs(20))
        .expect("node 1 served from a store that never saw it");
    (status.code(), stderr)
}

/// Copies a SQLite database's files (the database, its WAL and shared
/// memory where they exist) over `to`'s.
fn copy_db(from: &Path, to: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let (from, to) = (
            format!("{}{suffix}", from.display()),
            format!("{}{suffix}", to.display()),
        );
        let _ = std::fs::remove_file(&to);
        if Path::new(&from).exists() {
            std::fs::copy(&from, &to).unwrap();
        }
    }
}

fn record(dir: &Path) -> PathBuf {
    dir.join("data").join("node-1.incarnation")
}

#[test]
fn a_node_restarted_on_a_store_that_never_saw_it_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let (own, other) = (dir.path().join("own.db"), dir.path().join("other.db"));
    assert_eq!(run_once(dir.path(), &own), 1);
    assert_eq!(run_once(dir.path(), &own), 2);
    assert_eq!(std::fs::read_to_string(record(dir.path())).unwrap(), "2\n");

    // store.path edited to another file: a store with no trace of node 1.
    let (status, stderr) = run_to_exit(dir.path(), &other);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("node 1 last ran as incarnation 2")
            && stderr.contains("gave incarnation 1")
            && stderr.contains("node-1.incarnation"),
        "{stderr}"
    );
    // And refused again: the refused start wrote nothing the next one
    // would read as this node's history (a restart policy retries).
    for _ in 0..2 {
        let (status, stderr) = run_to_exit(dir.path(), &other);
        assert_eq!(status, Some(1), "{stderr}");
        assert!(stderr.contains("gave incarnation 1"), "{stderr}");
    }
    // Refused, the record still names the own store's incarnation, and
    // the own store serves the player's state on.
    assert_eq!(std::fs::read_to_string(record(dir.path())).unwrap(), "2\n");
    assert_eq!(run_once(dir.path(), &own), 3);

    // A new store that is meant: the operator removes the record.
    std::fs::remove_file(record(dir.path())).unwrap();
    assert_eq!(run_once(dir.path(), &other), 1);
}

#[test]
fn a_node_restarted_on_its_store_restored_from_a_backup_serves_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("own.db");
    assert_eq!(run_once(dir.path(), &db), 1);
    assert_eq!(run_once(dir.path(), &db), 2);
    // A backup of the database's files, taken with the node stopped.
    let backup = dir.path().join("backup");
    std::fs::create_dir(&backup).unwrap();
    copy_db(&db, &backup.join("own.db"));
    assert_eq!(run_once(dir.path(), &db), 3);
    assert_eq!(run_once(dir.path(), &db), 4);
    assert_eq!(std::fs::read_to_string(record(dir.path())).unwrap(), "4\n");

    // Restored with every node stopped: the node serves the backup's
    // state, says the store went back, and its record follows.
    copy_db(&backup.join("own.db"), &db);
    let node = ServeProcess::start(dir.path(), &body(dir.path(), &db));
    node.assert_logged(&["the store went back to before this node's last run"]);
    let mut client = node.connect();
    client.login(7, 1);
    let counter = counter_of(&client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes()));
    assert_eq!(counter, 3);
    drop(client);
    assert_eq!(node.stop().code(), Some(0));
    assert_eq!(std::fs::read_to_string(record(dir.path())).unwrap(), "3\n");
}
