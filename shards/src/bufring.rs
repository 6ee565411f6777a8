//! The core's provided-buffer ring: receive buffers the kernel picks from
//! when a multishot receive completes, so one armed receive per connection
//! serves every read without a new submission or a buffer per connection.
//!
//! A received buffer is lent to the reader as a [`RecvBuf`] and goes back
//! to the ring when dropped. The ring's entries live in one page-aligned
//! mapping the kernel reads; the buffers in one heap allocation, held by a
//! raw pointer: the kernel writes into any buffer it owns at any time, so
//! no reference ever spans the allocation, only the buffer lent out.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU16, Ordering};

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
    /// `entries * buffer_bytes` bytes from `Box::into_raw`, freed in Drop.
    buffers: *mut u8,
    buffer_bytes: usize,
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
        let buf_ring = BufRing {
            ring: mapping.cast(),
            ring_bytes,
            entries,
            tail: Cell::new(0),
            buffers: Box::into_raw(
                vec![0u8; usize::from(entries) * buffer_bytes].into_boxed_slice(),
            )
            .cast(),
            buffer_bytes,
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

    /// Gives buffer `bid` back to the kernel.
    pub fn give_back(&self, bid: u16) {
        debug_assert!(bid < self.entries);
        self.push(bid);
        self.publish();
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
        // SAFETY: the allocation made in `register`, of `bytes` bytes, and
        // no longer known to the kernel (see above).
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.buffers,
                bytes,
            )));
        }
    }
}

/// A received buffer lent to a reader; back to the ring when dropped.
pub struct RecvBuf {
    pub(crate) ring: Rc<BufRing>,
    pub(crate) bid: u16,
    pub(crate) len: usize,
}

impl RecvBuf {
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: this RecvBuf holds buffer `bid` lent out until it drops,
        // which gives it back; the slice cannot outlive `self`.
        unsafe { self.ring.slice(self.bid, self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

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
        self.ring.give_back(self.bid);
    }
}
