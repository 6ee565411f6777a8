//! The route step: a request meets its key's entry. `filter_router_msg`
//! (queued behind a handoff or an IO), `mutable_cache` (a route read when
//! stale), `mutable_object`'s start (a claim's read), `send_msg` (with
//! `router_update_sync`), or the handler run on the writable copy.

use std::collections::VecDeque;

use wire::ObjectKey;

use super::Next;
use crate::config::Persist;
use crate::ids::NodeId;
use crate::router::ctx::{lock_expired, Ctx, SEND_ATTEMPTS_MAX};
use crate::router::entry::{Entry, Io, Waiter};
use crate::router::handler::{HandlerOutput, ObjectType};
use crate::router::output::{arm_object_timers, count_repair, emit};
use crate::router::types::{ErrorCode, NodeMessage, Request, RouterHead, Timer};

/// `filter_router_msg` and `send_msg` for one entry, in that order.
/// Every path ends in exactly one of: queued, sent, answered, or a read
/// (or write-back) started with the request queued behind it.
pub(crate) fn route(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    mut waiter: Waiter,
) -> Next {
    entry.last_access_ms = now_ms;
    if waiter.request.needs_reply && entry.io.as_deref().is_some_and(Io::is_retry_backoff) {
        hasten_retry(ctx, key, entry, now_ms);
    }
    if let Some(transferring) = entry.transferring.as_mut() {
        // A request meeting a migration is
        // queued and this path returns; it is never also sent.
        if transferring.transfer_pending.len() >= ctx.config.pending_queue_max {
            ctx.counters.pending_queue_full_total += 1;
            ctx.reply(&waiter.request, Err(ErrorCode::Overloaded.into()));
        } else {
            transferring.transfer_pending.push_back(waiter);
        }
        return Next::Done;
    }
    let on_write = kind.persist() == Persist::OnWrite;
    // A periodic save lets requests run on the writable copy beside it; a
    // copy dropped meanwhile (the save conflicted) leaves nothing to run
    // on, and the pull a request would start must wait for that IO.
    let writable = entry.is_writable();
    if entry
        .io
        .as_ref()
        .is_some_and(|io| !writable || io.blocks_requests(on_write))
    {
        return Next::Queue(waiter);
    }
    if writable {
        if !ctx.may_serve(now_ms) {
            // The lease ran out (or the node is fenced): the copy is kept,
            // but no handler runs until a heartbeat extends the lease or
            // the node rejoins.
            if waiter.request.needs_reply {
                ctx.counters.lease_lapsed_refusals_total += 1;
            }
            ctx.refuse_while_paused(waiter);
            return Next::Done;
        }
        if entry.is_aside() {
            // Kept through a fence: served again once its write-back under
            // this incarnation applied (no IO runs: a blocking one queued
            // the request above).
            return Next::Readopt(Some(waiter));
        }
        // Only the request goes on: moving the whole waiter (152 bytes)
        // cost a `memcpy` call per request.
        run_handler(ctx, kind, key, entry, now_ms, waiter.request);
        return Next::Done;
    }
    let incoming_newer = waiter.head.route_version > entry.route_version;
    if incoming_newer {
        // A newer route exists somewhere: drop the stale cache, re-read.
        entry.last_refresh_ms = None;
        if !count_repair(ctx, &mut waiter) {
            return Next::Done;
        }
    }
    if !entry.is_fresh(now_ms, ctx.config.cache_update_interval_ms) {
        return Next::Pull {
            object: false,
            waiter,
        };
    }
    route_by_owner(ctx, kind, key, entry, now_ms, waiter)
}

/// A request meets its object in the backoff before a write that gives
/// ownership up goes again (who owns it is unknown until then): the first
/// to wait brings the retry to within `router.object_retry_interval_ms`,
/// so that it waits for one store round trip, not for a backoff of up to
/// `WRITE_RETRY_MAX_MS` armed while the store failed. If that attempt fails
/// too, everyone waiting is answered UNAVAILABLE
/// (`output::refuse_during_retry`). The store still sees at most one write
/// of the object per interval.
fn hasten_retry(ctx: &mut Ctx, key: ObjectKey, entry: &Entry, now_ms: u64) {
    // One-way notices may wait there too (nobody is refused for them):
    // only a waiter owed an answer has hastened the retry already.
    let owed = |queue: &VecDeque<Waiter>| queue.iter().any(|waiter| waiter.request.needs_reply);
    let queued = owed(&entry.io_waiters)
        || entry
            .transferring
            .as_ref()
            .is_some_and(|transferring| owed(&transferring.transfer_pending));
    if !queued {
        let at_ms = now_ms + ctx.config.object_retry_interval_ms.max(1);
        ctx.arm(at_ms, Timer::WriteRetry { key });
    }
}

/// The decision on a fresh, non-writable route.
fn route_by_owner(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    mut waiter: Waiter,
) -> Next {
    let fresh_pull = std::mem::take(&mut waiter.fresh_pull);
    let owner = entry.owner_node;
    if owner == ctx.node {
        // Routed here but the object is missing: restart recovery.
        return mutable_object(ctx, now_ms, waiter);
    }
    if owner.is_none() {
        return route_unowned(ctx, kind, key, entry, now_ms, waiter, fresh_pull);
    }
    if lock_expired(ctx, entry, now_ms) {
        // A draining node places nothing new on itself: the object of a
        // dead owner goes to the node that would be its default.
        if ctx.draining {
            if let Some(node) = ctx.default_node(key).filter(|node| *node != ctx.node) {
                return send_to(ctx, entry, node, waiter);
            }
        }
        return mutable_object(ctx, now_ms, waiter);
    }
    if !ctx.is_node_available(owner) {
        // Clear the local target and resolve once more, at most two attempts
        // in all (`send_msg_raw` in docs/origins.md).
        waiter.send_attempts += 1;
        if waiter.send_attempts >= SEND_ATTEMPTS_MAX {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        } else if count_repair(ctx, &mut waiter) {
            return Next::Pull {
                object: false,
                waiter,
            };
        }
        return Next::Done;
    }
    send_to(ctx, entry, owner, waiter)
}

/// The decision on a fresh route that names no owner: one more pull, then
/// the node that would be the object's default creates it (if its type
/// does) or is sent the request.
///
/// Inlined into `route_by_owner`, as it was written there: the waiter is
/// not copied again for the call.
#[inline(always)]
fn route_unowned(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &Entry,
    now_ms: u64,
    mut waiter: Waiter,
    fresh_pull: bool,
) -> Next {
    if !fresh_pull {
        // One more pull before choosing a default node.
        if count_repair(ctx, &mut waiter) {
            return Next::Pull {
                object: false,
                waiter,
            };
        }
        return Next::Done;
    }
    if !kind.auto_create() {
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return Next::Done;
    }
    match ctx.default_node(key) {
        // No record (the pull found none): the node that would create the
        // object asks whether this request may (it may count what it
        // holds), and answers it if not.
        Some(node) if node == ctx.node && entry.cas_version.is_none() => {
            match kind.may_create(waiter.request.op) {
                Ok(()) => mutable_object(ctx, now_ms, waiter),
                Err(answer) => {
                    ctx.reply(&waiter.request, answer);
                    Next::Done
                }
            }
        }
        Some(node) if node == ctx.node => mutable_object(ctx, now_ms, waiter),
        Some(node) => send_to(ctx, entry, node, waiter),
        None => {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
            Next::Done
        }
    }
}

/// `mutable_object`: read the record to claim it (the claim itself follows
/// the read: `pull::reply`, then `claim::start`).
fn mutable_object(ctx: &mut Ctx, now_ms: u64, mut waiter: Waiter) -> Next {
    if ctx.is_shutting_down() {
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return Next::Done;
    }
    if !ctx.may_serve(now_ms) {
        ctx.refuse_while_paused(waiter);
        return Next::Done;
    }
    if !count_repair(ctx, &mut waiter) {
        return Next::Done;
    }
    Next::Pull {
        object: true,
        waiter,
    }
}

/// `send_msg` to `node`, with `router_update_sync` to the request's source
/// when this node knows a newer route than the request carried.
fn send_to(ctx: &mut Ctx, entry: &Entry, node: NodeId, waiter: Waiter) -> Next {
    if waiter.unreachable == Some(node) {
        // A send to `node` just failed and the route read since chose it
        // again (its owner, or the default node of an object nobody
        // owns): it would fail the same way, and each failure re-reads
        // the record, so the request is answered instead of looping.
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return Next::Done;
    }
    let next_ttl = waiter.head.forward_hops.saturating_add(1);
    if next_ttl > ctx.config.forward_hops_max {
        ctx.counters.forward_hops_exceeded_total += 1;
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return Next::Done;
    }
    let source_node = waiter.head.source_node;
    let routed_here = source_node != ctx.node || waiter.head.forward_hops > 0;
    if routed_here {
        ctx.counters.forwards_total += 1;
    } else {
        ctx.counters.sends_total += 1;
    }
    let head = RouterHead {
        key: waiter.head.key,
        route_version: entry.route_version,
        source_node,
        forward_hops: next_ttl,
    };
    let received_version = waiter.head.route_version;
    ctx.send(
        node,
        NodeMessage::Routed {
            head,
            request: waiter.request,
        },
    );
    let syncs = entry.route_version > received_version
        && entry.owner_node == node
        && source_node != ctx.node
        && source_node != node
        && !source_node.is_none();
    if syncs {
        ctx.counters.update_syncs_sent_total += 1;
        let message = NodeMessage::RouterUpdateSync {
            key: head.key,
            owner_node: entry.owner_node,
            owner_incarnation: entry.owner_incarnation,
            route_version: entry.route_version,
        };
        ctx.send(source_node, message);
    }
    Next::Done
}

/// Runs the request on the writable object. An `on_write` mutation is held
/// until its save's CAS applies; that save starts in `on_flush`.
///
/// Inlined into `route`, so the request is read where the waiter
/// holds it: passed by value, it was copied to the stack, and read back
/// whole before its pieces had left the store buffer, a stall per request.
#[inline(always)]
fn run_handler(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    request: Request,
) {
    let Some(object) = entry.object.as_mut() else {
        return;
    };
    let mut out = HandlerOutput::default();
    object.state.handle(key, &request, &mut out);
    ctx.counters.handled_total += 1;
    arm_object_timers(key, now_ms, &mut out);
    if out.mutated {
        object.changes_unsaved += 1;
    }
    if kind.persist() != Persist::OnWrite || (!out.mutated && object.held.is_empty()) {
        emit(ctx, &request, &mut out);
        return;
    }
    // An on_write mutation waits for its save; so does a read that came
    // after one (it saw state that is not durable yet), in order. The save
    // starts at the end of the batch of events (`on_flush`), so requests
    // pipelined in one batch share it: one store commit per object and
    // batch instead of one per request. A save in flight queues requests
    // (`blocks_requests`), so here no IO is running.
    debug_assert!(entry.io.is_none(), "on_write requests wait for IO");
    object.held.push((request, out));
    ctx.flush_later(key);
}
