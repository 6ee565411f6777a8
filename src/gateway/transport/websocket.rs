//! The WebSocket layer of a connection: the upgrade, then RFC 6455
//! framing over `wire::websocket`'s sans-IO codec. Each batch of answers
//! leaves as one binary message (whole protocol frames); each client
//! message's payload joins the stream of protocol frames. Pings are
//! answered; the session's idle timeout (`gateway.idle_timeout_ms`) counts
//! protocol frames only, as over TCP, so a client keeps an idle session
//! with `sys.ping`, not with WebSocket pings.
//!
//! Why not tungstenite: its protocol type owns a `Read + Write` stream and
//! reads and writes through it, while this driver's receives arrive as
//! lent buffers of the core's ring and its sends leave as owned buffers,
//! one per batch; a codec that takes and gives bytes fits that without an
//! adapter, a copy per message, or a message held whole.

use std::sync::Arc;

use wire::client::HEADER_LEN;
use wire::websocket::{
    close, encode_close, encode_frame, parse_request, push_header, Control, Decoder, Opcode, Role,
};

use super::Refusal;

pub(super) enum WsOpened {
    Bytes,
    Close(Refusal),
}

enum Phase {
    /// Reading the upgrade request (at most `UPGRADE_REQUEST_MAX_BYTES`).
    Upgrading {
        request: Vec<u8>,
    },
    Open,
    /// A close frame was sent (or the upgrade refused): nothing more goes
    /// out but what is queued.
    Closed,
}

pub struct WsLayer {
    origins: Arc<[String]>,
    phase: Phase,
    decoder: Decoder,
    controls: Vec<Control>,
    /// Bytes owed to the peer ahead of the next batch: the upgrade's
    /// answer, pongs, a close frame.
    owed: Vec<u8>,
    /// Answers queued before the upgrade finished (a drain's
    /// `sys.redirect` can be), sent right after it.
    held: Vec<u8>,
    upgraded: bool,
}

impl WsLayer {
    pub(super) fn new(origins: Arc<[String]>, body_max_bytes: u32) -> WsLayer {
        // One message holds at least one whole frame: the largest is a
        // header and `body_max_bytes`; a message over that is 1009.
        let message_max = HEADER_LEN as u64 + u64::from(body_max_bytes);
        WsLayer {
            origins,
            phase: Phase::Upgrading {
                request: Vec::new(),
            },
            decoder: Decoder::new(Role::Server, message_max),
            controls: Vec::new(),
            owed: Vec::new(),
            held: Vec::new(),
            upgraded: false,
        }
    }

    pub(super) fn wants_write(&self) -> bool {
        !self.owed.is_empty() || (matches!(self.phase, Phase::Open) && !self.held.is_empty())
    }

    /// Whether the upgrade request has not been read whole yet.
    pub(super) fn is_upgrading(&self) -> bool {
        matches!(self.phase, Phase::Upgrading { .. })
    }

    pub(super) fn take_upgraded(&mut self) -> bool {
        std::mem::take(&mut self.upgraded)
    }

    /// Opens `input` (the connection's bytes, after TLS if any): protocol
    /// bytes are appended to `out`.
    pub(super) fn open(&mut self, input: &[u8], out: &mut Vec<u8>) -> WsOpened {
        let frames: &[u8] = match &mut self.phase {
            Phase::Closed => return WsOpened::Bytes,
            Phase::Open => input,
            Phase::Upgrading { request } => {
                request.extend_from_slice(input);
                match parse_request(request, &self.origins) {
                    Ok(None) => return WsOpened::Bytes,
                    Err(refusal) => {
                        self.owed.extend_from_slice(&refusal.response);
                        self.phase = Phase::Closed;
                        return WsOpened::Close(Refusal::WebSocketUpgrade(refusal.status));
                    }
                    Ok(Some(upgrade)) => {
                        self.owed.extend_from_slice(&upgrade.response);
                        let request = std::mem::take(request);
                        self.phase = Phase::Open;
                        self.upgraded = true;
                        // Frames sent right behind the request.
                        return self.open_frames(&request[upgrade.consumed..], out);
                    }
                }
            }
        };
        self.open_frames(frames, out)
    }

    fn open_frames(&mut self, frames: &[u8], out: &mut Vec<u8>) -> WsOpened {
        self.controls.clear();
        let decoded = self.decoder.decode(frames, out, &mut self.controls);
        for control in self.controls.drain(..) {
            match control {
                Control::Ping(payload) => encode_frame(&mut self.owed, Opcode::Pong, &payload),
                Control::Pong => {}
                Control::Close(code) => {
                    // Echo the peer's code (RFC 6455 section 5.5.1).
                    encode_close(&mut self.owed, code.unwrap_or(close::NORMAL));
                    self.phase = Phase::Closed;
                    return WsOpened::Close(Refusal::PeerClosed);
                }
            }
        }
        match decoded {
            Ok(()) => WsOpened::Bytes,
            Err(error) => {
                let code = error.close_code();
                encode_close(&mut self.owed, code);
                self.phase = Phase::Closed;
                WsOpened::Close(Refusal::WebSocketProtocol(code))
            }
        }
    }

    /// Seals one batch (whole protocol frames) as one binary message,
    /// behind what is owed.
    pub(super) fn seal(&mut self, batch: &[u8], wire: &mut Vec<u8>) {
        wire.append(&mut self.owed);
        match self.phase {
            Phase::Upgrading { .. } => self.held.extend_from_slice(batch),
            Phase::Closed => {}
            Phase::Open => {
                if !self.held.is_empty() {
                    push_header(wire, Opcode::Binary, self.held.len() as u64, None);
                    wire.append(&mut self.held);
                }
                if !batch.is_empty() {
                    push_header(wire, Opcode::Binary, batch.len() as u64, None);
                    wire.extend_from_slice(batch);
                }
            }
        }
    }

    /// The last bytes: what is owed, and a close frame unless one went.
    pub(super) fn finish(&mut self, wire: &mut Vec<u8>) {
        self.seal(&[], wire);
        if let Phase::Open = self.phase {
            encode_close(wire, close::GOING_AWAY);
            self.phase = Phase::Closed;
        }
    }
}
