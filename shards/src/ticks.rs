//! A periodic kernel timer whose expirations the core's ring watches.
//!
//! A `timerfd` counts its periods in the kernel, whatever the process's
//! clock reads say. Reading that count with `read(2)` on every look is one
//! system call per look, which on a loop that looks once per turn is one
//! per request at pipeline 1. On a core the ring instead keeps a poll of
//! the timer armed: it completes once the timer fired, the loop's kernel
//! entry reaps it with everything else, and only then does
//! [`TimerTicks::take`] read the count (one read per period, not per look)
//! and arm the next poll, submitted with the turn's other work. A period is
//! seen at the first kernel entry after it ends, before any input that
//! entry reaps is handled: a reap stores every completion before it wakes
//! a task. [`TimerTicks::take_now`] reads at once, for a look that must not
//! wait for the next kernel entry.
//!
//! Off a core (a tool, a test) there is no ring: every look reads.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::task::{Context, Waker};
use std::time::Duration;

use io_uring::{opcode, types};

use crate::executor;

/// A periodic `timerfd`'s expirations, looked at without a system call on
/// a core until the timer fired (see the module's documentation).
pub struct TimerTicks {
    fd: OwnedFd,
    /// `Some` on a core: the ring polls the timer.
    ring: Option<RingPoll>,
}

/// The poll the ring keeps armed on the timer.
struct RingPoll {
    /// The poll's slot while it is in the kernel or reaped but not taken.
    index: Option<usize>,
    /// The slot index belongs to the ring of the core that made it.
    _on_this_core: std::marker::PhantomData<*const ()>,
}

impl TimerTicks {
    /// A timer on `clock` (`libc::CLOCK_BOOTTIME`, ...) expiring every
    /// `period`. Made on a core, it is watched through that core's ring,
    /// and it must be used on that core.
    pub fn new(clock: libc::clockid_t, period: Duration) -> io::Result<TimerTicks> {
        // SAFETY: timerfd_create has no memory-safety preconditions; a
        // non-negative result is a descriptor owned here at once.
        let fd = unsafe { libc::timerfd_create(clock, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let period = libc::timespec {
            tv_sec: period.as_secs() as libc::time_t,
            tv_nsec: period.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: period,
            it_value: period,
        };
        // SAFETY: `spec` outlives the call; the old value is not asked for.
        if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let on_core = executor::try_with_reactor(|_| ()).is_some();
        let mut ticks = TimerTicks {
            fd,
            ring: on_core.then_some(RingPoll {
                index: None,
                _on_this_core: std::marker::PhantomData,
            }),
        };
        ticks.arm();
        Ok(ticks)
    }

    /// The expirations counted since the last read, read now if the core
    /// has seen the timer fire since (always, off a core); `None` when it
    /// has not, which says nothing of the time since the last read: the
    /// timer may have fired, and the ring not reaped it yet.
    pub fn take(&mut self) -> Option<u64> {
        let Some(ring) = &mut self.ring else {
            return Some(self.take_now());
        };
        if let Some(index) = ring.index {
            // A completion already reaped is in the slot; polling only looks.
            let mut cx = Context::from_waker(Waker::noop());
            if executor::with_reactor(|reactor| reactor.poll_op(index, &mut cx)).is_pending() {
                return None;
            }
            ring.index = None;
        }
        // Fired (or the poll ended early: a cancel while the core stops, in
        // which case the read finds what there is).
        let count = self.take_now();
        self.arm();
        Some(count)
    }

    /// The expirations counted since the last look, read at once (a
    /// system call).
    pub fn take_now(&mut self) -> u64 {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a u64 this function owns.
        let read = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if read == 8 {
            count
        } else {
            0
        }
    }

    /// Queues the ring's next poll of the timer (on a core).
    fn arm(&mut self) {
        let fd = self.fd.as_raw_fd();
        let Some(ring) = &mut self.ring else {
            return;
        };
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build();
        // SAFETY: a poll points at no memory.
        ring.index = Some(executor::with_reactor(|reactor| unsafe {
            reactor.submit(entry)
        }));
    }
}

impl Drop for RingPoll {
    fn drop(&mut self) {
        let Some(index) = self.index.take() else {
            return;
        };
        executor::try_with_reactor(|reactor| {
            let mut cx = Context::from_waker(Waker::noop());
            if reactor.poll_op(index, &mut cx).is_ready() {
                // Reaped already: polling it freed the slot.
                return;
            }
            // The poll waits for the next period: cancel it by its
            // `user_data` (one bucket of the ring's table of armed polls).
            reactor.cancel_op(index);
            reactor.orphan(index, None);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_core_every_look_reads() {
        let mut ticks = TimerTicks::new(libc::CLOCK_MONOTONIC, Duration::from_millis(5)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert!(ticks.take().unwrap() >= 5);
        assert!(ticks.take().unwrap() <= 1);
    }
}
