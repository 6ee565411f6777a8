//! What the core shows and is told without running a step: its node and
//! incarnation, the lease and membership's view as they stand (membership's
//! news arrives in `events/membership.rs`), the effects and counters,
//! read-only views of its entries, and the drain's bookkeeping (its
//! transfers start through `RouterCore::transfer`).

use wire::ObjectKey;

use super::core::RouterCore;
use super::ctx::RouterCounters;
use super::drain::{DrainProgress, DrainState};
use super::entry::Entry;
use super::types::Effect;
use crate::config::Persist;
use crate::ids::{NodeId, RouteVersion};
use crate::page::smallest_by_key;
use crate::store::CasVersion;

/// A read-only view of one entry, for metrics, tests and the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryView {
    pub key: ObjectKey,
    pub owner_node: NodeId,
    pub route_version: RouteVersion,
    pub cas_version: Option<CasVersion>,
    pub writable: bool,
    /// A copy kept aside by a fence, not served until written back under
    /// the new incarnation (`writable` is false meanwhile).
    pub aside: bool,
    /// Writable and free to run a request now: no IO that holds requests
    /// back, no handoff in progress.
    pub accepting: bool,
    /// A store operation is in flight for this key.
    pub io_in_flight: bool,
    pub queued: usize,
}

impl RouterCore {
    pub fn node(&self) -> NodeId {
        self.ctx.node
    }

    /// Sets the incarnation the records this core writes as owner carry
    /// (before the core serves; later changes go through `rejoin`).
    pub fn set_incarnation(&mut self, incarnation: u64) {
        self.ctx.incarnation = incarnation;
    }

    pub fn incarnation(&self) -> u64 {
        self.ctx.incarnation
    }

    /// The lease end this core holds (`None`: outside any cluster).
    pub fn lease_until_ms(&self) -> Option<u64> {
        self.ctx.lease_until_ms
    }

    /// Whether the core is fenced (see `fence`).
    pub fn is_fenced(&self) -> bool {
        self.ctx.fenced
    }

    /// Whether the core may serve objects at `now_ms` (its clock): not
    /// fenced, and its lease, if it has one, holds.
    pub fn may_serve(&self, now_ms: u64) -> bool {
        self.ctx.may_serve(now_ms)
    }

    /// The effects produced since the last drain, in order.
    pub fn drain_effects(&mut self) -> std::vec::Drain<'_, Effect> {
        self.ctx.effects.drain(..)
    }

    /// Moves the effects produced since the last call to the end of `into`:
    /// a swap of the two vectors when `into` is empty, so a driver that
    /// keeps one vector moves no effect and allocates nothing per batch.
    pub fn take_effects(&mut self, into: &mut Vec<Effect>) {
        if into.is_empty() {
            std::mem::swap(into, &mut self.ctx.effects);
        } else {
            into.append(&mut self.ctx.effects);
        }
    }

    pub fn counters(&self) -> &RouterCounters {
        &self.ctx.counters
    }

    pub fn is_node_available(&self, node: NodeId) -> bool {
        self.ctx.is_node_available(node)
    }

    /// Marks this node draining (no new objects placed here) or not.
    pub fn set_draining(&mut self, draining: bool) {
        self.ctx.draining = draining;
    }

    /// Whether this node drains.
    pub fn is_draining(&self) -> bool {
        self.ctx.draining
    }

    /// Views of every entry, in key order.
    pub fn entries(&self) -> impl Iterator<Item = EntryView> + '_ {
        self.managers.values().flat_map(|manager| {
            let on_write = manager.kind.persist() == Persist::OnWrite;
            manager
                .entries
                .iter()
                .map(move |(key, entry)| view_of(on_write, *key, entry))
        })
    }

    /// Writable objects (held aside ones included, as in [`Self::gauges`])
    /// by type id, in type id order.
    pub fn objects_by_type(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.managers.iter().map(|(type_id, manager)| {
            let objects = manager
                .entries
                .values()
                .filter(|entry| entry.is_writable() || entry.is_aside())
                .count();
            (*type_id, objects)
        })
    }

    /// A page of this core's entries of `type_id` (writable objects and
    /// route caches): the `limit` smallest object ids above `after`, in
    /// id order. One walk of the type's entries, holding no more than
    /// twice the page (`page::smallest_by_key`): a core may hold a
    /// million entries, and this runs on the core that serves them.
    pub fn objects_page(&self, type_id: u32, after: Option<u64>, limit: usize) -> Vec<EntryView> {
        let Some(manager) = self.managers.get(&type_id) else {
            return Vec::new();
        };
        let on_write = manager.kind.persist() == Persist::OnWrite;
        let above = |id: u64| after.is_none_or(|after| id > after);
        let walk = manager
            .entries
            .iter()
            .filter(|(key, _)| above(key.object_id))
            .map(|(key, entry)| view_of(on_write, *key, entry));
        smallest_by_key(walk, limit, |view| view.key.object_id)
    }

    /// The keys this core's requests named most over the last one to two
    /// minutes, most requested first, and the time that covers (see
    /// `hot.rs`).
    pub fn hot_objects(&mut self, now_ms: u64) -> (Vec<super::HotObject>, u64) {
        self.ctx.hot.report(now_ms)
    }

    /// Gauges: (writable objects, route caches, queued requests).
    pub fn gauges(&self) -> (usize, usize, usize) {
        let mut gauges = (0, 0, 0);
        for view in self.entries() {
            if view.writable || view.aside {
                gauges.0 += 1;
            } else {
                gauges.1 += 1;
            }
            gauges.2 += view.queued;
        }
        gauges
    }

    /// The encoded state of a writable object (tests and the simulator).
    pub fn object_state(&self, key: ObjectKey) -> Option<Vec<u8>> {
        let entry = self.managers.get(&key.type_id)?.entries.get(&key)?;
        entry.object.as_ref().map(|object| object.state.encode())
    }

    pub(crate) fn entry_mut(&mut self, key: ObjectKey) -> Option<&mut Entry> {
        self.managers
            .get_mut(&key.type_id)?
            .entries
            .get_mut(&key)
            .map(|entry| &mut **entry)
    }

    /// True once shutdown has nothing left to do: no writable object, no IO
    /// in flight, no handoff (or the deadline passed).
    pub fn is_shutdown_complete(&self) -> bool {
        self.ctx
            .shutdown
            .as_ref()
            .is_some_and(|shutdown| shutdown.expired || self.holds_nothing())
    }

    /// True once shutdown released every copy: none writable, no IO in
    /// flight, no handoff. The deadline does not make it true: a release
    /// still in flight then may apply or not, and until one of them is
    /// known the record may name this node with older state, so the node
    /// must not tell the cluster it left (others would claim at once).
    pub fn is_released(&self) -> bool {
        self.ctx.shutdown.is_some() && self.holds_nothing()
    }

    fn holds_nothing(&self) -> bool {
        self.managers.values().all(|manager| {
            manager.entries.values().all(|entry| {
                !entry.is_writable() && entry.io.is_none() && entry.transferring.is_none()
            })
        })
    }

    /// Starts draining this core: no new object is placed here, and every
    /// writable object is transferred away, at most `concurrency` at once
    /// (at least one). Call `drain_step` to make progress.
    pub fn start_drain(&mut self, concurrency: usize) {
        self.ctx.draining = true;
        if self.ctx.drain.is_none() {
            self.ctx.drain = Some(DrainState::new(concurrency));
        }
    }

    /// Starts transfers until the drain's concurrency is reached or no
    /// object is left to start.
    pub fn drain_step(&mut self, now_ms: u64) {
        if self.ctx.is_shutting_down() || !self.ctx.may_serve(now_ms) {
            return;
        }
        let Some(drain) = self.ctx.drain.as_mut() else {
            return;
        };
        let room = drain.room();
        if room == 0 {
            return;
        }
        let candidates = drain.candidates(&self.managers, room);
        let mut no_target = false;
        for key in candidates {
            let target = self
                .ctx
                .default_node(key)
                .filter(|node| *node != self.ctx.node);
            let Some(target) = target else {
                no_target = true;
                break;
            };
            let started = self.transfer(now_ms, key, target, true);
            let Some(drain) = self.ctx.drain.as_mut() else {
                return;
            };
            drain.started(key, started);
        }
        if let Some(drain) = self.ctx.drain.as_mut() {
            drain.set_no_target(no_target);
        }
    }

    /// The moves that would leave every object of this core on its
    /// default node (`Ctx::default_node`: rendezvous hashing over the
    /// nodes that take new objects, this one included): each writable
    /// object not moving already whose default node is another, with that
    /// node. Empty while the core may not serve, or drains or stops (a
    /// drain moves everything anyway). One walk over the entries, so at
    /// most `entries_per_core_max` moves. `None` while the core does not
    /// know every node of `expected` live yet (membership reaches the
    /// cores a moment after the node): its plan would leave them out.
    pub fn rebalance_plan(
        &self,
        now_ms: u64,
        expected: &[NodeId],
    ) -> Option<Vec<(ObjectKey, NodeId)>> {
        if !expected
            .iter()
            .all(|node| self.ctx.is_node_available(*node))
        {
            return None;
        }
        if self.ctx.is_shutting_down() || self.ctx.draining || !self.ctx.may_serve(now_ms) {
            return Some(Vec::new());
        }
        let mut plan = Vec::new();
        for (key, entry) in self
            .managers
            .values()
            .flat_map(|manager| manager.entries.iter())
        {
            let movable = entry.is_writable()
                && !entry.is_aside()
                && entry.transferring.is_none()
                && entry.queued_transfer.is_none();
            if !movable {
                continue;
            }
            match self.ctx.default_node(*key) {
                Some(node) if node != self.ctx.node => plan.push((*key, node)),
                _ => {}
            }
        }
        Some(plan)
    }

    /// How far the drain is (a walk over every entry: call it on a period,
    /// not per event). All zero when no drain started.
    pub fn drain_progress(&self) -> DrainProgress {
        match self.ctx.drain.as_ref() {
            Some(drain) => drain.progress(&self.managers),
            None => DrainProgress::default(),
        }
    }
}

/// What the admin endpoint, the simulator and the tests see of `entry`
/// (of a type persisted `on_write` or not).
fn view_of(on_write: bool, key: ObjectKey, entry: &Entry) -> EntryView {
    EntryView {
        key,
        owner_node: entry.owner_node,
        route_version: entry.route_version,
        cas_version: entry.cas_version,
        writable: entry.is_writable() && !entry.is_aside(),
        aside: entry.is_aside(),
        accepting: entry.is_writable()
            && !entry.is_aside()
            && entry.transferring.is_none()
            && !entry
                .io
                .as_ref()
                .is_some_and(|io| io.blocks_requests(on_write)),
        io_in_flight: entry.io.is_some(),
        queued: entry.io_waiters.len()
            + entry
                .transferring
                .as_ref()
                .map_or(0, |t| t.transfer_pending.len()),
    }
}
