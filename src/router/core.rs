//! `RouterCore`: one core's managers (one per object type) and the effect
//! queue. Events go in through the `on_*` methods, with the time passed in;
//! effects come out through `drain_effects`. No IO, no clock, no global RNG.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use wire::ObjectKey;

use super::entry::Entry;
use super::object::ObjectType;
use super::types::{Effect, NodeMessage, Outcome, Request, RouterHead, StoreOp, StoreToken, Timer};
use crate::config::RouterConfig;
use crate::store::{CasVersion, NodeId, RouteVersion};

/// Writes in one shutdown batch at most (one store round trip each).
pub const SHUTDOWN_BATCH_MAX: usize = 256;
/// Route repairs (re-reads, claims) one request may cause: the seed's three.
pub const REPAIR_ATTEMPTS_MAX: u8 = 3;
/// Send attempts of one request that finds its target unavailable.
pub const SEND_ATTEMPTS_MAX: u8 = 2;

/// The router's counters: plain fields this state machine increments,
/// declared with their metric names in `crate::metrics`.
pub use crate::metrics::RouterCounters;

/// A read-only view of one entry, for metrics, tests and the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryView {
    pub key: ObjectKey,
    pub owner_node: NodeId,
    pub route_version: RouteVersion,
    pub cas_version: Option<CasVersion>,
    pub writable: bool,
    pub queued: usize,
}

/// What a store token is waiting for.
pub(crate) enum StoreWait {
    Entry(ObjectKey),
    Batch(Vec<ObjectKey>),
}

pub(crate) struct ShutdownState {
    pub expired: bool,
}

/// The part of the core every operation needs beside the entry it works on,
/// kept apart from the managers so both can be borrowed at once.
pub(crate) struct Ctx {
    pub node: NodeId,
    /// This start of the node (see `store::MemberRow::incarnation`); the
    /// records it writes as owner carry it.
    pub incarnation: u64,
    pub config: RouterConfig,
    pub live_nodes: BTreeSet<NodeId>,
    pub rng: SmallRng,
    pub effects: Vec<Effect>,
    pub counters: RouterCounters,
    pub next_token: u64,
    pub store_waits: BTreeMap<StoreToken, StoreWait>,
    pub next_transfer_id: u64,
    pub entries_total: usize,
    pub shutdown: Option<ShutdownState>,
    /// on_write objects whose held outputs wait for `on_flush` to start
    /// their save. At most one per entry, so bounded by
    /// `entries_per_core_max`; a set, so a key appears once.
    pub flush_keys: BTreeSet<ObjectKey>,
}

pub(crate) struct Manager {
    pub kind: Box<dyn ObjectType>,
    pub entries: BTreeMap<ObjectKey, Entry>,
}

/// One core's router: managers keyed by type id.
pub struct RouterCore {
    pub(crate) ctx: Ctx,
    pub(crate) managers: BTreeMap<u32, Manager>,
}

impl Ctx {
    /// Emits the one answer of `request` (none for one-way messages).
    pub fn reply(&mut self, request: &Request, outcome: Outcome) {
        if request.needs_reply {
            self.counters.replies_total += 1;
            self.effects.push(Effect::Reply {
                request: request.id,
                outcome,
            });
        }
    }

    pub fn send(&mut self, node: NodeId, message: NodeMessage) {
        assert_ne!(node, self.node, "a node never sends to itself");
        assert!(!node.is_none(), "no message goes to node 0");
        self.effects.push(Effect::SendToNode { node, message });
    }

    pub fn store(&mut self, wait: StoreWait, op: StoreOp) -> StoreToken {
        self.next_token += 1;
        let token = StoreToken(self.next_token);
        self.store_waits.insert(token, wait);
        self.effects.push(Effect::Store { token, op });
        token
    }

    pub fn arm(&mut self, at_ms: u64, timer: Timer) {
        self.effects.push(Effect::ArmTimer { at_ms, timer });
    }

    /// Saves `key`'s held outputs in the next `on_flush`, asking the driver
    /// for one (`Effect::FlushSavesAfterBatch`) if none is pending yet.
    pub fn flush_later(&mut self, key: ObjectKey) {
        if self.flush_keys.is_empty() {
            self.effects.push(Effect::FlushSavesAfterBatch);
        }
        self.flush_keys.insert(key);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_some()
    }

    /// True iff `node` is known up (this node always is, until shutdown).
    /// The seed negated this check; here it means what its name says.
    pub fn is_node_available(&self, node: NodeId) -> bool {
        if node.is_none() {
            return false;
        }
        if node == self.node {
            return !self.is_shutting_down();
        }
        self.live_nodes.contains(&node)
    }

    /// The default node of an unowned key: rendezvous hashing over the
    /// available nodes, so every node with the same view picks the same one.
    pub fn default_node(&self, key: ObjectKey) -> Option<NodeId> {
        let candidates = self.live_nodes.iter().copied().chain([self.node]);
        candidates
            .filter(|node| self.is_node_available(*node))
            .max_by_key(|node| (rendezvous_score(key, *node), node.0))
    }
}

/// The rendezvous score of `node` for `key`: the stable hash of both.
pub fn rendezvous_score(key: ObjectKey, node: NodeId) -> u64 {
    let mut bytes = [0u8; ObjectKey::ENCODED_LEN + 8];
    bytes[..ObjectKey::ENCODED_LEN].copy_from_slice(&key.to_le_bytes());
    bytes[ObjectKey::ENCODED_LEN..].copy_from_slice(&node.0.to_le_bytes());
    wire::hash::stable_hash64(&bytes)
}

/// The sweep period: a quarter of the shortest timer it serves, so a save or
/// a degradation happens at most a quarter period late.
pub fn sweep_interval_ms(config: &RouterConfig) -> u64 {
    let shortest = config
        .object_save_interval_ms
        .min(config.cache_free_timeout_ms)
        .min(config.object_free_timeout_ms);
    (shortest / 4).max(1)
}

impl RouterCore {
    /// A core of node `node` (never 0). Arms the first sweep: drain the
    /// effects after construction.
    pub fn new(node: NodeId, config: RouterConfig, rng_seed: u64, now_ms: u64) -> RouterCore {
        assert!(!node.is_none(), "node id 0 means \"no owner\"");
        let sweep_at = now_ms + sweep_interval_ms(&config);
        let mut core = RouterCore {
            ctx: Ctx {
                node,
                incarnation: 1,
                config,
                live_nodes: BTreeSet::new(),
                rng: SmallRng::seed_from_u64(rng_seed),
                effects: Vec::new(),
                counters: RouterCounters::default(),
                next_token: 0,
                store_waits: BTreeMap::new(),
                next_transfer_id: 0,
                entries_total: 0,
                shutdown: None,
                flush_keys: BTreeSet::new(),
            },
            managers: BTreeMap::new(),
        };
        core.ctx.arm(sweep_at, Timer::Sweep);
        core
    }

    /// Registers an object type. Panics on a duplicate type id: that is a
    /// programming error of the assembly, not a runtime condition.
    pub fn register(&mut self, kind: Box<dyn ObjectType>) {
        let type_id = kind.type_id();
        let manager = Manager {
            kind,
            entries: BTreeMap::new(),
        };
        let previous = self.managers.insert(type_id, manager);
        assert!(previous.is_none(), "type {type_id} registered twice");
    }

    pub fn node(&self) -> NodeId {
        self.ctx.node
    }

    /// Sets the incarnation the records this core writes as owner carry.
    pub fn set_incarnation(&mut self, incarnation: u64) {
        self.ctx.incarnation = incarnation;
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

    /// Discovery reports `node` up. It does not touch any route.
    pub fn on_node_up(&mut self, node: NodeId) {
        if node != self.ctx.node && !node.is_none() {
            self.ctx.live_nodes.insert(node);
        }
    }

    /// Discovery reports `node` down. Routes to it are kept: a node going
    /// down does not release its persisted ownership (the lock expires).
    pub fn on_node_down(&mut self, node: NodeId) {
        self.ctx.live_nodes.remove(&node);
    }

    /// Every node-to-node message, from `from_node`.
    pub fn on_node_message(&mut self, now_ms: u64, from_node: NodeId, message: NodeMessage) {
        match message {
            NodeMessage::Routed { head, request } => self.on_request(now_ms, head, request),
            NodeMessage::RouterUpdateSync {
                key,
                owner_node,
                route_version,
            } => self.on_router_update_sync(now_ms, key, owner_node, route_version),
            NodeMessage::RouterTransfer(transfer) => {
                self.on_router_transfer(now_ms, from_node, transfer)
            }
            NodeMessage::TransferAck {
                key,
                transfer_id,
                accepted,
            } => self.on_transfer_ack(now_ms, key, transfer_id, accepted),
        }
    }

    /// A request entering at this core: from the gateway or a handler
    /// (`RouterHead::local`) or routed from another node.
    pub fn on_request(&mut self, now_ms: u64, head: RouterHead, request: Request) {
        self.ctx.counters.requests_total += 1;
        let waiter = super::entry::Waiter {
            head,
            request,
            repairs: 0,
            fresh_pull: false,
            send_attempts: 0,
        };
        self.dispatch(now_ms, waiter);
    }

    /// `router_update_sync`: updates only an existing cache with an older
    /// route version; ignores missing caches, newer caches and objects.
    pub fn on_router_update_sync(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        owner_node: NodeId,
        route_version: RouteVersion,
    ) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        if entry.is_writable() || entry.route_version >= route_version {
            return;
        }
        entry.set_route(owner_node, route_version);
        entry.last_refresh_ms = Some(now_ms);
        self.ctx.counters.update_syncs_applied_total += 1;
    }

    pub fn on_timer(&mut self, now_ms: u64, timer: Timer) {
        match timer {
            Timer::Sweep => self.sweep(now_ms),
            Timer::PullRetry { key } => self.retry_pull(now_ms, key),
            Timer::TransferAck { key, transfer_id } => {
                self.transfer_ack_timeout(now_ms, key, transfer_id)
            }
            Timer::ShutdownDeadline => self.shutdown_deadline(now_ms),
        }
    }

    /// The end of a batch of events (`Effect::FlushSavesAfterBatch`): every
    /// on_write object that held outputs since the last flush starts one
    /// save covering all of them (released in order when its CAS applies,
    /// all answered UNAVAILABLE when it does not). An object whose IO
    /// already started (a periodic save, a shutdown release) is covered by
    /// that write: its reply settles the held outputs.
    pub fn on_flush(&mut self, now_ms: u64) {
        let ctx = &mut self.ctx;
        for key in std::mem::take(&mut ctx.flush_keys) {
            let Some(entry) = self
                .managers
                .get_mut(&key.type_id)
                .and_then(|manager| manager.entries.get_mut(&key))
            else {
                continue;
            };
            if entry.io.is_none() && entry.holds_outputs() {
                super::dispatch::start_save(ctx, key, entry, now_ms, false);
            }
        }
    }

    pub(crate) fn entry_mut(&mut self, key: ObjectKey) -> Option<&mut Entry> {
        self.managers.get_mut(&key.type_id)?.entries.get_mut(&key)
    }

    /// Views of every entry, in key order.
    pub fn entries(&self) -> impl Iterator<Item = EntryView> + '_ {
        self.managers.values().flat_map(|manager| {
            manager.entries.iter().map(|(key, entry)| EntryView {
                key: *key,
                owner_node: entry.owner_node,
                route_version: entry.route_version,
                cas_version: entry.cas_version,
                writable: entry.is_writable(),
                queued: entry.io_waiters.len()
                    + entry
                        .transferring
                        .as_ref()
                        .map_or(0, |t| t.transfer_pending.len()),
            })
        })
    }

    /// Gauges: (writable objects, route caches, queued requests).
    pub fn gauges(&self) -> (usize, usize, usize) {
        let mut gauges = (0, 0, 0);
        for view in self.entries() {
            if view.writable {
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
}
