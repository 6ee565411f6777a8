//! `kill -9` during a stream of acknowledged writes loses none of them.
//!
//! The test re-runs its own binary as a writer child: the child inserts
//! records (several writers, so group commit batches them) and prints each
//! acknowledged one; the parent reads a while, SIGKILLs it mid-stream,
//! reopens the file and checks every acknowledged record.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::StoreConfig;
use routerd::store::{
    open_sqlite, CasVersion, GroupCommit, NodeId, RecordWrite, RouteVersion, WriteCondition,
    WriteOutcome,
};
use wire::ObjectKey;

const WRITER_ENV: &str = "ROUTERD_STORE_CRASH_WRITER";
const WRITERS: u64 = 4;
/// Acknowledgements the parent waits for before killing the child.
const ACKS_BEFORE_KILL: usize = 400;

fn key(id: u64) -> ObjectKey {
    ObjectKey::new(9, 0, id)
}

fn state(id: u64) -> Vec<u8> {
    id.to_le_bytes().repeat(4)
}

/// The child: writes until killed. Writer `w` inserts ids `w, w + WRITERS,
/// ...`; it also advances one shared counter record by CAS.
#[test]
#[ignore = "run as a child process by acknowledged_writes_survive_kill_9"]
fn crash_writer_child() {
    let Some(path) = std::env::var_os(WRITER_ENV) else {
        return;
    };
    let store = open_sqlite(Path::new(&path), &StoreConfig::default(), GroupCommit::On)
        .expect("open store");
    let threads: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut id = writer;
                loop {
                    let write = RecordWrite {
                        key: key(id),
                        condition: WriteCondition::Absent,
                        owner_node: NodeId(1),
                        owner_incarnation: 1,
                        route_version: RouteVersion(id),
                        save_timepoint_ms: id,
                        state: state(id),
                    };
                    match block_on(store.write(write)) {
                        Ok(WriteOutcome::Applied(_)) => println!("ACK {id}"),
                        other => panic!("write {id} gave {other:?}"),
                    }
                    id += WRITERS;
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("writer");
    }
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "crash_writer_child", "--ignored", "--nocapture"])
        .env(WRITER_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn writer");
    let finished = support::watchdog(child.id(), Duration::from_secs(120));
    let stdout = child.stdout.take().expect("child stdout");
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        // libtest may prefix the first line with "test ... ", so the
        // marker is searched, not matched at the start.
        if let Some((_, id)) = line.split_once("ACK ") {
            acked.push(id.trim().parse::<u64>().expect("acked id"));
        }
        if acked.len() >= ACKS_BEFORE_KILL || Instant::now() > deadline {
            break;
        }
    }
    // Child::kill is SIGKILL on unix: no destructor, no flush, no COMMIT.
    child.kill().expect("kill -9 the writer");
    child.wait().expect("reap the writer");
    finished.store(true, std::sync::atomic::Ordering::Release);
    assert!(
        acked.len() >= ACKS_BEFORE_KILL,
        "writer acknowledged only {} writes",
        acked.len()
    );
    let store =
        open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("reopen after kill");
    for id in &acked {
        let record = block_on(store.load(key(*id)))
            .expect("load")
            .unwrap_or_else(|| panic!("acknowledged write {id} lost"));
        assert_eq!(record.state, state(*id));
        assert_eq!(record.route_version, RouteVersion(*id));
        assert_eq!(record.cas_version, CasVersion(1));
    }
    println!(
        "{} acknowledged writes all present after kill -9",
        acked.len()
    );
}
