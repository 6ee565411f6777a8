//! The ScyllaDB backend: ownership CAS as lightweight transactions.
//!
//! The driver runs on its own tokio runtime (a dispatcher thread a lane,
//! objects and membership, feeding a one-worker runtime), fed by the same
//! bridge as SQLite. Statement text and
//! result mapping are pure functions (`scylla_cql.rs`), unit-tested without
//! a cluster; the membership lane's part is in `scylla_members.rs`.
//!
//! Writes: `INSERT ... IF NOT EXISTS` and `UPDATE ... IF cas_version = ?`.
//! The LWT result row carries `[applied]` and, when not applied, the current
//! columns (Scylla returns the whole row; Cassandra only the condition
//! columns, in which case a SERIAL read fetches the record). A timeout, or
//! an error after which the write may have reached a replica, answers
//! `Indeterminate`. A batch runs its writes in order; after a failed write
//! the rest are not attempted and are reported `Indeterminate`, unless the
//! very first write fails, which fails the batch with nothing applied.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{CqlValue, Row};
use wire::ObjectKey;

use super::api::Store;
use super::bridge::{Bridge, Done, Lanes, MemberLane, Op, Request};
use super::error::{BackendError, OpenError};
use super::membership::{
    self, MemberCondition, MemberOutcome, MemberRow, MemberVersion, MemberWrite,
};
use super::record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
use crate::config::StoreConfig;

/// Connecting and creating the schema may take this long at most: schema
/// agreement across a cluster is slow, but startup must not hang forever.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects to `config.nodes`, creates the keyspace and tables if absent,
/// and starts the driver thread. Blocks the caller until connected.
pub fn open_scylla(config: &StoreConfig) -> Result<Store, OpenError> {
    validate_keyspace(&config.keyspace)?;
    if config.nodes.is_empty() {
        return Err(OpenError::Config("store.nodes is empty"));
    }
    let (bridge, lanes) = Bridge::new(
        config.queue_max,
        Duration::from_millis(config.request_timeout_ms),
        MemberLane::Own,
    );
    let (ready_sender, ready_receiver) = std::sync::mpsc::sync_channel(1);
    let thread_config = config.clone();
    std::thread::Builder::new()
        .name("store-scylla".to_string())
        .spawn(move || driver_thread(thread_config, lanes, ready_sender))
        .map_err(OpenError::Thread)?;
    match ready_receiver.recv() {
        Ok(Ok(())) => Ok(Store::from_backend(Arc::new(bridge), config)),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(OpenError::Scylla("the driver thread stopped".to_string())),
    }
}

fn driver_thread(
    config: StoreConfig,
    lanes: Lanes,
    ready: std::sync::mpsc::SyncSender<Result<(), OpenError>>,
) {
    let Some(runtime) = crate::store::bridge::driver_runtime("store-scylla-rt", &ready) else {
        return;
    };
    let connected = runtime.block_on(async {
        match tokio::time::timeout(OPEN_TIMEOUT, Statements::connect(&config)).await {
            Ok(result) => result,
            Err(_) => Err(OpenError::Scylla(format!(
                "no connection and schema within {}s",
                OPEN_TIMEOUT.as_secs()
            ))),
        }
    });
    let statements = match connected {
        Ok(statements) => Arc::new(statements),
        Err(error) => {
            drop(ready.send(Err(error)));
            return;
        }
    };
    drop(ready.send(Ok(())));
    let Lanes { objects, members } = lanes;
    // The membership lane has its own dispatcher and in-flight bound, so a
    // heartbeat never waits for an object request's permit. Both share
    // the session: the driver keeps a connection per shard of each node
    // and multiplexes requests on it, so no request waits for another's
    // answer there.
    let members_handle = runtime.handle().clone();
    let members_statements = statements.clone();
    let members_thread = std::thread::Builder::new()
        .name("store-scylla-members".to_string())
        .spawn(move || {
            dispatch(
                &members_handle,
                &members_statements,
                &members,
                MEMBER_INFLIGHT_MAX,
            )
        });
    // In-flight requests are bounded like a group commit: past `batch_max`
    // the dispatcher waits, the bridge queue fills, and callers see
    // Overloaded instead of piling tasks onto the runtime.
    dispatch(
        runtime.handle(),
        &statements,
        &objects,
        config.batch_max.max(1),
    );
    match members_thread {
        Ok(thread) => drop(thread.join()),
        Err(error) => tracing::error!(%error, "cannot start the scylla membership thread"),
    }
}

/// Membership requests in flight at once on Scylla: a heartbeat, a poll,
/// a listing page, a declaration of each of the watched peers
/// (`cluster::membership::WATCHED_PER_NODE` = 3) and a deletion.
const MEMBER_INFLIGHT_MAX: usize = 7;

/// Serves `receiver` until every `Store` handle is gone, at most
/// `inflight_max` requests at once.
fn dispatch(
    runtime: &tokio::runtime::Handle,
    statements: &Arc<Statements>,
    receiver: &Receiver<Request>,
    inflight_max: usize,
) {
    let inflight = Arc::new(tokio::sync::Semaphore::new(inflight_max));
    while let Ok(request) = receiver.recv() {
        let Ok(permit) = runtime.block_on(inflight.clone().acquire_owned()) else {
            request.answer(Err(BackendError::Corrupt("scylla in-flight limit closed")));
            continue;
        };
        let statements = statements.clone();
        runtime.spawn(async move {
            statements.serve(request).await;
            drop(permit);
        });
    }
}

/// The session and its prepared statements.
struct Statements {
    session: Session,
    keyspace: String,
    insert_if_absent: PreparedStatement,
    update_if_cas: PreparedStatement,
    select_record: PreparedStatement,
    init_version: PreparedStatement,
    select_version: PreparedStatement,
    select_member: PreparedStatement,
    select_members: PreparedStatement,
    list_members: PreparedStatement,
    heartbeat_member: PreparedStatement,
    insert_member: PreparedStatement,
    update_member: PreparedStatement,
    bump_version: PreparedStatement,
}

fn scylla_error(error: impl std::error::Error + Send + Sync + 'static) -> BackendError {
    BackendError::Scylla(Arc::new(error))
}

impl Statements {
    async fn connect(config: &StoreConfig) -> Result<Statements, OpenError> {
        let open = |error: &dyn std::fmt::Display| OpenError::Scylla(error.to_string());
        let session = SessionBuilder::new()
            .known_nodes(&config.nodes)
            .build()
            .await
            .map_err(|e| open(&e))?;
        create_keyspace(&session, &config.keyspace, config.replication_factor).await?;
        for statement in table_statements(&config.keyspace) {
            session
                .query_unpaged(statement, ())
                .await
                .map_err(|e| open(&e))?;
        }
        add_timers_column(&session, &config.keyspace).await?;
        session
            .await_schema_agreement()
            .await
            .map_err(|e| open(&e))?;
        warn_if_tablets(&session, &config.keyspace).await;
        let mut prepared = Vec::with_capacity(STATEMENT_COUNT);
        for spec in statement_specs(&config.keyspace) {
            let mut statement = session.prepare(spec.cql).await.map_err(|e| open(&e))?;
            statement.set_consistency(spec.consistency);
            statement.set_serial_consistency(spec.serial_consistency);
            prepared.push(statement);
        }
        let Ok(
            [insert_if_absent, update_if_cas, select_record, init_version, select_version, select_member, select_members, list_members, heartbeat_member, insert_member, update_member, bump_version],
        ) = <[PreparedStatement; STATEMENT_COUNT]>::try_from(prepared)
        else {
            return Err(OpenError::Scylla(
                "a statement was not prepared".to_string(),
            ));
        };
        let statements = Statements {
            session,
            keyspace: config.keyspace.clone(),
            insert_if_absent,
            update_if_cas,
            select_record,
            init_version,
            select_version,
            select_member,
            select_members,
            list_members,
            heartbeat_member,
            insert_member,
            update_member,
            bump_version,
        };
        statements.migrate_members().await.map_err(|e| open(&e))?;
        Ok(statements)
    }

    async fn serve(&self, request: Request) {
        let Some(remaining) = request.deadline.checked_duration_since(Instant::now()) else {
            request.expire();
            return;
        };
        let result = match &request.op {
            Op::Write(writes) => Ok(self
                .write_batch(writes, request.deadline)
                .await
                .map(Done::Write)),
            Op::Load(key) => tokio::time::timeout(remaining, self.load(*key))
                .await
                .map(|result| result.map(Done::Load)),
            Op::WriteMember(write) => tokio::time::timeout(remaining, self.write_member(write))
                .await
                .map(|result| result.map(Done::WriteMember)),
            Op::DeleteMember(node, expected) => {
                tokio::time::timeout(remaining, self.delete_member(*node, *expected))
                    .await
                    .map(|result| result.map(Done::WriteMember))
            }
            Op::PollMembers(nodes) => tokio::time::timeout(remaining, self.poll_members(nodes))
                .await
                .map(|result| result.map(Done::Poll)),
            Op::ListMembers { since, after } => {
                tokio::time::timeout(remaining, self.list_members(*since, *after))
                    .await
                    .map(|result| result.map(Done::List))
            }
        };
        match result {
            Ok(result) => request.answer(result),
            Err(_elapsed) => request.expire(),
        }
    }

    async fn load(&self, key: ObjectKey) -> Result<Option<RouteRecord>, BackendError> {
        let result = self
            .session
            .execute_unpaged(&self.select_record, key_values(key))
            .await
            .map_err(scylla_error)?
            .into_rows_result()
            .map_err(scylla_error)?;
        let mut rows = result
            .rows::<(i64, i64, i64, i64, Option<Vec<u8>>, Option<i64>)>()
            .map_err(scylla_error)?;
        match rows.next() {
            None => Ok(None),
            Some(row) => {
                let (owner, route, saved, cas, state, incarnation) = row.map_err(scylla_error)?;
                Ok(Some(RouteRecord {
                    key,
                    owner_node: NodeId(owner as u64),
                    owner_incarnation: incarnation.unwrap_or(0) as u64,
                    route_version: RouteVersion(route as u64),
                    save_timepoint_ms: saved as u64,
                    cas_version: CasVersion(cas as u64),
                    state: state.unwrap_or_default(),
                }))
            }
        }
    }

    async fn write_batch(
        &self,
        writes: &[RecordWrite],
        deadline: Instant,
    ) -> Result<Vec<WriteOutcome>, BackendError> {
        let mut outcomes = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
            let Some(remaining) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            match tokio::time::timeout(remaining, self.write_one(write)).await {
                Ok(Ok(outcome)) => outcomes.push(outcome),
                Ok(Err(WriteFailure::Indeterminate)) | Err(_) => {
                    outcomes.push(WriteOutcome::Indeterminate);
                    break;
                }
                Ok(Err(WriteFailure::NotApplied(error))) if index == 0 => return Err(error),
                Ok(Err(WriteFailure::NotApplied(_))) => break,
            }
        }
        // Writes not attempted (deadline, or after a failure) are unknown
        // to the caller, who must re-read them.
        outcomes.resize(writes.len(), WriteOutcome::Indeterminate);
        Ok(outcomes)
    }

    async fn write_one(&self, write: &RecordWrite) -> Result<WriteOutcome, WriteFailure> {
        let key = write.key;
        let result = match write.condition {
            WriteCondition::Absent => {
                let values = (
                    key.type_id as i32,
                    key.zone_id as i32,
                    key.object_id as i64,
                    write.owner_node.0 as i64,
                    write.route_version.0 as i64,
                    write.save_timepoint_ms as i64,
                    &write.state,
                    write.owner_incarnation as i64,
                );
                self.session
                    .execute_unpaged(&self.insert_if_absent, values)
                    .await
            }
            WriteCondition::CasEquals(expected) => {
                let values = (
                    write.owner_node.0 as i64,
                    write.route_version.0 as i64,
                    write.save_timepoint_ms as i64,
                    expected.0.wrapping_add(1) as i64,
                    &write.state,
                    write.owner_incarnation as i64,
                    key.type_id as i32,
                    key.zone_id as i32,
                    key.object_id as i64,
                    expected.0 as i64,
                );
                self.session
                    .execute_unpaged(&self.update_if_cas, values)
                    .await
            }
        };
        let result = result.map_err(WriteFailure::from_execution)?;
        let rows = result
            .into_rows_result()
            .map_err(|e| WriteFailure::Indeterminate.logged(&e))?;
        let columns: Vec<String> = rows
            .column_specs()
            .iter()
            .map(|spec| spec.name().to_string())
            .collect();
        let row = rows
            .maybe_first_row::<Row>()
            .map_err(|e| WriteFailure::Indeterminate.logged(&e))?
            .ok_or(WriteFailure::Indeterminate)?;
        match map_lwt_row(&columns, &row.columns, write) {
            Ok(LwtResult::Done(outcome)) => Ok(outcome),
            Ok(LwtResult::ConflictNeedsRead) => match self.load(key).await {
                Ok(current) => Ok(WriteOutcome::Conflict(current)),
                // The write was refused; only the current record is unknown.
                Err(error) => Err(WriteFailure::NotApplied(error)),
            },
            Err(error) => Err(WriteFailure::NotApplied(error)),
        }
    }
}

fn key_values(key: ObjectKey) -> (i32, i32, i64) {
    // CQL has no unsigned integers: u32/u64 are stored bit for bit.
    (key.type_id as i32, key.zone_id as i32, key.object_id as i64)
}

/// Why a conditional write did not produce an outcome.
enum WriteFailure {
    /// It may have been applied.
    Indeterminate,
    /// It was certainly not applied.
    NotApplied(BackendError),
}

impl WriteFailure {
    fn from_execution(error: ExecutionError) -> WriteFailure {
        if write_error_is_indeterminate(&error) {
            WriteFailure::Indeterminate
        } else {
            WriteFailure::NotApplied(scylla_error(error))
        }
    }

    fn logged(self, error: &dyn std::fmt::Display) -> WriteFailure {
        tracing::warn!(%error, "scylla LWT answer unreadable; write outcome unknown");
        self
    }
}

/// Whether a failed write may still have been applied. Errors raised
/// before the request reached a coordinator, and refusals like
/// `Unavailable`, prove it was not; timeouts and broken connections do not.
pub(crate) fn write_error_is_indeterminate(error: &ExecutionError) -> bool {
    match error {
        ExecutionError::RequestTimeout(_) => true,
        ExecutionError::LastAttemptError(attempt) => match attempt {
            RequestAttemptError::DbError(db, _) => matches!(
                db,
                DbError::WriteTimeout { .. }
                    | DbError::ReadTimeout { .. }
                    | DbError::WriteFailure { .. }
                    | DbError::ServerError
                    | DbError::Other(_)
            ),
            RequestAttemptError::BrokenConnectionError(_) => true,
            RequestAttemptError::SerializationError(_)
            | RequestAttemptError::CqlRequestSerialization(_)
            | RequestAttemptError::UnableToAllocStreamId => false,
            // Anything else happened after the request was sent.
            _ => true,
        },
        _ => false,
    }
}

#[path = "scylla_cql.rs"]
mod cql;
#[path = "scylla_members.rs"]
mod members;
use self::cql::{
    add_timers_column, create_keyspace, map_lwt_row, statement_specs, table_statements,
    validate_keyspace, warn_if_tablets, LwtResult, STATEMENT_COUNT,
};

#[cfg(test)]
#[path = "scylla_tests.rs"]
mod tests;
