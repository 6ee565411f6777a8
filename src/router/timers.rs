//! The sweep timer (periodic saves, idle degradation, cache cleanup) and
//! shutdown (every writable object saved with ownership released, in
//! batches, within a deadline).

use wire::ObjectKey;

use super::core::{
    sweep_interval_ms, Manager, RouterCore, ShutdownState, StoreWait, SHUTDOWN_BATCH_MAX,
};
use super::dispatch::start_save;
use super::entry::{Io, PendingWrite};
use super::io::{
    after_failed_write, drop_copy, fail_waiters, finish_io, schedule_write_retry, settle_held,
    take_held,
};
use super::types::{ErrorCode, StoreOp, StoreReply, Timer};
use crate::store::{NodeId, WriteCondition, WriteOutcome};

impl RouterCore {
    pub(crate) fn sweep(&mut self, now_ms: u64) {
        let ctx = &mut self.ctx;
        let config = ctx.config.clone();
        for manager in self.managers.values_mut() {
            let mut freed = Vec::new();
            for (key, entry) in manager.entries.iter_mut() {
                if let Some(object) = entry.object.as_ref() {
                    let busy = entry.io.is_some() || entry.transferring.is_some();
                    // A copy kept aside by a fence is written back by its
                    // readopt, not by a save of the ended incarnation.
                    if busy || ctx.is_shutting_down() || object.aside {
                        continue;
                    }
                    let idle_at = entry.last_access_ms + config.object_free_timeout_ms;
                    let save_at = object.last_save_ms + config.object_save_interval_ms;
                    if idle_at <= now_ms {
                        start_save(ctx, *key, entry, now_ms, true);
                    } else if save_at <= now_ms {
                        // Saved even when clean: the save refreshes
                        // save_timepoint, so a live owner's lock never expires.
                        start_save(ctx, *key, entry, now_ms, false);
                    }
                } else if entry.is_idle_cache()
                    && entry.last_access_ms + config.cache_free_timeout_ms <= now_ms
                {
                    freed.push(*key);
                }
            }
            for key in freed {
                manager.entries.remove(&key);
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

    /// True once shutdown has nothing left to do: no writable object, no IO
    /// in flight, no handoff (or the deadline passed).
    pub fn is_shutdown_complete(&self) -> bool {
        let Some(shutdown) = self.ctx.shutdown.as_ref() else {
            return false;
        };
        shutdown.expired
            || self.managers.values().all(|manager| {
                manager.entries.values().all(|entry| {
                    !entry.is_writable() && entry.io.is_none() && entry.transferring.is_none()
                })
            })
    }

    /// Saves and releases the writable, idle objects among `keys`.
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
            let Some(object) = entry.object.as_ref() else {
                continue;
            };
            if entry.io.is_some() || entry.transferring.is_some() {
                continue;
            }
            let cas_version = entry
                .cas_version
                .expect("a writable object always knows its record's CAS version");
            let pending = PendingWrite {
                owner_node: NodeId::NONE,
                owner_incarnation: 0,
                route_version: entry.route_version.next(),
                save_timepoint_ms: now_ms,
            };
            let state = object.state.encode();
            let condition = WriteCondition::CasEquals(cas_version);
            writes.push(entry.begin_write(Io::Release, *key, condition, pending, state));
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

    /// The outcomes of a shutdown batch. An applied release leaves a route
    /// cache. A conflict means another node owns the object now: the copy
    /// is dropped and counted. A release that failed or has no known
    /// outcome keeps its copy (nothing runs on it: it may have given
    /// ownership up) and goes again after a backoff, until the shutdown
    /// deadline; a later conflict with the record it would have left shows
    /// that it applied.
    pub(crate) fn batch_reply(&mut self, now_ms: u64, keys: Vec<ObjectKey>, reply: StoreReply) {
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
            if entry.io != Some(Io::Release) {
                continue;
            }
            // A release whose earlier attempt's answer was lost, and which
            // did apply: nothing ran on the copy since, so it is done.
            let outcome = match outcome {
                Some(WriteOutcome::Conflict(Some(record)))
                    if entry.retries_unknown_write() && entry.left_by_unknown_write(&record) =>
                {
                    Some(WriteOutcome::Applied(record.cas_version))
                }
                outcome => outcome,
            };
            // The release wrote the state with every held on_write output
            // in it (their flush had not started a save yet).
            match outcome {
                Some(WriteOutcome::Applied(cas_version)) => {
                    let held = take_held(entry);
                    entry.downgrade();
                    settle_held(ctx, held, true);
                    let pending = entry
                        .pending_write
                        .take()
                        .expect("a release has a pending write");
                    entry.apply_write(pending, cas_version, now_ms);
                    ctx.counters.saves_total += 1;
                }
                Some(WriteOutcome::Conflict(Some(record)))
                    if entry.left_by_unknown_write(&record) =>
                {
                    // An earlier save whose answer was lost did apply: the
                    // copy is still this node's, one version on; the
                    // release goes again on it.
                    ctx.counters.cas_conflicts_total += 1;
                    entry.adopt_record(&record, now_ms);
                    entry.unknown_write = None;
                    entry.pending_write = None;
                    entry.io = None;
                    again.push(key);
                    continue;
                }
                Some(outcome @ WriteOutcome::Conflict(_)) => {
                    let held = take_held(entry);
                    let owner = match &outcome {
                        WriteOutcome::Conflict(Some(record)) => Some(record.owner_node),
                        _ => None,
                    };
                    drop_copy(ctx, key, entry, owner, "another node owns it now");
                    settle_held(ctx, held, false);
                    after_failed_write(ctx, entry, now_ms, &outcome);
                }
                failed => {
                    // It may have given ownership up: nothing runs on the
                    // copy until its retry tells.
                    if matches!(failed, Some(WriteOutcome::Indeterminate)) {
                        ctx.counters.store_indeterminate_total += 1;
                        entry.write_unknown();
                    }
                    entry.pending_write = None;
                    schedule_write_retry(ctx, key, entry, now_ms);
                    entry.io = Some(Io::ReleaseRetry);
                    continue;
                }
            }
            finish_io(ctx, kind.as_ref(), key, entry, now_ms, false);
        }
        if !again.is_empty() {
            self.release(now_ms, &again);
        }
    }

    pub(crate) fn shutdown_deadline(&mut self, _now_ms: u64) {
        let ctx = &mut self.ctx;
        let Some(shutdown) = ctx.shutdown.as_mut() else {
            return;
        };
        shutdown.expired = true;
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
                if entry.io.is_none() {
                    // Its release never applied: what it held is lost.
                    drop_copy(ctx, *key, entry, None, "the shutdown deadline passed");
                }
                fail_waiters(ctx, entry, ErrorCode::Unavailable);
                if let Some(transferring) = entry.transferring.as_mut() {
                    for waiter in std::mem::take(&mut transferring.transfer_pending) {
                        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
                    }
                }
            }
        }
    }
}
