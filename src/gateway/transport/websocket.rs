//! The WebSocket layer of a connection: the upgrade, then RFC 6455
//! framing over `wire::websocket`'s sans-IO codec. Each batch of answers
//! leaves as one binary message (whole protocol frames); each client
//! message's payload joins the stream of protocol frames. Pings are
//! answered (while the client reads nothing, only the latest past 4 KiB
//! of pongs owed); the session's idle timeout (`gateway.idle_timeout_ms`)
//! counts protocol frames only, as over TCP, so a client keeps an idle
//! session with `sys.ping`, not with WebSocket pings.
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

/// The bytes of pongs (with what else is owed) kept for a peer's pings
/// while the send before them waits; past them only the latest ping is
/// answered.
const PONGS_OWED_MAX_BYTES: usize = 4096;

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
    /// answer, pongs (up to `PONGS_OWED_MAX_BYTES`), a close frame.
    owed: Vec<u8>,
    /// The payload of the pong owed for the latest ping, once the pongs
    /// in `owed` reach `PONGS_OWED_MAX_BYTES`: a peer that pings and never
    /// reads would otherwise grow them without bound, beside the outbox's
    /// bounds, while the send before them waits. RFC 6455 (section 5.5.3)
    /// lets an endpoint answer only the most recent ping.
    pong: Option<Vec<u8>>,
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
            pong: None,
            held: Vec::new(),
            upgraded: false,
        }
    }

    pub(super) fn wants_write(&self) -> bool {
        !self.owed.is_empty()
            || self.pong.is_some()
            || (matches!(self.phase, Phase::Open) && !self.held.is_empty())
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
        // Taken for the walk (it pongs through `self`), and put back for
        // the next receive unless the connection closes.
        let mut controls = std::mem::take(&mut self.controls);
        controls.clear();
        let decoded = self.decoder.decode(frames, out, &mut controls);
        for control in controls.drain(..) {
            match control {
                Control::Ping(payload) => self.owe_pong_for(payload),
                Control::Pong => {}
                Control::Close(code) => {
                    // Echo the peer's code (RFC 6455 section 5.5.1).
                    self.owe_pong();
                    encode_close(&mut self.owed, code.unwrap_or(close::NORMAL));
                    self.phase = Phase::Closed;
                    return WsOpened::Close(Refusal::PeerClosed);
                }
            }
        }
        self.controls = controls;
        match decoded {
            Ok(()) => WsOpened::Bytes,
            Err(error) => {
                let code = error.close_code();
                self.owe_pong();
                encode_close(&mut self.owed, code);
                self.phase = Phase::Closed;
                WsOpened::Close(Refusal::WebSocketProtocol(code))
            }
        }
    }

    /// Seals one batch (whole protocol frames) as one binary message,
    /// behind what is owed.
    pub(super) fn seal(&mut self, batch: &[u8], wire: &mut Vec<u8>) {
        self.owe_pong();
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

    /// Owes a ping its pong: behind what is owed while that is short,
    /// else as the one pong kept for the latest ping (see `pong`).
    fn owe_pong_for(&mut self, payload: Vec<u8>) {
        let room = self.owed.len() + 2 + payload.len() <= PONGS_OWED_MAX_BYTES;
        if room && self.pong.is_none() {
            encode_frame(&mut self.owed, Opcode::Pong, &payload);
        } else {
            self.pong = Some(payload);
        }
    }

    /// Moves the pong kept for the latest ping, if any, behind what is
    /// owed: before a close frame (nothing follows one) and into the
    /// next send.
    fn owe_pong(&mut self) {
        if let Some(payload) = self.pong.take() {
            encode_frame(&mut self.owed, Opcode::Pong, &payload);
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

#[cfg(test)]
mod tests {
    use wire::websocket::{client_request, encode_masked, Decoder, Opcode, Role};

    use super::*;

    const MASK: [u8; 4] = [1, 2, 3, 4];

    /// A layer past a good upgrade, with its answer sealed away.
    fn upgraded() -> WsLayer {
        let mut layer = WsLayer::new(Arc::from(Vec::new()), 1024);
        let (request, _) = client_request("localhost", [7; 16]);
        let mut out = Vec::new();
        assert!(matches!(layer.open(&request, &mut out), WsOpened::Bytes));
        assert!(layer.take_upgraded());
        let mut wire = Vec::new();
        layer.seal(&[], &mut wire);
        assert!(wire.starts_with(b"HTTP/1.1 101"));
        layer
    }

    fn ping(payload: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        encode_masked(&mut frame, Opcode::Ping, payload, MASK);
        frame
    }

    /// The pongs in `wire`, as the client decodes them.
    fn pongs(wire: &[u8]) -> Vec<Vec<u8>> {
        let mut decoder = Decoder::new(Role::Client, 1 << 20);
        let (mut out, mut controls) = (Vec::new(), Vec::new());
        decoder.decode(wire, &mut out, &mut controls).unwrap();
        assert!(out.is_empty());
        controls
            .into_iter()
            .map(|control| match control {
                Control::Ping(payload) => panic!("a ping {payload:?} from the server"),
                Control::Close(code) => panic!("a close {code:?}"),
                Control::Pong => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn a_peer_that_pings_and_never_reads_is_owed_a_bounded_number_of_pongs() {
        let mut layer = upgraded();
        let mut out = Vec::new();
        let size = |layer: &WsLayer| layer.owed.len() + layer.pong.as_ref().map_or(0, Vec::len);
        for round in 0..100_000u32 {
            let payload = [round.to_be_bytes().as_slice(), &[0xAB; 121]].concat();
            assert!(matches!(
                layer.open(&ping(&payload), &mut out),
                WsOpened::Bytes
            ));
            // Nothing is sealed meanwhile (the send before waits).
            assert!(size(&layer) <= PONGS_OWED_MAX_BYTES + 125);
        }
        assert!(layer.wants_write());
        let mut wire = Vec::new();
        layer.seal(&[], &mut wire);
        // The first pings' pongs, then the latest ping's: 127 bytes each.
        let answered = pongs(&wire).len();
        assert_eq!(answered, PONGS_OWED_MAX_BYTES / 127 + 1);
        assert_eq!(wire.len(), answered * 127);
        assert_eq!(&wire[2..6], 0u32.to_be_bytes().as_slice());
        let last = wire.len() - 125;
        assert_eq!(&wire[last..last + 4], 99_999u32.to_be_bytes().as_slice());
        assert!(!layer.wants_write());
        // Answered, the next pings are each answered again.
        layer.open(&ping(b"again"), &mut out);
        layer.open(&ping(b"and again"), &mut out);
        let mut wire = Vec::new();
        layer.seal(&[], &mut wire);
        assert_eq!(pongs(&wire).len(), 2);
    }

    #[test]
    fn a_pong_owed_goes_before_the_close_frame() {
        let mut layer = upgraded();
        let mut out = Vec::new();
        // Past the bound, so that the last ping's pong is the one kept.
        let mut frames = Vec::new();
        for _ in 0..40 {
            frames.extend(ping(&[0; 125]));
        }
        frames.extend(ping(b"last"));
        encode_masked(&mut frames, Opcode::Close, &1000u16.to_be_bytes(), MASK);
        assert!(matches!(layer.open(&frames, &mut out), WsOpened::Close(_)));
        let mut wire = Vec::new();
        layer.seal(&[], &mut wire);
        // ... pong (0x8A, length 4, "last"), then the close (0x88, 2
        // bytes of code).
        let close = wire.len() - 4;
        assert_eq!(&wire[close - 6..close], &[0x8A, 4, b'l', b'a', b's', b't']);
        assert_eq!(wire[close], 0x88);
    }
}
