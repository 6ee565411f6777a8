//! The SQLite backend's membership part: the members table's schema and
//! the membership lane's statements (a write is one conditional statement
//! on the node's row, inside the lane's transaction; a list reads every
//! row).

use super::*;

/// The membership table of schema version 2 (version 1 had a TTL-based
/// table without incarnations, which is dropped: it held only heartbeats).
pub(super) const MEMBERS_SCHEMA: &str = "
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

/// One conditional membership write inside the batch's transaction, as
/// one statement: the condition is in the statement's WHERE (or its
/// ON CONFLICT), and a refusal reads the row that refused it.
pub(super) fn write_member(
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

pub(super) fn list_members(transaction: &Transaction) -> Result<Vec<MemberRow>, BackendError> {
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
