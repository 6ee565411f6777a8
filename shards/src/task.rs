//! Tasks and their wakers.
//!
//! A task's future lives in its executor's slab and never leaves the core
//! (`!Send` futures are the point of thread-per-core). Its waker is an
//! `Arc<TaskHeader>`, which is `Send + Sync`: a store thread or another core
//! may wake a task, and the wake then travels through the executor's
//! remote queue and, if the core sleeps, its eventfd (`remote.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Wake;

use crate::remote::Remote;
use crate::sync::AtomicBool;

/// Which run queue a task belongs to (see `executor::Queues`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// Client IO and routing: work whose latency matters.
    Latency = 0,
    /// Periodic saves and sweeps: runs in the latency work's gaps, within
    /// its share.
    Background = 1,
}

/// The cross-thread half of a task: enough to queue it again.
pub(crate) struct TaskHeader {
    /// The task's slot in its executor's slab (`slot`). A u32: the header
    /// then fits 16 bytes, and every connection's task has one.
    pub index: u32,
    pub priority: Priority,
    /// Set from the wake until the executor starts polling the task: a task
    /// is in a run queue at most once however often it is woken.
    pub scheduled: AtomicBool,
    pub remote: Arc<Remote>,
}

/// The most bytes a task's header takes: with the `Arc`'s counts, an
/// allocation of 32 bytes (24 with a usize index made it 40).
#[cfg(not(loom))]
const TASK_HEADER_BYTES_MAX: usize = 16;
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<TaskHeader>() <= TASK_HEADER_BYTES_MAX);

impl TaskHeader {
    /// The task's slot in its executor's slab.
    pub fn slot(&self) -> usize {
        self.index as usize
    }

    /// The executor is about to poll the task: a wake from here on queues
    /// it again.
    ///
    /// A store, not a swap (a poll is the hot path): a wake from another
    /// thread is then seen by the poll only if what it signals reaches the
    /// future through a lock or a read-modify-write (a channel, a mutex, a
    /// oneshot), never through a plain store the future reads with a plain
    /// load: store-then-load on two variables on both sides lets each
    /// miss the other. Every cross-thread wake source of routerd is of the
    /// first kind; the loom tests check the protocol with one.
    pub fn begin_poll(&self) {
        self.scheduled.store(false, Ordering::Release);
    }
}

impl Wake for TaskHeader {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        if !crate::executor::schedule_local(self) {
            self.remote.push(self.clone());
        }
    }
}
