//! Two processes, each with its own store handle on one database, race
//! insert-if-absent on the same keys: every key must have exactly one
//! winner, and the stored record must be the winner's. The SQLite and
//! PostgreSQL tests run the same race: the parent is the test, the child
//! this test binary again, running the test's ignored `race_child`.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures_lite::future::block_on;
use routerd::store::{
    CasVersion, NodeId, RecordWrite, RouteVersion, Store, WriteCondition, WriteOutcome,
};
use wire::ObjectKey;

/// The parent's owner id in the race; the child is `CHILD`.
const PARENT: u64 = 1;
const CHILD: u64 = 2;

/// An insert-if-absent of key `id` (type 1, zone 0) owned by `owner`.
pub fn insert(id: u64, owner: u64) -> RecordWrite {
    RecordWrite {
        key: ObjectKey::new(1, 0, id),
        condition: WriteCondition::Absent,
        owner_node: NodeId(owner),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: 0,
        state: owner.to_le_bytes().to_vec(),
    }
}

/// Inserts keys `0..keys` as `owner`, all in flight at once; returns the
/// keys this side won.
fn race(store: &Store, owner: u64, keys: u64) -> Vec<u64> {
    let pending: Vec<_> = (0..keys)
        .map(|id| (id, store.write(insert(id, owner))))
        .collect();
    let mut won = Vec::new();
    for (id, outcome) in pending {
        match block_on(outcome).expect("race insert") {
            WriteOutcome::Applied(version) => {
                assert_eq!(version, CasVersion(1));
                won.push(id);
            }
            WriteOutcome::Conflict(Some(record)) => assert_ne!(record.owner_node, NodeId(owner)),
            other => panic!("race insert gave {other:?}"),
        }
    }
    won
}

/// The child's side, for the test's `race_child`: says READY, waits for a
/// line on stdin, races, prints `WON <id>` for each key it won, then DONE.
pub fn child(store: &Store, keys: u64) {
    println!("READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("go line");
    for id in race(store, CHILD, keys) {
        println!("WON {id}");
    }
    println!("DONE");
}

/// The parent's side: starts the child with `env` set to `value` (where
/// the store is), opens its own store once the child is ready, races it
/// and checks every key's single winner against the stored record. The
/// child is killed after `limit`.
pub fn parent(keys: u64, env: &str, value: &OsStr, limit: Duration, open: impl FnOnce() -> Store) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "race_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let finished = super::watchdog(child.id(), limit);
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    // libtest may print "test race_child ... " before the child's own
    // output on the same line, so markers are searched, not matched whole.
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.ends_with("READY"));
    assert!(ready, "child never got ready");
    let store = open();
    let mut stdin = child.stdin.take().expect("child stdin");
    writeln!(stdin, "go").expect("tell child to go");
    let parent_won = race(&store, PARENT, keys);
    let mut child_won = Vec::new();
    let mut done = false;
    for line in lines.map_while(Result::ok) {
        if let Some((_, id)) = line.split_once("WON ") {
            child_won.push(id.trim().parse::<u64>().expect("key id"));
        }
        if line.ends_with("DONE") {
            done = true;
        }
    }
    let status = child.wait().expect("child exit");
    finished.store(true, std::sync::atomic::Ordering::Release);
    assert!(status.success());
    assert!(done, "child did not finish its race");
    println!(
        "parent won {}, child won {}",
        parent_won.len(),
        child_won.len()
    );
    assert_eq!(parent_won.len() + child_won.len(), keys as usize);
    for (owner, won) in [(PARENT, &parent_won), (CHILD, &child_won)] {
        for id in won {
            let record = block_on(store.load(ObjectKey::new(1, 0, *id)))
                .expect("load")
                .expect("record");
            assert_eq!(record.owner_node, NodeId(owner), "key {id}");
            assert_eq!(record.cas_version, CasVersion(1));
        }
    }
}
