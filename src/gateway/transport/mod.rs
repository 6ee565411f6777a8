//! The seam between a connection's socket and the gateway's protocol
//! bytes. The driver's reader hands each receive to its connection's
//! [`Transport`], which opens it into protocol bytes (the frames of
//! docs/protocol.md); the writer hands each batch of answers to it, which
//! seals the batch into wire bytes. The sans-IO gateway core sees the same
//! frames whatever the listener.
//!
//! - plain TCP: the identity. The variant holds nothing, so a plain
//!   connection costs what it did before the seam (no allocation, and the
//!   reader decodes frames where the receive put them);
//! - TLS: rustls's `ServerConnection`, records in userspace ([`tls`]);
//! - WebSocket: RFC 6455's upgrade and framing ([`websocket`], over the
//!   codec in `wire::websocket`);
//! - WebSocket over TLS: TLS opens into the WebSocket layer, which opens
//!   into protocol bytes; sealing runs the other way.
//!
//! A batch of answers stays one unit through the layers: one WebSocket
//! message and, over TLS, one `write` into rustls (records of up to 16 KiB
//! each) per batch, not one per answer.
//!
//! Kernel TLS (the `tls` ULP) would fit behind the same seam: once rustls
//! finished the handshake, `dangerous_extract_secrets` hands the traffic
//! keys to `setsockopt(SOL_TLS, TLS_TX/TLS_RX)`, and the connection turns
//! into the plain variant (io_uring sends protocol bytes, the kernel
//! encrypts), with rustls kept only for what the kernel passes up as
//! control records (key updates, close_notify). Not built: the kernels
//! this runs on here offer no `tls` ULP, so no test could run it.

pub mod tls;
pub mod websocket;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ServerConfig;

use self::tls::{TlsLayer, TlsOpened};
use self::websocket::{WsLayer, WsOpened};

/// What one listener speaks, for the connections it accepts.
#[derive(Clone)]
pub enum Listener {
    Plain,
    Tls(Arc<ServerConfig>),
    WebSocket {
        tls: Option<Arc<ServerConfig>>,
        origins: Arc<[String]>,
    },
}

impl Listener {
    /// The transport a membership row advertises this listener under.
    pub fn advertised_as(&self) -> crate::gateway_addresses::Transport {
        match self {
            Listener::Plain => crate::gateway_addresses::Transport::Plain,
            Listener::Tls(_) => crate::gateway_addresses::Transport::Tls,
            Listener::WebSocket { tls: None, .. } => crate::gateway_addresses::Transport::Ws,
            Listener::WebSocket { tls: Some(_), .. } => crate::gateway_addresses::Transport::Wss,
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(
            self,
            Listener::Tls(_) | Listener::WebSocket { tls: Some(_), .. }
        )
    }
}

/// A connection's transport. Cheap to clone: the reader and the writer
/// each hold one.
#[derive(Clone)]
pub enum Transport {
    Plain,
    Layered(Rc<RefCell<Layers>>),
}

/// Why a layered connection must close, for the counters and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The first bytes to a TLS listener were not a TLS handshake record.
    TlsPlaintext,
    /// rustls refused the handshake (garbage after the ClientHello, no
    /// common version or cipher suite...).
    TlsBadHandshake,
    /// A bad record after the handshake.
    TlsError,
    /// The WebSocket upgrade was refused with this HTTP status.
    WebSocketUpgrade(u16),
    /// The WebSocket stream broke a rule: closed with this code.
    WebSocketProtocol(u16),
    /// The peer closed (a WebSocket close frame, a TLS close_notify).
    PeerClosed,
}

/// How long a connection may take to set its layers up, each from the
/// accept (the upgrade: from the TLS handshake's end, if any).
#[derive(Clone, Copy, Debug)]
pub struct SetupDeadlines {
    /// The whole ClientHello (`gateway.tls_client_hello_timeout_ms`).
    pub client_hello: Duration,
    /// The whole TLS handshake (`gateway.tls_handshake_timeout_ms`).
    pub handshake: Duration,
    /// The WebSocket upgrade request (`gateway.websocket_upgrade_timeout_ms`).
    pub upgrade: Duration,
}

/// Which setup deadline a connection missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    ClientHello,
    Handshake,
    Upgrade,
}

/// What one receive opened into.
pub enum Opened {
    /// Protocol bytes (maybe none yet: a handshake, a cut record).
    Bytes,
    /// The connection must close; what is queued to send (an alert, an
    /// HTTP refusal, a close frame) goes first.
    Close(Refusal),
}

/// The layers of a TLS and/or WebSocket connection, and the buffers that
/// carry bytes between them.
pub struct Layers {
    tls: Option<TlsLayer>,
    ws: Option<WsLayer>,
    /// Protocol bytes opened from the last receive, for the frame decoder.
    opened: Vec<u8>,
    /// Between TLS and WebSocket: plaintext opened by TLS (reading), or
    /// WebSocket frames to seal (writing).
    between: Vec<u8>,
    /// The handshake just finished (reported once to the driver).
    handshake_done: Option<tls::HandshakeKind>,
    /// When the connection was accepted, and when its TLS handshake
    /// finished: what the setup deadlines count from.
    accepted_at: Instant,
    handshake_done_at: Option<Instant>,
}

impl Transport {
    /// The transport of a connection accepted on `listener`.
    pub fn for_listener(
        listener: &Listener,
        body_max_bytes: u32,
    ) -> Result<Transport, rustls::Error> {
        let (tls, ws) = match listener {
            Listener::Plain => return Ok(Transport::Plain),
            Listener::Tls(config) => (Some(TlsLayer::new(config.clone())?), None),
            Listener::WebSocket { tls, origins } => (
                tls.as_ref()
                    .map(|config| TlsLayer::new(config.clone()))
                    .transpose()?,
                Some(WsLayer::new(origins.clone(), body_max_bytes)),
            ),
        };
        Ok(Transport::Layered(Rc::new(RefCell::new(Layers {
            tls,
            ws,
            opened: Vec::new(),
            between: Vec::new(),
            handshake_done: None,
            accepted_at: Instant::now(),
            handshake_done_at: None,
        }))))
    }

    /// Whether sealing would produce bytes even with no answers (a
    /// handshake message, an upgrade answer, a pong, an alert).
    pub fn wants_write(&self) -> bool {
        match self {
            Transport::Plain => false,
            Transport::Layered(layers) => layers.borrow().wants_write(),
        }
    }
}

impl Layers {
    /// Opens `wire` (one receive). Protocol bytes are then in
    /// [`Self::take_opened`].
    pub fn open(&mut self, wire: &[u8]) -> Opened {
        let Layers {
            tls,
            ws,
            opened,
            between,
            handshake_done,
            handshake_done_at,
            ..
        } = self;
        opened.clear();
        let plain: &[u8] = match tls {
            None => wire,
            Some(tls) => {
                let target = if ws.is_some() {
                    &mut *between
                } else {
                    &mut *opened
                };
                target.clear();
                match tls.open(wire, target) {
                    TlsOpened::Bytes { finished } => {
                        if finished.is_some() {
                            *handshake_done = finished;
                            *handshake_done_at = Some(Instant::now());
                        }
                    }
                    TlsOpened::Close(refusal) => return Opened::Close(refusal),
                }
                if ws.is_none() {
                    return Opened::Bytes;
                }
                between
            }
        };
        match ws {
            None => {
                opened.extend_from_slice(plain);
                Opened::Bytes
            }
            Some(ws) => match ws.open(plain, opened) {
                WsOpened::Bytes => Opened::Bytes,
                WsOpened::Close(refusal) => Opened::Close(refusal),
            },
        }
    }

    /// The protocol bytes of the last [`Self::open`]; hand the buffer back
    /// with [`Self::give_back_opened`] so its capacity is reused.
    pub fn take_opened(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.opened)
    }

    pub fn give_back_opened(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        self.opened = buf;
    }

    /// Whether the TLS handshake is still running (false without TLS).
    pub fn is_handshaking(&self) -> bool {
        self.tls.as_ref().is_some_and(TlsLayer::is_handshaking)
    }

    /// Whether the TLS layer read a whole ClientHello (false without TLS).
    pub fn tls_hello_answered(&self) -> bool {
        self.tls.as_ref().is_some_and(TlsLayer::hello_answered)
    }

    /// The next deadline of the connection's setup and what it is for, or
    /// `None` once every layer is set up: a ClientHello that has not
    /// arrived whole, a TLS handshake not finished, a WebSocket upgrade
    /// request not read whole.
    pub fn setup_deadline(&self, deadlines: &SetupDeadlines) -> Option<(Instant, Expiry)> {
        if let Some(tls) = self.tls.as_ref().filter(|tls| tls.is_handshaking()) {
            let handshake = (self.accepted_at + deadlines.handshake, Expiry::Handshake);
            let hello = (
                self.accepted_at + deadlines.client_hello,
                Expiry::ClientHello,
            );
            if !tls.hello_answered() && hello.0 < handshake.0 {
                return Some(hello);
            }
            return Some(handshake);
        }
        if self.ws.as_ref().is_some_and(WsLayer::is_upgrading) {
            let since = self.handshake_done_at.unwrap_or(self.accepted_at);
            return Some((since + deadlines.upgrade, Expiry::Upgrade));
        }
        None
    }

    /// The TLS handshake finished since the last call: full or resumed.
    pub fn take_handshake_done(&mut self) -> Option<tls::HandshakeKind> {
        self.handshake_done.take()
    }

    /// The WebSocket upgrade was accepted since the last call.
    pub fn take_upgraded(&mut self) -> bool {
        self.ws.as_mut().is_some_and(WsLayer::take_upgraded)
    }

    pub fn wants_write(&self) -> bool {
        self.ws.as_ref().is_some_and(WsLayer::wants_write)
            || self.tls.as_ref().is_some_and(TlsLayer::wants_write)
    }

    /// Seals one batch of answers (whole protocol frames, maybe none) and
    /// whatever the layers owe the peer into `wire`.
    pub fn seal(&mut self, batch: &[u8], wire: &mut Vec<u8>) {
        match (&mut self.tls, &mut self.ws) {
            (None, None) => wire.extend_from_slice(batch),
            (None, Some(ws)) => ws.seal(batch, wire),
            (Some(tls), None) => tls.seal(batch, wire),
            (Some(tls), Some(ws)) => {
                self.between.clear();
                ws.seal(batch, &mut self.between);
                tls.seal(&self.between, wire);
            }
        }
    }

    /// The connection ends: seals what is still owed, then the layers'
    /// goodbyes (a WebSocket close frame unless one was sent, a TLS
    /// close_notify).
    pub fn finish(&mut self, wire: &mut Vec<u8>) {
        match (&mut self.tls, &mut self.ws) {
            (None, None) => {}
            (None, Some(ws)) => ws.finish(wire),
            (Some(tls), None) => tls.finish(&[], wire),
            (Some(tls), Some(ws)) => {
                self.between.clear();
                ws.finish(&mut self.between);
                tls.finish(&self.between, wire);
            }
        }
    }
}
