//! TCP on the core's ring: a listener with a multishot accept, and a
//! stream with one multishot receive into the provided-buffer ring and
//! owned-buffer sends. A stream's receives and sends name its socket by
//! its index in the ring's registered file table when it has one
//! (`files.rs`), by its descriptor otherwise.
//!
//! Descriptors are closed through the ring (`IORING_OP_CLOSE`) after any
//! operation still queued for them, so a descriptor number is never reused
//! under a submission that has not reached the kernel yet.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::rc::Rc;
use std::task::Poll;

use io_uring::{cqueue, opcode, types};
use socket2::{Domain, SockAddr, Socket, Type};

use crate::bufring::{RecvBuf, RecvData, RecvQuota, BUF_GROUP};
use crate::executor;
use crate::reactor::{MultiKind, Reactor, SendChain};

mod claim;

pub use claim::wait_until_free;

/// Connections a listener lets wait for `accept` in the kernel.
const LISTEN_BACKLOG: i32 = 1024;

fn result(res: i32) -> io::Result<u32> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as u32)
    }
}

/// Closes `fd` through the ring, after what is already queued for it.
fn close_in_ring(fd: RawFd) {
    let close = opcode::Close::new(types::Fd(fd)).build();
    // SAFETY: a close points at no memory.
    let queued = executor::try_with_reactor(|reactor| unsafe { reactor.submit_ignored(close) });
    if queued.is_none() {
        // Off a core (the executor has ended): nothing can be queued for it.
        // SAFETY: `fd` is owned by the caller, which gives it up here.
        unsafe {
            libc::close(fd);
        }
    }
}

/// A TCP listener served by a multishot accept. It stays on the core that
/// made it (it is not `Send`): its accept is a slot of that core's ring,
/// an index that means nothing on another core.
pub struct TcpListener {
    fd: RawFd,
    local: SocketAddr,
    accept: std::cell::Cell<Option<usize>>,
    _on_this_core: std::marker::PhantomData<*const ()>,
}

impl TcpListener {
    /// Binds `address` with SO_REUSEADDR and SO_REUSEPORT, so every core
    /// can listen on the same address and the kernel spreads connections.
    /// Call [`wait_until_free`] once before the first core binds: this
    /// bind also joins another process's listeners on the address.
    pub fn bind(address: SocketAddr) -> io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&address.into())?;
        socket.listen(LISTEN_BACKLOG)?;
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("listener without an IP address"))?;
        Ok(TcpListener {
            fd: socket.into_raw_fd(),
            local,
            accept: std::cell::Cell::new(None),
            _on_this_core: std::marker::PhantomData,
        })
    }

    /// Serves a listener bound and listening already (one reserved before
    /// the cores started, so its port was known to advertise).
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        Ok(TcpListener {
            fd: listener.into_raw_fd(),
            local,
            accept: std::cell::Cell::new(None),
            _on_this_core: std::marker::PhantomData,
        })
    }

    /// Where the listener is bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next accepted connection.
    pub async fn accept(&self) -> io::Result<TcpStream> {
        poll_fn(|cx| {
            executor::with_reactor(|reactor| loop {
                let index = match self.accept.get() {
                    Some(index) => index,
                    None => {
                        let entry = opcode::AcceptMulti::new(types::Fd(self.fd))
                            .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
                            .build();
                        // SAFETY: an accept without an address points at
                        // no memory.
                        let index = unsafe { reactor.submit_multi(entry, MultiKind::Accept, None) };
                        self.accept.set(Some(index));
                        index
                    }
                };
                match reactor.poll_multi(index, cx) {
                    Poll::Pending => return Poll::Pending,
                    // The kernel ended the multishot (it may, under memory
                    // pressure): arm a new one.
                    Poll::Ready(None) => self.accept.set(None),
                    Poll::Ready(Some((res, _))) => {
                        return Poll::Ready(
                            result(res).map(|fd| TcpStream::on_core(fd as RawFd, reactor)),
                        )
                    }
                }
            })
        })
        .await
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        if let Some(index) = self.accept.take() {
            executor::try_with_reactor(|reactor| reactor.orphan(index, None));
        }
        close_in_ring(self.fd);
    }
}

/// A TCP connection on this core. One task receives at a time; sends may
/// come from any task on the core, and reach the socket whole and in the
/// order they were started.
pub struct TcpStream {
    fd: RawFd,
    /// The socket's index in this core's registered file table.
    file: Option<FileIndex>,
    /// The receive's operation slot while one is armed.
    recv: std::cell::Cell<Option<SlotIndex>>,
    /// Orders the stream's sends: one in the kernel at a time.
    sends: Rc<SendChain>,
    /// The stream's share of the core's receive buffers.
    quota: Rc<RecvQuota>,
    /// A stream's file index belongs to the ring of the core that made it.
    _on_this_core: std::marker::PhantomData<*const ()>,
}

/// Builds the operation `$op::new(<the stream's socket>, args...)`: by its
/// registered file index if it has one, by descriptor otherwise (the two
/// are different types to the io-uring crate).
macro_rules! on_socket {
    ($stream:expr, $op:ident ( $($arg:expr),* )) => {
        match $stream.file {
            Some(index) => opcode::$op::new(types::Fixed(index.get()), $($arg),*),
            None => opcode::$op::new(types::Fd($stream.fd), $($arg),*),
        }
    };
}

impl TcpStream {
    /// Takes ownership of socket `fd` on this core, entering it in the
    /// core's registered file table if there is room.
    fn on_core(fd: RawFd, reactor: &Reactor) -> TcpStream {
        TcpStream {
            fd,
            file: reactor.register_file(fd).map(FileIndex::new),
            recv: std::cell::Cell::new(None),
            sends: Rc::new(SendChain::default()),
            quota: RecvQuota::new(reactor.recv_held_max()),
            _on_this_core: std::marker::PhantomData,
        }
    }

    /// Connects to `address` through the ring.
    pub async fn connect(address: SocketAddr) -> io::Result<TcpStream> {
        let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
        socket.set_nonblocking(true)?;
        let stream =
            executor::with_reactor(|reactor| TcpStream::on_core(socket.into_raw_fd(), reactor));
        // Boxed: the kernel reads the address while the connect runs, so it
        // must not move, and stays with the operation if the future drops.
        let address = Box::new(SockAddr::from(address));
        let entry =
            opcode::Connect::new(types::Fd(stream.fd), address.as_ptr(), address.len()).build();
        // SAFETY: the kernel only reads the boxed address, which the
        // operation keeps until its completion.
        let mut op = unsafe { OwnedOp::submit(entry, Some(Box::new(address))) };
        let (res, _) = poll_fn(|cx| op.poll(cx)).await;
        result(res)?;
        Ok(stream)
    }

    /// Whether the socket is in the core's registered file table (else the
    /// table was full, and operations name it by descriptor).
    pub fn is_registered(&self) -> bool {
        self.file.is_some()
    }

    /// Sets `TCP_NODELAY` (no Nagle delay on small writes).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.socket_ref().set_nodelay(nodelay)
    }

    /// Makes the close of this stream (its drop) abortive: the bytes the
    /// kernel still holds to send are discarded and the peer, if it still
    /// hears from this host, sees a reset instead of them. For a
    /// connection given up on (a silent peer) whose requests were already
    /// answered as lost: they must not arrive once the path is back.
    pub fn discard_unsent_on_close(&self) -> io::Result<()> {
        self.socket_ref()
            .set_linger(Some(std::time::Duration::ZERO))
    }

    /// The remote end's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket_ref()
            .peer_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("peer without an IP address"))
    }

    /// This end's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket_ref()
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("socket without an IP address"))
    }

    fn socket_ref(&self) -> socket2::SockRef<'_> {
        socket2::SockRef::from(self)
    }

    /// The next bytes received, in a buffer lent from the core's ring
    /// (return it soon: drop it); `None` at end of stream. A connection
    /// holds at most `recv_buffers_per_conn_max` buffers: while its reader
    /// keeps that many, the next `recv` waits for one of them to drop.
    pub async fn recv(&self) -> io::Result<Option<RecvBuf>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// [`TcpStream::recv`] for a hand-written future: `Pending` registers
    /// `cx`'s waker for the next receive.
    pub fn poll_recv(&self, cx: &mut std::task::Context<'_>) -> Poll<io::Result<Option<RecvBuf>>> {
        executor::with_reactor(|reactor| loop {
            let index = match self.recv.get() {
                Some(index) => index.get(),
                None => match self.arm_recv(reactor, cx) {
                    Some(index) => index,
                    None => return Poll::Pending,
                },
            };
            let (res, flags) = match reactor.poll_multi(index, cx) {
                Poll::Pending => return Poll::Pending,
                // Ended without an error (the kernel may end a multishot
                // after a completion): arm a new one.
                Poll::Ready(None) => {
                    self.recv.set(None);
                    continue;
                }
                Poll::Ready(Some(completion)) => completion,
            };
            if res > 0 {
                if self.quota.capped() && (res as usize) < reactor.bufs.buffer_bytes() {
                    // Less than a buffer: the socket is drained.
                    self.quota.drained();
                }
                let data = match cqueue::buffer_select(flags) {
                    Some(bid) => RecvData::Lent {
                        ring: reactor.bufs.clone(),
                        quota: self.quota.clone(),
                        bid,
                    },
                    None => match reactor.take_spilled(index) {
                        Some(bytes) => RecvData::Spilled(bytes),
                        None => {
                            return Poll::Ready(Err(io::Error::other("receive without a buffer")))
                        }
                    },
                };
                return Poll::Ready(Ok(Some(RecvBuf {
                    data,
                    len: res as usize,
                })));
            }
            // ENOBUFS: the ring ran dry and ended the multishot.
            // ECANCELED: the connection reached its share of the ring
            // (the reactor stopped it). Both re-arm when they can.
            if res == -libc::ENOBUFS || res == -libc::ECANCELED {
                if !cqueue::more(flags) {
                    reactor.orphan(index, None);
                    self.recv.set(None);
                }
                continue;
            }
            // End of stream or an error ends the multishot.
            reactor.orphan(index, None);
            self.recv.set(None);
            return Poll::Ready(if res == 0 {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(-res))
            });
        })
    }

    /// Arms the stream's receive, if it can fill a buffer now: with the
    /// connection under its share of the ring and a buffer in it. Else the
    /// task waits (`None`) for a buffer of its own or of the ring back.
    fn arm_recv(&self, reactor: &Reactor, cx: &mut std::task::Context<'_>) -> Option<usize> {
        if !self.quota.below_max() {
            self.quota.wait(cx.waker());
            return None;
        }
        if !reactor.bufs.has_free() {
            reactor.bufs.wait(&self.quota, cx.waker());
            return None;
        }
        self.quota.armed();
        let entry = if self.quota.capped() {
            reactor.bufs.count_capped_receive();
            // One buffer, and a completion without MORE: the slot ends
            // after it as a multishot's does.
            let len = u32::try_from(reactor.bufs.buffer_bytes()).unwrap_or(u32::MAX);
            on_socket!(self, Recv(std::ptr::null_mut(), len))
                .buf_group(BUF_GROUP)
                .build()
                .flags(io_uring::squeue::Flags::BUFFER_SELECT)
        } else {
            on_socket!(self, RecvMulti(BUF_GROUP)).build()
        };
        // SAFETY: the receive writes only into buffers of the buffer ring,
        // which the kernel owns until it lends one in a completion.
        let index =
            unsafe { reactor.submit_multi(entry, MultiKind::Recv, Some(self.quota.clone())) };
        self.recv.set(Some(SlotIndex::new(index)));
        Some(index)
    }

    /// Sends all of `buf` (one operation: the kernel sends what a short
    /// write left before it completes) after the sends started before it.
    /// The buffer comes back with the result: fewer bytes than `buf` holds
    /// only when the connection failed part way.
    pub async fn send(&self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        self.start_send(buf).await
    }

    /// Queues a send of all of `buf` now, before anything awaits it (see
    /// [`TcpStream::send`]). The returned future
    /// gives the result and the buffer back. A caller that awaits it only
    /// when it has the next thing to send saves a task wake-up per send:
    /// the send usually completes meanwhile, and its completion wakes no
    /// one. Dropping the future leaves the send running, its buffer kept
    /// until the kernel is done with it.
    pub fn start_send(&self, buf: Vec<u8>) -> SendOp {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        // MSG_WAITALL: a short write does not complete the send; the
        // kernel sends the rest when the socket has room, so the next send,
        // held back until this one completes, follows its last byte.
        let entry = on_socket!(self, Send(buf.as_ptr(), len))
            .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
            .build();
        // SAFETY: the kernel only reads `buf`'s heap memory, which stays in
        // place while the operation keeps the Vec (a move of the Vec does
        // not move it) until the send's completion; nothing writes it
        // meanwhile, since the caller gets it back only then.
        let index =
            executor::with_reactor(|reactor| unsafe { reactor.submit_send(entry, &self.sends) });
        SendOp {
            index: Some(SlotIndex::new(index)),
            buf,
            _on_this_core: std::marker::PhantomData,
        }
    }

    /// Sends all of `buf`, again from where a send cut short by an error
    /// stopped (a later send reports the error).
    pub async fn send_all(&self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let mut sent = 0;
        let mut buf = buf;
        while sent < buf.len() {
            let rest = if sent == 0 {
                std::mem::take(&mut buf)
            } else {
                buf[sent..].to_vec()
            };
            let (written, back) = self.send(rest).await;
            if sent == 0 {
                buf = back;
            }
            match written {
                Ok(0) => return (Err(io::ErrorKind::WriteZero.into()), buf),
                Ok(n) => sent += n,
                Err(error) => return (Err(error), buf),
            }
        }
        (Ok(()), buf)
    }

    /// Stops receiving: the receive in the kernel is cancelled (by its
    /// `user_data`, as in `Drop`) and the buffers it filled that nobody
    /// took go back to the core's ring. For a reader that is done while
    /// the writer still sends (a connection closing): each receive that
    /// completed meanwhile would otherwise keep a buffer of the ring, up
    /// to the connection's share, until the stream drops. A later `recv`
    /// arms a new receive.
    pub fn stop_receiving(&self) {
        if let Some(index) = self.recv.take().map(SlotIndex::get) {
            executor::with_reactor(|reactor| reactor.orphan(index, None));
        }
    }

    /// Shuts both directions down now: the peer sees the end of the stream
    /// and this side's pending receive ends.
    pub fn shutdown(&self) {
        // SAFETY: `fd` is the open socket this stream owns; shutdown does
        // not close or invalidate it.
        unsafe {
            libc::shutdown(self.fd, libc::SHUT_RDWR);
        }
    }
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl std::os::fd::AsFd for TcpStream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the descriptor stays open for as long as `self` lives.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Drop for TcpStream {
    /// Ends every operation on the socket in a cost that does not grow
    /// with the core's connections. `shutdown(SHUT_RDWR)` ends them in the
    /// kernel: the receive completes with the end of the stream, a send
    /// blocked on a peer that stopped reading fails, a connect still
    /// retrying its SYN (about 127 s to a black-holed address) is dropped.
    /// The one send the stream has in the kernel is also cancelled by its
    /// `user_data`, a lookup in one bucket of the ring's table of armed
    /// operations. A cancel by descriptor would not do: the kernel serves
    /// it by walking every armed operation of the ring (every connection's
    /// receive), so each close would cost O(connections).
    fn drop(&mut self) {
        let recv = self.recv.take().map(SlotIndex::get);
        let file = self.file.map(FileIndex::get);
        let fd = self.fd;
        let sends = &self.sends;
        executor::try_with_reactor(|reactor| {
            let sending = reactor.send_in_kernel(sends);
            reactor.cancel_queued_sends(sends);
            if sending.is_some() {
                // A send started just before the drop (a last reply) is
                // still in the submission queue: it goes to the kernel
                // before the shutdown, as it would have before a close.
                reactor.submit_now();
            }
            // SAFETY: `fd` is the open socket this stream owns; shutdown
            // does not close or invalidate it.
            let shut = unsafe { libc::shutdown(fd, libc::SHUT_RDWR) } == 0;
            if let Some(index) = recv {
                if shut {
                    reactor.orphan_ending(index);
                } else {
                    // Not connected (reset, or never): cancel it by index.
                    reactor.orphan(index, None);
                }
            }
            if let Some(index) = sending {
                reactor.cancel_op(index);
            }
            if let Some(file) = file {
                reactor.close_file(file);
            }
        });
        close_in_ring(self.fd);
    }
}

/// An operation slot's index in 4 bytes (a `usize` takes 8): a stream and
/// its send keep one each, and every connection's task holds both, so
/// with [`FileIndex`] they keep the task in the 192-byte size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotIndex(u32);

impl SlotIndex {
    fn new(index: usize) -> SlotIndex {
        // A core's slots are bounded by its operations in flight, far
        // below 2^32 (about two per connection, and a core's connections
        // by its open files).
        SlotIndex(u32::try_from(index).expect("fewer than 2^32 operations on a core"))
    }

    fn get(self) -> usize {
        self.0 as usize
    }
}

/// A registered file index in 4 bytes (`Option<u32>` takes 8): stored plus
/// one, so `None` is zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIndex(std::num::NonZeroU32);

impl FileIndex {
    fn new(index: u32) -> FileIndex {
        // A table's indexes are below its length, a u32.
        FileIndex(
            index
                .checked_add(1)
                .and_then(std::num::NonZeroU32::new)
                .expect("a file table holds fewer than 2^32 entries"),
        )
    }

    fn get(self) -> u32 {
        self.0.get() - 1
    }
}

/// A send in flight (see [`TcpStream::start_send`]).
pub struct SendOp {
    /// Its slot, until the completion is taken.
    index: Option<SlotIndex>,
    /// The buffer the kernel reads. Held here unboxed (a connection keeps
    /// its last send until its next batch): boxed into the slot only if
    /// this is dropped while the kernel may still read it.
    buf: Vec<u8>,
    /// The slot index belongs to the ring of the core that made it.
    _on_this_core: std::marker::PhantomData<*const ()>,
}

impl std::future::Future for SendOp {
    type Output = (io::Result<usize>, Vec<u8>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Self::Output> {
        let Some(index) = self.index.map(SlotIndex::get) else {
            unreachable!("a send polled after it completed");
        };
        let (res, _) =
            std::task::ready!(executor::with_reactor(|reactor| reactor.poll_op(index, cx)));
        self.index = None;
        let buf = std::mem::take(&mut self.buf);
        Poll::Ready((result(res).map(|n| n as usize), buf))
    }
}

impl Drop for SendOp {
    fn drop(&mut self) {
        if let Some(index) = self.index.take().map(SlotIndex::get) {
            // The heap memory the kernel reads does not move with the Vec.
            let keep: Box<dyn std::any::Any> = Box::new(std::mem::take(&mut self.buf));
            orphan_or_leak(index, keep);
        }
    }
}

/// Hands `keep`, memory operation `index` lent the kernel, to its slot.
/// Dropped off its core (the executor gone) there is no slot to keep it
/// in, and the ring may outlive the executor (one that did not quiesce is
/// leaked with what the kernel may still touch): the memory is leaked too,
/// never freed under the kernel.
fn orphan_or_leak(index: usize, keep: Box<dyn std::any::Any>) {
    let mut keep = Some(keep);
    executor::try_with_reactor(|reactor| reactor.orphan(index, keep.take()));
    if let Some(keep) = keep {
        #[allow(clippy::mem_forget)] // the point: the kernel may still use it
        std::mem::forget(keep);
    }
}

/// A one-shot operation and the memory it lends the kernel.
struct OwnedOp {
    index: Option<usize>,
    keep: Option<Box<dyn std::any::Any>>,
}

impl OwnedOp {
    /// Submits `entry`, which points only into `keep` (or at nothing).
    ///
    /// # Safety
    /// `entry` follows the reactor's submission rule with `keep` as the
    /// memory kept for it: it points into nothing `keep` does not own.
    unsafe fn submit(
        entry: io_uring::squeue::Entry,
        keep: Option<Box<dyn std::any::Any>>,
    ) -> OwnedOp {
        // SAFETY: the caller's promise; `keep` stays with the operation
        // (handed to its slot if this is dropped first).
        let index = executor::with_reactor(|reactor| unsafe { reactor.submit(entry) });
        OwnedOp {
            index: Some(index),
            keep,
        }
    }

    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> Poll<(i32, u32)> {
        let Some(index) = self.index else {
            unreachable!("an operation polled after it completed");
        };
        let done = executor::with_reactor(|reactor| reactor.poll_op(index, cx));
        if done.is_ready() {
            self.index = None;
        }
        done
    }
}

impl Drop for OwnedOp {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            if let Some(keep) = self.keep.take() {
                orphan_or_leak(index, keep);
            } else {
                executor::try_with_reactor(|reactor| reactor.orphan(index, None));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names `Self: Send` ambiguously: `<T as MaybeSend<_>>::HOLDS` compiles
    /// only for a type that is not `Send` (one impl applies), and fails to
    /// compile for one that is (both apply).
    trait MaybeSend<Which> {
        const HOLDS: () = ();
    }
    impl<T: ?Sized> MaybeSend<()> for T {}
    impl<T: ?Sized + Send> MaybeSend<u8> for T {}

    /// Memory an operation lent the kernel, dropped off its core, is
    /// leaked rather than freed under a ring that may still use it.
    #[test]
    fn lent_memory_dropped_off_its_core_is_not_freed() {
        struct Lent(std::rc::Rc<std::cell::Cell<bool>>);
        impl Drop for Lent {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let freed = std::rc::Rc::new(std::cell::Cell::new(false));
        let op = OwnedOp {
            index: Some(0),
            keep: Some(Box::new(Lent(freed.clone()))),
        };
        drop(op);
        assert!(!freed.get(), "freed while the kernel may still use it");
    }

    /// What holds a slot or a file index of this core's ring cannot be
    /// moved to another core, where the index would name another
    /// operation or file.
    #[test]
    fn ring_bound_handles_stay_on_their_core() {
        let () = <TcpListener as MaybeSend<_>>::HOLDS;
        let () = <TcpStream as MaybeSend<_>>::HOLDS;
        let () = <SendOp as MaybeSend<_>>::HOLDS;
        let () = <RecvBuf as MaybeSend<_>>::HOLDS;
    }
}
