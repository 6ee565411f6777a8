//! The ScyllaDB backend: ownership CAS as lightweight transactions.
//!
//! The driver runs on its own tokio runtime (a dispatcher thread a lane,
//! objects and membership, feeding a one-worker runtime), fed by the same
//! bridge as SQLite. Statement text and
//! result mapping are pure functions below, unit-tested without a cluster.
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
    self, MemberCondition, MemberOutcome, MemberRow, MemberVersion, MemberWrite, MEMBERS_MAX,
};
use super::record::{
    CasVersion, NodeId, RecordWrite, RouteRecord, RouteVersion, WriteCondition, WriteOutcome,
};
use crate::config::StoreConfig;

/// Connecting and creating the schema may take this long at most: schema
/// agreement across a cluster is slow, but startup must not hang forever.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest keyspace name CQL accepts.
const KEYSPACE_LEN_MAX: usize = 48;

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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("store-scylla-rt")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            drop(ready.send(Err(OpenError::Thread(error))));
            return;
        }
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

/// Membership requests in flight at once on Scylla: a heartbeat, a list
/// and a state change.
const MEMBER_INFLIGHT_MAX: usize = 4;

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
    insert_if_absent: PreparedStatement,
    update_if_cas: PreparedStatement,
    select_record: PreparedStatement,
    insert_member: PreparedStatement,
    update_member: PreparedStatement,
    select_member: PreparedStatement,
    list_members: PreparedStatement,
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
            [insert_if_absent, update_if_cas, select_record, insert_member, update_member, select_member, list_members],
        ) = <[PreparedStatement; STATEMENT_COUNT]>::try_from(prepared)
        else {
            return Err(OpenError::Scylla(
                "a statement was not prepared".to_string(),
            ));
        };
        Ok(Statements {
            session,
            insert_if_absent,
            update_if_cas,
            select_record,
            insert_member,
            update_member,
            select_member,
            list_members,
        })
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
            Op::ListMembers => tokio::time::timeout(remaining, self.list_members())
                .await
                .map(|result| result.map(Done::List)),
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

    async fn write_member(&self, write: &MemberWrite) -> Result<MemberOutcome, BackendError> {
        let row = &write.row;
        let next = write.next_version();
        let fields = (
            row.incarnation as i64,
            row.state as i32,
            row.heartbeat as i64,
            row.gateway.as_str(),
            row.admin.as_str(),
            membership::encode_addresses(&row.cluster),
            row.core_count as i32,
            membership::encode_actors(&row.actors),
            next.0 as i64,
        );
        let result = match write.condition {
            MemberCondition::Absent => {
                let values = (row.node_id.0 as i64, fields);
                self.session
                    .execute_unpaged(&self.insert_member, values)
                    .await
            }
            MemberCondition::VersionEquals(expected) => {
                let values = (fields, row.node_id.0 as i64, expected.0 as i64);
                self.session
                    .execute_unpaged(&self.update_member, values)
                    .await
            }
        };
        let result = match result {
            Ok(result) => result,
            Err(error) if write_error_is_indeterminate(&error) => {
                return Ok(MemberOutcome::Indeterminate)
            }
            Err(error) => return Err(scylla_error(error)),
        };
        let applied = result
            .into_rows_result()
            .map_err(scylla_error)?
            .maybe_first_row::<Row>()
            .map_err(scylla_error)?
            .and_then(|row| row.columns.into_iter().next().flatten())
            .and_then(|value| value.as_boolean());
        match applied {
            Some(true) => Ok(MemberOutcome::Applied(next)),
            // The LWT row's other columns differ between Scylla and
            // Cassandra: read the row that refused the write instead.
            Some(false) => Ok(MemberOutcome::Conflict(
                self.select_members(&self.select_member, (row.node_id.0 as i64,))
                    .await?
                    .pop(),
            )),
            None => Err(BackendError::Corrupt("LWT result without [applied]")),
        }
    }

    async fn list_members(&self) -> Result<Vec<MemberRow>, BackendError> {
        let mut members = self.select_members(&self.list_members, ()).await?;
        members.sort_by_key(|member| member.node_id);
        members.truncate(MEMBERS_MAX);
        Ok(members)
    }

    async fn select_members(
        &self,
        statement: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> Result<Vec<MemberRow>, BackendError> {
        let result = self
            .session
            .execute_unpaged(statement, values)
            .await
            .map_err(scylla_error)?
            .into_rows_result()
            .map_err(scylla_error)?;
        let mut members = Vec::new();
        type Columns = (
            i64,
            i64,
            i32,
            i64,
            String,
            String,
            Vec<u8>,
            i32,
            Vec<u8>,
            i64,
        );
        for row in result.rows::<Columns>().map_err(scylla_error)? {
            let (
                node_id,
                incarnation,
                state,
                heartbeat,
                gateway,
                admin,
                cluster,
                cores,
                actors,
                version,
            ) = row.map_err(scylla_error)?;
            let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
            members.push(MemberRow {
                node_id: NodeId(node_id as u64),
                incarnation: incarnation as u64,
                state: membership::decode_state(i64::from(state)).map_err(corrupt)?,
                heartbeat: heartbeat as u64,
                gateway,
                admin,
                cluster: membership::decode_addresses(&cluster).map_err(corrupt)?,
                core_count: u32::try_from(cores)
                    .map_err(|_| BackendError::Corrupt("negative core_count"))?,
                actors: membership::decode_actors(&actors).map_err(corrupt)?,
                version: MemberVersion(version as u64),
            });
        }
        Ok(members)
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

/// Keyspace names go into statement text, so only CQL identifiers pass.
pub(crate) fn validate_keyspace(keyspace: &str) -> Result<(), OpenError> {
    let mut chars = keyspace.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok
        || keyspace.len() > KEYSPACE_LEN_MAX
        || !keyspace
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(OpenError::Config(
            "store.keyspace must be a letter then letters, digits or '_', at most 48",
        ));
    }
    Ok(())
}

/// Whether `CREATE KEYSPACE` says `tablets = {'enabled': false}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tablets {
    Disabled,
    /// Left to the server: for a server that does not know the option
    /// (Cassandra, ScyllaDB before tablets), which has no tablets anyway.
    Unspecified,
}

/// The keyspace statement. ScyllaDB 2025.1 and later create a keyspace
/// with tablets unless told otherwise, and document lightweight
/// transactions as unsupported on a tablet keyspace: every routerd write
/// is one, so the keyspace asks for vnodes.
pub(crate) fn create_keyspace_cql(
    keyspace: &str,
    replication_factor: u32,
    tablets: Tablets,
) -> String {
    let mut cql = format!(
        "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
         {{'class': 'NetworkTopologyStrategy', 'replication_factor': {}}}",
        replication_factor.max(1)
    );
    if tablets == Tablets::Disabled {
        cql.push_str(" AND tablets = {'enabled': false}");
    }
    cql
}

pub(crate) fn table_statements(keyspace: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.routes (type_id int, zone_id int, \
             object_id bigint, owner_node bigint, route_version bigint, \
             save_timepoint_ms bigint, cas_version bigint, state blob, \
             owner_incarnation bigint, PRIMARY KEY ((type_id, zone_id, object_id)))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.members (node_id bigint PRIMARY KEY, \
             incarnation bigint, state int, heartbeat bigint, gateway text, admin text, \
             cluster blob, core_count int, actors blob, version bigint)"
        ),
    ]
}

/// Creates the keyspace with tablets disabled, or, when the server refuses
/// the option as unknown (a server without tablets: the option is a
/// syntax or configuration error there), without it. Deciding by the
/// server's answer rather than its version string holds for ScyllaDB and
/// Cassandra alike, and for versions not yet released; a refusal for
/// another reason comes back again from the second statement, and is
/// reported.
async fn create_keyspace(
    session: &Session,
    keyspace: &str,
    replication_factor: u32,
) -> Result<(), OpenError> {
    let open = |error: &dyn std::fmt::Display| OpenError::Scylla(error.to_string());
    let disabled = create_keyspace_cql(keyspace, replication_factor, Tablets::Disabled);
    match session.query_unpaged(disabled, ()).await {
        Ok(_) => Ok(()),
        Err(error) if refuses_an_option(&error) => {
            tracing::info!(%error, "the store server does not know the tablets option: \
                creating the keyspace without it");
            let plain = create_keyspace_cql(keyspace, replication_factor, Tablets::Unspecified);
            session
                .query_unpaged(plain, ())
                .await
                .map(drop)
                .map_err(|e| open(&e))
        }
        Err(error) => Err(open(&error)),
    }
}

/// Whether the server refused a statement's text or options (as opposed to
/// failing to run it).
pub(crate) fn refuses_an_option(error: &ExecutionError) -> bool {
    matches!(
        error,
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            DbError::SyntaxError | DbError::Invalid | DbError::ConfigError,
            _
        ))
    )
}

/// A keyspace that existed before (`IF NOT EXISTS` left it as it was) may
/// use tablets; say so, since its lightweight transactions may then be
/// refused. The table read is ScyllaDB's; on a server without it there
/// are no tablets, and nothing is said.
async fn warn_if_tablets(session: &Session, keyspace: &str) {
    let read = session
        .query_unpaged(
            "SELECT initial_tablets FROM system_schema.scylla_keyspaces WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await;
    let Ok(result) = read else { return };
    let Ok(rows) = result.into_rows_result() else {
        return;
    };
    let Ok(Some((initial_tablets,))) = rows.maybe_first_row::<(Option<i32>,)>() else {
        return;
    };
    if initial_tablets.is_some() {
        tracing::warn!(
            keyspace,
            "the store keyspace uses tablets: ScyllaDB releases that do not support lightweight \
             transactions on tablets refuse every routerd write there; create the keyspace \
             WITH tablets = {{'enabled': false}} or name a new one in store.keyspace"
        );
    }
}

/// How many statements `statement_specs` gives.
const STATEMENT_COUNT: usize = 7;

/// One prepared statement: its text, and the consistency it runs at.
#[derive(Clone, Debug)]
pub(crate) struct StatementSpec {
    pub cql: String,
    pub consistency: Consistency,
    /// The Paxos round's consistency, for a lightweight transaction only.
    pub serial_consistency: Option<SerialConsistency>,
}

/// Every statement the store prepares, in `Statements` field order:
/// - The four writes are lightweight transactions on one partition each:
///   QUORUM for the commit, SERIAL for the Paxos round.
/// - The reads of one record or one member row are SERIAL: they see every
///   committed LWT and finish one in flight, which a CAS needs.
/// - The member list reads every partition of `members`, which SERIAL
///   cannot do (ScyllaDB refuses SERIAL over more than one partition), so
///   it reads at QUORUM. A list a moment stale is safe: every declaration
///   made from it is a CAS on the row's version, refused if the row moved.
pub(crate) fn statement_specs(keyspace: &str) -> [StatementSpec; STATEMENT_COUNT] {
    let lwt = |cql: String| StatementSpec {
        cql,
        consistency: Consistency::Quorum,
        serial_consistency: Some(SerialConsistency::Serial),
    };
    let serial_read = |cql: String| StatementSpec {
        cql,
        consistency: Consistency::Serial,
        serial_consistency: None,
    };
    [
        lwt(insert_if_absent_cql(keyspace)),
        lwt(update_if_cas_cql(keyspace)),
        serial_read(select_record_cql(keyspace)),
        lwt(insert_member_cql(keyspace)),
        lwt(update_member_cql(keyspace)),
        serial_read(select_member_cql(keyspace)),
        StatementSpec {
            cql: list_members_cql(keyspace),
            consistency: Consistency::Quorum,
            serial_consistency: None,
        },
    ]
}

pub(crate) fn insert_if_absent_cql(keyspace: &str) -> String {
    format!(
        "INSERT INTO {keyspace}.routes (type_id, zone_id, object_id, owner_node, \
         route_version, save_timepoint_ms, cas_version, state, owner_incarnation) \
         VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?) IF NOT EXISTS"
    )
}

pub(crate) fn update_if_cas_cql(keyspace: &str) -> String {
    format!(
        "UPDATE {keyspace}.routes SET owner_node = ?, route_version = ?, \
         save_timepoint_ms = ?, cas_version = ?, state = ?, owner_incarnation = ? \
         WHERE type_id = ? AND zone_id = ? AND object_id = ? IF cas_version = ?"
    )
}

pub(crate) fn select_record_cql(keyspace: &str) -> String {
    format!(
        "SELECT owner_node, route_version, save_timepoint_ms, cas_version, state, \
         owner_incarnation FROM {keyspace}.routes \
         WHERE type_id = ? AND zone_id = ? AND object_id = ?"
    )
}

/// The columns of a membership row after its key, in statement order.
const MEMBER_COLUMNS: &str =
    "incarnation, state, heartbeat, gateway, admin, cluster, core_count, actors, version";

pub(crate) fn insert_member_cql(keyspace: &str) -> String {
    format!(
        "INSERT INTO {keyspace}.members (node_id, {MEMBER_COLUMNS}) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
    )
}

pub(crate) fn update_member_cql(keyspace: &str) -> String {
    format!(
        "UPDATE {keyspace}.members SET incarnation = ?, state = ?, heartbeat = ?, gateway = ?, \
         admin = ?, cluster = ?, core_count = ?, actors = ?, version = ? \
         WHERE node_id = ? IF version = ?"
    )
}

pub(crate) fn select_member_cql(keyspace: &str) -> String {
    format!("SELECT node_id, {MEMBER_COLUMNS} FROM {keyspace}.members WHERE node_id = ?")
}

pub(crate) fn list_members_cql(keyspace: &str) -> String {
    format!("SELECT node_id, {MEMBER_COLUMNS} FROM {keyspace}.members LIMIT {MEMBERS_MAX}")
}

/// What an LWT result row says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LwtResult {
    Done(WriteOutcome),
    /// Not applied, and the row lacks the current record's columns.
    ConflictNeedsRead,
}

/// Maps an LWT result row (`[applied]` first, then the current columns when
/// not applied) to an outcome for `write`.
pub(crate) fn map_lwt_row(
    columns: &[String],
    values: &[Option<CqlValue>],
    write: &RecordWrite,
) -> Result<LwtResult, BackendError> {
    let column = |name: &str| {
        columns
            .iter()
            .position(|column| column == name)
            .and_then(|index| values.get(index))
            .and_then(Option::as_ref)
    };
    let applied = column("[applied]")
        .and_then(CqlValue::as_boolean)
        .ok_or(BackendError::Corrupt("LWT result without [applied]"))?;
    if applied {
        let cas_version = match write.condition {
            WriteCondition::Absent => CasVersion(1),
            WriteCondition::CasEquals(expected) => CasVersion(expected.0.wrapping_add(1)),
        };
        return Ok(LwtResult::Done(WriteOutcome::Applied(cas_version)));
    }
    let bigint = |name: &str| column(name).and_then(CqlValue::as_bigint);
    let has = |name: &str| columns.iter().any(|column| column == name);
    let full_row = [
        "owner_node",
        "route_version",
        "save_timepoint_ms",
        "cas_version",
        "state",
    ]
    .iter()
    .all(|name| has(name));
    if !full_row {
        return Ok(LwtResult::ConflictNeedsRead);
    }
    // Every column present but cas_version null: the row does not exist.
    let Some(cas_version) = bigint("cas_version") else {
        return Ok(LwtResult::Done(WriteOutcome::Conflict(None)));
    };
    let field = |name: &'static str| bigint(name).ok_or(BackendError::Corrupt(name));
    let record = RouteRecord {
        key: write.key,
        owner_node: NodeId(field("owner_node")? as u64),
        owner_incarnation: bigint("owner_incarnation").unwrap_or(0) as u64,
        route_version: RouteVersion(field("route_version")? as u64),
        save_timepoint_ms: field("save_timepoint_ms")? as u64,
        cas_version: CasVersion(cas_version as u64),
        state: column("state")
            .and_then(CqlValue::as_blob)
            .cloned()
            .unwrap_or_default(),
    };
    Ok(LwtResult::Done(WriteOutcome::Conflict(Some(record))))
}

#[cfg(test)]
#[path = "scylla_tests.rs"]
mod tests;
