//! The lease and the fence: a lapsed lease pauses a core and loses
//! nothing; a fence keeps every copy aside, and the rejoin writes each one
//! back by CAS (kept when nobody took it over, dropped and counted when
//! somebody did); a write that failed or had no known outcome is retried,
//! never forgotten.

use super::*;

/// A request for KEY at `now_ms` (the harness's own `request` sends at 0).
fn request_at(h: &mut Harness, node: u64, now_ms: u64, op: u32, body: Vec<u8>) -> RequestId {
    h.request_key(node, now_ms, KEY, op, body)
}

fn stored_value(h: &Harness) -> Option<i64> {
    counter_value(&h.table.load(KEY).expect("record").state)
}

/// The store writes among `effects`, with their tokens.
fn store_ops(effects: Vec<Effect>) -> (Vec<(StoreToken, StoreOp)>, Vec<Effect>) {
    let mut ops = Vec::new();
    let mut others = Vec::new();
    for effect in effects {
        match effect {
            Effect::Store { token, op } => ops.push((token, op)),
            other => others.push(other),
        }
    }
    (ops, others)
}

#[test]
fn a_core_past_its_lease_refuses_requests_keeps_its_copy_and_serves_again_once_renewed() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    h.core(1).extend_lease(10, 1_000);
    let incr = request_at(&mut h, 1, 500, OP_ADD, add(1));
    assert_eq!(
        replies(&settle_at(&mut h, 1, 500)),
        vec![(incr, Ok(add(6)))]
    );
    // The lease runs out: refused, counted, and no claim or read is tried.
    let pulls = h.core(1).counters().pulls_total;
    let refused = request_at(&mut h, 1, 1_000, OP_GET, Vec::new());
    let effects = settle_at(&mut h, 1, 1_000);
    assert_eq!(
        replies(&effects),
        vec![(refused, Err(ErrorCode::Unavailable.into()))]
    );
    assert_eq!(h.core(1).counters().pulls_total, pulls);
    assert_eq!(h.core(1).counters().lease_lapsed_refusals_total, 1);
    assert!(!h.core(1).is_fenced(), "a lapse is not a fence");
    assert!(!h.core(1).may_serve(1_000));
    // A later heartbeat applied: the same copy serves again, every
    // unsaved change still in it (the store has only the claim's 0).
    h.core(1).extend_lease(1_200, 3_000);
    let get = request_at(&mut h, 1, 1_200, OP_GET, Vec::new());
    assert_eq!(
        replies(&settle_at(&mut h, 1, 1_200)),
        vec![(get, Ok(add(6)))]
    );
    assert_eq!(stored_value(&h), Some(0));
    assert_eq!(h.core(1).counters().fences_total, 0);
}

#[test]
fn a_lease_cut_short_by_a_clock_jump_stops_serving_at_once() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    h.core(1).extend_lease(10, 5_000);
    h.core(1).end_lease(700);
    // A later extension from a heartbeat sent before the jump would be
    // refused by membership; a shorter lease here is ignored too.
    h.core(1).extend_lease(701, 650);
    let refused = request_at(&mut h, 1, 700, OP_GET, Vec::new());
    assert_eq!(
        replies(&settle_at(&mut h, 1, 700)),
        vec![(refused, Err(ErrorCode::Unavailable.into()))]
    );
}

#[test]
fn an_on_write_answer_held_when_the_lease_ran_out_is_released_by_its_applied_save() {
    // The save of a held mutation is a CAS on this node's record: once it
    // applied the mutation is durable whoever claims the object next, so
    // its answer is released even though the lease ran out meanwhile.
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    h.core(1).extend_lease(10, 1_000);
    let held = request_at(&mut h, 1, 900, OP_ADD, add(1));
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    assert!(replies(&effects).is_empty(), "held for its save");
    h.core(1).on_flush(1_000);
    let effects = settle_at(&mut h, 1, 1_000);
    assert_eq!(replies(&effects), vec![(held, Ok(add(6)))]);
    assert_eq!(stored_value(&h), Some(6));
}

#[test]
fn a_fence_keeps_unsaved_changes_aside_and_the_rejoin_writes_them_back() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    let incr = request_at(&mut h, 1, 100, OP_ADD, add(1));
    assert_eq!(
        replies(&settle_at(&mut h, 1, 100)),
        vec![(incr, Ok(add(6)))]
    );
    // Declared down: nothing is served, nothing is dropped.
    h.core(1).fence(200);
    assert!(h.core(1).is_fenced());
    let refused = request_at(&mut h, 1, 300, OP_GET, Vec::new());
    assert_eq!(
        replies(&settle_at(&mut h, 1, 300)),
        vec![(refused, Err(ErrorCode::Unavailable.into()))]
    );
    let view = h.core(1).entries().next().expect("entry");
    assert!(view.aside && !view.writable, "{view:?}");
    assert_eq!(stored_value(&h), Some(0));
    // Rejoined as incarnation 2: the copy is written back by CAS on the
    // record it last knew, under the new incarnation, before it serves.
    h.core(1).rejoin(400, 2, 5_000);
    let get = request_at(&mut h, 1, 401, OP_GET, Vec::new());
    let effects = settle_at(&mut h, 1, 401);
    assert_eq!(replies(&effects), vec![(get, Ok(add(6)))]);
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId(1));
    assert_eq!(record.owner_incarnation, 2);
    assert_eq!(counter_value(&record.state), Some(6));
    let counters = h.core(1).counters();
    assert_eq!(counters.readopts_total, 1);
    assert_eq!(counters.unsaved_changes_dropped_total, 0);
    assert!(h.core(1).entries().all(|view| view.writable && !view.aside));
}

#[test]
fn the_rejoin_writes_back_every_copy_kept_aside_without_waiting_for_a_request() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    request_at(&mut h, 1, 100, OP_ADD, add(2));
    settle_at(&mut h, 1, 100);
    h.core(1).fence(200);
    h.core(1).rejoin(300, 2, 5_000);
    settle_at(&mut h, 1, 300);
    assert_eq!(stored_value(&h), Some(7));
    assert_eq!(h.table.load(KEY).expect("record").owner_incarnation, 2);
}

#[test]
fn a_copy_another_node_took_over_during_the_fence_is_dropped_and_counted() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    for at in [100, 101, 102] {
        request_at(&mut h, 1, at, OP_ADD, add(1));
        settle_at(&mut h, 1, at);
    }
    h.core(1).fence(200);
    // Node 2 claimed the object meanwhile (node 1 was declared down).
    take_record_as(&mut h, 2);
    h.core(1).on_node_up(NodeId(2), 1);
    h.core(1).rejoin(300, 2, 5_000);
    settle_at(&mut h, 1, 300);
    let counters = h.core(1).counters();
    // The claim's +5 and the three +1, none of them saved.
    assert_eq!(counters.unsaved_objects_dropped_total, 1);
    assert_eq!(counters.unsaved_changes_dropped_total, 4);
    assert_eq!(counters.readopts_total, 0);
    // Node 2's record stands; node 1 holds no copy and routes there.
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId(2));
    assert_eq!(counter_value(&record.state), Some(0));
    assert!(h
        .core(1)
        .entries()
        .all(|view| !view.writable && !view.aside));
    request_at(&mut h, 1, 301, OP_GET, Vec::new());
    let effects = settle_at(&mut h, 1, 301);
    assert_eq!(routed(&effects).len(), 1, "{effects:?}");
    assert_eq!(routed(&effects)[0].0, NodeId(2));
}

#[test]
fn an_indeterminate_save_is_retried_and_its_own_applied_write_is_recognised() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    request_at(&mut h, 1, 100, OP_ADD, add(1));
    settle_at(&mut h, 1, 100);
    let save_at = config().object_save_interval_ms;
    h.core(1).on_timer(save_at, Timer::Sweep);
    let (token, op) = only_save(h.core(1).drain_effects().collect());
    // The store applied the save, but its answer was lost.
    let StoreReply::Written(WriteOutcome::Applied(_)) = answer(&mut h.table, op) else {
        panic!("the save applies");
    };
    h.core(1).on_store_reply(
        save_at + 1,
        token,
        StoreReply::Written(WriteOutcome::Indeterminate),
    );
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    let (at_ms, timer) = armed_write_retry(&effects).expect("a retry is armed");
    assert!(at_ms > save_at + 1);
    assert!(h.core(1).entries().all(|view| view.writable), "kept");
    // More changes meanwhile, then the retry: its CAS on the old version
    // conflicts with the record the lost write left, which is recognised
    // as this copy's own; the save goes again and applies.
    request_at(&mut h, 1, at_ms - 1, OP_ADD, add(10));
    settle_at(&mut h, 1, at_ms - 1);
    h.core(1).on_timer(at_ms, timer);
    settle_at(&mut h, 1, at_ms);
    assert_eq!(stored_value(&h), Some(16));
    let counters = h.core(1).counters();
    assert_eq!(counters.unsaved_changes_dropped_total, 0);
    assert!(counters.write_retries_total >= 1);
    assert!(h.core(1).entries().all(|view| view.writable));
}

/// A readopt applied but unanswered, retried, and the node fenced again
/// before the retry's answer: the retry meets the record the lost readopt
/// left, which is this copy's own, but the incarnation it wrote under has
/// ended too. The copy stays aside (no write-back from a fenced node), a
/// request that waited for the write-back is answered, and the next rejoin
/// writes the copy back.
#[test]
fn a_readopt_retry_answered_after_a_second_fence_keeps_the_copy_aside() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    request_at(&mut h, 1, 100, OP_ADD, add(1));
    settle_at(&mut h, 1, 100);
    h.core(1).fence(200);
    h.core(1).rejoin(300, 2, 5_000);
    let (token, op) = only_save(h.core(1).drain_effects().collect());
    // The store applied the readopt, but its answer was lost.
    let StoreReply::Written(WriteOutcome::Applied(_)) = answer(&mut h.table, op) else {
        panic!("the readopt applies");
    };
    h.core(1)
        .on_store_reply(301, token, StoreReply::Written(WriteOutcome::Indeterminate));
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    let (at_ms, timer) = armed_write_retry(&effects).expect("a retry is armed");
    h.core(1).on_timer(at_ms, timer);
    let (token, op) = only_save(h.core(1).drain_effects().collect());
    // A request meanwhile waits for the write-back in flight.
    let waiting = request_at(&mut h, 1, at_ms, OP_GET, Vec::new());
    assert!(replies(&h.core(1).drain_effects().collect::<Vec<_>>()).is_empty());
    // Declared down again while the retry is in flight.
    h.core(1).fence(at_ms + 1);
    let reply = answer(&mut h.table, op);
    assert!(
        matches!(reply, StoreReply::Written(WriteOutcome::Conflict(Some(_)))),
        "{reply:?}"
    );
    h.core(1).on_store_reply(at_ms + 2, token, reply);
    // The waiting request is answered as a fenced node answers.
    let effects = settle_at(&mut h, 1, at_ms + 2);
    assert_eq!(
        replies(&effects),
        vec![(waiting, Err(ErrorCode::Unavailable.into()))]
    );
    assert!(h.core(1).entries().all(|view| view.aside && !view.writable));
    assert_eq!(h.table.load(KEY).expect("record").owner_incarnation, 2);
    // The next rejoin writes the copy back under its own incarnation.
    h.core(1).rejoin(at_ms + 10, 3, at_ms + 5_000);
    settle_at(&mut h, 1, at_ms + 10);
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_incarnation, 3);
    assert_eq!(counter_value(&record.state), Some(6));
    assert_eq!(h.core(1).counters().unsaved_changes_dropped_total, 0);
    assert!(h.core(1).entries().all(|view| view.writable && !view.aside));
}

#[test]
fn a_failed_save_keeps_the_copy_and_its_held_answers_wait_for_the_retry() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let held = request_at(&mut h, 1, 100, OP_ADD, add(1));
    h.core(1).on_flush(100);
    let (mut ops, _) = store_ops(h.core(1).drain_effects().collect());
    let (token, _) = ops.pop().expect("the save");
    h.core(1)
        .on_store_reply(101, token, StoreReply::Failed(StoreFailure::Busy));
    let (ops, others) = store_ops(h.core(1).drain_effects().collect());
    assert!(ops.is_empty());
    assert!(replies(&others).is_empty(), "the answer waits: {others:?}");
    let retry = others.iter().find_map(|effect| match effect {
        Effect::ArmTimer { at_ms, timer } => Some((*at_ms, *timer)),
        _ => None,
    });
    let (at_ms, timer) = retry.expect("a retry is armed");
    h.core(1).on_timer(at_ms, timer);
    let effects = settle_at(&mut h, 1, at_ms);
    assert_eq!(replies(&effects), vec![(held, Ok(add(6)))]);
    assert_eq!(stored_value(&h), Some(6));
}

#[test]
fn a_save_refused_because_another_node_owns_the_record_drops_and_counts_the_copy() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    request_at(&mut h, 1, 100, OP_ADD, add(1));
    settle_at(&mut h, 1, 100);
    take_record_as(&mut h, 3);
    h.core(1)
        .on_timer(config().object_save_interval_ms, Timer::Sweep);
    settle_at(&mut h, 1, config().object_save_interval_ms);
    let counters = h.core(1).counters();
    assert_eq!(counters.unsaved_objects_dropped_total, 1);
    assert_eq!(counters.unsaved_changes_dropped_total, 2);
    assert!(h.core(1).entries().all(|view| !view.writable));
}

#[test]
fn a_shutdown_release_that_failed_goes_again_until_it_applies() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    request_at(&mut h, 1, 100, OP_ADD, add(1));
    settle_at(&mut h, 1, 100);
    h.core(1).shutdown(200, 10_000);
    let (mut ops, _) = store_ops(h.core(1).drain_effects().collect());
    let (token, _) = ops.pop().expect("the release batch");
    h.core(1)
        .on_store_reply(201, token, StoreReply::Failed(StoreFailure::Busy));
    assert!(!h.core(1).is_shutdown_complete(), "the copy is kept");
    let (_, others) = store_ops(h.core(1).drain_effects().collect());
    let (at_ms, timer) = armed_write_retry(&others).expect("a retry is armed");
    h.core(1).on_timer(at_ms, timer);
    settle_at(&mut h, 1, at_ms);
    assert!(h.core(1).is_shutdown_complete());
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId::NONE);
    assert_eq!(counter_value(&record.state), Some(6));
    assert_eq!(h.core(1).counters().unsaved_changes_dropped_total, 0);
}

#[test]
fn a_request_to_a_fenced_node_is_refused_while_the_periodic_save_in_flight_settles() {
    // An interval object's periodic save does not hold requests back; a
    // fence meanwhile refuses them, and the save's answer keeps the copy
    // aside for the rejoin.
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    let save_at = config().object_save_interval_ms;
    h.core(1).on_timer(save_at, Timer::Sweep);
    let (token, op) = only_save(h.core(1).drain_effects().collect());
    h.core(1).fence(save_at + 1);
    let id = request_at(&mut h, 1, save_at + 1, OP_GET, Vec::new());
    assert_eq!(
        replies(&h.core(1).drain_effects().collect::<Vec<_>>()),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(save_at + 2, token, reply);
    settle_at(&mut h, 1, save_at + 2);
    let view = h.core(1).entries().next().expect("entry");
    assert!(view.aside, "{view:?}");
}
