//! The synchronous heart of the in-memory store: the records and the
//! membership rows, each with its CAS rule. The memory backend wraps them
//! with fault injection, and the deterministic simulator drives them
//! directly.
//!
//! Their inspection (lengths, listings, row counts) is for tests and
//! benchmarks, through the `testing` feature.
#![cfg_attr(not(feature = "testing"), allow(dead_code))]

use std::collections::BTreeMap;

use wire::ObjectKey;

use super::membership::{
    is_change, tombstone, MemberCondition, MemberOutcome, MemberPage, MemberPoll, MemberRow,
    MemberState, MemberVersion, MemberWrite, TableVersion, MEMBERS_PAGE_MAX, POLL_ROWS_MAX,
};
use super::record::{CasVersion, NodeId, RecordWrite, RouteRecord, WriteCondition, WriteOutcome};

/// Records by key. A `BTreeMap` keeps iteration order deterministic, which
/// the simulator relies on to replay a seed exactly.
#[derive(Clone, Debug, Default)]
pub struct MemoryTable {
    records: BTreeMap<ObjectKey, RouteRecord>,
}

impl MemoryTable {
    /// The record of `key`, if any.
    pub fn load(&self, key: ObjectKey) -> Option<RouteRecord> {
        self.records.get(&key).cloned()
    }

    /// Applies `write` if its condition holds. CAS versions start at 1 and
    /// grow by one per applied write of a key.
    pub fn write(&mut self, write: &RecordWrite) -> WriteOutcome {
        let current = self.records.get(&write.key);
        let next = match (write.condition, current) {
            (WriteCondition::Absent, None) => CasVersion(1),
            (WriteCondition::CasEquals(expected), Some(record))
                if record.cas_version == expected =>
            {
                CasVersion(expected.0 + 1)
            }
            (_, current) => return WriteOutcome::Conflict(current.cloned()),
        };
        self.records.insert(write.key, write.applied(next));
        WriteOutcome::Applied(next)
    }

    /// How many records the table holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the table holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// Membership rows by node id, under the same CAS rule as the records,
/// with the table version and the tombstones of deleted rows.
#[derive(Clone, Debug, Default)]
pub struct MemberTable {
    rows: BTreeMap<NodeId, Stored>,
    /// The table version: 0 until the first change.
    version: TableVersion,
    counts: RowCounts,
}

/// Rows a membership table returned and wrote, the version row included:
/// what a benchmark counts of the store's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowCounts {
    /// Rows returned: the version row of a poll, each row a poll, a page
    /// or a refusal returns, each deletion a page reports.
    pub rows_read: u64,
    /// Rows written: each applied write or deletion, and each move of the
    /// version row.
    pub rows_written: u64,
}

#[derive(Clone, Debug)]
struct Stored {
    row: MemberRow,
    /// The table version the row's last change made.
    changed: TableVersion,
    /// Deleted: only the tombstone's numbers (node id, incarnation,
    /// version) are still meaningful.
    deleted: bool,
}

impl Stored {
    /// The row as the node's own reads see it.
    fn visible(&self) -> MemberRow {
        if self.deleted {
            tombstone(self.row.node_id, self.row.incarnation, self.row.version)
        } else {
            self.row.clone()
        }
    }
}

impl MemberTable {
    /// Every live row, by node id (tombstones skipped): for tests and the
    /// simulator's checks, not counted.
    pub fn list(&self) -> Vec<MemberRow> {
        self.rows
            .values()
            .filter(|stored| !stored.deleted)
            .map(|stored| stored.row.clone())
            .collect()
    }

    /// The row of `node_id` as its node's own reads see it, if any.
    pub fn get(&self, node_id: NodeId) -> Option<MemberRow> {
        self.rows.get(&node_id).map(Stored::visible)
    }

    /// The table version now.
    pub fn version(&self) -> TableVersion {
        self.version
    }

    /// What this table returned and wrote so far.
    pub fn counts(&self) -> RowCounts {
        self.counts
    }

    /// The table version and the rows of `nodes` that exist (tombstones as
    /// their node's own reads see them), at most `POLL_ROWS_MAX`.
    pub fn poll(&mut self, nodes: &[NodeId]) -> MemberPoll {
        let rows: Vec<MemberRow> = nodes
            .iter()
            .take(POLL_ROWS_MAX)
            .filter_map(|node| self.get(*node))
            .collect();
        self.counts.rows_read += 1 + rows.len() as u64;
        MemberPoll {
            version: self.version,
            rows,
        }
    }

    /// The rows changed after `since` with node ids above `after`, by node
    /// id, at most `MEMBERS_PAGE_MAX` entries; since version 0, every live
    /// row and no deletion.
    pub fn list_page(&mut self, since: TableVersion, after: NodeId) -> MemberPage {
        let mut page = MemberPage::default();
        let range = (std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded);
        for stored in self.rows.range(range).map(|(_, stored)| stored) {
            if stored.changed <= since || (stored.deleted && since == TableVersion(0)) {
                continue;
            }
            if page.rows.len() + page.deleted.len() == MEMBERS_PAGE_MAX {
                page.more = true;
                break;
            }
            if stored.deleted {
                page.deleted.push(stored.row.node_id);
            } else {
                page.rows.push(stored.row.clone());
            }
        }
        self.counts.rows_read += (page.rows.len() + page.deleted.len()) as u64;
        page
    }

    /// Applies `write` if its condition holds; a change (see `is_change`)
    /// moves the table version with it. A write on a tombstone's version
    /// brings the row back.
    pub fn write(&mut self, write: &MemberWrite) -> MemberOutcome {
        let node_id = write.row.node_id;
        let current = self.rows.get(&node_id);
        let holds = match (write.condition, current) {
            (MemberCondition::Absent, None) => true,
            (MemberCondition::VersionEquals(expected), Some(stored)) => {
                stored.row.version == expected
            }
            _ => false,
        };
        if !holds {
            let current = current.map(Stored::visible);
            self.counts.rows_read += u64::from(current.is_some());
            return MemberOutcome::Conflict(current);
        }
        let version: MemberVersion = write.next_version();
        let change =
            current.is_none_or(|stored| stored.deleted || is_change(&stored.row, &write.row));
        let changed = match current {
            Some(stored) if !change => stored.changed,
            _ => self.bump(),
        };
        self.counts.rows_written += 1;
        let stored = Stored {
            row: write.applied(version),
            changed,
            deleted: false,
        };
        self.rows.insert(node_id, stored);
        MemberOutcome::Applied(version)
    }

    /// Deletes the row of `node_id` if it is `left` at version `expected`,
    /// keeping its tombstone at the next version; moves the table version.
    pub fn delete(&mut self, node_id: NodeId, expected: MemberVersion) -> MemberOutcome {
        let holds = self.rows.get(&node_id).is_some_and(|stored| {
            !stored.deleted
                && stored.row.version == expected
                && stored.row.state == MemberState::Left
        });
        if !holds {
            let current = self.get(node_id);
            self.counts.rows_read += u64::from(current.is_some());
            return MemberOutcome::Conflict(current);
        }
        let changed = self.bump();
        let version = MemberVersion(expected.0.wrapping_add(1));
        if let Some(stored) = self.rows.get_mut(&node_id) {
            stored.row = tombstone(node_id, stored.row.incarnation, version);
            stored.changed = changed;
            stored.deleted = true;
        }
        self.counts.rows_written += 1;
        MemberOutcome::Applied(version)
    }

    fn bump(&mut self) -> TableVersion {
        self.version = TableVersion(self.version.0 + 1);
        self.counts.rows_written += 1;
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::RouteVersion;

    fn write(condition: WriteCondition, owner: u64) -> RecordWrite {
        RecordWrite {
            key: ObjectKey::new(1, 0, 7),
            condition,
            owner_node: NodeId(owner),
            owner_incarnation: 1,
            route_version: RouteVersion(1),
            save_timepoint_ms: 0,
            state: vec![owner as u8],
        }
    }

    #[test]
    fn insert_if_absent_has_one_winner() {
        let mut table = MemoryTable::default();
        assert_eq!(
            table.write(&write(WriteCondition::Absent, 1)),
            WriteOutcome::Applied(CasVersion(1))
        );
        match table.write(&write(WriteCondition::Absent, 2)) {
            WriteOutcome::Conflict(Some(record)) => assert_eq!(record.owner_node, NodeId(1)),
            other => panic!("second insert must conflict, got {other:?}"),
        }
    }

    #[test]
    fn stale_cas_is_rejected_with_the_current_record() {
        let mut table = MemoryTable::default();
        table.write(&write(WriteCondition::Absent, 1));
        assert_eq!(
            table.write(&write(WriteCondition::CasEquals(CasVersion(1)), 2)),
            WriteOutcome::Applied(CasVersion(2))
        );
        match table.write(&write(WriteCondition::CasEquals(CasVersion(1)), 3)) {
            WriteOutcome::Conflict(Some(record)) => {
                assert_eq!(record.cas_version, CasVersion(2));
                assert_eq!(record.owner_node, NodeId(2));
            }
            other => panic!("stale CAS must conflict, got {other:?}"),
        }
    }

    fn member(incarnation: u64, condition: MemberCondition) -> MemberWrite {
        MemberWrite {
            row: MemberRow {
                node_id: NodeId(3),
                incarnation,
                state: MemberState::Up,
                heartbeat: 0,
                gateway: String::new(),
                admin: String::new(),
                cluster: Vec::new(),
                core_count: 1,
                actors: Vec::new(),
                timers: None,
                version: MemberVersion(0),
            },
            condition,
        }
    }

    #[test]
    fn member_rows_follow_the_cas_rule() {
        let mut members = MemberTable::default();
        assert_eq!(
            members.write(&member(1, MemberCondition::Absent)),
            MemberOutcome::Applied(MemberVersion(1))
        );
        // A second insert and a stale update both see the current row.
        for condition in [
            MemberCondition::Absent,
            MemberCondition::VersionEquals(MemberVersion(7)),
        ] {
            match members.write(&member(2, condition)) {
                MemberOutcome::Conflict(Some(row)) => assert_eq!(row.incarnation, 1),
                other => panic!("must conflict, got {other:?}"),
            }
        }
        let next = member(2, MemberCondition::VersionEquals(MemberVersion(1)));
        assert_eq!(
            members.write(&next),
            MemberOutcome::Applied(MemberVersion(2))
        );
        assert_eq!(members.get(NodeId(3)).map(|r| r.incarnation), Some(2));
        assert_eq!(members.list().len(), 1);
    }

    fn up(node: u64, incarnation: u64, heartbeat: u64, condition: MemberCondition) -> MemberWrite {
        let mut write = member(incarnation, condition);
        write.row.node_id = NodeId(node);
        write.row.heartbeat = heartbeat;
        write
    }

    #[test]
    fn changes_move_the_table_version_and_heartbeats_do_not() {
        let mut members = MemberTable::default();
        let v = |n| MemberCondition::VersionEquals(MemberVersion(n));
        members.write(&up(1, 1, 0, MemberCondition::Absent));
        assert_eq!(members.version(), TableVersion(1));
        for beat in 1..=5 {
            members.write(&up(1, 1, beat, v(beat)));
        }
        assert_eq!(
            members.version(),
            TableVersion(1),
            "heartbeats move nothing"
        );
        let mut draining = up(1, 1, 6, v(6));
        draining.row.state = MemberState::Draining;
        members.write(&draining);
        assert_eq!(members.version(), TableVersion(2));
        let mut moved = up(1, 1, 7, v(7));
        moved.row.state = MemberState::Draining;
        moved.row.gateway = "127.0.0.9:1".to_string();
        members.write(&moved);
        assert_eq!(members.version(), TableVersion(3), "an address is a change");
        // A refused write moves nothing.
        members.write(&up(1, 9, 0, v(1)));
        assert_eq!(members.version(), TableVersion(3));
    }

    #[test]
    fn a_listing_since_a_version_holds_only_what_changed_after_it() {
        let mut members = MemberTable::default();
        let v = |n| MemberCondition::VersionEquals(MemberVersion(n));
        for node in 1..=3 {
            members.write(&up(node, 1, 0, MemberCondition::Absent));
        }
        let seen = members.version();
        members.write(&up(2, 1, 1, v(1)));
        assert!(members.list_page(seen, NodeId(0)).rows.is_empty());
        let mut left = up(3, 1, 1, v(1));
        left.row.state = MemberState::Left;
        members.write(&left);
        let page = members.list_page(seen, NodeId(0));
        assert_eq!(page.rows.len(), 1);
        assert_eq!(page.rows[0].node_id, NodeId(3));
        assert!(!page.more);
        let full = members.list_page(TableVersion(0), NodeId(0));
        assert_eq!(full.rows.len(), 3);
        assert_eq!(members.list_page(TableVersion(0), NodeId(2)).rows.len(), 1);
    }

    #[test]
    fn pages_stop_at_the_page_bound_and_go_on_after_it() {
        let mut members = MemberTable::default();
        let total = MEMBERS_PAGE_MAX as u64 + 1;
        for node in 1..=total {
            members.write(&up(node, 1, 0, MemberCondition::Absent));
        }
        let first = members.list_page(TableVersion(0), NodeId(0));
        assert_eq!(first.rows.len(), MEMBERS_PAGE_MAX);
        assert!(first.more);
        assert_eq!(first.last(), Some(NodeId(MEMBERS_PAGE_MAX as u64)));
        let second = members.list_page(TableVersion(0), first.last().unwrap());
        assert_eq!(second.rows.len(), 1);
        assert!(!second.more);
        assert_eq!(members.list().len() as u64, total, "no cap on members");
    }

    #[test]
    fn a_deleted_row_leaves_a_tombstone_that_no_version_or_incarnation_repeats() {
        let mut members = MemberTable::default();
        let v = |n| MemberCondition::VersionEquals(MemberVersion(n));
        members.write(&up(1, 1, 0, MemberCondition::Absent));
        // Only a `left` row at the version named is deleted.
        assert!(matches!(
            members.delete(NodeId(1), MemberVersion(1)),
            MemberOutcome::Conflict(Some(_))
        ));
        let mut left = up(1, 1, 1, v(1));
        left.row.state = MemberState::Left;
        members.write(&left);
        let seen = members.version();
        assert!(matches!(
            members.delete(NodeId(1), MemberVersion(1)),
            MemberOutcome::Conflict(Some(_))
        ));
        assert_eq!(
            members.delete(NodeId(1), MemberVersion(2)),
            MemberOutcome::Applied(MemberVersion(3))
        );
        assert_eq!(members.version(), TableVersion(seen.0 + 1));
        assert!(members.list().is_empty());
        let page = members.list_page(seen, NodeId(0));
        assert_eq!(page.deleted, vec![NodeId(1)]);
        assert!(members
            .list_page(TableVersion(0), NodeId(0))
            .deleted
            .is_empty());
        // The node's own read sees `left` at the tombstone's version.
        let own = members.poll(&[NodeId(1)]).rows;
        assert_eq!(own, vec![tombstone(NodeId(1), 1, MemberVersion(3))]);
        // A frozen process's CAS on a version it knew never applies again,
        // and an insert as if the id were new is refused.
        for stale in [1, 2] {
            assert!(matches!(
                members.write(&up(1, 1, 9, v(stale))),
                MemberOutcome::Conflict(Some(_))
            ));
        }
        assert!(matches!(
            members.write(&up(1, 1, 0, MemberCondition::Absent)),
            MemberOutcome::Conflict(Some(_))
        ));
        // A start takes the next incarnation on the tombstone's version.
        assert_eq!(
            members.write(&up(1, 2, 0, v(3))),
            MemberOutcome::Applied(MemberVersion(4))
        );
        assert_eq!(members.list().len(), 1);
    }
}
