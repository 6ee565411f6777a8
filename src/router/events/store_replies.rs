//! The store's answers, each to the step of the IO it answers; a write's
//! retry; and the end-of-batch flush that starts one save for every
//! object that held outputs.

use wire::ObjectKey;

use crate::router::core::{checked, free_cache, run, RouterCore};
use crate::router::ctx::StoreWait;
use crate::router::entry::{Io, Manager};
use crate::router::mutant::{self, Mutant};
use crate::router::steps::release::Released;
use crate::router::steps::save::Saving;
use crate::router::steps::{claim, pull, release, save, transfer, Next};
use crate::router::types::{StoreReply, StoreToken};
use crate::store::{CasVersion, WriteOutcome};

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
        let Some(io) = entry.io.take().map(|io| *io) else {
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
            // Releases are only ever written in batches, and a write
            // waiting for its retry has none in flight.
            io @ (Io::Release { .. } | Io::ReleaseRetry | Io::RemoveRetry { .. }) => {
                entry.io = Some(Box::new(io));
                Next::Done
            }
        };
        run(ctx, kind, key, entry, now_ms, next);
        checked(key, entry);
        if entry.is_idle_cache() && entry.cas_version.is_none() {
            // Nothing is known of the key but that it has no record (or
            // that its read failed), and nobody waits: the entry is not
            // worth its slot. Kept until the sweep, requests for keys
            // nobody made (a `room.leave` of any room id) filled the core
            // and locked new objects out until it freed them.
            free_cache(ctx, entries, key);
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
            let write = match entry.io.as_deref() {
                Some(&Io::Release { write }) => write,
                _ => continue,
            };
            entry.io = None;
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
        // A transfer's removal of unknown outcome goes again first: until
        // it settles nothing else may run on the copy (not even a release
        // at shutdown, nor a fence's wait: a CAS that applies is safe
        // whoever then owns the node's incarnation).
        if let Some(&Io::RemoveRetry { write }) = entry.io.as_deref() {
            entry.io = None;
            return self.run_on(now_ms, key, Next::Remove(write));
        }
        let giving_up = matches!(entry.io.as_deref(), Some(Io::ReleaseRetry));
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
}
