//! The PostgreSQL backend's statement text, schema, value mapping and error
//! classification: pure functions, unit-tested without a server.
//!
//! Every integer is a `BIGINT`: PostgreSQL has no unsigned types, so `u32`
//! values are stored exactly and `u64` values bit for bit (as SQLite does).

use tokio_postgres::error::{DbError, Severity};
use tokio_postgres::Row;
use wire::ObjectKey;

use super::error::BackendError;
use super::record::{CasVersion, NodeId, RouteRecord, RouteVersion};

/// The schema this build writes and reads, kept in `routerd_schema`.
/// Versions 1 (no membership table version) and 2 (no timers in the member
/// rows) are migrated at open.
pub const POSTGRES_SCHEMA_VERSION: i64 = 3;

/// Serialises schema creation between processes opening one new database
/// at once: an arbitrary constant, the same in every routerd build.
pub(crate) const SCHEMA_LOCK_KEY: i64 = 0x0072_6f75_7465_7264; // "routerd" in ASCII

/// Tables routerd owns. Prefixed, so a database shared with other
/// applications never mixes their tables with ours.
pub(crate) const TABLES: [&str; 3] = ["routerd_schema", "routerd_routes", "routerd_members"];

/// Creates every table of version 1 and records version 1 (the
/// migration to the current version follows in the same transaction). Run
/// once, in the transaction that found none of `TABLES`.
pub(crate) fn create_schema_sql() -> String {
    "CREATE TABLE routerd_schema (version BIGINT NOT NULL);
         INSERT INTO routerd_schema (version) VALUES (1);
         CREATE TABLE routerd_routes (
             type_id BIGINT NOT NULL,
             zone_id BIGINT NOT NULL,
             object_id BIGINT NOT NULL,
             owner_node BIGINT NOT NULL,
             owner_incarnation BIGINT NOT NULL,
             route_version BIGINT NOT NULL,
             save_timepoint_ms BIGINT NOT NULL,
             cas_version BIGINT NOT NULL,
             state BYTEA NOT NULL,
             PRIMARY KEY (type_id, zone_id, object_id)
         ) WITH (fillfactor = 90);
         CREATE TABLE routerd_members (
             node_id BIGINT PRIMARY KEY,
             incarnation BIGINT NOT NULL,
             state BIGINT NOT NULL,
             heartbeat BIGINT NOT NULL,
             gateway TEXT NOT NULL,
             admin TEXT NOT NULL,
             cluster BYTEA NOT NULL,
             core_count BIGINT NOT NULL,
             actors BYTEA NOT NULL,
             version BIGINT NOT NULL
         );"
    .to_string()
}

// Route statements. A segment's route writes go in one statement per kind,
// each write a row of parallel arrays (`unnest`), so one statement carries
// many conditional writes: PostgreSQL's cost per statement (bind, plan
// lookup, executor start, a protocol reply) is paid once per batch, not
// once per write. The keys of one statement are distinct (see
// `postgres_batch`), and each answers the keys it wrote.

/// Locks the rows of `$1..$3` (the keys' columns) in key order, so that the
/// update after it takes no lock in another order than every other group
/// transaction: `FOR UPDATE` locks the rows as they leave the sort.
pub(crate) const LOCK_ROUTES: &str = "SELECT 1 FROM routerd_routes \
     WHERE (type_id, zone_id, object_id) IN \
     (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[])) \
     ORDER BY type_id, zone_id, object_id FOR UPDATE";

/// Inserts the rows whose key is absent; answers the keys it inserted.
pub(crate) const INSERT_ROUTES: &str = "INSERT INTO routerd_routes (type_id, zone_id, object_id, \
     owner_node, owner_incarnation, route_version, save_timepoint_ms, cas_version, state) \
     SELECT type_id, zone_id, object_id, owner_node, owner_incarnation, route_version, \
     save_timepoint_ms, 1, state FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], \
     $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bytea[]) AS input (type_id, \
     zone_id, object_id, owner_node, owner_incarnation, route_version, save_timepoint_ms, state) \
     ON CONFLICT DO NOTHING RETURNING type_id, zone_id, object_id";

/// Each row's condition (`expected_cas`) is part of the statement, so
/// PostgreSQL re-checks it on the newest committed row version after
/// waiting for a concurrent writer (READ COMMITTED): two updates from the
/// same CAS version never both apply, in one process or many. Answers the
/// keys it updated.
pub(crate) const UPDATE_ROUTES: &str = "UPDATE routerd_routes AS route SET \
     owner_node = input.owner_node, owner_incarnation = input.owner_incarnation, \
     route_version = input.route_version, save_timepoint_ms = input.save_timepoint_ms, \
     state = input.state, cas_version = input.next_cas \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], \
     $6::bigint[], $7::bigint[], $8::bytea[], $9::bigint[], $10::bigint[]) AS input (type_id, \
     zone_id, object_id, owner_node, owner_incarnation, route_version, save_timepoint_ms, state, \
     next_cas, expected_cas) \
     WHERE route.type_id = input.type_id AND route.zone_id = input.zone_id \
     AND route.object_id = input.object_id AND route.cas_version = input.expected_cas \
     RETURNING route.type_id, route.zone_id, route.object_id";

pub(crate) const SELECT_ROUTE: &str = "SELECT owner_node, owner_incarnation, route_version, \
     save_timepoint_ms, cas_version, state FROM routerd_routes \
     WHERE type_id = $1 AND zone_id = $2 AND object_id = $3";

/// Session settings of every connection. `synchronous_commit` is set
/// explicitly so that an acknowledged write is durable whatever the
/// server's default; the timeouts make the server drop a statement or a
/// transaction that the store has already answered as timed out, so it
/// does not hold row locks after its caller gave up.
///
/// Neither timeout ever cuts a commit's wait for a synchronous standby
/// short, which would leave the transaction committed and visible on the
/// primary alone (see `TERMINATE_UNLESS_COMMITTING`). The server disarms
/// `statement_timeout` before it commits (`finish_xact_command` in its
/// `postgres.c`), for a `COMMIT` and for an autocommit statement alike, so
/// the store need not turn it off around `COMMIT`;
/// `idle_in_transaction_session_timeout` runs only while the server waits
/// for the client inside a transaction, never during a commit. Nor does a
/// dropped connection end the wait: the server holds off interrupts while
/// it commits, so not even `client_connection_check_interval` (off by
/// default) would. `tests/store_postgres_syncrep.rs` holds a commit in its
/// wait past both timeouts after the store dropped its connection. One
/// narrow case remains: a statement timer that fires after a statement's
/// last interrupt check and before that disarming leaves a cancel pending,
/// which the wait then honours. A `COMMIT` starts a timer of its own and
/// disarms it microseconds later; an autocommit write meets it only when
/// it finishes within microseconds of its whole timeout, by when the store
/// has already given it up.
pub(crate) fn session_sql(request_timeout_ms: u64) -> String {
    let idle_ms = request_timeout_ms.saturating_mul(2);
    format!(
        "SET synchronous_commit = on; \
         SET statement_timeout = {request_timeout_ms}; \
         SET idle_in_transaction_session_timeout = {idle_ms}; \
         SET default_transaction_isolation = 'read committed'; \
         SET plan_cache_mode = force_generic_plan"
    )
}

/// Terminates backend `$1`, that of a batch given up at its deadline,
/// waiting up to `$2` ms for it to exit, unless it is committing. Answers
/// one row while the backend lives: its wait event, and whether it was
/// terminated (NULL: left alone).
///
/// A committing backend is left alone because a signal can no longer roll
/// it back (the server holds off interrupts from the start of a commit):
/// it can only cancel the commit's wait for the synchronous standby
/// (wait event `SyncRep`). A transaction whose wait is cancelled stays
/// committed and becomes visible on the primary (with a WARNING "canceling
/// the wait for synchronous replication"), though the standby may not
/// have it. The retry then meets that record and takes it as its own
/// applied write, and a failover to the standby takes it back: changes
/// acknowledged since are lost, and no node is declared down. Left alone,
/// the commit ends when the standby acknowledges it; until then its row
/// locks hold, so a retry waits, and is itself answered Indeterminate:
/// unavailable, never wrong. A backend in `SyncRep` is in that wait; one
/// running `COMMIT` (a group commit's, a simple query of that text) is in
/// it or on its way there (flushing the commit record).
///
/// What remains is a race: the activity view is read, then the signal is
/// sent, and a backend that starts committing in between is signalled in
/// its commit. For a group commit that takes the backend to begin `COMMIT`
/// within those few tens of microseconds. A batch of one write commits at
/// the end of its statement (autocommit), which the view cannot tell from
/// the statement itself, so its window is also the flush of its commit
/// record before the wait shows (an fsync: commonly 0.1 ms to a few ms).
/// Either way the commit has to begin that close to the batch's deadline
/// (the backend waited on a lock until then, say), and the primary to fail
/// before the standby has the commit, which streams to it regardless.
pub(crate) const TERMINATE_UNLESS_COMMITTING: &str = "SELECT wait_event, \
     CASE WHEN wait_event IS DISTINCT FROM 'SyncRep' AND query IS DISTINCT FROM 'COMMIT' \
     THEN pg_terminate_backend(pid, $2) END \
     FROM pg_stat_activity WHERE pid = $1";

// PostgreSQL integers are i64; u64 values are stored bit for bit.
pub(crate) fn int(value: u64) -> i64 {
    value as i64
}

pub(crate) fn uint(value: i64) -> u64 {
    value as u64
}

/// The key as the three BIGINT parameters of every route statement.
pub(crate) fn key_values(key: ObjectKey) -> [i64; 3] {
    [
        i64::from(key.type_id),
        i64::from(key.zone_id),
        int(key.object_id),
    ]
}

pub(super) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
) -> Result<T, BackendError> {
    row.try_get(index).map_err(BackendError::from)
}

/// A `SELECT_ROUTE` row as the record of `key`.
pub(crate) fn route_from_row(key: ObjectKey, row: &Row) -> Result<RouteRecord, BackendError> {
    Ok(RouteRecord {
        key,
        owner_node: NodeId(uint(column(row, 0)?)),
        owner_incarnation: uint(column(row, 1)?),
        route_version: RouteVersion(uint(column(row, 2)?)),
        save_timepoint_ms: uint(column(row, 3)?),
        cas_version: CasVersion(uint(column(row, 4)?)),
        state: column(row, 5)?,
    })
}

/// Whether an error is a plain statement failure that the server reported
/// on a live connection (severity ERROR): the statement did not take
/// effect and its transaction can no longer commit.
///
/// Everything else may hide a write that happened: a closed or broken
/// connection, a FATAL or PANIC (the backend died, perhaps after its
/// commit), the operator-intervention class `57` (a backend terminated or
/// a statement cancelled), the connection-exception class `08`, and errors
/// of this client that did not come from the server at all.
pub(crate) fn is_plain_failure(error: &tokio_postgres::Error) -> bool {
    error
        .as_db_error()
        .is_some_and(|db: &DbError| is_plain(db.parsed_severity(), db.code().code()))
}

fn is_plain(severity: Option<Severity>, code: &str) -> bool {
    severity == Some(Severity::Error) && !code.starts_with("57") && !code.starts_with("08")
}

/// Whether a plain failure says the server takes no writes (SQLSTATE
/// 25006, `read_only_sql_transaction`: a standby, a primary demoted or
/// made read-only). It refuses them on this connection for good, so the
/// connection is dropped, and the reconnect finds a server that takes
/// them (`target_session_attrs`, see `postgres::Target`).
pub(crate) fn is_read_only(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// An error with the server's own words when it has them; the driver's
/// `Display` alone says only "db error".
pub fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::membership::MEMBERS_PAGE_MAX;
    use crate::store::postgres_membership::{
        list_members_sql, poll_members_sql, select_member_sql, DELETE_MEMBER, MEMBER_FUNCTIONS_SQL,
        MIGRATE_1_TO_2, MIGRATE_2_TO_3, WRITE_MEMBER,
    };

    #[test]
    fn statements_condition_every_write() {
        assert!(INSERT_ROUTES.contains("ON CONFLICT DO NOTHING"));
        assert!(UPDATE_ROUTES.contains("AND route.cas_version = input.expected_cas"));
        assert!(LOCK_ROUTES.ends_with("ORDER BY type_id, zone_id, object_id FOR UPDATE"));
        assert!(list_members_sql().ends_with(&format!("LIMIT {}", MEMBERS_PAGE_MAX + 1)));
        assert!(list_members_sql().contains("WHERE changed > $1 AND node_id > $2"));
        // A member write and its move of the table version are one
        // statement: one call of a function that does both.
        assert!(MEMBER_FUNCTIONS_SQL.contains("FOR UPDATE"));
        assert_eq!(
            MEMBER_FUNCTIONS_SQL
                .matches("UPDATE routerd_members_version SET version = version + 1")
                .count(),
            3,
            "an insert, a change and a deletion move the version"
        );
        assert!(MIGRATE_1_TO_2.contains("UPDATE routerd_schema SET version = 2"));
        assert!(MIGRATE_2_TO_3.contains("UPDATE routerd_schema SET version = 3"));
        // The write without timers (a node of the previous build) writes
        // none rather than leaving the process before it's in the row.
        assert!(MEMBER_FUNCTIONS_SQL.contains("p_actors, ''::BYTEA, p_expected)"));
        assert!(MEMBER_FUNCTIONS_SQL.contains("OR cur.timers <> p_timers"));
        // Every parameter a statement names is one the code binds.
        for (sql, count) in [
            (LOCK_ROUTES.to_string(), 3),
            (INSERT_ROUTES.to_string(), 8),
            (UPDATE_ROUTES.to_string(), 10),
            (SELECT_ROUTE.to_string(), 3),
            (WRITE_MEMBER.to_string(), 11),
            (DELETE_MEMBER.to_string(), 5),
            (select_member_sql(), 1),
            (poll_members_sql(), 1),
            (list_members_sql(), 2),
        ] {
            assert!(sql.contains(&format!("${count}")), "{sql}");
            assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
        }
    }

    #[test]
    fn schema_creates_every_table_and_records_the_version() {
        let sql = create_schema_sql();
        for table in TABLES {
            assert!(sql.contains(&format!("CREATE TABLE {table} (")), "{table}");
        }
        assert!(sql.contains("VALUES (1)"));
        assert_eq!(POSTGRES_SCHEMA_VERSION, 3, "version 1 and two migrations");
    }

    #[test]
    fn session_keeps_synchronous_commit_and_bounds_statements() {
        let sql = session_sql(5000);
        assert!(sql.contains("synchronous_commit = on"));
        assert!(sql.contains("statement_timeout = 5000"));
        assert!(sql.contains("idle_in_transaction_session_timeout = 10000"));
    }

    #[test]
    fn a_committing_backend_is_never_terminated() {
        let sql = TERMINATE_UNLESS_COMMITTING;
        let (condition, signal) = sql.split_once("THEN").expect("a condition");
        assert!(condition.contains("wait_event IS DISTINCT FROM 'SyncRep'"));
        assert!(condition.contains("query IS DISTINCT FROM 'COMMIT'"));
        assert!(signal.contains("pg_terminate_backend(pid, $2) END"));
        assert!(sql.ends_with("WHERE pid = $1"));
    }

    #[test]
    fn keys_and_counters_round_trip_bit_for_bit() {
        let key = ObjectKey::new(u32::MAX, 7, u64::MAX);
        assert_eq!(key_values(key), [i64::from(u32::MAX), 7, -1]);
        for value in [0, 1, u64::MAX, 1 << 63] {
            assert_eq!(uint(int(value)), value);
        }
    }

    #[test]
    fn only_errors_on_a_live_connection_are_plain_failures() {
        // A unique violation or a serialization failure: the statement
        // failed and the server said so; the transaction cannot commit.
        assert!(is_plain(Some(Severity::Error), "23505"));
        assert!(is_plain(Some(Severity::Error), "40001"));
        // pg_terminate_backend, a shutdown, a crash: the backend may have
        // committed before it died.
        assert!(!is_plain(Some(Severity::Fatal), "57P01"));
        assert!(!is_plain(Some(Severity::Fatal), "57P02"));
        assert!(!is_plain(Some(Severity::Panic), "XX000"));
        // A cancelled statement and a connection failure are not refusals.
        assert!(!is_plain(Some(Severity::Error), "57014"));
        assert!(!is_plain(Some(Severity::Error), "08006"));
        assert!(!is_plain(None, "23505"));
    }
}
