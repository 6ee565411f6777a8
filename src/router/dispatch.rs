//! The receive and send path: `filter_router_msg`, `mutable_cache`,
//! `mutable_object` (its start), `send_msg`, and running the handler.

use wire::ObjectKey;

use super::core::StoreWait;
use super::core::{Ctx, Manager, RouterCore, REPAIR_ATTEMPTS_MAX, SEND_ATTEMPTS_MAX};
use super::entry::{Entry, Io, PendingWrite, Waiter};
use super::handler::{HandlerOutput, HandlerReply, ObjectType};
use super::mutant::{self, Mutant};
use super::types::{
    Effect, ErrorCode, NodeMessage, Request, RequestId, RouterHead, StoreOp, Timer,
};
use crate::config::Persist;
use crate::store::{NodeId, WriteCondition};

impl RouterCore {
    /// Routes one request: runs it here, queues it, or sends it on. Every
    /// path ends in exactly one of: queued, sent, answered.
    pub(crate) fn dispatch(&mut self, now_ms: u64, waiter: Waiter) {
        let ctx = &mut self.ctx;
        let key = waiter.head.key;
        if ctx.shutdown.as_ref().is_some_and(|s| s.expired) {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
            return;
        }
        let Some(manager) = self.managers.get_mut(&key.type_id) else {
            ctx.reply(&waiter.request, Err(ErrorCode::BadRequest.into()));
            return;
        };
        let Manager { kind, entries } = manager;
        let entry = match entries.entry(key) {
            hashbrown::hash_map::Entry::Occupied(occupied) => occupied.into_mut(),
            hashbrown::hash_map::Entry::Vacant(vacant) => {
                if ctx.entries_total >= ctx.config.entries_per_core_max {
                    ctx.counters.entries_full_total += 1;
                    ctx.reply(&waiter.request, Err(ErrorCode::Overloaded.into()));
                    return;
                }
                ctx.entries_total += 1;
                vacant.insert(Entry::new(now_ms))
            }
        };
        dispatch_entry(ctx, kind.as_ref(), key, entry, now_ms, waiter);
    }
}

/// `filter_router_msg` and `send_msg` for one entry, in the seed's order.
pub(crate) fn dispatch_entry(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    mut waiter: Waiter,
) {
    entry.last_access_ms = now_ms;
    if let Some(transferring) = entry.transferring.as_mut() {
        // The seed's defect (a), fixed: a request meeting a migration is
        // queued and this path returns; it is never also sent.
        if transferring.transfer_pending.len() >= ctx.config.pending_queue_max {
            ctx.counters.pending_queue_full_total += 1;
            ctx.reply(&waiter.request, Err(ErrorCode::Overloaded.into()));
        } else {
            transferring.transfer_pending.push_back(waiter);
        }
        return;
    }
    let on_write = kind.persist() == Persist::OnWrite;
    // A periodic save lets requests run on the writable copy beside it; a
    // copy dropped meanwhile (the save conflicted) leaves nothing to run
    // on, and the pull a request would start must wait for that IO.
    let writable = entry.is_writable();
    if entry
        .io
        .is_some_and(|io| !writable || io.blocks_requests(on_write))
    {
        queue_io_waiter(ctx, entry, waiter);
        return;
    }
    if writable {
        if !ctx.may_serve(now_ms) {
            // The lease ran out (or the node is fenced): the copy is kept,
            // but no handler runs until a heartbeat extends the lease or
            // the node rejoins.
            ctx.counters.lease_lapsed_refusals_total += 1;
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
            return;
        }
        if entry.is_aside() {
            // Kept through a fence: served again once its write-back under
            // this incarnation applied.
            if entry.io.is_none() {
                super::io::start_readopt(ctx, key, entry, now_ms);
            }
            queue_io_waiter(ctx, entry, waiter);
            return;
        }
        // Only the request goes on: moving the whole waiter (152 bytes)
        // cost a `memcpy` call per request.
        run_handler(ctx, kind, key, entry, now_ms, waiter.request);
        return;
    }
    let incoming_newer = waiter.head.route_version > entry.route_version;
    if incoming_newer {
        // A newer route exists somewhere: drop the stale cache, re-read.
        entry.last_refresh_ms = None;
        if !count_repair(ctx, &mut waiter) {
            return;
        }
    }
    if !entry.is_fresh(now_ms, ctx.config.cache_update_interval_ms) {
        start_pull(ctx, key, entry, Io::PullCache);
        queue_io_waiter(ctx, entry, waiter);
        return;
    }
    route_by_owner(ctx, kind, key, entry, now_ms, waiter);
}

/// The decision on a fresh, non-writable route.
fn route_by_owner(
    ctx: &mut Ctx,
    kind: &dyn ObjectType,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    mut waiter: Waiter,
) {
    let fresh_pull = std::mem::take(&mut waiter.fresh_pull);
    let owner = entry.owner_node;
    if owner == ctx.node {
        // Routed here but the object is missing: restart recovery.
        return mutable_object(ctx, key, entry, now_ms, waiter);
    }
    if owner.is_none() {
        if !fresh_pull {
            // The seed pulls once more before choosing a default node.
            if count_repair(ctx, &mut waiter) {
                start_pull(ctx, key, entry, Io::PullCache);
                queue_io_waiter(ctx, entry, waiter);
            }
            return;
        }
        if !kind.auto_create() {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
            return;
        }
        return match ctx.default_node(key) {
            // No record (the pull found none): the node that would create
            // the object asks whether this request may (it may count what
            // it holds), and answers it if not.
            Some(node) if node == ctx.node && entry.cas_version.is_none() => {
                match kind.may_create(waiter.request.op) {
                    Ok(()) => mutable_object(ctx, key, entry, now_ms, waiter),
                    Err(answer) => ctx.reply(&waiter.request, answer),
                }
            }
            Some(node) if node == ctx.node => mutable_object(ctx, key, entry, now_ms, waiter),
            Some(node) => send_to(ctx, entry, node, waiter),
            None => ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into())),
        };
    }
    if lock_expired(ctx, entry, now_ms) {
        // A draining node places nothing new on itself: the object of a
        // dead owner goes to the node that would be its default.
        if ctx.draining {
            if let Some(node) = ctx.default_node(key).filter(|node| *node != ctx.node) {
                return send_to(ctx, entry, node, waiter);
            }
        }
        return mutable_object(ctx, key, entry, now_ms, waiter);
    }
    if waiter.unreachable == Some(owner) && fresh_pull {
        // Re-read, and the owner is still the node a send just failed to
        // reach: the second attempt would fail the same way.
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return;
    }
    if !ctx.is_node_available(owner) {
        // The seed's send_msg_raw: clear the local target and resolve once
        // more, at most two attempts in all.
        waiter.send_attempts += 1;
        if waiter.send_attempts >= SEND_ATTEMPTS_MAX {
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        } else if count_repair(ctx, &mut waiter) {
            start_pull(ctx, key, entry, Io::PullCache);
            queue_io_waiter(ctx, entry, waiter);
        }
        return;
    }
    send_to(ctx, entry, owner, waiter)
}

/// Whether the ownership lock of the route `entry` holds has ended, so the
/// record may be claimed (by CAS). Decided on this node's own facts only,
/// never by comparing another node's clock with this one:
/// - the owner's incarnation ended (declared down, left, or outranked by a
///   later start): at once;
/// - the owner is unknown to membership (its row is gone) and the record's
///   CAS version has not changed for `object_free_timeout_ms` of this
///   node's time, while a live owner re-saves every
///   `object_save_interval_ms`. An owner membership knows alive is never
///   claimed from: it may still be writing.
pub(crate) fn lock_expired(ctx: &Ctx, entry: &Entry, now_ms: u64) -> bool {
    let owner = entry.owner_node;
    if owner.is_none() || owner == ctx.node {
        return false;
    }
    if mutant::active(Mutant::ClaimFromLiveOwner) {
        return true;
    }
    if ctx.is_incarnation_dead(owner, entry.owner_incarnation) {
        return true;
    }
    !ctx.knows(owner)
        && entry.cas_version.is_some()
        && entry
            .cas_seen_at_ms
            .saturating_add(ctx.config.object_free_timeout_ms)
            <= now_ms
}

/// `mutable_object`: read the record to claim it (the claim itself follows
/// the read, in `io.rs`).
fn mutable_object(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    mut waiter: Waiter,
) {
    if ctx.is_shutting_down() || !ctx.may_serve(now_ms) {
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return;
    }
    if !count_repair(ctx, &mut waiter) {
        return;
    }
    start_pull(ctx, key, entry, Io::PullObject);
    queue_io_waiter(ctx, entry, waiter);
}

/// Counts one repair attempt; past the bound the request is answered
/// UNAVAILABLE and `false` says it was consumed.
fn count_repair(ctx: &mut Ctx, waiter: &mut Waiter) -> bool {
    waiter.repairs += 1;
    ctx.counters.repair_attempts_total += 1;
    if waiter.repairs > REPAIR_ATTEMPTS_MAX {
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return false;
    }
    true
}

pub(crate) fn queue_io_waiter(ctx: &mut Ctx, entry: &mut Entry, waiter: Waiter) {
    if entry.io_waiters.len() >= ctx.config.pending_queue_max {
        ctx.counters.pending_queue_full_total += 1;
        ctx.reply(&waiter.request, Err(ErrorCode::Overloaded.into()));
        return;
    }
    entry.io_waiters.push_back(waiter);
}

pub(crate) fn start_pull(ctx: &mut Ctx, key: ObjectKey, entry: &mut Entry, io: Io) {
    assert!(entry.io.is_none(), "one IO per object at a time");
    entry.io = Some(io);
    entry.pull_retries = 0;
    ctx.counters.pulls_total += 1;
    ctx.store(StoreWait::Entry(key), StoreOp::Load(key));
}

/// `send_msg` to `node`, with `router_update_sync` to the request's source
/// when this node knows a newer route than the request carried.
fn send_to(ctx: &mut Ctx, entry: &Entry, node: NodeId, waiter: Waiter) {
    let next_ttl = waiter.head.forward_hops.saturating_add(1);
    if next_ttl > ctx.config.forward_hops_max {
        ctx.counters.forward_hops_exceeded_total += 1;
        ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        return;
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
}

/// Runs the request on the writable object. An `on_write` mutation is held
/// until its save's CAS applies; that save starts in `on_flush`.
///
/// Inlined into `dispatch_entry`, so the request is read where the waiter
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
        release(ctx, &request, &mut out);
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

/// Turns the timers a handler of `key` asked for at `now_ms` into timers
/// the core arms when the output is released (a held on_write output arms
/// them only once its save applied, like everything else it produced).
pub(crate) fn arm_object_timers(key: ObjectKey, now_ms: u64, out: &mut HandlerOutput) {
    for timer in out.timers.drain(..) {
        let at_ms = now_ms.saturating_add(timer.after_ms);
        let timer = Timer::Object {
            key,
            activation: timer.activation,
            tag: timer.tag,
        };
        out.armed.push((at_ms, timer));
    }
}

/// Emits a handler's output, leaving `out` empty. By reference: the output
/// is 200 bytes, and moving it costs a `memcpy` call per request.
pub(crate) fn release(ctx: &mut Ctx, request: &Request, out: &mut HandlerOutput) {
    if let HandlerReply::Answer(outcome) = std::mem::take(&mut out.reply) {
        ctx.reply(request, outcome);
    }
    if out.is_answer_only() {
        // Most runs: no list to walk.
        return;
    }
    for (request, outcome) in out.late_answers.drain(..) {
        ctx.counters.replies_total += 1;
        ctx.effects.push(Effect::Reply { request, outcome });
    }
    for call in out.calls.drain(..) {
        let request = Request {
            // The driver numbers it (see `Effect::Call`).
            id: RequestId {
                origin_node: ctx.node,
                seq: 0,
            },
            op: call.op,
            body: call.body,
            client: None,
            needs_reply: true,
        };
        ctx.effects.push(Effect::Call {
            head: RouterHead::local(call.to, ctx.node),
            request: Box::new(request),
            caller: call.caller,
            tag: call.tag,
        });
    }
    for (at_ms, timer) in out.armed.drain(..) {
        ctx.arm(at_ms, timer);
    }
    for (client, route_id, body) in out.pushes.drain(..) {
        ctx.effects.push(Effect::Push {
            client,
            route_id,
            body,
        });
    }
    for (key, request) in out.sends.drain(..) {
        let head = RouterHead::local(key, ctx.node);
        ctx.effects.push(Effect::Submit {
            head,
            request: Box::new(request),
        });
    }
    for client in out.kicks.drain(..) {
        ctx.effects.push(Effect::Kick { client });
    }
}

/// Drops a held on_write output whose save did not apply: its request is
/// answered UNAVAILABLE (it may or may not be durable: Indeterminate) and
/// nothing else it produced is released.
pub(crate) fn abandon(ctx: &mut Ctx, request: Request) {
    ctx.reply(&request, Err(ErrorCode::Unavailable.into()));
}

/// `save_object`: persist the state through CAS on the known record. With
/// `degrade`, ownership is released (owner 0, next route version).
pub(crate) fn start_save(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    now_ms: u64,
    degrade: bool,
) {
    assert!(entry.io.is_none(), "one IO per object at a time");
    let Some(object) = entry.object.as_mut() else {
        return;
    };
    let cas_version = entry
        .cas_version
        .expect("a writable object always knows its record's CAS version");
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
    let condition = WriteCondition::CasEquals(cas_version);
    let write = entry.begin_write(Io::Save { degrade }, key, condition, pending, state);
    ctx.store(StoreWait::Entry(key), StoreOp::Write(write));
    if mutant::active(Mutant::AnswerOnSubmit) {
        let held = super::io::take_held(entry);
        super::io::settle_held(ctx, held, true);
    }
}
