//! Unit tests of the router state machine: one per operation and one per
//! lost-request path it closes, driven by hand with an in-memory table.

use std::collections::BTreeMap;

use wire::ObjectKey;

use super::*;
use crate::config::{Persist, RouterConfig};
use crate::ids::{NodeId, RouteVersion};
use crate::sim::counter::{counter_value, CounterType, COUNTER_TYPE_ID, OP_ADD, OP_GET};
use crate::store::{MemoryTable, WriteOutcome};
use crate::testing::answer_store as answer;

fn config() -> RouterConfig {
    RouterConfig {
        cache_update_interval_ms: 10_000,
        cache_free_timeout_ms: 4_000,
        object_free_timeout_ms: 6_000,
        object_save_interval_ms: 2_000,
        cache_retry_interval_ms: 50,
        object_retry_interval_ms: 50,
        pull_attempts_max: 3,
        forward_hops_max: 4,
        pending_queue_max: 8,
        entries_per_core_max: 1_000,
        transfer_ack_timeout_ms: 500,
        request_keys_max: 128,
    }
}

const KEY: ObjectKey = ObjectKey::new(COUNTER_TYPE_ID, 0, 42);

/// Nodes 1..=n, one core each, a shared table, effects kept per node.
struct Harness {
    table: MemoryTable,
    cores: BTreeMap<u64, RouterCore>,
    next_seq: u64,
}

impl Harness {
    fn new(nodes: u64, persist: Persist) -> Harness {
        Harness::with_config(nodes, persist, config())
    }

    fn with_config(nodes: u64, persist: Persist, config: RouterConfig) -> Harness {
        let mut cores = BTreeMap::new();
        for node in 1..=nodes {
            let mut core = RouterCore::new(NodeId(node), config.clone(), node, 0);
            core.register(Box::new(CounterType { persist }));
            for peer in 1..=nodes {
                core.on_node_up(NodeId(peer), 1);
            }
            core.drain_effects().for_each(drop);
            cores.insert(node, core);
        }
        Harness {
            table: MemoryTable::default(),
            cores,
            next_seq: 0,
        }
    }

    fn core(&mut self, node: u64) -> &mut RouterCore {
        self.cores.get_mut(&node).expect("node exists")
    }

    fn request(&mut self, node: u64, op: u32, body: Vec<u8>) -> RequestId {
        self.request_key(node, 0, KEY, op, body)
    }

    /// A request for `key` entering `node` at `now_ms`.
    fn request_key(
        &mut self,
        node: u64,
        now_ms: u64,
        key: ObjectKey,
        op: u32,
        body: Vec<u8>,
    ) -> RequestId {
        self.next_seq += 1;
        let id = RequestId {
            origin_node: NodeId(node),
            seq: self.next_seq,
        };
        let request = Request {
            id,
            op,
            body,
            client: None,
            needs_reply: true,
            keyed: false,
        };
        self.core(node)
            .on_request(now_ms, RouterHead::local(key, NodeId(node)), request);
        id
    }

    /// Answers every store request from the table at once, until none is
    /// left; returns the other effects.
    fn settle(&mut self, node: u64, now_ms: u64) -> Vec<Effect> {
        let mut others = Vec::new();
        loop {
            let effects: Vec<Effect> = self.core(node).drain_effects().collect();
            if effects.is_empty() {
                return others;
            }
            // Like the driver: the flush runs after the batch was delivered.
            let mut flush = false;
            for effect in effects {
                match effect {
                    Effect::Store { token, op } => {
                        let reply = answer(&mut self.table, op);
                        self.core(node).on_store_reply(now_ms, token, reply);
                    }
                    Effect::FlushSavesAfterBatch => flush = true,
                    other => others.push(other),
                }
            }
            if flush {
                self.core(node).on_flush(now_ms);
            }
        }
    }
}

/// A get of the counter from no session, answered to `id`.
fn get_request(id: RequestId) -> Request {
    Request {
        id,
        op: OP_GET,
        body: Vec::new(),
        client: None,
        needs_reply: true,
        keyed: false,
    }
}

/// The write retry armed among `effects`: when it fires, and its timer.
fn armed_write_retry(effects: &[Effect]) -> Option<(u64, Timer)> {
    effects.iter().find_map(|effect| match effect {
        Effect::ArmTimer {
            at_ms,
            timer: timer @ Timer::WriteRetry { .. },
        } => Some((*at_ms, *timer)),
        _ => None,
    })
}

fn replies(effects: &[Effect]) -> Vec<(RequestId, Outcome)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Reply { request, outcome } => Some((*request, outcome.clone())),
            _ => None,
        })
        .collect()
}

fn routed(effects: &[Effect]) -> Vec<(NodeId, RouterHead, RequestId)> {
    effects
        .iter()
        .filter_map(|effect| match effect.sent() {
            Some((node, NodeMessage::Routed { head, request })) => Some((node, *head, request.id)),
            _ => None,
        })
        .collect()
}

/// The `router_transfer` among `effects`.
fn sent_transfer(effects: &[Effect]) -> RouterTransfer {
    effects
        .iter()
        .find_map(|effect| match effect.sent() {
            Some((_, NodeMessage::RouterTransfer(transfer))) => Some(transfer.clone()),
            _ => None,
        })
        .expect("router_transfer sent")
}

fn add(delta: i64) -> Vec<u8> {
    delta.to_le_bytes().to_vec()
}

/// The node the rendezvous hash picks for KEY among 1..=n.
fn default_of(n: u64) -> u64 {
    (1..=n)
        .max_by_key(|node| (rendezvous_score(KEY, NodeId(*node)), *node))
        .unwrap_or(1)
}

fn claim_on_default(h: &mut Harness, n: u64) -> u64 {
    let owner = default_of(n);
    let id = h.request(owner, OP_ADD, add(5));
    let effects = h.settle(owner, 0);
    assert_eq!(replies(&effects), vec![(id, Ok(add(5)))]);
    owner
}

/// Node `node` takes KEY's record over as a claim after this one was
/// declared down would: a compare-and-set on the record as it stands.
fn take_record_as(h: &mut Harness, node: u64) {
    let record = h.table.load(KEY).expect("record");
    let claim = crate::store::RecordWrite {
        key: KEY,
        condition: crate::store::WriteCondition::CasEquals(record.cas_version),
        owner_node: NodeId(node),
        owner_incarnation: 1,
        route_version: record.route_version.next(),
        save_timepoint_ms: 0,
        state: record.state.clone(),
    };
    assert!(matches!(h.table.write(&claim), WriteOutcome::Applied(_)));
}

#[test]
fn first_access_claims_on_the_default_node_through_cas() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    let record = h.table.load(KEY).expect("claimed record");
    assert_eq!(record.owner_node, NodeId(1));
    assert_eq!(record.route_version, RouteVersion(1));
    let view = h.core(1).entries().next().expect("entry");
    assert!(view.writable);
    assert_eq!(h.core(1).counters().claims_total, 1);
}

#[test]
fn a_non_owner_forwards_and_neither_runs_nor_answers() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    let id = h.request(other, OP_GET, Vec::new());
    let effects = h.settle(other, 0);
    assert!(replies(&effects).is_empty());
    let sent = routed(&effects);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, NodeId(owner));
    assert_eq!(sent[0].1.forward_hops, 1);
    assert_eq!(sent[0].1.route_version, RouteVersion(1));
    assert_eq!(sent[0].2, id);
    // The owner runs it and answers the origin.
    let (_, head, _) = sent[0];
    let request = get_request(id);
    h.core(owner).on_request(0, head, request);
    assert_eq!(replies(&h.settle(owner, 0)), vec![(id, Ok(add(5)))]);
}

#[test]
fn forwarding_is_refused_past_transfer_max_ttl() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    let id = RequestId {
        origin_node: NodeId(9),
        seq: 1,
    };
    let head = RouterHead {
        key: KEY,
        route_version: RouteVersion(1),
        source_node: NodeId(9),
        forward_hops: config().forward_hops_max,
    };
    let request = get_request(id);
    h.core(other).on_request(0, head, request);
    let effects = h.settle(other, 0);
    assert!(routed(&effects).is_empty());
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
    assert_eq!(h.core(other).counters().forward_hops_exceeded_total, 1);
}

#[test]
fn forwarder_with_a_newer_route_syncs_the_source_which_updates_only_older_caches() {
    let mut h = Harness::new(3, Persist::Interval);
    let owner = claim_on_default(&mut h, 3);
    let forwarder = if owner == 1 { 2 } else { 1 };
    let source = 6 - owner - forwarder;
    // The source has an old cache (route version 0) of the key.
    h.request(source, OP_GET, Vec::new());
    h.settle(source, 0);
    let id = RequestId {
        origin_node: NodeId(source),
        seq: 77,
    };
    let head = RouterHead {
        key: KEY,
        route_version: RouteVersion(0),
        source_node: NodeId(source),
        forward_hops: 1,
    };
    let request = get_request(id);
    h.core(forwarder).on_request(0, head, request);
    let effects = h.settle(forwarder, 0);
    let sync = effects.iter().find_map(|effect| match effect.sent() {
        Some((
            node,
            NodeMessage::RouterUpdateSync {
                route_version,
                owner_node,
                ..
            },
        )) => Some((node, *route_version, *owner_node)),
        _ => None,
    });
    assert_eq!(sync, Some((NodeId(source), RouteVersion(1), NodeId(owner))));
    // The receiver: a missing cache is ignored, an older one updated, a
    // newer one kept.
    let missing = ObjectKey::new(COUNTER_TYPE_ID, 0, 999);
    let core = h.core(source);
    core.on_router_update_sync(1, missing, NodeId(owner), 1, RouteVersion(5));
    assert!(core.entries().all(|view| view.key != missing));
    core.on_router_update_sync(1, KEY, NodeId(owner), 1, RouteVersion(3));
    let view = core.entries().find(|view| view.key == KEY).expect("cache");
    assert_eq!(view.route_version, RouteVersion(3));
    core.on_router_update_sync(1, KEY, NodeId(9), 1, RouteVersion(2));
    let view = core.entries().find(|view| view.key == KEY).expect("cache");
    assert_eq!(
        (view.route_version, view.owner_node),
        (RouteVersion(3), NodeId(owner))
    );
}

/// Starts a transfer from the owner to the other node and answers its
/// removal write; returns (owner, target) with the notification in flight.
fn transfer_in_flight(h: &mut Harness) -> (u64, u64) {
    let owner = claim_on_default(h, 2);
    let target = 3 - owner;
    h.core(owner)
        .transfer(0, KEY, NodeId(target), true)
        .expect("transfer starts");
    (owner, target)
}

#[test]
fn defect_a_a_request_meeting_a_migration_is_queued_and_not_sent() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, _) = transfer_in_flight(&mut h);
    // The removal write is not answered yet: the migration flag is set.
    let before: Vec<Effect> = h.core(owner).drain_effects().collect();
    assert_eq!(before.len(), 1, "only the removal write: {before:?}");
    h.request(owner, OP_GET, Vec::new());
    let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
    assert!(effects.is_empty(), "queued, never also sent: {effects:?}");
    assert_eq!(h.core(owner).gauges().2, 1);
    // Put the removal back so the harness can answer it.
    for effect in before {
        if let Effect::Store { token, op } = effect {
            let reply = answer(&mut h.table, op);
            h.core(owner).on_store_reply(0, token, reply);
        }
    }
}

fn drain_after(h: &mut Harness, owner: u64, target: u64, end: impl FnOnce(&mut RouterCore, u64)) {
    let ids: Vec<RequestId> = (0..3)
        .map(|_| h.request(owner, OP_GET, Vec::new()))
        .collect();
    let effects = h.settle(owner, 0);
    let transfer_id = sent_transfer(&effects).transfer_id;
    assert!(routed(&effects).is_empty() && replies(&effects).is_empty());
    end(h.core(owner), transfer_id);
    let effects = h.settle(owner, 1);
    // Every queued request is re-sent exactly once (to the new owner), and
    // none is answered here.
    let sent: Vec<RequestId> = routed(&effects)
        .into_iter()
        .map(|(n, _, id)| {
            assert_eq!(n, NodeId(target));
            id
        })
        .collect();
    assert_eq!(sent, ids);
    assert!(replies(&effects).is_empty());
    assert_eq!(h.core(owner).gauges(), (0, 1, 0));
}

#[test]
fn defect_b_pending_queue_drains_when_the_target_refuses() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target) = transfer_in_flight(&mut h);
    drain_after(&mut h, owner, target, |core, id| {
        core.on_transfer_ack(1, KEY, id, false)
    });
}

#[test]
fn defect_b_pending_queue_drains_when_the_ack_times_out() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target) = transfer_in_flight(&mut h);
    drain_after(&mut h, owner, target, |core, id| {
        core.on_timer(
            600,
            Timer::TransferAck {
                key: KEY,
                transfer_id: id,
            },
        )
    });
    assert_eq!(h.core(owner).counters().transfer_ack_timeouts_total, 1);
}

#[test]
fn transfer_ships_state_and_the_target_confirms_by_cas() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, target) = transfer_in_flight(&mut h);
    let transfer = sent_transfer(&h.settle(owner, 0));
    assert_eq!(transfer.route_version, RouteVersion(2));
    h.core(target)
        .on_router_transfer(0, NodeId(owner), transfer);
    let effects = h.settle(target, 0);
    assert!(effects.iter().any(|effect| matches!(
        effect.sent(),
        Some((_, NodeMessage::TransferAck { accepted: true, .. }))
    )));
    assert_eq!(
        h.core(target)
            .object_state(KEY)
            .and_then(|s| counter_value(&s)),
        Some(5)
    );
    assert_eq!(
        h.table.load(KEY).map(|r| r.owner_node),
        Some(NodeId(target))
    );
}

#[test]
fn defect_c_node_availability_means_known_up() {
    let mut core = RouterCore::new(NodeId(1), config(), 1, 0);
    assert!(core.is_node_available(NodeId(1)));
    assert!(
        !core.is_node_available(NodeId(2)),
        "unknown is not available"
    );
    assert!(!core.is_node_available(NodeId::NONE));
    core.on_node_up(NodeId(2), 1);
    assert!(core.is_node_available(NodeId(2)));
    core.on_node_down(NodeId(2), 1);
    assert!(!core.is_node_available(NodeId(2)));
    // A later incarnation is up again; a late report of the ended one
    // changes nothing.
    core.on_node_up(NodeId(2), 2);
    core.on_node_down(NodeId(2), 1);
    assert!(core.is_node_available(NodeId(2)));
}

#[test]
fn a_save_by_a_node_that_lost_ownership_fails_is_counted_and_downgrades() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    // Another node steals the record behind this node's back.
    let mut record = h.table.load(KEY).expect("record");
    record.owner_node = NodeId(7);
    let write = crate::store::RecordWrite {
        key: KEY,
        condition: crate::store::WriteCondition::CasEquals(record.cas_version),
        owner_node: NodeId(7),
        owner_incarnation: 1,
        route_version: record.route_version.next(),
        save_timepoint_ms: 0,
        state: record.state,
    };
    assert!(matches!(h.table.write(&write), WriteOutcome::Applied(_)));
    h.core(1).on_timer(2_000, Timer::Sweep);
    h.settle(1, 2_000);
    assert_eq!(h.core(1).counters().cas_conflicts_total, 1);
    let view = h.core(1).entries().next().expect("entry");
    assert!(!view.writable);
    assert_eq!(view.owner_node, NodeId(7));
}

#[test]
fn on_write_answers_only_after_the_save_applied() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let id = h.request(1, OP_ADD, add(2));
    let effects = flush(&mut h, 1);
    assert!(replies(&effects).is_empty(), "no answer before the save");
    let (token, op) = only_save(effects);
    // A concurrent get waits behind the save.
    let get = h.request(1, OP_GET, Vec::new());
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(0, token, reply);
    let effects = h.settle(1, 0);
    assert_eq!(replies(&effects), vec![(id, Ok(add(7))), (get, Ok(add(7)))]);
}

/// Fires the write retry `effects` armed, answering its store writes from
/// the table; returns what followed.
fn fire_write_retry(h: &mut Harness, node: u64, effects: &[Effect]) -> Vec<Effect> {
    let (at_ms, timer) = armed_write_retry(effects).expect("a write retry is armed");
    h.core(node).on_timer(at_ms, timer);
    settle_at(h, node, at_ms)
}

#[test]
fn on_write_save_indeterminate_is_not_acknowledged_until_a_retry_applies() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let id = h.request(1, OP_ADD, add(2));
    let (token, _) = only_save(flush(&mut h, 1));
    // The write did not apply, but nobody can know that.
    h.core(1)
        .on_store_reply(0, token, StoreReply::Written(WriteOutcome::Indeterminate));
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    assert!(replies(&effects).is_empty(), "{effects:?}");
    assert!(h.core(1).entries().next().expect("entry").writable);
    assert_eq!(h.core(1).counters().store_indeterminate_total, 1);
    // The copy is written again; once that applies, the answer goes.
    let effects = fire_write_retry(&mut h, 1, &effects);
    assert_eq!(replies(&effects), vec![(id, Ok(add(7)))]);
    let record = h.table.load(KEY).expect("record");
    assert_eq!(counter_value(&record.state), Some(7));
}

/// One core of node 1, alone, with `config` and the counter type, and one
/// OP_GET for KEY just received (its first load is the next effect).
fn one_core_with_a_get(config: RouterConfig) -> (RouterCore, RequestId) {
    let mut core = RouterCore::new(NodeId(1), config, 1, 0);
    core.register(Box::new(CounterType {
        persist: Persist::Interval,
    }));
    core.drain_effects().for_each(drop);
    let id = RequestId {
        origin_node: NodeId(1),
        seq: 1,
    };
    let request = get_request(id);
    core.on_request(0, RouterHead::local(KEY, NodeId(1)), request);
    (core, id)
}

#[test]
fn eagain_retries_with_bounded_random_waits_then_gives_up() {
    let (mut core, id) = one_core_with_a_get(config());
    let mut now = 0;
    for attempt in 1..=config().pull_attempts_max {
        let effects: Vec<Effect> = core.drain_effects().collect();
        let token = effects.iter().find_map(|e| match e {
            Effect::Store { token, .. } => Some(*token),
            _ => None,
        });
        let Some(token) = token else {
            panic!("attempt {attempt}: a load, got {effects:?}");
        };
        core.on_store_reply(now, token, StoreReply::Failed(StoreFailure::Busy));
        let effects: Vec<Effect> = core.drain_effects().collect();
        if attempt == config().pull_attempts_max {
            assert_eq!(
                replies(&effects),
                vec![(id, Err(ErrorCode::Unavailable.into()))]
            );
            return;
        }
        let Some(Effect::ArmTimer { at_ms, timer }) = effects.into_iter().next() else {
            panic!("a retry timer");
        };
        assert!(at_ms > now && at_ms <= now + config().cache_retry_interval_ms);
        now = at_ms;
        core.on_timer(now, timer);
    }
}

#[test]
fn a_terminal_store_error_answers_at_once() {
    let (mut core, id) = one_core_with_a_get(config());
    let token = match core.drain_effects().next() {
        Some(Effect::Store { token, .. }) => token,
        other => panic!("a load, got {other:?}"),
    };
    core.on_store_reply(0, token, StoreReply::Failed(StoreFailure::Failed));
    let effects: Vec<Effect> = core.drain_effects().collect();
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
}

#[test]
fn io_guard_queues_requests_of_one_object_only_and_bounds_the_queue() {
    let mut h = Harness::new(1, Persist::Interval);
    h.request(1, OP_GET, Vec::new());
    let load: Vec<Effect> = h.core(1).drain_effects().collect();
    assert_eq!(load.len(), 1);
    let mut overloaded = 0;
    for _ in 0..config().pending_queue_max + 2 {
        h.request(1, OP_GET, Vec::new());
        let effects: Vec<Effect> = h.core(1).drain_effects().collect();
        assert!(
            effects.iter().all(|e| !matches!(e, Effect::Store { .. })),
            "one IO at a time"
        );
        overloaded += replies(&effects).len();
    }
    assert_eq!(overloaded, 3, "the queue holds pending_queue_max requests");
    assert_eq!(h.core(1).counters().pending_queue_full_total, 3);
}

/// Rounds of store answers `settle_at` gives a core before it fails the
/// test: far more than any test's chain of reads and writes, so reaching
/// it means the core asks the store without end.
const SETTLE_ROUNDS_MAX: usize = 1_000;

/// Answers the store requests of `node`'s core at `now` until none is
/// left; returns the other effects.
fn settle_at(h: &mut Harness, node: u64, now: u64) -> Vec<Effect> {
    settle_within(h, node, now, SETTLE_ROUNDS_MAX)
}

/// Like `settle_at`, but fails when the core still asks the store after
/// `rounds_max` rounds of answers.
fn settle_within(h: &mut Harness, node: u64, now: u64, rounds_max: usize) -> Vec<Effect> {
    let mut all = Vec::new();
    for _ in 0..rounds_max {
        let batch: Vec<Effect> = h.core(node).drain_effects().collect();
        if batch.is_empty() {
            return all;
        }
        for effect in batch {
            match effect {
                Effect::Store { token, op } => {
                    let reply = answer(&mut h.table, op);
                    h.core(node).on_store_reply(now, token, reply);
                }
                Effect::FlushSavesAfterBatch => h.core(node).on_flush(now),
                effect => all.push(effect),
            }
        }
    }
    panic!("node {node} still asks the store after {rounds_max} rounds: {all:?}");
}

#[test]
fn a_record_of_an_ended_incarnation_is_claimed_at_once() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    // Membership declares the owner's incarnation down: no lock to wait
    // for, however recent its last save.
    h.core(other).on_node_down(NodeId(owner), 1);
    let id = h.request(other, OP_GET, Vec::new());
    let effects = settle_at(&mut h, other, 1);
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId(other));
    assert_eq!(record.route_version, RouteVersion(2));
    assert_eq!(h.core(other).counters().dead_owner_claims_total, 1);
    // The old owner's +5 was never saved (interval persistence): the new
    // owner serves the durable state.
    assert_eq!(replies(&effects), vec![(id, Ok(add(0)))]);
}

#[test]
fn a_live_owner_is_never_claimed_from_whatever_the_clocks_say() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    // Far past any lock lifetime on the other node's clock, with the owner
    // still up in membership: the request is forwarded, never claimed.
    let far = 100 * config().object_free_timeout_ms;
    h.next_seq += 1;
    let request = get_request(RequestId {
        origin_node: NodeId(other),
        seq: h.next_seq,
    });
    h.core(other)
        .on_request(far, RouterHead::local(KEY, NodeId(other)), request);
    let effects = settle_at(&mut h, other, far);
    assert_eq!(routed(&effects).len(), 1, "{effects:?}");
    assert_eq!(h.table.load(KEY).expect("record").owner_node, NodeId(owner));
}

#[test]
fn an_owner_unknown_to_membership_is_claimed_after_its_record_stood_still() {
    // Node 1 knows no other node; the record names node 7 (say, a row
    // lost with an old membership table).
    let mut core = RouterCore::new(NodeId(1), config(), 1, 0);
    core.register(Box::new(CounterType {
        persist: Persist::Interval,
    }));
    core.drain_effects().for_each(drop);
    let mut table = MemoryTable::default();
    let stale = crate::store::RecordWrite {
        key: KEY,
        condition: crate::store::WriteCondition::Absent,
        owner_node: NodeId(7),
        owner_incarnation: 3,
        route_version: RouteVersion(4),
        save_timepoint_ms: 0,
        state: 9i64.to_le_bytes().to_vec(),
    };
    table.write(&stale);
    let mut h = Harness {
        table,
        cores: [(1, core)].into_iter().collect(),
        next_seq: 0,
    };
    // First seen at 1000: not claimable yet, and node 7 is not available.
    let first = h.request(1, OP_GET, Vec::new());
    let effects = settle_at(&mut h, 1, 1_000);
    assert_eq!(
        replies(&effects),
        vec![(first, Err(ErrorCode::Unavailable.into()))]
    );
    // The record has not changed for object_free_timeout_ms of this
    // node's own time: claimed, with the state it holds.
    let later = 1_000 + config().object_free_timeout_ms;
    h.next_seq += 1;
    let request = get_request(RequestId {
        origin_node: NodeId(1),
        seq: h.next_seq,
    });
    let id = request.id;
    h.core(1)
        .on_request(later, RouterHead::local(KEY, NodeId(1)), request);
    let effects = settle_at(&mut h, 1, later);
    assert_eq!(replies(&effects), vec![(id, Ok(add(9)))]);
    assert_eq!(h.table.load(KEY).expect("record").owner_node, NodeId(1));
}

#[test]
fn a_failed_send_is_resolved_again_once_and_not_resent_to_the_same_node() {
    let mut h = Harness::new(2, Persist::Interval);
    let owner = claim_on_default(&mut h, 2);
    let other = 3 - owner;
    let id = h.request(other, OP_GET, Vec::new());
    let effects = settle_at(&mut h, other, 1);
    let sent = effects
        .into_iter()
        .find_map(Effect::into_sent)
        .expect("sent to the owner");
    // The link refuses it: the route is read again, still names the same
    // owner, and the request is answered instead of sent there again.
    h.core(other).on_send_failed(2, sent.0, sent.1);
    let effects = settle_at(&mut h, other, 2);
    assert!(routed(&effects).is_empty(), "{effects:?}");
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
    assert_eq!(h.core(other).counters().send_failures_total, 1);
}

/// A request for an object with no record, whose default node the link
/// refuses, is answered instead of sent there again: each failed send
/// re-read the record, found no owner and chose the same default node, a
/// loop of store reads that never ended (whose copies all ran once the
/// link came back).
#[test]
fn a_failed_send_to_an_unowned_objects_default_node_is_answered_not_repeated() {
    let mut h = Harness::new(2, Persist::Interval);
    let default = default_of(2);
    let other = 3 - default;
    let id = h.request(other, OP_ADD, add(1));
    let effects = settle_at(&mut h, other, 1);
    let sent = effects
        .into_iter()
        .find_map(Effect::into_sent)
        .expect("sent to the default node");
    assert_eq!(sent.0, NodeId(default));
    h.core(other).on_send_failed(2, sent.0, sent.1);
    let effects = settle_at(&mut h, other, 2);
    assert!(routed(&effects).is_empty(), "{effects:?}");
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
}

#[test]
fn shutdown_releases_every_object_in_batches() {
    let mut h = Harness::new(1, Persist::Interval);
    for object_id in 0..(SHUTDOWN_BATCH_MAX as u64 + 3) {
        let key = ObjectKey::new(COUNTER_TYPE_ID, 0, object_id);
        let request = Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq: object_id,
            },
            op: OP_ADD,
            body: add(1),
            client: None,
            needs_reply: true,
            keyed: false,
        };
        h.core(1)
            .on_request(0, RouterHead::local(key, NodeId(1)), request);
    }
    h.settle(1, 0);
    assert_eq!(h.core(1).gauges().0, SHUTDOWN_BATCH_MAX + 3);
    h.core(1).shutdown(10, 1_000);
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    let batches = effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Store {
                    op: StoreOp::WriteBatch(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(batches, 2);
    for effect in effects {
        if let Effect::Store { token, op } = effect {
            let reply = answer(&mut h.table, op);
            h.core(1).on_store_reply(10, token, reply);
        }
    }
    assert!(h.core(1).is_shutdown_complete());
    assert!(h.core(1).is_released());
    let record = h
        .table
        .load(ObjectKey::new(COUNTER_TYPE_ID, 0, 3))
        .expect("saved");
    assert_eq!(record.owner_node, NodeId::NONE);
    assert_eq!(counter_value(&record.state), Some(1));
}

/// A release the store has not answered by the shutdown deadline ends the
/// shutdown, but the core does not count as released: the node must not
/// write `left` (others would claim at once a record that still names it,
/// with older state, while the release may yet apply).
#[test]
fn a_release_unanswered_at_the_shutdown_deadline_leaves_the_core_unreleased() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    h.core(1).shutdown(10, 1_000);
    let writes = h
        .core(1)
        .drain_effects()
        .filter(|effect| {
            matches!(
                effect,
                Effect::Store {
                    op: StoreOp::WriteBatch(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(writes, 1, "the release was sent and is never answered");
    assert!(!h.core(1).is_shutdown_complete());
    h.core(1).on_timer(1_010, Timer::ShutdownDeadline);
    assert!(h.core(1).is_shutdown_complete());
    assert!(!h.core(1).is_released());
}

#[test]
fn sweep_saves_degrades_idle_objects_and_frees_idle_caches() {
    let mut h = Harness::new(1, Persist::Interval);
    claim_on_default(&mut h, 1);
    let c = config();
    h.core(1).on_timer(c.object_save_interval_ms, Timer::Sweep);
    h.settle(1, c.object_save_interval_ms);
    assert_eq!(h.core(1).counters().saves_total, 1);
    h.core(1).on_timer(c.object_free_timeout_ms, Timer::Sweep);
    h.settle(1, c.object_free_timeout_ms);
    assert_eq!(h.core(1).counters().degrades_total, 1);
    assert_eq!(h.table.load(KEY).map(|r| r.owner_node), Some(NodeId::NONE));
    assert_eq!(h.core(1).gauges(), (0, 1, 0));
    let later = c.object_free_timeout_ms + c.cache_free_timeout_ms;
    h.core(1).on_timer(later, Timer::Sweep);
    h.settle(1, later);
    assert_eq!(h.core(1).gauges(), (0, 0, 0));
    assert_eq!(h.core(1).counters().caches_freed_total, 1);
}

/// Ends the batch of events delivered to `node` since the last drain, as the
/// driver does: checks the batch asked for exactly one flush and started no
/// save itself, then runs `on_flush`. Returns the batch's other effects
/// followed by the flush's.
fn flush(h: &mut Harness, node: u64) -> Vec<Effect> {
    let (flushes, mut effects): (Vec<Effect>, Vec<Effect>) = h
        .core(node)
        .drain_effects()
        .partition(|effect| matches!(effect, Effect::FlushSavesAfterBatch));
    assert_eq!(flushes.len(), 1, "one flush per batch: {effects:?}");
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Store { .. })),
        "no save before the flush: {effects:?}"
    );
    h.core(node).on_flush(0);
    effects.extend(h.core(node).drain_effects());
    effects
}

/// Pulls the single store write out of `effects`, failing on anything else.
fn only_save(effects: Vec<Effect>) -> (StoreToken, StoreOp) {
    let mut saves = effects.into_iter().filter_map(|effect| match effect {
        Effect::Store { token, op } => Some((token, op)),
        _ => None,
    });
    let save = saves.next().expect("a save");
    assert!(saves.next().is_none(), "exactly one save");
    save
}

#[test]
fn on_write_mutations_queued_behind_a_save_share_the_next_save() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let saves_before = h.core(1).counters().saves_total;
    let first = h.request(1, OP_ADD, add(1));
    let (token, op) = only_save(flush(&mut h, 1));
    // Pipelined behind the first save: two increments and a read between.
    let second = h.request(1, OP_ADD, add(10));
    let get = h.request(1, OP_GET, Vec::new());
    let third = h.request(1, OP_ADD, add(100));
    assert!(h.core(1).drain_effects().next().is_none(), "queued, no IO");
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(0, token, reply);
    let effects = flush(&mut h, 1);
    assert_eq!(replies(&effects), vec![(first, Ok(add(6)))]);
    // One save carries both queued increments; nothing of them (the read
    // included: it saw 16) is answered before it applies.
    let (token, op) = only_save(effects);
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(0, token, reply);
    let effects = h.settle(1, 0);
    assert_eq!(
        replies(&effects),
        vec![
            (second, Ok(add(16))),
            (get, Ok(add(16))),
            (third, Ok(add(116)))
        ]
    );
    assert_eq!(h.core(1).counters().saves_total, saves_before + 2);
}

#[test]
fn on_write_gathered_save_indeterminate_answers_every_held_request_once_its_retry_applies() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let first = h.request(1, OP_ADD, add(1));
    let (token, op) = only_save(flush(&mut h, 1));
    let second = h.request(1, OP_ADD, add(10));
    let get = h.request(1, OP_GET, Vec::new());
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(0, token, reply);
    let effects = flush(&mut h, 1);
    assert_eq!(replies(&effects), vec![(first, Ok(add(6)))]);
    let (token, _) = only_save(effects);
    h.core(1)
        .on_store_reply(0, token, StoreReply::Written(WriteOutcome::Indeterminate));
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    assert!(replies(&effects).is_empty(), "{effects:?}");
    let effects = fire_write_retry(&mut h, 1, &effects);
    assert_eq!(
        replies(&effects),
        vec![(second, Ok(add(16))), (get, Ok(add(16)))]
    );
    let read = h.request(1, OP_GET, Vec::new());
    assert_eq!(replies(&h.settle(1, 0)), vec![(read, Ok(add(16)))]);
}

#[test]
fn on_write_requests_of_one_batch_share_one_save_started_by_the_flush() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let saves_before = h.core(1).counters().saves_total;
    // One batch (a connection's pipelined frames): three increments and a
    // read between them, before the flush.
    let a = h.request(1, OP_ADD, add(1));
    let get = h.request(1, OP_GET, Vec::new());
    let b = h.request(1, OP_ADD, add(10));
    let c = h.request(1, OP_ADD, add(100));
    let effects = flush(&mut h, 1);
    assert!(
        replies(&effects).is_empty(),
        "nothing answered before the save"
    );
    let (token, op) = only_save(effects);
    let StoreOp::Write(write) = &op else {
        panic!("a single write, got {op:?}");
    };
    assert_eq!(counter_value(&write.state), Some(116), "one write has all");
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(0, token, reply);
    let effects = h.settle(1, 0);
    assert_eq!(
        replies(&effects),
        vec![
            (a, Ok(add(6))),
            (get, Ok(add(6))),
            (b, Ok(add(16))),
            (c, Ok(add(116)))
        ]
    );
    assert_eq!(h.core(1).counters().saves_total, saves_before + 1);
    // The flush was used up: the next batch asks for one of its own.
    let d = h.request(1, OP_ADD, add(1000));
    let (token, op) = only_save(flush(&mut h, 1));
    let reply = answer(&mut h.table, op);
    h.core(1).on_store_reply(0, token, reply);
    assert_eq!(replies(&h.settle(1, 0)), vec![(d, Ok(add(1116)))]);
}

#[test]
fn on_write_read_of_a_saved_state_is_answered_at_once_without_a_flush() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let get = h.request(1, OP_GET, Vec::new());
    let effects: Vec<Effect> = h.core(1).drain_effects().collect();
    assert_eq!(replies(&effects), vec![(get, Ok(add(5)))]);
    assert_eq!(effects.len(), 1, "no flush, no save: {effects:?}");
}

#[test]
fn transfer_asked_before_the_flush_starts_after_the_held_outputs_saved() {
    let mut h = Harness::new(2, Persist::OnWrite);
    let owner = claim_on_default(&mut h, 2);
    let target = if owner == 1 { 2 } else { 1 };
    let id = h.request(owner, OP_ADD, add(2));
    h.core(owner)
        .transfer(0, KEY, NodeId(target), false)
        .expect("transfer queued");
    // The save of the held increment goes first, the handoff after it.
    let (token, op) = only_save(flush(&mut h, owner));
    let StoreOp::Write(write) = &op else {
        panic!("a single write, got {op:?}");
    };
    assert_eq!(write.owner_node, NodeId(owner), "a save, not the handoff");
    let reply = answer(&mut h.table, op);
    h.core(owner).on_store_reply(0, token, reply);
    let effects = h.settle(owner, 0);
    assert_eq!(replies(&effects), vec![(id, Ok(add(7)))]);
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId(target));
    assert_eq!(counter_value(&record.state), Some(7));
}

#[test]
fn shutdown_before_the_flush_releases_held_outputs_with_the_object() {
    let mut h = Harness::new(1, Persist::OnWrite);
    claim_on_default(&mut h, 1);
    let saves_before = h.core(1).counters().saves_total;
    let id = h.request(1, OP_ADD, add(2));
    h.core(1).shutdown(0, 1_000);
    // The release writes the state with the increment in it; the flush that
    // follows finds nothing left to save.
    let effects = h.settle(1, 0);
    assert_eq!(replies(&effects), vec![(id, Ok(add(7)))]);
    assert_eq!(h.core(1).counters().saves_total, saves_before + 1);
    assert!(h.core(1).is_shutdown_complete());
    let record = h.table.load(KEY).expect("record");
    assert_eq!(record.owner_node, NodeId::NONE);
    assert_eq!(counter_value(&record.state), Some(7));
}

#[test]
fn a_migration_queues_at_most_pending_queue_max_requests() {
    let mut h = Harness::new(2, Persist::Interval);
    let (owner, _) = transfer_in_flight(&mut h);
    // The removal write is not answered: every request meets the migration.
    let removal: Vec<Effect> = h.core(owner).drain_effects().collect();
    assert_eq!(removal.len(), 1, "{removal:?}");
    let mut refused = Vec::new();
    for _ in 0..config().pending_queue_max + 2 {
        h.request(owner, OP_GET, Vec::new());
        let effects: Vec<Effect> = h.core(owner).drain_effects().collect();
        refused.extend(replies(&effects).into_iter().map(|(_, outcome)| outcome));
    }
    assert_eq!(refused, vec![Err(ErrorCode::Overloaded.into()); 2]);
    assert_eq!(h.core(owner).counters().pending_queue_full_total, 2);
    assert_eq!(h.core(owner).gauges().2, config().pending_queue_max);
}

#[test]
fn a_core_holds_at_most_entries_per_core_max_keys() {
    let bounded = RouterConfig {
        entries_per_core_max: 1,
        ..config()
    };
    let mut core = RouterCore::new(NodeId(1), bounded, 1, 0);
    core.register(Box::new(CounterType {
        persist: Persist::Interval,
    }));
    core.drain_effects().for_each(drop);
    let mut h = Harness {
        table: MemoryTable::default(),
        cores: [(1, core)].into_iter().collect(),
        next_seq: 0,
    };
    let first = h.request(1, OP_ADD, add(1));
    assert_eq!(replies(&h.settle(1, 0)), vec![(first, Ok(add(1)))]);
    // A second key finds the core full: refused, nothing read or claimed.
    let other = ObjectKey::new(COUNTER_TYPE_ID, 0, 43);
    let id = RequestId {
        origin_node: NodeId(1),
        seq: 1_000,
    };
    let request = get_request(id);
    h.core(1)
        .on_request(1, RouterHead::local(other, NodeId(1)), request);
    let effects = h.settle(1, 1);
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Overloaded.into()))]
    );
    assert!(h.table.load(other).is_none());
    assert_eq!(h.core(1).counters().entries_full_total, 1);
    assert_eq!(h.core(1).entries().count(), 1);
}

/// Requests for keys with no record leave no entry behind once answered
/// or sent on: kept until the sweep (`cache_free_timeout_ms`), a flood of
/// them (a `room.leave` of any room id) filled the core, and every new
/// object was refused OVERLOADED until the sweep freed them.
#[test]
fn keys_with_no_record_leave_no_entry_behind() {
    let bounded = RouterConfig {
        entries_per_core_max: 2,
        ..config()
    };
    let mut h = Harness::with_config(2, Persist::Interval, bounded);
    let default_of_key = |key| {
        (1..=2)
            .max_by_key(|node| (rendezvous_score(key, NodeId(*node)), *node))
            .unwrap()
    };
    let elsewhere: Vec<ObjectKey> = (1_000..)
        .map(|id| ObjectKey::new(COUNTER_TYPE_ID, 0, id))
        .filter(|key| default_of_key(*key) == 2)
        .take(5)
        .collect();
    for (seq, key) in (1..).zip(elsewhere) {
        let id = h.request_key(1, seq, key, OP_GET, Vec::new());
        let effects = settle_at(&mut h, 1, seq);
        assert_eq!(routed(&effects).len(), 1, "{effects:?}");
        assert!(replies(&effects).is_empty(), "{id:?}: {effects:?}");
    }
    assert_eq!(h.core(1).counters().entries_full_total, 0);
    assert_eq!(h.core(1).entries().count(), 0);
}

#[test]
fn a_first_access_elsewhere_goes_to_the_default_node_which_claims() {
    let mut h = Harness::new(2, Persist::Interval);
    let default = default_of(2);
    let other = 3 - default;
    let id = h.request(other, OP_ADD, add(1));
    let effects = h.settle(other, 0);
    assert_eq!(
        routed(&effects),
        vec![(NodeId(default), routed(&effects)[0].1, id)]
    );
    assert!(h.table.load(KEY).is_none(), "the other node claims nothing");
    assert_eq!(h.core(other).counters().claims_total, 0);
}

/// Node 1 alone, with a record of KEY owned by node 7, which membership
/// does not know.
fn harness_with_unknown_owner() -> Harness {
    let mut core = RouterCore::new(NodeId(1), config(), 1, 0);
    core.register(Box::new(CounterType {
        persist: Persist::Interval,
    }));
    core.drain_effects().for_each(drop);
    let mut table = MemoryTable::default();
    table.write(&crate::store::RecordWrite {
        key: KEY,
        condition: crate::store::WriteCondition::Absent,
        owner_node: NodeId(7),
        owner_incarnation: 3,
        route_version: RouteVersion(4),
        save_timepoint_ms: 0,
        state: 9i64.to_le_bytes().to_vec(),
    });
    Harness {
        table,
        cores: [(1, core)].into_iter().collect(),
        next_seq: 0,
    }
}

#[test]
fn an_unavailable_owner_is_read_once_more_then_answered_unavailable() {
    // Two attempts, the second after re-reading the route (`send_msg_raw` in
    // docs/origins.md).
    let mut h = harness_with_unknown_owner();
    let id = h.request(1, OP_GET, Vec::new());
    let effects = settle_at(&mut h, 1, 1_000);
    assert_eq!(
        replies(&effects),
        vec![(id, Err(ErrorCode::Unavailable.into()))]
    );
    assert_eq!(h.core(1).counters().pulls_total, 2);
    assert!(routed(&effects).is_empty());
}

#[path = "drain_tests.rs"]
mod drain_tests;

#[path = "tests_refusals.rs"]
mod refusals;

#[path = "tests_fence.rs"]
mod fence;

#[path = "tests_entry.rs"]
mod entry_checks;

#[path = "tests_unknown.rs"]
mod unknown_writes;
