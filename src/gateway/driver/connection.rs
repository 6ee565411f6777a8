//! The connection side of the gateway driver: the listeners' accept
//! loops, each connection's read and write loops and the timers that sweep
//! deadlines and idle sessions.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use shards::net::{SendOp, TcpListener, TcpStream};
use wire::client::{FrameDecoder, FrameError, FrameRef, Peer};

use super::{unix_now_s, GatewayHandle, MAX_IDLE_TICK, MAX_TIMER_TICK};
use crate::gateway::core::CloseReason;
use crate::gateway::outbox::{Outbox, WriterStep};
use crate::gateway::transport::tls::HandshakeKind;
use crate::gateway::transport::{Layers, Listener, Opened, Refusal, Transport};

/// Serves the gateway on `listener` (plain TCP) and on each of `edges`
/// (TLS, WebSocket) until the future is dropped. Also starts the deadline
/// timer and the idle sweep.
pub async fn serve(gateway: GatewayHandle, listener: TcpListener, edges: Vec<(TcpListener, Listener)>) {
    shards::spawn(expire_loop(gateway.clone())).detach();
    shards::spawn(idle_loop(gateway.clone())).detach();
    let mut loops: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>> =
        vec![Box::pin(accept_loop(gateway.clone(), listener, Listener::Plain))];
    for (listener, kind) in edges {
        loops.push(Box::pin(accept_loop(gateway.clone(), listener, kind)));
    }
    // The accept loops never end: wait on all of them until dropped.
    poll_fn(|cx| {
        for accept in &mut loops {
            let _ = accept.as_mut().poll(cx);
        }
        Poll::<()>::Pending
    })
    .await;
}

async fn accept_loop(gateway: GatewayHandle, listener: TcpListener, kind: Listener) {
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                // Out of file descriptors and the like: do not spin.
                shards::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let max = gateway.0.config.sessions_max;
        let admitted = gateway
            .0
            .sessions_open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .is_ok();
        if !admitted {
            gateway.0.metrics.gateway.sessions_refused.inc();
            drop(stream);
            continue;
        }
        if !stream.is_registered() {
            gateway.0.metrics.gateway.sessions_unregistered.inc();
        }
        let transport = match edge_transport(&gateway, &kind) {
            Some(transport) => transport,
            None => {
                drop(stream);
                gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
        };
        let advertised_as = kind.advertised_as();
        shards::spawn(connection(gateway.clone(), stream, transport, advertised_as)).detach();
    }
}

/// The transport of a connection accepted on `kind`; `None` if it must be
/// closed at once (the core runs `tls_handshakes_max` handshakes).
fn edge_transport(gateway: &GatewayHandle, kind: &Listener) -> Option<Transport> {
    if kind.is_tls() {
        if gateway.0.handshakes.get() >= gateway.0.config.tls_handshakes_max {
            gateway.0.metrics.gateway.tls_refused_handshakes_max.inc();
            return None;
        }
        gateway.0.handshakes.set(gateway.0.handshakes.get() + 1);
    }
    match Transport::for_listener(kind, gateway.0.config.body_max_bytes) {
        Ok(transport) => Some(transport),
        Err(error) => {
            tracing::warn!(%error, "cannot start a TLS connection");
            if kind.is_tls() {
                gateway.0.handshakes.set(gateway.0.handshakes.get() - 1);
            }
            None
        }
    }
}

async fn expire_loop(gateway: GatewayHandle) {
    let tick =
        (gateway.0.config.request_timeout_ms / 10).clamp(1, MAX_TIMER_TICK.as_millis() as u64);
    loop {
        shards::sleep(Duration::from_millis(tick)).await;
        let now = Instant::now();
        let mut state = gateway.0.state.borrow_mut();
        if state
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
        {
            state.expire(now);
        }
        // Redirected sessions whose grace ended (nothing when not draining).
        state.close_redirected(now);
        drop(state);
        gateway.flush_notices();
        // Logins that timed out release the requests held behind them.
        gateway.replay_released();
    }
}

/// Closes sessions silent for `idle_timeout_ms`, and kicks those whose
/// token expired (docs/protocol.md, section 2). A sweep on a period
/// rather than a timeout on every read: a read timeout is a timer insert
/// and removal plus a clock read per read, on the ping path's every batch.
async fn idle_loop(gateway: GatewayHandle) {
    let idle = Duration::from_millis(gateway.0.config.idle_timeout_ms.max(1));
    let tick = (idle / 10).clamp(Duration::from_millis(1), MAX_IDLE_TICK);
    loop {
        shards::sleep(tick).await;
        let closed = {
            let mut state = gateway.0.state.borrow_mut();
            state.close_idle(Instant::now(), idle) + state.kick_expired(unix_now_s())
        };
        if closed > 0 {
            gateway.flush_notices();
        }
    }
}

/// One connection: registers its session, runs the writer task, reads and
/// handles frames until the connection ends, then closes the session.
async fn connection(
    gateway: GatewayHandle,
    stream: TcpStream,
    transport: Transport,
    advertised_as: crate::store::Transport,
) {
    let _ = stream.set_nodelay(true);
    let outbox = Rc::new(Outbox::new(gateway.0.config.send_queue_max as usize));
    let session_id = gateway
        .0
        .state
        .borrow_mut()
        .open_session_via(outbox.clone(), advertised_as, Instant::now());
    let stream = Rc::new(stream);
    let writer = shards::spawn(write_loop(stream.clone(), outbox.clone(), transport.clone()));
    let reason = match &transport {
        Transport::Plain => read_loop(&gateway, session_id, &stream, &outbox).await,
        Transport::Layered(layers) => {
            if layers.borrow().is_handshaking() {
                shards::spawn(handshake_watch(
                    gateway.clone(),
                    Rc::downgrade(&stream),
                    Rc::downgrade(layers),
                ))
                .detach();
            }
            let reason = read_layered(&gateway, session_id, &stream, &outbox, layers).await;
            if layers.borrow().is_handshaking() {
                // Ended before its handshake finished: its slot is free.
                gateway.0.handshakes.set(gateway.0.handshakes.get() - 1);
            }
            reason
        }
    };
    if let Some(reason) = reason {
        gateway.0.state.borrow_mut().close(session_id, reason);
        gateway.flush_notices();
    }
    writer.await;
    drop(stream);
    gateway.0.sessions_open.fetch_sub(1, Ordering::AcqRel);
}

/// Closes a TLS connection whose handshake has not finished within
/// `tls_handshake_timeout_ms` (a peer that never finishes would otherwise
/// hold a handshake slot until the idle sweep). Holds the connection only
/// weakly: one that ended sooner is gone when the timer fires.
async fn handshake_watch(
    gateway: GatewayHandle,
    stream: std::rc::Weak<TcpStream>,
    layers: std::rc::Weak<RefCell<Layers>>,
) {
    shards::sleep(Duration::from_millis(gateway.0.config.tls_handshake_timeout_ms)).await;
    let (Some(stream), Some(layers)) = (stream.upgrade(), layers.upgrade()) else {
        return;
    };
    if layers.borrow().is_handshaking() {
        gateway.0.metrics.gateway.tls_refused_handshake_timeout.inc();
        // The reader sees the end of the stream and closes the session.
        stream.shutdown();
    }
}

/// Reads until the connection ends; returns how, or `None` if the session
/// was already closed by the gateway (kick, slow reader, idle sweep).
async fn read_loop(
    gateway: &GatewayHandle,
    session_id: u64,
    stream: &TcpStream,
    outbox: &Outbox,
) -> Option<CloseReason> {
    let mut decoder = FrameDecoder::new(Peer::Client, gateway.0.config.body_max_bytes);
    loop {
        let received = match stream.recv().await {
            Ok(Some(received)) => received,
            Ok(None) | Err(_) => return Some(CloseReason::PeerClosed),
        };
        // The one clock reading of the batch: deadlines, idleness and the
        // router's clock all use it.
        let now = Instant::now();
        outbox.begin_reader_batch();
        if let Err(error) = decode_frames(gateway, session_id, &mut decoder, &received, now) {
            return protocol_violation(gateway, session_id, error);
        }
        // The buffer goes back to the core's ring before anything waits.
        drop(received);
        gateway.flush_notices();
        outbox.end_reader_batch();
        // Closed by the gateway meanwhile (kick, slow reader): the writer
        // shuts the socket down; nothing more to read.
        gateway.0.state.borrow().session(session_id)?;
    }
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
    {
        let mut rest: &[u8] = bytes;
        while !rest.is_empty() {
            // Frames whole in the received buffer are handled where they
            // lie: no copy, and a connection whose frames arrive whole
            // never allocates a decoding buffer of its own.
            while let Some(frame) = decoder.next_frame_in(&mut rest)? {
                handle_frame(gateway, session_id, frame, now);
            }
            if rest.is_empty() {
                break;
            }
            // A frame cut by the receive (or behind one): the decoder keeps
            // it until the rest arrives. It takes what fits; after the
            // frames below are drained, it always has room again (or has
            // failed).
            let taken = decoder.extend(rest);
            rest = &rest[taken..];
            while let Some(frame) = decoder.next_frame()? {
                handle_frame(gateway, session_id, frame, now);
            }
        }
    }
    Ok(())
}

/// [`read_loop`] for a TLS or WebSocket connection: each receive is opened
/// by the transport's layers first, and what they owe the peer (handshake
/// messages, the upgrade's answer, pongs) wakes the writer.
async fn read_layered(
    gateway: &GatewayHandle,
    session_id: u64,
    stream: &TcpStream,
    outbox: &Outbox,
    layers: &RefCell<Layers>,
) -> Option<CloseReason> {
    let mut decoder = FrameDecoder::new(Peer::Client, gateway.0.config.body_max_bytes);
    loop {
        let received = match stream.recv().await {
            Ok(Some(received)) => received,
            Ok(None) | Err(_) => return Some(CloseReason::PeerClosed),
        };
        let now = Instant::now();
        let opened = layers.borrow_mut().open(&received);
        drop(received);
        note_progress(gateway, &mut layers.borrow_mut());
        if let Opened::Close(refusal) = opened {
            count_refusal(gateway, refusal);
            // What the layers owe (an alert, the HTTP refusal, a close
            // frame) goes out before the writer shuts the socket down.
            return Some(CloseReason::PeerClosed);
        }
        let bytes = layers.borrow_mut().take_opened();
        outbox.begin_reader_batch();
        let decoded = decode_frames(gateway, session_id, &mut decoder, &bytes, now);
        layers.borrow_mut().give_back_opened(bytes);
        if let Err(error) = decoded {
            return protocol_violation(gateway, session_id, error);
        }
        gateway.flush_notices();
        outbox.end_reader_batch();
        if layers.borrow().wants_write() {
            outbox.wake_writer();
        }
        gateway.0.state.borrow().session(session_id)?;
    }
}

/// Counts a finished handshake (freeing its slot) and an upgrade.
fn note_progress(gateway: &GatewayHandle, layers: &mut Layers) {
    let stats = &gateway.0.metrics.gateway;
    if let Some(kind) = layers.take_handshake_done() {
        gateway.0.handshakes.set(gateway.0.handshakes.get() - 1);
        match kind {
            HandshakeKind::Full => stats.tls_handshakes_full.inc(),
            HandshakeKind::Resumed => stats.tls_handshakes_resumed.inc(),
        }
    }
    if layers.take_upgraded() {
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
        Refusal::WebSocketProtocol(1009) => &stats.websocket_closed_1009,
        Refusal::WebSocketProtocol(_) => &stats.websocket_closed_1002,
        Refusal::PeerClosed => return,
    };
    counter.inc();
}

/// Hands one client frame to the gateway's state machine, and what it
/// lets through to its service.
fn handle_frame(gateway: &GatewayHandle, session_id: u64, frame: FrameRef<'_>, now: Instant) {
    let ingress =
        gateway
            .0
            .state
            .borrow_mut()
            .on_request(session_id, frame.header, frame.body, now);
    if let Some(ingress) = ingress {
        gateway.deliver(ingress, now);
    }
}

/// The stream cannot be resynchronised: the session is closed (counted
/// by the state machine); the read loop ends with nothing more to report.
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

/// Drains the session's outbox into the socket, one send per batch, until
/// the outbox closes; then shuts the socket down, which also ends the
/// reader's pending receive.
///
/// A send is awaited only when the next batch (or the end) needs the
/// socket: by then it has nearly always completed, and its completion
/// woke nobody. At pipeline 1 that is one task wake-up and poll fewer per
/// answer than awaiting each send at once.
async fn write_loop(stream: Rc<TcpStream>, outbox: Rc<Outbox>, transport: Transport) {
    let mut batch = Vec::new();
    let mut in_flight: Option<SendOp> = None;
    loop {
        // A layered transport may owe the peer bytes with no answer queued
        // (a handshake message, a pong): that is a batch too.
        let step = poll_fn(|cx| match outbox.poll_take(cx, &mut batch) {
            Poll::Pending if transport.wants_write() => Poll::Ready(WriterStep::Write),
            step => step,
        })
        .await;
        if matches!(step, WriterStep::Abort) {
            // Queued frames are dropped; a send in flight is left to the
            // kernel (its buffer stays with the operation until it ends).
            break;
        }
        // A batch or the end needs the socket: the send before must be done.
        let mut spare = match in_flight.take() {
            None => Vec::new(),
            Some(send) => match finish_send(&stream, &outbox, send).await {
                Some(sent) => sent,
                None => {
                    outbox.abort();
                    break;
                }
            },
        };
        let WriterStep::Write = step else {
            // Finish: everything queued before the close is sent, then the
            // layers' goodbyes (an alert or close_notify, a close frame).
            if let Transport::Layered(layers) = &transport {
                spare.clear();
                layers.borrow_mut().finish(&mut spare);
                if !spare.is_empty() {
                    let _ = finish_send(&stream, &outbox, stream.start_send(spare)).await;
                }
            }
            break;
        };
        // The sent buffer carries the batch after this one.
        spare.clear();
        let wire = match &transport {
            Transport::Plain => std::mem::replace(&mut batch, spare),
            Transport::Layered(layers) => {
                // One seal per batch: one WebSocket message, one write
                // into rustls.
                layers.borrow_mut().seal(&batch, &mut spare);
                batch.clear();
                spare
            }
        };
        if wire.is_empty() {
            batch = wire;
            continue;
        }
        in_flight = Some(stream.start_send(wire));
    }
    // shutdown(2) wakes the reader with end-of-stream and tells the peer
    // we are done; the descriptor itself is closed when the stream drops.
    stream.shutdown();
}

/// Waits for `send` and sends what it left of its buffer, racing an abort
/// of the outbox (a client that stopped reading cannot hold the writer
/// forever). The buffer back on success; `None` if the send failed or the
/// outbox was aborted meanwhile.
async fn finish_send(stream: &TcpStream, outbox: &Outbox, send: SendOp) -> Option<Vec<u8>> {
    let write = async {
        let (sent, buf) = send.await;
        match sent {
            Ok(n) if n == buf.len() => Some(buf),
            Ok(0) | Err(_) => None,
            Ok(n) => {
                // Boxed: a send cut short is rare, and unboxed its state
                // would sit in the writer's future of every connection.
                let (rest, _) = Box::pin(stream.send_all(buf[n..].to_vec())).await;
                rest.ok().map(|()| buf)
            }
        }
    };
    let aborted = async {
        poll_fn(|cx| outbox.poll_aborted(cx)).await;
        None
    };
    futures_lite::future::or(write, aborted).await
}
