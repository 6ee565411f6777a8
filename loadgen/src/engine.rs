//! The io_uring driver of one generator thread: it owns the sockets, keeps
//! one recv posted per connection, batches every connection's new frames
//! into at most one send each, and enters the kernel once per loop
//! (`submit_with_args`: submit everything queued, wait for at least one
//! completion or a timeout). It moves bytes only; `conn.rs` decides what
//! they mean.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use io_uring::{opcode, types, IoUring};

use crate::conn::{Conn, Event, Window};
use crate::stats::Stats;

/// Submission queue entries at most (the ring is sized to the connections,
/// two operations each, up to this).
pub const RING_ENTRIES_MAX: u32 = 4096;

/// The kernel's largest completion queue (2 x IORING_MAX_ENTRIES).
const CQ_ENTRIES_MAX: u32 = 65_536;

const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;

/// One connection and the buffers the kernel may be using for it.
pub struct Slot {
    pub conn: Conn,
    stream: TcpStream,
    /// Bytes handed to the kernel; untouched until the send completes.
    sending: Vec<u8>,
    sent_len: usize,
    send_posted: bool,
    recv_posted: bool,
    /// Queued for a send at the next `pump`.
    flush_queued: bool,
    /// Listed in `Engine::touched`.
    touched: bool,
    /// The socket failed or the peer closed; nothing more is posted.
    dead: bool,
}

impl Slot {
    pub fn idle(&self) -> bool {
        !self.send_posted && !self.recv_posted
    }

    pub fn is_open(&self) -> bool {
        !self.dead
    }
}

pub struct Engine {
    ring: IoUring,
    pub slots: Vec<Slot>,
    /// Slots with new bytes in `conn.out`.
    flush: Vec<usize>,
    /// Slots that received answers (or were given work) since the driver
    /// last looked, each once, so a loop refills only those.
    touched: Vec<usize>,
    pub events: Vec<(usize, Event)>,
    scratch_events: Vec<Event>,
    completions: Vec<(u64, i32)>,
}

impl Engine {
    pub fn new(connections: usize) -> io::Result<Engine> {
        let want = u32::try_from(connections * 2 + 8).unwrap_or(u32::MAX);
        let entries = want.next_power_of_two().min(RING_ENTRIES_MAX);
        // The completion queue should hold every operation that can be in
        // flight at once (two per connection); past the kernel's limit,
        // overflowed completions wait in the kernel (IORING_FEAT_NODROP)
        // and are never lost.
        let cq_entries = want.next_power_of_two().clamp(entries * 2, CQ_ENTRIES_MAX);
        let ring = IoUring::builder()
            .setup_cqsize(cq_entries)
            .setup_coop_taskrun()
            .setup_single_issuer()
            .build(entries)
            .or_else(|_| IoUring::builder().setup_cqsize(cq_entries).build(entries))?;
        Ok(Engine {
            ring,
            slots: Vec::with_capacity(connections),
            flush: Vec::with_capacity(connections),
            touched: Vec::with_capacity(connections),
            events: Vec::new(),
            scratch_events: Vec::new(),
            completions: Vec::with_capacity(cq_entries as usize),
        })
    }

    pub fn add(&mut self, conn: Conn, stream: TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        // Non-blocking sockets let io_uring poll them instead of parking a
        // kernel worker thread per blocked recv.
        stream.set_nonblocking(true)?;
        self.slots.push(Slot {
            conn,
            stream,
            sending: Vec::with_capacity(4096),
            sent_len: 0,
            send_posted: false,
            recv_posted: false,
            flush_queued: false,
            touched: false,
            dead: false,
        });
        Ok(())
    }

    /// Marks a slot as having new frames in `conn.out`.
    pub fn queue_flush(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if !slot.flush_queued {
            slot.flush_queued = true;
            self.flush.push(index);
        }
    }

    /// Lists a slot for the driver's next look (once, however often).
    pub fn touch(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if !slot.touched {
            slot.touched = true;
            self.touched.push(index);
        }
    }

    /// Moves the touched slots into `into` (cleared first), in order; the
    /// engine's list starts empty again. Swapping keeps both allocations.
    pub fn take_touched(&mut self, into: &mut Vec<usize>) {
        into.clear();
        std::mem::swap(into, &mut self.touched);
        for &index in into.iter() {
            self.slots[index].touched = false;
        }
    }

    /// Posts pending sends and missing recvs, enters the kernel once
    /// (waiting at most `wait_ns`, or not at all when 0), then handles every
    /// completion. `stats` and `window` go to the connections' answers.
    pub fn pump(
        &mut self,
        wait_ns: u64,
        now_ns: impl Fn() -> u64,
        window: Window,
        stats: &mut Stats,
    ) -> io::Result<()> {
        for i in std::mem::take(&mut self.flush) {
            self.slots[i].flush_queued = false;
            self.post_send(i)?;
        }
        for i in 0..self.slots.len() {
            if !self.slots[i].recv_posted && !self.slots[i].dead {
                self.post_recv(i, stats)?;
            }
        }
        let timespec = types::Timespec::new()
            .sec(wait_ns / 1_000_000_000)
            .nsec((wait_ns % 1_000_000_000) as u32);
        let args = types::SubmitArgs::new().timespec(&timespec);
        let want = usize::from(wait_ns > 0);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        let now = now_ns();
        let mut completions = std::mem::take(&mut self.completions);
        completions.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(user_data, result) in &completions {
            let index = (user_data >> 1) as usize;
            if user_data & 1 == OP_RECV {
                self.on_recv(index, result, now, window, stats);
            } else {
                self.on_send(index, result, stats)?;
            }
        }
        completions.clear();
        self.completions = completions;
        Ok(())
    }

    fn push(&mut self, entry: io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry built here points into a buffer owned by a
            // `Slot` that stays alive and untouched until its completion
            // (`recv_posted` / `send_posted` guard them; `shutdown` waits).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok(());
            }
            // Queue full: hand what is queued to the kernel and retry.
            self.ring.submit()?;
        }
    }

    fn post_recv(&mut self, index: usize, stats: &mut Stats) -> io::Result<()> {
        let slot = &mut self.slots[index];
        let fd = slot.stream.as_raw_fd();
        let buf = slot.conn.read_buf();
        if buf.is_empty() {
            // The decoder failed earlier; its connection is done.
            slot.dead = true;
            stats.connections_lost += 1;
            return Ok(());
        }
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let entry = opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), len)
            .build()
            .user_data(((index as u64) << 1) | OP_RECV);
        slot.recv_posted = true;
        self.push(entry)
    }

    fn post_send(&mut self, index: usize) -> io::Result<()> {
        let slot = &mut self.slots[index];
        if slot.send_posted || slot.dead {
            return Ok(());
        }
        if slot.sending.len() == slot.sent_len {
            slot.sending.clear();
            slot.sent_len = 0;
            // Take everything written since the last send: one syscall-free
            // batch per connection per loop.
            std::mem::swap(&mut slot.sending, slot.conn.out_mut());
            if slot.sending.is_empty() {
                return Ok(());
            }
        }
        let rest = &slot.sending[slot.sent_len..];
        let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(types::Fd(slot.stream.as_raw_fd()), rest.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(((index as u64) << 1) | OP_SEND);
        slot.send_posted = true;
        self.push(entry)
    }

    fn on_recv(
        &mut self,
        index: usize,
        result: i32,
        now_ns: u64,
        window: Window,
        stats: &mut Stats,
    ) {
        let slot = &mut self.slots[index];
        slot.recv_posted = false;
        if slot.dead {
            return;
        }
        if result == -libc::EAGAIN || result == -libc::EINTR {
            return; // reposted by the next pump
        }
        if result <= 0 {
            slot.dead = true;
            stats.connections_lost += 1;
            return;
        }
        let n = result as usize;
        slot.conn.advance(n);
        let received = slot
            .conn
            .receive(now_ns, window, stats, &mut self.scratch_events);
        for event in self.scratch_events.drain(..) {
            self.events.push((index, event));
        }
        if received.is_err() {
            slot.dead = true;
            stats.connections_lost += 1;
            return;
        }
        self.touch(index);
    }

    fn on_send(&mut self, index: usize, result: i32, stats: &mut Stats) -> io::Result<()> {
        let slot = &mut self.slots[index];
        slot.send_posted = false;
        if slot.dead {
            return Ok(());
        }
        if result == -libc::EAGAIN || result == -libc::EINTR {
            return self.post_send(index);
        }
        if result <= 0 {
            slot.dead = true;
            stats.connections_lost += 1;
            return Ok(());
        }
        slot.sent_len += result as usize;
        assert!(slot.sent_len <= slot.sending.len());
        // The rest of a short write, or whatever was queued meanwhile.
        self.post_send(index)
    }

    /// Whether any operation still references a slot's buffers.
    pub fn busy(&self) -> bool {
        self.slots.iter().any(|s| !s.idle())
    }

    /// Shuts every socket down so posted operations complete, then waits
    /// (at most `deadline_ns`) for them. Buffers of operations that did not
    /// complete are leaked rather than freed under the kernel.
    pub fn shutdown(mut self, now_ns: impl Fn() -> u64, deadline_ns: u64) {
        for slot in &mut self.slots {
            slot.dead = true;
            // SAFETY: shutdown(2) on a socket fd this slot owns; it only
            // changes socket state and makes pending operations complete.
            unsafe { libc::shutdown(slot.stream.as_raw_fd(), libc::SHUT_RDWR) };
        }
        let mut scratch = Stats::default();
        while self.busy() && now_ns() < deadline_ns {
            if self
                .pump(10_000_000, &now_ns, Window::NONE, &mut scratch)
                .is_err()
            {
                break;
            }
        }
        // Answers that raced the end are not measured: `scratch` is dropped.
        if self.busy() {
            let slots = std::mem::take(&mut self.slots);
            std::mem::forget(slots);
        }
    }
}
