//! The SQLite store's schema: the tables this build reads and writes,
//! created on a new file, and the migrations from the versions before it,
//! run in place at open.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, TransactionBehavior};

use crate::store::error::OpenError;

/// The schema this build reads and writes, kept in `PRAGMA user_version`.
/// Versions 1 (no incarnations), 2 (no table version) and 3 (no timers in
/// the member rows) are migrated in place at open.
pub const SCHEMA_VERSION: i64 = 4;

const SCHEMA: &str = "
CREATE TABLE routes (
    type_id INTEGER NOT NULL,
    zone_id INTEGER NOT NULL,
    object_id INTEGER NOT NULL,
    owner_node INTEGER NOT NULL,
    route_version INTEGER NOT NULL,
    save_timepoint_ms INTEGER NOT NULL,
    cas_version INTEGER NOT NULL,
    state BLOB NOT NULL,
    owner_incarnation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (type_id, zone_id, object_id)
);
";

/// The membership table of schema version 2 (version 1 had a TTL-based
/// table without incarnations, which is dropped: it held only heartbeats).
const MEMBERS_SCHEMA: &str = "
CREATE TABLE members (
    node_id INTEGER PRIMARY KEY,
    incarnation INTEGER NOT NULL,
    state INTEGER NOT NULL,
    heartbeat INTEGER NOT NULL,
    gateway TEXT NOT NULL,
    admin TEXT NOT NULL,
    cluster BLOB NOT NULL,
    core_count INTEGER NOT NULL,
    actors BLOB NOT NULL,
    version INTEGER NOT NULL
);
";

/// Version 2 to 3: the membership table's version, one row beside the
/// members, and on each member row the table version its last change made
/// (`changed`) and whether it is a tombstone (`deleted`). The rows a
/// version 2 store holds are stamped 1, the version it starts at.
const MIGRATE_2_TO_3: &str = "
ALTER TABLE members ADD COLUMN changed INTEGER NOT NULL DEFAULT 1;
ALTER TABLE members ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX members_changed ON members (changed);
CREATE TABLE members_version (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    version INTEGER NOT NULL
);
INSERT INTO members_version (id, version) VALUES (0, 1);
";

/// Version 3 to 4: each member row carries its process's failure-detection
/// timers (`MemberTimers`; empty in the rows a version 3 store holds,
/// which their readers treat as unknown).
const MIGRATE_3_TO_4: &str = "
ALTER TABLE members ADD COLUMN timers BLOB NOT NULL DEFAULT x'';
";

/// Version 1 to 2: records learn their owner's incarnation (0: unknown,
/// which every real incarnation outranks), and membership becomes a CAS
/// table.
const MIGRATE_1_TO_2: &str = "
ALTER TABLE routes ADD COLUMN owner_incarnation INTEGER NOT NULL DEFAULT 0;
DROP TABLE members;
";

/// Creates the schema on a new file, or checks the version of an existing
/// one. Runs under the write lock so two processes opening a new file at
/// once create it once.
pub(super) fn ensure_schema(connection: &mut Connection, path: &Path) -> Result<(), OpenError> {
    let sqlite = |source| OpenError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite)?;
    let found: i64 = transaction
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(sqlite)?;
    let tables: i64 = transaction
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(sqlite)?;
    match (found, tables) {
        (0, 0) => {
            transaction.execute_batch(SCHEMA).map_err(sqlite)?;
            transaction.execute_batch(MEMBERS_SCHEMA).map_err(sqlite)?;
            transaction.execute_batch(MIGRATE_2_TO_3).map_err(sqlite)?;
            transaction.execute_batch(MIGRATE_3_TO_4).map_err(sqlite)?;
            transaction
                .pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sqlite)?;
        }
        (1..=3, _) => {
            if found == 1 {
                transaction.execute_batch(MIGRATE_1_TO_2).map_err(sqlite)?;
                transaction.execute_batch(MEMBERS_SCHEMA).map_err(sqlite)?;
            }
            if found <= 2 {
                transaction.execute_batch(MIGRATE_2_TO_3).map_err(sqlite)?;
            }
            transaction.execute_batch(MIGRATE_3_TO_4).map_err(sqlite)?;
            transaction
                .pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sqlite)?;
            tracing::info!(path = %path.display(), from = found, to = SCHEMA_VERSION,
                "store schema migrated");
        }
        (SCHEMA_VERSION, _) => {}
        (found, _) => {
            return Err(OpenError::SchemaVersion {
                path: PathBuf::from(path),
                found,
                expected: SCHEMA_VERSION,
            })
        }
    }
    transaction.commit().map_err(sqlite)
}
