//! The PostgreSQL backend's membership part: the members table, the table
//! version beside it, their statements, the mapping of their rows, and the
//! membership lane's requests.
//!
//! A write or a deletion is one call of a PL/pgSQL function created with
//! the schema (`MEMBER_FUNCTIONS_SQL`): one statement, so one atomic unit
//! whether it runs alone (autocommit) or inside a group transaction. The
//! function locks the member row (`FOR UPDATE`: under READ COMMITTED a
//! concurrent writer is waited for and the newest committed row read),
//! checks the condition on it, and when the write is a membership change
//! (anything but the heartbeat differs, an insert, a deletion) moves the
//! version row and stamps the member row with it, in that one statement.
//! Every writer locks one member row and then the version row, in that
//! order, so two writers never wait for each other in a cycle. A heartbeat
//! never touches the version row.

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::error::BackendError;
use super::membership::{
    self, MemberCondition, MemberPage, MemberPoll, MemberRow, MemberState, MemberVersion,
    MemberWrite, TableVersion, MEMBERS_PAGE_MAX,
};
use super::postgres_sql::{column, int, uint};
use super::postgres_statements::{Pending, Reply, Statements};
use super::record::NodeId;

/// The columns of a stored membership row, in statement order: the row,
/// then whether it is a tombstone.
const MEMBER_COLUMNS: &str = "node_id, incarnation, state, heartbeat, gateway, admin, cluster, \
     core_count, actors, version, deleted, timers";

/// Schema version 1 to 2: the table version, each row's stamp of the
/// version its last change made (`changed`; a version 1 store's rows are
/// stamped 1, the version it starts at) and its tombstone flag. Also what
/// a new store runs after creating version 1's tables.
pub(crate) const MIGRATE_1_TO_2: &str = "
ALTER TABLE routerd_members ADD COLUMN changed BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN deleted BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX routerd_members_changed ON routerd_members (changed);
CREATE TABLE routerd_members_version (
    id BIGINT PRIMARY KEY CHECK (id = 0),
    version BIGINT NOT NULL
);
INSERT INTO routerd_members_version (id, version) VALUES (0, 1);
UPDATE routerd_schema SET version = 2;
";

/// Schema version 2 to 3: each member row carries its process's
/// failure-detection timers (`MemberTimers`; empty in the rows a version 2
/// store holds, which their readers treat as unknown), and the write
/// function takes them (`MEMBER_FUNCTIONS_SQL`, run after it). The write
/// function of version 2 (without them) stays, for a node of the previous
/// build still running during a rolling upgrade: it writes a row without
/// timers, never the timers of the process before it. Also what a new
/// store runs after version 2.
pub(crate) const MIGRATE_2_TO_3: &str = "
ALTER TABLE routerd_members ADD COLUMN timers BYTEA NOT NULL DEFAULT '';
UPDATE routerd_schema SET version = 3;
";

/// `routerd_write_member(node, incarnation, state, heartbeat, gateway,
/// admin, cluster, core_count, actors, timers, expected)`: `expected` 0
/// inserts if the node has no row. Returns the row's new version, or 0
/// when the condition did not hold (nothing written). The same without
/// `timers` writes none.
///
/// `routerd_delete_member(node, expected, left, cluster, actors)`: turns
/// the row, if it is `left` (state `left`) at version `expected`, into its
/// tombstone (addresses `cluster` and actors `actors`, both empty; no
/// timers) at the next version. Returns that version, or 0.
///
/// Version 2 created the write without `timers` and the deletion; version
/// 3 adds the write with them and replaces the other two (the write
/// without them becomes a call of the one with them), all by `CREATE OR
/// REPLACE`, so one text serves a new store and a migrated one.
pub(crate) const MEMBER_FUNCTIONS_SQL: &str = "
CREATE OR REPLACE FUNCTION routerd_write_member(p_node BIGINT, p_incarnation BIGINT,
    p_state BIGINT, p_heartbeat BIGINT, p_gateway TEXT, p_admin TEXT, p_cluster BYTEA,
    p_core_count BIGINT, p_actors BYTEA, p_timers BYTEA, p_expected BIGINT) RETURNS BIGINT
    LANGUAGE plpgsql AS $fn$
DECLARE
    cur routerd_members%ROWTYPE;
    stamp BIGINT;
BEGIN
    SELECT * INTO cur FROM routerd_members WHERE node_id = p_node FOR UPDATE;
    IF NOT FOUND THEN
        IF p_expected <> 0 THEN
            RETURN 0;
        END IF;
        INSERT INTO routerd_members (node_id, incarnation, state, heartbeat, gateway, admin,
            cluster, core_count, actors, timers, version, changed, deleted)
        VALUES (p_node, p_incarnation, p_state, p_heartbeat, p_gateway, p_admin, p_cluster,
            p_core_count, p_actors, p_timers, 1, 0, false)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
        UPDATE routerd_members_version SET version = version + 1 WHERE id = 0
            RETURNING version INTO stamp;
        UPDATE routerd_members SET changed = stamp WHERE node_id = p_node;
        RETURN 1;
    END IF;
    IF p_expected = 0 OR cur.version <> p_expected THEN
        RETURN 0;
    END IF;
    stamp := cur.changed;
    IF cur.deleted OR cur.incarnation <> p_incarnation OR cur.state <> p_state
        OR cur.gateway <> p_gateway OR cur.admin <> p_admin OR cur.cluster <> p_cluster
        OR cur.core_count <> p_core_count OR cur.actors <> p_actors
        OR cur.timers <> p_timers THEN
        UPDATE routerd_members_version SET version = version + 1 WHERE id = 0
            RETURNING version INTO stamp;
    END IF;
    UPDATE routerd_members SET incarnation = p_incarnation, state = p_state,
        heartbeat = p_heartbeat, gateway = p_gateway, admin = p_admin, cluster = p_cluster,
        core_count = p_core_count, actors = p_actors, timers = p_timers,
        version = p_expected + 1, changed = stamp, deleted = false
    WHERE node_id = p_node;
    RETURN p_expected + 1;
END
$fn$;
CREATE OR REPLACE FUNCTION routerd_write_member(p_node BIGINT, p_incarnation BIGINT,
    p_state BIGINT, p_heartbeat BIGINT, p_gateway TEXT, p_admin TEXT, p_cluster BYTEA,
    p_core_count BIGINT, p_actors BYTEA, p_expected BIGINT) RETURNS BIGINT LANGUAGE sql AS $fn$
    SELECT routerd_write_member(p_node, p_incarnation, p_state, p_heartbeat, p_gateway,
        p_admin, p_cluster, p_core_count, p_actors, ''::BYTEA, p_expected)
$fn$;
CREATE OR REPLACE FUNCTION routerd_delete_member(p_node BIGINT, p_expected BIGINT,
    p_left BIGINT, p_cluster BYTEA, p_actors BYTEA) RETURNS BIGINT LANGUAGE plpgsql AS $fn$
DECLARE
    cur routerd_members%ROWTYPE;
    stamp BIGINT;
BEGIN
    SELECT * INTO cur FROM routerd_members WHERE node_id = p_node FOR UPDATE;
    IF NOT FOUND OR cur.deleted OR cur.version <> p_expected OR cur.state <> p_left THEN
        RETURN 0;
    END IF;
    UPDATE routerd_members_version SET version = version + 1 WHERE id = 0
        RETURNING version INTO stamp;
    UPDATE routerd_members SET heartbeat = 0, gateway = '', admin = '', cluster = p_cluster,
        core_count = 0, actors = p_actors, timers = '', version = p_expected + 1,
        changed = stamp, deleted = true
    WHERE node_id = p_node;
    RETURN p_expected + 1;
END
$fn$;
";

pub(crate) const WRITE_MEMBER: &str =
    "SELECT routerd_write_member($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

pub(crate) const DELETE_MEMBER: &str = "SELECT routerd_delete_member($1, $2, $3, $4, $5)";

pub(crate) fn select_member_sql() -> String {
    format!("SELECT {MEMBER_COLUMNS} FROM routerd_members WHERE node_id = $1")
}

/// The table version and, in the same snapshot, the rows of `$1` (none:
/// one row with the version and nulls).
pub(crate) fn poll_members_sql() -> String {
    let columns: Vec<String> = MEMBER_COLUMNS
        .split(", ")
        .map(|column| format!("m.{column}"))
        .collect();
    format!(
        "SELECT v.version, {} FROM routerd_members_version v \
         LEFT JOIN routerd_members m ON m.node_id = ANY($1) WHERE v.id = 0 ORDER BY m.node_id",
        columns.join(", ")
    )
}

/// One page of the rows changed after `$1` with ids above `$2` (since 0,
/// the live rows only), one more than a page so that `more` is known.
pub(crate) fn list_members_sql() -> String {
    format!(
        "SELECT {MEMBER_COLUMNS} FROM routerd_members \
         WHERE changed > $1 AND node_id > $2 AND (NOT deleted OR $1 > 0) \
         ORDER BY node_id LIMIT {}",
        MEMBERS_PAGE_MAX + 1
    )
}

/// A stored row (`MEMBER_COLUMNS` from column `at`) and whether it is a
/// tombstone. A value this build cannot read is `Corrupt`, never a
/// default.
fn stored_from_row(row: &Row, at: usize) -> Result<(MemberRow, bool), BackendError> {
    let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
    let cluster: Vec<u8> = column(row, at + 6)?;
    let actors: Vec<u8> = column(row, at + 8)?;
    let timers: Vec<u8> = column(row, at + 11)?;
    let core_count: i64 = column(row, at + 7)?;
    let member = MemberRow {
        node_id: NodeId(uint(column(row, at)?)),
        incarnation: uint(column(row, at + 1)?),
        state: membership::decode_state(column(row, at + 2)?).map_err(corrupt)?,
        heartbeat: uint(column(row, at + 3)?),
        gateway: column(row, at + 4)?,
        admin: column(row, at + 5)?,
        cluster: membership::decode_addresses(&cluster).map_err(corrupt)?,
        core_count: u32::try_from(core_count)
            .map_err(|_| BackendError::Corrupt("core_count out of range"))?,
        actors: membership::decode_actors(&actors).map_err(corrupt)?,
        timers: membership::decode_timers(&timers).map_err(corrupt)?,
        version: MemberVersion(uint(column(row, at + 9)?)),
    };
    Ok((member, column(row, at + 10)?))
}

/// A members row as its node's own reads see it (a tombstone as `left`).
pub(crate) fn member_from_row(row: &Row) -> Result<MemberRow, BackendError> {
    let (member, deleted) = stored_from_row(row, 0)?;
    Ok(if deleted {
        membership::tombstone(member.node_id, member.incarnation, member.version)
    } else {
        member
    })
}

/// A poll's rows: the version, then the rows asked for that exist.
pub(crate) fn poll_from_rows(rows: &[Row]) -> Result<MemberPoll, BackendError> {
    let Some(first) = rows.first() else {
        return Err(BackendError::Corrupt(
            "the membership version row is missing",
        ));
    };
    let version = TableVersion(uint(column(first, 0)?));
    let mut poll = MemberPoll {
        version,
        rows: Vec::with_capacity(rows.len()),
    };
    for row in rows {
        if column::<Option<i64>>(row, 1)?.is_none() {
            continue;
        }
        let (member, deleted) = stored_from_row(row, 1)?;
        poll.rows.push(if deleted {
            membership::tombstone(member.node_id, member.incarnation, member.version)
        } else {
            member
        });
    }
    Ok(poll)
}

/// A listing's rows (at most one more than a page) as a page.
pub(crate) fn page_from_rows(rows: &[Row]) -> Result<MemberPage, BackendError> {
    let mut page = MemberPage::default();
    for row in rows {
        if page.rows.len() + page.deleted.len() == MEMBERS_PAGE_MAX {
            page.more = true;
            break;
        }
        let (member, deleted) = stored_from_row(row, 0)?;
        if deleted {
            page.deleted.push(member.node_id);
        } else {
            page.rows.push(member);
        }
    }
    Ok(page)
}

/// The version a write or deletion function answered: `Some(version)`
/// applied, `None` refused; an answer it cannot give is an error.
pub(crate) fn function_answer(rows: &[Row]) -> Result<Option<MemberVersion>, BackendError> {
    match rows {
        [row] => {
            let version: i64 = column(row, 0)?;
            Ok((version > 0).then_some(MemberVersion(uint(version))))
        }
        _ => Err(BackendError::Corrupt(
            "a membership function answered other than one row",
        )),
    }
}

pub(crate) fn select_member<'a>(
    client: &'a Client,
    st: &'a Statements,
    node_id: u64,
) -> Pending<'a> {
    let node_id = int(node_id);
    Box::pin(async move { Reply::Rows(client.query(&st.select_member, &[&node_id]).await) })
}

pub(crate) fn poll_members<'a>(
    client: &'a Client,
    st: &'a Statements,
    nodes: &'a [NodeId],
) -> Pending<'a> {
    let ids: Vec<i64> = nodes.iter().map(|node| int(node.0)).collect();
    Box::pin(async move { Reply::Rows(client.query(&st.poll_members, &[&ids]).await) })
}

pub(crate) fn list_members<'a>(
    client: &'a Client,
    st: &'a Statements,
    since: TableVersion,
    after: NodeId,
) -> Pending<'a> {
    let (since, after) = (int(since.0), int(after.0));
    Box::pin(async move { Reply::Rows(client.query(&st.list_members, &[&since, &after]).await) })
}

pub(crate) fn write_member<'a>(
    client: &'a Client,
    st: &'a Statements,
    write: &'a MemberWrite,
) -> Pending<'a> {
    let row = &write.row;
    let node_id = int(row.node_id.0);
    let incarnation = int(row.incarnation);
    let state = row.state as i64;
    let heartbeat = int(row.heartbeat);
    let cluster = membership::encode_addresses(&row.cluster);
    let core_count = i64::from(row.core_count);
    let actors = membership::encode_actors(&row.actors);
    let timers = membership::encode_timers(row.timers);
    let expected = match write.condition {
        MemberCondition::Absent => 0,
        MemberCondition::VersionEquals(expected) => int(expected.0),
    };
    Box::pin(async move {
        let params: [&(dyn ToSql + Sync); 11] = [
            &node_id,
            &incarnation,
            &state,
            &heartbeat,
            &row.gateway,
            &row.admin,
            &cluster,
            &core_count,
            &actors,
            &timers,
            &expected,
        ];
        Reply::Rows(client.query(&st.write_member, &params).await)
    })
}

pub(crate) fn delete_member<'a>(
    client: &'a Client,
    st: &'a Statements,
    node_id: NodeId,
    expected: MemberVersion,
) -> Pending<'a> {
    let (node_id, expected) = (int(node_id.0), int(expected.0));
    let left = MemberState::Left as i64;
    let cluster = membership::encode_addresses(&[]);
    let actors = membership::encode_actors(&[]);
    Box::pin(async move {
        let params: [&(dyn ToSql + Sync); 5] = [&node_id, &expected, &left, &cluster, &actors];
        Reply::Rows(client.query(&st.delete_member, &params).await)
    })
}
