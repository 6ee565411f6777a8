//! The ScyllaDB backend's CQL: the keyspace and tables it creates, the
//! statements it prepares, and the mapping of a lightweight transaction's
//! result row. Pure functions, unit-tested without a cluster.

use super::members::{
    add_timers_column_cql, bump_version_cql, heartbeat_member_cql, init_version_cql,
    insert_member_cql, list_members_cql, membership_table_cql, select_member_cql,
    select_members_cql, select_version_cql, timers_column_cql, update_member_cql,
};
use super::*;

/// Longest keyspace name CQL accepts.
pub(super) const KEYSPACE_LEN_MAX: usize = 48;

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
        membership_table_cql(keyspace),
    ]
}

/// Creates the keyspace with tablets disabled, or, when the server refuses
/// the option as unknown (a server without tablets: the option is a
/// syntax or configuration error there), without it. Deciding by the
/// server's answer rather than its version string holds for ScyllaDB and
/// Cassandra alike, and for versions not yet released; a refusal for
/// another reason comes back again from the second statement, and is
/// reported.
pub(super) async fn create_keyspace(
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

/// Adds the member rows' `timers` column to a membership table made before
/// it. Two nodes opening the store at once may both find it missing; the
/// second `ALTER` is refused as a conflict with the column the first
/// added, which the check after it tells from a real failure.
pub(super) async fn add_timers_column(session: &Session, keyspace: &str) -> Result<(), OpenError> {
    let open = |error: &dyn std::fmt::Display| OpenError::Scylla(error.to_string());
    let has_column = || async {
        let rows = session
            .query_unpaged(timers_column_cql(), (keyspace,))
            .await
            .map_err(|e| open(&e))?
            .into_rows_result()
            .map_err(|e| open(&e))?;
        Ok::<bool, OpenError>(rows.rows_num() > 0)
    };
    if has_column().await? {
        return Ok(());
    }
    match session
        .query_unpaged(add_timers_column_cql(keyspace), ())
        .await
    {
        Ok(_) => {
            tracing::info!(keyspace, "store schema: member rows now carry their timers");
            Ok(())
        }
        Err(_) if has_column().await? => Ok(()),
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
pub(super) async fn warn_if_tablets(session: &Session, keyspace: &str) {
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
pub(super) const STATEMENT_COUNT: usize = 12;

/// One prepared statement: its text, and the consistency it runs at.
#[derive(Clone, Debug)]
pub(crate) struct StatementSpec {
    pub cql: String,
    pub consistency: Consistency,
    /// The Paxos round's consistency, for a lightweight transaction only.
    pub serial_consistency: Option<SerialConsistency>,
}

/// Every statement the store prepares, in `Statements` field order:
/// - The writes are lightweight transactions on one partition each (a
///   record's, or the one membership partition; a membership change is a
///   conditional batch of two of them there): QUORUM for the commit,
///   SERIAL for the Paxos round.
/// - The reads are SERIAL and of one partition each: they see every
///   committed LWT and finish one in flight, which a CAS needs, and a
///   listing then sees every change the version it follows counted.
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
        lwt(init_version_cql(keyspace)),
        serial_read(select_version_cql(keyspace)),
        serial_read(select_member_cql(keyspace)),
        serial_read(select_members_cql(keyspace)),
        serial_read(list_members_cql(keyspace)),
        lwt(heartbeat_member_cql(keyspace)),
        lwt(insert_member_cql(keyspace)),
        lwt(update_member_cql(keyspace)),
        lwt(bump_version_cql(keyspace)),
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
