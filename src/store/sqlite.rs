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
use super::membership::{self, MemberRow, MEMBERS_MAX};
use super::record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
use crate::config::{SqliteSynchronous, StoreConfig};

/// The schema this build reads and writes, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 1;

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
    PRIMARY KEY (type_id, zone_id, object_id)
);
CREATE TABLE members (
    node_id INTEGER PRIMARY KEY,
    addresses BLOB NOT NULL,
    core_count INTEGER NOT NULL,
    actors BLOB NOT NULL,
    heartbeat_ms INTEGER NOT NULL
);
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
        membership_ttl_ms: config.membership_ttl_ms,
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
            transaction
                .pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sqlite)?;
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
    membership_ttl_ms: u64,
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
                Op::UpsertMember(row) => {
                    upsert_member(&transaction, row)?;
                    Done::Upsert
                }
                Op::ListMembers { now_ms } => {
                    Done::List(list_members(&transaction, *now_ms, self.membership_ttl_ms)?)
                }
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
        "SELECT owner_node, route_version, save_timepoint_ms, cas_version, state FROM routes \
         WHERE type_id = ?1 AND zone_id = ?2 AND object_id = ?3",
    )?;
    let record = statement
        .query_row(
            params![key.type_id, key.zone_id, int(key.object_id)],
            |row| {
                Ok(RouteRecord {
                    key,
                    owner_node: NodeId(uint(row.get(0)?)),
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
                 save_timepoint_ms, cas_version, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7) \
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                key.type_id,
                key.zone_id,
                int(key.object_id),
                int(write.owner_node.0),
                int(write.route_version.0),
                int(write.save_timepoint_ms),
                write.state,
            ])?,
        WriteCondition::CasEquals(expected) => transaction
            .prepare_cached(
                "UPDATE routes SET owner_node = ?4, route_version = ?5, save_timepoint_ms = ?6, \
                 cas_version = cas_version + 1, state = ?7 \
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

fn upsert_member(transaction: &Transaction, row: &MemberRow) -> Result<(), BackendError> {
    transaction
        .prepare_cached(
            "INSERT INTO members (node_id, addresses, core_count, actors, heartbeat_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (node_id) DO UPDATE SET \
             addresses = excluded.addresses, core_count = excluded.core_count, \
             actors = excluded.actors, heartbeat_ms = excluded.heartbeat_ms",
        )?
        .execute(params![
            int(row.node_id.0),
            membership::encode_addresses(&row.addresses),
            row.core_count,
            membership::encode_actors(&row.actors),
            int(row.heartbeat_ms),
        ])?;
    Ok(())
}

fn list_members(
    transaction: &Transaction,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Vec<MemberRow>, BackendError> {
    // Live means `now - heartbeat < ttl`, i.e. `heartbeat > now - ttl`.
    let oldest_dead = i128::from(now_ms) - i128::from(ttl_ms);
    let oldest_dead = i64::try_from(oldest_dead.max(-1)).unwrap_or(i64::MAX);
    let mut statement = transaction.prepare_cached(
        "SELECT node_id, addresses, core_count, actors, heartbeat_ms FROM members \
         WHERE heartbeat_ms > ?1 ORDER BY node_id LIMIT ?2",
    )?;
    let mut rows = statement.query(params![oldest_dead, MEMBERS_MAX as i64])?;
    let mut members = Vec::new();
    while let Some(row) = rows.next()? {
        let addresses: Vec<u8> = row.get(1)?;
        let actors: Vec<u8> = row.get(3)?;
        let member = MemberRow {
            node_id: NodeId(uint(row.get(0)?)),
            addresses: membership::decode_addresses(&addresses)
                .map_err(|error| BackendError::Corrupt(error.0))?,
            core_count: row.get(2)?,
            actors: membership::decode_actors(&actors)
                .map_err(|error| BackendError::Corrupt(error.0))?,
            heartbeat_ms: uint(row.get(4)?),
        };
        debug_assert!(member.is_live(now_ms, ttl_ms));
        members.push(member);
    }
    Ok(members)
}
