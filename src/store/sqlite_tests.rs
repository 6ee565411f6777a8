//! The SQLite backend's integrity check and checkpoints, on real files.

use futures_lite::future::block_on;

use super::sqlite_checkpoint::CHECKPOINT_PAGES;
use super::*;

/// A store file with `rows` records of `state_bytes` each.
fn filled(path: &Path, rows: u64, state_bytes: usize) -> Connection {
    let connection = open_connection(path, &StoreConfig::default()).expect("open");
    let state = vec![3u8; state_bytes];
    let transaction = connection.unchecked_transaction().expect("transaction");
    for id in 0..rows {
        transaction
            .execute(
                "INSERT INTO routes (type_id, zone_id, object_id, owner_node, route_version, \
                 save_timepoint_ms, cas_version, state) VALUES (1, 0, ?1, 1, 1, 0, 1, ?2)",
                params![id as i64, state],
            )
            .expect("insert");
    }
    transaction.commit().expect("commit");
    connection
}

#[test]
fn a_sound_file_passes_the_integrity_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sound.db");
    let connection = filled(&path, 100, 100);
    assert!(check_integrity(&connection, &path, Duration::from_secs(10)).is_ok());
}

#[test]
fn the_integrity_check_stops_at_its_limit_and_accepts_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.db");
    // Large enough that a full check takes far longer than the limit.
    let connection = filled(&path, 20_000, 2048);
    let limit = Duration::from_millis(1);
    let unlimited = Instant::now();
    assert!(check_integrity(&connection, &path, Duration::from_secs(60)).is_ok());
    let full = unlimited.elapsed();
    let started = Instant::now();
    assert!(check_integrity(&connection, &path, limit).is_ok());
    let stopped = started.elapsed();
    assert!(
        stopped < full,
        "a check limited to {limit:?} took {stopped:?}, a full one {full:?}"
    );
}

#[test]
fn a_damaged_file_is_refused_with_its_path_and_sqlites_words() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("damaged.db");
    let connection = filled(&path, 500, 500);
    connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        })
        .expect("checkpoint");
    drop(connection);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("file");
    // Page 1 (the header and the schema) intact, page 2 on garbage.
    file.seek(SeekFrom::Start(4096)).expect("seek");
    file.write_all(&[0xa5; 4096 * 4]).expect("overwrite");
    drop(file);
    let connection = Connection::open(&path).expect("open");
    let error = check_integrity(&connection, &path, Duration::from_secs(10))
        .expect_err("a damaged file is refused");
    let message = error.to_string();
    assert!(matches!(error, OpenError::Corrupt { .. }), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}

/// The WAL file next to the store file at `path`.
fn wal_of(path: &Path) -> std::path::PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

/// Writes `count` records from `first` on, each with a state of 64 pages.
fn write_pages(store: &Store, first: u64, count: u64) {
    for id in first..first + count {
        let write = RecordWrite {
            key: ObjectKey::new(1, 0, id),
            condition: WriteCondition::Absent,
            owner_node: NodeId(1),
            owner_incarnation: 1,
            route_version: RouteVersion(1),
            save_timepoint_ms: 0,
            state: vec![5u8; 64 * 4096],
        };
        let outcome = block_on(store.write(write)).expect("write");
        assert_eq!(outcome, WriteOutcome::Applied(CasVersion(1)));
    }
}

/// `path`'s length once it passes `bytes`, or its last length after 10 s.
fn grown_past(path: &Path, bytes: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let length = std::fs::metadata(path).expect("the file").len();
        if length > bytes || Instant::now() > deadline {
            return length;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// With the checkpointer held back, commits alone take the WAL three times
/// past the length at which SQLite would checkpoint inside a commit (1000
/// pages), and the database file does not change: no commit checkpoints,
/// so none holds a heartbeat at the write gate. Let go, the checkpointer
/// copies the WAL at the next commit.
#[test]
fn no_commit_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let config = StoreConfig::default();
    let (store, checkpoints) =
        open_store(&path, &config, GroupCommit::On, MemberLane::Own).expect("open");
    checkpoints.pause(true);
    let database = std::fs::metadata(&path).expect("the file").len();
    let pages = u64::from(3 * CHECKPOINT_PAGES);
    write_pages(&store, 0, pages / 64 + 2);
    let wal = std::fs::metadata(wal_of(&path)).expect("the WAL").len();
    assert!(wal > pages * 4096, "the WAL holds {wal} bytes");
    let now = std::fs::metadata(&path).expect("the file").len();
    assert_eq!(now, database, "a commit checkpointed into the file");
    checkpoints.pause(false);
    write_pages(&store, pages / 64 + 2, 1);
    let copied = grown_past(&path, pages * 4096);
    assert!(copied > pages * 4096, "the file holds {copied} bytes");
}

/// Dropping the store ends the checkpointer with the lanes: their hooks
/// and the thread let go of what they shared.
#[test]
fn the_checkpointer_ends_with_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let config = StoreConfig::default();
    let (store, checkpoints) =
        open_store(&path, &config, GroupCommit::On, MemberLane::Own).expect("open");
    write_pages(&store, 0, u64::from(CHECKPOINT_PAGES) / 64 + 1);
    drop(store);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&checkpoints) > 1 {
        assert!(Instant::now() < deadline, "the checkpointer still runs");
        std::thread::sleep(Duration::from_millis(10));
    }
}
