//! One key's entry in a manager: a route cache, or a writable object (the
//! same plus its state), with its IO guard and its queues.

use std::collections::VecDeque;

use super::handler::{HandlerOutput, ObjectState, ObjectType};
use super::mutant::{self, Mutant};
use super::types::{Request, RouterHead};
use wire::ObjectKey;

use crate::ids::{NodeId, RouteVersion};
use crate::store::{CasVersion, RecordWrite, RouteRecord, WriteCondition, WriteOutcome};

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
/// run of one seed. Entries are boxed: the table has more slots than
/// entries (16,384 for 10,000 players), each as large as what it holds,
/// so an inline entry made every empty slot an entry's size too.
pub(crate) type Entries = hashbrown::HashMap<ObjectKey, Box<Entry>, ahash::RandomState>;

/// A request waiting in an entry's queue, with its repair count.
pub(crate) struct Waiter {
    pub head: RouterHead,
    pub request: Request,
    /// Route repairs (re-reads, claims) started on this request's behalf.
    pub repairs: u8,
    /// The cache was pulled for this request since it last looked at it, so
    /// an owner of 0 is not re-pulled (one more pull, never a loop).
    pub fresh_pull: bool,
    /// Send attempts that found the target unavailable (at most two).
    pub send_attempts: u8,
    /// A node a send of this request failed to reach: once the route is
    /// re-read, the request is not sent there again (`send_msg_raw` in
    /// docs/origins.md: two attempts, the second after re-resolving).
    pub unreachable: Option<NodeId>,
}

/// The IO in flight for one key (`io_task_guard` in docs/origins.md). At
/// most one at a time; requests and later IO wait behind it. A write's
/// variant carries what that write will make true once applied
/// (`PendingWrite`), and a claim's the state it will make writable: data
/// that exists exactly while that IO is in flight.
pub(crate) enum Io {
    /// `pull_cache`: reading the route record.
    PullCache,
    /// `pull_object`: reading the record to claim it.
    PullObject,
    /// The claim write (CAS) of `pull_object`, with the state decoded for
    /// the copy it makes writable.
    Claim {
        write: PendingWrite,
        state: Box<dyn ObjectState>,
    },
    /// `save_object` (periodic, on_write, or before degradation).
    Save { degrade: bool, write: PendingWrite },
    /// A copy kept aside through a fence, written back under the node's new
    /// incarnation by CAS on the record it last knew (see `RouterCore::rejoin`).
    Readopt { write: PendingWrite },
    /// `remove_object` of a transfer: persisting the new owner.
    Remove { write: PendingWrite },
    /// The target of a `router_transfer` confirming ownership by CAS, with
    /// the shipped state it makes writable.
    TransferClaim {
        from: NodeId,
        transfer_id: u64,
        write: PendingWrite,
        state: Box<dyn ObjectState>,
    },
    /// A transfer's removal (`write`) has no known outcome: whether the
    /// record names the target is unknown, so nothing runs on the copy
    /// (its requests wait in the handoff's queue) until the removal, armed
    /// to go again (`Timer::WriteRetry`), settles it.
    RemoveRetry { write: PendingWrite },
    /// Part of a shutdown batch.
    Release { write: PendingWrite },
    /// A write that gives ownership up (a degradation's save, a shutdown
    /// release) failed or has no known outcome: whether this node still
    /// owns the object is unknown, so nothing runs on the copy until the
    /// write, armed to go again (`Timer::WriteRetry`), settles it.
    ReleaseRetry,
}

impl Io {
    /// Whether requests must wait for this IO. A periodic save of an
    /// `interval` object does not block requests: the bytes being saved are
    /// already taken, and a failed save downgrades the object anyway.
    pub fn blocks_requests(&self, on_write: bool) -> bool {
        !matches!(self, Io::Save { degrade: false, .. } if !on_write)
    }

    /// Whether this IO is a backoff before a write that gives ownership up
    /// goes again: no store operation is in flight, and who owns the object
    /// is unknown until the retry tells.
    pub fn is_retry_backoff(&self) -> bool {
        matches!(self, Io::ReleaseRetry | Io::RemoveRetry { .. })
    }

    /// Whether this IO reads the record (a pull of either kind).
    pub fn is_pull(&self) -> bool {
        matches!(self, Io::PullCache | Io::PullObject)
    }

    /// The IO's name, for the invariant checker's messages.
    pub fn name(&self) -> &'static str {
        match self {
            Io::PullCache => "pull_cache",
            Io::PullObject => "pull_object",
            Io::Claim { .. } => "claim",
            Io::Save { .. } => "save",
            Io::Readopt { .. } => "readopt",
            Io::Remove { .. } => "remove",
            Io::RemoveRetry { .. } => "remove_retry",
            Io::TransferClaim { .. } => "transfer_claim",
            Io::Release { .. } => "release",
            Io::ReleaseRetry => "release_retry",
        }
    }

    /// Whether this IO needs a copy of the object on the entry (it writes
    /// that copy, or waits to write it again); a claim needs none (it makes
    /// one), and a pull may run either way (a request beside a dropped copy).
    fn needs_copy(&self) -> Option<bool> {
        match self {
            Io::PullCache | Io::PullObject => None,
            Io::Claim { .. } | Io::TransferClaim { .. } => Some(false),
            Io::Save { .. }
            | Io::Readopt { .. }
            | Io::Remove { .. }
            | Io::RemoveRetry { .. }
            | Io::Release { .. }
            | Io::ReleaseRetry => Some(true),
        }
    }
}

pub(crate) struct Writable {
    pub state: Box<dyn ObjectState>,
    /// Mutations since the last applied save: what a lost copy loses, and
    /// what `routerd_router_unsaved_changes_dropped_total` counts then.
    pub changes_unsaved: u64,
    /// How many of `changes_unsaved` the write in flight carries (taken
    /// off once it applies).
    pub changes_in_write: u64,
    pub last_save_ms: u64,
    /// Kept aside by a fence: the copy is not served until it is written
    /// back under the new incarnation (`Io::Readopt`), or dropped when
    /// another node owns the record by then.
    pub aside: bool,
    /// Outputs of on_write requests, in arrival order, emitted together
    /// when the save covering them applies (all abandoned if it does not).
    /// Non-empty while that save is in flight, or from the first of them
    /// until `on_flush` starts it (the key is then in `Ctx::flush_keys`).
    /// Bounded by the requests in flight: those a batch of events delivers
    /// before its flush (a driver bounds its outstanding requests), then
    /// the waiters of a save in flight (`pending_queue_max`).
    pub held: Vec<(Request, HandlerOutput)>,
    /// How many of `held` (the first ones) were held already when a write
    /// covering them last failed: at the next failure their answers go out
    /// UNAVAILABLE (`output::refuse_held_after_retry`). A `u32` beside
    /// `aside` takes no room of the entry's (`ENTRY_BYTES_MAX`).
    pub held_failed: u32,
}

pub(crate) struct Transferring {
    pub target: NodeId,
    pub need_notify: bool,
    pub transfer_id: u64,
    /// Requests that arrived during the handoff (`transfer_pending_` in
    /// docs/origins.md): queued, never also sent.
    pub transfer_pending: VecDeque<Waiter>,
    /// The state `remove_object` persisted, shipped in `router_transfer`.
    pub shipped_state: Vec<u8>,
}

/// The most bytes an entry takes: every owned object has one, and 256 is
/// an allocator size class (the next is 320).
const ENTRY_BYTES_MAX: usize = 248;
const _: () = assert!(std::mem::size_of::<Entry>() <= ENTRY_BYTES_MAX);

/// The bytes of one slot of a hash table.
trait SlotBytes {
    const BYTES: usize;
}

impl<K, V, S> SlotBytes for hashbrown::HashMap<K, V, S> {
    const BYTES: usize = std::mem::size_of::<(K, V)>();
}

// A slot of `Entries` is a key and a pointer (see `Entries`).
const _: () = assert!(<Entries as SlotBytes>::BYTES <= 24);

pub(crate) struct Entry {
    pub owner_node: NodeId,
    /// The incarnation of `owner_node` the route names (0: none or unknown).
    pub owner_incarnation: u64,
    pub route_version: RouteVersion,
    /// The record's CAS version as last known; `None`: no record known.
    pub cas_version: Option<CasVersion>,
    /// When (this core's clock) `cas_version` was first seen at its value:
    /// a record unchanged for `object_free_timeout_ms` of this node's own
    /// time has an owner that stopped saving. No other node's clock is
    /// ever compared with this one.
    pub cas_seen_at_ms: u64,
    /// When the route was last read from the store; `None`: never, or
    /// known stale.
    pub last_refresh_ms: Option<u64>,
    pub last_access_ms: u64,
    pub object: Option<Writable>,
    /// Boxed: an object has IO in flight only while it is read or
    /// written, and an `Io` inline made every entry 64 bytes larger.
    pub io: Option<Box<Io>>,
    pub io_waiters: VecDeque<Waiter>,
    /// Boxed, as is `write_in_flight`: every owned object has an entry, and
    /// only one being handed off has a transfer (see `ENTRY_BYTES_MAX`).
    pub transferring: Option<Box<Transferring>>,
    /// A transfer asked for while IO was in flight, started after it.
    pub queued_transfer: Option<(NodeId, bool)>,
    /// EAGAIN retries of the current pull.
    pub pull_retries: u32,
    /// The writes of this entry whose outcome is unknown (Indeterminate)
    /// since its last write with a known one, each once (`write_unknown`):
    /// if a later CAS conflicts with the record one of them would leave,
    /// it was that write that applied. Any of them may still apply late
    /// (a store that timed out may commit on resume), so none is forgotten
    /// until an outcome settles them all, up to `UNKNOWN_WRITES_MAX`.
    pub unknown_writes: Vec<WriteFingerprint>,
    /// The write `begin_write` started, until its answer.
    pub write_in_flight: Option<Box<WriteFingerprint>>,
    /// Failed or unknown writes of the copy since its last applied one:
    /// the retry waits longer each time (`save_retry_after_ms`).
    pub write_retries: u32,
}

/// What identifies one record write among all writes of a key: the CAS
/// version it produces when applied (its condition's plus one: see
/// `CasVersion`) and the content it writes. A record with that version and
/// that content says exactly what that write said, so the copy that sent
/// it may take the record as its own: any later write would have moved
/// the version on. The record's save time is no part of it: the driver
/// stamps it with the wall clock as the write leaves (an operator's
/// reading), so the time this core knows is never the stored one, and
/// two attempts of one write differ only by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriteFingerprint {
    pub cas_version: CasVersion,
    pub owner_node: NodeId,
    pub owner_incarnation: u64,
    pub route_version: RouteVersion,
    pub state_len: usize,
    pub state_hash: u64,
}

impl WriteFingerprint {
    pub fn of(write: &RecordWrite) -> WriteFingerprint {
        WriteFingerprint {
            cas_version: write.condition.applied_version(),
            owner_node: write.owner_node,
            owner_incarnation: write.owner_incarnation,
            route_version: write.route_version,
            state_len: write.state.len(),
            state_hash: wire::hash::stable_hash64(&write.state),
        }
    }

    /// The write without its content (`FORGOTTEN_CONTENT`): it still
    /// recognises the record it left, by what only this copy's writes
    /// could leave (see `write_unknown`).
    fn content_forgotten(self) -> WriteFingerprint {
        WriteFingerprint {
            state_len: FORGOTTEN_CONTENT,
            state_hash: 0,
            ..self
        }
    }

    /// Whether `other` writes what this write wrote (its version aside).
    /// Never, for a write whose content was forgotten.
    pub fn same_content(&self, other: &WriteFingerprint) -> bool {
        self.state_len != FORGOTTEN_CONTENT
            && self.owner_node == other.owner_node
            && self.owner_incarnation == other.owner_incarnation
            && self.route_version == other.route_version
            && self.state_len == other.state_len
            && self.state_hash == other.state_hash
    }

    /// Whether `record` is what this write left.
    pub fn left(&self, record: &RouteRecord) -> bool {
        self.cas_version == record.cas_version
            && self.owner_node == record.owner_node
            && self.owner_incarnation == record.owner_incarnation
            && self.route_version == record.route_version
            && (self.state_len == FORGOTTEN_CONTENT
                || (self.state_len == record.state.len()
                    && self.state_hash == wire::hash::stable_hash64(&record.state)))
    }
}

/// A fingerprint's `state_len` once its content is forgotten.
const FORGOTTEN_CONTENT: usize = usize::MAX;

/// The most writes of unknown outcome an entry remembers at once. They all
/// went by CAS on the same record version (`write_unknown` forgets those
/// of an older one), so at most one of them can ever apply; attempts that
/// write the same content count once. Only writes with new content add
/// one: an `interval` copy mutated between retries while the store stays
/// unanswering (retries back off up to `WRITE_RETRY_MAX_MS`). Past the
/// bound the oldest keeps its version, owner and route but forgets its
/// content (`write_unknown` says why that is enough).
pub(crate) const UNKNOWN_WRITES_MAX: usize = 64;

/// The route and lock a write in flight persists.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingWrite {
    pub owner_node: NodeId,
    pub owner_incarnation: u64,
    pub route_version: RouteVersion,
    pub save_timepoint_ms: u64,
}

impl Entry {
    /// Starts the store write this entry has in flight (`io` replaces any
    /// earlier step of the same operation, such as a claim's pull): the IO
    /// `io` makes of `pending` carries the route and lock it persists
    /// (applied when the CAS applies); returns the write to send.
    pub(crate) fn begin_write(
        &mut self,
        key: ObjectKey,
        condition: WriteCondition,
        pending: PendingWrite,
        state: Vec<u8>,
        io: impl FnOnce(PendingWrite) -> Io,
    ) -> RecordWrite {
        self.io = Some(Box::new(io(pending)));
        let write = RecordWrite {
            key,
            condition,
            owner_node: pending.owner_node,
            owner_incarnation: pending.owner_incarnation,
            route_version: pending.route_version,
            save_timepoint_ms: pending.save_timepoint_ms,
            state,
        };
        self.write_in_flight = Some(Box::new(WriteFingerprint::of(&write)));
        write
    }

    /// The condition a write of this entry's copy goes under: CAS on the
    /// record as last known (`check` holds that a copy always knows one;
    /// without one the write could only apply where no record exists).
    pub(crate) fn known_condition(&self) -> WriteCondition {
        match self.cas_version {
            Some(cas_version) => WriteCondition::CasEquals(cas_version),
            None => WriteCondition::Absent,
        }
    }

    /// The write in flight had no known outcome: remember it, so that a
    /// later conflict with the record it left is known for what it is.
    /// Writes remembered for an older record version are forgotten: the
    /// entry has seen the record move past the version they would leave.
    pub(crate) fn write_unknown(&mut self) {
        let Some(write) = self.write_in_flight.take().map(|write| *write) else {
            return;
        };
        let one_slot = mutant::active(Mutant::UnknownWriteOneSlot);
        self.unknown_writes
            .retain(|known| known.cas_version == write.cas_version && !one_slot);
        if self.unknown_writes.contains(&write) {
            return;
        }
        if self.unknown_writes.len() >= UNKNOWN_WRITES_MAX {
            self.forget_oldest_content();
        }
        self.unknown_writes.push(write);
    }

    /// Makes room among the writes of unknown outcome, forgetting none:
    /// the oldest one that still has its content keeps only its version,
    /// owner and route, merged with an equal one already so kept. That is
    /// enough to know the record it left for this copy's own whenever the
    /// record names this copy's owner or no owner: every write of the list
    /// went by CAS on the one record version the copy knows, which names
    /// this copy's owner, and any other node's write on it (a claim after
    /// a takeover) names that node. A write that handed the object to a
    /// third node (a transfer) is told from such a claim only by its
    /// content, so it is dropped; a transfer's attempts write one content,
    /// so it never fills the list.
    fn forget_oldest_content(&mut self) {
        let Some(oldest) = self
            .unknown_writes
            .iter()
            .position(|write| write.state_len != FORGOTTEN_CONTENT)
        else {
            self.unknown_writes.remove(0);
            return;
        };
        let write = self.unknown_writes.remove(oldest);
        let ours = write.owner_node == self.owner_node || write.owner_node == NodeId::NONE;
        let kept = write.content_forgotten();
        if ours && !self.unknown_writes.contains(&kept) {
            self.unknown_writes.insert(0, kept);
        }
    }

    /// The write of this entry whose outcome was unknown that left
    /// `record` (returned by a conflicting CAS), if one did: then the copy
    /// is still the owner's, at `record`'s CAS version, and the state the
    /// record holds is one the copy had (its later changes are unsaved).
    pub(crate) fn own_write_left(&self, record: &RouteRecord) -> Option<WriteFingerprint> {
        self.unknown_writes
            .iter()
            .find(|write| write.left(record))
            .copied()
    }

    /// Whether `record` was left by an earlier attempt of the write in
    /// flight: an own write of unknown outcome with the same owner, route
    /// and state, so the record is what this one would leave.
    pub(crate) fn retried_write_left(&self, record: &RouteRecord) -> bool {
        match (self.own_write_left(record), self.write_in_flight.as_deref()) {
            (Some(earlier), Some(now)) => earlier.same_content(now),
            _ => false,
        }
    }

    /// Whether a write of unknown outcome may have given the object to
    /// another owner than `node` (a degradation, a release, a transfer's
    /// removal): until one settles, the copy must not serve.
    pub(crate) fn may_have_given_up(&self, node: NodeId) -> bool {
        self.unknown_writes
            .iter()
            .any(|write| write.owner_node != node)
    }

    /// Takes `record`, which an own write of unknown outcome left, as the
    /// copy's record: every other write of unknown outcome went on the
    /// version before it and can never apply now.
    pub(crate) fn adopt_own_record(&mut self, record: &RouteRecord, now_ms: u64) {
        self.adopt_record(record, now_ms);
        self.unknown_writes.clear();
    }

    pub fn new(now_ms: u64) -> Entry {
        Entry {
            owner_node: NodeId::NONE,
            owner_incarnation: 0,
            route_version: RouteVersion(0),
            cas_version: None,
            cas_seen_at_ms: now_ms,
            last_refresh_ms: None,
            last_access_ms: now_ms,
            object: None,
            io: None,
            io_waiters: VecDeque::new(),
            transferring: None,
            queued_transfer: None,
            pull_retries: 0,
            unknown_writes: Vec::new(),
            write_in_flight: None,
            write_retries: 0,
        }
    }

    /// Whether the entry holds a copy of the object (served, or kept
    /// aside by a fence).
    pub fn is_writable(&self) -> bool {
        self.object.is_some()
    }

    /// Whether the entry holds a copy kept aside by a fence.
    pub fn is_aside(&self) -> bool {
        self.object.as_ref().is_some_and(|object| object.aside)
    }

    /// Whether on_write outputs wait for a save (in flight or not started
    /// yet): a transfer must not start before that save settles them.
    pub fn holds_outputs(&self) -> bool {
        self.object.as_ref().is_some_and(|o| !o.held.is_empty())
    }

    /// Sets the route; the route version never goes down.
    pub fn set_route(
        &mut self,
        owner_node: NodeId,
        owner_incarnation: u64,
        route_version: RouteVersion,
    ) {
        assert!(
            route_version >= self.route_version,
            "route version must never decrease: {:?} -> {:?}",
            self.route_version,
            route_version
        );
        self.owner_node = owner_node;
        self.owner_incarnation = owner_incarnation;
        self.route_version = route_version;
    }

    /// Records the record's CAS version as known at `now_ms`, noting when
    /// it changed.
    pub fn set_cas(&mut self, cas_version: CasVersion, now_ms: u64) {
        if self.cas_version != Some(cas_version) {
            self.cas_seen_at_ms = now_ms;
        }
        self.cas_version = Some(cas_version);
    }

    /// Adopts a record read from (or returned by) the store, unless it is
    /// older than what this entry already knows (a late read). Returns
    /// whether it was adopted.
    pub fn adopt_record(&mut self, record: &RouteRecord, now_ms: u64) -> bool {
        if record.route_version < self.route_version {
            return false;
        }
        self.set_route(
            record.owner_node,
            record.owner_incarnation,
            record.route_version,
        );
        self.set_cas(record.cas_version, now_ms);
        self.last_refresh_ms = Some(now_ms);
        true
    }

    /// Adopts what this entry's own write persisted, now that the store
    /// answered `outcome`: the one place a write of this entry becomes its
    /// route. Only an Applied outcome is adopted; the route it wrote is
    /// never below the one known, and its CAS version is a new one (every
    /// applied write moves the version on).
    pub fn apply_written(&mut self, pending: PendingWrite, outcome: &WriteOutcome, now_ms: u64) {
        let WriteOutcome::Applied(cas_version) = *outcome else {
            panic!("only an applied write becomes the route, not {outcome:?}");
        };
        assert!(
            pending.route_version >= self.route_version,
            "a write's route version is never below the known one: {:?} -> {:?}",
            self.route_version,
            pending.route_version
        );
        assert_ne!(
            self.cas_version,
            Some(cas_version),
            "an applied write moves the CAS version on"
        );
        // An applied write supersedes any earlier one of unknown outcome:
        // they all went on the version it moved on from.
        self.unknown_writes.clear();
        self.write_in_flight = None;
        self.write_retries = 0;
        self.set_route(
            pending.owner_node,
            pending.owner_incarnation,
            pending.route_version,
        );
        self.set_cas(cas_version, now_ms);
        self.last_refresh_ms = Some(now_ms);
        debug_assert!(
            self.route_version == pending.route_version && self.cas_version == Some(cas_version),
            "the entry names what its write left"
        );
    }

    /// The entry's invariants, checked after every event that touched it
    /// (debug builds and the simulator): what its type does not express.
    /// Panics, naming the key, on the first that fails.
    pub fn check(&self, key: ObjectKey) {
        if let Some(object) = self.object.as_ref() {
            assert!(
                self.cas_version.is_some(),
                "{key:?}: a copy always knows its record's CAS version"
            );
            assert!(
                object.changes_in_write <= object.changes_unsaved,
                "{key:?}: a write carries at most the unsaved changes ({} of {})",
                object.changes_in_write,
                object.changes_unsaved
            );
            if !object.held.is_empty() {
                assert!(
                    self.transferring.is_none(),
                    "{key:?}: held answers are settled before a handoff starts"
                );
            }
        }
        if let Some(io) = self.io.as_deref() {
            if let Some(needs_copy) = io.needs_copy() {
                assert_eq!(
                    needs_copy,
                    self.object.is_some(),
                    "{key:?}: IO {} with copy {}",
                    io.name(),
                    self.object.is_some()
                );
            }
            if let Io::Claim { write, .. } | Io::TransferClaim { write, .. } = io {
                assert!(
                    write.route_version >= self.route_version,
                    "{key:?}: a claim writes a route not below the known one"
                );
            }
        } else {
            assert!(
                self.io_waiters.is_empty(),
                "{key:?}: {} requests wait for no IO",
                self.io_waiters.len()
            );
        }
        if self.transferring.is_some() {
            assert!(
                self.queued_transfer.is_none(),
                "{key:?}: a transfer is queued or under way, not both"
            );
        }
    }

    /// Whether the route may be used without a pull at `now_ms`. A writable
    /// object never expires on the route cache interval.
    pub fn is_fresh(&self, now_ms: u64, cache_update_interval_ms: u64) -> bool {
        if self.is_writable() {
            return true;
        }
        match self.last_refresh_ms {
            None => false,
            Some(at) => at.saturating_add(cache_update_interval_ms) >= now_ms,
        }
    }

    /// Whether this entry holds nothing the core must keep: no object, no IO,
    /// no queued request, no handoff.
    pub fn is_idle_cache(&self) -> bool {
        self.object.is_none()
            && self.io.is_none()
            && self.io_waiters.is_empty()
            && self.transferring.is_none()
    }

    /// Downgrades a writable object to a route cache, dropping its state.
    pub fn downgrade(&mut self) -> Option<Writable> {
        self.object.take()
    }
}
