//! What every step works with beside the entry it works on: the core's
//! context (`Ctx`: membership as this core knows it, the lease and fence,
//! the effect queue, the counters, the store tokens in flight), the bounds
//! the router keeps, and the ownership lock rule. No step lives here; the
//! steps (`steps/`) and the dispatcher (`core.rs`) import it.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use wire::ObjectKey;

use super::drain::DrainState;
use super::entry::{Entry, Waiter};
use super::mutant::{self, Mutant};
use super::types::{
    ClientRef, Effect, ErrorCode, NodeMessage, Outcome, Request, StoreOp, StoreToken, Timer,
    TransferDone,
};
use crate::config::RouterConfig;
use crate::ids::NodeId;

/// Writes in one shutdown batch at most (one store round trip each).
pub const SHUTDOWN_BATCH_MAX: usize = 256;
/// Route repairs (re-reads, claims) one request may cause.
pub const REPAIR_ATTEMPTS_MAX: u8 = 3;
/// Send attempts of one request that finds its target unavailable.
pub const SEND_ATTEMPTS_MAX: u8 = 2;

/// The router's counters: plain fields this state machine increments,
/// declared with their metric names in `crate::metrics`.
pub use crate::metrics::RouterCounters;

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
    /// The keys this core's requests name most (`RouterCore::hot_objects`).
    pub hot: super::hot::HotCounter,
    /// One-way events that met their object while the core could not
    /// serve, to run once it can (`paused.rs`).
    pub paused: super::paused::PausedEvents,
}

impl Ctx {
    /// Refuses `waiter` because the core may not serve now: a request is
    /// answered UNAVAILABLE (its client retries), a one-way event is kept
    /// to run once the core serves again (nobody would retry it).
    pub fn refuse_while_paused(&mut self, waiter: Waiter) {
        if waiter.request.needs_reply {
            self.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        } else {
            let key = waiter.head.key;
            if !self.paused.keep(waiter) {
                self.counters.paused_events_dropped_total += 1;
                tracing::warn!(
                    ?key,
                    "a one-way event met a paused core with too many events kept; dropped"
                );
            }
        }
    }

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
    /// fence): it means what its name says.
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

    /// Whether `client`'s session ended with the run of its node that
    /// opened it: membership holds no live incarnation of the node, and has
    /// declared down the incarnation the session's id names or a later one.
    /// A session of a node that started again since, and that this core
    /// has not heard of yet, is not judged (its id names the new start).
    /// A process that was only fenced keeps its sessions through its
    /// rejoin; they count as ended meanwhile, as every session of a node
    /// declared down does (the built-in player object takes such a session
    /// back at its next request).
    pub fn is_session_ended(&self, client: ClientRef) -> bool {
        if client.gateway_node == self.node {
            return false;
        }
        self.members
            .get(&client.gateway_node)
            .is_some_and(|member| {
                member.live.is_none()
                    && wire::ids::made_at_or_before(client.session_id, member.dead_through)
            })
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
        if mutant::active(Mutant::LeaseIgnored) {
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

/// Whether the ownership lock of the route `entry` holds has ended, so the
/// record may be claimed (by CAS). Decided on this node's own facts only,
/// never by comparing another node's clock with this one:
/// - the owner's incarnation ended (declared down, left, or outranked by a
///   later start): at once;
/// - the owner is unknown to membership (its row is gone) and the record's
///   CAS version has not changed for `object_free_timeout_ms` of this
///   node's time, while a live owner re-saves every
///   `object_save_interval_ms`. An owner membership knows alive is never
///   claimed from: it may still be writing.
pub(crate) fn lock_expired(ctx: &Ctx, entry: &Entry, now_ms: u64) -> bool {
    let owner = entry.owner_node;
    if owner.is_none() || owner == ctx.node {
        return false;
    }
    if mutant::active(Mutant::ClaimFromLiveOwner) {
        return true;
    }
    if ctx.is_incarnation_dead(owner, entry.owner_incarnation) {
        return true;
    }
    !ctx.knows(owner)
        && entry.cas_version.is_some()
        && entry
            .cas_seen_at_ms
            .saturating_add(ctx.config.object_free_timeout_ms)
            <= now_ms
}

/// `router_transfer`'s answer to `to` (none to this node or node 0).
pub(crate) fn ack(ctx: &mut Ctx, to: NodeId, key: ObjectKey, transfer_id: u64, accepted: bool) {
    if to != ctx.node && !to.is_none() {
        let message = NodeMessage::TransferAck {
            key,
            transfer_id,
            accepted,
        };
        ctx.send(to, message);
    }
}
