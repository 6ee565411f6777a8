//! The embedded SQLite backend: two connections on two store threads, one
//! a lane of the bridge: objects (`load`, `write_batch`) and membership
//! (`write_member`, `list_members`). WAL mode lets them run side by side,
//! so a heartbeat never waits behind object traffic.
//!
//! Group commit: the object thread takes every request already queued (up
//! to `batch_max` writes) and runs their writes in ONE `BEGIN IMMEDIATE`
//! transaction, answering them all after `COMMIT`; throughput then grows
//! with concurrency instead of paying one fsync per write. `BEGIN
//! IMMEDIATE` takes the file's write lock before the first read, so a CAS
//! read-check-write is atomic against other processes sharing the file.
//! One request's failure is its own: a request whose statements fail (a
//! record this version cannot read) is answered its error and the batch
//! runs again without it, each request in a savepoint, so one bad record
//! cannot stop the saves of every object that shares its batches.
//!
//! Reads (`load`, `poll_members`, `list_members`) run in a deferred transaction, which in
//! WAL mode is a read transaction: it never takes the write lock, so a
//! process frozen while it reads blocks nobody. The write lock is held for
//! one write transaction only. The two threads of one process take turns
//! at it through a [`WriteGate`] that lets a membership write go first.
//!
//! Timeouts: a request that is still queued at its deadline
//! (`request_timeout_ms` after it was sent) is answered as timed out without
//! running (a write answers `Indeterminate`), and `busy_timeout` bounds the
//! wait for another process's lock to the same duration. A transaction
//! already running is answered when it finishes, so a stalled disk can
//! delay an answer past the timeout; the answer is then exact.
//!
//! Checkpoints: no commit copies the WAL into the database file
//! (`wal_autocheckpoint = 0`), or a heartbeat would wait for the copy and
//! its sync at the gate. A third thread does, on a connection of its own,
//! outside the gate, once the WAL is long enough (`sqlite_checkpoint`).
//!
//! Integrity: opening a file runs `PRAGMA quick_check`, stopped after
//! `INTEGRITY_CHECK_MS_MAX`, before anything is written to it (WAL mode,
//! a schema migration); a file it finds damaged is refused untouched.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use wire::ObjectKey;

use super::api::Store;
use super::bridge::{Bridge, Done, Lanes, MemberLane, Op, Request};
use super::error::{BackendError, OpenError};
use super::record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
use super::sqlite_checkpoint::{self, Checkpoints, LaneHook};
use super::sqlite_file::OpenedFile;
use crate::config::{SqliteSynchronous, StoreConfig};

/// `PRAGMA quick_check` at open may run this long at most; past it the
/// check is stopped and the store opens (a big file would otherwise delay
/// every start by a full read of it). Damage it did not reach is reported
/// when an operation meets it.
pub const INTEGRITY_CHECK_MS_MAX: u64 = 2000;

/// Lines of `quick_check`'s report kept in the error that refuses a file.
const INTEGRITY_REPORT_LINES_MAX: usize = 8;

/// Whether the store thread groups queued requests into one transaction.
/// `Off` (one transaction per request) exists for the benchmark baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupCommit {
    /// Queued requests share one transaction.
    On,
    /// One transaction per request (the benchmark's baseline).
    Off,
}

/// Opens (creating if needed) the SQLite store at `path` and starts its
/// threads. Fails at once on a schema from another version, or on a file
/// the integrity check finds damaged.
pub fn open_sqlite(
    path: &Path,
    config: &StoreConfig,
    group_commit: GroupCommit,
) -> Result<Store, OpenError> {
    open_sqlite_lanes(path, config, group_commit, MemberLane::Own)
}

/// [`open_sqlite`] with membership on its own lane or, for a benchmark's
/// baseline, in the object queue.
pub fn open_sqlite_lanes(
    path: &Path,
    config: &StoreConfig,
    group_commit: GroupCommit,
    lane: MemberLane,
) -> Result<Store, OpenError> {
    open_store(path, config, group_commit, lane).map(|(store, _)| store)
}

/// [`open_sqlite_lanes`], with the store's checkpoints (which tests hold
/// back).
fn open_store(
    path: &Path,
    config: &StoreConfig,
    group_commit: GroupCommit,
    lane: MemberLane,
) -> Result<(Store, Arc<Checkpoints>), OpenError> {
    prepare(path, config)?;
    // Checked before anything is written to the file (WAL mode, a schema
    // migration): a damaged file is refused as it was found.
    let mut connection = connect(path, config)?;
    check_integrity(
        &connection,
        path,
        Duration::from_millis(INTEGRITY_CHECK_MS_MAX),
    )?;
    set_up(&mut connection, path, config)?;
    let members_connection = open_connection(path, config)?;
    let file = Arc::new(OpenedFile::at(path).map_err(|error| OpenError::Sqlite {
        path: path.to_path_buf(),
        source: rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(error.to_string()),
        ),
    })?);
    let (bridge, lanes) = Bridge::new(
        config.queue_max,
        Duration::from_millis(config.request_timeout_ms),
        lane,
    );
    let Lanes { objects, members } = lanes;
    let gate = Arc::new(WriteGate::default());
    let checkpoints = Arc::new(Checkpoints::default());
    let batch_max = match group_commit {
        GroupCommit::On => config.batch_max,
        GroupCommit::Off => 1,
    };
    let worker = |connection, lane, batch_max| {
        Worker::new(connection, lane, batch_max, &gate, &file, &checkpoints).map_err(|source| {
            OpenError::Sqlite {
                path: path.to_path_buf(),
                source,
            }
        })
    };
    let objects_worker = worker(connection, Lane::Objects, batch_max)?;
    // One membership operation a transaction: a heartbeat is never part of
    // another request's commit, and never waits for one.
    let members_worker = worker(members_connection, Lane::Members, 1)?;
    // Its own connection: a checkpoint runs beside the lanes' commits.
    sqlite_checkpoint::spawn(checkpoints.clone(), open_connection(path, config)?)
        .map_err(OpenError::Thread)?;
    std::thread::Builder::new()
        .name("store-sqlite".to_string())
        .spawn(move || objects_worker.run(objects))
        .map_err(OpenError::Thread)?;
    std::thread::Builder::new()
        .name("store-sqlite-members".to_string())
        .spawn(move || members_worker.run(members))
        .map_err(OpenError::Thread)?;
    Ok((Store::from_backend(Arc::new(bridge), config), checkpoints))
}

/// Creates the file's folder, and warns of a `synchronous` that may lose
/// acknowledged writes.
fn prepare(path: &Path, config: &StoreConfig) -> Result<(), OpenError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| OpenError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    if config.synchronous == SqliteSynchronous::Normal {
        tracing::warn!(
            path = %path.display(),
            "store.synchronous = \"normal\": a crash of the machine or its power may lose the \
             last acknowledged writes, on_write ones included (\"full\" keeps them)"
        );
    }
    Ok(())
}

/// Runs `PRAGMA quick_check` on `connection`, stopping it after `limit`.
/// A damaged file is refused with SQLite's first lines about it; a check
/// stopped by the limit is logged and the file accepted.
fn check_integrity(connection: &Connection, path: &Path, limit: Duration) -> Result<(), OpenError> {
    let interrupt = connection.get_interrupt_handle();
    let (done, stopped) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::Builder::new()
        .name("store-sqlite-check".to_string())
        .spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
                interrupt.interrupt();
            }
        })
        .map_err(OpenError::Thread)?;
    let started = Instant::now();
    let report = quick_check(connection);
    drop(done);
    // The watchdog ends as soon as `done` is dropped.
    drop(watchdog.join());
    match report {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => Ok(()),
        Ok(lines) => Err(OpenError::Corrupt {
            path: path.to_path_buf(),
            report: lines.join("; "),
        }),
        Err(rusqlite::Error::SqliteFailure(error, _))
            if error.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            tracing::warn!(
                path = %path.display(),
                limit_ms = limit.as_millis() as u64,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "store integrity check stopped at its time limit; damage past what it read \
                 is reported when an operation meets it"
            );
            Ok(())
        }
        Err(source) if super::error::is_corruption(&source) => Err(OpenError::Corrupt {
            path: path.to_path_buf(),
            report: source.to_string(),
        }),
        Err(source) => Err(OpenError::Sqlite {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The first lines of `quick_check`'s report (`ok` alone when sound).
fn quick_check(connection: &Connection) -> Result<Vec<String>, rusqlite::Error> {
    let mut statement =
        connection.prepare(&format!("PRAGMA quick_check({INTEGRITY_REPORT_LINES_MAX})"))?;
    let mut rows = statement.query([])?;
    let mut lines = Vec::new();
    while let Some(row) = rows.next()? {
        lines.push(row.get::<_, String>(0)?);
    }
    Ok(lines)
}

/// A connection to the store file at `path`, set up and its schema made
/// or migrated.
fn open_connection(path: &Path, config: &StoreConfig) -> Result<Connection, OpenError> {
    let mut connection = connect(path, config)?;
    set_up(&mut connection, path, config)?;
    Ok(connection)
}

/// A connection to the file at `path` (created if there is none) that
/// has written nothing to it.
fn connect(path: &Path, config: &StoreConfig) -> Result<Connection, OpenError> {
    let sqlite = |source| OpenError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let connection = Connection::open(path).map_err(sqlite)?;
    connection
        .busy_timeout(Duration::from_millis(config.request_timeout_ms))
        .map_err(sqlite)?;
    Ok(connection)
}

/// Puts `connection` in WAL mode with the store's settings, and makes or
/// migrates the schema.
fn set_up(connection: &mut Connection, path: &Path, config: &StoreConfig) -> Result<(), OpenError> {
    let sqlite = |source| OpenError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
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
    // No checkpoint inside a commit: it would copy the WAL into the file
    // and sync it while the committing lane holds the write gate, with a
    // heartbeat waiting behind it. The checkpointer runs them
    // (`sqlite_checkpoint`). Before the lanes' WAL hooks, which this
    // pragma would replace.
    connection
        .pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(sqlite)?;
    ensure_schema(connection, path)
}

/// How the two connections of one store take turns at SQLite's write
/// lock. Within one process they would otherwise meet in `busy_timeout`,
/// whose back-off sleeps up to 100 ms between attempts while the object
/// thread, committing back to back, takes the lock again: a heartbeat
/// could starve. The gate serialises them, and the object thread steps
/// aside while a membership write waits for it.
#[derive(Default)]
struct WriteGate {
    lock: Mutex<()>,
    members_waiting: AtomicBool,
}

/// Which lane a worker serves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    Objects,
    Members,
}

struct Worker {
    connection: Connection,
    /// Writes one transaction carries at most (1 without group commit).
    batch_max: usize,
    gate: Arc<WriteGate>,
    lane: Lane,
    /// Checked before each write transaction (`sqlite_file`).
    file: Arc<OpenedFile>,
    /// Tells the checkpointer of each commit; dropped with the worker, it
    /// tells it the lane has ended.
    checkpoints: LaneHook,
}

impl Worker {
    /// A worker for `lane` on `connection`, its commits hooked to
    /// `checkpoints`.
    fn new(
        mut connection: Connection,
        lane: Lane,
        batch_max: usize,
        gate: &Arc<WriteGate>,
        file: &Arc<OpenedFile>,
        checkpoints: &Arc<Checkpoints>,
    ) -> Result<Worker, rusqlite::Error> {
        let hook = checkpoints.hook(&mut connection)?;
        Ok(Worker {
            connection,
            batch_max,
            gate: gate.clone(),
            lane,
            file: file.clone(),
            checkpoints: hook,
        })
    }

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
            let mut reads = Vec::new();
            let mut writes = Vec::with_capacity(batch.len());
            for request in batch.drain(..) {
                if request.deadline <= now {
                    request.expire();
                } else if request.op.is_read() {
                    reads.push(request);
                } else {
                    writes.push(request);
                }
            }
            if !reads.is_empty() {
                match self.read(&reads) {
                    Ok(done) => answer_each(reads, done),
                    Err(error) => answer_all(reads, &error),
                }
            }
            if !writes.is_empty() {
                match self.write(&writes) {
                    Err(Written::AtCommit(error)) => answer_unknown(writes, &error),
                    Err(Written::RolledBack(error)) => answer_all(writes, &error),
                    Ok(done) => answer_each(writes, done),
                }
            }
        }
    }

    /// Runs read requests in one read transaction, which in WAL mode never
    /// takes the write lock. Each read answers for itself: a record this
    /// version cannot read fails the load of that record only.
    fn read(&mut self, requests: &[Request]) -> Result<Vec<Answer>, BackendError> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Deferred)?;
        let done = requests
            .iter()
            .map(|request| read_one(&transaction, &request.op))
            .collect();
        transaction.commit()?;
        Ok(done)
    }

    /// Runs write requests in one write transaction; every answer waits
    /// for COMMIT.
    fn write(&mut self, requests: &[Request]) -> Result<Vec<Answer>, Written> {
        let checkpoints = &self.checkpoints;
        // Outside the gate: a checkpoint's catch-up holds back this lane
        // only, never a heartbeat.
        let _catch_up = (self.lane == Lane::Objects).then(|| checkpoints.write_turn());
        let gate = self.gate.clone();
        if self.lane == Lane::Members {
            gate.members_waiting.store(true, Ordering::Release);
        } else {
            // A membership write waits for the lock: let it have the next
            // turn. It holds the flag only until it has the lock, which the
            // object thread does not hold here, so this ends at once.
            while gate.members_waiting.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
        // A panic inside a transaction leaves nothing behind the lock.
        let _turn = gate
            .lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.lane == Lane::Members {
            gate.members_waiting.store(false, Ordering::Release);
        }
        self.file.check().map_err(Written::RolledBack)?;
        let mut transaction = begin_write(&mut self.connection)?;
        let done = match write_all(&transaction, requests) {
            Ok(done) => done.into_iter().map(Ok).collect(),
            // One request's statements failed (a record this version cannot
            // read, a constraint): the others must not fail with it, or one
            // bad record would stop every save its batches carry, at every
            // retry. The batch runs again, each request in a savepoint of
            // its own; the first pass stays free of savepoints.
            Err(_) if requests.len() > 1 => {
                drop(transaction);
                transaction = begin_write(&mut self.connection)?;
                write_each(&transaction, requests).map_err(Written::RolledBack)?
            }
            Err(error) => return Err(Written::RolledBack(error)),
        };
        transaction
            .commit()
            .map_err(|error| Written::AtCommit(error.into()))?;
        Ok(done)
    }
}

/// Starts a write transaction, taking the file's write lock.
fn begin_write(connection: &mut Connection) -> Result<Transaction<'_>, Written> {
    connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|error| Written::RolledBack(error.into()))
}

/// One request's answer within a batch.
type Answer = Result<Done, BackendError>;

/// Runs one read request in `transaction`.
fn read_one(transaction: &Transaction, op: &Op) -> Answer {
    Ok(match op {
        Op::Load(key) => Done::Load(load(transaction, *key)?),
        Op::PollMembers(nodes) => Done::Poll(poll_members(transaction, nodes)?),
        Op::ListMembers { since, after } => Done::List(list_members(transaction, *since, *after)?),
        Op::Write(_) | Op::WriteMember(_) | Op::DeleteMember(..) => {
            return Err(BackendError::Corrupt("a write among the reads"))
        }
    })
}

/// Runs the statements of write requests in `transaction`, before its
/// COMMIT: an error here rolls the whole transaction back.
fn write_all(transaction: &Transaction, requests: &[Request]) -> Result<Vec<Done>, BackendError> {
    requests
        .iter()
        .map(|request| write_request(transaction, &request.op))
        .collect()
}

/// Runs each write request in `transaction` inside a savepoint of its own:
/// a request whose statements fail is rolled back to its savepoint and
/// answers its error, and the others go on. An error that ended the whole
/// transaction (SQLite rolls back by itself on some I/O, full-disk and
/// memory errors) fails them all: what ran before it is gone too.
fn write_each(
    transaction: &Transaction,
    requests: &[Request],
) -> Result<Vec<Answer>, BackendError> {
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        transaction.execute_batch("SAVEPOINT request")?;
        let answer = write_request(transaction, &request.op);
        if let Err(error) = &answer {
            if transaction.is_autocommit() {
                return Err(error.clone());
            }
            transaction.execute_batch("ROLLBACK TO request")?;
        }
        transaction.execute_batch("RELEASE request")?;
        answers.push(answer);
    }
    Ok(answers)
}

/// Runs the statements of one write request in `transaction`.
fn write_request(transaction: &Transaction, op: &Op) -> Result<Done, BackendError> {
    Ok(match op {
        Op::Write(writes) => Done::Write(
            writes
                .iter()
                .map(|write| write_one(transaction, write))
                .collect::<Result<_, _>>()?,
        ),
        Op::WriteMember(write) => Done::WriteMember(write_member(transaction, write)?),
        Op::DeleteMember(node_id, expected) => {
            Done::WriteMember(delete_member(transaction, *node_id, *expected)?)
        }
        Op::Load(_) | Op::PollMembers(_) | Op::ListMembers { .. } => {
            return Err(BackendError::Corrupt("a read among the writes"))
        }
    })
}

/// Why a write transaction gave no answers.
enum Written {
    /// Before its COMMIT: nothing in it happened.
    RolledBack(BackendError),
    /// At its COMMIT (a failed sync, a disk full as the WAL index grew):
    /// its frames may be in the WAL with their commit mark, and come back
    /// at the next open, so whether it happened is unknown.
    AtCommit(BackendError),
}

/// Answers each write of a transaction whose COMMIT failed as of unknown
/// outcome: read as "did not happen", a retry's compare-and-set could meet
/// the transaction's own write and take it for another node's.
fn answer_unknown(requests: Vec<Request>, error: &BackendError) {
    tracing::warn!(%error, "a SQLite commit failed: its writes' outcome is unknown");
    for request in requests {
        match request.op.indeterminate() {
            Some(unknown) => request.answer(Ok(unknown)),
            None => request.answer(Err(error.clone())),
        }
    }
}

/// Answers each request with its own result.
fn answer_each(requests: Vec<Request>, answers: Vec<Answer>) {
    debug_assert_eq!(answers.len(), requests.len());
    for (request, answer) in requests.into_iter().zip(answers) {
        request.answer(answer);
    }
}

/// Answers every request with the error of a rolled-back transaction.
fn answer_all(requests: Vec<Request>, error: &BackendError) {
    for request in requests {
        request.answer(Err(error.clone()));
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

#[path = "sqlite_members.rs"]
mod members;
use members::{delete_member, list_members, poll_members, write_member};

#[path = "sqlite_schema.rs"]
mod schema;
use schema::ensure_schema;
pub use schema::SCHEMA_VERSION;

#[cfg(test)]
#[path = "sqlite_tests.rs"]
mod tests;
