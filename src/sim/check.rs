//! The simulator's invariants: their names, and the ones checked after
//! every step on the store and the route caches (the cluster's are in
//! `safety.rs`, the answers' in `answers.rs`).

use std::collections::{BTreeMap, BTreeSet};

use wire::ObjectKey;

use super::counter::{counter_value, COUNTER_TYPE_ID};
use super::world::{Fate, World};
use crate::ids::{NodeId, RouteVersion};
use crate::router::RequestId;
use crate::store::CasVersion;

/// Every invariant the simulator checks. Its name starts the failure
/// message, in brackets, so a failing seed says which one broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Invariant {
    /// A claim applied while the previous owner's incarnation was live
    /// (running, unfenced, its lease not run out on its own clock).
    ClaimOfLiveLock,
    /// One route version of a key names one owner, in the store and in
    /// every route cache.
    RouteVersionOwner,
    /// No writable copy the store showed stale (a conflict, a newer
    /// record); once the cluster settled, every writable copy is the
    /// store's current record, owned by its node and incarnation.
    StaleWritable,
    /// A copy is never dropped as another node's on meeting a record
    /// that a write of its own node's live incarnation left.
    OwnCopyDropped,
    /// Every request is answered unless its loss is provable.
    RequestUnanswered,
    /// At no instant do two nodes accept a write for one object.
    TwoWriters,
    /// Every counter answer is no lower than what was acknowledged before
    /// the request was sent.
    ReadBelowAcked,
    /// A fenced node (or one past its lease) accepts no write.
    FencedWrite,
    /// A writable copy came from an Applied write of its node.
    WritableWithoutAppliedWrite,
    /// A writable copy whose CAS version is the store's belongs to the
    /// store's owner.
    WritableNotStoreOwner,
    /// Route versions never decrease, in the store or in a node's caches.
    RouteVersionDown,
    /// The router emits at most one answer per request.
    DoubleAnswer,
    /// No acknowledged `on_write` increment is lost, none applied twice.
    CounterSum,
    /// In the calm phase every request succeeds and the cluster settles.
    Calm,
    /// The push invariants of the player and room services.
    Rooms,
    /// Membership's own invariants (`Membership::check`) after every step
    /// of a node's membership machine.
    Membership,
    /// A router assertion (or the simulator's) panicked.
    Panic,
}

impl Invariant {
    pub const ALL: [Invariant; 17] = [
        Invariant::ClaimOfLiveLock,
        Invariant::RouteVersionOwner,
        Invariant::StaleWritable,
        Invariant::OwnCopyDropped,
        Invariant::RequestUnanswered,
        Invariant::TwoWriters,
        Invariant::ReadBelowAcked,
        Invariant::FencedWrite,
        Invariant::WritableWithoutAppliedWrite,
        Invariant::WritableNotStoreOwner,
        Invariant::RouteVersionDown,
        Invariant::DoubleAnswer,
        Invariant::CounterSum,
        Invariant::Calm,
        Invariant::Rooms,
        Invariant::Membership,
        Invariant::Panic,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::ClaimOfLiveLock => "claim-of-live-lock",
            Invariant::RouteVersionOwner => "route-version-owner",
            Invariant::StaleWritable => "stale-writable",
            Invariant::OwnCopyDropped => "own-copy-dropped",
            Invariant::RequestUnanswered => "request-unanswered",
            Invariant::TwoWriters => "two-writers",
            Invariant::ReadBelowAcked => "read-below-acked",
            Invariant::FencedWrite => "fenced-write",
            Invariant::WritableWithoutAppliedWrite => "writable-without-applied-write",
            Invariant::WritableNotStoreOwner => "writable-not-store-owner",
            Invariant::RouteVersionDown => "route-version-down",
            Invariant::DoubleAnswer => "double-answer",
            Invariant::CounterSum => "counter-sum",
            Invariant::Calm => "calm",
            Invariant::Rooms => "rooms",
            Invariant::Membership => "membership",
            Invariant::Panic => "panic",
        }
    }

    /// The invariant a failure message names.
    pub fn of_failure(message: &str) -> Option<Invariant> {
        let start = message.find('[')? + 1;
        let end = start + message[start..].find(']')?;
        let name = &message[start..end];
        Invariant::ALL.into_iter().find(|i| i.name() == name)
    }

    /// `message` with the invariant's name in front.
    pub fn fail(self, message: impl std::fmt::Display) -> String {
        format!("[{}] {message}", self.name())
    }
}

/// What changed since the last check: the records, and which cores ran.
/// A check looks only at what may have changed; what did not change
/// passed the previous check.
#[derive(Default)]
pub(super) struct Changes {
    pub store: bool,
    pub cores: BTreeSet<(u64, u32)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        !self.store && self.cores.is_empty()
    }

    /// Whether the entries of `node`'s core `core` must be looked at.
    pub fn touches(&self, node: u64, core: u32) -> bool {
        self.store || self.cores.contains(&(node, core))
    }
}

#[derive(Default)]
pub(super) struct Checker {
    /// Route versions per (node, process, core) as its last check saw
    /// them. A freed cache starts over: only keys present at both checks
    /// are compared.
    route_versions: BTreeMap<(u64, u64, u32), BTreeMap<ObjectKey, RouteVersion>>,
    store_versions: BTreeMap<ObjectKey, RouteVersion>,
    /// The records' (CAS version, owner) as of the last check.
    store: BTreeMap<ObjectKey, (CasVersion, NodeId)>,
    /// Writes reported Applied to a node: (node, key, cas).
    applied: BTreeSet<(u64, ObjectKey, CasVersion)>,
    replies: BTreeSet<RequestId>,
    double_reply: Option<RequestId>,
    /// Records an outside writer re-saved as they were: (key, cas). Such a
    /// record says what its owner's copy last wrote, so the owner may take
    /// it for a write of its own of unknown outcome that said the same.
    resaved: BTreeSet<(ObjectKey, CasVersion)>,
}

impl Checker {
    pub fn applied(&mut self, node: u64, key: ObjectKey, cas: CasVersion) {
        self.applied.insert((node, key, cas));
    }

    /// An outside writer re-saved `key`'s record as it was, at `cas`.
    pub fn resaved(&mut self, key: ObjectKey, cas: CasVersion) {
        self.resaved.insert((key, cas));
    }

    /// Whether a write of `node` applied at `cas` of `key`.
    pub fn was_applied(&self, node: u64, key: ObjectKey, cas: CasVersion) -> bool {
        self.applied.contains(&(node, key, cas))
    }

    pub fn reply_produced(&mut self, request: RequestId) {
        if !self.replies.insert(request) && self.double_reply.is_none() {
            self.double_reply = Some(request);
        }
    }

    pub fn node_down(&mut self, node: u64) {
        self.route_versions.retain(|(n, _, _), _| *n != node);
    }

    pub fn check(&mut self, world: &World, changes: &Changes) -> Result<(), String> {
        if let Some(request) = self.double_reply {
            return Err(Invariant::DoubleAnswer.fail(format!("request {request:?} answered twice")));
        }
        if changes.store {
            self.check_store(world)?;
        }
        for (node, sim_node) in world.nodes.iter().filter(|(_, n)| n.up) {
            for (index, core) in sim_node.cores.iter().enumerate() {
                let index = index as u32;
                if !changes.touches(*node, index) {
                    continue;
                }
                if changes.cores.contains(&(*node, index)) {
                    let id = (*node, sim_node.process, index);
                    let versions: BTreeMap<ObjectKey, RouteVersion> =
                        core.entries().map(|v| (v.key, v.route_version)).collect();
                    let previous = self.route_versions.insert(id, versions);
                    let went_down = previous.iter().flatten().find(|(key, version)| {
                        self.route_versions[&id]
                            .get(key)
                            .is_some_and(|now| now < version)
                    });
                    if let Some((key, _)) = went_down {
                        return Err(Invariant::RouteVersionDown
                            .fail(format!("node {node}: route version of {key:?} went down")));
                    }
                }
                for view in core.entries().filter(|v| v.writable) {
                    let stored = self.store.get(&view.key).copied();
                    self.check_writable(stored, *node, view.key, view.cas_version)?;
                }
            }
        }
        Ok(())
    }

    /// The records: route versions never go down.
    fn check_store(&mut self, world: &World) -> Result<(), String> {
        for key in world.tracked_keys() {
            let Some(record) = world.table.load(key) else {
                continue;
            };
            let seen = self.store_versions.entry(key).or_default();
            if record.route_version < *seen {
                return Err(Invariant::RouteVersionDown
                    .fail(format!("store route version of {key:?} went down")));
            }
            *seen = record.route_version;
            self.store
                .insert(key, (record.cas_version, record.owner_node));
        }
        Ok(())
    }

    fn check_writable(
        &self,
        stored: Option<(CasVersion, NodeId)>,
        node: u64,
        key: ObjectKey,
        cas: Option<CasVersion>,
    ) -> Result<(), String> {
        let Some(cas) = cas else {
            return Err(Invariant::WritableWithoutAppliedWrite.fail(format!(
                "node {node}: writable {key:?} without a CAS version"
            )));
        };
        if !self.applied.contains(&(node, key, cas)) && !self.resaved.contains(&(key, cas)) {
            return Err(Invariant::WritableWithoutAppliedWrite.fail(format!(
                "node {node}: writable {key:?} at {cas:?} without an Applied write"
            )));
        }
        if let Some((cas_version, owner_node)) = stored {
            if cas_version == cas && owner_node != NodeId(node) {
                return Err(Invariant::WritableNotStoreOwner.fail(format!(
                    "node {node}: writable {key:?} can commit but the store owner is {owner_node:?}"
                )));
            }
        }
        Ok(())
    }

    /// final == acked deltas + a subset of the unacknowledged ones (deltas are
    /// positive, so it lies between the two sums).
    pub fn check_counters(&self, world: &World) -> Result<(), String> {
        let mut sums: BTreeMap<ObjectKey, (i64, i64)> = BTreeMap::new();
        for op in world
            .ops
            .values()
            .filter(|op| op.key.type_id == COUNTER_TYPE_ID)
        {
            let sum = sums.entry(op.key).or_default();
            match op.fate {
                Fate::Acked => sum.0 += op.delta,
                Fate::Unknown | Fate::Pending => sum.1 += op.delta,
            }
        }
        for (key, (acked, maybe)) in sums {
            let value = world
                .table
                .load(key)
                .and_then(|record| counter_value(&record.state))
                .unwrap_or(0);
            if value < acked {
                return Err(Invariant::CounterSum.fail(format!(
                    "{key:?}: acknowledged increments lost: {value} < {acked}"
                )));
            }
            if value > acked + maybe {
                return Err(Invariant::CounterSum.fail(format!(
                    "{key:?}: increments applied twice: {value} > {acked} + {maybe}"
                )));
            }
        }
        Ok(())
    }
}
