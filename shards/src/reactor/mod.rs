//! The core's io_uring: submissions, completions, and the operations in
//! flight between them.
//!
//! Every operation has a slot (`slots.rs`: the state machine, which a model
//! test drives with a fake ring); a submission carries the slot index as its
//! `user_data`, and its completion is stored there for the future that
//! waits on it. A slot outlives its future when the kernel may still use
//! memory the future owned (a send buffer, an address): the future hands
//! that memory to the slot as it is dropped (`orphan`), and the slot frees
//! it with the final completion. Multishot operations (accept, receive)
//! keep one slot for all their completions.
//!
//! # The submission rule
//!
//! The kernel reads and writes what a submission points at (a buffer, an
//! address) at any time until the operation's last completion, outside
//! Rust's view. So every function that submits is an `unsafe fn` whose
//! caller promises, for the entry it passes:
//! - what it points at stays valid and in place until the operation's
//!   last completion: owned by the future and handed to its slot by
//!   `orphan` if the future is dropped first, or owned by something that
//!   outlives the ring (the executor, the buffer ring);
//! - memory the kernel writes into is neither read nor written through any
//!   reference until that completion has been reaped.
//!
//! The reactor also owns the ring's registered file table (`files.rs`):
//! a stream's socket is put in it when the stream is made, and its index
//! is freed when the ring completes the index's close.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::bufring::{BufRing, RecvQuota};
use crate::files::FileTable;
use crate::ring::{self, RingError, TaskRun};
use slots::{Slot, SlotEnv, SlotTable};

pub(crate) use sends::SendChain;

/// `user_data` of submissions whose completion nobody waits for (close,
/// cancel): their results are dropped.
const IGNORED: u64 = u64::MAX;
/// `user_data` of the executor's read of its wake-up eventfd.
const WAKE_READ: u64 = u64::MAX - 1;

/// `IORING_CQE_F_BUFFER`: the completion carries a buffer of the ring.
const CQE_F_BUFFER: u32 = 1;

/// Completions reaped per kernel entry at most before tasks run again.
const REAP_BATCH_MAX: usize = 4096;

/// How long a wait that counts on quiet completions (see
/// [`Reactor::quiet_completions`]) holds out for the one completion that
/// wakes a task, before it takes what came. It bounds the cost of a wrong
/// guess: a send that did not complete at once (its socket full) while
/// another request arrived delays that request by this at most, once. It
/// is about a loopback client's turnaround, so a pipeline-1 client's next
/// request usually lands within it.
const QUIET_MIN_WAIT_US: u32 = 100;
/// The overall bound of such a wait when the loop has no timer due: the
/// kernel applies the short bound above only under a longer one.
const QUIET_WAIT_MAX: Duration = Duration::from_secs(3600);

/// What a multishot operation's successful results are, for when nobody
/// takes them: an accept's are descriptors the reactor must close, or the
/// clients behind them would hang until the process exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MultiKind {
    Accept,
    Recv,
}

pub(crate) struct Reactor {
    ring: RefCell<IoUring>,
    slots: RefCell<SlotTable>,
    pub bufs: Rc<BufRing>,
    files: FileTable,
    mode: TaskRun,
    recv_held_max: u32,
    wake_buf: Box<Cell<u64>>,
    wake_armed: Cell<bool>,
    wake_fd: i32,
    reaped: RefCell<Vec<(u64, i32, u32)>>,
    /// The wakers of one reap, woken once the slots are updated; kept
    /// between turns so a turn allocates nothing.
    wakers: RefCell<Vec<Waker>>,
    /// Entries that found the submission queue full and could not be
    /// handed to the kernel at once (a transient shortage, or completions
    /// to reap first). They go to the ring, in order and before anything
    /// pushed after them, at the next kernel entry. Each belongs to an
    /// operation, a close or a cancel a task asked for in this turn, so it
    /// holds no more than the operations in flight.
    backlog: RefCell<VecDeque<squeue::Entry>>,
    /// Submissions the tests make fail, with this errno.
    #[cfg(test)]
    fail_submits: Cell<(u32, i32)>,
    /// Kernel entries made (for tests and metrics of syscall counts).
    pub enters: Cell<u64>,
    /// Slots of the sends and closes queued since the last kernel entry:
    /// their completions, which come in the entry that submits them, may
    /// wake nobody (see [`Reactor::quiet_completions`]).
    quiet_pushed: RefCell<Vec<usize>>,
    /// Submissions whose completions are dropped (a cancel), queued since
    /// the last kernel entry.
    ignored_pushed: Cell<u32>,
    /// The kernel waits for several completions with a shorter bound for
    /// the first (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12).
    min_timeout: bool,
}

/// The ring's sizes and setup, from the runtime config.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingConfig {
    pub entries: u32,
    pub cq_entries: u32,
    pub mode: TaskRun,
    pub recv_buffers: u16,
    pub recv_buffer_bytes: usize,
    /// Entries of the registered file table (lowered to the open-file
    /// limit); zero registers no table.
    pub registered_files: u32,
    /// Receive buffers one connection may hold at once.
    pub recv_buffers_per_conn_max: u32,
}

impl Reactor {
    pub fn new(config: RingConfig, wake_fd: i32) -> Result<Reactor, RingError> {
        let ring = ring::build(config.entries, config.cq_entries, config.mode)?;
        let min_timeout = ring.params().is_feature_min_timeout();
        let bufs = BufRing::register(&ring, config.recv_buffers, config.recv_buffer_bytes)
            .map_err(RingError::BufRing)?;
        let files =
            FileTable::register(&ring, config.registered_files).map_err(RingError::FileTable)?;
        Ok(Reactor {
            ring: RefCell::new(ring),
            // Each connection keeps its receive's slot and, most of the
            // time, its last send's.
            slots: RefCell::new(SlotTable::with_capacity(
                2 * config.registered_files as usize,
            )),
            bufs: Rc::new(bufs),
            files,
            mode: config.mode,
            recv_held_max: config.recv_buffers_per_conn_max,
            wake_buf: Box::new(Cell::new(0)),
            wake_armed: Cell::new(false),
            wake_fd,
            reaped: RefCell::new(Vec::with_capacity(256)),
            wakers: RefCell::new(Vec::with_capacity(256)),
            backlog: RefCell::new(VecDeque::new()),
            #[cfg(test)]
            fail_submits: Cell::new((0, 0)),
            enters: Cell::new(0),
            quiet_pushed: RefCell::new(Vec::with_capacity(256)),
            ignored_pushed: Cell::new(0),
            min_timeout,
        })
    }

    pub fn mode(&self) -> TaskRun {
        self.mode
    }

    /// Receive buffers one connection may hold at once.
    pub fn recv_held_max(&self) -> u32 {
        self.recv_held_max
    }

    /// Queues `entry` for the next kernel entry (see the submission rule in
    /// the module's documentation). A full submission queue is
    /// handed to the kernel at once to make room; if the kernel cannot take
    /// it now, `entry` waits in the backlog (never a panic: the next entry
    /// decides whether the error was transient).
    ///
    /// # Safety
    /// `entry` follows the submission rule.
    unsafe fn push(&self, entry: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        let mut backlog = self.backlog.borrow_mut();
        if backlog.is_empty() {
            // SAFETY: the caller promises `entry` follows the submission
            // rule, which is what the queue asks of what is pushed.
            if unsafe { ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // A full queue: hand what is queued to the kernel, then retry.
            // SAFETY: as above.
            if self.submit_queued(&mut ring).is_ok()
                // SAFETY: as above.
                && unsafe { ring.submission().push(&entry) }.is_ok()
            {
                return;
            }
        }
        backlog.push_back(entry);
    }

    /// Hands the queued submissions to the kernel without waiting.
    fn submit_queued(&self, ring: &mut IoUring) -> io::Result<usize> {
        self.enters.set(self.enters.get() + 1);
        self.forget_quiet();
        #[cfg(test)]
        {
            let (count, errno) = self.fail_submits.get();
            if count > 0 {
                self.fail_submits.set((count - 1, errno));
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
        ring.submit()
    }

    /// Moves the backlog into the submission queue, submitting each time
    /// the queue fills; an error leaves the rest for the next entry.
    fn flush_backlog(&self, ring: &mut IoUring) -> io::Result<()> {
        let mut backlog = self.backlog.borrow_mut();
        loop {
            {
                let mut queue = ring.submission();
                while let Some(entry) = backlog.front() {
                    // SAFETY: `push` queued the entry under the submission
                    // rule, and its memory is kept until its completion,
                    // which cannot come before it reaches the kernel here.
                    if unsafe { queue.push(entry) }.is_err() {
                        break;
                    }
                    backlog.pop_front();
                }
            }
            if backlog.is_empty() {
                return Ok(());
            }
            if self.submit_queued(ring)? == 0 {
                // The kernel took nothing and said nothing: try next turn.
                return Ok(());
            }
        }
    }

    fn alloc(&self, slot: Slot) -> usize {
        self.slots.borrow_mut().alloc(slot)
    }

    /// Submits a one-shot operation; poll it with `poll_op`.
    ///
    /// # Safety
    /// `entry` follows the submission rule (module documentation).
    pub unsafe fn submit(&self, entry: squeue::Entry) -> usize {
        let index = self.alloc(Slot::Waiting {
            waker: None,
            chain: None,
        });
        // SAFETY: the caller's promise for `entry`.
        unsafe { self.push(entry.user_data(index as u64)) };
        index
    }

    /// Submits a multishot operation; poll it with `poll_multi`.
    ///
    /// # Safety
    /// `entry` follows the submission rule (module documentation).
    pub unsafe fn submit_multi(
        &self,
        entry: squeue::Entry,
        kind: MultiKind,
        quota: Option<Rc<RecvQuota>>,
    ) -> usize {
        let index = self.alloc(Slot::Multi {
            // Room for one result: a receive's completions are taken as
            // they come, and an idle connection keeps this allocation (8
            // bytes rather than the 32 of the first push's four).
            results: VecDeque::with_capacity(1),
            waker: None,
            more: true,
            kind,
            quota,
            spilled: None,
        });
        // SAFETY: the caller's promise for `entry`.
        unsafe { self.push(entry.user_data(index as u64)) };
        index
    }

    /// Puts socket `fd` in the registered file table: operations may then
    /// name it by the index returned. `None` when the table is full (the
    /// socket is used by its descriptor, counted).
    pub fn register_file(&self, fd: std::os::fd::RawFd) -> Option<u32> {
        self.files.insert(&self.ring.borrow(), fd)
    }

    /// Closes registered file `index` through the ring, after everything
    /// already queued (which may still name the index); the index is
    /// reused only once that close completes.
    pub fn close_file(&self, index: u32) {
        let slot = self.alloc(Slot::FileClose(index));
        let close = opcode::Close::new(types::Fixed(index)).build();
        // SAFETY: a close points at no memory.
        unsafe { self.push(close.user_data(slot as u64)) };
        self.quiet_pushed.borrow_mut().push(slot);
    }

    /// Registered file indexes in use (holding a file or closing it).
    pub fn files_in_use(&self) -> u32 {
        self.files.in_use()
    }

    /// Streams made while the file table was full, which use their
    /// descriptor for every operation.
    pub fn files_unregistered(&self) -> u64 {
        self.files.unregistered()
    }

    /// Submits an operation whose completion nobody waits for.
    ///
    /// # Safety
    /// `entry` follows the submission rule (module documentation); with no
    /// slot to keep memory in, that means memory that outlives the ring,
    /// or none (a close, a cancel).
    pub unsafe fn submit_ignored(&self, entry: squeue::Entry) {
        // SAFETY: the caller's promise for `entry`.
        unsafe { self.push(entry.user_data(IGNORED)) };
        self.ignored_pushed.set(self.ignored_pushed.get() + 1);
    }

    /// How many completions the next kernel entry will likely post that
    /// wake no task: those of the sends and closes it submits that nobody
    /// awaits (a reply started with `start_send` and not yet polled, a
    /// send whose future is gone, a file's close) and of its cancels.
    /// Such a send to a socket with room completes while the entry
    /// submits it, and would end the entry's wait at once: at pipeline 1
    /// every request would cost a second entry, to wait for the next one.
    /// A guess: a send to a full socket completes later instead.
    fn quiet_completions(&self) -> u32 {
        let slots = self.slots.borrow();
        let sends = self.quiet_pushed.borrow();
        let quiet = sends
            .iter()
            .filter(|&&index| slots.wakes_nobody(index))
            .count() as u32;
        quiet + self.ignored_pushed.get()
    }

    /// What was queued has gone to the kernel: its completions are no
    /// longer the next entry's to count.
    fn forget_quiet(&self) {
        self.quiet_pushed.borrow_mut().clear();
        self.ignored_pushed.set(0);
    }

    /// The result of one-shot operation `index` (`res`, `flags`); the slot
    /// is freed when it is returned.
    pub fn poll_op(&self, index: usize, cx: &mut Context<'_>) -> Poll<(i32, u32)> {
        self.slots.borrow_mut().poll_op(index, cx)
    }

    /// The next completion of multishot operation `index`, or `None` once
    /// it ended (the slot is then freed).
    pub fn poll_multi(&self, index: usize, cx: &mut Context<'_>) -> Poll<Option<(i32, u32)>> {
        self.slots.borrow_mut().poll_multi(index, cx)
    }

    /// The bytes of the result `poll_multi` just returned for `index` whose
    /// buffer was copied out of the ring (see `Slot::Multi::spilled`).
    pub fn take_spilled(&self, index: usize) -> Option<Vec<u8>> {
        self.slots.borrow_mut().take_spilled(index)
    }

    /// The future of operation `index` is dropped: keep `keep` (memory the
    /// kernel may still touch) until its last completion, and cancel a
    /// multishot operation that would otherwise run forever.
    pub fn orphan(&self, index: usize, keep: Option<Box<dyn Any>>) {
        self.slots.borrow_mut().orphan(index, keep, self);
    }

    /// [`Reactor::orphan`] of a multishot operation that ends without a
    /// cancel: its socket is shut down, so its last completion comes by
    /// itself (a cancel by `user_data` would cost a search of the ring's
    /// armed operations).
    pub fn orphan_ending(&self, index: usize) {
        self.slots.borrow_mut().orphan_ending(index, self);
    }

    /// Asks the kernel to cancel operation `index`, found by its
    /// `user_data`. The caller knows the operation is still in flight: its
    /// completion has not been reaped, so the index names no other.
    pub fn cancel_op(&self, index: usize) {
        SlotEnv::cancel(self, index);
    }

    /// Hands what is queued (the backlog, then the submission queue) to the
    /// kernel now, without waiting, if anything is; an error leaves it for
    /// the loop's next entry, which reports it.
    pub fn submit_now(&self) {
        let mut ring = self.ring.borrow_mut();
        if !self.backlog.borrow().is_empty() && self.flush_backlog(&mut ring).is_err() {
            return;
        }
        if !ring.submission().is_empty() {
            let _ = self.submit_queued(&mut ring);
        }
    }

    /// Keeps a read of the wake-up eventfd armed, so a wake from another
    /// thread completes it and ends a wait in the kernel.
    pub fn arm_wake(&self) {
        if self.wake_armed.replace(true) {
            return;
        }
        let entry = opcode::Read::new(
            types::Fd(self.wake_fd),
            self.wake_buf.as_ptr().cast(),
            std::mem::size_of::<u64>() as u32,
        )
        .build()
        .user_data(WAKE_READ);
        // SAFETY: the kernel writes into `wake_buf`, a `Cell` the reactor
        // keeps boxed (unmoved) for its life and never reads; a stopping
        // reactor completes the read before it lets go (`quiesce`).
        unsafe { self.push(entry) };
    }

    /// Whether an entry into the kernel has work to do without waiting:
    /// queued submissions, deferred completion work, or overflowed
    /// completions.
    pub fn needs_enter(&self) -> bool {
        let mut ring = self.ring.borrow_mut();
        let sq = ring.submission();
        !sq.is_empty() || sq.taskrun() || sq.cq_overflow() || !self.backlog.borrow().is_empty()
    }

    /// Enters the kernel once: submits what is queued, runs deferred work,
    /// and waits for a completion up to `wait` (`None`: do not wait).
    pub fn enter(&self, wait: Option<Option<Duration>>) -> io::Result<()> {
        let mut ring = self.ring.borrow_mut();
        let mut wait = wait;
        let mut submit_refused = false;
        if !self.backlog.borrow().is_empty() {
            match self.flush_backlog(&mut ring) {
                Ok(()) => {}
                // EBUSY: completions must be reaped before the kernel takes
                // more. EAGAIN: the kernel is short of memory for requests.
                // Either way the entry below must still reap and run the
                // deferred completion work, which is what frees room and
                // memory; it submits nothing, since the kernel skips that
                // work after a submission it cut short.
                Err(error)
                    if matches!(error.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) =>
                {
                    submit_refused = true;
                }
                Err(error) => return Err(error),
            }
            if !self.backlog.borrow().is_empty() {
                // Work is still waiting to be submitted: do not sleep on it.
                wait = None;
            }
        }
        self.enters.set(self.enters.get() + 1);
        let to_submit = if submit_refused {
            0
        } else {
            ring.submission().len() as u32
        };
        let quiet = if self.min_timeout && to_submit > 0 {
            self.quiet_completions()
        } else {
            0
        };
        self.forget_quiet();
        let submitter = ring.submitter();
        let result = match wait {
            None => {
                // GETEVENTS is what runs deferred task work.
                // SAFETY: no argument pointer is passed.
                unsafe {
                    submitter.enter::<libc::sigset_t>(
                        to_submit,
                        0,
                        io_uring::EnterFlags::GETEVENTS.bits(),
                        None,
                    )
                }
            }
            // Completions that wake nobody are not waited for: the wait
            // asks for one more, and takes what came once the short bound
            // passed (or the loop's own timeout).
            Some(timeout) if quiet > 0 => {
                let timespec = types::Timespec::from(timeout.unwrap_or(QUIET_WAIT_MAX));
                let args = types::SubmitArgs::new()
                    .timespec(&timespec)
                    .min_wait_usec(QUIET_MIN_WAIT_US);
                submitter.submit_with_args(1 + quiet as usize, &args)
            }
            Some(None) => submitter.submit_and_wait(1),
            Some(Some(timeout)) => {
                let timespec = types::Timespec::from(timeout);
                let args = types::SubmitArgs::new().timespec(&timespec);
                submitter.submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            // A timeout, a signal, or a busy completion queue: the caller
            // reaps what there is and loops.
            Err(error)
                if matches!(
                    error.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Moves every completion into its slot and wakes the futures that
    /// wait; returns how many completions there were.
    pub fn reap(&self) -> usize {
        let mut reaped = self.reaped.borrow_mut();
        {
            let mut ring = self.ring.borrow_mut();
            let completion = ring.completion();
            for cqe in completion.take(REAP_BATCH_MAX) {
                reaped.push((cqe.user_data(), cqe.result(), cqe.flags()));
            }
        }
        let count = reaped.len();
        // Taken out while the wakes run (a wake must not find it borrowed).
        let mut wakers = self.wakers.take();
        for (user_data, result, flags) in reaped.drain(..) {
            if let Some(bid) = cqueue::buffer_select(flags) {
                self.bufs.taken(bid);
            }
            match user_data {
                IGNORED => {}
                WAKE_READ => self.wake_armed.set(false),
                index => {
                    if let Some(waker) = self.complete(index as usize, result, flags) {
                        wakers.push(waker);
                    }
                }
            }
        }
        drop(reaped);
        wakers.drain(..).for_each(Waker::wake);
        *self.wakers.borrow_mut() = wakers;
        count
    }

    fn complete(&self, index: usize, result: i32, flags: u32) -> Option<Waker> {
        self.slots.borrow_mut().complete(index, result, flags, self)
    }

    /// Operations still owned by the kernel (slots not free).
    pub fn in_flight(&self) -> usize {
        self.slots.borrow().in_flight()
    }

    /// Keeps every buffer the kernel may still use allocated for the life
    /// of the process: for a ring whose operations would not finish.
    pub fn leak(&self) {
        self.slots.borrow_mut().leak();
        #[allow(clippy::mem_forget)] // the point: the kernel may still write into them
        std::mem::forget(self.bufs.clone());
    }

    /// Cancels everything in flight and reaps until the kernel has let go
    /// of every slot's memory, or `deadline` passes. Returns whether it
    /// did: if not, the caller must leak what slots and buffers hold.
    pub fn quiesce(&self, deadline: Instant) -> bool {
        let cancel_all = opcode::AsyncCancel2::new(types::CancelBuilder::any()).build();
        // SAFETY: a cancel points at no memory.
        unsafe { self.submit_ignored(cancel_all) };
        if self.wake_armed.get() {
            // The cancel ends the wake read (the ring waits on the eventfd
            // with a poll, not on a worker thread). One write completes it
            // too, should a kernel ever serve the read from a worker,
            // which a cancel would not interrupt.
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the executor's own
            // eventfd, which outlives the reactor; a failure (a saturated
            // counter) still leaves the read completable.
            unsafe {
                libc::write(
                    self.wake_fd,
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                );
            }
        }
        loop {
            let _ = self.enter(Some(Some(Duration::from_millis(10))));
            self.reap();
            // The wake read is cancelled too and never re-armed here.
            if self.slots.borrow().in_kernel() == 0 && !self.wake_armed.get() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }
}

/// The ring side of the slots' changes of state.
impl SlotEnv for Reactor {
    fn give_back(&self, bid: u16) {
        self.bufs.give_back(bid);
    }

    fn spill(&self, bid: u16, len: usize) -> Vec<u8> {
        // SAFETY: the slot calls this for a completion that picked `bid`,
        // and clears its buffer flag, so nothing else gives it back.
        unsafe { self.bufs.spill(bid, len) }
    }

    fn close_accepted(&self, fd: i32) {
        // SAFETY: `fd` is a descriptor the kernel made for an accept whose
        // result nothing else owns.
        unsafe {
            libc::close(fd);
        }
    }

    fn cancel(&self, index: usize) {
        let cancel = opcode::AsyncCancel::new(index as u64).build();
        // SAFETY: a cancel points at no memory.
        unsafe { self.submit_ignored(cancel) };
    }

    fn advance(&self, chain: &SendChain) {
        Reactor::advance(self, chain);
    }

    fn release_file(&self, file: u32) {
        self.files.release(file);
    }

    fn count_held_max(&self) {
        self.bufs.count_held_max();
    }
}

#[cfg(test)]
mod model_tests;
mod sends;
mod slots;
#[cfg(test)]
mod tests;
