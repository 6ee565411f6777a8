//! The PostgreSQL backend's membership part: the members table's
//! statements, the mapping of its rows, and the membership lane's requests
//! (a write is one statement conditioned on the row's version).

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::error::BackendError;
use super::membership::{
    self, MemberCondition, MemberRow, MemberVersion, MemberWrite, MEMBERS_MAX,
};
use super::postgres_sql::{column, int, uint};
use super::postgres_statements::{Pending, Reply, Statements};
use super::record::NodeId;

/// The columns of a membership row after its key, in statement order.
const MEMBER_COLUMNS: &str =
    "incarnation, state, heartbeat, gateway, admin, cluster, core_count, actors, version";

pub(crate) fn insert_member_sql() -> String {
    format!(
        "INSERT INTO routerd_members (node_id, {MEMBER_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING"
    )
}

/// `$10` is the version the write produces, `$11` the one it expects.
pub(crate) const UPDATE_MEMBER: &str = "UPDATE routerd_members SET incarnation = $2, state = $3, \
     heartbeat = $4, gateway = $5, admin = $6, cluster = $7, core_count = $8, actors = $9, \
     version = $10 WHERE node_id = $1 AND version = $11";

pub(crate) fn select_member_sql() -> String {
    format!("SELECT node_id, {MEMBER_COLUMNS} FROM routerd_members WHERE node_id = $1")
}

pub(crate) fn list_members_sql() -> String {
    format!(
        "SELECT node_id, {MEMBER_COLUMNS} FROM routerd_members ORDER BY node_id \
         LIMIT {MEMBERS_MAX}"
    )
}

/// A members row (`node_id` then `MEMBER_COLUMNS`) as a `MemberRow`. A value
/// this build cannot read is `Corrupt`, never a default.
pub(crate) fn member_from_row(row: &Row) -> Result<MemberRow, BackendError> {
    let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
    let cluster: Vec<u8> = column(row, 6)?;
    let actors: Vec<u8> = column(row, 8)?;
    let core_count: i64 = column(row, 7)?;
    Ok(MemberRow {
        node_id: NodeId(uint(column(row, 0)?)),
        incarnation: uint(column(row, 1)?),
        state: membership::decode_state(column(row, 2)?).map_err(corrupt)?,
        heartbeat: uint(column(row, 3)?),
        gateway: column(row, 4)?,
        admin: column(row, 5)?,
        cluster: membership::decode_addresses(&cluster).map_err(corrupt)?,
        core_count: u32::try_from(core_count)
            .map_err(|_| BackendError::Corrupt("core_count out of range"))?,
        actors: membership::decode_actors(&actors).map_err(corrupt)?,
        version: MemberVersion(uint(column(row, 9)?)),
    })
}

pub(crate) fn select_member<'a>(
    client: &'a Client,
    st: &'a Statements,
    node_id: u64,
) -> Pending<'a> {
    let node_id = int(node_id);
    Box::pin(async move { Reply::Rows(client.query(&st.select_member, &[&node_id]).await) })
}

pub(crate) fn list_members<'a>(client: &'a Client, st: &'a Statements) -> Pending<'a> {
    Box::pin(async move { Reply::Rows(client.query(&st.list_members, &[]).await) })
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
    let next = int(write.next_version().0);
    let (statement, expected) = match write.condition {
        MemberCondition::Absent => (&st.insert_member, None),
        MemberCondition::VersionEquals(expected) => (&st.update_member, Some(int(expected.0))),
    };
    Box::pin(async move {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &node_id,
            &incarnation,
            &state,
            &heartbeat,
            &row.gateway,
            &row.admin,
            &cluster,
            &core_count,
            &actors,
            &next,
        ];
        if let Some(expected) = &expected {
            params.push(expected);
        }
        Reply::Count(client.execute(statement, &params).await)
    })
}
