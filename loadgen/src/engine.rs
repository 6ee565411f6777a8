//! The io_uring driver of one generator thread: it owns the sockets, keeps
//! one recv posted per open connection, batches every connection's new
//! requests into at most one send each, connects (and reconnects) without
//! blocking, and enters the kernel once per loop (`submit_with_args`:
//! submit everything queued, wait for at least one completion or a
//! timeout). It moves bytes only; `conn.rs` decides what they mean and the
//! runner decides where a closed connection goes next.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use wire::layers::ClientLayers;

use io_uring::{opcode, squeue, types, IoUring};

use crate::conn::{Conn, Event, Window};
use crate::socket::{new_socket, prepare, sockaddr};
use crate::stats::Stats;

/// Submission queue entries at most (the ring is sized to the connections,
/// two operations each, up to this).
pub const RING_ENTRIES_MAX: u32 = 4096;

/// The kernel's largest completion queue (2 x IORING_MAX_ENTRIES).
const CQ_ENTRIES_MAX: u32 = 65_536;

const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;
const OP_CONNECT: u64 = 2;
const OP_CONNECT_TIMEOUT: u64 = 3;
const OP_BITS: u32 = 2;

/// Whether a slot has a socket, and what it is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Connected: requests and answers flow.
    Open,
    /// Shut down, waiting for its posted operations before it is closed.
    /// `by_peer`: the peer closed it or it failed, rather than the runner.
    Closing { by_peer: bool },
    /// No socket; the runner decides whether and where to connect.
    Down,
    /// A connect is posted.
    Connecting,
}

/// What happened to a slot's socket, for the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// The socket is closed and gone; the slot is `Down`.
    Down { by_peer: bool },
    /// A connect succeeded; the slot is `Open` with an empty stream.
    Connected,
    /// A connect failed (errno, `ECANCELED` when it timed out).
    ConnectFailed { errno: i32 },
}

/// The kernel reads these while a connect is posted; boxed so their address
/// stays put until both its completions are in.
struct PendingConnect {
    socket: TcpStream,
    addr: libc::sockaddr_storage,
    addr_len: libc::socklen_t,
    timeout: types::Timespec,
    /// The connect's result, once its completion came.
    result: Option<i32>,
}

/// The TLS and WebSocket layers of every connection (`--tls`,
/// `--websocket`): each connection, and each reconnect, gets fresh ones.
#[derive(Clone)]
pub struct LayerSpec {
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// The `Host` of the WebSocket upgrade.
    pub websocket_host: Option<String>,
}

impl LayerSpec {
    fn make(&self, seed: u32) -> io::Result<Box<Layered>> {
        let websocket = self.websocket_host.as_deref().map(|host| (host, seed));
        let layers = ClientLayers::new(self.tls.clone(), websocket).map_err(io::Error::other)?;
        Ok(Box::new(Layered {
            layers,
            recv: vec![0; LAYER_RECV_BYTES],
            opened: Vec::new(),
            opened_at: 0,
        }))
    }
}

/// Bytes one receive of a layered connection may take.
const LAYER_RECV_BYTES: usize = 16 * 1024;

/// A layered connection's state: the layers, the buffer the kernel
/// receives wire bytes into, and protocol bytes opened but not yet taken
/// by the connection's decoder.
struct Layered {
    layers: ClientLayers,
    recv: Vec<u8>,
    opened: Vec<u8>,
    opened_at: usize,
}

impl Layered {
    /// Opens the `n` wire bytes the kernel received into `recv` and feeds
    /// the protocol bytes to `conn`'s decoder; false when the layers or
    /// the decoder refused them.
    #[inline]
    fn open_into(
        &mut self,
        n: usize,
        conn: &mut Conn,
        now_ns: u64,
        window: Window,
        stats: &mut Stats,
        events: &mut Vec<Event>,
    ) -> bool {
        let Layered {
            layers,
            recv,
            opened,
            opened_at,
        } = self;
        let opened_ok = layers.open(&recv[..n], opened).is_ok();
        // The opened bytes go to the decoder as its buffer takes
        // them, each part decoded before the next.
        let mut fed_ok = opened_ok;
        while fed_ok && *opened_at < opened.len() {
            let spare = conn.read_buf();
            if spare.is_empty() {
                fed_ok = false;
                break;
            }
            let take = spare.len().min(opened.len() - *opened_at);
            spare[..take].copy_from_slice(&opened[*opened_at..*opened_at + take]);
            *opened_at += take;
            conn.advance(take);
            fed_ok = conn.receive(now_ns, window, stats, events).is_ok();
        }
        opened.clear();
        *opened_at = 0;
        fed_ok
    }
}

/// One connection and the buffers the kernel may be using for it.
pub struct Slot {
    pub conn: Conn,
    layered: Option<Box<Layered>>,
    socket: Option<TcpStream>,
    link: Link,
    /// Bytes handed to the kernel; untouched until the send completes.
    sending: Vec<u8>,
    sent_len: usize,
    send_posted: bool,
    recv_posted: bool,
    connect: Option<Box<PendingConnect>>,
    connect_posted: bool,
    timeout_posted: bool,
    /// Queued for a send at the next `pump`.
    flush_queued: bool,
    /// Listed in `Engine::touched`.
    touched: bool,
}

impl Slot {
    pub fn idle(&self) -> bool {
        !self.send_posted && !self.recv_posted && !self.connect_posted && !self.timeout_posted
    }

    #[cfg(test)]
    pub fn link(&self) -> Link {
        self.link
    }

    pub fn is_open(&self) -> bool {
        self.link == Link::Open
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
    pub link_events: Vec<(usize, LinkEvent)>,
    scratch_events: Vec<Event>,
    completions: Vec<(u64, i32)>,
    layers: Option<LayerSpec>,
}

impl Engine {
    /// Every connection from now on speaks through `spec`'s layers.
    pub fn set_layers(&mut self, spec: Option<LayerSpec>) {
        self.layers = spec;
    }

    fn fresh_layers(&self, index: usize) -> io::Result<Option<Box<Layered>>> {
        self.layers
            .as_ref()
            .map(|spec| spec.make(0x9e37_79b9 ^ index as u32))
            .transpose()
    }

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
            link_events: Vec::new(),
            scratch_events: Vec::new(),
            completions: Vec::with_capacity(cq_entries as usize),
            layers: None,
        })
    }

    /// Adds a connection whose socket is already connected (setup).
    pub fn add(&mut self, conn: Conn, stream: TcpStream) -> io::Result<()> {
        prepare(&stream)?;
        let layered = self.fresh_layers(self.slots.len())?;
        let has_layers = layered.is_some();
        self.slots.push(Slot {
            conn,
            layered,
            socket: Some(stream),
            link: Link::Open,
            sending: Vec::with_capacity(4096),
            sent_len: 0,
            send_posted: false,
            recv_posted: false,
            connect: None,
            connect_posted: false,
            timeout_posted: false,
            flush_queued: false,
            touched: false,
        });
        if has_layers {
            // The ClientHello or the upgrade request leaves first.
            self.queue_flush(self.slots.len() - 1);
        }
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

    /// Closes an open slot's socket on purpose; a `LinkEvent::Down` with
    /// `by_peer: false` follows once the kernel is done with it.
    pub fn close(&mut self, index: usize) {
        if self.slots[index].link == Link::Open {
            self.begin_close(index, false);
        }
    }

    /// Cuts an open slot's connection abortively, as a lost network would
    /// (`--cut-every`): no goodbye, and a reset rather than a FIN once the
    /// socket is closed, so the server learns of it only as an error. A
    /// `LinkEvent::Down` with `by_peer: false` follows, as for `close`.
    pub fn cut(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if slot.link != Link::Open {
            return;
        }
        slot.link = Link::Closing { by_peer: false };
        if let Some(socket) = &slot.socket {
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // Shutting the read side makes the posted recv complete and
            // sends nothing; a send still posted needs the write side shut
            // too (a FIN goes ahead of the reset then).
            let how = if slot.send_posted {
                libc::SHUT_RDWR
            } else {
                libc::SHUT_RD
            };
            // SAFETY: setsockopt(2) with a `linger` that lives across the
            // call and its true size, and shutdown(2), on a socket fd this
            // slot owns; they only change socket state (the reset is sent
            // when the socket is dropped in `settle`).
            unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    std::ptr::addr_of!(linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
                libc::shutdown(socket.as_raw_fd(), how);
            }
        }
        self.settle(index);
    }

    fn begin_close(&mut self, index: usize, by_peer: bool) {
        let slot = &mut self.slots[index];
        slot.link = Link::Closing { by_peer };
        if let Some(socket) = &slot.socket {
            // SAFETY: shutdown(2) on a socket fd this slot owns; it only
            // changes socket state and makes posted operations complete.
            unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
        }
        self.settle(index);
    }

    /// Finishes a close or a connect once no operation references the
    /// slot's socket or buffers any more.
    fn settle(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if !slot.idle() {
            return;
        }
        match slot.link {
            Link::Closing { by_peer } => {
                slot.socket = None;
                slot.sending.clear();
                slot.sent_len = 0;
                slot.link = Link::Down;
                self.link_events.push((index, LinkEvent::Down { by_peer }));
            }
            Link::Connecting => {
                let Some(pending) = slot.connect.take() else {
                    return;
                };
                match pending.result {
                    Some(0) => {
                        slot.socket = Some(pending.socket);
                        slot.link = Link::Open;
                        self.link_events.push((index, LinkEvent::Connected));
                        match self.fresh_layers(index) {
                            Ok(layered) => {
                                let has_layers = layered.is_some();
                                self.slots[index].layered = layered;
                                if has_layers {
                                    self.queue_flush(index);
                                }
                            }
                            Err(_) => self.begin_close(index, true),
                        }
                    }
                    result => {
                        slot.link = Link::Down;
                        let errno = result.map_or(libc::ECANCELED, |r| -r);
                        self.link_events
                            .push((index, LinkEvent::ConnectFailed { errno }));
                    }
                }
            }
            Link::Open | Link::Down => {}
        }
    }

    /// Starts connecting a `Down` slot to `addr`, giving up after
    /// `timeout_ns`. The outcome comes as a `LinkEvent`.
    pub fn connect(&mut self, index: usize, addr: SocketAddr, timeout_ns: u64) -> io::Result<()> {
        assert_eq!(self.slots[index].link, Link::Down, "connect on a live slot");
        assert!(self.slots[index].idle());
        let socket = match new_socket(&addr) {
            Ok(socket) => socket,
            Err(error) => {
                // No socket, no operation: report it the way a failed
                // connect is reported.
                let errno = error.raw_os_error().unwrap_or(libc::EIO);
                self.link_events
                    .push((index, LinkEvent::ConnectFailed { errno }));
                return Ok(());
            }
        };
        let (addr_storage, addr_len) = sockaddr(&addr);
        let mut pending = Box::new(PendingConnect {
            socket,
            addr: addr_storage,
            addr_len,
            timeout: types::Timespec::new()
                .sec(timeout_ns / 1_000_000_000)
                .nsec((timeout_ns % 1_000_000_000) as u32),
            result: None,
        });
        let fd = pending.socket.as_raw_fd();
        let connect = opcode::Connect::new(
            types::Fd(fd),
            std::ptr::addr_of!(pending.addr).cast::<libc::sockaddr>(),
            pending.addr_len,
        )
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(user_data(index, OP_CONNECT));
        let timeout = opcode::LinkTimeout::new(std::ptr::addr_of_mut!(pending.timeout))
            .build()
            .user_data(user_data(index, OP_CONNECT_TIMEOUT));
        let slot = &mut self.slots[index];
        slot.connect = Some(pending);
        slot.connect_posted = true;
        slot.timeout_posted = true;
        slot.link = Link::Connecting;
        slot.sending.clear();
        slot.sent_len = 0;
        self.push_linked(&[connect, timeout])
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
            if !self.slots[i].recv_posted && self.slots[i].link == Link::Open {
                self.post_recv(i)?;
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
            let index = (user_data >> OP_BITS) as usize;
            match user_data & ((1 << OP_BITS) - 1) {
                OP_RECV => self.on_recv(index, result, now, window, stats),
                OP_SEND => {
                    if result > 0 && window.contains(now) {
                        stats.bytes_out += result as u64;
                    }
                    self.on_send(index, result)?
                }
                OP_CONNECT => {
                    let slot = &mut self.slots[index];
                    slot.connect_posted = false;
                    if let Some(pending) = &mut slot.connect {
                        pending.result = Some(result);
                    }
                    self.settle(index);
                }
                _ => {
                    self.slots[index].timeout_posted = false;
                    self.settle(index);
                }
            }
        }
        completions.clear();
        self.completions = completions;
        Ok(())
    }

    fn push(&mut self, entry: io_uring::squeue::Entry) -> io::Result<()> {
        self.push_linked(std::slice::from_ref(&entry))
    }

    /// Pushes entries as one group (a linked chain must not be split
    /// across two submissions).
    fn push_linked(&mut self, entries: &[io_uring::squeue::Entry]) -> io::Result<()> {
        loop {
            // SAFETY: every entry built here points into a buffer owned by a
            // `Slot` (or its boxed `PendingConnect`) that stays alive and
            // untouched until its completion (`recv_posted`, `send_posted`,
            // `connect_posted` and `timeout_posted` guard them; `shutdown`
            // waits or leaks).
            let pushed = unsafe { self.ring.submission().push_multiple(entries) };
            if pushed.is_ok() {
                return Ok(());
            }
            // Queue full: hand what is queued to the kernel and retry.
            self.ring.submit()?;
        }
    }

    fn post_recv(&mut self, index: usize) -> io::Result<()> {
        let slot = &mut self.slots[index];
        let Some(socket) = &slot.socket else {
            return Ok(());
        };
        let fd = socket.as_raw_fd();
        let buf = match &mut slot.layered {
            Some(layered) => &mut layered.recv[..],
            None => slot.conn.read_buf(),
        };
        if buf.is_empty() {
            // The decoder failed earlier (counted there); the connection
            // is done.
            self.begin_close(index, true);
            return Ok(());
        }
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let entry = opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), len)
            .build()
            .user_data(user_data(index, OP_RECV));
        slot.recv_posted = true;
        self.push(entry)
    }

    fn post_send(&mut self, index: usize) -> io::Result<()> {
        let slot = &mut self.slots[index];
        if slot.send_posted || slot.link != Link::Open {
            return Ok(());
        }
        let Some(socket) = &slot.socket else {
            return Ok(());
        };
        let fd = socket.as_raw_fd();
        if slot.sending.len() == slot.sent_len {
            slot.sending.clear();
            slot.sent_len = 0;
            // Take everything written since the last send: one syscall-free
            // batch per connection per loop.
            match &mut slot.layered {
                None => std::mem::swap(&mut slot.sending, slot.conn.out_mut()),
                Some(layered) => {
                    // One seal per batch: one WebSocket message, one TLS
                    // write.
                    let out = slot.conn.out_mut();
                    layered.layers.seal(out, &mut slot.sending);
                    out.clear();
                }
            }
            if slot.sending.is_empty() {
                return Ok(());
            }
        }
        let rest = &slot.sending[slot.sent_len..];
        let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(types::Fd(fd), rest.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(index, OP_SEND));
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
        if slot.link != Link::Open {
            self.settle(index);
            return;
        }
        if result == -libc::EAGAIN || result == -libc::EINTR {
            return; // reposted by the next pump
        }
        if result <= 0 {
            self.begin_close(index, true);
            return;
        }
        let n = result as usize;
        if window.contains(now_ns) {
            stats.bytes_in += n as u64;
        }
        let received = match &mut slot.layered {
            None => {
                slot.conn.advance(n);
                slot.conn
                    .receive(now_ns, window, stats, &mut self.scratch_events)
                    .is_ok()
            }
            Some(layered) => layered.open_into(
                n,
                &mut slot.conn,
                now_ns,
                window,
                stats,
                &mut self.scratch_events,
            ),
        };
        for event in self.scratch_events.drain(..) {
            self.events.push((index, event));
        }
        if !received {
            self.begin_close(index, true);
            return;
        }
        let slot = &mut self.slots[index];
        // A connection may queue a request while it reads (the next setup
        // request after an answer), besides what its layers want to write.
        if !slot.conn.out_mut().is_empty()
            || slot
                .layered
                .as_ref()
                .is_some_and(|layered| layered.layers.wants_write())
        {
            self.queue_flush(index);
        }
        self.touch(index);
    }

    fn on_send(&mut self, index: usize, result: i32) -> io::Result<()> {
        let slot = &mut self.slots[index];
        slot.send_posted = false;
        if slot.link != Link::Open {
            self.settle(index);
            return Ok(());
        }
        if result == -libc::EAGAIN || result == -libc::EINTR {
            return self.post_send(index);
        }
        if result <= 0 {
            self.begin_close(index, true);
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
            let sockets = slot
                .socket
                .iter()
                .chain(slot.connect.as_ref().map(|p| &p.socket));
            for socket in sockets {
                // SAFETY: shutdown(2) on a socket fd this slot owns; it only
                // changes socket state and makes pending operations complete
                // (a connect in progress is aborted).
                unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
            }
            if slot.link == Link::Open {
                slot.link = Link::Closing { by_peer: false };
            }
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
            // Ops still in flight own their slots' memory until their
            // completions, which will not be reaped: the slots are leaked,
            // never freed under the kernel.
            #[allow(clippy::mem_forget)]
            std::mem::forget(slots);
        }
    }
}

fn user_data(index: usize, op: u64) -> u64 {
    ((index as u64) << OP_BITS) | op
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
