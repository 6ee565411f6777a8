//! Paired assertions on the store's CAS paths, whichever the backend: an
//! answer held to the condition its write was sent under. A write applied
//! has the version its condition names plus one (1 for an insert); one
//! refused shows a row whose version is not the one it was conditioned
//! on (else the backend refused a write whose condition held); a poll's
//! table version is never below one read before the poll was sent.
//! `Store` runs them on every answer: the membership ones always (they are
//! few and cheap), the records' in debug builds (a batch's conditions are
//! copied to check them).

use std::sync::atomic::{AtomicU64, Ordering};

use super::membership::{MemberCondition, MemberOutcome, MemberVersion, TableVersion};
use super::record::{WriteCondition, WriteOutcome};

/// A batch of record writes sent under `conditions`, answered `outcomes`.
pub(super) fn record_outcomes(conditions: &[WriteCondition], outcomes: &[WriteOutcome]) {
    assert_eq!(
        conditions.len(),
        outcomes.len(),
        "a batch answers one outcome per write"
    );
    for (condition, outcome) in conditions.iter().zip(outcomes) {
        match (condition, outcome) {
            (_, WriteOutcome::Applied(version)) => assert_eq!(
                *version,
                condition.applied_version(),
                "a write under {condition:?} applied at {version:?}, not its condition + 1"
            ),
            (WriteCondition::CasEquals(expected), WriteOutcome::Conflict(Some(current))) => {
                assert_ne!(
                    current.cas_version, *expected,
                    "a write on {expected:?} refused though the record stands there"
                )
            }
            _ => {}
        }
    }
}

/// A membership write that applies as `next`, answered `outcome`.
pub(super) fn member_outcome(
    condition: MemberCondition,
    next: MemberVersion,
    outcome: &MemberOutcome,
) {
    match (condition, outcome) {
        (_, MemberOutcome::Applied(version)) => assert_eq!(
            *version, next,
            "a member write under {condition:?} applied at {version:?}, not its condition + 1"
        ),
        (MemberCondition::VersionEquals(expected), MemberOutcome::Conflict(Some(row))) => {
            assert_ne!(
                row.version, expected,
                "a member write on {expected:?} refused though the row stands there"
            )
        }
        _ => {}
    }
}

/// A deletion of the row at `expected`, answered `outcome`: its tombstone
/// takes the next version. (A refusal may show the row at `expected`: a
/// row that is not `left` is not deleted.)
pub(super) fn deletion_outcome(expected: MemberVersion, outcome: &MemberOutcome) {
    if let MemberOutcome::Applied(version) = outcome {
        assert_eq!(
            version.0,
            expected.0.wrapping_add(1),
            "a deletion at {expected:?} left its tombstone at {version:?}, not the next version"
        );
    }
}

/// The highest table version a poll through this store returned.
#[derive(Debug, Default)]
pub(super) struct TableVersionSeen(AtomicU64);

impl TableVersionSeen {
    /// The version read so far, before a poll is sent.
    pub fn before(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// A poll sent after `before` was read returned `polled`: it may not
    /// be below it (a store's reads are linearizable).
    pub fn polled(&self, before: u64, polled: TableVersion) {
        debug_assert!(
            polled.0 >= before,
            "a poll read table version {} after {before} was read: it went back",
            polled.0
        );
        self.0.fetch_max(polled.0, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CasVersion;

    #[test]
    fn answers_that_follow_their_condition_pass() {
        let conditions = [
            WriteCondition::Absent,
            WriteCondition::CasEquals(CasVersion(4)),
        ];
        let outcomes = [
            WriteOutcome::Applied(CasVersion(1)),
            WriteOutcome::Applied(CasVersion(5)),
        ];
        record_outcomes(&conditions, &outcomes);
        let seen = TableVersionSeen::default();
        seen.polled(seen.before(), TableVersion(3));
        seen.polled(seen.before(), TableVersion(3));
        deletion_outcome(MemberVersion(2), &MemberOutcome::Applied(MemberVersion(3)));
    }

    #[test]
    #[should_panic(expected = "not its condition + 1")]
    fn a_write_applied_at_another_version_fails() {
        let conditions = [WriteCondition::CasEquals(CasVersion(4))];
        record_outcomes(&conditions, &[WriteOutcome::Applied(CasVersion(4))]);
    }

    #[test]
    #[should_panic(expected = "not its condition + 1")]
    fn a_member_write_applied_at_another_version_fails() {
        let condition = MemberCondition::VersionEquals(MemberVersion(2));
        let outcome = MemberOutcome::Applied(MemberVersion(7));
        member_outcome(condition, MemberVersion(3), &outcome);
    }

    #[test]
    #[should_panic(expected = "it went back")]
    fn a_table_version_that_goes_back_fails() {
        let seen = TableVersionSeen::default();
        seen.polled(seen.before(), TableVersion(5));
        seen.polled(seen.before(), TableVersion(4));
    }
}
