//! The cluster's safety invariants, checked at the offending write or
//! after every step against the truth of the simulation (which process
//! runs, with which incarnation, and what its own clock says of its
//! lease):
//! - no claim of another node's live lock;
//! - one route version names one owner;
//! - no writable copy the store showed stale, and none at all once the
//!   cluster settled;
//! - at no instant do two nodes accept a write for one object;
//! - a fenced node (or one past its lease) accepts no write.

use std::collections::{BTreeMap, BTreeSet};

use wire::ObjectKey;

use super::check::{Changes, Invariant};
use super::world::World;
use crate::ids::{NodeId, RouteVersion};
use crate::store::{CasVersion, RecordWrite, RouteRecord};

#[derive(Default)]
pub(super) struct Safety {
    /// The owner each route version of each key named when written.
    route_owners: BTreeMap<(ObjectKey, RouteVersion), NodeId>,
    /// The first violation found inside a step, reported after it.
    pub error: Option<String>,
    /// Invariants switched off (to show a later one catching a bug alone).
    pub disabled: BTreeSet<Invariant>,
}

impl Safety {
    pub fn is_disabled(&self, invariant: Invariant) -> bool {
        self.disabled.contains(&invariant)
    }

    /// Records a violation (the first one wins) unless it is switched off.
    pub fn fail(&mut self, invariant: Invariant, message: String) {
        if self.error.is_none() && !self.is_disabled(invariant) {
            self.error = Some(invariant.fail(message));
        }
    }

    /// Notes that `version` of `key` names `owner`; a different owner seen
    /// before under the same version is returned.
    fn name_owner(
        &mut self,
        key: ObjectKey,
        version: RouteVersion,
        owner: NodeId,
    ) -> Option<NodeId> {
        let named = *self.route_owners.entry((key, version)).or_insert(owner);
        (named != owner).then_some(named)
    }
}

/// Whether `router` may serve at `now` (its clock) by the rule itself, not
/// by the router's own judgement of it (which a planted bug may break): not
/// fenced, and its lease holding.
fn may_serve(router: &crate::router::RouterCore, now: u64) -> bool {
    !router.is_fenced() && router.lease_until_ms().is_none_or(|until| now < until)
}

impl World {
    /// Whether incarnation `incarnation` of `node` holds a live lock on
    /// `key` now: its process runs with that incarnation and the core that
    /// owns `key` may serve by its own clock (not fenced, lease holding).
    /// A paused process counts: it may resume before its lease ends.
    fn lock_live(&self, node: NodeId, incarnation: u64, key: ObjectKey) -> bool {
        let Some(sim_node) = self.nodes.get(&node.0).filter(|n| n.serving()) else {
            return false;
        };
        let core = &sim_node.cores[self.core_of(key) as usize];
        core.incarnation() == incarnation && may_serve(core, sim_node.clock.local(self.now_ms))
    }

    /// The invariants an applied write can break, checked at the write.
    /// `writer` is the node whose write it is (0: an outside writer).
    pub(super) fn check_applied(
        &mut self,
        writer: u64,
        previous: Option<&RouteRecord>,
        write: &RecordWrite,
    ) {
        if let Some(named) =
            self.safety
                .name_owner(write.key, write.route_version, write.owner_node)
        {
            let message = format!(
                "node {writer} wrote {:?} at {:?} naming {:?}, which already named {named:?}",
                write.key, write.route_version, write.owner_node
            );
            self.safety.fail(Invariant::RouteVersionOwner, message);
        }
        // A claim: the writer makes itself the owner of another node's
        // record. A handoff (the old owner names the target), a release
        // (owner 0) and an outside re-save are not claims.
        let Some(previous) = previous else {
            return;
        };
        let claim = write.owner_node == NodeId(writer)
            && previous.owner_node != write.owner_node
            && !previous.owner_node.is_none();
        if claim && self.lock_live(previous.owner_node, previous.owner_incarnation, write.key) {
            let message = format!(
                "node {writer} claimed {:?} from {:?} incarnation {}, live with its lease",
                write.key, previous.owner_node, previous.owner_incarnation
            );
            self.safety.fail(Invariant::ClaimOfLiveLock, message);
        }
        if claim {
            self.report.dead_owner_claims += 1;
        }
    }

    /// After a router call on `node`'s core `core`: every write its
    /// handlers accepted was accepted by a node that may serve, while no
    /// other node could accept one for the same object.
    pub(super) fn check_accepted_writes(&mut self, node: u64, core: u32) {
        let Some(sim_node) = self.nodes.get(&node) else {
            return;
        };
        let keys: Vec<ObjectKey> = std::mem::take(&mut *sim_node.writes.borrow_mut());
        for key in keys {
            self.report.writes_checked += 1;
            let Some(sim_node) = self.nodes.get(&node).filter(|n| n.serving()) else {
                return;
            };
            let router = &sim_node.cores[core as usize];
            let now = sim_node.clock.local(self.now_ms);
            if !may_serve(router, now) {
                let message = format!(
                    "node {node} (incarnation {}, fenced {}) accepted a write of {key:?} at \
                     {} (its clock {now})",
                    router.incarnation(),
                    router.is_fenced(),
                    self.now_ms
                );
                self.safety.fail(Invariant::FencedWrite, message);
            }
            if let Some(other) = self.other_writer(node, key) {
                let message = format!(
                    "node {node} accepted a write of {key:?} at {} while node {other} \
                     could accept one too",
                    self.now_ms
                );
                self.safety.fail(Invariant::TwoWriters, message);
            }
        }
    }

    /// Another node whose copy of `key` accepts writes now.
    fn other_writer(&self, node: u64, key: ObjectKey) -> Option<u64> {
        let core = self.core_of(key) as usize;
        self.nodes
            .iter()
            .filter(|(id, n)| **id != node && n.serving())
            .find(|(_, n)| {
                let router = &n.cores[core];
                may_serve(router, n.clock.local(self.now_ms))
                    && router.entries().any(|v| v.key == key && v.accepting)
            })
            .map(|(id, _)| *id)
    }

    /// After a store answer showed `node` the record of `key` at `cas`: no
    /// copy of it older than that is still writable there.
    pub(super) fn check_told_stale(
        &mut self,
        node: u64,
        core: u32,
        key: ObjectKey,
        cas: CasVersion,
    ) {
        let Some(sim_node) = self.nodes.get(&node).filter(|n| n.serving()) else {
            return;
        };
        let stale = sim_node.cores[core as usize]
            .entries()
            .find(|v| v.key == key && v.writable && v.cas_version.is_some_and(|c| c < cas));
        if let Some(view) = stale {
            let message = format!(
                "node {node} keeps a writable copy of {key:?} at {:?} after the store \
                 showed it {cas:?}",
                view.cas_version
            );
            self.safety.fail(Invariant::StaleWritable, message);
        }
    }

    /// Every step: route caches agree with the owner each version named;
    /// once the cluster settled, every writable copy is the store's current
    /// record, owned by its node and incarnation (or has a write in flight).
    pub(super) fn check_entries(&self, changes: &Changes) -> Result<(), String> {
        let settled = self.settled_from_ms.is_some_and(|at| self.now_ms >= at);
        for (node, sim_node) in self.nodes.iter().filter(|(_, n)| n.serving()) {
            for (index, router) in sim_node.cores.iter().enumerate() {
                if !changes.touches(*node, index as u32) {
                    continue;
                }
                for view in router.entries() {
                    let named = self
                        .safety
                        .route_owners
                        .get(&(view.key, view.route_version));
                    if let Some(named) = named.filter(|named| **named != view.owner_node) {
                        let message = format!(
                            "node {node} routes {:?} at {:?} to {:?}, a version that named \
                             {named:?}",
                            view.key, view.route_version, view.owner_node
                        );
                        return self.gate(Invariant::RouteVersionOwner, message);
                    }
                    if !settled || !view.writable || view.io_in_flight {
                        continue;
                    }
                    let record = self.table.load(view.key);
                    let current = record.as_ref().is_some_and(|r| {
                        r.owner_node == NodeId(*node)
                            && r.owner_incarnation == router.incarnation()
                            && Some(r.cas_version) == view.cas_version
                    });
                    if !current {
                        let message = format!(
                            "settled, node {node} holds a writable copy of {:?} at {:?}; the \
                             store has {:?}",
                            view.key,
                            view.cas_version,
                            record.map(|r| (r.owner_node, r.owner_incarnation, r.cas_version))
                        );
                        return self.gate(Invariant::StaleWritable, message);
                    }
                }
            }
        }
        Ok(())
    }

    /// A violation as an error, unless that invariant is switched off.
    pub(super) fn gate(&self, invariant: Invariant, message: String) -> Result<(), String> {
        if self.safety.is_disabled(invariant) {
            Ok(())
        } else {
            Err(invariant.fail(message))
        }
    }
}
