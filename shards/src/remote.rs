//! Wakes from other threads: a queue of woken tasks and an eventfd the
//! executor reads through its ring while it sleeps.
//!
//! The executor announces that it is about to sleep (`sleeping`), checks
//! the queue once more, and only then waits in the kernel; a waker pushes,
//! then writes the eventfd only if the executor announced sleep. Every
//! change of `sleeping` is a read-modify-write, so the two sides are
//! ordered by it: either the waker's swap comes after the announcement and
//! reads it (and writes the eventfd), or it comes before, and the
//! executor's announcement reads the waker's swap, which makes the waker's
//! `pending` visible to the executor's check (it then stays awake). A busy
//! core therefore takes no syscall per remote wake. The loom tests below
//! check this under every interleaving (see `sync.rs`).

#[cfg(not(loom))]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::sync::{AtomicBool, Mutex, MutexGuard};
use crate::task::TaskHeader;

pub(crate) struct Remote {
    queue: Mutex<Vec<Arc<TaskHeader>>>,
    /// Whether `queue` may be non-empty: lets the executor skip the lock on
    /// every loop turn.
    pending: AtomicBool,
    sleeping: AtomicBool,
    eventfd: EventFd,
}

impl Remote {
    pub fn new() -> std::io::Result<Remote> {
        Ok(Remote {
            queue: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            eventfd: EventFd::new()?,
        })
    }

    /// The descriptor the executor's ring reads while the core sleeps.
    #[cfg(not(loom))]
    pub fn eventfd(&self) -> RawFd {
        self.eventfd.0.as_raw_fd()
    }

    /// Under loom there is no descriptor: the model's executor waits with
    /// [`Remote::wait_for_wake`].
    #[cfg(loom)]
    pub fn eventfd(&self) -> i32 {
        -1
    }

    /// Queues a task woken on another thread and rouses its executor.
    pub fn push(&self, task: Arc<TaskHeader>) {
        self.lock().push(task);
        self.pending.store(true, Ordering::Release);
        self.notify();
    }

    /// Rouses the executor if it sleeps (or is about to): anything that
    /// changed state the executor must look at calls this after the change.
    pub fn notify(&self) {
        if self.sleeping.swap(false, Ordering::AcqRel) {
            self.eventfd.write();
        }
    }

    /// Moves the tasks woken remotely into `into`.
    pub fn drain(&self, into: &mut Vec<Arc<TaskHeader>>) {
        if !self.pending.load(Ordering::Acquire) {
            return;
        }
        // Cleared before the queue is taken: a push after the take sets it
        // again (its lock comes after ours, its store after this one).
        self.pending.store(false, Ordering::Relaxed);
        into.append(&mut self.lock());
    }

    /// Announces sleep; returns false (and stays awake) if a remote wake
    /// is already pending.
    pub fn prepare_sleep(&self) -> bool {
        // A swap, not a store: if a waker's swap came first, this reads it
        // and so sees the `pending` the waker set before it.
        self.sleeping.swap(true, Ordering::AcqRel);
        if self.pending.load(Ordering::Acquire) {
            self.sleeping.swap(false, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The executor is awake again (its eventfd read completed, or it
    /// waited for something else).
    pub fn woke(&self) {
        // A swap for the same reason: it carries on the wakers' chain of
        // swaps, so what they pushed before it is seen by the next drain.
        self.sleeping.swap(false, Ordering::AcqRel);
    }

    /// Under loom, the executor's sleep: returns once a waker has written
    /// the eventfd.
    #[cfg(all(loom, test))]
    pub fn wait_for_wake(&self) {
        self.eventfd.0.wait();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<TaskHeader>>> {
        // A panic while holding this lock fail-stops the process (the
        // runtime's hook), so a poisoned queue is never observed by a live
        // core; take it anyway.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The executor's wake-up eventfd.
#[cfg(not(loom))]
struct EventFd(OwnedFd);

#[cfg(not(loom))]
impl EventFd {
    fn new() -> std::io::Result<EventFd> {
        // Blocking or not is the same to the ring: it reads an eventfd by
        // arming a poll on it, so the read waits without a worker thread
        // and a cancel ends it at once (reactor tests). Writes never block:
        // the executor reads the counter back long before it could
        // saturate.
        // SAFETY: eventfd has no memory-safety preconditions; a negative
        // result is checked before the descriptor is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nobody else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn write(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A
        // failure (the counter saturated) still leaves it readable, which
        // is all a wake needs.
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

/// Under loom, the eventfd as the executor uses it: a write lets one wait
/// return (writes before the wait add up to one wake, as the executor's
/// read takes the whole counter).
#[cfg(loom)]
struct EventFd(loom::sync::Notify);

#[cfg(loom)]
impl EventFd {
    fn new() -> std::io::Result<EventFd> {
        Ok(EventFd(loom::sync::Notify::new()))
    }

    fn write(&self) {
        self.0.notify();
    }
}

#[cfg(all(test, not(loom)))]
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

/// The cross-core wake under loom's model checker (`sync.rs`): a waker on
/// another thread against the core's loop of drain, announce, look again
/// and sleep, in every interleaving. A lost wake leaves the core asleep
/// with every waker gone, which loom reports as a deadlock.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::task::Priority;
    use std::task::Waker;

    fn task(remote: &Arc<Remote>, scheduled: bool) -> Arc<TaskHeader> {
        Arc::new(TaskHeader {
            index: 0,
            priority: Priority::Latency,
            scheduled: AtomicBool::new(scheduled),
            remote: remote.clone(),
        })
    }

    /// The core, as `Executor::turn` and `park` run it: polls every task
    /// it drained with `poll`, and sleeps when nothing came, until `poll`
    /// says it is done. Returns how many times a task was drained.
    fn core(remote: &Remote, mut poll: impl FnMut(&Arc<TaskHeader>) -> bool) -> usize {
        let mut woken = Vec::new();
        let mut drained = 0;
        loop {
            remote.drain(&mut woken);
            drained += woken.len();
            for task in woken.drain(..) {
                task.begin_poll();
                if poll(&task) {
                    return drained;
                }
            }
            if remote.prepare_sleep() {
                remote.wait_for_wake();
                remote.woke();
            }
        }
    }

    /// Loom's model with three threads, bounded to three preemptions
    /// per execution (as tokio's loom runs are): the unbounded search of
    /// three threads runs for hours, and the wakes here need fewer
    /// preemptions to go wrong than that (a lost wake needs one or two).
    fn three_threads() -> loom::model::Builder {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model
    }

    #[test]
    fn loom_a_remote_wake_reaches_a_sleeping_core() {
        loom::model(|| {
            let remote = Arc::new(Remote::new().unwrap());
            let header = task(&remote, false);
            let waker = Waker::from(header);
            let other = loom::thread::spawn(move || waker.wake());
            core(&remote, |_| true);
            other.join().unwrap();
        });
    }

    /// The task is being polled when the other thread signals and wakes
    /// it: either the poll sees the signal, or the wake queues the task
    /// again and the next poll does.
    #[test]
    fn loom_a_wake_during_a_poll_is_polled_again() {
        loom::model(|| {
            let remote = Arc::new(Remote::new().unwrap());
            // Scheduled: the core is about to poll it.
            let header = task(&remote, true);
            let signalled = Arc::new(Mutex::new(false));
            let other = {
                let (signalled, waker) = (signalled.clone(), Waker::from(header.clone()));
                loom::thread::spawn(move || {
                    *signalled.lock().unwrap() = true;
                    waker.wake();
                })
            };
            let seen = |_: &Arc<TaskHeader>| *signalled.lock().unwrap();
            header.begin_poll();
            if !seen(&header) {
                core(&remote, seen);
            }
            other.join().unwrap();
        });
    }

    /// Two threads wake one task: it is queued once per poll at most, and
    /// the core sees both signals.
    #[test]
    fn loom_two_wakers_queue_a_task_once_and_lose_neither() {
        three_threads().check(|| {
            let remote = Arc::new(Remote::new().unwrap());
            let header = task(&remote, false);
            let signals = Arc::new(Mutex::new(0u32));
            let others: Vec<_> = (0..2)
                .map(|_| {
                    let (signals, waker) = (signals.clone(), Waker::from(header.clone()));
                    loom::thread::spawn(move || {
                        *signals.lock().unwrap() += 1;
                        waker.wake();
                    })
                })
                .collect();
            let mut polls = 0;
            let drained = core(&remote, |_| {
                polls += 1;
                *signals.lock().unwrap() == 2
            });
            assert_eq!(drained, polls, "a task queued twice between polls");
            for other in others {
                other.join().unwrap();
            }
        });
    }
}
