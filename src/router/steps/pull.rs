//! The pull step: `pull_cache` (a route read) and `pull_object` (the read
//! before a claim), their EAGAIN retries, and the claim rule that decides
//! whether a `pull_object` read goes on to a claim.

use rand::RngExt;
use wire::ObjectKey;

use super::Next;
use crate::router::ctx::{lock_expired, Ctx, StoreWait};
use crate::router::entry::{Entry, Io};
use crate::router::handler::ObjectType;
use crate::router::output::fail_waiters;
use crate::router::types::{ErrorCode, StoreFailure, StoreOp, StoreReply, Timer};
use crate::store::RouteRecord;

/// Starts the read of `key`'s record: `pull_object` (`object`, a claim may
/// follow) or `pull_cache`.
pub(crate) fn start(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, object: bool) {
    assert!(entry.io.is_none(), "one IO per object at a time");
    entry.io = Some(Box::new(if object {
        Io::PullObject
    } else {
        Io::PullCache
    }));
    entry.pull_retries = 0;
    ctx.counters.pulls_total += 1;
    ctx.store(StoreWait::Entry(key), StoreOp::Load(key));
}

/// Re-issues the read of a pull that got EAGAIN (`Timer::PullRetry`),
/// unless the pull ended meanwhile.
pub(crate) fn retry(ctx: &mut Ctx, key: ObjectKey, entry: &Entry) -> Next {
    if entry.io.as_deref().is_some_and(Io::is_pull) {
        ctx.counters.pulls_total += 1;
        ctx.store(StoreWait::Entry(key), StoreOp::Load(key));
    }
    Next::Done
}

/// The answer to a read. `object`: the read of `pull_object`, which claims
/// the record when the claim rule allows. The entry's IO was taken off for
/// this answer; a read that goes again puts it back.
pub(crate) fn reply(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    object: bool,
    reply: StoreReply,
) -> Next {
    let record = match reply {
        StoreReply::Loaded(record) => record,
        StoreReply::Failed(StoreFailure::Busy) => {
            entry.pull_retries += 1;
            if entry.pull_retries < ctx.config.pull_attempts_max {
                let bound = if object {
                    ctx.config.object_retry_interval_ms
                } else {
                    ctx.config.cache_retry_interval_ms
                };
                let wait_ms = ctx.rng.random_range(1..=bound.max(1));
                ctx.arm(now_ms + wait_ms, Timer::PullRetry { key });
                entry.io = Some(Box::new(if object {
                    Io::PullObject
                } else {
                    Io::PullCache
                }));
                return Next::Done;
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
    if object && claimable(ctx, kind, entry, record.as_ref(), now_ms) {
        return Next::Claim(record);
    }
    Next::FinishIo { fresh_pull: true }
}

fn give_up(ctx: &mut Ctx, entry: &mut Entry) -> Next {
    entry.io = None;
    entry.pull_retries = 0;
    fail_waiters(ctx, entry, ErrorCode::Unavailable);
    Next::Done
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
        // others are answered by `route::route`.
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
