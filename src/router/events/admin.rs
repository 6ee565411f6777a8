//! What an operator or the assembly asks of the core: a transfer, and
//! shutdown with its release batches.

use wire::ObjectKey;

use crate::ids::NodeId;
use crate::router::core::{checked, run, RouterCore};
use crate::router::ctx::{ShutdownState, StoreWait, SHUTDOWN_BATCH_MAX};
use crate::router::steps::{release, transfer};
use crate::router::types::{StoreOp, Timer, TransferError};

impl RouterCore {
    /// `transfer(key, target, need_notify)`: persist `target` as the owner
    /// with a higher route version, downgrade, then (with `need_notify`)
    /// ship the state to `target` in `router_transfer` and wait for its ack.
    /// Requests arriving meanwhile wait in the pending queue and are all
    /// re-dispatched at the end, whatever the outcome. A `target` of 0
    /// releases ownership. Starts after the object's in-flight IO.
    pub fn transfer(
        &mut self,
        now_ms: u64,
        key: ObjectKey,
        target: NodeId,
        need_notify: bool,
    ) -> Result<(), TransferError> {
        if let Some(refused) = transfer::refusal(&self.ctx, now_ms, target) {
            return Err(refused);
        }
        let manager = self
            .managers
            .get_mut(&key.type_id)
            .ok_or(TransferError::UnknownType)?;
        let entry = manager
            .entries
            .get_mut(&key)
            .ok_or(TransferError::NotWritable)?;
        let next = transfer::ask(entry, target, need_notify)?;
        run(
            &mut self.ctx,
            manager.kind.as_ref(),
            key,
            entry,
            now_ms,
            next,
        );
        checked(key, entry);
        Ok(())
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

    pub(crate) fn shutdown_deadline(&mut self, _now_ms: u64) {
        let ctx = &mut self.ctx;
        let Some(shutdown) = ctx.shutdown.as_mut() else {
            return;
        };
        shutdown.expired = true;
        let mut unconfirmed = 0;
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
                release::deadline(ctx, *key, entry);
                checked(*key, entry);
                unconfirmed += usize::from(entry.is_writable());
            }
        }
        if unconfirmed > 0 {
            tracing::warn!(
                copies = unconfirmed,
                "shutdown deadline passed with releases in flight: their changes are saved only \
                 if those writes apply, and the node does not write `left`"
            );
        }
    }

    /// Saves and releases the writable, idle objects among `keys`, in
    /// batches of `SHUTDOWN_BATCH_MAX` writes.
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
            let Some(write) = release::begin(*key, entry, now_ms) else {
                continue;
            };
            checked(*key, entry);
            writes.push(write);
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
}
