//! What steps share that is not a step: answering and emitting a
//! handler's output, the held on_write outputs, the request queue behind an
//! entry's IO, a failed write's effect on the route, the write retry's
//! backoff, and dropping a copy. Nothing here starts IO or chains steps.

use std::collections::VecDeque;

use rand::RngExt;
use wire::ObjectKey;

use super::ctx::{Ctx, REPAIR_ATTEMPTS_MAX};
use super::entry::{Entry, Waiter};
use super::handler::{HandlerOutput, HandlerReply};
use super::types::{Effect, ErrorCode, Request, RequestId, RouterHead, Timer};
use crate::ids::NodeId;
use crate::store::WriteOutcome;

/// Counts one repair attempt; past the bound the request is answered
/// UNAVAILABLE and `false` says it was consumed.
pub(crate) fn count_repair(ctx: &mut Ctx, waiter: &mut Waiter) -> bool {
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

/// Turns the timers a handler of `key` asked for at `now_ms` into timers
/// the core arms when the output is emitted (a held on_write output arms
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

/// Emits a handler's output (its answer, late answers, calls, sends,
/// pushes, kicks, session checks and timers), leaving `out` empty. By
/// reference: the output is over 200 bytes, and moving it costs a `memcpy`
/// call per request.
pub(crate) fn emit(ctx: &mut Ctx, request: &Request, out: &mut HandlerOutput) {
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
            keyed: false,
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
        if ctx.is_session_ended(client) {
            // A session of a node that died never closes to unbind its
            // player: the player is told here, so it stops counting the
            // session as its own (rooms stop pushing to it, presence shows
            // the player gone). The push still goes: nothing takes it from
            // a dead node's link, and a node that was only cut off and
            // fenced delivers it to a session it still holds.
            ctx.counters.pushes_to_ended_sessions_total += 1;
            if client.player_id != 0 {
                ctx.effects.push(Effect::SessionGone { client });
            }
        }
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
    for client in out.session_checks.drain(..) {
        // No process of a node membership holds dead keeps sessions that
        // count: a node declared down serves nothing until it rejoins (its
        // sessions' requests then meet a player bound elsewhere and are
        // kicked), and a restarted one starts with none. A node membership
        // does not know counts as dead too (its row was deleted after its
        // retention), or its sessions would keep their players out for
        // good. The price: this core hears of a node's new start up to a
        // listing after that start's first logins may reach it, and a login
        // refused in that window frees the player from such a session,
        // which is kicked at its next request, as under kick_old.
        // (This node's own incarnation is always live.)
        let gone = ctx.live_incarnation(client.gateway_node).is_none();
        ctx.effects.push(if gone {
            Effect::SessionGone { client }
        } else {
            Effect::CheckSession { client }
        });
    }
}

/// Drops a held on_write output whose save did not apply: its request is
/// answered UNAVAILABLE (it may or may not be durable: Indeterminate) and
/// nothing else it produced is emitted.
pub(crate) fn abandon(ctx: &mut Ctx, request: Request) {
    ctx.reply(&request, Err(ErrorCode::Unavailable.into()));
}

/// Answers every request waiting on the entry's IO with `code`.
pub(crate) fn fail_waiters(ctx: &mut Ctx, entry: &mut Entry, code: ErrorCode) {
    for waiter in std::mem::take(&mut entry.io_waiters) {
        ctx.reply(&waiter.request, Err(code.into()));
    }
}

/// A write that gives ownership up (a release, a transfer's removal) goes
/// again after a backoff: who owns the object is unknown until then, up to
/// `WRITE_RETRY_MAX_MS` away and again as often as the store keeps failing.
/// The requests waiting on the entry (behind its IO, or its handoff) are
/// answered UNAVAILABLE now: each waited for one attempt (a request that
/// comes during the backoff brings the retry near, `route::hasten_retry`),
/// never for a backoff after another. One-way messages (notices between
/// objects) have nobody to tell and keep their place.
pub(crate) fn refuse_during_retry(ctx: &mut Ctx, entry: &mut Entry) {
    let mut queues = vec![&mut entry.io_waiters];
    if let Some(transferring) = entry.transferring.as_mut() {
        queues.push(&mut transferring.transfer_pending);
    }
    for queue in queues {
        let (one_way, refused): (VecDeque<Waiter>, VecDeque<Waiter>) = std::mem::take(queue)
            .into_iter()
            .partition(|waiter| !waiter.request.needs_reply);
        *queue = one_way;
        for waiter in refused {
            ctx.counters.write_retry_refusals_total += 1;
            ctx.reply(&waiter.request, Err(ErrorCode::Unavailable.into()));
        }
    }
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
    let jittered_ms = ctx.rng.random_range(wait_ms / 2..=wait_ms.max(1));
    ctx.arm(now_ms + jittered_ms.max(1), Timer::WriteRetry { key });
}

/// Drops a copy this node can no longer write (another node owns the
/// record, or a shutdown's deadline passed), counting and logging what no
/// save had made durable. `owner` is the record's owner now, when known.
pub(crate) fn drop_copy(
    ctx: &mut Ctx,
    key: ObjectKey,
    entry: &mut Entry,
    owner: Option<NodeId>,
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
        .map(|object| {
            object.held_failed = 0;
            std::mem::take(&mut object.held)
        })
        .unwrap_or_default()
}

/// A write covering held on_write outputs failed, or its outcome is
/// unknown. Those already held at the write's previous failure waited for
/// one retry (the write after a failure is one: `on_flush` starts it at the
/// next batch, or the retry timer does), and it failed too: they are
/// answered UNAVAILABLE now, not after backoff upon backoff while the store
/// fails. A change's output keeps the rest (its sends, pushes, timers) for
/// the write that covers it: the copy keeps the change and a later write
/// saves it, so whether it happened is unknown, as at a TIMEOUT; a forward
/// of its request goes on then as a one-way message (whoever takes it
/// answers nobody). A read (held only because it saw unsaved state) did
/// not happen: its pushes, sends (a forward too) and kicks are dropped, as
/// when a write fails for good. What is owed exactly once (calls, answers
/// to deferred requests, timers) still waits, and so does a request whose
/// answer was deferred.
pub(crate) fn refuse_held_after_retry(ctx: &mut Ctx, entry: &mut Entry) {
    let Some(object) = entry.object.as_mut() else {
        return;
    };
    for (request, out) in object.held.iter_mut().take(object.held_failed as usize) {
        let forwarded = |out: &HandlerOutput| {
            out.sends
                .iter()
                .any(|(_, sent)| sent.id == request.id && sent.needs_reply)
        };
        let answered_here = matches!(out.reply, HandlerReply::Answer(_));
        if !request.needs_reply || !(answered_here || forwarded(out)) {
            continue;
        }
        out.reply = HandlerReply::Delegated;
        if out.mutated {
            for (_, sent) in out
                .sends
                .iter_mut()
                .filter(|(_, sent)| sent.id == request.id)
            {
                sent.needs_reply = false;
            }
        } else {
            out.pushes.clear();
            out.sends.clear();
            out.kicks.clear();
        }
        ctx.counters.write_retry_refusals_total += 1;
        ctx.reply(request, Err(ErrorCode::Unavailable.into()));
        // Answered: neither the write's success nor its failure answers it
        // again.
        request.needs_reply = false;
    }
    object.held_failed = u32::try_from(object.held.len()).unwrap_or(u32::MAX);
}

/// Settles held on_write outputs once the write covering them replied: all
/// emitted in order when it applied, all answered UNAVAILABLE (nothing
/// else emitted) when it did not.
pub(crate) fn settle_held(ctx: &mut Ctx, held: Vec<(Request, HandlerOutput)>, applied: bool) {
    for (request, mut out) in held {
        if applied {
            emit(ctx, &request, &mut out);
        } else {
            abandon(ctx, request);
        }
    }
}
