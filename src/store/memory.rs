//! The in-memory backend for tests and the simulator: `MemoryTable` behind a
//! mutex, plus faults a test injects into the next calls.
//!
//! Calls run synchronously inside the `Store` method; only a delayed answer
//! uses a short-lived thread, so tests need no runtime.
//!
//! A shipped build opens it (`store.backend = "memory"`) but injects no
//! fault: the fault handle is reached through the `testing` feature only.
#![cfg_attr(not(feature = "testing"), allow(dead_code))]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_channel::oneshot;
use wire::ObjectKey;

use super::api::{Backend, Store};
use super::bridge::{ready, StoreFuture};
use super::error::{BackendError, LoadError, MembershipError, WriteError};
use super::membership::{
    MemberOutcome, MemberPage, MemberPoll, MemberVersion, MemberWrite, TableVersion,
};
use super::memory_table::{MemberTable, MemoryTable};
use super::record::{NodeId, RecordWrite, RouteRecord, WriteOutcome};
use crate::config::StoreConfig;

/// Faults waiting to be injected, at most this many: a bound on what a test
/// can queue.
pub const FAULTS_MAX: usize = 1024;

/// What the next store call does instead of answering normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with `BackendError::Injected`; a write is not applied.
    Fail,
    /// The call times out: a write is applied and answers `Indeterminate`;
    /// a load or a membership list answers `Timeout`.
    TimeoutApplied,
    /// The call times out without effect: a write answers `Indeterminate`
    /// without being applied.
    TimeoutNotApplied,
    /// The call takes effect now and answers after this delay; a delay at
    /// or past `request_timeout_ms` answers as timed out at the timeout.
    Delay(Duration),
}

struct Shared {
    table: MemoryTable,
    members: MemberTable,
    faults: VecDeque<Fault>,
}

struct MemoryBackend {
    shared: Arc<Mutex<Shared>>,
    request_timeout: Duration,
}

/// A test's handle to inject faults into a memory store.
#[derive(Clone)]
pub struct MemoryFaults {
    shared: Arc<Mutex<Shared>>,
}

impl MemoryFaults {
    /// Makes the next `count` calls (of any kind) behave as `fault`.
    /// Returns false, injecting nothing, past `FAULTS_MAX` queued faults.
    pub fn inject(&self, fault: Fault, count: usize) -> bool {
        let mut shared = lock(&self.shared);
        if shared.faults.len() + count > FAULTS_MAX {
            return false;
        }
        shared.faults.extend(std::iter::repeat_n(fault, count));
        true
    }

    /// Faults not yet consumed.
    pub fn pending(&self) -> usize {
        lock(&self.shared).faults.len()
    }
}

/// Opens an empty memory store. Clones of the `Store` share one table.
pub fn open_memory(config: &StoreConfig) -> (Store, MemoryFaults) {
    let shared = Arc::new(Mutex::new(Shared {
        table: MemoryTable::default(),
        members: MemberTable::default(),
        faults: VecDeque::new(),
    }));
    let backend = MemoryBackend {
        shared: shared.clone(),
        request_timeout: Duration::from_millis(config.request_timeout_ms),
    };
    (
        Store::from_backend(Arc::new(backend), config),
        MemoryFaults { shared },
    )
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while holding the lock leaves a table that is still a valid
    // map (every mutation is one insert), so poisoning is not fatal.
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How a call answers once its effect (if any) is done.
enum Answer {
    Now,
    TimedOut,
    After(Duration),
}

impl MemoryBackend {
    fn answer(&self, delay: Duration) -> Answer {
        if delay >= self.request_timeout {
            Answer::After(self.request_timeout)
        } else {
            Answer::After(delay)
        }
    }

    /// Answers `value` now, or from a thread after a delay; a delay that
    /// reaches the request timeout answers `timed_out` instead.
    fn reply<T: Clone + Send + 'static>(
        &self,
        answer: Answer,
        value: T,
        timed_out: T,
    ) -> StoreFuture<T> {
        let (delay, value) = match answer {
            Answer::Now => return ready(value),
            Answer::TimedOut => return ready(timed_out),
            Answer::After(delay) if delay >= self.request_timeout => (delay, timed_out.clone()),
            Answer::After(delay) => (delay, value),
        };
        let (sender, receiver) = oneshot::channel();
        // Without a thread for the delay the answer is lost, as a real
        // backend's would be, and the caller sees the timeout answer.
        let _ = std::thread::Builder::new()
            .name("store-memory-delay".to_string())
            .spawn(move || {
                std::thread::sleep(delay);
                // The caller may have dropped its future: nothing to do.
                drop(sender.send(value));
            });
        Box::pin(async move { receiver.await.unwrap_or(timed_out) })
    }
}

impl Backend for MemoryBackend {
    fn load(&self, key: ObjectKey) -> StoreFuture<Result<Option<RouteRecord>, LoadError>> {
        let mut shared = lock(&self.shared);
        let (answer, value) = match shared.faults.pop_front() {
            Some(Fault::Fail) => return ready(Err(BackendError::Injected.into())),
            Some(Fault::TimeoutApplied | Fault::TimeoutNotApplied) => (Answer::TimedOut, None),
            Some(Fault::Delay(delay)) => (self.answer(delay), shared.table.load(key)),
            None => (Answer::Now, shared.table.load(key)),
        };
        drop(shared);
        self.reply(answer, Ok(value), Err(LoadError::Timeout))
    }

    fn write_batch(
        &self,
        writes: Vec<RecordWrite>,
    ) -> StoreFuture<Result<Vec<WriteOutcome>, WriteError>> {
        let mut shared = lock(&self.shared);
        let fault = shared.faults.pop_front();
        let answer = match fault {
            Some(Fault::Fail) => return ready(Err(BackendError::Injected.into())),
            Some(Fault::TimeoutApplied | Fault::TimeoutNotApplied) => Answer::TimedOut,
            Some(Fault::Delay(delay)) => self.answer(delay),
            None => Answer::Now,
        };
        let outcomes: Vec<WriteOutcome> = if fault == Some(Fault::TimeoutNotApplied) {
            Vec::new()
        } else {
            writes
                .iter()
                .map(|write| shared.table.write(write))
                .collect()
        };
        drop(shared);
        let indeterminate = vec![WriteOutcome::Indeterminate; writes.len()];
        self.reply(answer, Ok(outcomes), Ok(indeterminate))
    }

    fn write_member(
        &self,
        write: MemberWrite,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        self.member_change(|members| members.write(&write))
    }

    fn delete_member(
        &self,
        node_id: NodeId,
        expected: MemberVersion,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        self.member_change(|members| members.delete(node_id, expected))
    }

    fn poll_members(&self, nodes: Vec<NodeId>) -> StoreFuture<Result<MemberPoll, MembershipError>> {
        self.member_read(|members| members.poll(&nodes))
    }

    fn list_members(
        &self,
        since: TableVersion,
        after: NodeId,
    ) -> StoreFuture<Result<MemberPage, MembershipError>> {
        self.member_read(|members| members.list_page(since, after))
    }
}

impl MemoryBackend {
    /// A membership write or deletion under the next fault, as a record
    /// write is.
    fn member_change(
        &self,
        apply: impl FnOnce(&mut MemberTable) -> MemberOutcome,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        let mut shared = lock(&self.shared);
        let fault = shared.faults.pop_front();
        let answer = match fault {
            Some(Fault::Fail) => return ready(Err(BackendError::Injected.into())),
            Some(Fault::TimeoutApplied | Fault::TimeoutNotApplied) => Answer::TimedOut,
            Some(Fault::Delay(delay)) => self.answer(delay),
            None => Answer::Now,
        };
        let outcome = if fault == Some(Fault::TimeoutNotApplied) {
            MemberOutcome::Indeterminate
        } else {
            apply(&mut shared.members)
        };
        drop(shared);
        self.reply(answer, Ok(outcome), Ok(MemberOutcome::Indeterminate))
    }

    /// A membership read under the next fault, as a load is.
    fn member_read<T: Clone + Send + 'static>(
        &self,
        read: impl FnOnce(&mut MemberTable) -> T,
    ) -> StoreFuture<Result<T, MembershipError>> {
        let mut shared = lock(&self.shared);
        let answer = match shared.faults.pop_front() {
            Some(Fault::Fail) => return ready(Err(BackendError::Injected.into())),
            Some(Fault::TimeoutApplied | Fault::TimeoutNotApplied) => Answer::TimedOut,
            Some(Fault::Delay(delay)) => self.answer(delay),
            None => Answer::Now,
        };
        let value = read(&mut shared.members);
        drop(shared);
        self.reply(answer, Ok(value), Err(MembershipError::Timeout))
    }
}
