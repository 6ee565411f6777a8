//! SQLite-specific behaviour: schema versioning, a full queue, requests
//! that expire in the queue, and CAS across processes sharing one file.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use routerd::config::{SqliteSynchronous, StoreConfig};
use routerd::store::{
    open_sqlite, CasVersion, GroupCommit, LoadError, MemberCondition, MemberOutcome, MemberRow,
    MemberState, MemberVersion, MemberWrite, NodeId, OpenError, RecordWrite, RouteVersion, Store,
    TableVersion, WriteCondition, WriteError, WriteOutcome, SCHEMA_VERSION,
};
use support::store_race::{self, insert};
use wire::ObjectKey;

#[test]
fn an_incompatible_schema_version_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let config = StoreConfig::default();
    drop(open_sqlite(&path, &config, GroupCommit::On).expect("create"));
    // Reopening a file of this version works.
    drop(open_sqlite(&path, &config, GroupCommit::On).expect("reopen"));
    let connection = rusqlite::Connection::open(&path).expect("raw open");
    connection
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .expect("bump version");
    drop(connection);
    match open_sqlite(&path, &config, GroupCommit::On) {
        Err(OpenError::SchemaVersion {
            found, expected, ..
        }) => {
            assert_eq!(found, SCHEMA_VERSION + 1);
            assert_eq!(expected, SCHEMA_VERSION);
        }
        other => panic!("expected a schema version error, got {other:?}"),
    }
    // A file with tables but no version is not ours either.
    let foreign = dir.path().join("foreign.db");
    let connection = rusqlite::Connection::open(&foreign).expect("raw open");
    connection
        .execute_batch("CREATE TABLE unrelated (x INTEGER)")
        .expect("foreign table");
    drop(connection);
    let error = open_sqlite(&foreign, &config, GroupCommit::On).expect_err("foreign file");
    assert!(error.to_string().contains("schema version 0"), "{error}");
}

/// A file as a build of schema version 2 left it, with one member row.
const VERSION_2: &str = "CREATE TABLE routes (type_id INTEGER NOT NULL, zone_id INTEGER NOT NULL, \
             object_id INTEGER NOT NULL, owner_node INTEGER NOT NULL, \
             route_version INTEGER NOT NULL, save_timepoint_ms INTEGER NOT NULL, \
             cas_version INTEGER NOT NULL, state BLOB NOT NULL, \
             owner_incarnation INTEGER NOT NULL DEFAULT 0, \
             PRIMARY KEY (type_id, zone_id, object_id));
             CREATE TABLE members (node_id INTEGER PRIMARY KEY, incarnation INTEGER NOT NULL, \
             state INTEGER NOT NULL, heartbeat INTEGER NOT NULL, gateway TEXT NOT NULL, \
             admin TEXT NOT NULL, cluster BLOB NOT NULL, core_count INTEGER NOT NULL, \
             actors BLOB NOT NULL, version INTEGER NOT NULL);
             INSERT INTO members VALUES (4, 3, 2, 17, '127.0.0.1:7004', '127.0.0.1:9004', \
             x'00000000', 1, x'00000000', 9);
             PRAGMA user_version = 2;";

/// What a build of schema version 3 ran on a version 2 file.
const VERSION_2_TO_3: &str = "ALTER TABLE members ADD COLUMN changed INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE members ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX members_changed ON members (changed);
    CREATE TABLE members_version (id INTEGER PRIMARY KEY CHECK (id = 0), \
    version INTEGER NOT NULL);
    INSERT INTO members_version (id, version) VALUES (0, 1);
    PRAGMA user_version = 3;";

/// The store on a file at `path` made by running `batches` (what an older
/// build left), opened by this build, which migrates it.
fn open_migrated(path: &Path, batches: &[&str]) -> Store {
    let connection = rusqlite::Connection::open(path).expect("raw open");
    for batch in batches {
        connection
            .execute_batch(batch)
            .expect("an older build's file");
    }
    drop(connection);
    open_sqlite(path, &StoreConfig::default(), GroupCommit::On).expect("migrate")
}

/// The schema version the file at `path` records.
fn schema_version_of(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .expect("raw open")
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("user_version")
}

/// A damaged file of an older schema is refused as it was found: the
/// integrity check runs before the migration, which would otherwise
/// change the file (its tables, its `user_version`) before refusing it,
/// and leave a build of that schema unable to open it for a repair.
#[test]
fn a_damaged_file_of_an_older_schema_is_refused_unmigrated() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v3.db");
    let connection = rusqlite::Connection::open(&path).expect("raw open");
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL; {VERSION_2}; {VERSION_2_TO_3}"
        ))
        .expect("a version 3 file");
    let state = vec![5u8; 500];
    for id in 0..500i64 {
        connection
            .execute(
                "INSERT INTO routes (type_id, zone_id, object_id, owner_node, route_version, \
                 save_timepoint_ms, cas_version, state) VALUES (1, 0, ?1, 1, 1, 0, 1, ?2)",
                rusqlite::params![id, state],
            )
            .expect("insert");
    }
    connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        })
        .expect("checkpoint");
    drop(connection);
    // Page 1 (the header and the schema) intact, the table pages after it
    // garbage.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("file");
    file.seek(SeekFrom::Start(4096)).expect("seek");
    file.write_all(&[0xa5; 4096 * 8]).expect("overwrite");
    drop(file);
    let error = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On)
        .expect_err("a damaged file is refused");
    assert!(matches!(error, OpenError::Corrupt { .. }), "{error}");
    assert_eq!(schema_version_of(&path), 3);
}

/// A file of schema version 2 (membership without a table version) is
/// migrated in place: its member rows are listed, stamped with the version
/// it starts at, and the next change moves that version while a
/// heartbeat does not.
#[test]
fn a_version_2_file_is_migrated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_migrated(&dir.path().join("v2.db"), &[VERSION_2]);
    let page = block_on(store.list_members(TableVersion(0), NodeId(0))).expect("list");
    assert_eq!(page.rows.len(), 1);
    let row = page.rows[0].clone();
    assert_eq!(
        (row.node_id, row.incarnation, row.version),
        (NodeId(4), 3, MemberVersion(9))
    );
    let version = block_on(store.poll_members(vec![])).expect("poll").version;
    assert_eq!(version, TableVersion(1));
    let beat = MemberWrite {
        row: MemberRow {
            heartbeat: 18,
            ..row.clone()
        },
        condition: MemberCondition::VersionEquals(MemberVersion(9)),
    };
    assert_eq!(
        block_on(store.write_member(beat)).expect("heartbeat"),
        MemberOutcome::Applied(MemberVersion(10))
    );
    assert_eq!(
        block_on(store.poll_members(vec![])).expect("poll").version,
        version
    );
    let left = MemberWrite {
        row: MemberRow {
            state: MemberState::Left,
            ..row
        },
        condition: MemberCondition::VersionEquals(MemberVersion(10)),
    };
    assert_eq!(
        block_on(store.write_member(left)).expect("left"),
        MemberOutcome::Applied(MemberVersion(11))
    );
    assert_eq!(
        block_on(store.poll_members(vec![])).expect("poll").version,
        TableVersion(2)
    );
    let changed = block_on(store.list_members(version, NodeId(0))).expect("changes");
    assert_eq!(changed.rows.len(), 1);
    assert_eq!(changed.rows[0].state, MemberState::Left);
}

/// A file of schema version 3 (rows without timers) is migrated in place:
/// its rows read without timers, and a write with them is read back whole
/// and is a change.
#[test]
fn a_version_3_file_is_migrated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v3.db");
    let store = open_migrated(&path, &[VERSION_2, VERSION_2_TO_3]);
    let polled = block_on(store.poll_members(vec![NodeId(4)])).expect("poll");
    let row = polled.rows[0].clone();
    assert_eq!(row.version, MemberVersion(9));
    support::member_timers::timers_are_written_as_a_change(&store, row, polled.version);
    drop(store);
    assert_eq!(schema_version_of(&path), SCHEMA_VERSION);
}

/// A file of schema version 1 (before incarnations) is migrated in place:
/// its records keep their state and read as written by incarnation 0,
/// which every real incarnation outranks, and membership works.
#[test]
fn a_version_1_file_is_migrated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let version_1 = "CREATE TABLE routes (type_id INTEGER NOT NULL, zone_id INTEGER NOT NULL, \
             object_id INTEGER NOT NULL, owner_node INTEGER NOT NULL, \
             route_version INTEGER NOT NULL, save_timepoint_ms INTEGER NOT NULL, \
             cas_version INTEGER NOT NULL, state BLOB NOT NULL, \
             PRIMARY KEY (type_id, zone_id, object_id));
             CREATE TABLE members (node_id INTEGER PRIMARY KEY, addresses BLOB NOT NULL, \
             core_count INTEGER NOT NULL, actors BLOB NOT NULL, heartbeat_ms INTEGER NOT NULL);
             INSERT INTO routes VALUES (2, 0, 42, 3, 5, 1000, 7, x'0102');
             PRAGMA user_version = 1;";
    let path = dir.path().join("v1.db");
    let store = open_migrated(&path, &[version_1]);
    let record = block_on(store.load(ObjectKey::new(2, 0, 42)))
        .expect("load")
        .expect("record kept");
    assert_eq!(
        (
            record.owner_node,
            record.owner_incarnation,
            record.route_version
        ),
        (NodeId(3), 0, RouteVersion(5))
    );
    assert_eq!(
        (record.cas_version, record.state),
        (CasVersion(7), vec![1, 2])
    );
    let page = block_on(store.list_members(TableVersion(0), NodeId(0))).expect("list");
    assert!(page.rows.is_empty());
    drop(store);
    assert_eq!(schema_version_of(&path), SCHEMA_VERSION);
}

/// Holds the file's write lock from another connection, so the store
/// thread blocks inside its first transaction.
fn hold_write_lock(path: &Path) -> rusqlite::Connection {
    let connection = rusqlite::Connection::open(path).expect("raw open");
    connection
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take write lock");
    connection
}

#[test]
fn a_full_queue_answers_overloaded_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let config = StoreConfig {
        queue_max: 2,
        ..StoreConfig::default()
    };
    let store = open_sqlite(&path, &config, GroupCommit::On).expect("open");
    let lock = hold_write_lock(&path);
    let first = store.write(insert(1, 1));
    // Let the store thread take the first request and block on the lock.
    std::thread::sleep(Duration::from_millis(200));
    let queued: Vec<_> = (2..=3).map(|id| store.write(insert(id, 1))).collect();
    let started = Instant::now();
    let refused = block_on(store.write(insert(4, 1)));
    assert!(
        matches!(refused, Err(WriteError::Overloaded)),
        "{refused:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(100));
    let refused_load = block_on(store.load(ObjectKey::new(1, 0, 1)));
    assert!(refused_load.is_err());
    lock.execute_batch("COMMIT").expect("release lock");
    assert_eq!(
        block_on(first).expect("first"),
        WriteOutcome::Applied(CasVersion(1))
    );
    for write in queued {
        assert_eq!(
            block_on(write).expect("queued"),
            WriteOutcome::Applied(CasVersion(1))
        );
    }
    assert_eq!(
        block_on(store.load(ObjectKey::new(1, 0, 4))).expect("load"),
        None
    );
}

#[test]
fn a_request_that_outlives_its_timeout_in_the_queue_is_indeterminate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    // One request per transaction, so requests wait in the queue behind
    // the blocked ones.
    let config = StoreConfig {
        request_timeout_ms: 300,
        batch_max: 1,
        ..StoreConfig::default()
    };
    let store = open_sqlite(&path, &config, GroupCommit::On).expect("open");
    let lock = hold_write_lock(&path);
    // t = 0: blocks the thread until busy_timeout (300 ms) gives up.
    let blocker = store.write(insert(1, 1));
    std::thread::sleep(Duration::from_millis(100));
    // t = 100: deadlines at t = 400. `second` runs at t = 300 and blocks
    // until t = 600; `queued` and `queued_load` are past their deadline by
    // then and are answered without running.
    let second = store.write(insert(2, 1));
    let queued = store.write(insert(3, 1));
    let queued_load = store.load(ObjectKey::new(1, 0, 3));
    // Waiting for the lock up to busy_timeout is a definite failure:
    // nothing was written.
    assert!(matches!(block_on(blocker), Err(WriteError::Backend(_))));
    assert!(matches!(block_on(second), Err(WriteError::Backend(_))));
    assert_eq!(
        block_on(queued).expect("queued"),
        WriteOutcome::Indeterminate
    );
    assert!(matches!(block_on(queued_load), Err(LoadError::Timeout)));
    lock.execute_batch("COMMIT").expect("release lock");
    // Indeterminate means "re-read": here the re-read shows it never ran.
    for id in 1..=3 {
        assert_eq!(
            block_on(store.load(ObjectKey::new(1, 0, id))).expect("load"),
            None
        );
    }
    assert_eq!(
        block_on(store.write(insert(3, 1))).expect("retry"),
        WriteOutcome::Applied(CasVersion(1))
    );
}

/// A record this version cannot read (its state stored as text, as a
/// hand-written `UPDATE` leaves it) fails the requests about that record
/// only: before, it failed every write and load of the batch it rode in,
/// so one object's retries stopped the saves of all the others.
#[test]
fn a_bad_record_fails_only_the_requests_about_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let store = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("open");
    for id in 1..=3 {
        assert_eq!(
            block_on(store.write(insert(id, 1))).expect("insert"),
            WriteOutcome::Applied(CasVersion(1))
        );
    }
    let lock = hold_write_lock(&path);
    lock.execute(
        "UPDATE routes SET state = 'not a blob' WHERE object_id = 2",
        [],
    )
    .expect("spoil record 2");
    // The store thread takes this one alone and waits for the lock, so
    // the requests below queue up and run as one batch after it.
    let first = store.write(insert(4, 1));
    std::thread::sleep(Duration::from_millis(200));
    let cas = |id, expected| RecordWrite {
        condition: WriteCondition::CasEquals(CasVersion(expected)),
        ..insert(id, 1)
    };
    // A refused CAS reads the record back: the bad record's read fails.
    let bad_write = store.write(cas(2, 7));
    let good_write = store.write(cas(3, 1));
    let good_refused = store.write(cas(1, 7));
    let bad_load = store.load(ObjectKey::new(1, 0, 2));
    let good_load = store.load(ObjectKey::new(1, 0, 3));
    lock.execute_batch("COMMIT").expect("release lock");
    assert_eq!(
        block_on(first).expect("first"),
        WriteOutcome::Applied(CasVersion(1))
    );
    assert!(matches!(block_on(bad_write), Err(WriteError::Backend(_))));
    assert!(matches!(block_on(bad_load), Err(LoadError::Backend(_))));
    assert_eq!(
        block_on(good_write).expect("the good write is not failed by the bad one"),
        WriteOutcome::Applied(CasVersion(2))
    );
    assert!(matches!(
        block_on(good_refused).expect("a refusal is answered"),
        WriteOutcome::Conflict(Some(ref record)) if record.cas_version == CasVersion(1)
    ));
    let loaded = block_on(good_load).expect("the good load is not failed by the bad one");
    assert!(loaded.is_some());
}

#[test]
fn reads_and_member_lists_do_not_wait_for_the_write_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let config = StoreConfig {
        request_timeout_ms: 300,
        ..StoreConfig::default()
    };
    let store = open_sqlite(&path, &config, GroupCommit::On).expect("open");
    assert_eq!(
        block_on(store.write(insert(1, 1))).expect("write"),
        WriteOutcome::Applied(CasVersion(1))
    );
    // Another process holds the write lock (frozen inside a commit, say).
    let lock = hold_write_lock(&path);
    let started = Instant::now();
    let record = block_on(store.load(ObjectKey::new(1, 0, 1))).expect("a load under the lock");
    assert_eq!(record.map(|record| record.owner_node), Some(NodeId(1)));
    assert!(block_on(store.list_members(TableVersion(0), NodeId(0)))
        .expect("a list under the lock")
        .rows
        .is_empty());
    // Reads are WAL read transactions: they never waited for busy_timeout.
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    // A write waits for the lock up to busy_timeout, and fails: counted.
    // (Membership writes, the heartbeats, go through the same check.)
    let refused = block_on(store.write(insert(2, 1)));
    assert!(
        matches!(refused, Err(WriteError::Backend(_))),
        "{refused:?}"
    );
    let probe = store.probe();
    let health = probe.health();
    use routerd::store::health::{ErrorKind, ErrorOp};
    assert_eq!(health.errors(ErrorOp::Write, ErrorKind::Timeout), 1);
    assert_eq!(health.errors(ErrorOp::Load, ErrorKind::Timeout), 0);
    lock.execute_batch("COMMIT").expect("release lock");
    assert_eq!(
        block_on(store.write(insert(2, 1))).expect("write"),
        WriteOutcome::Applied(CasVersion(1))
    );
}

const RACE_ENV: &str = "ROUTERD_STORE_RACE_CHILD";
const RACE_KEYS: u64 = 200;

fn race_config() -> StoreConfig {
    // Small transactions, so the two processes' writes interleave instead
    // of one side taking every key in its first group commit.
    StoreConfig {
        synchronous: SqliteSynchronous::Normal,
        batch_max: 2,
        ..StoreConfig::default()
    }
}

/// The other process of `two_processes_race_insert_if_absent`.
#[test]
#[ignore = "run as a child process by two_processes_race_insert_if_absent"]
fn race_child() {
    let Some(path) = std::env::var_os(RACE_ENV) else {
        return;
    };
    let store = open_sqlite(Path::new(&path), &race_config(), GroupCommit::On).expect("open");
    store_race::child(&store, RACE_KEYS);
}

/// Two processes, each with its own connection to one file, race
/// insert-if-absent on the same keys: every key has exactly one winner, and
/// the stored record is the winner's.
#[test]
fn two_processes_race_insert_if_absent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    drop(open_sqlite(&path, &race_config(), GroupCommit::On).expect("create"));
    store_race::parent(
        RACE_KEYS,
        RACE_ENV,
        path.as_os_str(),
        Duration::from_secs(120),
        || open_sqlite(&path, &race_config(), GroupCommit::On).expect("open"),
    );
}

/// A tmpfs of `size` mounted on a new directory, unmounted when dropped;
/// `None` (said on stderr) where this process may not mount one.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|status| status.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            return None;
        }
        Some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn a_commit_the_full_disk_failed_is_of_unknown_outcome_and_what_applied_stays() {
    let Some(disk) = SmallDisk::mount("2m") else {
        return;
    };
    let path = disk.0.path().join("store.db");
    let config = StoreConfig {
        batch_max: 1,
        ..StoreConfig::default()
    };
    let store = open_sqlite(&path, &config, GroupCommit::On).expect("open");
    let write = |id: u64| {
        let mut write = insert(id, 1);
        write.state = vec![id as u8; 64 * 1024];
        block_on(store.write(write))
    };
    let mut applied = Vec::new();
    let failed = loop {
        let id = applied.len() as u64 + 1;
        match write(id) {
            Ok(WriteOutcome::Applied(_)) => applied.push(id),
            other => break other,
        }
        assert!(applied.len() < 100, "a 2 MiB disk took 6 MiB");
    };
    // The disk filled as the commit wrote the transaction to the WAL: not
    // "nothing happened" (frames with their commit mark may be there),
    // but unknown, which the router answers by re-reading.
    assert_eq!(failed.expect("an answer"), WriteOutcome::Indeterminate);
    assert!(!applied.is_empty());
    for id in &applied {
        let record = block_on(store.load(ObjectKey::new(1, 0, *id)))
            .expect("load")
            .expect("applied");
        assert_eq!(record.state.len(), 64 * 1024);
    }
}

#[test]
fn a_store_file_deleted_or_replaced_under_the_node_takes_no_more_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let store = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("open");
    assert_eq!(
        block_on(store.write(insert(1, 1))).expect("write"),
        WriteOutcome::Applied(CasVersion(1))
    );
    // A data_dir cleaned under the running node: SQLite would go on
    // committing into the unnamed file, and all of it would be gone at
    // the next start.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    // (Membership writes, the heartbeats, go through the same check.)
    let refused = block_on(store.write(insert(2, 1)));
    assert!(
        matches!(&refused, Err(WriteError::Backend(error)) if error.to_string().contains("deleted or replaced")),
        "{refused:?}"
    );
    // Replaced by another file at the same path: the same.
    drop(store);
    let store = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("reopen");
    let aside = dir.path().join("aside.db");
    drop(open_sqlite(&aside, &StoreConfig::default(), GroupCommit::On).expect("another"));
    std::fs::rename(&aside, &path).expect("replace");
    assert!(block_on(store.write(insert(3, 1))).is_err());
}

#[test]
fn a_wal_deleted_under_the_node_takes_no_more_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let store = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("open");
    assert!(wal_of(&path).exists(), "the open made no WAL");
    assert_eq!(
        block_on(store.write(insert(1, 1))).expect("write"),
        WriteOutcome::Applied(CasVersion(1))
    );
    // The WAL removed (a remedy for "database is locked" often given):
    // SQLite would append to the unlinked file, and the commits since the
    // last checkpoint, this one's among them, would be gone at the next
    // open.
    std::fs::remove_file(wal_of(&path)).expect("remove the WAL");
    let refused = block_on(store.write(insert(2, 1)));
    assert!(
        matches!(&refused, Err(WriteError::Backend(error)) if error.to_string().contains("-wal was deleted or replaced")),
        "{refused:?}"
    );
    // Replaced by another file: the same.
    let path = dir.path().join("other.db");
    let store = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("open");
    assert!(block_on(store.write(insert(3, 1))).is_ok());
    std::fs::remove_file(wal_of(&path)).expect("remove the WAL");
    std::fs::write(wal_of(&path), b"").expect("another WAL");
    assert!(block_on(store.write(insert(4, 1))).is_err());
}

/// The WAL file next to the store file at `path`.
fn wal_of(path: &Path) -> std::path::PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

/// Object writes that put 12000 pages through the WAL, twelve times the
/// length at which a checkpoint runs: the checkpointer copies the WAL
/// into the database file each time it passes that length, SQLite starts
/// it over from its beginning, and its file stays far shorter than all
/// that was written. (No commit checkpoints, so without the checkpointer
/// the WAL would hold every page written.)
#[test]
fn the_checkpointer_keeps_the_wal_short() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let store = open_sqlite(&path, &StoreConfig::default(), GroupCommit::On).expect("open");
    // 64 overflow pages of 4 KiB each, and a few more.
    let state = vec![7u8; 256 * 1024];
    let writes = 12_000 / 64;
    for id in 0..writes {
        let write = RecordWrite {
            state: state.clone(),
            ..insert(id, 1)
        };
        assert_eq!(
            block_on(store.write(write)).expect("write"),
            WriteOutcome::Applied(CasVersion(1))
        );
    }
    let written = writes * state.len() as u64;
    let wal = std::fs::metadata(wal_of(&path)).expect("the WAL").len();
    // Generous: the longest the checkpointer lets the WAL grow before the
    // object writes wait for it (4000 pages) and more, against 48 MB
    // written.
    assert!(
        wal < 20 << 20,
        "the WAL holds {wal} bytes after {written} bytes of states"
    );
    let database = std::fs::metadata(&path).expect("the file").len();
    assert!(
        database > 24 << 20,
        "the database file holds {database} bytes of the {written} written"
    );
}
