//! What a link carries after its handshake: frames of `kind u8 | len u32
//! LE | payload`. A message's payload is one internal frame as
//! `FrameBuf::as_bytes` gives it (the rkyv archive and its checksum), read
//! back with `FrameBuf::from_network`, which checks the length before
//! anything is allocated and the checksum and the archive's structure
//! before anything is read. Pings and pongs carry a nonce (the dialer's
//! send time) so the dialer can time the round trip.

use wire::frame::{FrameAccessError, FrameBuf, MAX_FRAME_LEN};

const KIND_MESSAGE: u8 = 1;
const KIND_PING: u8 = 2;
const KIND_PONG: u8 = 3;
const HEAD_LEN: usize = 5;

/// One frame off a link.
#[derive(Debug)]
pub enum LinkFrame {
    Message(FrameBuf),
    Ping(u64),
    Pong(u64),
}

/// Why a link's bytes cannot be read: the link is closed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("unknown link frame kind {0}")]
    UnknownKind(u8),
    #[error("link frame of {0} bytes is larger than any frame")]
    TooLarge(usize),
    #[error("bad ping or pong of {0} bytes")]
    BadControl(usize),
    #[error(transparent)]
    Frame(#[from] FrameAccessError),
}

pub fn encode_message(out: &mut Vec<u8>, frame: &FrameBuf) {
    let bytes = frame.as_bytes();
    out.push(KIND_MESSAGE);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

pub fn encode_ping(out: &mut Vec<u8>, nonce: u64) {
    encode_control(out, KIND_PING, nonce);
}

pub fn encode_pong(out: &mut Vec<u8>, nonce: u64) {
    encode_control(out, KIND_PONG, nonce);
}

fn encode_control(out: &mut Vec<u8>, kind: u8, nonce: u64) {
    out.push(kind);
    out.extend_from_slice(&8u32.to_le_bytes());
    out.extend_from_slice(&nonce.to_le_bytes());
}

/// Reassembles link frames from received chunks. It holds at most one
/// frame's bytes plus one chunk.
#[derive(Default)]
pub struct LinkDecoder {
    buf: Vec<u8>,
    start: usize,
}

impl LinkDecoder {
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or
    /// why the link's bytes cannot be trusted any more.
    pub fn next_frame(&mut self) -> Result<Option<LinkFrame>, LinkError> {
        let pending = &self.buf[self.start..];
        if pending.len() < HEAD_LEN {
            return Ok(None);
        }
        let kind = pending[0];
        let len = u32::from_le_bytes(pending[1..HEAD_LEN].try_into().expect("4 bytes")) as usize;
        match kind {
            KIND_MESSAGE if len > MAX_FRAME_LEN => return Err(LinkError::TooLarge(len)),
            KIND_PING | KIND_PONG if len != 8 => return Err(LinkError::BadControl(len)),
            KIND_MESSAGE | KIND_PING | KIND_PONG => {}
            other => return Err(LinkError::UnknownKind(other)),
        }
        if pending.len() < HEAD_LEN + len {
            return Ok(None);
        }
        let payload = &pending[HEAD_LEN..HEAD_LEN + len];
        let frame = match kind {
            KIND_MESSAGE => LinkFrame::Message(FrameBuf::from_network(payload)?),
            _ => {
                let nonce = u64::from_le_bytes(payload.try_into().expect("8 bytes"));
                if kind == KIND_PING {
                    LinkFrame::Ping(nonce)
                } else {
                    LinkFrame::Pong(nonce)
                }
            }
        };
        self.start += HEAD_LEN + len;
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::frame::Message;

    fn frame(n: u8) -> FrameBuf {
        FrameBuf::encode(&Message::RouterReply {
            origin_node: 1,
            request_seq: u64::from(n),
            error_code: 0,
            body: vec![n; 50],
        })
        .unwrap()
    }

    #[test]
    fn frames_survive_any_split() {
        let mut bytes = Vec::new();
        encode_message(&mut bytes, &frame(1));
        encode_ping(&mut bytes, 77);
        encode_message(&mut bytes, &frame(2));
        encode_pong(&mut bytes, 78);
        for chunk in [1, 3, 7, 64, bytes.len()] {
            let mut decoder = LinkDecoder::default();
            let mut seen = Vec::new();
            for piece in bytes.chunks(chunk) {
                decoder.extend(piece);
                while let Some(frame) = decoder.next_frame().unwrap() {
                    seen.push(match frame {
                        LinkFrame::Message(f) => format!("{:?}", f.message()),
                        LinkFrame::Ping(n) => format!("ping {n}"),
                        LinkFrame::Pong(n) => format!("pong {n}"),
                    });
                }
            }
            assert_eq!(seen.len(), 4, "chunks of {chunk}");
            assert_eq!(seen[1], "ping 77");
            assert_eq!(seen[3], "pong 78");
        }
    }

    #[test]
    fn a_flipped_bit_an_unknown_kind_or_a_huge_length_is_an_error() {
        let mut bytes = Vec::new();
        encode_message(&mut bytes, &frame(1));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 20;
        flipped[last] ^= 1;
        let mut decoder = LinkDecoder::default();
        decoder.extend(&flipped);
        assert!(matches!(decoder.next_frame(), Err(LinkError::Frame(_))));
        let mut decoder = LinkDecoder::default();
        decoder.extend(&[9, 0, 0, 0, 0]);
        assert!(matches!(
            decoder.next_frame(),
            Err(LinkError::UnknownKind(9))
        ));
        let mut decoder = LinkDecoder::default();
        decoder.extend(&[1, 0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(decoder.next_frame(), Err(LinkError::TooLarge(_))));
        let mut decoder = LinkDecoder::default();
        decoder.extend(&[2, 9, 0, 0, 0]);
        assert!(matches!(
            decoder.next_frame(),
            Err(LinkError::BadControl(9))
        ));
    }
}
