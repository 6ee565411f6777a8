//! The embedded SQLite backend: one connection on a dedicated store thread,
//! fed by the bridge's bounded queue.
//!
//! Group commit: the thread takes every request already queued (up to
//! `batch_max` writes) and runs them in ONE `BEGIN IMMEDIATE` transaction,
//! answering them all after `COMMIT`; throughput then grows with
//! concurrency instead of paying one fsync per write. `BEGIN IMMEDIATE`
//! takes the file's write lock before the first read, so a CAS
//! read-check-write is atomic against other processes sharing the file.
//!
//! Timeouts: a request that is still queued at its deadline
//! (`request_timeout_ms` after it was sent) is answered as timed out without
//! running (a write answers `Indeterminate`), and `busy_timeout` bounds the
//! wait for another process's lock to the same duration. A transaction
//! already running is answered when it finishes, so a stalled disk can
//! delay an answer past the timeout; the answer is then exact.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use wire::ObjectKey;

use super::api::Store;
use super::bridge::{Bridge, Done, Op, Request};
use super::error::{BackendError, OpenError};
use super::membership::{
    self, MemberCondition, MemberOutcome, MemberRow, MemberVersion, MemberWrite, MEMBERS_MAX,
};
use super::record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
use crate::config::{SqliteSynchronous, StoreConfig};

/// The schema this build reads and writes, kept in `PRAGMA user_version`.
/// Version 1 (no incarnations) is migrated in place at open.
pub const SCHEMA_VERSION: i64 = 2;

/// Whether the store thread groups queued requests into one transaction.
/// `Off` (one transaction per request) exists for the benchmark baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupCommit {
    On,
    Off,
}

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

/// Version 1 to 2: records learn their owner's incarnation (0: unknown,
/// which every real incarnation outranks), and membership becomes a CAS
/// table.
const MIGRATE_1_TO_2: &str = "
ALTER TABLE routes ADD COLUMN owner_incarnation INTEGER NOT NULL DEFAULT 0;
DROP TABLE members;
";

/// Opens (creating if needed) the SQLite store at `path` and starts its
/// thread. Fails at once on a schema from another version.
pub fn open_sqlite(
    path: &Path,
    config: &StoreConfig,
    group_commit: GroupCommit,
) -> Result<Store, OpenError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| OpenError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let connection = open_connection(path, config)?;
    let (bridge, receiver) = Bridge::new(
        config.queue_max,
        Duration::from_millis(config.request_timeout_ms),
    );
    let worker = Worker {
        connection,
        batch_max: match group_commit {
            GroupCommit::On => config.batch_max,
            GroupCommit::Off => 1,
        },
    };
    std::thread::Builder::new()
        .name("store-sqlite".to_string())
        .spawn(move || worker.run(receiver))
        .map_err(OpenError::Thread)?;
    Ok(Store::from_backend(Arc::new(bridge), config))
}

fn open_connection(path: &Path, config: &StoreConfig) -> Result<Connection, OpenError> {
    let sqlite = |source| OpenError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let mut connection = Connection::open(path).map_err(sqlite)?;
    connection
        .busy_timeout(Duration::from_millis(config.request_timeout_ms))
        .map_err(sqlite)?;
    // WAL lets readers of other processes proceed during a commit and
    // makes a commit one sequential append (one fsync with FULL).
    let mode: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(sqlite)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Config(
            "the SQLite store file cannot use WAL mode",
        ));
    }
    let synchronous = match config.synchronous {
        SqliteSynchronous::Full => "FULL",
        SqliteSynchronous::Normal => "NORMAL",
    };
    connection
        .pragma_update(None, "synchronous", synchronous)
        .map_err(sqlite)?;
    ensure_schema(&mut connection, path)?;
    Ok(connection)
}

/// Creates the schema on a new file, or checks the version of an existing
/// one. Runs under the write lock so two processes opening a new file at
/// once create it once.
fn ensure_schema(connection: &mut Connection, path: &Path) -> Result<(), OpenError> {
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
            transaction
                .pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sqlite)?;
        }
        (1, _) => {
            transaction.execute_batch(MIGRATE_1_TO_2).map_err(sqlite)?;
            transaction.execute_batch(MEMBERS_SCHEMA).map_err(sqlite)?;
            transaction
                .pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sqlite)?;
            tracing::info!(path = %path.display(), "store schema migrated from version 1 to 2");
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

struct Worker {
    connection: Connection,
    /// Writes one transaction carries at most (1 without group commit).
    batch_max: usize,
}

impl Worker {
    /// Serves requests until every `Store` handle is gone.
    fn run(mut self, receiver: Receiver<Request>) {
        let mut batch: Vec<Request> = Vec::with_capacity(self.batch_max);
        while let Ok(first) = receiver.recv() {
            let mut weight = first.weight();
            batch.push(first);
            while weight < self.batch_max {
                match receiver.try_recv() {
                    Ok(request) => {
                        weight += request.weight();
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            let mut live = Vec::with_capacity(batch.len());
            for request in batch.drain(..) {
                if request.deadline <= now {
                    request.expire();
                } else {
                    live.push(request);
                }
            }
            if live.is_empty() {
                continue;
            }
            match self.apply(&live) {
                Ok(done) => {
                    debug_assert_eq!(done.len(), live.len());
                    for (request, done) in live.into_iter().zip(done) {
                        request.answer(Ok(done));
                    }
                }
                // The transaction rolled back: nothing in it happened.
                Err(error) => {
                    for request in live {
                        request.answer(Err(error.clone()));
                    }
                }
            }
        }
    }

    /// Runs `requests` in one transaction; every answer waits for COMMIT.
    fn apply(&mut self, requests: &[Request]) -> Result<Vec<Done>, BackendError> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut done = Vec::with_capacity(requests.len());
        for request in requests {
            done.push(match &request.op {
                Op::Load(key) => Done::Load(load(&transaction, *key)?),
                Op::Write(writes) => {
                    let mut outcomes = Vec::with_capacity(writes.len());
                    for write in writes {
                        outcomes.push(write_one(&transaction, write)?);
                    }
                    Done::Write(outcomes)
                }
                Op::WriteMember(write) => Done::WriteMember(write_member(&transaction, write)?),
                Op::ListMembers => Done::List(list_members(&transaction)?),
            });
        }
        transaction.commit()?;
        Ok(done)
    }
}

// SQLite integers are i64; u64 values are stored bit for bit.
fn int(value: u64) -> i64 {
    value as i64
}

fn uint(value: i64) -> u64 {
    value as u64
}

fn load(transaction: &Transaction, key: ObjectKey) -> Result<Option<RouteRecord>, BackendError> {
    let mut statement = transaction.prepare_cached(
        "SELECT owner_node, route_version, save_timepoint_ms, cas_version, state, \
         owner_incarnation FROM routes WHERE type_id = ?1 AND zone_id = ?2 AND object_id = ?3",
    )?;
    let record = statement
        .query_row(
            params![key.type_id, key.zone_id, int(key.object_id)],
            |row| {
                Ok(RouteRecord {
                    key,
                    owner_node: NodeId(uint(row.get(0)?)),
                    owner_incarnation: uint(row.get(5)?),
                    route_version: RouteVersion(uint(row.get(1)?)),
                    save_timepoint_ms: uint(row.get(2)?),
                    cas_version: CasVersion(uint(row.get(3)?)),
                    state: row.get(4)?,
                })
            },
        )
        .optional()?;
    Ok(record)
}

/// One conditional write inside the batch's transaction. The CAS version
/// is computed from the row itself (`cas_version + 1`) so the check and the
/// write are one statement.
fn write_one(transaction: &Transaction, write: &RecordWrite) -> Result<WriteOutcome, BackendError> {
    let key = write.key;
    let changed = match write.condition {
        WriteCondition::Absent => transaction
            .prepare_cached(
                "INSERT INTO routes (type_id, zone_id, object_id, owner_node, route_version, \
                 save_timepoint_ms, cas_version, state, owner_incarnation) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8) ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                key.type_id,
                key.zone_id,
                int(key.object_id),
                int(write.owner_node.0),
                int(write.route_version.0),
                int(write.save_timepoint_ms),
                write.state,
                int(write.owner_incarnation),
            ])?,
        WriteCondition::CasEquals(expected) => transaction
            .prepare_cached(
                "UPDATE routes SET owner_node = ?4, route_version = ?5, save_timepoint_ms = ?6, \
                 cas_version = cas_version + 1, state = ?7, owner_incarnation = ?9 \
                 WHERE type_id = ?1 AND zone_id = ?2 AND object_id = ?3 AND cas_version = ?8",
            )?
            .execute(params![
                key.type_id,
                key.zone_id,
                int(key.object_id),
                int(write.owner_node.0),
                int(write.route_version.0),
                int(write.save_timepoint_ms),
                write.state,
                int(expected.0),
                int(write.owner_incarnation),
            ])?,
    };
    if changed == 1 {
        let cas_version = match write.condition {
            WriteCondition::Absent => CasVersion(1),
            WriteCondition::CasEquals(expected) => CasVersion(expected.0 + 1),
        };
        return Ok(WriteOutcome::Applied(cas_version));
    }
    // Same transaction: the record returned is the one that refused us.
    Ok(WriteOutcome::Conflict(load(transaction, key)?))
}

/// One conditional membership write inside the batch's transaction, as
/// one statement: the condition is in the statement's WHERE (or its
/// ON CONFLICT), and a refusal reads the row that refused it.
fn write_member(
    transaction: &Transaction,
    write: &MemberWrite,
) -> Result<MemberOutcome, BackendError> {
    let row = &write.row;
    let next = write.next_version();
    let cluster = membership::encode_addresses(&row.cluster);
    let actors = membership::encode_actors(&row.actors);
    // Both statements take the same eleven values (?11 is the expected
    // version, 0 for an insert), so they share one parameter list.
    let expected = match write.condition {
        MemberCondition::Absent => 0,
        MemberCondition::VersionEquals(expected) => int(expected.0),
    };
    let values = params![
        int(row.node_id.0),
        int(row.incarnation),
        row.state as i64,
        int(row.heartbeat),
        row.gateway,
        row.admin,
        cluster,
        row.core_count,
        actors,
        int(next.0),
        expected,
    ];
    let statement = match write.condition {
        MemberCondition::Absent => {
            "INSERT INTO members (node_id, incarnation, state, heartbeat, gateway, admin, \
             cluster, core_count, actors, version) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE ?11 = 0 \
             ON CONFLICT DO NOTHING"
        }
        MemberCondition::VersionEquals(_) => {
            "UPDATE members SET incarnation = ?2, state = ?3, heartbeat = ?4, gateway = ?5, \
             admin = ?6, cluster = ?7, core_count = ?8, actors = ?9, version = ?10 \
             WHERE node_id = ?1 AND version = ?11"
        }
    };
    let changed = transaction.prepare_cached(statement)?.execute(values)?;
    if changed == 1 {
        return Ok(MemberOutcome::Applied(next));
    }
    let current = select_members(transaction, Some(row.node_id))?.pop();
    Ok(MemberOutcome::Conflict(current))
}

fn list_members(transaction: &Transaction) -> Result<Vec<MemberRow>, BackendError> {
    select_members(transaction, None)
}

/// The rows of `node_id`, or every row (at most `MEMBERS_MAX`), by node id.
fn select_members(
    transaction: &Transaction,
    node_id: Option<NodeId>,
) -> Result<Vec<MemberRow>, BackendError> {
    let mut statement = transaction.prepare_cached(
        "SELECT node_id, incarnation, state, heartbeat, gateway, admin, cluster, core_count, \
         actors, version FROM members WHERE ?1 IS NULL OR node_id = ?1 \
         ORDER BY node_id LIMIT ?2",
    )?;
    let mut rows = statement.query(params![node_id.map(|node| int(node.0)), MEMBERS_MAX as i64])?;
    let mut members = Vec::new();
    let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
    while let Some(row) = rows.next()? {
        let cluster: Vec<u8> = row.get(6)?;
        let actors: Vec<u8> = row.get(8)?;
        members.push(MemberRow {
            node_id: NodeId(uint(row.get(0)?)),
            incarnation: uint(row.get(1)?),
            state: membership::decode_state(row.get(2)?).map_err(corrupt)?,
            heartbeat: uint(row.get(3)?),
            gateway: row.get(4)?,
            admin: row.get(5)?,
            cluster: membership::decode_addresses(&cluster).map_err(corrupt)?,
            core_count: row.get(7)?,
            actors: membership::decode_actors(&actors).map_err(corrupt)?,
            version: MemberVersion(uint(row.get(9)?)),
        });
    }
    Ok(members)
}
