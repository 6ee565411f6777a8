//! The save step: `save_object` (periodic, on_write, or the degradation
//! that gives ownership up), the write-back of a copy kept aside by a
//! fence (`readopt`), and their answers.

use wire::ObjectKey;

use super::Next;
use crate::ids::NodeId;
use crate::router::ctx::{Ctx, StoreWait};
use crate::router::entry::{Entry, Io, PendingWrite};
use crate::router::mutant::{self, Mutant};
use crate::router::output::{
    after_failed_write, drop_copy, refuse_during_retry, refuse_held_after_retry,
    schedule_write_retry, settle_held, take_held,
};
use crate::router::types::{StoreOp, StoreReply};
use crate::store::WriteOutcome;

/// Which write of a copy an answer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Saving {
    /// `save_object`; `degrade` gives ownership up.
    Save { degrade: bool },
    /// The write-back of a copy kept aside by a fence.
    Readopt,
}

/// `save_object`: persist the state through CAS on the known record. With
/// `degrade`, ownership is released (owner 0, next route version).
pub(crate) fn start(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, now_ms: u64, degrade: bool) {
    assert!(entry.io.is_none(), "one IO per object at a time");
    let condition = entry.known_condition();
    let Some(object) = entry.object.as_mut() else {
        return;
    };
    let (owner_node, owner_incarnation, route_version) = if degrade {
        (NodeId::NONE, 0, entry.route_version.next())
    } else {
        (ctx.node, ctx.incarnation, entry.route_version)
    };
    object.changes_in_write = object.changes_unsaved;
    let state = object.state.encode();
    let pending = PendingWrite {
        owner_node,
        owner_incarnation,
        route_version,
        save_timepoint_ms: now_ms,
    };
    let write = entry.begin_write(key, condition, pending, state, |write| Io::Save {
        degrade,
        write,
    });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
}

/// `rejoin`'s write-back of a copy kept aside through a fence: the state
/// with its unsaved changes, under this node's new incarnation, by CAS on
/// the record this copy last knew. Applied: nobody took the object over
/// and nothing is lost. A conflict: another node owns it, and the copy is
/// dropped and counted.
pub(crate) fn start_readopt(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, now_ms: u64) {
    assert!(entry.io.is_none(), "one IO per object at a time");
    assert!(!ctx.fenced, "a fenced node writes no copy back");
    let condition = entry.known_condition();
    let Some(object) = entry.object.as_mut() else {
        return;
    };
    assert!(object.aside, "only a copy kept aside is written back");
    object.changes_in_write = object.changes_unsaved;
    let state = object.state.encode();
    let pending = PendingWrite {
        owner_node: ctx.node,
        owner_incarnation: ctx.incarnation,
        route_version: entry.route_version.next(),
        save_timepoint_ms: now_ms,
    };
    let write = entry.begin_write(key, condition, pending, state, |write| Io::Readopt {
        write,
    });
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
}

/// What the sweep does with a copy at `now_ms`: degrade it once idle for
/// `object_free_timeout_ms`, save it every `object_save_interval_ms`.
pub(crate) fn due(ctx: &Ctx, entry: &Entry, now_ms: u64) -> Next {
    let Some(object) = entry.object.as_ref() else {
        return Next::Done;
    };
    let busy = entry.io.is_some() || entry.transferring.is_some();
    // A copy kept aside by a fence is written back by its readopt, not by
    // a save of the ended incarnation.
    if busy || ctx.is_shutting_down() || object.aside {
        return Next::Done;
    }
    let idle_at = entry.last_access_ms + ctx.config.object_free_timeout_ms;
    let save_at = object.last_save_ms + ctx.config.object_save_interval_ms;
    if idle_at <= now_ms {
        Next::Save { degrade: true }
    } else if save_at <= now_ms {
        // Saved even when clean: the save refreshes save_timepoint, so a
        // live owner's lock never expires.
        Next::Save { degrade: false }
    } else {
        Next::Done
    }
}

/// The answer to a write of the copy (`saving`, persisting `write`). The
/// entry's IO was taken off for it.
pub(crate) fn reply(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    (saving, write): (Saving, PendingWrite),
    reply: StoreReply,
) -> Next {
    let reply = match reply {
        // A degradation whose earlier attempt's answer was lost, and which
        // did apply: nothing ran on the copy since (requests waited), so
        // this one would have written the same; it is done.
        StoreReply::Written(WriteOutcome::Conflict(Some(record)))
            if saving == (Saving::Save { degrade: true }) && entry.retried_write_left(&record) =>
        {
            StoreReply::Written(WriteOutcome::Applied(record.cas_version))
        }
        reply => reply,
    };
    match reply {
        StoreReply::Written(outcome @ WriteOutcome::Applied(_)) => {
            applied(ctx, entry, now_ms, (saving, write), &outcome);
        }
        StoreReply::Written(WriteOutcome::Conflict(_))
            if mutant::active(Mutant::ConflictKeepsWritable) =>
        {
            let held = take_held(entry);
            settle_held(ctx, held, false);
        }
        StoreReply::Written(WriteOutcome::Conflict(Some(record)))
            if entry.own_write_left(&record).is_some() =>
        {
            // An earlier write of this copy whose answer was lost did
            // apply (any of them since the last known outcome: the record
            // holds a state the copy had, and the copy has every change
            // since): the copy is still the owner's, one CAS version on.
            // The same write goes again at once, its held answers with it
            // (the copy may have changed since, and a readopt must name
            // the incarnation of now).
            ctx.counters.cas_conflicts_total += 1;
            entry.adopt_own_record(&record, now_ms);
            return match saving {
                // Fenced again since the readopt was sent: its incarnation
                // ended too, and a fenced node writes nothing back. The IO
                // ends (its waiters are answered as a fenced node answers)
                // and the copy stays aside for the next rejoin's write-back.
                Saving::Readopt if ctx.fenced => Next::FinishIo { fresh_pull: false },
                Saving::Readopt => Next::Readopt(None),
                Saving::Save { degrade } => Next::Save { degrade },
            };
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
        reply => return not_applied(ctx, key, entry, now_ms, saving, reply),
    }
    Next::FinishIo { fresh_pull: false }
}

/// The write applied: the copy is saved (its changes made durable up to
/// the write), the record it wrote is the known one, and its held answers
/// go out.
fn applied(
    ctx: &mut Ctx,
    entry: &mut Entry,
    now_ms: u64,
    (saving, write): (Saving, PendingWrite),
    outcome: &WriteOutcome,
) {
    let held = take_held(entry);
    // A readopt names the incarnation it was sent under: if the node fenced
    // or rejoined again meanwhile, that one ended too, and the copy stays
    // aside for the write-back under the current one.
    let current = !ctx.fenced && write.owner_incarnation == ctx.incarnation;
    entry.apply_written(write, outcome, now_ms);
    if let Some(object) = entry.object.as_mut() {
        object.last_save_ms = now_ms;
        object.changes_unsaved -= object.changes_in_write;
        object.changes_in_write = 0;
    }
    match saving {
        Saving::Readopt => {
            if let Some(object) = entry.object.as_mut().filter(|_| current) {
                object.aside = false;
                ctx.counters.readopts_total += 1;
            }
        }
        Saving::Save { degrade: true } => {
            entry.downgrade();
            entry.last_refresh_ms = Some(now_ms);
            ctx.counters.degrades_total += 1;
            ctx.counters.saves_total += 1;
        }
        Saving::Save { degrade: false } => ctx.counters.saves_total += 1,
    }
    settle_held(ctx, held, true);
}

/// The write was not applied, or is not known to have been: the copy
/// stays (ownership cannot have moved while this node's lease held) and is
/// written again after a backoff; its held answers wait for the write that
/// covers them. A later conflict with the record this write would leave
/// shows it did apply.
fn not_applied(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    saving: Saving,
    reply: StoreReply,
) -> Next {
    let unknown = matches!(reply, StoreReply::Written(WriteOutcome::Indeterminate));
    if unknown {
        ctx.counters.store_indeterminate_total += 1;
        entry.write_unknown();
    }
    if let Some(object) = entry.object.as_mut() {
        object.changes_in_write = 0;
    }
    refuse_held_after_retry(ctx, entry);
    schedule_write_retry(ctx, key, entry, now_ms);
    if saving == (Saving::Save { degrade: true }) && (unknown || entry.may_have_given_up(ctx.node))
    {
        // It, or an earlier attempt of unknown outcome, may have given
        // ownership up: nothing runs until a retry tells, and nobody
        // waits for it. A degrade the store refused (it did not apply:
        // the store was down, or the state is over
        // `store.state_max_bytes` and can never be written) with no such
        // attempt before it gave nothing up: the copy goes on serving,
        // and a later sweep degrades it again. Blocking it until a retry
        // applied made an object whose state outgrew the bound
        // unavailable for as long as the node ran.
        entry.io = Some(Box::new(Io::ReleaseRetry));
        refuse_during_retry(ctx, entry);
        return Next::Done;
    }
    Next::FinishIo { fresh_pull: false }
}
