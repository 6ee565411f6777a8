//! The core's provided-buffer ring: receive buffers the kernel picks from
//! when a multishot receive completes, so one armed receive per connection
//! serves every read without a new submission or a buffer per connection.
//!
//! A received buffer is lent to the reader as a [`RecvBuf`] and goes back
//! to the ring when dropped. The ring's entries live in one page-aligned
//! mapping the kernel reads; the buffers in another, populated at once and
//! held by a raw pointer: the kernel writes into any buffer it owns at any
//! time, so no reference ever spans the mapping, only the buffer lent out.
//!
//! The ring is shared by every connection of the core, so it can run dry:
//! - a connection whose receive found it empty parks on the ring's waiter
//!   list, and every waiter is woken when the first buffer comes back
//!   (see `give_back`), instead of re-arming every loop turn, which fails
//!   at once on an empty ring and would keep the core spinning;
//! - a connection holds at most `held_max` buffers (lent to its reader or
//!   filled and not yet read): at the bound its receive is cancelled and
//!   re-armed only once the reader gives buffers back, so one slow reader
//!   cannot take the whole ring from the others (TCP flow control holds
//!   its peer meanwhile).
//!
//! The bound is checked as completions are reaped, and one kernel pass of
//! a multishot receive fills buffers for everything queued on the socket:
//! a burst can fill buffers past it before the core sees any. What a
//! connection receives past its bound is copied out of the ring into a
//! buffer of its own (`spilled`, counted) and the ring's buffer goes back
//! at once, so the ring never lends a connection more than its bound. The
//! copies are bounded by what one pass can take, the socket's receive
//! buffer: the bound stops the receive. A connection that reached its
//! bound is also `capped`: from then on each of its receives is a one-shot
//! receive of one buffer, armed only below the bound, so a slow reader is
//! not copied again and again (at the price of a submission per read,
//! which only connections whose readers fall behind pay), until a receive
//! finds its socket drained: the reader has caught up, and the connection
//! is back on a multishot receive.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::Waker;

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The buffer group id of every core's ring (one ring per io_uring).
pub(crate) const BUF_GROUP: u16 = 0;

pub(crate) struct BufRing {
    /// The mapping of `entries` `BufRingEntry`s shared with the kernel.
    ring: *mut BufRingEntry,
    ring_bytes: usize,
    entries: u16,
    /// Our copy of the tail; published to the kernel after each return.
    tail: Cell<u16>,
    /// `entries * buffer_bytes` bytes of an anonymous mapping, unmapped in
    /// Drop.
    buffers: *mut u8,
    buffer_bytes: usize,
    /// Buffers out of the kernel's hands: filled by a completion and not
    /// yet given back.
    lent: Cell<u16>,
    /// Which buffers those are, a bit per buffer: a buffer given back
    /// twice would be in the ring twice, and lent to two readers at once.
    lent_bids: RefCell<Vec<u64>>,
    /// Connections waiting for a buffer, oldest first; each at most once
    /// (`RecvQuota::listed`), so the list is bounded by the connections.
    waiters: RefCell<VecDeque<Rc<RecvQuota>>>,
    /// Times a connection parked because the ring was empty.
    waits_total: Cell<u64>,
    /// Times a connection's receive was stopped at its `held_max`.
    held_max_total: Cell<u64>,
    /// Completions past a connection's `held_max` copied out of the ring.
    spilled_total: Cell<u64>,
    /// One-buffer receives armed for connections past their bound.
    capped_receives_total: Cell<u64>,
}

/// One connection's share of the ring: the buffers it holds, and its
/// reader's waker while it waits for buffers (of the ring, or its own).
pub(crate) struct RecvQuota {
    held: Cell<u32>,
    held_max: u32,
    /// A cancel of the receive is on its way (the connection reached
    /// `held_max`).
    pausing: Cell<bool>,
    /// On the ring's waiter list.
    listed: Cell<bool>,
    /// Reached `held_max`: receives one buffer at a time until a receive
    /// finds its socket drained (the reader caught up).
    capped: Cell<bool>,
    /// A `Cell`, not a `RefCell`: without the borrow flag the quota fits
    /// 32 bytes, and with its `Rc` counts an allocator size class of 48
    /// (one per connection).
    waker: Cell<Option<Waker>>,
}

const _: () = assert!(std::mem::size_of::<RecvQuota>() <= 32);

impl RecvQuota {
    pub fn new(held_max: u32) -> Rc<RecvQuota> {
        Rc::new(RecvQuota {
            held: Cell::new(0),
            held_max: held_max.max(1),
            pausing: Cell::new(false),
            listed: Cell::new(false),
            capped: Cell::new(false),
            waker: Cell::new(None),
        })
    }

    /// Whether the connection holds its whole share: a buffer filled for
    /// it now must be copied out (`BufRing::spill`).
    pub fn at_max(&self) -> bool {
        self.held.get() >= self.held_max
    }

    /// A completion filled a buffer for this connection. True when that
    /// reaches the bound: the caller stops the receive (once).
    pub fn filled(&self) -> bool {
        let held = self.held.get() + 1;
        self.held.set(held);
        if held < self.held_max {
            return false;
        }
        self.capped.set(true);
        !self.pausing.replace(true)
    }

    /// Whether the connection receives one buffer per submission.
    pub fn capped(&self) -> bool {
        self.capped.get()
    }

    /// A receive took less than a buffer: the socket was drained, the
    /// reader has caught up, and the connection goes back to a multishot
    /// receive (a connection that once fell behind is not left paying a
    /// submission per read for life).
    pub fn drained(&self) {
        self.capped.set(false);
    }

    /// Whether the connection may have its receive armed.
    pub fn below_max(&self) -> bool {
        self.held.get() < self.held_max
    }

    /// Buffers the connection holds now.
    #[cfg(test)]
    pub fn held(&self) -> u32 {
        self.held.get()
    }

    /// The receive is armed again: a listing on the ring's waiter list
    /// left from before is stale, and wakes no one.
    pub fn armed(&self) {
        self.pausing.set(false);
        self.listed.set(false);
    }

    /// The reader waits for one of its buffers to come back.
    pub fn wait(&self, waker: &Waker) {
        set_waker(&self.waker, waker);
    }

    pub(crate) fn released(&self) {
        let held = self.held.get();
        debug_assert!(held > 0, "a buffer given back that was not held");
        self.held.set(held.saturating_sub(1));
        if held == self.held_max {
            if let Some(waker) = self.waker.take() {
                waker.wake();
            }
        }
    }
}

fn set_waker(slot: &Cell<Option<Waker>>, waker: &Waker) {
    let kept = match slot.take() {
        Some(old) if old.will_wake(waker) => old,
        _ => waker.clone(),
    };
    slot.set(Some(kept));
}

impl BufRing {
    /// Maps and registers a ring of `entries` (a power of two, at most
    /// 32768) buffers of `buffer_bytes` each, all handed to the kernel.
    pub fn register(ring: &IoUring, entries: u16, buffer_bytes: usize) -> io::Result<BufRing> {
        if !entries.is_power_of_two() || entries > 1 << 15 || buffer_bytes == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let ring_bytes = usize::from(entries) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use and unmapped in Drop.
        let mapping = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
                -1,
                0,
            )
        };
        if mapping == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // The buffers are mapped populated: every page resident now. The
        // kernel picks buffers round the ring, so within the first few
        // hundred receives it writes into all of them anyway; left to fault
        // in then, they cost page faults on the receive path, and the
        // core's resident memory grew with its first connections by the
        // ring's size (8 MiB at the default 512 x 16 KiB), which is no cost
        // of a connection.
        let buffers_bytes = usize::from(entries) * buffer_bytes;
        // SAFETY: as for the ring's mapping above.
        let buffers = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                buffers_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_ANONYMOUS | libc::MAP_PRIVATE | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if buffers == libc::MAP_FAILED {
            let error = io::Error::last_os_error();
            // SAFETY: the ring's mapping made above, known to nobody yet.
            unsafe { libc::munmap(mapping, ring_bytes) };
            return Err(error);
        }
        let buf_ring = BufRing {
            ring: mapping.cast(),
            ring_bytes,
            entries,
            tail: Cell::new(0),
            buffers: buffers.cast(),
            buffer_bytes,
            lent: Cell::new(0),
            lent_bids: RefCell::new(vec![0; usize::from(entries).div_ceil(64)]),
            waiters: RefCell::new(VecDeque::new()),
            waits_total: Cell::new(0),
            held_max_total: Cell::new(0),
            spilled_total: Cell::new(0),
            capped_receives_total: Cell::new(0),
        };
        // SAFETY: `mapping` is page-aligned and holds `entries` entries; the
        // kernel pins its pages at registration, and the executor closes the
        // io_uring (after reaping or cancelling every receive that may still
        // pick a buffer) before this BufRing and its buffers are dropped.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(mapping as u64, entries, BUF_GROUP, 0)?;
        }
        for bid in 0..entries {
            buf_ring.push(bid);
        }
        buf_ring.publish();
        Ok(buf_ring)
    }

    /// The first `len` bytes of buffer `bid`, as the kernel filled them.
    ///
    /// # Safety
    /// Buffer `bid` is lent out: a completion picked it and it has not been
    /// given back, so the kernel does not write it while the slice lives.
    pub unsafe fn slice(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < self.entries, "buffer {bid} of {}", self.entries);
        let start = usize::from(bid) * self.buffer_bytes;
        // SAFETY: `start + len.min(buffer_bytes)` is inside the allocation
        // (`bid < entries`); the caller promises the kernel leaves these
        // bytes alone until the buffer is given back.
        unsafe { std::slice::from_raw_parts(self.buffers.add(start), len.min(self.buffer_bytes)) }
    }

    /// A completion took buffer `bid` from the kernel.
    pub fn taken(&self, bid: u16) {
        let lent = self.lent.get();
        debug_assert!(lent < self.entries, "more buffers lent than exist");
        self.lent.set(lent + 1);
        let (word, bit) = (usize::from(bid) / 64, 1u64 << (bid % 64));
        if let Some(word) = self.lent_bids.borrow_mut().get_mut(word) {
            *word |= bit;
        }
    }

    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Whether the kernel has a buffer to fill.
    pub fn has_free(&self) -> bool {
        self.lent.get() < self.entries
    }

    /// Parks `quota`'s connection until a buffer comes back (counted).
    pub fn wait(&self, quota: &Rc<RecvQuota>, waker: &Waker) {
        set_waker(&quota.waker, waker);
        if !quota.listed.replace(true) {
            self.waiters.borrow_mut().push_back(quota.clone());
            self.waits_total.set(self.waits_total.get() + 1);
        }
    }

    /// Gives buffer `bid` back to the kernel, and wakes every connection
    /// waiting for one. Not only the one that has waited longest: which
    /// waiter can use the buffer is not known here. An idle connection
    /// woken alone would arm its receive, take nothing, and use up the
    /// wake, while one whose bytes already sit in its socket stayed parked
    /// with a free buffer in the ring (on a quiet core, until unrelated
    /// traffic returned another). Waiters are listed only while the ring
    /// is empty, so this is the first buffer back: those that find the
    /// ring empty again when they run wait again.
    pub fn give_back(&self, bid: u16) {
        assert!(bid < self.entries, "buffer {bid} of {}", self.entries);
        {
            let mut lent = self.lent_bids.borrow_mut();
            let (word, bit) = (usize::from(bid) / 64, 1u64 << (bid % 64));
            // A bug, not bad input: the ring would lend one buffer to two
            // readers, each reading bytes the kernel writes for the other.
            assert!(lent[word] & bit != 0, "buffer {bid} given back twice");
            lent[word] &= !bit;
        }
        self.push(bid);
        self.publish();
        self.lent.set(self.lent.get().saturating_sub(1));
        if self.waiters.borrow().is_empty() {
            return;
        }
        // Woken with the list not borrowed: a waker may be the last owner
        // of a task, whose drop may give buffers back.
        let mut waiters = self.waiters.take();
        while let Some(quota) = waiters.pop_front() {
            // A listing its connection dropped, or one left from before it
            // armed its receive, wakes no one.
            if quota.listed.replace(false) && Rc::strong_count(&quota) > 1 {
                let waker = quota.waker.take();
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
        }
        // Keep the list's allocation for the next time the ring runs dry.
        let mut list = self.waiters.borrow_mut();
        if list.is_empty() {
            std::mem::swap(&mut *list, &mut waiters);
        }
    }

    /// The counters of this ring.
    pub fn stats(&self) -> RecvBufferStats {
        RecvBufferStats {
            buffers: self.entries,
            lent: self.lent.get(),
            waiting: self.waiters.borrow().len(),
            recv_buffer_waits_total: self.waits_total.get(),
            held_max_total: self.held_max_total.get(),
            recv_buffer_spilled_total: self.spilled_total.get(),
            capped_receives_total: self.capped_receives_total.get(),
        }
    }

    /// Copies the first `len` bytes of lent buffer `bid` out and gives the
    /// buffer back (counted): a connection past its share keeps its bytes
    /// but not the ring's buffer.
    ///
    /// # Safety
    /// Buffer `bid` is lent out (a completion picked it) and nothing else
    /// will give it back.
    pub unsafe fn spill(&self, bid: u16, len: usize) -> Vec<u8> {
        // SAFETY: the caller's promise: the buffer is lent, so the kernel
        // leaves it alone until the give-back below.
        let bytes = unsafe { self.slice(bid, len) }.to_vec();
        self.spilled_total.set(self.spilled_total.get() + 1);
        self.give_back(bid);
        bytes
    }

    /// A one-buffer receive was armed for a connection past its bound.
    pub fn count_capped_receive(&self) {
        self.capped_receives_total
            .set(self.capped_receives_total.get() + 1);
    }

    /// A connection reached its `held_max` and had its receive stopped.
    pub fn count_held_max(&self) {
        self.held_max_total.set(self.held_max_total.get() + 1);
    }

    fn push(&self, bid: u16) {
        let tail = self.tail.get();
        let index = usize::from(tail & (self.entries - 1));
        let addr = self.buffers as u64 + (usize::from(bid) * self.buffer_bytes) as u64;
        // SAFETY: `index` < `entries`, so the entry is inside the mapping;
        // the kernel reads entries only up to the published tail, and this
        // one is past it until `publish`.
        unsafe {
            let entry = &mut *self.ring.add(index);
            entry.set_addr(addr);
            entry.set_len(self.buffer_bytes as u32);
            entry.set_bid(bid);
        }
        self.tail.set(tail.wrapping_add(1));
    }

    fn publish(&self) {
        // SAFETY: the tail field overlays the first entry's reserved field
        // in the live mapping; the kernel reads it with acquire semantics,
        // so the release store orders the entry writes before it.
        unsafe {
            let tail = BufRingEntry::tail(self.ring) as *const AtomicU16;
            (*tail).store(self.tail.get(), Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `register`; the ring
        // that knew it is closed by now (see `register`).
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_bytes);
        }
        let bytes = usize::from(self.entries) * self.buffer_bytes;
        // SAFETY: the buffers' mapping made in `register`, of `bytes` bytes,
        // and no longer known to the kernel (see above).
        unsafe {
            libc::munmap(self.buffers.cast(), bytes);
        }
    }
}

/// A snapshot of a core's receive buffer ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvBufferStats {
    /// Buffers in the ring.
    pub buffers: u16,
    /// Buffers filled and not yet given back (lent to readers, or waiting
    /// to be read).
    pub lent: u16,
    /// Connections waiting now for a buffer to come back.
    pub waiting: usize,
    /// Times a connection's receive found the ring empty and waited (the
    /// `recv_buffer_waits_total` metric).
    pub recv_buffer_waits_total: u64,
    /// Times a connection held `recv_buffers_per_conn_max` buffers and had
    /// its receive stopped until its reader gave some back.
    pub held_max_total: u64,
    /// Receives past a connection's `recv_buffers_per_conn_max` (a burst
    /// one kernel pass took) whose bytes were copied out of the ring.
    pub recv_buffer_spilled_total: u64,
    /// One-buffer receives armed for connections that reached their bound
    /// and have not caught up since (a submission per read).
    pub capped_receives_total: u64,
}

/// Received bytes: a buffer lent from the ring (back to it when dropped),
/// or, past the connection's share, a copy of its own.
pub struct RecvBuf {
    pub(crate) data: RecvData,
    pub(crate) len: usize,
}

pub(crate) enum RecvData {
    Lent {
        ring: Rc<BufRing>,
        quota: Rc<RecvQuota>,
        bid: u16,
    },
    Spilled(Vec<u8>),
}

impl RecvBuf {
    /// The bytes received.
    pub fn as_slice(&self) -> &[u8] {
        match &self.data {
            // SAFETY: this RecvBuf holds buffer `bid` lent out until it
            // drops, which gives it back; the slice cannot outlive `self`.
            RecvData::Lent { ring, bid, .. } => unsafe { ring.slice(*bid, self.len) },
            RecvData::Spilled(bytes) => bytes,
        }
    }

    /// How many bytes were received.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was received (the peer closed).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for RecvBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        if let RecvData::Lent { ring, quota, bid } = &self.data {
            quota.released();
            ring.give_back(*bid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn woken(count: &Count) -> usize {
        count.0.load(Ordering::SeqCst)
    }

    /// Every page of the buffers is resident once the ring is registered,
    /// before any receive wrote into one (they are mapped populated).
    #[test]
    fn the_buffers_are_resident_from_the_start() {
        let ring = IoUring::new(8).expect("ring");
        let (entries, buffer_bytes) = (64u16, 16 * 1024);
        let bufs = BufRing::register(&ring, entries, buffer_bytes).expect("buffer ring");
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
        let start = bufs.buffers as usize;
        let bytes = usize::from(entries) * buffer_bytes;
        assert_eq!(start % page, 0, "a mapping starts on a page");
        let pages = bytes.div_ceil(page);
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is the buffers' mapping, and `resident` has a
        // byte per page of it.
        let done = unsafe { libc::mincore(bufs.buffers.cast(), bytes, resident.as_mut_ptr()) };
        assert_eq!(done, 0, "mincore: {}", io::Error::last_os_error());
        let missing = resident.iter().filter(|&&flags| flags & 1 == 0).count();
        assert_eq!(
            missing, 0,
            "{missing} of {pages} pages of the buffers not resident"
        );
    }

    /// A received buffer holds what the kernel wrote, and goes back to the
    /// kernel when dropped.
    #[test]
    fn a_receive_fills_a_buffer_that_is_lent_and_given_back() {
        use io_uring::{cqueue, opcode, types};
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let mut ring = IoUring::new(8).expect("ring");
        let bufs = Rc::new(BufRing::register(&ring, 4, 16).expect("buffer ring"));
        let (mut writer, reader) = std::os::unix::net::UnixStream::pair().expect("pair");
        let recv = opcode::RecvMulti::new(types::Fd(reader.as_raw_fd()), BUF_GROUP).build();
        // SAFETY: the receive writes only into the buffer ring's buffers.
        unsafe { ring.submission().push(&recv).expect("room") };
        writer.write_all(b"hello").expect("write");
        ring.submit_and_wait(1).expect("reap");
        let cqe = ring.completion().next().expect("completion");
        assert_eq!(cqe.result(), 5);
        let bid = cqueue::buffer_select(cqe.flags()).expect("a buffer");
        bufs.taken(bid);
        assert_eq!(bufs.stats().lent, 1);
        let quota = RecvQuota::new(4);
        assert!(!quota.filled());
        let buf = RecvBuf {
            data: RecvData::Lent {
                ring: bufs.clone(),
                quota: quota.clone(),
                bid,
            },
            len: 5,
        };
        assert_eq!(&*buf, b"hello");
        drop(buf);
        assert_eq!(bufs.stats().lent, 0);
        assert_eq!(quota.held.get(), 0);
        // Past a connection's share, the bytes are copied and the buffer
        // goes back at once.
        writer.write_all(b"again").expect("write");
        ring.submit_and_wait(1).expect("reap");
        let cqe = ring.completion().next().expect("completion");
        let bid = cqueue::buffer_select(cqe.flags()).expect("a buffer");
        bufs.taken(bid);
        // SAFETY: the completion picked `bid`; nothing else gives it back.
        let bytes = unsafe { bufs.spill(bid, 5) };
        assert_eq!(bytes, b"again");
        assert_eq!(bufs.stats().lent, 0);
        assert_eq!(bufs.stats().recv_buffer_spilled_total, 1);
        drop(ring);
    }

    /// The first buffer back wakes every waiter (which one can use it is
    /// not known here); one whose connection is gone is skipped, one whose
    /// receive was armed since is not woken, and each wait is counted once.
    #[test]
    fn a_buffer_back_wakes_every_waiter() {
        let ring = IoUring::new(8).expect("ring");
        let bufs = BufRing::register(&ring, 2, 16).expect("buffer ring");
        bufs.taken(0);
        bufs.taken(1);
        assert!(!bufs.has_free());
        let (first_count, first_waker) = counter();
        let (gone_count, gone_waker) = counter();
        let (armed_count, armed_waker) = counter();
        let (last_count, last_waker) = counter();
        let first = RecvQuota::new(4);
        let gone = RecvQuota::new(4);
        let armed = RecvQuota::new(4);
        let last = RecvQuota::new(4);
        bufs.wait(&first, &first_waker);
        bufs.wait(&first, &first_waker);
        bufs.wait(&gone, &gone_waker);
        bufs.wait(&armed, &armed_waker);
        bufs.wait(&last, &last_waker);
        drop(gone);
        armed.armed();
        assert_eq!(bufs.stats().waiting, 4);
        assert_eq!(
            bufs.stats().recv_buffer_waits_total,
            4,
            "a second wait of one is not counted"
        );
        bufs.give_back(0);
        assert!(bufs.has_free());
        assert_eq!((woken(&first_count), woken(&last_count)), (1, 1));
        assert_eq!(woken(&gone_count), 0, "a dropped connection is skipped");
        assert_eq!(woken(&armed_count), 0, "a stale listing wakes no one");
        assert_eq!(bufs.stats().waiting, 0);
        // Listed again after its wake: counted, and woken by the next.
        bufs.wait(&first, &first_waker);
        bufs.give_back(1);
        assert_eq!((woken(&first_count), woken(&last_count)), (2, 1));
        drop(ring);
    }

    /// A buffer given back twice would be lent to two readers at once: it
    /// stops the core rather than pass silently.
    #[test]
    #[should_panic(expected = "given back twice")]
    fn a_buffer_given_back_twice_is_refused() {
        let ring = IoUring::new(8).expect("ring");
        let bufs = BufRing::register(&ring, 2, 16).expect("buffer ring");
        bufs.taken(1);
        bufs.give_back(1);
        bufs.give_back(1);
    }

    /// A connection's share: at its bound it asks (once) to stop and stays
    /// capped; a buffer back below the bound wakes its reader.
    #[test]
    fn a_connection_at_its_bound_is_stopped_once_and_woken_below_it() {
        let quota = RecvQuota::new(2);
        assert!(!quota.filled());
        assert!(quota.below_max());
        assert!(quota.filled(), "the second buffer reaches the bound");
        assert!(
            !quota.filled(),
            "a straggler past it asks for no second stop"
        );
        assert!(quota.capped());
        assert!(!quota.below_max());
        let (count, waker) = counter();
        quota.wait(&waker);
        quota.released();
        assert_eq!(woken(&count), 0, "still at the bound");
        quota.released();
        assert_eq!(woken(&count), 1);
        assert!(quota.below_max());
        quota.armed();
        assert!(quota.capped(), "capped until its socket is drained");
        quota.drained();
        assert!(!quota.capped());
    }
}
