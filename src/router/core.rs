//! `RouterCore`: one core's managers (one per object type) and the effect
//! queue. Events go in through the `on_*` methods, with the time passed in;
//! effects come out through `drain_effects`. No IO, no clock, no global RNG.

use std::collections::{BTreeMap, BTreeSet};

use crate::store::MemberState;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wire::ObjectKey;

use super::drain::DrainState;
use super::entry::Entry;
use super::handler::{ObjectType, ServiceHandler};
use super::types::{
    Effect, ErrorCode, NodeMessage, Outcome, Request, RouterHead, StoreOp, StoreToken, Timer,
    TransferDone, TransferOutcome,
};
use crate::config::{Persist, RouterConfig};
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

/// What a store token is waiting for.
pub(crate) enum StoreWait {
    Entry(ObjectKey),
    Batch(Vec<ObjectKey>),
}

pub(crate) struct ShutdownState {
    pub expired: bool,
}

/// What this core knows of another node from membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    /// The node's live incarnation, if it has one.
    pub live: Option<u64>,
    /// Every incarnation up to this one has ended (declared down, left, or
    /// outranked by a later start): records they own are claimable at once.
    pub dead_through: u64,
    /// Draining: no new object is placed there.
    pub draining: bool,
}

/// The part of the core every operation needs beside the entry it works on,
/// kept apart from the managers so both can be borrowed at once.
pub(crate) struct Ctx {
    pub node: NodeId,
    /// This start of the node (see `store::MemberRow::incarnation`); the
    /// records it writes as owner carry it.
    pub incarnation: u64,
    pub config: RouterConfig,
    /// Other nodes as membership reported them.
    pub members: BTreeMap<NodeId, Member>,
    /// Until when (this core's clock) the node's membership lease holds:
    /// past it the node may have been declared down, so it accepts no
    /// write and serves no object (`None`: a node outside any cluster, as
    /// in unit tests, whose lease never ends).
    pub lease_until_ms: Option<u64>,
    /// Fenced: the lease ran out or the node was declared down; nothing is
    /// served here until `rejoin` with a new incarnation.
    pub fenced: bool,
    /// This node drains: no new object is placed here.
    pub draining: bool,
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
    /// The drain under way (`RouterCore::start_drain`), if any.
    pub drain: Option<DrainState>,
}

pub(crate) struct Manager {
    pub kind: Box<dyn ObjectType>,
    pub entries: Entries,
}

/// One type's entries on a core, by key. Every request looks its key up
/// here, so a hash map: an ordered map compared keys field by field at
/// each level of its tree (5% of a routed request's CPU), and nothing
/// needs the order (the drain walks a snapshot of the keys). The hash's
/// keys come from the core's seeded generator: clients choose object ids
/// (a room's id is in the request), so the hash must be one they cannot
/// predict, and a simulated core must iterate in the same order on every
/// run of one seed.
pub(crate) type Entries = hashbrown::HashMap<ObjectKey, Entry, ahash::RandomState>;

/// One core's router: managers keyed by type id, and the stateless
/// services this node runs, by type id.
pub struct RouterCore {
    pub(crate) ctx: Ctx,
    pub(crate) managers: BTreeMap<u32, Manager>,
    pub(crate) services: BTreeMap<u32, Box<dyn ServiceHandler>>,
}

impl Ctx {
    /// Emits the one answer of `request` (none for one-way messages).
    pub fn reply(&mut self, request: &Request, outcome: Outcome) {
        if request.needs_reply {
            self.counters.replies_total += 1;
            // Every answer passes here: built in place (`crate::in_place`).
            crate::in_place::push_in_place(&mut self.effects, || Effect::Reply {
                request: request.id,
                outcome,
            });
        }
    }

    pub fn send(&mut self, node: NodeId, message: NodeMessage) {
        assert_ne!(node, self.node, "a node never sends to itself");
        assert!(!node.is_none(), "no message goes to node 0");
        self.effects.push(Effect::SendToNode {
            node,
            message: Box::new(message),
        });
    }

    pub fn store(&mut self, wait: StoreWait, op: StoreOp) -> StoreToken {
        self.next_token += 1;
        let token = StoreToken(self.next_token);
        self.store_waits.insert(token, wait);
        self.effects.push(Effect::Store { token, op });
        token
    }

    /// Reports the end of a transfer: to the drain (which then has room
    /// for another) and, as an effect, to whoever else waits for it.
    pub fn transfer_done(&mut self, done: TransferDone) {
        if let Some(drain) = self.drain.as_mut() {
            drain.on_transfer_done(&done);
        }
        self.effects.push(Effect::TransferDone(done));
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

    /// True iff `node` is known up (this node is, until shutdown or a
    /// fence). The seed negated this check; here it means what its name
    /// says.
    pub fn is_node_available(&self, node: NodeId) -> bool {
        if node.is_none() {
            return false;
        }
        if node == self.node {
            return !self.is_shutting_down() && !self.fenced;
        }
        self.members
            .get(&node)
            .is_some_and(|member| member.live.is_some())
    }

    /// Whether incarnation `incarnation` of `node` has ended for good: its
    /// records are claimable at once (by CAS, as always).
    pub fn is_incarnation_dead(&self, node: NodeId, incarnation: u64) -> bool {
        self.members
            .get(&node)
            .is_some_and(|member| incarnation <= member.dead_through)
    }

    /// The live incarnation of `node`, if membership knows one.
    pub fn live_incarnation(&self, node: NodeId) -> Option<u64> {
        if node == self.node {
            return Some(self.incarnation);
        }
        self.members.get(&node).and_then(|member| member.live)
    }

    /// Whether membership knows anything of `node`.
    pub fn knows(&self, node: NodeId) -> bool {
        self.members.contains_key(&node)
    }

    /// Whether new objects may be placed on `node`.
    fn accepts_objects(&self, node: NodeId) -> bool {
        if node == self.node {
            return !self.draining && self.is_node_available(node);
        }
        self.is_node_available(node) && self.members.get(&node).is_some_and(|m| !m.draining)
    }

    /// The default node of an unowned key: rendezvous hashing over the
    /// available nodes that take new objects, so every node with the same
    /// view picks the same one.
    pub fn default_node(&self, key: ObjectKey) -> Option<NodeId> {
        let candidates = self.members.keys().copied().chain([self.node]);
        candidates
            .filter(|node| self.accepts_objects(*node))
            .max_by_key(|node| (rendezvous_score(key, *node), node.0))
    }

    /// Whether this node may serve objects at `now_ms`: not fenced, and its
    /// lease (if it has one) still holds.
    pub fn may_serve(&self, now_ms: u64) -> bool {
        if super::mutant::active(super::mutant::Mutant::LeaseIgnored) {
            return !self.fenced;
        }
        !self.fenced && self.lease_until_ms.is_none_or(|until| now_ms < until)
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
                members: BTreeMap::new(),
                lease_until_ms: None,
                fenced: false,
                draining: false,
                rng: SmallRng::seed_from_u64(rng_seed),
                effects: Vec::new(),
                counters: RouterCounters::default(),
                next_token: 0,
                store_waits: BTreeMap::new(),
                next_transfer_id: 0,
                entries_total: 0,
                shutdown: None,
                flush_keys: BTreeSet::new(),
                drain: None,
            },
            managers: BTreeMap::new(),
            services: BTreeMap::new(),
        };
        core.ctx.arm(sweep_at, Timer::Sweep);
        core
    }

    /// Registers an object type. Panics on a duplicate type id: that is a
    /// programming error of the assembly, not a runtime condition.
    pub fn register(&mut self, kind: Box<dyn ObjectType>) {
        let type_id = kind.type_id();
        assert!(
            !self.services.contains_key(&type_id),
            "type {type_id} is a service"
        );
        let rng = &mut self.ctx.rng;
        let hasher = ahash::RandomState::with_seeds(rng.gen(), rng.gen(), rng.gen(), rng.gen());
        let manager = Manager {
            kind,
            entries: Entries::with_hasher(hasher),
        };
        let previous = self.managers.insert(type_id, manager);
        assert!(previous.is_none(), "type {type_id} registered twice");
    }

    /// Registers a stateless service. Panics on a type id already taken by
    /// a service or an object type, like `register`.
    pub fn register_service(&mut self, service: Box<dyn ServiceHandler>) {
        let type_id = service.type_id();
        assert!(
            !self.managers.contains_key(&type_id),
            "type {type_id} is an object type"
        );
        let previous = self.services.insert(type_id, service);
        assert!(previous.is_none(), "service {type_id} registered twice");
    }

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

    /// Membership reports incarnation `incarnation` of `node` up (joining,
    /// up or draining). Earlier incarnations of the node have ended: a node
    /// gets a new incarnation only after its previous one was down or left.
    /// It does not touch any route.
    pub fn on_node_up(&mut self, node: NodeId, incarnation: u64) {
        self.on_member(node, incarnation, MemberState::Up);
    }

    /// Membership reports incarnation `incarnation` of `node` down (or
    /// left): records it owns are claimable at once, by CAS as always.
    /// Routes to it are kept until a request finds them stale.
    pub fn on_node_down(&mut self, node: NodeId, incarnation: u64) {
        self.on_member(node, incarnation, MemberState::Down);
    }

    /// Membership's view of one node: its incarnation and state.
    pub fn on_member(&mut self, node: NodeId, incarnation: u64, state: MemberState) {
        if node == self.ctx.node || node.is_none() {
            return;
        }
        let member = self.ctx.members.entry(node).or_insert(Member {
            live: None,
            dead_through: 0,
            draining: false,
        });
        // Reports can arrive late: nothing moves an incarnation backwards.
        if incarnation <= member.dead_through {
            return;
        }
        member.dead_through = member.dead_through.max(incarnation.saturating_sub(1));
        if state.is_ended() {
            member.dead_through = incarnation;
            member.live = None;
            member.draining = false;
        } else {
            member.live = Some(incarnation);
            member.draining = state == MemberState::Draining;
        }
    }

    /// Extends the node's membership lease to `until_ms` (this core's
    /// clock): the driver calls it after each heartbeat the store applied.
    /// A shorter lease than the current one is ignored. A core whose lease
    /// had run out serves again once a later heartbeat extends it: its
    /// copies were kept, and nobody could claim them meanwhile, since a
    /// claim needs this incarnation declared down, and a declaration makes
    /// that heartbeat's compare-and-set fail (`ClusterConfig::check_timing`).
    pub fn extend_lease(&mut self, _now_ms: u64, until_ms: u64) {
        if self.ctx.fenced {
            return;
        }
        let current = self.ctx.lease_until_ms.unwrap_or(0);
        if until_ms > current {
            self.ctx.lease_until_ms = Some(until_ms);
        }
    }

    /// Ends the lease at `at_ms` at the latest: membership saw time jump
    /// (a suspend, a paused virtual machine), so the lease it gave may
    /// already have run out in real time.
    pub fn end_lease(&mut self, at_ms: u64) {
        let until = self
            .ctx
            .lease_until_ms
            .map_or(at_ms, |until| until.min(at_ms));
        self.ctx.lease_until_ms = Some(until);
    }

    /// Fences the node: membership found it declared down, or its id taken
    /// over, so this incarnation is over. Nothing is served or claimed here
    /// from now on; every writable object is kept aside with its unsaved
    /// changes, to be written back by compare-and-set on `rejoin` (kept if
    /// nobody took it over meanwhile, dropped and counted if somebody did).
    /// Saves already in flight still settle their held answers by their
    /// outcome: an applied CAS made those changes durable whoever claims
    /// the object next.
    pub fn fence(&mut self, _now_ms: u64) {
        if self.ctx.fenced {
            return;
        }
        self.ctx.fenced = true;
        self.ctx.counters.fences_total += 1;
        let ctx = &mut self.ctx;
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
                let leave =
                    super::mutant::active(super::mutant::Mutant::FenceLeavesCopiesInService);
                if let Some(object) = entry.object.as_mut().filter(|_| !leave) {
                    object.aside = true;
                }
                if let Some((target, _)) = entry.queued_transfer.take() {
                    ctx.transfer_done(TransferDone {
                        key: *key,
                        target,
                        outcome: TransferOutcome::NotMoved,
                        route_version: entry.route_version,
                    });
                }
            }
        }
    }

    /// The node rejoined with incarnation `incarnation` (higher than any it
    /// had): it serves again. Every copy kept aside is written back under
    /// the new incarnation by CAS on the record it last knew; until that
    /// applies its requests wait, and if another node owns the record by
    /// then the copy is dropped and counted.
    pub fn rejoin(&mut self, now_ms: u64, incarnation: u64, lease_until_ms: u64) {
        assert!(
            incarnation > self.ctx.incarnation,
            "a rejoin takes a higher incarnation"
        );
        // A core that missed the fence must still set its copies aside:
        // they belong to the incarnation that ended.
        self.fence(now_ms);
        self.ctx.incarnation = incarnation;
        self.ctx.fenced = false;
        self.ctx.lease_until_ms = None;
        self.extend_lease(now_ms, lease_until_ms);
        let ctx = &mut self.ctx;
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
                if entry.is_aside() && entry.io.is_none() {
                    super::io::start_readopt(ctx, *key, entry, now_ms);
                }
            }
        }
    }

    /// Marks this node draining (no new objects placed here) or not.
    pub fn set_draining(&mut self, draining: bool) {
        self.ctx.draining = draining;
    }

    /// Whether this node drains.
    pub fn is_draining(&self) -> bool {
        self.ctx.draining
    }

    /// Every node-to-node message, from `from_node`.
    pub fn on_node_message(&mut self, now_ms: u64, from_node: NodeId, message: NodeMessage) {
        match message {
            NodeMessage::Routed { head, request } => self.on_request(now_ms, head, request),
            NodeMessage::RouterUpdateSync {
                key,
                owner_node,
                owner_incarnation,
                route_version,
            } => self.on_router_update_sync(
                now_ms,
                key,
                owner_node,
                owner_incarnation,
                route_version,
            ),
            NodeMessage::RouterTransfer(transfer) => {
                self.on_router_transfer(now_ms, from_node, transfer)
            }
            NodeMessage::TransferAck {
                key,
                transfer_id,
                accepted,
            } => self.on_transfer_ack(now_ms, key, transfer_id, accepted),
            NodeMessage::ServiceRequest { key, request } => {
                self.on_service_request(now_ms, key, request)
            }
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
            unreachable: None,
        };
        self.dispatch(now_ms, waiter);
    }

    /// A message `SendToNode` emitted did not leave: the link to `node`
    /// refused it (queue full, link down). A request is re-resolved once,
    /// from a fresh read of its route, and sent again only to another node
    /// (else answered UNAVAILABLE); a transfer notification ends the
    /// handoff at once (its pending queue drains, as on an ack timeout);
    /// acks and route syncs are left to the peer's timeouts and later
    /// requests.
    pub fn on_send_failed(&mut self, now_ms: u64, node: NodeId, message: NodeMessage) {
        self.ctx.counters.send_failures_total += 1;
        match message {
            NodeMessage::Routed { head, request } => {
                let key = head.key;
                if let Some(entry) = self.entry_mut(key) {
                    // The route that sent it there is suspect: re-read it.
                    if !entry.is_writable() {
                        entry.last_refresh_ms = None;
                    }
                }
                let waiter = super::entry::Waiter {
                    head: RouterHead {
                        forward_hops: head.forward_hops.saturating_sub(1),
                        ..head
                    },
                    request,
                    repairs: 0,
                    fresh_pull: false,
                    send_attempts: 1,
                    unreachable: Some(node),
                };
                self.dispatch(now_ms, waiter);
            }
            NodeMessage::RouterTransfer(transfer) => {
                self.transfer_ack_timeout(now_ms, transfer.key, transfer.transfer_id)
            }
            // The catalog picked that node; this core has no catalog to
            // pick another, so the request is answered now.
            NodeMessage::ServiceRequest { request, .. } => {
                self.ctx.reply(&request, Err(ErrorCode::Unavailable.into()))
            }
            NodeMessage::TransferAck { .. } | NodeMessage::RouterUpdateSync { .. } => {}
        }
    }

    /// `router_update_sync`: updates only an existing cache with an older
    /// route version; ignores missing caches, newer caches and objects.
    pub fn on_router_update_sync(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        owner_node: NodeId,
        owner_incarnation: u64,
        route_version: RouteVersion,
    ) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        if entry.is_writable() || entry.route_version >= route_version {
            return;
        }
        entry.set_route(owner_node, owner_incarnation, route_version);
        entry.last_refresh_ms = Some(now_ms);
        self.ctx.counters.update_syncs_applied_total += 1;
    }

    pub fn on_timer(&mut self, now_ms: u64, timer: Timer) {
        match timer {
            Timer::WriteRetry { key } => self.retry_write(now_ms, key),
            Timer::Sweep => self.sweep(now_ms),
            Timer::PullRetry { key } => self.retry_pull(now_ms, key),
            Timer::TransferAck { key, transfer_id } => {
                self.transfer_ack_timeout(now_ms, key, transfer_id)
            }
            Timer::ShutdownDeadline => self.shutdown_deadline(now_ms),
            Timer::Object {
                key,
                activation,
                tag,
            } => self.on_object_timer(now_ms, key, activation, tag),
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
                if entry.is_aside() && !ctx.fenced {
                    // Rejoined before this flush: the write-back covers them.
                    super::io::start_readopt(ctx, key, entry, now_ms);
                } else {
                    super::dispatch::start_save(ctx, key, entry, now_ms, false);
                }
            }
        }
    }

    pub(crate) fn entry_mut(&mut self, key: ObjectKey) -> Option<&mut Entry> {
        self.managers.get_mut(&key.type_id)?.entries.get_mut(&key)
    }

    /// Views of every entry, in key order.
    pub fn entries(&self) -> impl Iterator<Item = EntryView> + '_ {
        self.managers.values().flat_map(|manager| {
            let on_write = manager.kind.persist() == Persist::OnWrite;
            manager.entries.iter().map(move |(key, entry)| EntryView {
                key: *key,
                owner_node: entry.owner_node,
                route_version: entry.route_version,
                cas_version: entry.cas_version,
                writable: entry.is_writable() && !entry.is_aside(),
                aside: entry.is_aside(),
                accepting: entry.is_writable()
                    && !entry.is_aside()
                    && entry.transferring.is_none()
                    && !entry.io.is_some_and(|io| io.blocks_requests(on_write)),
                io_in_flight: entry.io.is_some(),
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
}
