//! Unit tests of an entry's invariants: `Entry::apply_written` adopts only
//! an applied write, never lowering the route, and `Entry::check` finds
//! the states the entry's type cannot rule out.

use crate::ids::{NodeId, RouteVersion};
use crate::router::entry::{Entry, Io, PendingWrite, Writable};
use crate::router::handler::ObjectState;
use crate::router::types::Request;
use crate::store::{CasVersion, WriteOutcome};

use super::*;

fn key() -> ObjectKey {
    ObjectKey::new(7, 0, 1)
}

/// A state that holds nothing: the checks look at the entry, not at it.
struct Empty;

impl ObjectState for Empty {
    fn handle(&mut self, _key: ObjectKey, _request: &Request, _out: &mut HandlerOutput) {}

    fn encode(&self) -> Vec<u8> {
        Vec::new()
    }
}

fn copy() -> Writable {
    Writable {
        state: Box::new(Empty),
        changes_unsaved: 0,
        changes_in_write: 0,
        last_save_ms: 0,
        aside: false,
        held: Vec::new(),
        held_failed: 0,
    }
}

fn write(owner: u64, route_version: u64) -> PendingWrite {
    PendingWrite {
        owner_node: NodeId(owner),
        owner_incarnation: 1,
        route_version: RouteVersion(route_version),
        save_timepoint_ms: 5,
    }
}

#[test]
fn an_applied_write_becomes_the_route_and_supersedes_an_unknown_one() {
    let mut entry = Entry::new(0);
    entry.set_route(NodeId(2), 1, RouteVersion(3));
    entry.set_cas(CasVersion(4), 0);
    entry.write_retries = 2;
    entry.apply_written(write(1, 4), &WriteOutcome::Applied(CasVersion(5)), 10);
    assert_eq!(entry.owner_node, NodeId(1));
    assert_eq!(entry.route_version, RouteVersion(4));
    assert_eq!(entry.cas_version, Some(CasVersion(5)));
    assert_eq!(entry.last_refresh_ms, Some(10));
    assert_eq!(entry.write_retries, 0);
    entry.check(key());
}

#[test]
#[should_panic(expected = "only an applied write becomes the route")]
fn a_write_not_applied_is_never_adopted() {
    let mut entry = Entry::new(0);
    entry.apply_written(write(1, 1), &WriteOutcome::Indeterminate, 10);
}

#[test]
#[should_panic(expected = "never below the known one")]
fn an_applied_write_never_lowers_the_route_version() {
    let mut entry = Entry::new(0);
    entry.set_route(NodeId(2), 1, RouteVersion(3));
    entry.apply_written(write(1, 2), &WriteOutcome::Applied(CasVersion(9)), 10);
}

#[test]
#[should_panic(expected = "moves the CAS version on")]
fn an_applied_write_moves_the_cas_version_on() {
    let mut entry = Entry::new(0);
    entry.set_cas(CasVersion(4), 0);
    entry.apply_written(write(1, 1), &WriteOutcome::Applied(CasVersion(4)), 10);
}

#[test]
#[should_panic(expected = "always knows its record's CAS version")]
fn check_finds_a_copy_without_a_record() {
    let mut entry = Entry::new(0);
    entry.object = Some(copy());
    entry.check(key());
}

#[test]
#[should_panic(expected = "requests wait for no IO")]
fn check_finds_requests_waiting_for_no_io() {
    let mut entry = Entry::new(0);
    entry.io_waiters.push_back(crate::router::entry::Waiter {
        head: RouterHead::local(key(), NodeId(1)),
        request: Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq: 1,
            },
            op: 0,
            body: Vec::new(),
            client: None,
            needs_reply: true,
            keyed: false,
        },
        repairs: 0,
        fresh_pull: false,
        send_attempts: 0,
        unreachable: None,
    });
    entry.check(key());
}

#[test]
#[should_panic(expected = "IO save with copy false")]
fn check_finds_a_save_without_a_copy() {
    let mut entry = Entry::new(0);
    entry.io = Some(Box::new(Io::Save {
        degrade: false,
        write: write(1, 1),
    }));
    entry.check(key());
}

#[test]
#[should_panic(expected = "IO claim with copy true")]
fn check_finds_a_claim_beside_a_copy() {
    let mut entry = Entry::new(0);
    entry.set_cas(CasVersion(1), 0);
    entry.object = Some(copy());
    entry.io = Some(Box::new(Io::Claim {
        write: write(1, 1),
        state: Box::new(Empty),
    }));
    entry.check(key());
}
