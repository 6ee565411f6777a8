//! The SQLite backend's integrity check, on real files.

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
