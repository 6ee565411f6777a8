//! The synchronous heart of the in-memory store: one map and the CAS rule.
//! The memory backend wraps it with fault injection, and the deterministic
//! simulator drives it directly.

use std::collections::BTreeMap;

use wire::ObjectKey;

use super::record::{CasVersion, RecordWrite, RouteRecord, WriteCondition, WriteOutcome};

/// Records by key. A `BTreeMap` keeps iteration order deterministic, which
/// the simulator relies on to replay a seed exactly.
#[derive(Clone, Debug, Default)]
pub struct MemoryTable {
    records: BTreeMap<ObjectKey, RouteRecord>,
}

impl MemoryTable {
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

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{NodeId, RouteVersion};

    fn write(condition: WriteCondition, owner: u64) -> RecordWrite {
        RecordWrite {
            key: ObjectKey::new(1, 0, 7),
            condition,
            owner_node: NodeId(owner),
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
}
