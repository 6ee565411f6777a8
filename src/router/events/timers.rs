//! The timers the core armed: the sweep (periodic saves, idle
//! degradation, cache cleanup), retries, and object timers.

use wire::ObjectKey;

use crate::router::core::{checked, free_cache, run, RouterCore};
use crate::router::ctx::sweep_interval_ms;
use crate::router::entry::{Manager, Waiter};
use crate::router::handler::timer_event;
use crate::router::steps::{save, Next};
use crate::router::types::{RouterHead, Timer};

impl RouterCore {
    pub fn on_timer(&mut self, now_ms: u64, timer: Timer) {
        match timer {
            Timer::WriteRetry { key } => self.retry_write(now_ms, key),
            Timer::Sweep => self.sweep(now_ms),
            Timer::PullRetry { key } => self.retry_pull(now_ms, key),
            Timer::TransferAck { key, transfer_id } => {
                self.transfer_ack_timeout(now_ms, key, transfer_id)
            }
            Timer::ShutdownDeadline => self.shutdown_deadline(now_ms),
            Timer::Object {
                key,
                activation,
                tag,
            } => self.on_object_timer(now_ms, key, activation, tag),
        }
    }

    /// Re-issues the read of a pull that got EAGAIN.
    pub(crate) fn retry_pull(&mut self, now_ms: u64, key: ObjectKey) {
        self.run_on(now_ms, key, Next::PullAgain);
    }

    /// Timer `tag` of the activation `activation` of `key` fired: the
    /// object gets a timer event, in order with its requests, if it is
    /// still writable on this core. A copy dropped since (degraded, moved,
    /// fenced) took its timers with it.
    pub(crate) fn on_object_timer(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        activation: u64,
        tag: u64,
    ) {
        if !self.entry_mut(key).is_some_and(|entry| entry.is_writable()) {
            return;
        }
        self.ctx.counters.object_timers_total += 1;
        let waiter = Waiter {
            head: RouterHead::local(key, self.ctx.node),
            request: timer_event(activation, tag),
            repairs: 0,
            fresh_pull: false,
            send_attempts: 0,
            unreachable: None,
        };
        self.run_on(now_ms, key, Next::Route(waiter));
    }

    /// The sweep timer: periodic saves, idle degradation, cache cleanup.
    pub(crate) fn sweep(&mut self, now_ms: u64) {
        let ctx = &mut self.ctx;
        let config = ctx.config.clone();
        for Manager { kind, entries } in self.managers.values_mut() {
            let mut freed = Vec::new();
            for (key, entry) in entries.iter_mut() {
                if entry.is_writable() {
                    let next = save::due(ctx, entry, now_ms);
                    run(ctx, kind.as_ref(), *key, entry, now_ms, next);
                    checked(*key, entry);
                } else if entry.is_idle_cache()
                    && entry.last_access_ms + config.cache_free_timeout_ms <= now_ms
                {
                    freed.push(*key);
                }
            }
            for key in freed {
                free_cache(ctx, entries, key);
            }
        }
        if !self.is_shutdown_complete() {
            self.ctx
                .arm(now_ms + sweep_interval_ms(&config), Timer::Sweep);
        }
    }
}
