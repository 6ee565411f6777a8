//! The release step: shutdown's writes that give ownership up (owner 0,
//! the next route version), their answers, and what its deadline drops.

use wire::ObjectKey;

use crate::ids::NodeId;
use crate::router::ctx::Ctx;
use crate::router::entry::{Entry, Io, PendingWrite};
use crate::router::output::{
    after_failed_write, drop_copy, fail_waiters, refuse_during_retry, schedule_write_retry,
    settle_held, take_held,
};
use crate::router::types::ErrorCode;
use crate::store::{RecordWrite, WriteOutcome};

use super::Next;

/// The release write of `entry`'s copy, if it has one and nothing else
/// runs on it (a copy busy with IO or a handoff follows when that ends).
pub(crate) fn begin(key: ObjectKey, entry: &mut Entry, now_ms: u64) -> Option<RecordWrite> {
    let object = entry.object.as_ref()?;
    if entry.io.is_some() || entry.transferring.is_some() {
        return None;
    }
    let pending = PendingWrite {
        owner_node: NodeId::NONE,
        owner_incarnation: 0,
        route_version: entry.route_version.next(),
        save_timepoint_ms: now_ms,
    };
    let state = object.state.encode();
    let condition = entry.known_condition();
    Some(
        entry.begin_write(key, condition, pending, state, |write| Io::Release {
            write,
        }),
    )
}

/// What a release's answer leads to.
pub(crate) enum Released {
    /// Settled: the dispatcher runs this next.
    Then(Next),
    /// An earlier write of the copy was found applied: the release goes
    /// again, in the next batch, on the record it left.
    Again,
}

/// One outcome of a shutdown batch (`None`: the batch failed as a whole)
/// for the release of `write`. An applied release leaves a route cache. A
/// conflict means another node owns the object now: the copy is dropped
/// and counted. A release that failed or has no known outcome keeps its
/// copy (nothing runs on it: it may have given ownership up) and goes
/// again after a backoff, until the shutdown deadline; a later conflict
/// with the record it would have left shows that it applied.
pub(crate) fn reply(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    write: PendingWrite,
    outcome: Option<WriteOutcome>,
) -> Released {
    // A release whose earlier attempt's answer was lost, and which did
    // apply: nothing ran on the copy since, so it is done.
    let outcome = match outcome {
        Some(WriteOutcome::Conflict(Some(record))) if entry.retried_write_left(&record) => {
            Some(WriteOutcome::Applied(record.cas_version))
        }
        outcome => outcome,
    };
    // The release wrote the state with every held on_write output in it
    // (their flush had not started a save yet).
    match outcome {
        Some(applied @ WriteOutcome::Applied(_)) => {
            let held = take_held(entry);
            entry.downgrade();
            settle_held(ctx, held, true);
            entry.apply_written(write, &applied, now_ms);
            ctx.counters.saves_total += 1;
        }
        Some(WriteOutcome::Conflict(Some(record))) if entry.own_write_left(&record).is_some() => {
            // An earlier save whose answer was lost did apply: the copy is
            // still this node's, one version on; the release goes again
            // on it.
            ctx.counters.cas_conflicts_total += 1;
            entry.adopt_own_record(&record, now_ms);
            return Released::Again;
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
            // It may have given ownership up: nothing runs on the copy
            // until its retry tells.
            if matches!(failed, Some(WriteOutcome::Indeterminate)) {
                ctx.counters.store_indeterminate_total += 1;
                entry.write_unknown();
            }
            schedule_write_retry(ctx, key, entry, now_ms);
            entry.io = Some(Box::new(Io::ReleaseRetry));
            refuse_during_retry(ctx, entry);
            return Released::Then(Next::Done);
        }
    }
    Released::Then(Next::FinishIo { fresh_pull: false })
}

/// The shutdown deadline passed: a copy whose release never applied is
/// dropped (what it held is lost), and every request still waiting on the
/// entry is answered UNAVAILABLE.
pub(crate) fn deadline(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry) {
    if entry.io.is_none() {
        drop_copy(ctx, key, entry, None, "the shutdown deadline passed");
    }
    fail_waiters(ctx, entry, ErrorCode::Unavailable);
    if let Some(transferring) = entry.transferring.as_mut() {
        for waiter in std::mem::take(&mut transferring.transfer_pending) {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        }
    }
}
