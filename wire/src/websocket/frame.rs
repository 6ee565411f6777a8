//! WebSocket framing (RFC 6455 section 5): a streaming decoder that takes
//! bytes cut anywhere, and the encoders for both ends.

use super::close;

/// The longest frame header: 2 bytes, an 8-byte length, a 4-byte mask.
pub const FRAME_HEADER_MAX_LEN: usize = 14;
/// A control frame's payload bound (RFC 6455 section 5.5).
const CONTROL_PAYLOAD_MAX: usize = 125;

/// Which end decodes: a server reads masked frames, a client unmasked ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The gateway: decodes a client's frames, which must be masked.
    Server,
    /// A client: decodes the server's frames, which must not be masked.
    Client,
}

/// A frame's opcode (RFC 6455 section 5.2), the low four bits of its first
/// byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// The next fragment of the message in progress.
    Continuation = 0x0,
    /// A UTF-8 message: refused (1003), the protocol is binary.
    Text = 0x1,
    /// A binary message: bytes of the client frame stream.
    Binary = 0x2,
    /// The closing handshake, with an optional code and reason.
    Close = 0x8,
    /// Asks for a Pong with the same payload.
    Ping = 0x9,
    /// The answer to a Ping, or an unsolicited heartbeat.
    Pong = 0xA,
}

/// Why the stream is closed, as the close code to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WsError {
    /// A frame breaks RFC 6455's framing rules (the rule is named here):
    /// closed with 1002.
    #[error("frame breaks the framing rules (1002): {0}")]
    Protocol(&'static str),
    /// A text message: closed with 1003.
    #[error("text message (1003): the protocol is binary")]
    Text,
    /// A message longer than the decoder's bound, decided on a frame's
    /// header before its payload is read: closed with 1009.
    #[error("message over {max} bytes (1009)")]
    TooBig {
        /// The decoder's message bound in bytes.
        max: u64,
    },
    /// A close frame's reason is not UTF-8 (RFC 6455 section 8.1): closed
    /// with 1007.
    #[error("close reason is not UTF-8 (1007)")]
    InvalidUtf8,
}

impl WsError {
    /// The close code RFC 6455 names for this error.
    pub fn close_code(&self) -> u16 {
        match self {
            WsError::Protocol(_) => close::PROTOCOL_ERROR,
            WsError::Text => close::UNSUPPORTED_DATA,
            WsError::TooBig { .. } => close::MESSAGE_TOO_BIG,
            WsError::InvalidUtf8 => close::INVALID_PAYLOAD,
        }
    }
}

/// A control frame decoded whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// Answer with a pong carrying the same payload.
    Ping(Vec<u8>),
    /// A pong, answering a ping or unsolicited; its payload is dropped.
    Pong,
    /// The peer closes, with its code if it sent one (always one that
    /// may travel on the wire: see [`close::is_sendable`]); the decoder
    /// reads nothing after it.
    Close(Option<u16>),
}

#[derive(Debug)]
enum State {
    Header {
        buf: [u8; FRAME_HEADER_MAX_LEN],
        filled: usize,
    },
    Payload {
        remaining: u64,
        mask: Option<[u8; 4]>,
        mask_at: usize,
        opcode: Opcode,
        fin: bool,
    },
    Closed,
}

/// The streaming decoder. Data payloads are unmasked into the caller's
/// buffer as they arrive (a message is never held whole); a control
/// frame's payload (at most 125 bytes) is held until it ends.
#[derive(Debug)]
pub struct Decoder {
    role: Role,
    message_max: u64,
    state: State,
    /// A data message has started and its last frame has not ended.
    in_message: bool,
    /// Payload bytes of the current message announced so far.
    message_len: u64,
    control: Vec<u8>,
}

impl Decoder {
    /// `message_max`: the largest message (all its fragments) accepted.
    pub fn new(role: Role, message_max: u64) -> Decoder {
        Decoder {
            role,
            message_max,
            state: State::Header {
                buf: [0; FRAME_HEADER_MAX_LEN],
                filled: 0,
            },
            in_message: false,
            message_len: 0,
            control: Vec::new(),
        }
    }

    /// Whether a close frame was read (nothing after it is decoded).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Decodes all of `input`: binary payload bytes are appended to
    /// `data`, control frames to `controls`. An error leaves the stream
    /// unusable: the caller sends a close with [`WsError::close_code`].
    pub fn decode(
        &mut self,
        mut input: &[u8],
        data: &mut Vec<u8>,
        controls: &mut Vec<Control>,
    ) -> Result<(), WsError> {
        while !input.is_empty() {
            match &mut self.state {
                State::Closed => return Ok(()),
                State::Header { buf, filled } => {
                    // Take one byte at a time only until the header's
                    // length is known; then the rest of it at once.
                    let need = header_len(&buf[..*filled]);
                    let take = (need - *filled).min(input.len());
                    buf[*filled..*filled + take].copy_from_slice(&input[..take]);
                    *filled += take;
                    input = &input[take..];
                    if *filled < header_len(&buf[..*filled]) {
                        continue;
                    }
                    let header = *buf;
                    let len = *filled;
                    self.start_frame(&header[..len], controls)?;
                }
                State::Payload {
                    remaining,
                    mask,
                    mask_at,
                    opcode,
                    ..
                } => {
                    let take = (*remaining).min(input.len() as u64) as usize;
                    let (chunk, rest) = input.split_at(take);
                    input = rest;
                    let out = if *opcode == Opcode::Binary || *opcode == Opcode::Continuation {
                        &mut *data
                    } else {
                        &mut self.control
                    };
                    let start = out.len();
                    out.extend_from_slice(chunk);
                    if let Some(mask) = mask {
                        *mask_at = unmask(&mut out[start..], *mask, *mask_at);
                    }
                    *remaining -= take as u64;
                    if *remaining == 0 {
                        self.end_frame(controls)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A whole header read: checks it against the framing rules and the
    /// message bound, and moves to its payload.
    fn start_frame(&mut self, header: &[u8], controls: &mut Vec<Control>) -> Result<(), WsError> {
        let fin = header[0] & 0x80 != 0;
        if header[0] & 0x70 != 0 {
            return Err(WsError::Protocol("reserved bits set"));
        }
        let masked = header[1] & 0x80 != 0;
        match (self.role, masked) {
            (Role::Server, false) => return Err(WsError::Protocol("unmasked client frame")),
            (Role::Client, true) => return Err(WsError::Protocol("masked server frame")),
            _ => {}
        }
        let (len, at) = payload_len(header)?;
        let mask = masked.then(|| [header[at], header[at + 1], header[at + 2], header[at + 3]]);
        let opcode = opcode_of(header[0])?;
        self.admit(opcode, fin, len)?;
        self.state = State::Payload {
            remaining: len,
            mask,
            mask_at: 0,
            opcode,
            fin,
        };
        if len == 0 {
            self.end_frame(controls)?;
        }
        Ok(())
    }

    /// Whether a frame of `opcode` and `len` bytes may come now: no text,
    /// fragments in order, the message within its bound, control frames
    /// whole and short. Counts a data frame towards its message.
    fn admit(&mut self, opcode: Opcode, fin: bool, len: u64) -> Result<(), WsError> {
        match opcode {
            Opcode::Text => return Err(WsError::Text),
            Opcode::Binary if self.in_message => {
                return Err(WsError::Protocol("new message inside a fragmented one"))
            }
            Opcode::Continuation if !self.in_message => {
                return Err(WsError::Protocol("continuation without a message"))
            }
            Opcode::Binary | Opcode::Continuation => {
                self.in_message = true;
                self.message_len = self.message_len.saturating_add(len);
                if self.message_len > self.message_max {
                    return Err(WsError::TooBig {
                        max: self.message_max,
                    });
                }
            }
            Opcode::Close | Opcode::Ping | Opcode::Pong => {
                if !fin {
                    return Err(WsError::Protocol("fragmented control frame"));
                }
                if len > CONTROL_PAYLOAD_MAX as u64 {
                    return Err(WsError::Protocol("control frame over 125 bytes"));
                }
                self.control.clear();
            }
        }
        Ok(())
    }

    fn end_frame(&mut self, controls: &mut Vec<Control>) -> Result<(), WsError> {
        let State::Payload { opcode, fin, .. } = self.state else {
            return Ok(());
        };
        self.state = State::Header {
            buf: [0; FRAME_HEADER_MAX_LEN],
            filled: 0,
        };
        match opcode {
            Opcode::Binary | Opcode::Continuation | Opcode::Text => {
                if fin {
                    self.in_message = false;
                    self.message_len = 0;
                }
            }
            Opcode::Ping => controls.push(Control::Ping(std::mem::take(&mut self.control))),
            Opcode::Pong => controls.push(Control::Pong),
            Opcode::Close => {
                // Nothing is read after a close, whether it is valid or not.
                self.state = State::Closed;
                controls.push(Control::Close(close_code(&self.control)?));
            }
        }
        Ok(())
    }
}

/// A frame's payload length and where the masking key (or the payload)
/// starts, from its header (RFC 6455 section 5.2): 7 bits, or 16, or 63
/// after a 126 or 127.
fn payload_len(header: &[u8]) -> Result<(u64, usize), WsError> {
    Ok(match header[1] & 0x7f {
        126 => (u64::from(u16::from_be_bytes([header[2], header[3]])), 4),
        127 => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&header[2..10]);
            let len = u64::from_be_bytes(bytes);
            if len >> 63 != 0 {
                return Err(WsError::Protocol("length's top bit set"));
            }
            (len, 10)
        }
        short => (u64::from(short), 2),
    })
}

/// The opcode of a header's first byte; a reserved one is refused.
fn opcode_of(first: u8) -> Result<Opcode, WsError> {
    Ok(match first & 0x0f {
        0x0 => Opcode::Continuation,
        0x1 => Opcode::Text,
        0x2 => Opcode::Binary,
        0x8 => Opcode::Close,
        0x9 => Opcode::Ping,
        0xA => Opcode::Pong,
        _ => return Err(WsError::Protocol("reserved opcode")),
    })
}

/// The code of a close frame's `payload` (RFC 6455 section 5.5.1): none,
/// or two bytes of a code that may be sent (section 7.4) and a UTF-8
/// reason. A 1-byte payload or a code that may not be sent is 1002; a
/// reason that is not UTF-8 is 1007.
fn close_code(payload: &[u8]) -> Result<Option<u16>, WsError> {
    let [high, low, reason @ ..] = payload else {
        return match payload.len() {
            0 => Ok(None),
            _ => Err(WsError::Protocol("close payload of 1 byte")),
        };
    };
    let code = u16::from_be_bytes([*high, *low]);
    if !close::is_sendable(code) {
        return Err(WsError::Protocol("close code not allowed on the wire"));
    }
    if std::str::from_utf8(reason).is_err() {
        return Err(WsError::InvalidUtf8);
    }
    Ok(Some(code))
}

/// How long the header that starts with `head` is (at least 2: the bytes
/// that say how long it is).
fn header_len(head: &[u8]) -> usize {
    let Some(&second) = head.get(1) else {
        return 2;
    };
    let length_bytes = match second & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask_bytes = if second & 0x80 != 0 { 4 } else { 0 };
    2 + length_bytes + mask_bytes
}

/// XORs `bytes` with `mask` starting at the mask's byte `at`; returns the
/// mask position after them.
fn unmask(bytes: &mut [u8], mask: [u8; 4], at: usize) -> usize {
    // Rotated so that the word-wide pass starts at the mask's byte `at`.
    let rotated = [
        mask[at % 4],
        mask[(at + 1) % 4],
        mask[(at + 2) % 4],
        mask[(at + 3) % 4],
    ];
    let word = u32::from_ne_bytes(rotated);
    let mut chunks = bytes.chunks_exact_mut(4);
    for chunk in &mut chunks {
        let value = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) ^ word;
        chunk.copy_from_slice(&value.to_ne_bytes());
    }
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= rotated[i];
    }
    (at + bytes.len()) % 4
}

/// Appends one unmasked frame (what a server sends) with `payload`.
pub fn encode_frame(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8]) {
    push_header(out, opcode, payload.len() as u64, None);
    out.extend_from_slice(payload);
}

/// Appends one masked frame (what a client sends) with `payload`.
pub fn encode_masked(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8], mask: [u8; 4]) {
    push_header(out, opcode, payload.len() as u64, Some(mask));
    let start = out.len();
    out.extend_from_slice(payload);
    unmask(&mut out[start..], mask, 0);
}

/// Appends a close frame with `code` (unmasked: the server's), one that
/// may be sent ([`close::is_sendable`]).
pub fn encode_close(out: &mut Vec<u8>, code: u16) {
    debug_assert!(close::is_sendable(code), "close code {code} is never sent");
    encode_frame(out, Opcode::Close, &code.to_be_bytes());
}

/// Appends a final frame's header for a payload of `len` bytes; the
/// caller appends the payload (so a batch of answers is framed in place).
pub fn push_header(out: &mut Vec<u8>, opcode: Opcode, len: u64, mask: Option<[u8; 4]>) {
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    out.push(0x80 | opcode as u8);
    if len < 126 {
        out.push(mask_bit | len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(mask_bit | 126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(mask_bit | 127);
        out.extend_from_slice(&len.to_be_bytes());
    }
    if let Some(mask) = mask {
        out.extend_from_slice(&mask);
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
