//! What a link carries after its handshake: sealed records, each holding
//! whole frames.
//!
//! ```text
//! record  = kind 4 u8 | body_len u32 LE | sealed body | tag [16]
//! body    = frame*
//! frame   = kind u8 | len u32 LE | payload        (1 message, 2 ping, 3 pong)
//! sealed  = AES-128-GCM(key, nonce = 0u32 | seq u64 LE, aad = kind | body_len)
//! ```
//!
//! A writer seals what it has in one record per send (the frames that
//! queued in one loop turn, and a ping when one is due), so the AEAD costs
//! one seal per batch, not one per frame, and still authenticates every
//! frame in it (and hides it from the wire). `key` is this direction's key
//! of this connection (`handshake::LinkKeys`, an AES-128 key drawn from
//! it); `seq` counts records in this direction from 0 and is not sent, so a
//! record dropped, replayed or reordered fails its tag like a forged one. A
//! record whose tag fails closes the link: nothing of it is handed on.
//! docs/cluster.md says why AES-128-GCM here rather than an HMAC or TLS
//! (`bench/src/bin/link_records.rs` measures the three).
//!
//! A message's payload is one internal frame as `FrameBuf::as_bytes` gives
//! it (the rkyv archive and its checksum), read back with
//! `FrameBuf::from_network`, which checks the length before anything is
//! allocated and the checksum and the archive's structure before anything
//! is read. Pings and pongs carry a nonce (the dialer's send time) so the
//! dialer can time the round trip.

use hmac::{Hmac, KeyInit, Mac};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use sha2::Sha256;
use wire::frame::{FrameAccessError, FrameBuf, MAX_FRAME_LEN};

const KIND_MESSAGE: u8 = 1;
const KIND_PING: u8 = 2;
const KIND_PONG: u8 = 3;
const KIND_RECORD: u8 = 4;
const HEAD_LEN: usize = 5;
/// Bytes of a record's AES-GCM tag.
pub const RECORD_TAG_LEN: usize = 16;
/// The largest record body a writer seals: a batch closes its record at
/// this size and opens another. Bounds what a reader holds before it can
/// check a tag.
pub const RECORD_BODY_MAX_BYTES: usize = 256 * 1024;
/// The largest record body a reader accepts: one frame of the largest
/// size always fits in a record of its own.
const RECORD_BODY_ACCEPTED_MAX: usize = HEAD_LEN + MAX_FRAME_LEN;

/// What the AES-128 key of a link direction is drawn from its handshake
/// key with (HMAC-SHA256 as a PRF, first 16 bytes), once per link.
const AEAD_KEY_LABEL: &[u8] = b"routerd link records AES-128-GCM";

/// The AEAD key of a direction whose handshake key is `key`.
fn aead_key(key: &[u8]) -> LessSafeKey {
    let mut prf = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    prf.update(AEAD_KEY_LABEL);
    let derived = prf.finalize().into_bytes();
    let key = UnboundKey::new(&AES_128_GCM, &derived[..16]).expect("16 bytes is an AES-128 key");
    LessSafeKey::new(key)
}

/// Record `seq`'s nonce: 32 zero bits, then the number. One key per
/// direction of one connection and a number that only grows: never reused.
fn nonce(seq: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&seq.to_le_bytes());
    Nonce::assume_unique_for_key(bytes)
}

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
    /// The record's tag does not match: forged, altered, replayed,
    /// reordered, or sealed with another key.
    #[error("a record failed its authentication")]
    Auth,
    #[error(transparent)]
    Frame(#[from] FrameAccessError),
}

/// Seals one direction's records: the key and the next record's number.
pub struct Sealer {
    key: LessSafeKey,
    seq: u64,
    /// Where the open record starts in the writer's buffer, if one is open.
    open: Option<usize>,
}

impl Sealer {
    pub fn new(key: &[u8]) -> Sealer {
        Sealer {
            key: aead_key(key),
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

    /// Records sealed so far (what the link's record counter adds).
    pub fn records_sealed(&self) -> u64 {
        self.seq
    }

    /// Seals the open record, if any: its length, its body encrypted in
    /// place, its tag. A writer calls it once before each send.
    pub fn seal(&mut self, out: &mut Vec<u8>) {
        let Some(start) = self.open.take() else {
            return;
        };
        let body_len = (out.len() - start - HEAD_LEN) as u32;
        out[start + 1..start + HEAD_LEN].copy_from_slice(&body_len.to_le_bytes());
        let (head, body) = out[start..].split_at_mut(HEAD_LEN);
        // Fails only past AES-GCM's 64 GiB per message; a body is at most
        // RECORD_BODY_ACCEPTED_MAX.
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(self.seq), Aad::from(&*head), body)
            .expect("a record body is far below AES-GCM's limit");
        out.extend_from_slice(tag.as_ref());
        self.seq += 1;
    }
}

/// Reassembles records from received chunks, checks and decrypts each one, and
/// hands out its frames. It holds at most one record's bytes plus one
/// chunk.
pub struct LinkDecoder {
    buf: Vec<u8>,
    start: usize,
    key: LessSafeKey,
    seq: u64,
    /// The body of the record being read, `start..end` of `buf`, once its
    /// tag was checked and it was decrypted in place.
    record_end: Option<usize>,
}

impl LinkDecoder {
    /// A decoder of records sealed with `key`.
    pub fn new(key: &[u8]) -> LinkDecoder {
        LinkDecoder {
            buf: Vec::new(),
            start: 0,
            key: aead_key(key),
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
                // The record is read: skip its tag.
                self.start = end + RECORD_TAG_LEN;
                self.record_end = None;
            }
            if !self.open_record()? {
                return Ok(None);
            }
        }
    }

    /// Checks and decrypts the next record if it is whole; `false` if more
    /// bytes are needed.
    fn open_record(&mut self) -> Result<bool, LinkError> {
        let pending = &mut self.buf[self.start..];
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
        if pending.len() < HEAD_LEN + len + RECORD_TAG_LEN {
            return Ok(false);
        }
        let (head, rest) = pending.split_at_mut(HEAD_LEN);
        // ring compares the tag in constant time, and leaves nothing of a
        // record that fails it for anyone to read.
        self.key
            .open_in_place(nonce(self.seq), Aad::from(&*head), &mut rest[..len + RECORD_TAG_LEN])
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

    /// What the wire carries of a record is its head and ciphertext: a
    /// frame's bytes do not appear in it, and two records of the same
    /// frames differ (each has its own nonce).
    #[test]
    fn a_sealed_record_hides_its_frames() {
        let mut sealer = Sealer::new(KEY);
        let plain = frame(9);
        let mut first = Vec::new();
        sealer.message(&mut first, &plain);
        sealer.seal(&mut first);
        let mut second = Vec::new();
        sealer.message(&mut second, &plain);
        sealer.seal(&mut second);
        let payload = plain.as_bytes();
        assert_eq!(first.len(), HEAD_LEN + HEAD_LEN + payload.len() + RECORD_TAG_LEN);
        let visible = |record: &[u8]| record.windows(16).any(|w| payload.windows(16).any(|p| p == w));
        assert!(!visible(&first), "a run of the frame's bytes is readable on the wire");
        assert_ne!(first[HEAD_LEN..], second[HEAD_LEN..]);
        let mut both = first.clone();
        both.extend_from_slice(&second);
        let seen = decode_all(&mut LinkDecoder::new(KEY), &both, 5).unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], seen[1]);
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
