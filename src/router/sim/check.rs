//! The simulator's invariants.

use std::collections::{BTreeMap, BTreeSet};

use wire::ObjectKey;

use super::counter::{counter_value, COUNTER_TYPE_ID};
use super::world::{Fate, World};
use crate::router::RequestId;
use crate::store::{CasVersion, NodeId, RouteVersion};

#[derive(Default)]
pub(super) struct Checker {
    /// Route version seen per (node, incarnation, key), with the generation
    /// of the check that saw it.
    route_versions: BTreeMap<(u64, u64, ObjectKey), (RouteVersion, u64)>,
    generation: u64,
    store_versions: BTreeMap<ObjectKey, RouteVersion>,
    /// Writes reported Applied to a node: (node, key, cas).
    applied: BTreeSet<(u64, ObjectKey, CasVersion)>,
    replies: BTreeSet<RequestId>,
    double_reply: Option<RequestId>,
}

impl Checker {
    pub fn applied(&mut self, node: u64, key: ObjectKey, cas: CasVersion) {
        self.applied.insert((node, key, cas));
    }

    pub fn reply_produced(&mut self, request: RequestId) {
        if !self.replies.insert(request) && self.double_reply.is_none() {
            self.double_reply = Some(request);
        }
    }

    pub fn node_down(&mut self, node: u64) {
        self.route_versions.retain(|(n, _, _), _| *n != node);
    }

    pub fn check(&mut self, world: &World) -> Result<(), String> {
        if let Some(request) = self.double_reply {
            return Err(format!("request {request:?} answered twice"));
        }
        // Each record is read once per check: the store side of the
        // writable check below uses the same snapshot.
        let mut store = BTreeMap::new();
        for key in world.tracked_keys() {
            let Some(record) = world.table.load(key) else {
                continue;
            };
            let seen = self.store_versions.entry(key).or_default();
            if record.route_version < *seen {
                return Err(format!("store route version of {key:?} went down"));
            }
            *seen = record.route_version;
            store.insert(key, (record.cas_version, record.owner_node));
        }
        // A freed cache starts over: only entries present at the previous
        // check (stamped with its generation) are compared.
        let previous = self.generation;
        self.generation += 1;
        for (node, sim_node) in world.nodes.iter().filter(|(_, n)| n.up) {
            for core in &sim_node.cores {
                for view in core.entries() {
                    let id = (*node, sim_node.incarnation, view.key);
                    let seen = self
                        .route_versions
                        .insert(id, (view.route_version, self.generation));
                    if seen.is_some_and(|(version, generation)| {
                        generation == previous && view.route_version < version
                    }) {
                        return Err(format!(
                            "node {node}: route version of {:?} went down",
                            view.key
                        ));
                    }
                    if view.writable {
                        let stored = store.get(&view.key).copied();
                        self.check_writable(stored, *node, view.key, view.cas_version)?;
                    }
                }
            }
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
            return Err(format!(
                "node {node}: writable {key:?} without a CAS version"
            ));
        };
        if !self.applied.contains(&(node, key, cas)) {
            return Err(format!(
                "node {node}: writable {key:?} at {cas:?} without an Applied write"
            ));
        }
        if let Some((cas_version, owner_node)) = stored {
            if cas_version == cas && owner_node != NodeId(node) {
                return Err(format!(
                    "node {node}: writable {key:?} can commit but the store owner is {owner_node:?}"
                ));
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
                return Err(format!(
                    "{key:?}: acknowledged increments lost: {value} < {acked}"
                ));
            }
            if value > acked + maybe {
                return Err(format!(
                    "{key:?}: increments applied twice: {value} > {acked} + {maybe}"
                ));
            }
        }
        Ok(())
    }
}
