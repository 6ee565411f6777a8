//! One connection's task: it reads and handles the client's frames and
//! writes its session's outbox, in one hand-written future.
//!
//! One task rather than a reader's and a writer's: a connection then costs
//! one future of 224 bytes, one task header and one slot, where two
//! async tasks cost two futures of 350 bytes each, their headers and their
//! join state (an idle connection's memory is mostly this). And the answers
//! a receive queues leave in the same poll, right after the read side is
//! done with it: nobody is woken for them. A push from elsewhere (another
//! core's answer, a room message, a kick) wakes the task through the
//! outbox; a receive wakes it through its multishot receive.
//!
//! Each poll runs the read side first (every receive already completed,
//! one read batch each), then the write side (at most one send in the
//! kernel; the next batch waits for it only once it has bytes). The task
//! ends when both sides have.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use shards::net::{SendOp, TcpStream};
use shards::RecvBuf;
use wire::client::{FrameDecoder, FrameError, FrameRef, Peer};

use super::GatewayHandle;
use crate::answer_gate::Passage;
use crate::clock;
use crate::gateway::core::CloseReason;
use crate::gateway::outbox::{Outbox, OutboxState, WriterStep};
use crate::gateway::transport::tls::HandshakeKind;
use crate::gateway::transport::{Expiry, Layers, Opened, Refusal, SetupDeadlines, Transport};

/// A connection's reads and writes; see the module documentation.
pub(super) struct ConnectionTask {
    gateway: GatewayHandle,
    session_id: u64,
    outbox: Rc<Outbox>,
    transport: Transport,
    stream: TcpStream,
    decoder: FrameDecoder,
    read: ReadSide,
    // The write side's state between polls, flat in the task (a nested
    // struct's padding would push the task past its size class, below).
    /// The batch taken from the outbox, waiting for the send before it
    /// (with `step`); else an empty buffer the next batch is taken into.
    batch: Vec<u8>,
    /// What the outbox said last, while the send before it runs.
    step: Option<WriterStep>,
    /// The one send in the kernel. Not awaited until the next batch (or
    /// the end) needs the socket: by then it has nearly always completed,
    /// and its completion woke nobody.
    in_flight: Option<SendOp>,
    /// The layers' goodbyes are sealed (and in flight, if any).
    finishing: bool,
    /// The socket is shut down: nothing more is written.
    written: bool,
    /// The answer gate's fence count when the batch was taken (wrapping):
    /// a batch of answers that waited across a fence never leaves.
    batch_fences: u32,
}

/// A connection's read side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadSide {
    /// It runs: until the end of the stream, an error, a protocol
    /// violation, or the gateway closed the session.
    Reading,
    /// It ended; the writer may still be sending what the session owes.
    Ended,
    /// It ended while the writer still waited, and the connection is
    /// watched so that it cannot wait for good (`closing.rs`).
    EndedWatched,
}

/// The most bytes a connection's task takes: every connection has one, and
/// 192 is an allocator size class (the next is 224). The stream's slot and
/// file indexes and the decoder's bound are kept small for it.
const CONNECTION_TASK_BYTES_MAX: usize = 192;
const _: () = assert!(std::mem::size_of::<ConnectionTask>() <= CONNECTION_TASK_BYTES_MAX);

impl ConnectionTask {
    /// Registers the session of a connection accepted on a listener that
    /// speaks `transport` (advertised as `advertised_as`), and returns the
    /// task that serves it.
    pub fn open(
        gateway: GatewayHandle,
        stream: TcpStream,
        transport: Transport,
        advertised_as: crate::gateway_addresses::Transport,
    ) -> ConnectionTask {
        let _ = stream.set_nodelay(true);
        let config = &gateway.0.config;
        let outbox = Rc::new(Outbox::with_bounds(
            config.send_queue_max as usize,
            config.send_queue_bytes_max as usize,
        ));
        let session_id = gateway.0.state.borrow_mut().open_session_via(
            outbox.clone(),
            advertised_as,
            Instant::now(),
        );
        if let Transport::Layered(layers) = &transport {
            if layers.borrow().is_handshaking() {
                admit_handshake(&gateway, &outbox, layers);
            }
            shards::spawn(setup_watch(
                gateway.clone(),
                Rc::downgrade(&outbox),
                Rc::downgrade(layers),
            ))
            .detach();
        }
        let decoder =
            FrameDecoder::new(Peer::Client, gateway.0.config.body_max_bytes).accept_version_2();
        ConnectionTask {
            gateway,
            session_id,
            outbox,
            transport,
            stream,
            decoder,
            read: ReadSide::Reading,
            batch: Vec::new(),
            step: None,
            in_flight: None,
            finishing: false,
            written: false,
            batch_fences: 0,
        }
    }

    /// Handles every receive already completed; stops reading at the end.
    fn poll_read(&mut self, cx: &mut Context<'_>) {
        loop {
            // Closed by the gateway, or resumed on another connection:
            // nothing more is read as the session's.
            if !self.holds_session() {
                return self.end_read(None);
            }
            let received = match self.stream.poll_recv(cx) {
                Poll::Pending => return,
                Poll::Ready(Ok(Some(received))) => received,
                Poll::Ready(Ok(None) | Err(_)) => {
                    return self.end_read(Some(CloseReason::PeerClosed))
                }
            };
            // The one clock reading of the batch: deadlines, idleness and
            // the router's clock all use it.
            let now = Instant::now();
            if let Err(reason) = self.on_receive(received, now) {
                return self.end_read(reason);
            }
            // Closed by the gateway meanwhile (kick, slow reader): the
            // write side shuts the socket down; nothing more to read.
            if !self.holds_session() {
                return self.end_read(None);
            }
        }
    }

    /// Whether the session is open and this connection is still its.
    fn holds_session(&self) -> bool {
        self.gateway
            .0
            .state
            .borrow()
            .holds_connection(self.session_id, &self.outbox)
    }

    /// Handles one receive as one read batch: its answers leave in one
    /// send. `Err` ends the read side (with the reason to close the
    /// session for, or `None` if the gateway already closed it).
    fn on_receive(&mut self, received: RecvBuf, now: Instant) -> Result<(), Option<CloseReason>> {
        // A plain connection's frames are decoded where the receive put
        // them; a layered one's, from what its layers opened.
        let opened = match &self.transport {
            Transport::Plain => None,
            Transport::Layered(layers) => Some(open_layers(&self.gateway, layers, &received)?),
        };
        let bytes: &[u8] = opened.as_deref().unwrap_or(&received);
        self.outbox.begin_reader_batch();
        let decoded = decode_frames(
            &self.gateway,
            self.session_id,
            &mut self.decoder,
            bytes,
            now,
        );
        if let (Some(buf), Transport::Layered(layers)) = (opened, &self.transport) {
            layers.borrow_mut().give_back_opened(buf);
        }
        // The buffer goes back to the core's ring before anything waits.
        drop(received);
        self.outbox.end_reader_batch();
        if let Err(error) = decoded {
            return Err(protocol_violation(&self.gateway, self.session_id, error));
        }
        self.gateway.flush_notices();
        Ok(())
    }

    fn end_read(&mut self, reason: Option<CloseReason>) {
        self.read = ReadSide::Ended;
        // Nothing more is read: what arrives meanwhile must not take the
        // core's receive buffers while the writer finishes.
        self.stream.stop_receiving();
        if let Transport::Layered(layers) = &self.transport {
            if layers.borrow().is_handshaking() {
                // Ended before its handshake finished: its slot is free.
                release_handshake(&self.gateway, layers);
            }
        }
        if let Some(reason) = reason {
            self.gateway.0.state.borrow_mut().close_connection(
                self.session_id,
                &self.outbox,
                reason,
            );
            self.gateway.flush_notices();
        }
    }

    /// Drains the outbox into the socket, one send per batch, until the
    /// outbox closes (`Ready` once the socket is shut down).
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let Some(step) = self.next_step(cx) else {
                return Poll::Pending;
            };
            if step == WriterStep::Abort {
                // Queued frames are dropped; a send in flight is left to
                // the kernel (its buffer stays with the operation).
                return Poll::Ready(());
            }
            // The batch, or the end, needs the socket: the send before must
            // be done.
            let mut spare = match self.previous_send(cx, step) {
                Flow::Go(spare) => spare,
                Flow::Again => continue,
                Flow::Wait => return Poll::Pending,
                Flow::Done => return Poll::Ready(()),
            };
            spare.clear();
            if step == WriterStep::Finish {
                match self.send_goodbyes(spare) {
                    Flow::Again => continue,
                    _ => return Poll::Ready(()),
                }
            }
            match self.gate_batch(cx, step) {
                Flow::Go(()) | Flow::Again => {}
                Flow::Wait => return Poll::Pending,
                Flow::Done => return Poll::Ready(()),
            }
            self.send_batch(spare);
        }
    }

    /// The step the writer resumes, or the next batch the outbox gives;
    /// `None` while there is nothing to write.
    fn next_step(&mut self, cx: &mut Context<'_>) -> Option<WriterStep> {
        if let Some(step) = self.step.take() {
            return Some(step);
        }
        match self.outbox.poll_take(cx, &mut self.batch) {
            // A layered transport may owe the peer bytes with no answer
            // queued (a handshake message, a pong): that is a batch too.
            Poll::Pending if self.transport.wants_write() => Some(WriterStep::Write),
            Poll::Pending => None,
            Poll::Ready(step) => {
                self.batch_fences = self.gateway.0.answer_gate.fences() as u32;
                Some(step)
            }
        }
    }

    /// Waits for the send in flight, if any: its buffer comes back for the
    /// next one. `step` is kept to resume with.
    fn previous_send(&mut self, cx: &mut Context<'_>, step: WriterStep) -> Flow<Vec<u8>> {
        let Some(send) = self.in_flight.as_mut() else {
            return Flow::Go(Vec::new());
        };
        let (sent, buf) = match Pin::new(send).poll(cx) {
            Poll::Ready(done) => done,
            Poll::Pending => {
                self.step = Some(step);
                // A client that stopped reading cannot hold the task: an
                // abort of the outbox ends the wait.
                return self.wait_unless_aborted(cx);
            }
        };
        self.in_flight = None;
        match sent {
            Ok(n) if n == buf.len() => Flow::Go(buf),
            Ok(0) | Err(_) => {
                self.outbox.abort();
                Flow::Done
            }
            Ok(n) => {
                // Cut short (the connection failed part way): the rest goes
                // first, as a send of its own; a failure shows on it.
                self.in_flight = Some(self.stream.start_send(buf[n..].to_vec()));
                self.step = Some(step);
                Flow::Again
            }
        }
    }

    /// The end: everything queued before the close is sent; then the
    /// layers' goodbyes (an alert or close_notify, a close frame), whose
    /// send ends the writer (`Again` while it is in flight).
    fn send_goodbyes(&mut self, mut spare: Vec<u8>) -> Flow<()> {
        if self.finishing {
            return Flow::Done;
        }
        self.finishing = true;
        if let Transport::Layered(layers) = &self.transport {
            layers.borrow_mut().finish(&mut spare);
        }
        if spare.is_empty() {
            return Flow::Done;
        }
        self.in_flight = Some(self.stream.start_send(spare));
        self.step = Some(WriterStep::Finish);
        Flow::Again
    }

    /// Successful answers leave only while the lease holds
    /// (`answer_gate`): a pause since they were made waits for a
    /// heartbeat to renew it, and a fence drops them.
    fn gate_batch(&mut self, cx: &mut Context<'_>, step: WriterStep) -> Flow<()> {
        if self.batch.is_empty() || !self.outbox.batch_holds_answers() {
            return Flow::Go(());
        }
        match self.pass_answer_gate(cx) {
            Poll::Ready(Passage::Open) => Flow::Go(()),
            Poll::Ready(Passage::Fenced) => {
                self.outbox.abort();
                Flow::Done
            }
            Poll::Pending => {
                self.step = Some(step);
                self.wait_unless_aborted(cx)
            }
        }
    }

    fn wait_unless_aborted<T>(&mut self, cx: &mut Context<'_>) -> Flow<T> {
        if self.outbox.poll_aborted(cx).is_ready() {
            Flow::Done
        } else {
            Flow::Wait
        }
    }

    /// Sends the batch; the sent buffer (`spare`) carries the batch after
    /// this one.
    fn send_batch(&mut self, spare: Vec<u8>) {
        let wire = match &self.transport {
            Transport::Plain => std::mem::replace(&mut self.batch, spare),
            Transport::Layered(layers) => {
                // One seal per batch: one WebSocket message, one write into
                // rustls.
                let mut spare = spare;
                layers.borrow_mut().seal(&self.batch, &mut spare);
                self.batch.clear();
                spare
            }
        };
        if wire.is_empty() {
            self.batch = wire;
            return;
        }
        self.in_flight = Some(self.stream.start_send(wire));
    }
}

/// What a part of the writer's loop says to do next.
enum Flow<T> {
    /// Go on with this.
    Go(T),
    /// Start the loop again.
    Again,
    /// Wait to be woken.
    Wait,
    /// The writer is done.
    Done,
}

impl ConnectionTask {
    /// Whether the batch's answers may leave now (see `answer_gate`).
    fn pass_answer_gate(&self, cx: &mut Context<'_>) -> Poll<Passage> {
        let gate = &self.gateway.0.answer_gate;
        // The fence count at the take, widened back: fewer than 2^32
        // fences pass while one batch waits.
        let seen =
            gate.fences() - u64::from((gate.fences() as u32).wrapping_sub(self.batch_fences));
        let waits = gate.waits_begun();
        let passage = gate.poll_pass(cx, seen, clock::now_ms());
        if gate.waits_begun() != waits {
            self.gateway.0.metrics.gateway.answers_held.inc();
        }
        passage
    }
}

impl Future for ConnectionTask {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let task = self.get_mut();
        if task.read == ReadSide::Reading {
            task.poll_read(cx);
        }
        if !task.written && task.poll_write(cx).is_ready() {
            task.written = true;
            // shutdown(2) ends the read side's pending receive and tells
            // the peer we are done; the descriptor is closed when the
            // stream drops.
            task.stream.shutdown();
        }
        if task.read == ReadSide::Ended && !task.written {
            // The writer waits with the read side done: a peer that stopped
            // reading must not hold the connection for good.
            task.read = ReadSide::EndedWatched;
            task.gateway
                .0
                .closing
                .borrow_mut()
                .watch(Rc::downgrade(&task.outbox), Instant::now());
        }
        if task.read == ReadSide::Reading || !task.written {
            return Poll::Pending;
        }
        task.gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
        Poll::Ready(())
    }
}

/// Opens one receive of a layered connection into protocol bytes (the
/// layers' buffer: give it back). `Err` when the layers refuse it and the
/// connection closes; what they owe the peer (an alert, the HTTP refusal,
/// a close frame) goes out before the socket is shut down.
fn open_layers(
    gateway: &GatewayHandle,
    layers: &RefCell<Layers>,
    received: &[u8],
) -> Result<Vec<u8>, Option<CloseReason>> {
    let opened = layers.borrow_mut().open(received);
    note_progress(gateway, layers);
    if let Opened::Close(refusal) = opened {
        count_refusal(gateway, refusal);
        return Err(Some(CloseReason::PeerClosed));
    }
    Ok(layers.borrow_mut().take_opened())
}

/// Admits a TLS connection into the core's pending handshakes; at
/// `tls_handshakes_max` one is closed (and counted) to make room (see
/// `pending.rs`), so connections that never speak cannot lock real
/// clients out.
fn admit_handshake(gateway: &GatewayHandle, outbox: &Rc<Outbox>, layers: &Rc<RefCell<Layers>>) {
    // A connection whose ClientHello has not arrived goes before one
    // whose handshake runs (a real client's, most likely).
    let silent = |(_, pending): &(Weak<Outbox>, Weak<RefCell<Layers>>)| {
        pending.upgrade().is_none_or(|layers| {
            layers
                .try_borrow()
                .is_ok_and(|layers| !layers.tls_hello_answered())
        })
    };
    let evicted = gateway
        .0
        .handshakes
        .borrow_mut()
        .admit((Rc::downgrade(outbox), Rc::downgrade(layers)), silent);
    if let Some(oldest) = evicted.and_then(|(outbox, _)| outbox.upgrade()) {
        if oldest.state() != OutboxState::Aborted {
            gateway.0.metrics.gateway.tls_refused_evicted.inc();
            // The write side shuts the socket down; the read side then
            // sees the end of the stream and closes the session.
            oldest.abort();
        }
    }
}

/// The handshake of the connection whose layers are `layers` ended
/// (finished, failed, or the connection closed): its slot is free.
fn release_handshake(gateway: &GatewayHandle, layers: &RefCell<Layers>) {
    let layers: *const RefCell<Layers> = layers;
    gateway
        .0
        .handshakes
        .borrow_mut()
        .release(|(_, pending)| std::ptr::eq(pending.as_ptr(), layers));
}

/// Closes a connection that misses a deadline of its setup (see
/// [`Layers::setup_deadline`]): the whole ClientHello within
/// `tls_client_hello_timeout_ms`, the handshake within
/// `tls_handshake_timeout_ms`, the WebSocket upgrade request within
/// `websocket_upgrade_timeout_ms`. A peer that sends nothing, or a byte at
/// a time, would otherwise hold its slot until the idle sweep. Holds the
/// connection only weakly: one that ended sooner is gone when the timer
/// fires.
async fn setup_watch(gateway: GatewayHandle, outbox: Weak<Outbox>, layers: Weak<RefCell<Layers>>) {
    let config = &gateway.0.config;
    let deadlines = SetupDeadlines {
        client_hello: Duration::from_millis(config.tls_client_hello_timeout_ms),
        handshake: Duration::from_millis(config.tls_handshake_timeout_ms),
        upgrade: Duration::from_millis(config.websocket_upgrade_timeout_ms),
    };
    let expiry = loop {
        let Some(layers) = layers.upgrade() else {
            return;
        };
        let Some((at, expiry)) = layers.borrow().setup_deadline(&deadlines) else {
            return;
        };
        drop(layers);
        if Instant::now() >= at {
            break expiry;
        }
        shards::sleep_until(at).await;
    };
    let Some(outbox) = outbox.upgrade() else {
        return;
    };
    if outbox.state() == OutboxState::Aborted {
        return;
    }
    let stats = &gateway.0.metrics.gateway;
    match expiry {
        Expiry::ClientHello => stats.tls_refused_client_hello_timeout.inc(),
        Expiry::Handshake => stats.tls_refused_handshake_timeout.inc(),
        Expiry::Upgrade => stats.websocket_upgrade_timeouts.inc(),
    }
    // The write side shuts the socket down; the read side then sees the
    // end of the stream and closes the session.
    outbox.abort();
}

/// Handles every frame of `bytes` (one receive's protocol bytes), keeping
/// a cut frame in `decoder` for the next.
fn decode_frames(
    gateway: &GatewayHandle,
    session_id: u64,
    decoder: &mut FrameDecoder,
    bytes: &[u8],
    now: Instant,
) -> Result<(), FrameError> {
    let mut rest: &[u8] = bytes;
    while !rest.is_empty() {
        // Frames whole in the received buffer are handled where they lie:
        // no copy, and a connection whose frames arrive whole never
        // allocates a decoding buffer of its own.
        while let Some(frame) = decoder.next_frame_in(&mut rest)? {
            handle_frame(gateway, session_id, frame, now);
        }
        if rest.is_empty() {
            break;
        }
        // A frame cut by the receive (or behind one): the decoder keeps it
        // until the rest arrives. It takes what fits; after the frames
        // below are drained, it always has room again (or has failed).
        let taken = decoder.extend(rest);
        rest = &rest[taken..];
        while let Some(frame) = decoder.next_frame()? {
            handle_frame(gateway, session_id, frame, now);
        }
    }
    Ok(())
}

/// Counts a finished handshake (freeing its slot) and an upgrade.
fn note_progress(gateway: &GatewayHandle, layers: &RefCell<Layers>) {
    let stats = &gateway.0.metrics.gateway;
    let done = layers.borrow_mut().take_handshake_done();
    if let Some(kind) = done {
        release_handshake(gateway, layers);
        match kind {
            HandshakeKind::Full => stats.tls_handshakes_full.inc(),
            HandshakeKind::Resumed => stats.tls_handshakes_resumed.inc(),
        }
    }
    if layers.borrow_mut().take_upgraded() {
        stats.websocket_upgrades.inc();
    }
}

fn count_refusal(gateway: &GatewayHandle, refusal: Refusal) {
    let stats = &gateway.0.metrics.gateway;
    let counter = match refusal {
        Refusal::TlsPlaintext => &stats.tls_refused_plaintext,
        Refusal::TlsBadHandshake => &stats.tls_refused_bad_handshake,
        Refusal::TlsError => &stats.tls_refused_tls_error,
        Refusal::WebSocketUpgrade(400) => &stats.websocket_refused_400,
        Refusal::WebSocketUpgrade(403) => &stats.websocket_refused_403,
        Refusal::WebSocketUpgrade(404) => &stats.websocket_refused_404,
        Refusal::WebSocketUpgrade(_) => &stats.websocket_refused_431,
        Refusal::WebSocketProtocol(1003) => &stats.websocket_closed_1003,
        Refusal::WebSocketProtocol(1007) => &stats.websocket_closed_1007,
        Refusal::WebSocketProtocol(1009) => &stats.websocket_closed_1009,
        Refusal::WebSocketProtocol(_) => &stats.websocket_closed_1002,
        Refusal::PeerClosed => return,
    };
    counter.inc();
}

/// Hands one client frame to the gateway's state machine, and what it
/// lets through to its service.
fn handle_frame(gateway: &GatewayHandle, session_id: u64, frame: FrameRef<'_>, now: Instant) {
    let ingress = gateway.0.state.borrow_mut().on_keyed_request(
        session_id,
        frame.header,
        frame.request_key,
        frame.body,
        now,
    );
    if let Some(ingress) = ingress {
        gateway.deliver(ingress, now);
    }
}

/// The stream cannot be resynchronised: the session is closed (counted
/// by the state machine); the read side ends with nothing more to report.
fn protocol_violation(
    gateway: &GatewayHandle,
    session_id: u64,
    error: FrameError,
) -> Option<CloseReason> {
    gateway
        .0
        .state
        .borrow_mut()
        .protocol_violation(session_id, error);
    gateway.flush_notices();
    None
}
