//! Unit tests of the router's refusals and bounds, each at the edge where
//! a guard decides: a handoff's target that must say no, a forward one hop
//! short of the limit, a repair loop that must end, a claim a fenced node
//! must not write, and a claim that lost its race.

use super::*;
use crate::store::{CasVersion, RecordWrite, WriteCondition};

/// Claims KEY on its default node among two and hands it over to the
/// other; returns (owner, target, the `router_transfer` in flight). With
/// `target_caches`, the target read the route first (route version 1).
fn notification(h: &mut Harness, target_caches: bool) -> (u64, u64, RouterTransfer) {
    let owner = claim_on_default(h, 2);
    let target = 3 - owner;
    if target_caches {
        h.request(target, OP_GET, Vec::new());
        let effects = h.settle(target, 0);
        assert_eq!(routed(&effects).len(), 1, "forwarded: {effects:?}");
    }
    h.core(owner)
        .transfer(0, KEY, NodeId(target), true)
        .expect("transfer starts");
    let transfer = sent_transfer(&h.settle(owner, 0));
    assert_eq!(transfer.route_version, RouteVersion(2));
    (owner, target, transfer)
}

fn acks(effects: &[Effect]) -> Vec<(NodeId, bool)> {
    effects
        .iter()
        .filter_map(|effect| match effect.sent() {
            Some((node, NodeMessage::TransferAck { accepted, .. })) => Some((node, *accepted)),
            _ => None,
        })
        .collect()
}

fn store_ops(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|effect| matches!(effect, Effect::Store { .. }))
        .count()
}

/// Delivers `transfer` from `owner` to `target` at `now`; returns what the
/// target did at once (its store requests are not answered).
fn deliver(
    h: &mut Harness,
    owner: u64,
    target: u64,
    now: u64,
    transfer: RouterTransfer,
) -> Vec<Effect> {
    h.core(target)
        .on_router_transfer(now, NodeId(owner), transfer);
    h.core(target).drain_effects().collect()
}

#[test]
fn a_second_transfer_of_a_key_is_refused_while_one_is_queued_or_under_way() {
    let mut h = Harness::new(2, Persist::OnWrite);
    let owner = claim_on_default(&mut h, 2);
    let target = 3 - owner;
    // Queued behind a held increment's save: a second one would overwrite
    // the first's target.
    h.request(owner, OP_ADD, add(1));
    h.core(owner)
        .transfer(0, KEY, NodeId(target), true)
        .expect("transfer queued");
    assert_eq!(
        h.core(owner).transfer(0, KEY, NodeId(target), true),
        Err(TransferError::InProgress)
    );
    // Under way (its removal write in flight, the copy still writable): a
    // second one would queue a handoff of an object already leaving.
    let (token, save) = only_save(flush(&mut h, owner));
    let reply = answer(&mut h.table, save);
    h.core(owner).on_store_reply(0, token, reply);
    let (_, removal) = only_save(h.core(owner).drain_effects().collect());
    let StoreOp::Write(write) = &removal else {
        panic!("the removal write, got {removal:?}");
    };
    assert_eq!(write.owner_node, NodeId(target));
    assert_eq!(
        h.core(owner).transfer(1, KEY, NodeId(target), true),
        Err(TransferError::InProgress)
    );
}

#[test]
fn a_target_shutting_down_refuses_a_transfer_and_keeps_no_entry_for_it() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, false);
    h.core(target).shutdown(0, 1_000);
    h.core(target).drain_effects().for_each(drop);
    let effects = deliver(&mut h, owner, target, 1, transfer);
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    // A refused key takes no room in a core that is going away.
    assert_eq!(h.core(target).entries().count(), 0);
}

#[test]
fn a_target_shutting_down_refuses_a_transfer_of_a_route_it_caches() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, true);
    h.core(target).shutdown(0, 1_000);
    h.core(target).drain_effects().for_each(drop);
    // Shutdown alone refuses: the route is older than the notification,
    // no IO runs and the lease holds.
    let effects = deliver(&mut h, owner, target, 1, transfer);
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    let view = h.core(target).entries().next().expect("the cached route");
    assert!(!view.writable);
    assert_eq!(view.route_version, RouteVersion(1));
}

#[test]
fn a_target_past_its_lease_refuses_a_transfer_and_writes_nothing() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, false);
    h.core(target).extend_lease(0, 100);
    h.core(target).drain_effects().for_each(drop);
    // The lease ran out: the target may have been declared down, so it
    // confirms nothing (the record stays claimable by anyone).
    let effects = deliver(&mut h, owner, target, 100, transfer);
    assert!(!h.core(target).may_serve(100));
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
}

#[test]
fn a_target_knowing_a_newer_route_refuses_the_transfer() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, true);
    // The target has heard of route version 3 meanwhile: the handoff of
    // version 2 is stale and confirming it would move the route back.
    h.core(target)
        .on_router_update_sync(0, KEY, NodeId(owner), 1, RouteVersion(3));
    let effects = deliver(&mut h, owner, target, 1, transfer);
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    let view = h.core(target).entries().next().expect("the cached route");
    assert_eq!(
        (view.owner_node, view.route_version, view.writable),
        (NodeId(owner), RouteVersion(3), false)
    );
}

#[test]
fn a_target_busy_with_the_key_refuses_the_transfer_and_claims_it_on_its_read() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, false);
    // A request's read of the route is in flight on the target: one IO per
    // object at a time, so the confirmation cannot start.
    let get = h.request(target, OP_GET, Vec::new());
    let read: Vec<Effect> = h.core(target).drain_effects().collect();
    assert_eq!(store_ops(&read), 1);
    let effects = deliver(&mut h, owner, target, 1, transfer);
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    // Nothing is lost: the record already names the target, which claims
    // it by CAS once the read returns, with the state the owner shipped.
    for effect in read {
        if let Effect::Store { token, op } = effect {
            let reply = answer(&mut h.table, op);
            h.core(target).on_store_reply(2, token, reply);
        }
    }
    let effects = settle_at(&mut h, target, 2);
    assert_eq!(replies(&effects), vec![(get, Ok(add(5)))]);
    assert!(h.core(target).entries().next().expect("entry").writable);
}

#[test]
fn a_full_target_refuses_a_transfer_of_a_key_it_does_not_hold() {
    let bounded = RouterConfig {
        entries_per_core_max: 1,
        ..config()
    };
    let mut core = RouterCore::new(NodeId(2), bounded, 2, 0);
    core.register(Box::new(CounterType {
        persist: Persist::Interval,
    }));
    core.on_node_up(NodeId(1), 1);
    core.drain_effects().for_each(drop);
    let mut h = Harness {
        table: MemoryTable::default(),
        cores: [(2, core)].into_iter().collect(),
        next_seq: 0,
    };
    // One key fills the core: the route of an object node 1 owns (a key
    // with no record would leave no entry behind).
    let other = ObjectKey::new(COUNTER_TYPE_ID, 0, 43);
    let owned_elsewhere = crate::store::RecordWrite {
        key: other,
        condition: crate::store::WriteCondition::Absent,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: 0,
        state: add(1),
    };
    h.table.write(&owned_elsewhere);
    let request = get_request(RequestId {
        origin_node: NodeId(2),
        seq: 1,
    });
    h.core(2)
        .on_request(0, RouterHead::local(other, NodeId(2)), request);
    h.settle(2, 0);
    assert_eq!(h.core(2).entries().count(), 1);
    let transfer = RouterTransfer {
        key: KEY,
        transfer_id: 1,
        owner_incarnation: 1,
        route_version: RouteVersion(2),
        cas_version: CasVersion(2),
        save_timepoint_ms: 0,
        state: add(5),
    };
    let effects = deliver(&mut h, 1, 2, 1, transfer);
    assert_eq!(acks(&effects), vec![(NodeId(1), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    assert_eq!(h.core(2).entries().count(), 1, "the bound holds");
}

#[test]
fn a_duplicate_notification_is_acked_again_and_a_newer_unknown_one_refused() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, false);
    h.core(target)
        .on_router_transfer(0, NodeId(owner), transfer.clone());
    let effects = h.settle(target, 0);
    assert_eq!(acks(&effects), vec![(NodeId(owner), true)]);
    // The first ack was lost and the owner asks again: the handoff is
    // confirmed already, so the answer is yes and nothing is written.
    let effects = deliver(&mut h, owner, target, 1, transfer.clone());
    assert_eq!(acks(&effects), vec![(NodeId(owner), true)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    // A handoff of a route newer than the one confirmed here is not this
    // copy's: refused.
    let newer = RouterTransfer {
        route_version: RouteVersion(3),
        ..transfer
    };
    let effects = deliver(&mut h, owner, target, 2, newer);
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    assert!(h.core(target).entries().next().expect("entry").writable);
}

#[test]
fn a_request_one_hop_short_of_the_bound_is_still_forwarded_and_counted() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    // It left `other` once already, and comes back over a stale route.
    let head = RouterHead {
        key: KEY,
        route_version: RouteVersion(1),
        source_node: NodeId(other),
        forward_hops: config().forward_hops_max - 1,
    };
    let id = RequestId {
        origin_node: NodeId(other),
        seq: 77,
    };
    let request = get_request(id);
    h.core(other).on_request(0, head, request);
    let effects = h.settle(other, 0);
    assert!(replies(&effects).is_empty(), "{effects:?}");
    let sent = routed(&effects);
    assert_eq!(sent.len(), 1, "{effects:?}");
    assert_eq!(
        (sent[0].0, sent[0].1.forward_hops, sent[0].2),
        (NodeId(owner), config().forward_hops_max, id)
    );
    assert_eq!(h.core(other).counters().forward_hops_exceeded_total, 0);
    // A request back at its source after a hop is a forward, not a send:
    // forwards are what a stale route costs.
    assert_eq!(h.core(other).counters().forwards_total, 1);
    assert_eq!(h.core(other).counters().sends_total, 0);
}

#[test]
fn a_local_request_sent_to_its_owner_counts_as_a_send() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    h.request(other, OP_GET, Vec::new());
    assert_eq!(routed(&h.settle(other, 0)).len(), 1);
    assert_eq!(h.core(other).counters().sends_total, 1);
    assert_eq!(h.core(other).counters().forwards_total, 0);
}

#[test]
fn a_forwarder_whose_route_is_no_newer_than_the_request_sends_no_sync() {
    let mut h = Harness::new(3, Persist::Interval);
    let owner = claim_on_default(&mut h, 3);
    let forwarder = if owner == 1 { 2 } else { 1 };
    let source = 6 - owner - forwarder;
    let head = RouterHead {
        key: KEY,
        route_version: RouteVersion(1),
        source_node: NodeId(source),
        forward_hops: 1,
    };
    let id = RequestId {
        origin_node: NodeId(source),
        seq: 77,
    };
    let request = get_request(id);
    h.core(forwarder).on_request(0, head, request);
    let effects = h.settle(forwarder, 0);
    assert_eq!(routed(&effects).len(), 1, "{effects:?}");
    // The source already knows route version 1: a sync would be noise on
    // the link for every forwarded request.
    assert!(
        !effects.iter().any(|effect| matches!(
            effect.sent(),
            Some((_, NodeMessage::RouterUpdateSync { .. }))
        )),
        "{effects:?}"
    );
    assert_eq!(h.core(forwarder).counters().update_syncs_sent_total, 0);
}

#[test]
fn a_route_that_never_catches_up_ends_in_unavailable_within_the_repair_bound() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    // Route version 100 is nowhere in the store: each re-read finds an
    // older route, and only the repair bound ends the loop.
    let head = RouterHead {
        key: KEY,
        route_version: RouteVersion(100),
        source_node: NodeId(owner),
        forward_hops: 1,
    };
    let id = RequestId {
        origin_node: NodeId(owner),
        seq: 77,
    };
    let request = get_request(id);
    h.core(other).on_request(1, head, request);
    let rounds_max = 2 * usize::from(REPAIR_ATTEMPTS_MAX) + 2;
    let effects = settle_within(&mut h, other, 1, rounds_max);
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
    assert!(routed(&effects).is_empty(), "{effects:?}");
    assert_eq!(
        h.core(other).counters().pulls_total,
        u64::from(REPAIR_ATTEMPTS_MAX)
    );
    assert_eq!(
        h.core(other).counters().repair_attempts_total,
        u64::from(REPAIR_ATTEMPTS_MAX) + 1
    );
}

/// The token of the one load among `effects`.
fn only_load(effects: &[Effect]) -> StoreToken {
    let loads: Vec<StoreToken> = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Store {
                token,
                op: StoreOp::Load(_),
            } => Some(*token),
            _ => None,
        })
        .collect();
    assert_eq!(loads.len(), 1, "one load: {effects:?}");
    loads[0]
}

#[test]
fn an_object_pull_retries_within_the_object_retry_interval() {
    // The two bounds far apart, so the one used shows in the timer.
    let retries = RouterConfig {
        cache_retry_interval_ms: 1_000,
        object_retry_interval_ms: 1,
        ..config()
    };
    let (mut core, id) = one_core_with_a_get(retries);
    let mut table = MemoryTable::default();
    // The route read finds no record: node 1 is the default, and reads the
    // object to claim it.
    let effects: Vec<Effect> = core.drain_effects().collect();
    core.on_store_reply(0, only_load(&effects), StoreReply::Loaded(None));
    let effects: Vec<Effect> = core.drain_effects().collect();
    let token = only_load(&effects);
    core.on_store_reply(10, token, StoreReply::Failed(StoreFailure::Busy));
    let effects: Vec<Effect> = core.drain_effects().collect();
    let Some(Effect::ArmTimer { at_ms, timer }) = effects.into_iter().next() else {
        panic!("a retry timer");
    };
    assert_eq!(at_ms, 10 + 1, "waits at most object_retry_interval_ms");
    core.on_timer(at_ms, timer);
    let effects: Vec<Effect> = core.drain_effects().collect();
    let reply = StoreReply::Loaded(table.load(KEY));
    core.on_store_reply(at_ms, only_load(&effects), reply);
    // The claim, then the answer.
    let mut answered = Vec::new();
    loop {
        let effects: Vec<Effect> = core.drain_effects().collect();
        if effects.is_empty() {
            break;
        }
        for effect in effects {
            match effect {
                Effect::Store { token, op } => {
                    let reply = answer(&mut table, op);
                    core.on_store_reply(at_ms, token, reply);
                }
                other => answered.push(other),
            }
        }
    }
    assert_eq!(replies(&answered), vec![(id, Ok(add(0)))]);
    let counters = core.counters();
    // The route read, the object read and its retry.
    assert_eq!(counters.pulls_total, 3);
    assert_eq!(counters.claims_total, 1);
    // A first claim takes over from no one.
    assert_eq!(counters.dead_owner_claims_total, 0);
}

#[test]
fn a_node_whose_lease_ran_out_during_its_read_does_not_claim() {
    let (mut core, id) = one_core_with_a_get(config());
    core.extend_lease(0, 100);
    let effects: Vec<Effect> = core.drain_effects().collect();
    core.on_store_reply(0, only_load(&effects), StoreReply::Loaded(None));
    let effects: Vec<Effect> = core.drain_effects().collect();
    let token = only_load(&effects);
    // The object read returns after the lease: the node may have been
    // declared down and the key claimed elsewhere, so it writes nothing.
    core.on_store_reply(100, token, StoreReply::Loaded(None));
    assert!(!core.may_serve(100));
    let effects: Vec<Effect> = core.drain_effects().collect();
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
    assert_eq!(core.counters().claims_total, 0);
}

#[test]
fn a_claim_that_lost_its_race_adopts_the_winners_route_and_forwards_at_once() {
    let mut h = Harness::new(2, Persist::Interval);
    let default = default_of(2);
    let winner = 3 - default;
    let id = h.request(default, OP_GET, Vec::new());
    // The route read and the object read both find no record.
    for _ in 0..2 {
        let effects: Vec<Effect> = h.core(default).drain_effects().collect();
        let token = only_load(&effects);
        h.core(default)
            .on_store_reply(0, token, StoreReply::Loaded(None));
    }
    let (token, claim) = only_save(h.core(default).drain_effects().collect());
    // The other node claimed first (it saw another membership).
    let won = crate::store::RecordWrite {
        key: KEY,
        condition: crate::store::WriteCondition::Absent,
        owner_node: NodeId(winner),
        owner_incarnation: 1,
        route_version: RouteVersion(1),
        save_timepoint_ms: 0,
        state: add(3),
    };
    assert!(matches!(h.table.write(&won), WriteOutcome::Applied(_)));
    let reply = answer(&mut h.table, claim);
    assert!(matches!(
        reply,
        StoreReply::Written(WriteOutcome::Conflict(Some(_)))
    ));
    h.core(default).on_store_reply(0, token, reply);
    let effects = settle_at(&mut h, default, 0);
    // The conflict carried the winner's record: the request goes there with
    // its route version, and no third read is needed.
    let sent = routed(&effects);
    assert_eq!(sent.len(), 1, "{effects:?}");
    assert_eq!(
        (sent[0].0, sent[0].1.route_version, sent[0].2),
        (NodeId(winner), RouteVersion(1), id)
    );
    assert_eq!(h.core(default).counters().pulls_total, 2);
    assert_eq!(h.core(default).counters().cas_conflicts_total, 1);
    assert_eq!(h.core(default).counters().claims_total, 0);
}

#[test]
fn a_claim_whose_record_vanished_is_counted_and_read_again() {
    let mut h = Harness::new(1, Persist::Interval);
    let id = h.request(1, OP_GET, Vec::new());
    for _ in 0..2 {
        let effects: Vec<Effect> = h.core(1).drain_effects().collect();
        let token = only_load(&effects);
        h.core(1).on_store_reply(0, token, StoreReply::Loaded(None));
    }
    let (token, _) = only_save(h.core(1).drain_effects().collect());
    // A conflict without the current record says nothing of the route: it
    // is read again (the record is still absent, so it is claimed anew).
    let conflict = StoreReply::Written(WriteOutcome::Conflict(None));
    h.core(1).on_store_reply(0, token, conflict);
    assert_eq!(h.core(1).counters().cas_conflicts_total, 1);
    let effects = settle_at(&mut h, 1, 0);
    assert_eq!(replies(&effects), vec![(id, Ok(add(0)))]);
    assert_eq!(h.core(1).counters().pulls_total, 4);
}

#[test]
fn an_ack_of_another_transfer_leaves_the_handoff_waiting() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target) = transfer_in_flight(&mut h);
    drain_after(&mut h, owner, target, |core, id| {
        // A late ack of an earlier handoff of this key must not end this
        // one: its queued requests stay queued until their own ack.
        core.on_transfer_ack(1, KEY, id + 1, true);
        assert_eq!(core.gauges().2, 3, "the queue waits for its own ack");
        core.on_transfer_ack(1, KEY, id, false)
    });
}

#[test]
fn a_transfer_that_needs_no_notification_sends_none() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let target = 3 - owner;
    h.core(owner)
        .transfer(0, KEY, NodeId(target), false)
        .expect("transfer starts");
    let effects = h.settle(owner, 0);
    assert!(
        !effects
            .iter()
            .any(|effect| matches!(effect.sent(), Some((_, NodeMessage::RouterTransfer(_))))),
        "{effects:?}"
    );
    assert_eq!(
        h.table.load(KEY).map(|record| record.owner_node),
        Some(NodeId(target))
    );
}

/// Hands KEY from `from` to `to` completely (removal, state shipped, the
/// target's claim) and returns the handoff's `router_transfer` and the ack
/// the target sent, which the caller delivers (or holds back).
fn hand_over(h: &mut Harness, from: u64, to: u64, now: u64) -> (RouterTransfer, NodeMessage) {
    h.core(from)
        .transfer(now, KEY, NodeId(to), true)
        .expect("transfer starts");
    let transfer = sent_transfer(&h.settle(from, now));
    h.core(to)
        .on_router_transfer(now, NodeId(from), transfer.clone());
    let ack = h
        .settle(to, now)
        .into_iter()
        .find_map(|effect| match effect.into_sent() {
            Some((_, message @ NodeMessage::TransferAck { accepted: true, .. })) => Some(message),
            _ => None,
        })
        .expect("the target accepted");
    (transfer, ack)
}

fn deliver_ack(h: &mut Harness, node: u64, now: u64, ack: NodeMessage) -> Vec<Effect> {
    let NodeMessage::TransferAck {
        key,
        transfer_id,
        accepted,
    } = ack
    else {
        panic!("not an ack: {ack:?}");
    };
    h.core(node)
        .on_transfer_ack(now, key, transfer_id, accepted);
    h.settle(node, now)
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
fn a_late_ack_of_an_earlier_handoff_of_the_key_does_not_end_a_later_one() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let target = 3 - owner;
    // The first handoff's ack is held back; its timer ends it.
    let (first, late_ack) = hand_over(&mut h, owner, target, 0);
    h.core(owner).on_timer(
        600,
        Timer::TransferAck {
            key: KEY,
            transfer_id: first.transfer_id,
        },
    );
    let effects = h.settle(owner, 600);
    assert_eq!(transfers_done(&effects), vec![TransferOutcome::NoAnswer]);
    // The key comes back, and the owner hands it over a second time.
    let (_, back_ack) = hand_over(&mut h, target, owner, 700);
    deliver_ack(&mut h, target, 700, back_ack);
    let (second, ack) = hand_over(&mut h, owner, target, 800);
    assert_ne!(second.transfer_id, first.transfer_id);
    // A request meeting the second handoff waits for its end.
    let id = h.request(owner, OP_GET, Vec::new());
    assert!(routed(&h.settle(owner, 800)).is_empty());
    // The first handoff's ack, late: it ends nothing.
    let effects = deliver_ack(&mut h, owner, 900, late_ack);
    assert!(transfers_done(&effects).is_empty(), "{effects:?}");
    assert!(routed(&effects).is_empty(), "{effects:?}");
    // The second's own ack ends it, and the waiting request follows the key.
    let effects = deliver_ack(&mut h, owner, 900, ack);
    assert_eq!(transfers_done(&effects), vec![TransferOutcome::Confirmed]);
    let sent: Vec<(NodeId, RequestId)> = routed(&effects)
        .into_iter()
        .map(|(node, _, request)| (node, request))
        .collect();
    assert_eq!(sent, vec![(NodeId(target), id)]);
}

#[test]
fn a_target_whose_claim_lost_its_race_adopts_the_winners_record_at_once() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target, transfer) = notification(&mut h, false);
    // Another write lands after the removal: the target's claim, conditioned
    // on the removal's CAS version, must lose to it.
    let current = h.table.load(KEY).expect("the removal's record");
    let winner = RecordWrite {
        key: KEY,
        condition: WriteCondition::CasEquals(current.cas_version),
        owner_node: NodeId(owner),
        owner_incarnation: 1,
        route_version: RouteVersion(current.route_version.0 + 1),
        save_timepoint_ms: 0,
        state: current.state.clone(),
    };
    assert!(matches!(h.table.write(&winner), WriteOutcome::Applied(_)));
    let (token, claim) = only_save(deliver(&mut h, owner, target, 1, transfer));
    let reply = answer(&mut h.table, claim);
    assert!(
        matches!(reply, StoreReply::Written(WriteOutcome::Conflict(_))),
        "{reply:?}"
    );
    h.core(target).on_store_reply(1, token, reply);
    let effects: Vec<Effect> = h.core(target).drain_effects().collect();
    assert_eq!(acks(&effects), vec![(NodeId(owner), false)]);
    // The target knows the winner from the refusal: a request goes there
    // at once, with the winner's route version, and reads nothing first.
    h.request(target, OP_GET, Vec::new());
    let effects: Vec<Effect> = h.core(target).drain_effects().collect();
    assert_eq!(store_ops(&effects), 0, "{effects:?}");
    let sent: Vec<(NodeId, RouteVersion)> = routed(&effects)
        .into_iter()
        .map(|(node, head, _)| (node, head.route_version))
        .collect();
    assert_eq!(sent, vec![(NodeId(owner), winner.route_version)]);
}
