//! Unit tests of transfers' ends (`Effect::TransferDone`) and of a drain:
//! every object leaves a draining core, a bounded number at a time, for
//! the node rendezvous hashing picks among the others, and nothing new is
//! placed on it.

use super::*;
use crate::router::drain::DRAIN_ATTEMPTS_MAX;

fn done_of(effects: &[Effect]) -> Vec<TransferDone> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::TransferDone(done) => Some(*done),
            _ => None,
        })
        .collect()
}

fn transfers_sent(effects: &[Effect]) -> Vec<(NodeId, RouterTransfer)> {
    effects
        .iter()
        .filter_map(|effect| match effect.sent() {
            Some((node, NodeMessage::RouterTransfer(transfer))) => Some((node, transfer.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_transfer_reports_its_end_once_confirmed_refused_or_unanswered() {
    for end in ["confirmed", "refused", "no answer"] {
        let mut h = Harness::new(2, Persist::Interval);
        let (owner, target) = transfer_in_flight(&mut h);
        let effects = h.settle(owner, 0);
        assert!(done_of(&effects).is_empty(), "not over before the ack");
        let (_, transfer) = transfers_sent(&effects).remove(0);
        match end {
            "confirmed" => h
                .core(owner)
                .on_transfer_ack(1, KEY, transfer.transfer_id, true),
            "refused" => h
                .core(owner)
                .on_transfer_ack(1, KEY, transfer.transfer_id, false),
            _ => h.core(owner).on_timer(
                600,
                Timer::TransferAck {
                    key: KEY,
                    transfer_id: transfer.transfer_id,
                },
            ),
        }
        let outcome = match end {
            "confirmed" => TransferOutcome::Confirmed,
            "refused" => TransferOutcome::Refused,
            _ => TransferOutcome::NoAnswer,
        };
        let effects = h.settle(owner, 1);
        assert_eq!(
            done_of(&effects),
            vec![TransferDone {
                key: KEY,
                target: NodeId(target),
                outcome,
                route_version: RouteVersion(2),
            }],
            "{end}"
        );
        // A late or repeated ack ends nothing twice.
        h.core(owner)
            .on_transfer_ack(2, KEY, transfer.transfer_id, true);
        assert!(done_of(&h.settle(owner, 2)).is_empty(), "{end}");
    }
}

#[test]
fn a_transfer_whose_write_does_not_apply_reports_not_moved() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target) = transfer_in_flight(&mut h);
    let removal: Vec<Effect> = h.core(owner).drain_effects().collect();
    let [Effect::Store { token, .. }] = removal.as_slice() else {
        panic!("one removal write: {removal:?}");
    };
    h.core(owner)
        .on_store_reply(1, *token, StoreReply::Failed(StoreFailure::Busy));
    let effects = h.settle(owner, 1);
    let done = done_of(&effects);
    assert_eq!(done.len(), 1, "{effects:?}");
    assert_eq!(done[0].outcome, TransferOutcome::NotMoved);
    assert_eq!(done[0].target, NodeId(target));
    assert!(!done[0].outcome.moved());
}

#[test]
fn a_transfer_to_a_draining_or_down_node_is_refused_and_the_object_stays() {
    let mut h = Harness::new(3, Persist::Interval);
    let owner = claim_on_default(&mut h, 3);
    let (draining, down) = match owner {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    };
    h.core(owner)
        .on_member(NodeId(draining), 1, crate::store::MemberState::Draining);
    h.core(owner)
        .on_member(NodeId(down), 1, crate::store::MemberState::Down);
    assert_eq!(
        h.core(owner).transfer(0, KEY, NodeId(draining), true),
        Err(TransferError::TargetDraining)
    );
    assert_eq!(
        h.core(owner).transfer(0, KEY, NodeId(down), true),
        Err(TransferError::TargetUnavailable)
    );
    // An id no member has is not a member that is down: a call again
    // cannot succeed.
    assert_eq!(
        h.core(owner).transfer(0, KEY, NodeId(42), true),
        Err(TransferError::UnknownNode)
    );
    assert_eq!(
        h.core(owner).transfer(0, KEY, NodeId(owner), true),
        Err(TransferError::SameNode)
    );
    assert!(h.core(owner).drain_effects().next().is_none());
    let id = h.request(owner, OP_ADD, add(1));
    assert_eq!(replies(&h.settle(owner, 0)), vec![(id, Ok(add(6)))]);
}

/// Object ids whose default node among 1..=3 is node 1.
fn keys_of_node_1(count: usize) -> Vec<ObjectKey> {
    (1..)
        .map(|id| ObjectKey::new(COUNTER_TYPE_ID, 0, id))
        .filter(|key| {
            (1..=3u64).max_by_key(|node| (rendezvous_score(*key, NodeId(*node)), *node)) == Some(1)
        })
        .take(count)
        .collect()
}

fn request_key(h: &mut Harness, node: u64, key: ObjectKey, op: u32, body: Vec<u8>) -> RequestId {
    h.request_key(node, 0, key, op, body)
}

#[test]
fn a_drain_moves_every_object_to_the_others_a_bounded_number_at_a_time() {
    const CONCURRENCY: usize = 3;
    let mut h = Harness::new(3, Persist::Interval);
    let keys = keys_of_node_1(10);
    for key in &keys {
        let id = request_key(&mut h, 1, *key, OP_ADD, add(1));
        assert_eq!(replies(&h.settle(1, 0)), vec![(id, Ok(add(1)))]);
    }
    assert_eq!(h.core(1).gauges().0, keys.len());
    assert!(!h.core(1).drain_progress().started);
    h.core(1).start_drain(CONCURRENCY);
    let mut now = 1;
    let mut targets = BTreeMap::new();
    for _round in 0..20 {
        h.core(1).drain_step(now);
        let progress = h.core(1).drain_progress();
        assert!(progress.moving <= CONCURRENCY, "{progress:?}");
        let effects = h.settle(1, now);
        let sent = transfers_sent(&effects);
        assert!(sent.len() <= CONCURRENCY);
        for (target, transfer) in sent {
            assert_ne!(target, NodeId(1), "never to itself");
            let others = [2u64, 3];
            let expected = others
                .into_iter()
                .max_by_key(|node| (rendezvous_score(transfer.key, NodeId(*node)), *node));
            assert_eq!(Some(target.0), expected, "the default among the others");
            targets.insert(transfer.key, target);
            h.core(1)
                .on_transfer_ack(now, transfer.key, transfer.transfer_id, true);
        }
        h.settle(1, now);
        now += 1;
        if h.core(1).drain_progress().finished() {
            break;
        }
    }
    let progress = h.core(1).drain_progress();
    assert!(progress.finished(), "{progress:?}");
    assert_eq!((progress.objects, progress.moving), (0, 0));
    assert_eq!(progress.moved, keys.len() as u64);
    assert_eq!(targets.len(), keys.len());
    assert_eq!(h.core(1).gauges().0, 0, "no writable object left");
    for key in &keys {
        assert_eq!(h.table.load(*key).unwrap().owner_node, targets[key]);
    }

    // Nothing new is placed on a draining node: a new key whose default
    // would be node 1 goes to another node.
    let fresh = keys_of_node_1(11)[10];
    request_key(&mut h, 1, fresh, OP_GET, Vec::new());
    let effects = h.settle(1, now);
    let sent = routed(&effects);
    assert_eq!(sent.len(), 1, "{effects:?}");
    assert_ne!(sent[0].0, NodeId(1));
    assert!(h.table.load(fresh).is_none(), "not claimed here");
}

#[test]
fn a_drain_with_no_other_node_finishes_with_its_objects_left() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    h.core(1).start_drain(4);
    h.core(1).drain_step(1);
    assert!(h.core(1).drain_effects().next().is_none(), "nothing to do");
    let progress = h.core(1).drain_progress();
    assert!(progress.no_target && progress.finished(), "{progress:?}");
    assert_eq!(progress.objects, 1);
}

#[test]
fn a_drain_tries_an_object_that_did_not_move_again_on_later_passes_then_gives_up() {
    let mut h = Harness::new(3, Persist::Interval);
    let keys = keys_of_node_1(3);
    for key in &keys {
        let id = request_key(&mut h, 1, *key, OP_ADD, add(1));
        assert_eq!(replies(&h.settle(1, 0)), vec![(id, Ok(add(1)))]);
    }
    h.core(1).start_drain(1);
    let mut order = Vec::new();
    for now in 1..100 {
        h.core(1).drain_step(now);
        let effects: Vec<Effect> = h.core(1).drain_effects().collect();
        let writes: Vec<(StoreToken, ObjectKey)> = effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::Store {
                    token,
                    op: StoreOp::Write(write),
                } => Some((*token, write.key)),
                _ => None,
            })
            .collect();
        if writes.is_empty() {
            break;
        }
        assert_eq!(writes.len(), 1, "one at a time: {effects:?}");
        let (token, key) = writes[0];
        order.push(key);
        // The transfer's record write never reaches the store: the object
        // did not move, and the record still names this node.
        h.core(1)
            .on_store_reply(now, token, StoreReply::Failed(StoreFailure::Failed));
        let done = done_of(&h.settle(1, now));
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].outcome, TransferOutcome::NotMoved);
        // The copy stays this node's and serves the next request.
        let id = request_key(&mut h, 1, key, OP_GET, Vec::new());
        let answered = replies(&h.settle(1, now));
        assert!(matches!(answered.as_slice(), [(answered_id, Ok(_))] if *answered_id == id));
    }
    let progress = h.core(1).drain_progress();
    assert!(progress.finished(), "{progress:?}");
    assert_eq!(progress.given_up, keys.len(), "{progress:?}");
    let attempts = usize::from(DRAIN_ATTEMPTS_MAX);
    assert_eq!(progress.not_moved, (keys.len() * attempts) as u64);
    assert_eq!(order.len(), keys.len() * attempts, "{order:?}");
    // A pass goes over every key once before any is tried again.
    for pass in order.chunks(keys.len()) {
        let distinct: std::collections::BTreeSet<_> = pass.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{order:?}");
    }
}

/// A rebalance's plan: every writable object of the core whose default
/// node (rendezvous over the nodes that take objects) is another node, with
/// that node; nothing while the core drains.
#[test]
fn a_rebalance_plan_names_each_object_whose_default_node_is_another() {
    let mut h = Harness::new(2, Persist::Interval);
    // Node 2 is down: node 1 is every key's default and creates them all.
    h.core(1).on_node_down(NodeId(2), 1);
    let keys: Vec<ObjectKey> = (1..=40)
        .map(|id| ObjectKey::new(COUNTER_TYPE_ID, 0, id))
        .collect();
    for key in &keys {
        let id = request_key(&mut h, 1, *key, OP_ADD, add(1));
        assert_eq!(replies(&h.settle(1, 0)), vec![(id, Ok(add(1)))]);
    }
    let alone = h.core(1).rebalance_plan(1, &[]);
    assert_eq!(alone, Some(Vec::new()), "alone: all stay");
    // The node sees node 2 up before this core does: no plan yet.
    assert_eq!(h.core(1).rebalance_plan(1, &[NodeId(2)]), None);
    // Node 2 is back as its next incarnation: about half move there.
    h.core(1).on_node_up(NodeId(2), 2);
    let plan = h.core(1).rebalance_plan(1, &[NodeId(2)]).unwrap();
    let expected: Vec<ObjectKey> = keys
        .iter()
        .copied()
        .filter(|key| rendezvous_score(*key, NodeId(2)) > rendezvous_score(*key, NodeId(1)))
        .collect();
    assert!(!expected.is_empty() && expected.len() < keys.len());
    let mut planned: Vec<ObjectKey> = plan.iter().map(|(key, _)| *key).collect();
    planned.sort();
    assert_eq!(planned, expected);
    assert!(plan.iter().all(|(_, node)| *node == NodeId(2)));
    // A draining core plans nothing (its drain moves everything).
    h.core(1).set_draining(true);
    assert_eq!(h.core(1).rebalance_plan(1, &[NodeId(2)]), Some(Vec::new()));
}
