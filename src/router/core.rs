//! `RouterCore` and its dispatcher: the one place that chains the router's
//! steps (`steps/`). An event (`events/`, one file per family) finds its
//! entry and asks the step it concerns what happens; `run` carries that
//! [`Next`] on, step after step, until the event is done; then the entry's
//! invariants are checked (`Entry::check`, in debug builds and the
//! simulator). The test-only bugs of `mutant.rs` that change what a step
//! hands on go in here, between steps. What the core shows without
//! running a step is in `view.rs`.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use wire::ObjectKey;

use super::ctx::{sweep_interval_ms, Ctx};
use super::entry::{Entries, Entry, Manager, Waiter};
use super::handler::{ObjectType, ServiceHandler};
use super::mutant::{self, Mutant};
use super::output::{queue_io_waiter, settle_held, take_held};
use super::steps::{claim, pull, route, save, transfer, Next};
use super::types::{Timer, TransferDone, TransferOutcome};
use crate::config::RouterConfig;
use crate::ids::NodeId;

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
                hot: Default::default(),
                paused: Default::default(),
            },
            managers: BTreeMap::new(),
            services: BTreeMap::new(),
        };
        core.ctx.arm(sweep_at, Timer::Sweep);
        core
    }

    /// The router settings this core runs with.
    pub fn config(&self) -> &RouterConfig {
        &self.ctx.config
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
            Next::Remove(write) => transfer::resend(ctx, key, entry, now_ms, write),
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

/// The last step of a handoff, on every outcome: clear the migration
/// flag, then route every pending request again exactly once with the
/// route as it now is (forwarded to the new owner, run here, or answered).
/// No branch returns before this, so a handoff whose notification
/// failed still ends and its queue is routed again. Whoever
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

/// Forgets the idle route cache of `key`, counted as freed.
pub(crate) fn free_cache(ctx: &mut Ctx, entries: &mut Entries, key: ObjectKey) {
    if entries.remove(&key).is_some() {
        ctx.entries_total -= 1;
        ctx.counters.caches_freed_total += 1;
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
}
