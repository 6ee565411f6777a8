//! The batch planner and the outcome folding, without a server.

use super::*;
use crate::store::membership::{MemberCondition, MemberRow, MemberState, MemberVersion};
use crate::store::record::{CasVersion, NodeId, RouteVersion};
use wire::ObjectKey;

fn lock(id: u64) -> LockKey {
    LockKey::Route(key_values(ObjectKey::new(1, 0, id)))
}

#[test]
fn members_lock_before_routes_and_keys_in_order() {
    let mut keys = vec![lock(2), LockKey::Member(9), lock(1), LockKey::Member(1)];
    keys.sort();
    assert_eq!(
        keys,
        vec![LockKey::Member(1), LockKey::Member(9), lock(1), lock(2)]
    );
    assert!(LockKey::Route([0, 5, 0]) < LockKey::Route([1, 0, 0]));
    // Object ids are stored bit for bit in a signed BIGINT, and the
    // lock statement sorts them as PostgreSQL does: the upper half of
    // u64 first.
    assert!(lock(u64::MAX) < lock(0));
    assert!(lock(1 << 63) < lock(u64::MAX));
}

fn route(id: u64, condition: WriteCondition) -> RecordWrite {
    RecordWrite {
        key: ObjectKey::new(1, 0, id),
        condition,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: 0,
        state: vec![id as u8],
    }
}

fn member(node: u64) -> MemberWrite {
    MemberWrite {
        condition: MemberCondition::Absent,
        row: MemberRow {
            node_id: NodeId(node),
            incarnation: 1,
            state: MemberState::Joining,
            heartbeat: 0,
            gateway: String::new(),
            admin: String::new(),
            cluster: Vec::new(),
            core_count: 1,
            actors: Vec::new(),
            timers: None,
            version: MemberVersion(0),
        },
    }
}

#[test]
fn runs_hold_consecutive_writes_of_one_kind_in_lock_order() {
    let update = WriteCondition::CasEquals(CasVersion(3));
    let ops = [
        Op::Write(vec![route(4, update), route(3, WriteCondition::Absent)]),
        Op::WriteMember(Box::new(member(7))),
        Op::Write(vec![route(1, update), route(2, update)]),
        Op::Load(ObjectKey::new(1, 0, 9)),
    ];
    let planned = plan(ops.iter());
    let order: Vec<LockKey> = planned.iter().map(|planned| planned.lock).collect();
    assert_eq!(
        order,
        vec![LockKey::Member(7), lock(1), lock(2), lock(3), lock(4)]
    );
    let steps = steps(&planned, 0..planned.len());
    let shape: Vec<(Option<bool>, Range<usize>)> = steps
        .iter()
        .map(|step| match step {
            Step::Member(index, _) | Step::Delete(index, ..) => (None, *index..*index + 1),
            Step::Routes { update, range, .. } => (Some(*update), range.clone()),
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (None, 0..1),
            (Some(true), 1..3),
            (Some(false), 3..4),
            (Some(true), 4..5),
        ]
    );
}

#[test]
fn a_run_answers_each_write_from_the_keys_written() {
    let update = WriteCondition::CasEquals(CasVersion(3));
    let ops = [Op::Write(vec![
        route(1, update),
        route(2, update),
        route(u64::MAX, update),
    ])];
    let planned = plan(ops.iter());
    let key = |id: u64| Some(key_values(ObjectKey::new(1, 0, id)));
    assert_eq!(
        written_in_run(&planned, [key(2), key(u64::MAX)]),
        vec![Some(true), Some(false), Some(true)]
    );
    assert_eq!(
        written_in_run(&planned, []),
        vec![Some(false), Some(false), Some(false)]
    );
    // An answer the statement cannot have given leaves the run unknown.
    for answer in [vec![key(2), key(2)], vec![key(5)], vec![None]] {
        assert_eq!(written_in_run(&planned, answer), vec![None, None, None]);
    }
}
