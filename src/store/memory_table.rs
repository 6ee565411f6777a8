//! The synchronous heart of the in-memory store: the records and the
//! membership rows, each with its CAS rule. The memory backend wraps them
//! with fault injection, and the deterministic simulator drives them
//! directly.

use std::collections::BTreeMap;

use wire::ObjectKey;

use super::membership::{
    MemberCondition, MemberOutcome, MemberRow, MemberVersion, MemberWrite, MEMBERS_MAX,
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

/// Membership rows by node id, under the same CAS rule as the records.
#[derive(Clone, Debug, Default)]
pub struct MemberTable {
    rows: BTreeMap<NodeId, MemberRow>,
}

impl MemberTable {
    /// Every row, by node id, at most `MEMBERS_MAX`.
    pub fn list(&self) -> Vec<MemberRow> {
        self.rows.values().take(MEMBERS_MAX).cloned().collect()
    }

    /// The row of `node_id`, if any.
    pub fn get(&self, node_id: NodeId) -> Option<&MemberRow> {
        self.rows.get(&node_id)
    }

    /// Applies `write` if its condition holds. A new row past `MEMBERS_MAX`
    /// rows is refused as a conflict with no current row.
    pub fn write(&mut self, write: &MemberWrite) -> MemberOutcome {
        let node_id = write.row.node_id;
        let current = self.rows.get(&node_id);
        let holds = match (write.condition, current) {
            (MemberCondition::Absent, None) => self.rows.len() < MEMBERS_MAX,
            (MemberCondition::VersionEquals(expected), Some(row)) => row.version == expected,
            _ => false,
        };
        if !holds {
            return MemberOutcome::Conflict(current.cloned());
        }
        let version: MemberVersion = write.next_version();
        self.rows.insert(node_id, write.applied(version));
        MemberOutcome::Applied(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::membership::MemberState;
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
}
