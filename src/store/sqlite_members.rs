//! The SQLite backend's membership part: the members table's reads and
//! writes, each inside the transaction the store thread runs (a write's
//! inside the write transaction, which holds the file's write lock, so the
//! check, the row and the table version's move commit as one).

use rusqlite::{params, Transaction};

use super::{int, uint};
use crate::store::error::BackendError;
use crate::store::membership::{
    self, MemberCondition, MemberOutcome, MemberPage, MemberPoll, MemberRow, MemberState,
    MemberVersion, MemberWrite, TableVersion, MEMBERS_PAGE_MAX, POLL_ROWS_MAX,
};
use crate::store::record::NodeId;

/// A member row as stored: the row, the table version its last change
/// made, and whether it is a tombstone.
struct StoredMember {
    row: MemberRow,
    changed: i64,
    deleted: bool,
}

impl StoredMember {
    /// The row as its node's own reads see it (a tombstone as `left`).
    fn visible(self) -> MemberRow {
        if self.deleted {
            membership::tombstone(self.row.node_id, self.row.incarnation, self.row.version)
        } else {
            self.row
        }
    }
}

/// One conditional membership write inside the write transaction, which
/// holds the file's write lock: the condition is checked on the row read
/// in it, and a change moves the table version in it, so the row and the
/// version commit together or not at all.
pub(super) fn write_member(
    transaction: &Transaction,
    write: &MemberWrite,
) -> Result<MemberOutcome, BackendError> {
    let row = &write.row;
    let current = select_member(transaction, row.node_id)?;
    let holds = match (write.condition, &current) {
        (MemberCondition::Absent, None) => true,
        (MemberCondition::VersionEquals(expected), Some(stored)) => stored.row.version == expected,
        _ => false,
    };
    if !holds {
        return Ok(MemberOutcome::Conflict(current.map(StoredMember::visible)));
    }
    let changed = match &current {
        Some(stored) if !stored.deleted && !membership::is_change(&stored.row, row) => {
            stored.changed
        }
        _ => bump_version(transaction)?,
    };
    let next = write.next_version();
    transaction
        .prepare_cached(
            "INSERT OR REPLACE INTO members (node_id, incarnation, state, heartbeat, gateway, \
             admin, cluster, core_count, actors, version, changed, deleted, timers) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12)",
        )?
        .execute(params![
            int(row.node_id.0),
            int(row.incarnation),
            row.state as i64,
            int(row.heartbeat),
            row.gateway,
            row.admin,
            membership::encode_addresses(&row.cluster),
            row.core_count,
            membership::encode_actors(&row.actors),
            int(next.0),
            changed,
            membership::encode_timers(row.timers),
        ])?;
    Ok(MemberOutcome::Applied(next))
}

/// Deletes a `left` row at version `expected`, leaving its tombstone at
/// the next version, and moves the table version, in the write
/// transaction.
pub(super) fn delete_member(
    transaction: &Transaction,
    node_id: NodeId,
    expected: MemberVersion,
) -> Result<MemberOutcome, BackendError> {
    let current = select_member(transaction, node_id)?;
    let holds = current.as_ref().is_some_and(|stored| {
        !stored.deleted && stored.row.version == expected && stored.row.state == MemberState::Left
    });
    let stored = match current {
        Some(stored) if holds => stored,
        current => return Ok(MemberOutcome::Conflict(current.map(StoredMember::visible))),
    };
    let changed = bump_version(transaction)?;
    let next = MemberVersion(expected.0.wrapping_add(1));
    let gone = membership::tombstone(node_id, stored.row.incarnation, next);
    transaction
        .prepare_cached(
            "UPDATE members SET state = ?2, heartbeat = 0, gateway = '', admin = '', \
             cluster = ?3, core_count = 0, actors = ?4, version = ?5, changed = ?6, deleted = 1, \
             timers = x'' WHERE node_id = ?1",
        )?
        .execute(params![
            int(node_id.0),
            gone.state as i64,
            membership::encode_addresses(&gone.cluster),
            membership::encode_actors(&gone.actors),
            int(next.0),
            changed,
        ])?;
    Ok(MemberOutcome::Applied(next))
}

/// Moves the table version by one; returns the new version.
fn bump_version(transaction: &Transaction) -> Result<i64, BackendError> {
    let version = transaction
        .prepare_cached(
            "UPDATE members_version SET version = version + 1 WHERE id = 0 RETURNING version",
        )?
        .query_row([], |row| row.get(0))?;
    Ok(version)
}

fn table_version(transaction: &Transaction) -> Result<TableVersion, BackendError> {
    let version: i64 = transaction
        .prepare_cached("SELECT version FROM members_version WHERE id = 0")?
        .query_row([], |row| row.get(0))?;
    Ok(TableVersion(uint(version)))
}

/// The table version, then the rows of `nodes` (tombstones as their
/// node's own reads see them), in one read transaction.
pub(super) fn poll_members(
    transaction: &Transaction,
    nodes: &[NodeId],
) -> Result<MemberPoll, BackendError> {
    let version = table_version(transaction)?;
    let mut rows = Vec::with_capacity(nodes.len().min(POLL_ROWS_MAX));
    for node in nodes.iter().take(POLL_ROWS_MAX) {
        if let Some(stored) = select_member(transaction, *node)? {
            rows.push(stored.visible());
        }
    }
    Ok(MemberPoll { version, rows })
}

/// One page of the rows changed after `since`, node ids above `after`;
/// since 0, the live rows only.
pub(super) fn list_members(
    transaction: &Transaction,
    since: TableVersion,
    after: NodeId,
) -> Result<MemberPage, BackendError> {
    let mut statement = transaction.prepare_cached(&format!(
        "SELECT {MEMBER_COLUMNS} FROM members \
         WHERE changed > ?1 AND node_id > ?2 AND (deleted = 0 OR ?1 > 0) \
         ORDER BY node_id LIMIT ?3"
    ))?;
    let limit = MEMBERS_PAGE_MAX as i64 + 1;
    let mut rows = statement.query(params![int(since.0), int(after.0), limit])?;
    let mut page = MemberPage::default();
    while let Some(row) = rows.next()? {
        if page.rows.len() + page.deleted.len() == MEMBERS_PAGE_MAX {
            page.more = true;
            break;
        }
        let stored = member_from_row(row)?;
        if stored.deleted {
            page.deleted.push(stored.row.node_id);
        } else {
            page.rows.push(stored.row);
        }
    }
    Ok(page)
}

const MEMBER_COLUMNS: &str = "node_id, incarnation, state, heartbeat, gateway, admin, cluster, \
     core_count, actors, version, changed, deleted, timers";

fn select_member(
    transaction: &Transaction,
    node_id: NodeId,
) -> Result<Option<StoredMember>, BackendError> {
    let mut statement = transaction.prepare_cached(&format!(
        "SELECT {MEMBER_COLUMNS} FROM members WHERE node_id = ?1"
    ))?;
    let mut rows = statement.query(params![int(node_id.0)])?;
    match rows.next()? {
        Some(row) => Ok(Some(member_from_row(row)?)),
        None => Ok(None),
    }
}

/// A `MEMBER_COLUMNS` row. A value this build cannot read is `Corrupt`.
fn member_from_row(row: &rusqlite::Row<'_>) -> Result<StoredMember, BackendError> {
    let corrupt = |error: membership::DecodeError| BackendError::Corrupt(error.0);
    let cluster: Vec<u8> = row.get(6)?;
    let actors: Vec<u8> = row.get(8)?;
    let timers: Vec<u8> = row.get(12)?;
    Ok(StoredMember {
        row: MemberRow {
            node_id: NodeId(uint(row.get(0)?)),
            incarnation: uint(row.get(1)?),
            state: membership::decode_state(row.get(2)?).map_err(corrupt)?,
            heartbeat: uint(row.get(3)?),
            gateway: row.get(4)?,
            admin: row.get(5)?,
            cluster: membership::decode_addresses(&cluster).map_err(corrupt)?,
            core_count: row.get(7)?,
            actors: membership::decode_actors(&actors).map_err(corrupt)?,
            timers: membership::decode_timers(&timers).map_err(corrupt)?,
            version: MemberVersion(uint(row.get(9)?)),
        },
        changed: row.get(10)?,
        deleted: row.get::<_, i64>(11)? != 0,
    })
}
