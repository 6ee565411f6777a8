//! Tasks and their wakers.
//!
//! A task's future lives in its executor's slab and never leaves the core
//! (`!Send` futures are the point of thread-per-core). Its waker is an
//! `Arc<TaskHeader>`, which is `Send + Sync`: a store thread or another core
//! may wake a task, and the wake then travels through the executor's
//! remote queue and, if the core sleeps, its eventfd (`remote.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Wake;

use crate::remote::Remote;

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
    /// The task's slot in its executor's slab.
    pub index: usize,
    pub priority: Priority,
    /// Set from the wake until the executor starts polling the task: a task
    /// is in a run queue at most once however often it is woken.
    pub scheduled: AtomicBool,
    pub remote: Arc<Remote>,
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
