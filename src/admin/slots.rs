//! The admin endpoint's connections, in two stages, so that no client that
//! has not shown a request can starve one that has:
//!
//! - **Sending its head.** Every accepted connection, for at most
//!   `HEAD_READ_TIMEOUT` and `REQUEST_HEAD_MAX_BYTES`. It holds no slot; at
//!   most [`PENDING_HEADS_MAX`] are, and a connection accepted past that
//!   closes the oldest one still sending its head (`evicted`). A real
//!   client's head comes in one packet, so it is served long before
//!   anyone's slow head is the oldest.
//! - **Served.** A complete head takes a slot until its connection ends:
//!   one of [`SLOTS_MAX`] shared by every request, or for a probe or a
//!   scrape (`GET /healthz`, `/livez`, `/readyz`, `/metrics`) first one of
//!   [`PROBE_SLOTS_MAX`] nothing else takes. With every slot of its kind
//!   taken a request is answered `503` at once (`slots`).
//!
//! So requests holding a body (each at most `BODY_READ_TIMEOUT`) or
//! waiting for the cores fill the shared slots at worst, and slow heads
//! fill the pending bound at worst; probes and scrapes still answer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;

use super::gate::Class;

/// Requests served at once (their head read), probes and scrapes past
/// their own slots included.
pub const SLOTS_MAX: usize = 64;
/// Slots only probes and scrapes take, beyond [`SLOTS_MAX`].
pub const PROBE_SLOTS_MAX: usize = 16;
/// Connections still sending their head; past it, the oldest is closed.
pub const PENDING_HEADS_MAX: usize = 256;

/// The endpoint's connections, as [`serve`](super::serve) accepts them.
pub(super) struct Connections {
    /// Those sending their head, by accept order: the first is the oldest.
    /// The handle is `None` for the instant between accept and spawn.
    pending: Mutex<(u64, BTreeMap<u64, Option<AbortHandle>>)>,
    shared: Arc<Semaphore>,
    probes: Arc<Semaphore>,
}

impl Connections {
    pub(super) fn new() -> Connections {
        Connections {
            pending: Mutex::new((0, BTreeMap::new())),
            shared: Arc::new(Semaphore::new(SLOTS_MAX)),
            probes: Arc::new(Semaphore::new(PROBE_SLOTS_MAX)),
        }
    }

    /// A connection just accepted: its id, and whether the oldest one
    /// still sending its head was closed to make room for it.
    pub(super) fn admit(&self) -> (u64, bool) {
        let mut pending = self.lock();
        let (next, waiting) = &mut *pending;
        let id = *next;
        *next += 1;
        let mut evicted = false;
        if waiting.len() >= PENDING_HEADS_MAX {
            if let Some((_, Some(oldest))) = waiting.pop_first() {
                oldest.abort();
            }
            evicted = true;
        }
        waiting.insert(id, None);
        (id, evicted)
    }

    /// How to close connection `id` while it sends its head.
    pub(super) fn track(&self, id: u64, task: AbortHandle) {
        if let Some(handle) = self.lock().1.get_mut(&id) {
            *handle = Some(task);
        }
    }

    /// Connection `id` sent its head (or ended): it cannot be evicted.
    pub(super) fn head_done(&self, id: u64) {
        self.lock().1.remove(&id);
    }

    /// Connections sending their head now.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().1.len()
    }

    /// A slot for a request of `class`, held until the permit drops;
    /// `None` when every slot it may take is taken.
    pub(super) fn slot(&self, class: Class) -> Option<OwnedSemaphorePermit> {
        let reserved = match class {
            Class::Probe => self.probes.clone().try_acquire_owned().ok(),
            Class::Other => None,
        };
        reserved.or_else(|| self.shared.clone().try_acquire_owned().ok())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Option<AbortHandle>>)> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Marks its connection's head done when dropped, however the connection
/// ends.
pub(super) struct Pending {
    pub(super) connections: Arc<Connections>,
    pub(super) id: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.connections.head_done(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_keep_slots_that_other_requests_cannot_take() {
        let connections = Connections::new();
        let others: Vec<_> = (0..SLOTS_MAX)
            .map(|_| connections.slot(Class::Other).expect("a shared slot"))
            .collect();
        assert!(connections.slot(Class::Other).is_none());
        let probes: Vec<_> = (0..PROBE_SLOTS_MAX)
            .map(|_| connections.slot(Class::Probe).expect("a probe slot"))
            .collect();
        assert!(connections.slot(Class::Probe).is_none());
        drop(others);
        // Past their own, probes take shared slots too.
        assert!(connections.slot(Class::Probe).is_some());
        drop(probes);
    }

    #[test]
    fn past_the_pending_bound_the_oldest_head_is_evicted() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let connections = Connections::new();
            let mut tasks = Vec::new();
            for _ in 0..PENDING_HEADS_MAX {
                let (id, evicted) = connections.admit();
                assert!(!evicted);
                let task = tokio::spawn(std::future::pending::<()>());
                connections.track(id, task.abort_handle());
                tasks.push(task);
            }
            // The first finished its head: not pending, never evicted.
            connections.head_done(0);
            let (_, evicted) = connections.admit();
            assert!(!evicted);
            let (_, evicted) = connections.admit();
            assert!(evicted);
            assert_eq!(connections.pending(), PENDING_HEADS_MAX);
            let first = tasks.remove(0);
            let second = tasks.remove(0);
            assert!(second.await.unwrap_err().is_cancelled());
            assert!(!first.is_finished());
            first.abort();
        });
    }
}
