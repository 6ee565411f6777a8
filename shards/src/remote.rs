//! Wakes from other threads: a queue of woken tasks and an eventfd the
//! executor reads through its ring while it sleeps.
//!
//! The executor announces that it is about to sleep (`sleeping`), checks
//! the queue once more, and only then waits in the kernel; a waker pushes,
//! then writes the eventfd only if the executor announced sleep. Both sides
//! use sequentially consistent operations, so one of them always sees the
//! other: either the executor finds the task before sleeping, or the waker
//! sees `sleeping` and the eventfd read completes in the ring. A busy core
//! therefore takes no syscall per remote wake.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::task::TaskHeader;

pub(crate) struct Remote {
    queue: Mutex<Vec<Arc<TaskHeader>>>,
    /// Whether `queue` may be non-empty: lets the executor skip the lock on
    /// every loop turn.
    pending: AtomicBool,
    sleeping: AtomicBool,
    eventfd: OwnedFd,
}

impl Remote {
    pub fn new() -> std::io::Result<Remote> {
        // Blocking on purpose: io_uring answers a read of a non-blocking
        // descriptor with EAGAIN instead of waiting for it, which would turn
        // every sleep into a spin. Writes never block: the executor reads
        // the counter back long before it could saturate.
        // SAFETY: eventfd has no memory-safety preconditions; a negative
        // result is checked before the descriptor is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Remote {
            queue: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            // SAFETY: `fd` is a new descriptor nobody else owns.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn eventfd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// Queues a task woken on another thread and rouses its executor.
    pub fn push(&self, task: Arc<TaskHeader>) {
        self.lock().push(task);
        self.pending.store(true, Ordering::SeqCst);
        self.notify();
    }

    /// Rouses the executor if it sleeps (or is about to): anything that
    /// changed state the executor must look at calls this after the change.
    pub fn notify(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A
            // failure (the counter saturated) still leaves it readable, which
            // is all a wake needs.
            unsafe {
                libc::write(
                    self.eventfd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                );
            }
        }
    }

    /// Moves the tasks woken remotely into `into`.
    pub fn drain(&self, into: &mut Vec<Arc<TaskHeader>>) {
        if !self.pending.load(Ordering::SeqCst) {
            return;
        }
        self.pending.store(false, Ordering::SeqCst);
        into.append(&mut self.lock());
    }

    /// Announces sleep; returns false (and stays awake) if a remote wake
    /// is already pending.
    pub fn prepare_sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        if self.pending.load(Ordering::SeqCst) {
            self.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<TaskHeader>>> {
        // A panic while holding this lock fail-stops the process (the
        // runtime's hook), so a poisoned queue is never observed by a live
        // core; take it anyway.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Priority;

    fn task(remote: &Arc<Remote>) -> Arc<TaskHeader> {
        Arc::new(TaskHeader {
            index: 0,
            priority: Priority::Latency,
            scheduled: AtomicBool::new(true),
            remote: remote.clone(),
        })
    }

    /// Whether the eventfd has a wake to read (without reading it).
    fn signalled(remote: &Remote) -> bool {
        let mut poll = libc::pollfd {
            fd: remote.eventfd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one live descriptor without waiting.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        assert!(ready >= 0, "poll");
        ready == 1
    }

    /// A busy executor takes remote wakes without a system call; one that
    /// announced sleep is written to; and one that is about to sleep with
    /// a wake pending stays awake.
    #[test]
    fn a_remote_wake_writes_the_eventfd_only_to_a_sleeping_executor() {
        let remote = Arc::new(Remote::new().unwrap());
        remote.push(task(&remote));
        assert!(!signalled(&remote), "an awake executor was written to");
        assert!(!remote.prepare_sleep(), "slept with a wake pending");
        let mut woken = Vec::new();
        remote.drain(&mut woken);
        assert_eq!(woken.len(), 1);
        assert!(remote.prepare_sleep());
        remote.push(task(&remote));
        assert!(signalled(&remote), "a sleeping executor was not roused");
        remote.woke();
        remote.drain(&mut woken);
        assert_eq!(woken.len(), 2);
        remote.drain(&mut woken);
        assert_eq!(woken.len(), 2, "a drained queue gives nothing twice");
    }
}
