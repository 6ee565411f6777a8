//! What a store migrated to the schema whose member rows carry timers does
//! with a row kept from before (read without timers): a write of it with
//! timers applies, is a membership change, and is read back whole. The
//! SQLite and PostgreSQL migration tests share it.

use futures_lite::future::block_on;
use routerd::store::{
    MemberCondition, MemberOutcome, MemberRow, MemberTimers, MemberVersion, MemberWrite, NodeId,
    Store, TableVersion,
};

/// Writes `row` (as polled, at table version `since`) back with timers and
/// one more heartbeat; returns its new version.
pub fn timers_are_written_as_a_change(
    store: &Store,
    row: MemberRow,
    since: TableVersion,
) -> MemberVersion {
    assert_eq!(row.timers, None, "a row from before the timers has none");
    let timers = MemberTimers {
        heartbeat_interval_ms: 500,
        fence_after_ms: 2000,
        down_after_ms: 4000,
    };
    let next = MemberVersion(row.version.0 + 1);
    let timed = MemberWrite {
        condition: MemberCondition::VersionEquals(row.version),
        row: MemberRow {
            heartbeat: row.heartbeat + 1,
            timers: Some(timers),
            ..row
        },
    };
    assert_eq!(
        block_on(store.write_member(timed)).expect("write"),
        MemberOutcome::Applied(next)
    );
    let changed = block_on(store.list_members(since, NodeId(0))).expect("changes");
    assert_eq!(changed.rows.len(), 1, "timers are a change");
    assert_eq!(changed.rows[0].timers, Some(timers));
    next
}
