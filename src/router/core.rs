//! `RouterCore` and its dispatcher: the one place that chains the router's
//! steps (`steps/`). An event finds its entry, asks the step it concerns
//! what happens, and `run` carries that [`Next`] on, step after step, until
//! the event is done; then the entry's invariants are checked
//! (`Entry::check`, in debug builds and the simulator). The test-only bugs
//! of `mutant.rs` that change what a step hands on go in here, between
//! steps. The events that need no step (membership, the lease, views) are
//! in `view.rs`; the ones that enter a step from outside (requests, node
//! messages, timers) in `events.rs`.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use wire::ObjectKey;

use super::ctx::{sweep_interval_ms, Ctx, ShutdownState, StoreWait, SHUTDOWN_BATCH_MAX};
use super::entry::{Entries, Entry, Io, Manager, Waiter};
use super::handler::{ObjectType, ServiceHandler};
use super::mutant::{self, Mutant};
use super::output::{queue_io_waiter, settle_held, take_held};
use super::steps::release::Released;
use super::steps::save::Saving;
use super::steps::{claim, pull, release, route, save, transfer, Next};
use super::types::{
    RouterTransfer, StoreOp, StoreReply, StoreToken, Timer, TransferDone, TransferError,
    TransferOutcome,
};
use crate::config::RouterConfig;
use crate::store::{CasVersion, NodeId, WriteOutcome};

pub use super::ctx::RouterCounters;

/// One core's router: managers keyed by type id, and the stateless
/// services this node runs, by type id.
pub struct RouterCore {
    pub(crate) ctx: Ctx,
    pub(crate) managers: BTreeMap<u32, Manager>,
    pub(crate) services: BTreeMap<u32, Box<dyn ServiceHandler>>,
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
        let hasher =
            ahash::RandomState::with_seeds(rng.random(), rng.random(), rng.random(), rng.random());
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
}

/// Routes `waiter` on `entry`: the step called directly, so the common
/// request (answered at once) never builds a `Next` (160 bytes, copied
/// with `memcpy` through `run`'s loop: 2 % of a loaded core); whatever the
/// step returns goes on through `run`.
pub(crate) fn run_route(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    waiter: Waiter,
) {
    let next = route::route(ctx, kind, key, entry, now_ms, waiter);
    if !matches!(next, Next::Done) {
        run(ctx, kind, key, entry, now_ms, next);
    }
}

/// Carries `next` on for `key`'s entry until the event is done: the
/// dispatcher. Every step returns here; none calls another.
pub(crate) fn run(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    mut next: Next,
) {
    loop {
        next = match next {
            Next::Done => return,
            Next::Route(waiter) => route::route(ctx, kind, key, entry, now_ms, waiter),
            Next::Queue(waiter) => {
                queue_io_waiter(ctx, entry, waiter);
                Next::Done
            }
            Next::Pull { object, waiter } => {
                pull::start(ctx, key, entry, object);
                queue_io_waiter(ctx, entry, waiter);
                Next::Done
            }
            Next::Claim(record) => claim::start(ctx, kind, key, entry, now_ms, record),
            Next::Save { degrade } => {
                save::start(ctx, key, entry, now_ms, degrade);
                if mutant::active(Mutant::AnswerOnSubmit) {
                    // The bug: held answers go out as the save is sent.
                    let held = take_held(entry);
                    settle_held(ctx, held, true);
                }
                Next::Done
            }
            Next::Readopt(waiter) => {
                if entry.io.is_none() {
                    save::start_readopt(ctx, key, entry, now_ms);
                }
                if let Some(waiter) = waiter {
                    queue_io_waiter(ctx, entry, waiter);
                }
                Next::Done
            }
            Next::FinishIo { fresh_pull } => {
                finish_io(ctx, kind, key, entry, now_ms, fresh_pull);
                Next::Done
            }
            Next::PullAgain => pull::retry(ctx, key, entry),
            Next::Transfer {
                target,
                need_notify,
            } => transfer::start(ctx, key, entry, now_ms, target, need_notify),
            Next::FinishTransfer(outcome) => {
                finish_transfer(ctx, kind, key, entry, now_ms, outcome);
                Next::Done
            }
        };
    }
}

/// Ends the entry's IO and routes again everything that waited for it, in
/// order. Then writes back a copy a fence set aside meanwhile, or starts a
/// transfer that was asked for meanwhile.
fn finish_io(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    fresh_pull: bool,
) {
    entry.io = None;
    let waiters = std::mem::take(&mut entry.io_waiters);
    // The waiters of an on_write object run one after the other on the
    // writable state; their outputs are held and ONE save for all of them
    // starts in the next `on_flush`: the store commits each object once per
    // round trip whatever the pipelining, instead of once per request.
    for mut waiter in waiters {
        waiter.fresh_pull = fresh_pull;
        run_route(ctx, kind, key, entry, now_ms, waiter);
    }
    // A copy set aside by a fence while this IO ran is written back now
    // (unless a retry of its write is already armed).
    if entry.io.is_none() && entry.is_aside() && !ctx.fenced && entry.write_retries == 0 {
        run(ctx, kind, key, entry, now_ms, Next::Readopt(None));
    }
    // A transfer waits for the save of held outputs: `on_flush` starts it,
    // and the end of its IO comes back here.
    if entry.io.is_none() && !entry.holds_outputs() {
        if let Some((target, need_notify)) = entry.queued_transfer.take() {
            let next = Next::Transfer {
                target,
                need_notify,
            };
            run(ctx, kind, key, entry, now_ms, next);
        }
    }
}

/// The last step of a handoff, on every outcome: release the migration
/// flag, then route every pending request again exactly once with the
/// route as it now is (forwarded to the new owner, run here, or answered).
/// The seed's defect (b), fixed: no branch returns before this. Whoever
/// waits for the transfer learns `outcome` first.
fn finish_transfer(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    outcome: TransferOutcome,
) {
    let Some(transferring) = entry.transferring.take() else {
        return;
    };
    ctx.transfer_done(TransferDone {
        key,
        target: transferring.target,
        outcome,
        route_version: entry.route_version,
    });
    for waiter in transferring.transfer_pending {
        run_route(ctx, kind, key, entry, now_ms, waiter);
    }
    if entry.io.is_none() {
        finish_io(ctx, kind, key, entry, now_ms, false);
    }
}

/// The entry's invariants after an event (`Entry::check`): in debug builds
/// and the simulator; release builds skip the walk.
#[inline]
pub(crate) fn checked(key: ObjectKey, entry: &Entry) {
    if cfg!(any(debug_assertions, test)) {
        entry.check(key);
    }
}

impl RouterCore {
    /// Runs `next` on `key`'s entry, if the core has it, and checks it.
    pub(crate) fn run_on(&mut self, now_ms: u64, key: ObjectKey, next: Next) {
        let ctx = &mut self.ctx;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return;
        };
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        run(ctx, kind.as_ref(), key, entry, now_ms, next);
        checked(key, entry);
    }

    /// The store's answer to the request named `token`. A token this core
    /// does not know (a reply to a previous life) is ignored.
    pub fn on_store_reply(&mut self, now_ms: u64, token: StoreToken, reply: StoreReply) {
        let Some(wait) = self.ctx.store_waits.remove(&token) else {
            return;
        };
        match wait {
            StoreWait::Entry(key) => {
                self.entry_reply(now_ms, key, reply);
                if self.ctx.is_shutting_down() {
                    // An object busy when shutdown began is released now.
                    self.release(now_ms, &[key]);
                }
            }
            StoreWait::Batch(keys) => self.batch_reply(now_ms, keys, reply),
        }
    }

    /// Hands a store answer to the step of the IO it answers. The IO is
    /// taken off the entry with what it carried (the write it persists, a
    /// claim's state); the step puts back whatever goes on.
    fn entry_reply(&mut self, now_ms: u64, key: ObjectKey, reply: StoreReply) {
        let ctx = &mut self.ctx;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return;
        };
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        let kind = kind.as_ref();
        let Some(io) = entry.io.take() else {
            return;
        };
        let reply = match reply {
            StoreReply::Written(WriteOutcome::Indeterminate)
                if mutant::active(Mutant::IndeterminateAsApplied) =>
            {
                let next = entry.cas_version.map_or(1, |cas| cas.0 + 1);
                StoreReply::Written(WriteOutcome::Applied(CasVersion(next)))
            }
            reply => reply,
        };
        let next = match io {
            Io::PullCache => pull::reply(ctx, kind, key, entry, now_ms, false, reply),
            Io::PullObject => pull::reply(ctx, kind, key, entry, now_ms, true, reply),
            Io::Claim { write, state } => claim::reply(ctx, entry, now_ms, (write, state), reply),
            Io::Save { degrade, write } => {
                let saving = Saving::Save { degrade };
                save::reply(ctx, key, entry, now_ms, (saving, write), reply)
            }
            Io::Readopt { write } => {
                save::reply(ctx, key, entry, now_ms, (Saving::Readopt, write), reply)
            }
            Io::Remove { write } => transfer::remove_reply(ctx, key, entry, now_ms, write, reply),
            Io::TransferClaim {
                from,
                transfer_id,
                write,
                state,
            } => claim::transfer_reply(
                ctx,
                key,
                entry,
                now_ms,
                (from, transfer_id),
                (write, state),
                reply,
            ),
            // Releases are only ever written in batches, and a release
            // waiting for its retry has no write in flight.
            io @ (Io::Release { .. } | Io::ReleaseRetry) => {
                entry.io = Some(io);
                Next::Done
            }
        };
        run(ctx, kind, key, entry, now_ms, next);
        checked(key, entry);
    }

    /// Saves and releases the writable, idle objects among `keys`, in
    /// batches of `SHUTDOWN_BATCH_MAX` writes.
    pub(crate) fn release(&mut self, now_ms: u64, keys: &[ObjectKey]) {
        let ctx = &mut self.ctx;
        if ctx.shutdown.as_ref().is_some_and(|s| s.expired) {
            return;
        }
        let mut batch_keys = Vec::new();
        let mut writes = Vec::new();
        for key in keys {
            let Some(entry) = self
                .managers
                .get_mut(&key.type_id)
                .and_then(|manager| manager.entries.get_mut(key))
            else {
                continue;
            };
            let Some(write) = release::begin(*key, entry, now_ms) else {
                continue;
            };
            checked(*key, entry);
            writes.push(write);
            batch_keys.push(*key);
            if writes.len() == SHUTDOWN_BATCH_MAX {
                let keys = std::mem::take(&mut batch_keys);
                ctx.store(
                    StoreWait::Batch(keys),
                    StoreOp::WriteBatch(std::mem::take(&mut writes)),
                );
            }
        }
        if !writes.is_empty() {
            ctx.store(StoreWait::Batch(batch_keys), StoreOp::WriteBatch(writes));
        }
    }

    /// The outcomes of a shutdown batch, each to its key's release step.
    fn batch_reply(&mut self, now_ms: u64, keys: Vec<ObjectKey>, reply: StoreReply) {
        let outcomes: Vec<Option<WriteOutcome>> = match reply {
            StoreReply::WrittenBatch(outcomes) if outcomes.len() == keys.len() => {
                outcomes.into_iter().map(Some).collect()
            }
            _ => vec![None; keys.len()],
        };
        let mut again = Vec::new();
        let ctx = &mut self.ctx;
        for (key, outcome) in keys.into_iter().zip(outcomes) {
            let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
                continue;
            };
            let Some(entry) = entries.get_mut(&key) else {
                continue;
            };
            let write = match entry.io.take() {
                Some(Io::Release { write }) => write,
                other => {
                    entry.io = other;
                    continue;
                }
            };
            match release::reply(ctx, key, entry, now_ms, write, outcome) {
                Released::Then(next) => {
                    run(ctx, kind.as_ref(), key, entry, now_ms, next);
                    checked(key, entry);
                }
                // Checked once its release went again, below.
                Released::Again => again.push(key),
            }
        }
        if !again.is_empty() {
            self.release(now_ms, &again);
        }
    }

    /// A copy's write failed or had no known outcome a while ago: write it
    /// again, unless another write started meanwhile. At shutdown it is
    /// the release that goes again; a fenced node waits for its rejoin.
    pub(crate) fn retry_write(&mut self, now_ms: u64, key: ObjectKey) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let giving_up = matches!(entry.io, Some(Io::ReleaseRetry));
        if giving_up {
            entry.io = None;
        } else if entry.io.is_some() || entry.transferring.is_some() {
            // Another write started meanwhile: its answer decides.
            return;
        }
        let Some(object) = entry.object.as_ref() else {
            return;
        };
        let next = if giving_up {
            Next::Save { degrade: true }
        } else if object.aside {
            if self.ctx.fenced {
                Next::Done
            } else {
                Next::Readopt(None)
            }
        } else if object.changes_unsaved > 0 || !object.held.is_empty() {
            Next::Save { degrade: false }
        } else {
            Next::Done
        };
        if self.ctx.is_shutting_down() {
            return self.release(now_ms, &[key]);
        }
        self.run_on(now_ms, key, next);
    }

    /// The end of a batch of events (`Effect::FlushSavesAfterBatch`): every
    /// on_write object that held outputs since the last flush starts one
    /// save covering all of them (released in order when its CAS applies,
    /// all answered UNAVAILABLE when it does not). An object whose IO
    /// already started (a periodic save, a shutdown release) is covered by
    /// that write: its reply settles the held outputs.
    pub fn on_flush(&mut self, now_ms: u64) {
        for key in std::mem::take(&mut self.ctx.flush_keys) {
            let Some(entry) = self.entry_mut(key) else {
                continue;
            };
            if entry.io.is_some() || !entry.holds_outputs() {
                continue;
            }
            let next = if entry.is_aside() && !self.ctx.fenced {
                // Rejoined before this flush: the write-back covers them.
                Next::Readopt(None)
            } else {
                Next::Save { degrade: false }
            };
            self.run_on(now_ms, key, next);
        }
    }

    /// The sweep timer: periodic saves, idle degradation, cache cleanup.
    pub(crate) fn sweep(&mut self, now_ms: u64) {
        let ctx = &mut self.ctx;
        let config = ctx.config.clone();
        for Manager { kind, entries } in self.managers.values_mut() {
            let mut freed = Vec::new();
            for (key, entry) in entries.iter_mut() {
                if entry.is_writable() {
                    let next = save::due(ctx, entry, now_ms);
                    run(ctx, kind.as_ref(), *key, entry, now_ms, next);
                    checked(*key, entry);
                } else if entry.is_idle_cache()
                    && entry.last_access_ms + config.cache_free_timeout_ms <= now_ms
                {
                    freed.push(*key);
                }
            }
            for key in freed {
                entries.remove(&key);
                ctx.entries_total -= 1;
                ctx.counters.caches_freed_total += 1;
            }
        }
        if !self.is_shutdown_complete() {
            self.ctx
                .arm(now_ms + sweep_interval_ms(&config), Timer::Sweep);
        }
    }

    /// Starts shutdown: new claims are refused, every writable object is
    /// saved with owner 0 (batches of `SHUTDOWN_BATCH_MAX`), objects busy
    /// with IO follow when it ends. At `now_ms + deadline_ms` whatever still
    /// waits is answered UNAVAILABLE. Poll `is_shutdown_complete`.
    pub fn shutdown(&mut self, now_ms: u64, deadline_ms: u64) {
        if self.ctx.shutdown.is_some() {
            return;
        }
        let deadline_at_ms = now_ms + deadline_ms;
        self.ctx.shutdown = Some(ShutdownState { expired: false });
        self.ctx.arm(deadline_at_ms, Timer::ShutdownDeadline);
        let keys: Vec<ObjectKey> = self
            .managers
            .values()
            .flat_map(|manager| manager.entries.keys().copied())
            .collect();
        self.release(now_ms, &keys);
    }

    pub(crate) fn shutdown_deadline(&mut self, _now_ms: u64) {
        let ctx = &mut self.ctx;
        let Some(shutdown) = ctx.shutdown.as_mut() else {
            return;
        };
        shutdown.expired = true;
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
                release::deadline(ctx, *key, entry);
                checked(*key, entry);
            }
        }
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
        // The bug: copies stay in service through the fence.
        let leave = mutant::active(Mutant::FenceLeavesCopiesInService);
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
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
                checked(*key, entry);
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
        for Manager { kind, entries } in self.managers.values_mut() {
            for (key, entry) in entries.iter_mut() {
                if entry.is_aside() && entry.io.is_none() {
                    run(ctx, kind.as_ref(), *key, entry, now_ms, Next::Readopt(None));
                    checked(*key, entry);
                }
            }
        }
    }

    /// `transfer(key, target, need_notify)`: persist `target` as the owner
    /// with a higher route version, downgrade, then (with `need_notify`)
    /// ship the state to `target` in `router_transfer` and wait for its ack.
    /// Requests arriving meanwhile wait in the pending queue and are all
    /// re-dispatched at the end, whatever the outcome. A `target` of 0
    /// releases ownership. Starts after the object's in-flight IO.
    pub fn transfer(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        target: NodeId,
        need_notify: bool,
    ) -> Result<(), TransferError> {
        if let Some(refused) = transfer::refusal(&self.ctx, now_ms, target) {
            return Err(refused);
        }
        let manager = self
            .managers
            .get_mut(&key.type_id)
            .ok_or(TransferError::UnknownType)?;
        let entry = manager
            .entries
            .get_mut(&key)
            .ok_or(TransferError::NotWritable)?;
        let next = transfer::ask(entry, target, need_notify)?;
        run(
            &mut self.ctx,
            manager.kind.as_ref(),
            key,
            entry,
            now_ms,
            next,
        );
        checked(key, entry);
        Ok(())
    }

    /// `router_transfer` at the target: confirm the shipped state by CAS on
    /// the CAS version the sender's write produced, then ack. Refuses (acks
    /// false) when it knows a newer route or is busy with this key.
    pub fn on_router_transfer(&mut self, now_ms: u64, from_node: NodeId, transfer: RouterTransfer) {
        let ctx = &mut self.ctx;
        let key = transfer.key;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return super::ctx::ack(ctx, from_node, key, transfer.transfer_id, false);
        };
        let entry = match entries.entry(key) {
            hashbrown::hash_map::Entry::Occupied(occupied) => occupied.into_mut(),
            hashbrown::hash_map::Entry::Vacant(vacant) => {
                if ctx.is_shutting_down() || ctx.entries_total >= ctx.config.entries_per_core_max {
                    return super::ctx::ack(ctx, from_node, key, transfer.transfer_id, false);
                }
                ctx.entries_total += 1;
                vacant.insert(Entry::new(now_ms))
            }
        };
        let next = claim::accept_transfer(ctx, kind.as_ref(), entry, now_ms, from_node, transfer);
        run(ctx, kind.as_ref(), key, entry, now_ms, next);
        checked(key, entry);
    }

    /// The end of a transfer's notification (answered, refused, or timed
    /// out): the handoff ends and its pending queue drains either way.
    pub(crate) fn end_notify(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        transfer_id: u64,
        outcome: TransferOutcome,
    ) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        if !transfer::awaits_ack(entry, transfer_id) {
            return;
        }
        if outcome == TransferOutcome::NoAnswer {
            self.ctx.counters.transfer_ack_timeouts_total += 1;
        }
        let accepted = outcome == TransferOutcome::Confirmed;
        // The seed's defect (b), planted back: the handoff never ends, or
        // ends dropping its queue.
        if !accepted && mutant::active(Mutant::PendingNotRedispatched) {
            return;
        }
        if !accepted && mutant::active(Mutant::PendingDropped) {
            if let Some(entry) = self.entry_mut(key) {
                entry.transferring = None;
            }
            return;
        }
        self.run_on(now_ms, key, Next::FinishTransfer(outcome));
    }
}
