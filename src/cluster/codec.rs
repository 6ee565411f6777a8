//! What a link carries after its handshake: sealed records, each holding
//! whole frames, laid out so that every frame's payload can be read where
//! it lies.
//!
//! ```text
//! record = kind 4 u8 | 0 u8 x3 | body_len u32 LE | 0 u8 x8 | sealed body | tag [16]
//! body   = frame*
//! frame  = kind u8 | 0 u8 x3 | len u32 LE | 0 u8 x8 | payload | zeros to a multiple of 16
//!          (kind 1 message, 2 ping, 3 pong)
//! sealed body, tag = AES-128-GCM(key, nonce = seq u64 LE | 0 u32, aad = record head, body)
//! ```
//!
//! Every head is 16 bytes, every payload is padded to a multiple of 16 and
//! the tag is 16 bytes, so every record and every payload starts at a
//! multiple of [`LINK_ALIGN`] from the start of the stream. A reader that
//! collects records into one buffer aligned to it ([`LinkDecoder`]) opens
//! a record in place and then hands out each message as the archive where
//! it lies, validated in place (`wire::frame::access_archive`): no copy and
//! no allocation per frame.
//!
//! A writer seals what it has in one record per send (the frames that
//! queued in one loop turn, and a ping when one is due), so sealing costs
//! one AEAD call per batch, not one per frame, and still authenticates
//! every frame in it. `key` is the first half of this direction's key of
//! this connection (`handshake::LinkKeys`); `seq` counts records in this
//! direction from 0 and is not sent (TLS 1.3's nonce, without its mask:
//! the key is fresh per connection), so a record dropped, replayed or
//! reordered fails its tag like a forged one. A record whose tag fails
//! closes the link: nothing of it is handed on. The AEAD was chosen for
//! speed (AES-GCM with AES-NI and carry-less multiply seals a batch several
//! times faster than HMAC-SHA256 hashes it); the links promise
//! authentication, not confidentiality (docs/cluster.md says why).
//!
//! A message's payload is one internal frame's rkyv archive, without the
//! checksum it carries elsewhere (`FrameBuf::archive`): the tag already
//! proves every bit of it. The reader checks its length before it waits
//! for it and the archive's structure before anything reads it. Pings and
//! pongs carry a nonce (the dialer's send time) so the dialer can time the
//! round trip.

use ring::aead::{self, Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_128_GCM};
use rkyv::util::AlignedVec;
use wire::frame::{
    ArchivedMessage, FrameAccessError, FrameBuf, FrameEncodeError, Message, FRAME_ALIGN,
    MAX_FRAME_LEN,
};

const KIND_MESSAGE: u8 = 1;
const KIND_PING: u8 = 2;
const KIND_PONG: u8 = 3;
const KIND_RECORD: u8 = 4;
/// Bytes of a record's head and of a frame's head alike.
const HEAD_LEN: usize = 16;
/// Where a head keeps its length (after the kind and three zeros); the
/// rest of the head is zeros.
const HEAD_LEN_AT: usize = 4;
/// What every record, head and payload starts at a multiple of, counted
/// from the start of the stream.
pub const LINK_ALIGN: usize = 16;
/// Bytes of a record's tag (AES-GCM's, as TLS's records).
pub const RECORD_TAG_LEN: usize = aead::MAX_TAG_LEN;
/// The capacity a batch keeps between sends: a burst that grew it past
/// this gives the rest back.
const BATCH_KEPT_MAX_BYTES: usize = 2 * RECORD_BODY_MAX_BYTES;
/// Bytes of a direction's key of a connection (`handshake::LinkKeys`).
pub const LINK_KEY_LEN: usize = 32;
/// The largest record body a writer seals: a batch closes its record at
/// this size and opens another. Bounds what a reader holds before it can
/// check a tag.
pub const RECORD_BODY_MAX_BYTES: usize = 256 * 1024;
/// The largest record body a reader accepts: one frame of the largest
/// size always fits in a record of its own.
const RECORD_BODY_ACCEPTED_MAX: usize = HEAD_LEN + padded(MAX_FRAME_LEN);

// A payload at a multiple of LINK_ALIGN in a buffer aligned to it is
// aligned for the archive; the tag keeps the next record on the grid.
const _: () = assert!(LINK_ALIGN.is_multiple_of(FRAME_ALIGN));
const _: () = assert!(AlignedVec::<16>::ALIGNMENT.is_multiple_of(LINK_ALIGN));
const _: () = assert!(HEAD_LEN.is_multiple_of(LINK_ALIGN));
const _: () = assert!(RECORD_TAG_LEN.is_multiple_of(LINK_ALIGN));

/// The record key of a direction's key: AES-128 takes its first half (the
/// key is an HMAC-SHA256 output, so every half of it is as good).
fn record_key(key: &[u8; LINK_KEY_LEN]) -> LessSafeKey {
    let bytes = &key[..AES_128_GCM.key_len()];
    LessSafeKey::new(UnboundKey::new(&AES_128_GCM, bytes).expect("16 bytes are an AES-128 key"))
}

/// The nonce of record `seq`: unique per key, since a key serves one
/// direction of one connection and `seq` only grows.
fn record_nonce(seq: u64) -> Nonce {
    let mut nonce = [0u8; aead::NONCE_LEN];
    nonce[..8].copy_from_slice(&seq.to_le_bytes());
    Nonce::assume_unique_for_key(nonce)
}

/// `len` rounded up to a multiple of [`LINK_ALIGN`].
const fn padded(len: usize) -> usize {
    len.div_ceil(LINK_ALIGN) * LINK_ALIGN
}

/// One frame off a link, read where it lies in the decoder's buffer.
#[derive(Debug)]
pub enum LinkFrame<'a> {
    /// A message frame, its archive's structure validated.
    Message(&'a ArchivedMessage),
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
    /// Reserved bytes or padding that are not zero, or a record body off
    /// the alignment grid: the sender does not follow this layout.
    #[error("a link record or frame breaks the layout (reserved bytes, padding or alignment)")]
    Layout,
    /// The record's tag does not match: forged, altered, replayed,
    /// reordered, or sealed with another key.
    #[error("a record failed its authentication")]
    Auth,
    /// Bytes that cannot be a record sealed with the link's key (not a
    /// record's head, or longer than any record), refused before a tag
    /// could be checked: as unauthenticated as a tag that fails, and
    /// counted with those.
    #[error("bytes that are not a sealed record: {0}")]
    Unsealed(&'static str),
    #[error(transparent)]
    Frame(#[from] FrameAccessError),
}

impl LinkError {
    /// Whether the bytes were never shown to come from the peer that
    /// proved itself in the handshake (a bad tag, or refused before it):
    /// counted as an authentication failure, not as an invalid frame.
    pub fn is_unauthenticated(&self) -> bool {
        matches!(self, LinkError::Auth | LinkError::Unsealed(_))
    }
}

/// Writes a 16-byte head at the start of `at` (zeros already): `kind`,
/// three zeros, `len`, eight zeros.
fn set_head(at: &mut [u8], kind: u8, len: usize) {
    at[0] = kind;
    at[HEAD_LEN_AT..HEAD_LEN_AT + 4].copy_from_slice(&(len as u32).to_le_bytes());
}

/// A head's kind and length, if its reserved bytes are zeros.
fn read_head(head: &[u8]) -> Result<(u8, usize), LinkError> {
    let len = u32::from_le_bytes(
        head[HEAD_LEN_AT..HEAD_LEN_AT + 4]
            .try_into()
            .expect("4 bytes"),
    ) as usize;
    let reserved_zero = head[1..HEAD_LEN_AT]
        .iter()
        .chain(&head[HEAD_LEN_AT + 4..HEAD_LEN])
        .all(|&byte| byte == 0);
    if !reserved_zero {
        return Err(LinkError::Layout);
    }
    Ok((head[0], len))
}

/// Frames for one direction of a link, laid out as the records a writer
/// sends: heads, payloads encoded in place and padded, room for each tag.
/// [`Sealer::seal`] seals them where they lie, and the bytes go to the
/// socket as they are: a message is written once, by its encoder, and
/// copied by nobody after it.
#[derive(Debug, Default)]
pub struct Batch {
    bytes: Vec<u8>,
    /// Where each record starts; every one but the last is followed by
    /// the room for its tag.
    records: Vec<usize>,
    messages: usize,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Message frames in the batch.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Bytes the batch holds (its frames, before sealing).
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing is queued (no frame since the last seal).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Appends a message, encoded in place (rkyv writes it straight into
    /// the batch). A message past the frame limit leaves the batch as it
    /// was.
    pub fn message(&mut self, message: &Message) -> Result<(), FrameEncodeError> {
        let opened = self.open_record_if_none();
        let head_at = self.bytes.len();
        self.bytes.resize(head_at + HEAD_LEN, 0);
        let len = match wire::frame::encode_archive_into(message, &mut self.bytes) {
            Ok(len) => len,
            Err(error) => {
                self.bytes.truncate(head_at);
                if opened {
                    self.records.pop();
                    self.bytes.truncate(head_at - HEAD_LEN);
                }
                return Err(error);
            }
        };
        set_head(&mut self.bytes[head_at..], KIND_MESSAGE, len);
        self.bytes.resize(head_at + HEAD_LEN + padded(len), 0);
        let record = *self.records.last().expect("a record is open");
        let body = self.bytes.len() - record - HEAD_LEN;
        if body > RECORD_BODY_MAX_BYTES && head_at > record + HEAD_LEN {
            // Past the bound behind other frames: the message opens the
            // next record, moved up to make room for the closed record's
            // tag and the new head (once per RECORD_BODY_MAX_BYTES).
            let frame_len = self.bytes.len() - head_at;
            let gap = RECORD_TAG_LEN + HEAD_LEN;
            self.bytes.resize(self.bytes.len() + gap, 0);
            self.bytes
                .copy_within(head_at..head_at + frame_len, head_at + gap);
            self.bytes[head_at..head_at + gap].fill(0);
            set_head(&mut self.bytes[head_at + RECORD_TAG_LEN..], KIND_RECORD, 0);
            self.records.push(head_at + RECORD_TAG_LEN);
        }
        self.messages += 1;
        Ok(())
    }

    pub fn ping(&mut self, nonce: u64) {
        self.control(KIND_PING, nonce);
    }

    pub fn pong(&mut self, nonce: u64) {
        self.control(KIND_PONG, nonce);
    }

    fn control(&mut self, kind: u8, nonce: u64) {
        let len = HEAD_LEN + padded(8);
        if let Some(&record) = self.records.last() {
            let body = self.bytes.len() - record - HEAD_LEN;
            if body > 0 && body + len > RECORD_BODY_MAX_BYTES {
                self.close_record();
            }
        }
        self.open_record_if_none();
        let at = self.bytes.len();
        self.bytes.resize(at + len, 0);
        set_head(&mut self.bytes[at..], kind, 8);
        self.bytes[at + HEAD_LEN..at + HEAD_LEN + 8].copy_from_slice(&nonce.to_le_bytes());
    }

    /// Opens the batch's first record if it has none; whether it did.
    /// (After the first, the last record is always the open one: a record
    /// is closed only by opening the next.)
    fn open_record_if_none(&mut self) -> bool {
        if !self.records.is_empty() {
            return false;
        }
        self.start_record();
        true
    }

    /// Closes the open record (the room for its tag) and opens the next.
    fn close_record(&mut self) {
        self.bytes.resize(self.bytes.len() + RECORD_TAG_LEN, 0);
        self.start_record();
    }

    fn start_record(&mut self) {
        let at = self.bytes.len();
        // Records are whole from the start of a send and sends hold whole
        // records: a record opened off the grid would misalign every
        // payload after it at the reader.
        assert_eq!(at % LINK_ALIGN, 0, "a link record off the alignment grid");
        self.records.push(at);
        self.bytes.resize(at + HEAD_LEN, 0);
        set_head(&mut self.bytes[at..], KIND_RECORD, 0);
    }

    /// Every message not sealed yet, as frames of their own (a link that
    /// failed gives them back to its router); the batch is empty after it.
    pub fn drain_frames(&mut self) -> Vec<FrameBuf> {
        let frames = if self.records.is_empty() {
            Vec::new()
        } else {
            unsent_frames(&self.bytes, &self.records)
        };
        self.bytes.clear();
        self.records.clear();
        self.messages = 0;
        frames
    }

    /// The sealed bytes, for the socket; the batch is empty after it.
    pub fn take_sealed(&mut self) -> Vec<u8> {
        debug_assert!(self.records.is_empty(), "take_sealed before seal");
        std::mem::take(&mut self.bytes)
    }

    /// Takes `bytes` back (a send returned them) to queue into again; what
    /// a burst grew it past `BATCH_KEPT_MAX_BYTES` is let go.
    pub fn reuse(&mut self, mut bytes: Vec<u8>) {
        debug_assert!(self.bytes.is_empty() && self.records.is_empty());
        bytes.clear();
        if bytes.capacity() > BATCH_KEPT_MAX_BYTES {
            bytes.shrink_to(BATCH_KEPT_MAX_BYTES);
        }
        self.bytes = bytes;
    }
}

/// Seals one direction's records: the key and the next record's number.
pub struct Sealer {
    key: LessSafeKey,
    seq: u64,
}

impl Sealer {
    pub fn new(key: &[u8; LINK_KEY_LEN]) -> Sealer {
        Sealer {
            key: record_key(key),
            seq: 0,
        }
    }

    /// Records this sealer has sealed so far (the next record's number).
    pub fn records_sealed(&self) -> u64 {
        self.seq
    }

    /// Seals every record of `batch` in place: its length, its body and
    /// its tag. A writer calls it once before each send, then sends
    /// `batch.take_sealed()`.
    pub fn seal(&mut self, batch: &mut Batch) {
        if batch.records.is_empty() {
            return;
        }
        batch.bytes.resize(batch.bytes.len() + RECORD_TAG_LEN, 0);
        let ends = batch.records[1..]
            .iter()
            .copied()
            .chain(std::iter::once(batch.bytes.len()));
        for (start, end) in batch.records.iter().copied().zip(ends) {
            let record = &mut batch.bytes[start..end];
            let body_len = record.len() - HEAD_LEN - RECORD_TAG_LEN;
            record[HEAD_LEN_AT..HEAD_LEN_AT + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
            let (head, rest) = record.split_at_mut(HEAD_LEN);
            let (body, tag_room) = rest.split_at_mut(body_len);
            let tag = self
                .key
                .seal_in_place_separate_tag(record_nonce(self.seq), Aad::from(&*head), body)
                // Only a body past AES-GCM's 64 GiB fails; a record is at
                // most one frame or RECORD_BODY_MAX_BYTES.
                .expect("a record body AES-GCM can seal");
            tag_room.copy_from_slice(tag.as_ref());
            self.seq += 1;
        }
        batch.records.clear();
        batch.messages = 0;
    }
}

/// Every message frame of the unsealed records of `bytes` from `records`,
/// as frames of their own (a link gives back what it could not send).
fn unsent_frames(bytes: &[u8], records: &[usize]) -> Vec<FrameBuf> {
    let ends = records[1..]
        .iter()
        .map(|&next| next - RECORD_TAG_LEN)
        .chain(std::iter::once(bytes.len()));
    let mut frames = Vec::new();
    for (start, end) in records.iter().copied().zip(ends) {
        let mut at = start + HEAD_LEN;
        while at < end {
            let (kind, len) =
                read_head(&bytes[at..at + HEAD_LEN]).expect("a head this batch wrote");
            let payload = &bytes[at + HEAD_LEN..at + HEAD_LEN + len];
            if kind == KIND_MESSAGE {
                frames
                    .push(FrameBuf::from_archive(payload).expect("an archive this batch encoded"));
            }
            at += HEAD_LEN + padded(len);
        }
    }
    frames
}

/// Reassembles records from received chunks in one buffer aligned to
/// [`LINK_ALIGN`], opens each one in place (its tag checked), and hands out
/// its frames where they lie. It holds at most one record's bytes plus one
/// chunk.
pub struct LinkDecoder {
    /// Bytes received and not yet read. Offsets in it keep the stream's
    /// alignment: `start` is always a multiple of `LINK_ALIGN` between
    /// records, and the buffer only moves its bytes down from there.
    buf: AlignedVec,
    start: usize,
    key: LessSafeKey,
    seq: u64,
    /// The body of the record being read, `start..end` of `buf`, once it
    /// was opened.
    record_end: Option<usize>,
}

impl LinkDecoder {
    /// A decoder of records sealed with `key`.
    pub fn new(key: &[u8; LINK_KEY_LEN]) -> LinkDecoder {
        LinkDecoder {
            buf: AlignedVec::new(),
            start: 0,
            key: record_key(key),
            seq: 0,
            record_end: None,
        }
    }

    /// Records opened so far (their tags checked).
    pub fn records(&self) -> u64 {
        self.seq
    }

    pub fn extend(&mut self, bytes: &[u8]) {
        // Only called once every frame of the last whole record was taken
        // (`next_frame` returns `None` only then), so nothing in use moves,
        // and `start` is on the grid, so moving down keeps every offset's
        // alignment.
        debug_assert!(self.record_end.is_none());
        assert_eq!(
            self.start % LINK_ALIGN,
            0,
            "a link decoder off the alignment grid"
        );
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > self.buf.len() / 2 {
            let kept = self.buf.len() - self.start;
            self.buf.copy_within(self.start.., 0);
            self.buf.resize(kept, 0);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or
    /// why the link's bytes cannot be trusted any more.
    pub fn next_frame(&mut self) -> Result<Option<LinkFrame<'_>>, LinkError> {
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

    /// Opens the next record if it is whole; `false` if more bytes are
    /// needed.
    fn open_record(&mut self) -> Result<bool, LinkError> {
        let pending = &self.buf[self.start..];
        if pending.len() < HEAD_LEN {
            return Ok(false);
        }
        if pending[0] != KIND_RECORD {
            return Err(LinkError::Unsealed("not a record's head"));
        }
        // The length is read before the tag can be checked, so it is
        // bounded first: a forger cannot make the reader wait for, or
        // hold, more than one largest frame.
        let head: [u8; HEAD_LEN] = pending[..HEAD_LEN].try_into().expect("a head");
        let len = u32::from_le_bytes(
            head[HEAD_LEN_AT..HEAD_LEN_AT + 4]
                .try_into()
                .expect("4 bytes"),
        ) as usize;
        if len > RECORD_BODY_ACCEPTED_MAX {
            return Err(LinkError::Unsealed("longer than any record"));
        }
        if pending.len() < HEAD_LEN + len + RECORD_TAG_LEN {
            return Ok(false);
        }
        let body = self.start + HEAD_LEN;
        let tag = Tag::try_from(&self.buf[body + len..body + len + RECORD_TAG_LEN])
            .expect("a tag's bytes");
        // The tag is compared in constant time, and a body whose tag fails
        // is wiped before the error returns: nothing of it is read.
        self.key
            .open_in_place_separate_tag(
                record_nonce(self.seq),
                Aad::from(head),
                tag,
                &mut self.buf[body..body + len],
                0..,
            )
            .map_err(|_| LinkError::Auth)?;
        self.seq += 1;
        // Authentic, but a sender of another layout would put the next
        // record off the grid.
        read_head(&head)?;
        if !len.is_multiple_of(LINK_ALIGN) {
            return Err(LinkError::Layout);
        }
        self.start = body;
        self.record_end = Some(body + len);
        Ok(true)
    }

    /// The frame at `start`, inside an authenticated record ending at `end`.
    fn frame_in_record(&mut self, end: usize) -> Result<LinkFrame<'_>, LinkError> {
        let pending = &self.buf[self.start..end];
        if pending.len() < HEAD_LEN {
            return Err(LinkError::Truncated);
        }
        let (kind, len) = read_head(&pending[..HEAD_LEN])?;
        match kind {
            KIND_MESSAGE if len > MAX_FRAME_LEN => return Err(LinkError::TooLarge(len)),
            KIND_PING | KIND_PONG if len != 8 => return Err(LinkError::BadControl(len)),
            KIND_MESSAGE | KIND_PING | KIND_PONG => {}
            other => return Err(LinkError::UnknownKind(other)),
        }
        if pending.len() < HEAD_LEN + padded(len) {
            return Err(LinkError::Truncated);
        }
        if pending[HEAD_LEN + len..HEAD_LEN + padded(len)]
            .iter()
            .any(|&byte| byte != 0)
        {
            return Err(LinkError::Layout);
        }
        let at = self.start + HEAD_LEN;
        self.start = at + padded(len);
        let payload = &self.buf[at..at + len];
        Ok(match kind {
            KIND_MESSAGE => LinkFrame::Message(wire::frame::access_archive(payload)?),
            _ => {
                let nonce = u64::from_le_bytes(payload.try_into().expect("8 bytes"));
                if kind == KIND_PING {
                    LinkFrame::Ping(nonce)
                } else {
                    LinkFrame::Pong(nonce)
                }
            }
        })
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
