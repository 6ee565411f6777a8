//! Writes whose outcome is unknown (Indeterminate), several in a row: a
//! conflict with the record any of them left is the copy's own, never
//! another node's, for a save, a fenced copy's write-back, a shutdown's
//! release and a transfer's removal; a removal of unknown outcome keeps
//! its copy until it settles; a route sync never moves an entry's route
//! under its own write in flight.

use super::*;

fn stored_value(h: &Harness) -> Option<i64> {
    counter_value(&h.table.load(KEY).expect("record").state)
}

/// An increment of KEY entering `node` at `now_ms`, run at once.
fn incr_at(h: &mut Harness, node: u64, now_ms: u64, delta: i64) -> RequestId {
    let id = h.request_key(node, now_ms, KEY, OP_ADD, add(delta));
    settle_at(h, node, now_ms);
    id
}

/// The one store write among `effects`, and the other effects.
fn the_write(effects: Vec<Effect>) -> (StoreToken, StoreOp, Vec<Effect>) {
    let mut write = None;
    let mut others = Vec::new();
    for effect in effects {
        match effect {
            Effect::Store { token, op } => {
                assert!(write.is_none(), "one write at a time");
                write = Some((token, op));
            }
            other => others.push(other),
        }
    }
    let (token, op) = write.expect("a store write");
    (token, op, others)
}

/// How the store treats one write in these tests.
#[derive(Clone, Copy)]
enum Fate {
    /// Applied, but the answer is lost: Indeterminate.
    AppliedUnanswered,
    /// Timed out and refused: Indeterminate, nothing applied.
    Lost,
}

/// Answers the one write `node` has in flight by `fate` at `now_ms`;
/// returns the write retry it armed.
fn unknown(h: &mut Harness, node: u64, now_ms: u64, fate: Fate) -> (u64, Timer) {
    let (token, op, _) = the_write(h.core(node).drain_effects().collect());
    if let Fate::AppliedUnanswered = fate {
        let applied = answer(&mut h.table, op);
        assert!(
            matches!(applied, StoreReply::Written(WriteOutcome::Applied(_))),
            "{applied:?}"
        );
    }
    let indeterminate = StoreReply::Written(WriteOutcome::Indeterminate);
    h.core(node).on_store_reply(now_ms, token, indeterminate);
    let effects: Vec<Effect> = h.core(node).drain_effects().collect();
    armed_write_retry(&effects).expect("a retry is armed")
}

/// A periodic save of node 1's copy, then `fates` for it and each retry in
/// turn, with an increment between attempts; then the last retry meets
/// the store. Returns the time it ran at.
fn saves_in_a_row(h: &mut Harness, fates: &[Fate]) -> u64 {
    let mut now = config().object_save_interval_ms;
    h.core(1).on_timer(now, Timer::Sweep);
    for (n, fate) in fates.iter().enumerate() {
        let (at_ms, timer) = unknown(h, 1, now + 1, *fate);
        incr_at(h, 1, at_ms - 1, 10 + n as i64);
        h.core(1).on_timer(at_ms, timer);
        now = at_ms;
    }
    settle_at(h, 1, now);
    now
}

fn assert_kept_and_saved(h: &mut Harness, expected: i64) {
    let counters = h.core(1).counters();
    assert_eq!(counters.unsaved_objects_dropped_total, 0);
    assert_eq!(counters.unsaved_changes_dropped_total, 0);
    assert!(h.core(1).entries().all(|view| view.writable), "kept");
    assert_eq!(stored_value(h), Some(expected));
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId(1));
}

#[test]
fn two_indeterminate_saves_in_a_row_keep_the_copy_when_the_first_applied() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    // W1 applies unanswered; its retry W2 is lost; W3 meets W1's record.
    saves_in_a_row(&mut h, &[Fate::AppliedUnanswered, Fate::Lost]);
    assert_kept_and_saved(&mut h, 5 + 1 + 10 + 11);
}

#[test]
fn three_indeterminate_saves_in_a_row_keep_the_copy_when_the_first_applied() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    let fates = [Fate::AppliedUnanswered, Fate::Lost, Fate::Lost];
    saves_in_a_row(&mut h, &fates);
    assert_kept_and_saved(&mut h, 5 + 1 + 10 + 11 + 12);
}

#[test]
fn indeterminate_saves_where_a_later_one_applied_keep_the_copy() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    let fates = [Fate::Lost, Fate::AppliedUnanswered, Fate::Lost];
    saves_in_a_row(&mut h, &fates);
    assert_kept_and_saved(&mut h, 5 + 1 + 10 + 11 + 12);
}

/// More unknown outcomes in a row than the entry remembers with their
/// content (a copy changed between each): the first applied, and its
/// record is still known for the copy's own, so nothing is dropped.
#[test]
fn more_indeterminate_saves_than_are_remembered_keep_the_copy_when_the_first_applied() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    let lost = crate::router::entry::UNKNOWN_WRITES_MAX + 3;
    let mut fates = vec![Fate::AppliedUnanswered];
    fates.extend(std::iter::repeat_n(Fate::Lost, lost));
    saves_in_a_row(&mut h, &fates);
    let increments: i64 = (0..=lost as i64).map(|n| 10 + n).sum();
    assert_kept_and_saved(&mut h, 5 + 1 + increments);
}

/// An idle object's degrade that the store refused (nothing applied: the
/// store was down, or the state is over `store.state_max_bytes`) gave no
/// ownership up: the copy goes on serving at once.
#[test]
fn a_degrade_the_store_refused_keeps_the_copy_serving() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    let now = config().object_free_timeout_ms;
    h.core(1).on_timer(now, Timer::Sweep);
    let (token, op, _) = the_write(h.core(1).drain_effects().collect());
    assert!(matches!(op, StoreOp::Write(_)), "{op:?}");
    let refused = StoreReply::Failed(StoreFailure::Failed);
    h.core(1).on_store_reply(now, token, refused);
    let id = h.request_key(1, now + 1, KEY, OP_ADD, add(1));
    let effects = settle_at(&mut h, 1, now + 1);
    assert_eq!(replies(&effects), vec![(id, Ok(add(6)))]);
    assert!(h.core(1).entries().all(|view| view.writable));
}

/// A degrade refused after an earlier attempt of unknown outcome: that
/// attempt may still apply (late) and give ownership up, so the copy
/// serves nothing until a retry tells.
#[test]
fn a_degrade_refused_after_an_unknown_one_keeps_the_copy_blocked() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    let now = config().object_free_timeout_ms;
    h.core(1).on_timer(now, Timer::Sweep);
    let (at_ms, timer) = unknown(&mut h, 1, now + 1, Fate::Lost);
    h.core(1).on_timer(at_ms, timer);
    let (token, op, _) = the_write(h.core(1).drain_effects().collect());
    assert!(matches!(op, StoreOp::Write(_)), "{op:?}");
    h.core(1)
        .on_store_reply(at_ms, token, StoreReply::Failed(StoreFailure::Busy));
    let id = h.request_key(1, at_ms + 1, KEY, OP_ADD, add(1));
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    assert!(
        !replies(&effects)
            .iter()
            .any(|(answered, outcome)| *answered == id && outcome.is_ok()),
        "served while an earlier degrade may still apply: {effects:?}"
    );
}

#[test]
fn a_save_conflicting_with_another_nodes_record_still_drops_after_unknown_ones() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    let now = config().object_save_interval_ms;
    h.core(1).on_timer(now, Timer::Sweep);
    let (at_ms, timer) = unknown(&mut h, 1, now + 1, Fate::Lost);
    take_record_as(&mut h, 3);
    h.core(1).on_timer(at_ms, timer);
    settle_at(&mut h, 1, at_ms);
    assert_eq!(h.core(1).counters().unsaved_objects_dropped_total, 1);
    assert!(h.core(1).entries().all(|view| !view.writable));
}

/// A held change whose write and its retry both end unknown (the first
/// applied, unanswered) is answered UNAVAILABLE at the retry's failure (as
/// `an_on_write_answer_waits_for_one_retry_of_its_write_never_for_a_backoff`
/// shows); the third write meets the copy's own record, saves the change,
/// and answers nothing again.
#[test]
fn on_write_changes_held_through_two_indeterminate_saves_are_saved_by_the_third() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let held = h.request_key(1, 100, KEY, OP_ADD, add(1));
    h.core(1).on_flush(100);
    let (at_ms, timer) = unknown(&mut h, 1, 101, Fate::AppliedUnanswered);
    h.core(1).on_timer(at_ms, timer);
    let (token, _, _) = the_write(h.core(1).drain_effects().collect());
    let indeterminate = StoreReply::Written(WriteOutcome::Indeterminate);
    h.core(1).on_store_reply(at_ms + 1, token, indeterminate);
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    let unavailable: Outcome = Err(ErrorCode::Unavailable.into());
    assert_eq!(replies(&effects), vec![(held, unavailable)]);
    let (at_ms, timer) = armed_write_retry(&effects).expect("a retry is armed");
    h.core(1).on_timer(at_ms, timer);
    let effects = settle_at(&mut h, 1, at_ms);
    assert_eq!(replies(&effects), vec![]);
    assert_kept_and_saved(&mut h, 6);
}

#[test]
fn a_readopt_after_two_indeterminate_attempts_meets_its_own_record() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    h.core(1).fence(200);
    h.core(1).rejoin(300, 2, 60_000);
    let (at_ms, timer) = unknown(&mut h, 1, 301, Fate::AppliedUnanswered);
    h.core(1).on_timer(at_ms, timer);
    let (at_ms, timer) = unknown(&mut h, 1, at_ms + 1, Fate::Lost);
    h.core(1).on_timer(at_ms, timer);
    settle_at(&mut h, 1, at_ms);
    assert_eq!(h.core(1).counters().unsaved_changes_dropped_total, 0);
    assert!(h.core(1).entries().all(|v| v.writable && !v.aside));
    let record = h.table.load(KEY).expect("record");
    assert_eq!(
        (record.owner_node, record.owner_incarnation),
        (NodeId(1), 2)
    );
    assert_eq!(counter_value(&record.state), Some(6));
}

#[test]
fn a_shutdown_release_after_two_indeterminate_attempts_meets_its_own_record() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    incr_at(&mut h, 1, 100, 1);
    h.core(1).shutdown(200, 60_000);
    let mut now = 201;
    for applied in [true, false] {
        let (token, op, _) = the_write(h.core(1).drain_effects().collect());
        let StoreOp::WriteBatch(writes) = op else {
            panic!("a release batch: {op:?}");
        };
        if applied {
            for write in &writes {
                assert!(matches!(h.table.write(write), WriteOutcome::Applied(_)));
            }
        }
        let outcomes = vec![WriteOutcome::Indeterminate; writes.len()];
        h.core(1)
            .on_store_reply(now, token, StoreReply::WrittenBatch(outcomes));
        let effects: Vec<Effect> = h.core(1).drain_effects().collect();
        let (at_ms, timer) = armed_write_retry(&effects).expect("a retry is armed");
        h.core(1).on_timer(at_ms, timer);
        now = at_ms + 1;
    }
    settle_at(&mut h, 1, now);
    assert!(h.core(1).is_shutdown_complete());
    assert_eq!(h.core(1).counters().unsaved_changes_dropped_total, 0);
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId::NONE);
    assert_eq!(counter_value(&record.state), Some(6));
}

/// The owner and target of a transfer of KEY between two nodes whose
/// removal write is in flight, after an increment (the value is 6).
fn removal_in_flight(h: &mut Harness) -> (u64, u64) {
    let owner = claim_on_default(h, 2);
    incr_at(h, owner, 100, 1);
    let target = 3 - owner;
    h.core(owner)
        .transfer(200, KEY, NodeId(target), true)
        .expect("transfer starts");
    (owner, target)
}

/// The target confirms the transfer `effects` carry; returns its value.
fn confirm(h: &mut Harness, owner: u64, target: u64, effects: &[Effect], now: u64) -> i64 {
    let transfer = sent_transfer(effects);
    h.core(target)
        .on_router_transfer(now, NodeId(owner), transfer);
    settle_at(h, target, now);
    let state = h.core(target).object_state(KEY).expect("the target serves");
    counter_value(&state).expect("a counter")
}

fn transfers_done(effects: &[Effect]) -> Vec<TransferOutcome> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::TransferDone(done) => Some(done.outcome),
            _ => None,
        })
        .collect()
}

#[test]
fn a_removal_of_unknown_outcome_keeps_and_blocks_the_copy_until_its_retry_settles() {
    for fate in [Fate::AppliedUnanswered, Fate::Lost] {
        let mut h = Harness::new(2, Persist::Interval);
        let (owner, target) = removal_in_flight(&mut h);
        let (at_ms, timer) = unknown(&mut h, owner, 201, fate);
        // Kept, and its requests wait: the record may name the target.
        let view = h.core(owner).entries().next().expect("entry");
        assert!(view.writable && !view.accepting, "{view:?}");
        let waiting = h.request_key(owner, 202, KEY, OP_GET, Vec::new());
        let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
        assert!(replies(&effects).is_empty() && routed(&effects).is_empty());
        // The retry settles it: the removal applied (then or now), the
        // state goes to the target, and the waiting request follows it.
        h.core(owner).on_timer(at_ms, timer);
        let effects = settle_at(&mut h, owner, at_ms);
        assert_eq!(confirm(&mut h, owner, target, &effects, at_ms), 6);
        h.core(owner).on_transfer_ack(at_ms, KEY, 1, true);
        let effects = settle_at(&mut h, owner, at_ms);
        assert_eq!(transfers_done(&effects), vec![TransferOutcome::Confirmed]);
        let forwarded: Vec<RequestId> = routed(&effects).iter().map(|r| r.2).collect();
        assert_eq!(forwarded, vec![waiting]);
        assert_eq!(h.core(owner).counters().unsaved_changes_dropped_total, 0);
    }
}

/// A request that meets the copy in the backoff before its removal goes
/// again brings that retry to within `object_retry_interval_ms` (the first
/// to wait does, once); if the retry has no known outcome either, every
/// request that waited for it is answered UNAVAILABLE rather than waiting
/// through the next backoff, and one that comes later hastens the next.
#[test]
fn a_request_waits_for_one_retry_of_a_removal_never_for_a_backoff() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target) = removal_in_flight(&mut h);
    let (backoff_at, _) = unknown(&mut h, owner, 201, Fate::Lost);
    // A one-way notice waits without hastening anything, or being refused.
    let notice = Request {
        id: RequestId {
            origin_node: NodeId(owner),
            seq: 1_000,
        },
        op: OP_GET,
        body: Vec::new(),
        client: None,
        needs_reply: false,
        keyed: false,
    };
    h.core(owner)
        .on_request(202, RouterHead::local(KEY, NodeId(owner)), notice);
    let first = h.request_key(owner, 202, KEY, OP_GET, Vec::new());
    let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
    let interval = config().object_retry_interval_ms;
    let (hastened_at, timer) = armed_write_retry(&effects).expect("the retry is brought near");
    assert_eq!(hastened_at, 202 + interval);
    assert!(hastened_at <= backoff_at, "{hastened_at} > {backoff_at}");
    let second = h.request_key(owner, 203, KEY, OP_GET, Vec::new());
    let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
    assert_eq!(
        armed_write_retry(&effects),
        None,
        "one hastened retry at a time"
    );
    assert!(replies(&effects).is_empty(), "{effects:?}");
    // The hastened retry has no known outcome either: both are told so,
    // and a backoff is armed again.
    h.core(owner).on_timer(hastened_at, timer);
    let (token, _, _) = the_write(h.core(owner).drain_effects().collect());
    let indeterminate = StoreReply::Written(WriteOutcome::Indeterminate);
    h.core(owner)
        .on_store_reply(hastened_at + 1, token, indeterminate);
    let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
    let unavailable: Outcome = Err(ErrorCode::Unavailable.into());
    assert_eq!(
        replies(&effects),
        vec![(first, unavailable.clone()), (second, unavailable)]
    );
    assert_eq!(h.core(owner).counters().write_retry_refusals_total, 2);
    let (next_at, next) = armed_write_retry(&effects).expect("a backoff again");
    // The notice still waits; a request that comes now hastens the next.
    h.request_key(owner, hastened_at + 2, KEY, OP_GET, Vec::new());
    let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
    assert_eq!(
        armed_write_retry(&effects).map(|(at_ms, _)| at_ms),
        Some(hastened_at + 2 + interval)
    );
    // The retry after that applies: the copy moves, nothing was dropped.
    h.core(owner).on_timer(next_at, next);
    let effects = settle_at(&mut h, owner, next_at);
    assert_eq!(confirm(&mut h, owner, target, &effects, next_at), 6);
    assert_eq!(h.core(owner).counters().unsaved_changes_dropped_total, 0);
}

#[test]
fn a_transfer_started_while_a_save_retry_waits_moves_every_change() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let target = 3 - owner;
    incr_at(&mut h, owner, 100, 1);
    let now = config().object_save_interval_ms;
    h.core(owner).on_timer(now, Timer::Sweep);
    let (at_ms, _) = unknown(&mut h, owner, now + 1, Fate::AppliedUnanswered);
    // More changes, then a transfer before the save's retry: its removal
    // meets the record the save left, which is this copy's own.
    incr_at(&mut h, owner, now + 2, 10);
    h.core(owner)
        .transfer(now + 3, KEY, NodeId(target), true)
        .expect("transfer starts");
    let effects = settle_at(&mut h, owner, now + 3);
    assert!(at_ms > now + 3);
    assert_eq!(confirm(&mut h, owner, target, &effects, now + 3), 16);
    assert_eq!(h.core(owner).counters().unsaved_changes_dropped_total, 0);
}

#[test]
fn a_removal_refused_because_another_node_owns_the_record_drops_and_counts_the_copy() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    incr_at(&mut h, owner, 100, 1);
    take_record_as(&mut h, 3);
    h.core(owner)
        .transfer(200, KEY, NodeId(3 - owner), true)
        .expect("transfer starts");
    let effects = settle_at(&mut h, owner, 200);
    assert_eq!(transfers_done(&effects), vec![TransferOutcome::NotMoved]);
    let counters = h.core(owner).counters();
    assert_eq!(counters.unsaved_objects_dropped_total, 1);
    assert_eq!(counters.unsaved_changes_dropped_total, 2);
    assert!(h.core(owner).entries().all(|view| !view.writable));
}

#[test]
fn a_route_sync_leaves_an_entry_whose_claim_is_in_flight_alone() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = default_of(2);
    h.request(owner, OP_ADD, add(5));
    // The reads, answered; then the claim, in flight.
    let (token, applied) = loop {
        let (token, op, _) = the_write(h.core(owner).drain_effects().collect());
        let reply = answer(&mut h.table, op.clone());
        if matches!(op, StoreOp::Write(_)) {
            break (token, reply);
        }
        h.core(owner).on_store_reply(0, token, reply);
    };
    // A route another node names, above the claim's, arrives first.
    h.core(owner)
        .on_router_update_sync(1, KEY, NodeId(3 - owner), 1, RouteVersion(5));
    h.core(owner).on_store_reply(2, token, applied);
    settle_at(&mut h, owner, 2);
    let view = h.core(owner).entries().next().expect("entry");
    assert!(view.writable, "{view:?}");
    assert_eq!(view.route_version, RouteVersion(1));
}

/// An on_write answer waits for one retry of the write covering it, never
/// for the backoffs after: the write that follows its write's failure is
/// that retry (here a later increment's flush starts it), and when it
/// fails too the answer goes out UNAVAILABLE, once. The copy keeps the
/// change, and the write that applies saves it; an answer held since the
/// first failure waits for its own retry.
#[test]
fn an_on_write_answer_waits_for_one_retry_of_its_write_never_for_a_backoff() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let flush = |h: &mut Harness, now_ms: u64| {
        let effects: Vec<Effect> = h.core(1).drain_effects().collect();
        assert!(
            effects.contains(&Effect::FlushSavesAfterBatch),
            "{effects:?}"
        );
        assert!(replies(&effects).is_empty(), "held: {effects:?}");
        h.core(1).on_flush(now_ms);
    };
    let first = h.request_key(1, 10, KEY, OP_ADD, add(1));
    flush(&mut h, 10);
    unknown(&mut h, 1, 11, Fate::Lost);
    let second = h.request_key(1, 12, KEY, OP_ADD, add(2));
    flush(&mut h, 12);
    let (token, _, _) = the_write(h.core(1).drain_effects().collect());
    let indeterminate = StoreReply::Written(WriteOutcome::Indeterminate);
    h.core(1).on_store_reply(13, token, indeterminate);
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    let unavailable: Outcome = Err(ErrorCode::Unavailable.into());
    assert_eq!(replies(&effects), vec![(first, unavailable)]);
    assert_eq!(h.core(1).counters().write_retry_refusals_total, 1);
    // The retry applies: the second is answered, the first not again, and
    // both changes are saved.
    let (retry_at, timer) = armed_write_retry(&effects).expect("a retry is armed");
    h.core(1).on_timer(retry_at, timer);
    let effects = settle_at(&mut h, 1, retry_at);
    assert_eq!(replies(&effects), vec![(second, Ok(add(8)))]);
    assert_eq!(stored_value(&h), Some(8));
}
