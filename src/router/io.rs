//! Store replies: `pull_cache`, `pull_object` and its claim, `save_object`.

use rand::Rng;
use wire::ObjectKey;

use super::core::{Ctx, Manager, RouterCore, StoreWait};
use super::dispatch::{abandon, dispatch_entry, lock_expired, release, start_save};
use super::entry::{Entry, Io, PendingWrite, Writable};
use super::handler::{HandlerOutput, ObjectState, ObjectType};
use super::mutant::{self, Mutant};
use super::types::{ErrorCode, Request, StoreFailure, StoreOp, StoreReply, StoreToken, Timer};
use crate::store::{CasVersion, RouteRecord, WriteCondition, WriteOutcome};

impl RouterCore {
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

    fn entry_reply(&mut self, now_ms: u64, key: ObjectKey, reply: StoreReply) {
        let ctx = &mut self.ctx;
        let Some(Manager { kind, entries }) = self.managers.get_mut(&key.type_id) else {
            return;
        };
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        let kind = kind.as_ref();
        let Some(io) = entry.io else {
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
        match io {
            Io::PullCache | Io::PullObject => pull_reply(ctx, kind, key, entry, now_ms, io, reply),
            Io::Claim => claim_reply(ctx, kind, key, entry, now_ms, reply),
            Io::Save { .. } | Io::Readopt => save_reply(ctx, kind, key, entry, now_ms, io, reply),
            Io::Remove => super::transfer::remove_reply(ctx, kind, key, entry, now_ms, reply),
            Io::TransferClaim { from, transfer_id } => super::transfer::transfer_claim_reply(
                ctx,
                kind,
                key,
                entry,
                now_ms,
                (from, transfer_id),
                reply,
            ),
            // Releases are only ever written in batches, and a release
            // waiting for its retry has no write in flight.
            Io::Release | Io::ReleaseRetry => {}
        }
    }

    /// A copy's write failed or had no known outcome a while ago: write it
    /// again, unless another write started meanwhile. At shutdown it is
    /// the release that goes again; a fenced node waits for its rejoin.
    pub(crate) fn retry_write(&mut self, now_ms: u64, key: ObjectKey) {
        let ctx = &mut self.ctx;
        let Some(entry) = self
            .managers
            .get_mut(&key.type_id)
            .and_then(|manager| manager.entries.get_mut(&key))
        else {
            return;
        };
        let giving_up = entry.io == Some(Io::ReleaseRetry);
        if giving_up {
            entry.io = None;
        } else if entry.io.is_some() || entry.transferring.is_some() {
            // Another write started meanwhile: its answer decides.
            return;
        }
        let Some(object) = entry.object.as_ref() else {
            return;
        };
        if ctx.is_shutting_down() {
            return self.release(now_ms, &[key]);
        }
        if giving_up {
            start_save(ctx, key, entry, now_ms, true);
        } else if object.aside {
            if !ctx.fenced {
                start_readopt(ctx, key, entry, now_ms);
            }
        } else if object.changes_unsaved > 0 || !object.held.is_empty() {
            start_save(ctx, key, entry, now_ms, false);
        }
    }

    /// Re-issues the read of a pull that got EAGAIN.
    pub(crate) fn retry_pull(&mut self, _now_ms: u64, key: ObjectKey) {
        let ctx = &mut self.ctx;
        let Some(entry) = self
            .managers
            .get_mut(&key.type_id)
            .and_then(|manager| manager.entries.get_mut(&key))
        else {
            return;
        };
        if matches!(entry.io, Some(Io::PullCache | Io::PullObject)) {
            ctx.counters.pulls_total += 1;
            ctx.store(StoreWait::Entry(key), StoreOp::Load(key));
        }
    }
}

/// Ends the entry's IO and re-dispatches everything that waited for it, in
/// order. Then starts a transfer that was asked for meanwhile.
pub(crate) fn finish_io(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    fresh_pull: bool,
) {
    entry.io = None;
    entry.pending_write = None;
    entry.claiming = None;
    let waiters = std::mem::take(&mut entry.io_waiters);
    // The waiters of an on_write object run one after the other on the
    // writable state; their outputs are held and ONE save for all of them
    // starts in the next `on_flush`: the store commits each object once per
    // round trip whatever the pipelining, instead of once per request.
    for mut waiter in waiters {
        waiter.fresh_pull = fresh_pull;
        dispatch_entry(ctx, kind, key, entry, now_ms, waiter);
    }
    // A copy set aside by a fence while this IO ran is written back now
    // (unless a retry of its write is already armed).
    if entry.io.is_none() && entry.is_aside() && !ctx.fenced && entry.write_retries == 0 {
        start_readopt(ctx, key, entry, now_ms);
    }
    // A transfer waits for the save of held outputs: `on_flush` starts it,
    // and its `finish_io` comes back here.
    if entry.io.is_none() && !entry.holds_outputs() {
        if let Some((target, need_notify)) = entry.queued_transfer.take() {
            super::transfer::start_transfer(ctx, key, entry, now_ms, target, need_notify);
        }
    }
}

/// Answers every request waiting on the entry's IO with `code`.
pub(crate) fn fail_waiters(ctx: &mut Ctx, entry: &mut Entry, code: ErrorCode) {
    for waiter in std::mem::take(&mut entry.io_waiters) {
        ctx.reply(&waiter.request, Err(code.into()));
    }
}

fn pull_reply(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    io: Io,
    reply: StoreReply,
) {
    let record = match reply {
        StoreReply::Loaded(record) => record,
        StoreReply::Failed(StoreFailure::Busy) => {
            entry.pull_retries += 1;
            if entry.pull_retries < ctx.config.pull_attempts_max {
                let bound = match io {
                    Io::PullObject => ctx.config.object_retry_interval_ms,
                    _ => ctx.config.cache_retry_interval_ms,
                };
                let wait_ms = ctx.rng.gen_range(1..=bound.max(1));
                ctx.arm(now_ms + wait_ms, Timer::PullRetry { key });
                return;
            }
            return give_up(ctx, entry);
        }
        // Terminal errors (and a reply of the wrong shape) return at once.
        _ => return give_up(ctx, entry),
    };
    match &record {
        Some(record) => {
            entry.adopt_record(record, now_ms);
        }
        None => {
            entry.cas_version = None;
            entry.last_refresh_ms = Some(now_ms);
        }
    }
    if io == Io::PullObject && claimable(ctx, kind, entry, record.as_ref(), now_ms) {
        return start_claim(ctx, kind, key, entry, now_ms, record);
    }
    finish_io(ctx, kind, key, entry, now_ms, true);
}

fn give_up(ctx: &mut Ctx, entry: &mut Entry) {
    entry.io = None;
    entry.pull_retries = 0;
    fail_waiters(ctx, entry, ErrorCode::Unavailable);
}

/// The claim rule: no record or owner 0 (auto-create types); this node in
/// this or an earlier incarnation; or another owner whose lock ended
/// (`lock_expired`: its incarnation ended, or it is unknown to membership
/// and stopped saving). Never while shutting down or fenced.
fn claimable(
    ctx: &Ctx,
    kind: &dyn ObjectType,
    entry: &Entry,
    record: Option<&RouteRecord>,
    now_ms: u64,
) -> bool {
    if ctx.is_shutting_down() || !ctx.may_serve(now_ms) {
        return false;
    }
    match record {
        // Only a waiter that may create the object makes the claim; the
        // others are answered by `route_by_owner`.
        None => {
            kind.auto_create()
                && (entry.io_waiters.iter()).any(|w| kind.may_create(w.request.op).is_ok())
        }
        Some(record) if record.owner_node.is_none() => kind.auto_create(),
        Some(record) if record.owner_node == ctx.node => {
            record.owner_incarnation <= ctx.incarnation
        }
        Some(_) => lock_expired(ctx, entry, now_ms),
    }
}

/// The claim write: CAS on the record read, this node as owner, a route
/// version above both the record's and the entry's.
fn start_claim(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    record: Option<RouteRecord>,
) {
    let state = match kind.decode(key, record.as_ref().map(|r| r.state.as_slice())) {
        Ok(state) => state,
        Err(_) => {
            entry.io = None;
            return fail_waiters(ctx, entry, ErrorCode::Internal);
        }
    };
    let known = record.as_ref().map_or(entry.route_version, |r| {
        r.route_version.max(entry.route_version)
    });
    let route_version = if mutant::active(Mutant::ClaimKeepsRouteVersion) {
        known
    } else {
        known.next()
    };
    let (condition, bytes) = match record {
        Some(record) => (WriteCondition::CasEquals(record.cas_version), record.state),
        None => (WriteCondition::Absent, state.encode()),
    };
    entry.claiming = Some(state);
    let pending = PendingWrite {
        owner_node: ctx.node,
        owner_incarnation: ctx.incarnation,
        route_version,
        save_timepoint_ms: now_ms,
    };
    let write = entry.begin_write(Io::Claim, key, condition, pending, bytes);
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
}

/// Makes the entry writable. Only ever called with the CAS version of an
/// Applied write that made this node the owner.
pub(crate) fn become_writable(
    entry: &mut Entry,
    state: Box<dyn ObjectState>,
    applied: CasVersion,
    pending: PendingWrite,
    now_ms: u64,
) {
    assert!(entry.object.is_none(), "a writable object is claimed once");
    entry.apply_write(pending, applied, now_ms);
    entry.object = Some(Writable {
        state,
        changes_unsaved: 0,
        changes_in_write: 0,
        last_save_ms: now_ms,
        aside: false,
        held: Vec::new(),
    });
}

/// Applies a non-Applied write outcome to the route: a conflict returns the
/// current record; anything else leaves the route unknown. Returns whether
/// the route is now known fresh.
pub(crate) fn after_failed_write(
    ctx: &mut Ctx,
    entry: &mut Entry,
    now_ms: u64,
    outcome: &WriteOutcome,
) -> bool {
    match outcome {
        WriteOutcome::Conflict(Some(record)) => {
            ctx.counters.cas_conflicts_total += 1;
            entry.adopt_record(record, now_ms)
        }
        WriteOutcome::Conflict(None) => {
            ctx.counters.cas_conflicts_total += 1;
            entry.last_refresh_ms = None;
            false
        }
        WriteOutcome::Indeterminate => {
            ctx.counters.store_indeterminate_total += 1;
            entry.last_refresh_ms = None;
            false
        }
        WriteOutcome::Applied(_) => true,
    }
}

/// A claim's write applied (a pull's claim, or a transfer target's): the
/// entry becomes writable with the state decoded for it, unless the node
/// fenced meanwhile: then the record names this node's ended incarnation,
/// which any node may claim, and nothing is served from it here.
pub(crate) fn claimed(ctx: &mut Ctx, entry: &mut Entry, applied: CasVersion, now_ms: u64) -> bool {
    let pending = entry
        .pending_write
        .take()
        .expect("a claim has a pending write");
    let state = entry.claiming.take().expect("a claim has a decoded state");
    if !ctx.may_serve(now_ms) || ctx.incarnation != pending.owner_incarnation {
        entry.apply_write(pending, applied, now_ms);
        entry.last_refresh_ms = None;
        return false;
    }
    let previous_owner = entry.owner_node;
    if !previous_owner.is_none() && previous_owner != ctx.node {
        ctx.counters.dead_owner_claims_total += 1;
    }
    become_writable(entry, state, applied, pending, now_ms);
    ctx.counters.claims_total += 1;
    true
}

fn claim_reply(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    reply: StoreReply,
) {
    let mut fresh = false;
    match reply {
        StoreReply::Written(WriteOutcome::Applied(cas_version)) => {
            claimed(ctx, entry, cas_version, now_ms);
        }
        StoreReply::Written(outcome) => fresh = after_failed_write(ctx, entry, now_ms, &outcome),
        // Not applied: the route is unchanged; the waiters try again.
        _ => {}
    }
    finish_io(ctx, kind, key, entry, now_ms, fresh);
}

fn save_reply(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    io: Io,
    reply: StoreReply,
) {
    let reply = match reply {
        // A degradation whose earlier attempt's answer was lost, and which
        // did apply: nothing ran on the copy since (requests waited), so
        // this one would have written the same; it is done.
        StoreReply::Written(WriteOutcome::Conflict(Some(record)))
            if io == (Io::Save { degrade: true })
                && entry.retries_unknown_write()
                && entry.left_by_unknown_write(&record) =>
        {
            StoreReply::Written(WriteOutcome::Applied(record.cas_version))
        }
        reply => reply,
    };
    match reply {
        StoreReply::Written(WriteOutcome::Applied(cas_version)) => {
            let held = take_held(entry);
            let pending = entry
                .pending_write
                .take()
                .expect("a save has a pending write");
            // A readopt names the incarnation it was sent under: if the node
            // fenced or rejoined again meanwhile, that one ended too, and the
            // copy stays aside for the write-back under the current one.
            let current = !ctx.fenced && pending.owner_incarnation == ctx.incarnation;
            entry.apply_write(pending, cas_version, now_ms);
            if let Some(object) = entry.object.as_mut() {
                object.last_save_ms = now_ms;
                object.changes_unsaved -= object.changes_in_write;
                object.changes_in_write = 0;
            }
            match io {
                Io::Readopt => {
                    if let Some(object) = entry.object.as_mut().filter(|_| current) {
                        object.aside = false;
                        ctx.counters.readopts_total += 1;
                    }
                }
                Io::Save { degrade: true } => {
                    entry.downgrade();
                    entry.last_refresh_ms = Some(now_ms);
                    ctx.counters.degrades_total += 1;
                    ctx.counters.saves_total += 1;
                }
                _ => ctx.counters.saves_total += 1,
            }
            settle_held(ctx, held, true);
        }
        StoreReply::Written(WriteOutcome::Conflict(_))
            if mutant::active(Mutant::ConflictKeepsWritable) =>
        {
            let held = take_held(entry);
            settle_held(ctx, held, false);
        }
        StoreReply::Written(WriteOutcome::Conflict(Some(record)))
            if entry.left_by_unknown_write(&record) =>
        {
            // An earlier write of this copy whose answer was lost did
            // apply: the copy is still the owner's, one CAS version on.
            // The same write goes again at once, its held answers with it
            // (the copy may have changed since, and a readopt must name
            // the incarnation of now).
            ctx.counters.cas_conflicts_total += 1;
            entry.adopt_record(&record, now_ms);
            entry.unknown_write = None;
            entry.io = None;
            entry.pending_write = None;
            return rewrite(ctx, key, entry, now_ms, io);
        }
        StoreReply::Written(outcome @ WriteOutcome::Conflict(_)) => {
            // Another node owns the record now (this node was declared down
            // and the object taken over): the copy is dropped, with what no
            // save made durable, and its held mutations are not
            // acknowledged.
            let held = take_held(entry);
            let owner = match &outcome {
                WriteOutcome::Conflict(Some(record)) => Some(record.owner_node),
                _ => None,
            };
            drop_copy(ctx, key, entry, owner, "another node owns it now");
            after_failed_write(ctx, entry, now_ms, &outcome);
            settle_held(ctx, held, false);
        }
        reply => {
            // Not applied, or not known to be: the copy stays (ownership
            // cannot have moved while this node's lease held) and is
            // written again after a backoff; its held answers wait for the
            // write that covers them. A later conflict with the record this
            // write would leave shows it did apply.
            if matches!(reply, StoreReply::Written(WriteOutcome::Indeterminate)) {
                ctx.counters.store_indeterminate_total += 1;
                entry.write_unknown();
            }
            entry.pending_write = None;
            if let Some(object) = entry.object.as_mut() {
                object.changes_in_write = 0;
            }
            schedule_write_retry(ctx, key, entry, now_ms);
            if io == (Io::Save { degrade: true }) {
                // It may have given ownership up: requests wait for the
                // retry to tell.
                entry.io = Some(Io::ReleaseRetry);
                return;
            }
        }
    }
    finish_io(ctx, kind, key, entry, now_ms, false);
}

/// Starts again the write `io` of a copy (after its earlier write was
/// found applied).
fn rewrite(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, now_ms: u64, io: Io) {
    match io {
        Io::Readopt => start_readopt(ctx, key, entry, now_ms),
        Io::Save { degrade } => start_save(ctx, key, entry, now_ms, degrade),
        _ => unreachable!("only saves and readopts are rewritten"),
    }
}

/// `rejoin`'s write-back of a copy kept aside through a fence: the state
/// with its unsaved changes, under this node's new incarnation, by CAS on
/// the record this copy last knew. Applied: nobody took the object over
/// and nothing is lost. A conflict: another node owns it, and the copy is
/// dropped and counted.
pub(crate) fn start_readopt(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, now_ms: u64) {
    assert!(entry.io.is_none(), "one IO per object at a time");
    assert!(!ctx.fenced, "a fenced node writes no copy back");
    let Some(object) = entry.object.as_mut() else {
        return;
    };
    assert!(object.aside, "only a copy kept aside is written back");
    let cas_version = entry
        .cas_version
        .expect("a writable object always knows its record's CAS version");
    object.changes_in_write = object.changes_unsaved;
    let state = object.state.encode();
    let pending = PendingWrite {
        owner_node: ctx.node,
        owner_incarnation: ctx.incarnation,
        route_version: entry.route_version.next(),
        save_timepoint_ms: now_ms,
    };
    let condition = WriteCondition::CasEquals(cas_version);
    let write = entry.begin_write(Io::Readopt, key, condition, pending, state);
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
}

/// The longest wait before a failed write of a copy is tried again.
pub(crate) const WRITE_RETRY_MAX_MS: u64 = 5_000;

/// The wait before the `retries`-th retry of a copy's write: doubling from
/// `router.object_retry_interval_ms` up to `WRITE_RETRY_MAX_MS`, so a store
/// that is down is not hammered by every copy at once.
pub(crate) fn write_retry_after_ms(base_ms: u64, retries: u32) -> u64 {
    base_ms
        .max(1)
        .saturating_mul(1 << retries.min(16))
        .min(WRITE_RETRY_MAX_MS)
}

/// Arms the retry of a copy's write that failed or had no known outcome.
pub(crate) fn schedule_write_retry(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, now_ms: u64) {
    entry.write_retries = entry.write_retries.saturating_add(1);
    ctx.counters.write_retries_total += 1;
    let wait_ms = write_retry_after_ms(ctx.config.object_retry_interval_ms, entry.write_retries);
    let jittered_ms = ctx.rng.gen_range(wait_ms / 2..=wait_ms.max(1));
    ctx.arm(now_ms + jittered_ms.max(1), Timer::WriteRetry { key });
}

/// Drops a copy this node can no longer write (another node owns the
/// record, or a shutdown's deadline passed), counting and logging what no
/// save had made durable. `owner` is the record's owner now, when known.
pub(crate) fn drop_copy(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    owner: Option<crate::store::NodeId>,
    why: &'static str,
) {
    let Some(object) = entry.downgrade() else {
        return;
    };
    let changes = object.changes_unsaved;
    if changes == 0 {
        return;
    }
    ctx.counters.unsaved_objects_dropped_total += 1;
    ctx.counters.unsaved_changes_dropped_total += changes;
    tracing::warn!(
        object_type = key.type_id,
        zone = key.zone_id,
        object = key.object_id,
        changes,
        owner = owner.map(|node| node.0),
        "unsaved changes dropped: {why}"
    );
}

/// Takes the on_write outputs held on `entry`'s object, for the reply of the
/// write that covers them.
pub(crate) fn take_held(entry: &mut Entry) -> Vec<(Request, HandlerOutput)> {
    entry
        .object
        .as_mut()
        .map(|object| std::mem::take(&mut object.held))
        .unwrap_or_default()
}

/// Settles held on_write outputs once the write covering them replied: all
/// released in order when it applied, all answered UNAVAILABLE (nothing
/// else released) when it did not.
pub(crate) fn settle_held(ctx: &mut Ctx, held: Vec<(Request, HandlerOutput)>, applied: bool) {
    for (request, mut out) in held {
        if applied {
            release(ctx, &request, &mut out);
        } else {
            abandon(ctx, request);
        }
    }
}
