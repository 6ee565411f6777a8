//! What a link carries after its handshake: sealed records, each holding
//! whole frames.
//!
//! ```text
//! record  = kind 4 u8 | body_len u32 LE | body | mac [16]
//! body    = frame*
//! frame   = kind u8 | len u32 LE | payload        (1 message, 2 ping, 3 pong)
//! mac     = HMAC-SHA256(key, seq u64 LE | kind | body_len | body)[..16]
//! ```
//!
//! A writer seals what it has in one record per send (the frames that
//! queued in one loop turn, and a ping when one is due), so the MAC costs
//! one HMAC per batch, not one per frame, and still authenticates every
//! frame in it. `key` is this direction's key of this connection
//! (`handshake::LinkKeys`); `seq` counts records in this direction from 0
//! and is not sent, so a record dropped, replayed or reordered fails its
//! MAC like a forged one. A record whose MAC fails closes the link: nothing
//! of it is handed on.
//!
//! A message's payload is one internal frame as `FrameBuf::as_bytes` gives
//! it (the rkyv archive and its checksum), read back with
//! `FrameBuf::from_network`, which checks the length before anything is
//! allocated and the checksum and the archive's structure before anything
//! is read. Pings and pongs carry a nonce (the dialer's send time) so the
//! dialer can time the round trip.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use wire::frame::{FrameAccessError, FrameBuf, MAX_FRAME_LEN};

const KIND_MESSAGE: u8 = 1;
const KIND_PING: u8 = 2;
const KIND_PONG: u8 = 3;
const KIND_RECORD: u8 = 4;
const HEAD_LEN: usize = 5;
/// Bytes of a record's MAC: a truncated HMAC-SHA256 (128 bits, as TLS's
/// AEAD tags).
pub const RECORD_MAC_LEN: usize = 16;
/// The largest record body a writer seals: a batch closes its record at
/// this size and opens another. Bounds what a reader holds before it can
/// check a MAC.
pub const RECORD_BODY_MAX_BYTES: usize = 256 * 1024;
/// The largest record body a reader accepts: one frame of the largest
/// size always fits in a record of its own.
const RECORD_BODY_ACCEPTED_MAX: usize = HEAD_LEN + MAX_FRAME_LEN;

type HmacSha256 = Hmac<Sha256>;

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
    #[error("a frame runs past the end of its record")]
    Truncated,
    /// The record's MAC does not match: forged, altered, replayed,
    /// reordered, or sealed with another key.
    #[error("a record failed its authentication")]
    Auth,
    #[error(transparent)]
    Frame(#[from] FrameAccessError),
}

/// Seals one direction's records: the key and the next record's number.
pub struct Sealer {
    mac: HmacSha256,
    seq: u64,
    /// Where the open record starts in the writer's buffer, if one is open.
    open: Option<usize>,
}

impl Sealer {
    pub fn new(key: &[u8]) -> Sealer {
        Sealer {
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            seq: 0,
            open: None,
        }
    }

    /// Appends a message to the open record of `out` (opening one, or
    /// sealing a full one and opening the next).
    pub fn message(&mut self, out: &mut Vec<u8>, frame: &FrameBuf) {
        let bytes = frame.as_bytes();
        self.room(out, HEAD_LEN + bytes.len());
        out.push(KIND_MESSAGE);
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }

    pub fn ping(&mut self, out: &mut Vec<u8>, nonce: u64) {
        self.control(out, KIND_PING, nonce);
    }

    pub fn pong(&mut self, out: &mut Vec<u8>, nonce: u64) {
        self.control(out, KIND_PONG, nonce);
    }

    fn control(&mut self, out: &mut Vec<u8>, kind: u8, nonce: u64) {
        self.room(out, HEAD_LEN + 8);
        out.push(kind);
        out.extend_from_slice(&8u32.to_le_bytes());
        out.extend_from_slice(&nonce.to_le_bytes());
    }

    /// Opens a record with room for `len` more bytes of body.
    fn room(&mut self, out: &mut Vec<u8>, len: usize) {
        if let Some(start) = self.open {
            let body = out.len() - start - HEAD_LEN;
            if body == 0 || body + len <= RECORD_BODY_MAX_BYTES {
                return;
            }
            self.seal(out);
        }
        self.open = Some(out.len());
        out.push(KIND_RECORD);
        out.extend_from_slice(&0u32.to_le_bytes());
    }

    /// Seals the open record, if any: its length and its MAC. A writer
    /// calls it once before each send.
    pub fn seal(&mut self, out: &mut Vec<u8>) {
        let Some(start) = self.open.take() else {
            return;
        };
        let body_len = (out.len() - start - HEAD_LEN) as u32;
        out[start + 1..start + HEAD_LEN].copy_from_slice(&body_len.to_le_bytes());
        let tag = record_mac(&self.mac, self.seq, &out[start..]);
        out.extend_from_slice(&tag[..RECORD_MAC_LEN]);
        self.seq += 1;
    }
}

fn record_mac(key: &HmacSha256, seq: u64, record: &[u8]) -> [u8; 32] {
    let mut mac = key.clone();
    mac.update(&seq.to_le_bytes());
    mac.update(record);
    mac.finalize().into_bytes().into()
}

/// Reassembles records from received chunks, checks each one's MAC, and
/// hands out its frames. It holds at most one record's bytes plus one
/// chunk.
pub struct LinkDecoder {
    buf: Vec<u8>,
    start: usize,
    mac: HmacSha256,
    seq: u64,
    /// The body of the record being read, `start..end` of `buf`, once its
    /// MAC was checked.
    record_end: Option<usize>,
}

impl LinkDecoder {
    /// A decoder of records sealed with `key`.
    pub fn new(key: &[u8]) -> LinkDecoder {
        LinkDecoder {
            buf: Vec::new(),
            start: 0,
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            seq: 0,
            record_end: None,
        }
    }

    pub fn extend(&mut self, bytes: &[u8]) {
        // Only called once every frame of the last whole record was taken
        // (`next_frame` returns `None` only then), so nothing in use moves.
        debug_assert!(self.record_end.is_none());
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
        loop {
            if let Some(end) = self.record_end {
                if self.start < end {
                    return self.frame_in_record(end).map(Some);
                }
                // The record is read: skip its MAC.
                self.start = end + RECORD_MAC_LEN;
                self.record_end = None;
            }
            if !self.open_record()? {
                return Ok(None);
            }
        }
    }

    /// Checks the next record if it is whole; `false` if more bytes are
    /// needed.
    fn open_record(&mut self) -> Result<bool, LinkError> {
        let pending = &self.buf[self.start..];
        if pending.len() < HEAD_LEN {
            return Ok(false);
        }
        if pending[0] != KIND_RECORD {
            return Err(LinkError::UnknownKind(pending[0]));
        }
        let len = u32::from_le_bytes(pending[1..HEAD_LEN].try_into().expect("4 bytes")) as usize;
        if len > RECORD_BODY_ACCEPTED_MAX {
            return Err(LinkError::TooLarge(len));
        }
        if pending.len() < HEAD_LEN + len + RECORD_MAC_LEN {
            return Ok(false);
        }
        let record = &pending[..HEAD_LEN + len];
        let got = &pending[HEAD_LEN + len..HEAD_LEN + len + RECORD_MAC_LEN];
        let mut mac = self.mac.clone();
        mac.update(&self.seq.to_le_bytes());
        mac.update(record);
        // Constant-time: a forger learns nothing from how long this took.
        mac.verify_truncated_left(got)
            .map_err(|_| LinkError::Auth)?;
        self.seq += 1;
        self.start += HEAD_LEN;
        self.record_end = Some(self.start + len);
        Ok(true)
    }

    /// The frame at `start`, inside an authenticated record ending at `end`.
    fn frame_in_record(&mut self, end: usize) -> Result<LinkFrame, LinkError> {
        let pending = &self.buf[self.start..end];
        if pending.len() < HEAD_LEN {
            return Err(LinkError::Truncated);
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
            return Err(LinkError::Truncated);
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
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::frame::Message;

    const KEY: &[u8] = b"a key of this connection";

    fn frame(n: u8) -> FrameBuf {
        FrameBuf::encode(&Message::RouterReply {
            origin_node: 1,
            request_seq: u64::from(n),
            error_code: 0,
            body: vec![n; 50],
        })
        .unwrap()
    }

    /// Two records: a message and a ping, then a message and a pong.
    fn two_records() -> Vec<u8> {
        let mut sealer = Sealer::new(KEY);
        let mut bytes = Vec::new();
        sealer.message(&mut bytes, &frame(1));
        sealer.ping(&mut bytes, 77);
        sealer.seal(&mut bytes);
        sealer.message(&mut bytes, &frame(2));
        sealer.pong(&mut bytes, 78);
        sealer.seal(&mut bytes);
        bytes
    }

    fn decode_all(decoder: &mut LinkDecoder, bytes: &[u8], chunk: usize) -> Result<Vec<String>, LinkError> {
        let mut seen = Vec::new();
        for piece in bytes.chunks(chunk) {
            decoder.extend(piece);
            while let Some(frame) = decoder.next_frame()? {
                seen.push(match frame {
                    LinkFrame::Message(f) => format!("{:?}", f.message()),
                    LinkFrame::Ping(n) => format!("ping {n}"),
                    LinkFrame::Pong(n) => format!("pong {n}"),
                });
            }
        }
        Ok(seen)
    }

    #[test]
    fn frames_survive_any_split() {
        let bytes = two_records();
        for chunk in [1, 3, 7, 64, bytes.len()] {
            let seen = decode_all(&mut LinkDecoder::new(KEY), &bytes, chunk).unwrap();
            assert_eq!(seen.len(), 4, "chunks of {chunk}");
            assert_eq!(seen[1], "ping 77");
            assert_eq!(seen[3], "pong 78");
        }
    }

    /// The length of `two_records`' first record.
    fn first_record_len() -> usize {
        let mut sealer = Sealer::new(KEY);
        let mut first = Vec::new();
        sealer.message(&mut first, &frame(1));
        sealer.ping(&mut first, 77);
        sealer.seal(&mut first);
        first.len()
    }

    #[test]
    fn a_flipped_bit_anywhere_another_key_or_a_replay_fails_authentication() {
        let bytes = two_records();
        let first_len = first_record_len();
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 1;
            // A flip in a length field may leave the decoder waiting for
            // bytes that never come, or find a kind it does not know; it
            // never hands out a frame of a record it did not authenticate.
            if let Ok(seen) = decode_all(&mut LinkDecoder::new(KEY), &flipped, 16) {
                let intact = if at < first_len { 0 } else { 2 };
                assert_eq!(seen.len(), intact, "flip at {at}: {seen:?}");
            }
        }
        let mut flipped = bytes.clone();
        flipped[HEAD_LEN + 20] ^= 1;
        assert!(matches!(
            decode_all(&mut LinkDecoder::new(KEY), &flipped, bytes.len()),
            Err(LinkError::Auth)
        ));
        assert!(matches!(
            decode_all(&mut LinkDecoder::new(b"another key"), &bytes, bytes.len()),
            Err(LinkError::Auth)
        ));
        // The first record twice: the second copy has the wrong number.
        let mut replayed = bytes[..first_len].to_vec();
        replayed.extend_from_slice(&bytes[..first_len]);
        let mut decoder = LinkDecoder::new(KEY);
        decoder.extend(&replayed);
        assert!(decoder.next_frame().unwrap().is_some());
        assert!(decoder.next_frame().unwrap().is_some());
        assert!(matches!(decoder.next_frame(), Err(LinkError::Auth)));
    }

    #[test]
    fn an_unsealed_frame_a_huge_record_or_a_frame_past_its_record_is_an_error() {
        let mut decoder = LinkDecoder::new(KEY);
        decoder.extend(&[KIND_MESSAGE, 0, 0, 0, 0]);
        assert!(matches!(decoder.next_frame(), Err(LinkError::UnknownKind(1))));
        let mut decoder = LinkDecoder::new(KEY);
        decoder.extend(&[KIND_RECORD, 0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(decoder.next_frame(), Err(LinkError::TooLarge(_))));
        // Sealed, but its one frame claims more than the record holds.
        let mut sealer = Sealer::new(KEY);
        let mut bytes = Vec::new();
        sealer.ping(&mut bytes, 1);
        bytes.truncate(HEAD_LEN);
        bytes.extend_from_slice(&[KIND_PING, 8, 0, 0, 0, 1, 2]);
        sealer.seal(&mut bytes);
        let mut decoder = LinkDecoder::new(KEY);
        decoder.extend(&bytes);
        assert!(matches!(decoder.next_frame(), Err(LinkError::BadControl(8)) | Err(LinkError::Truncated)));
    }

    #[test]
    fn a_batch_past_the_record_bound_is_split_into_records() {
        let mut sealer = Sealer::new(KEY);
        let mut bytes = Vec::new();
        let one = frame(3);
        let per_record = RECORD_BODY_MAX_BYTES / (HEAD_LEN + one.as_bytes().len());
        let count = per_record * 2 + 1;
        for _ in 0..count {
            sealer.message(&mut bytes, &one);
        }
        sealer.seal(&mut bytes);
        assert_eq!(sealer.seq, 3);
        let seen = decode_all(&mut LinkDecoder::new(KEY), &bytes, 4096).unwrap();
        assert_eq!(seen.len(), count);
    }
}
