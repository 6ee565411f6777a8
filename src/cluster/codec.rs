//! What a link carries after its handshake: sealed records, each holding
//! whole frames, laid out so that every frame's payload can be read where
//! it lies.
//!
//! ```text
//! record = kind 4 u8 | 0 u8 x3 | body_len u32 LE | 0 u8 x8 | body | mac [16]
//! body   = frame*
//! frame  = kind u8 | 0 u8 x3 | len u32 LE | 0 u8 x8 | payload | zeros to a multiple of 16
//!          (kind 1 message, 2 ping, 3 pong)
//! mac    = HMAC-SHA256(key, seq u64 LE | record head | body)[..16]
//! ```
//!
//! Every head is 16 bytes, every payload is padded to a multiple of 16 and
//! the MAC is 16 bytes, so every record and every payload starts at a
//! multiple of [`LINK_ALIGN`] from the start of the stream. A reader that
//! collects records into one buffer aligned to it ([`LinkDecoder`]) can
//! check a record's MAC and then hand out each message as the archive
//! where it lies, validated in place (`wire::frame::access`): no copy and
//! no allocation per frame.
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
//! it (the rkyv archive and its checksum); the reader checks its length
//! before it waits for it, and its checksum and the archive's structure
//! before anything reads it. Pings and pongs carry a nonce (the dialer's
//! send time) so the dialer can time the round trip.

use hmac::{Hmac, KeyInit, Mac};
use rkyv::util::AlignedVec;
use sha2::Sha256;
use wire::frame::{ArchivedMessage, FrameAccessError, FrameBuf, FRAME_ALIGN, MAX_FRAME_LEN};

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
/// Bytes of a record's MAC: a truncated HMAC-SHA256 (128 bits, as TLS's
/// AEAD tags).
pub const RECORD_MAC_LEN: usize = 16;
/// The largest record body a writer seals: a batch closes its record at
/// this size and opens another. Bounds what a reader holds before it can
/// check a MAC.
pub const RECORD_BODY_MAX_BYTES: usize = 256 * 1024;
/// The largest record body a reader accepts: one frame of the largest
/// size always fits in a record of its own.
const RECORD_BODY_ACCEPTED_MAX: usize = HEAD_LEN + padded(MAX_FRAME_LEN);

// A payload at a multiple of LINK_ALIGN in a buffer aligned to it is
// aligned for the archive; the MAC keeps the next record on the grid.
const _: () = assert!(LINK_ALIGN % FRAME_ALIGN == 0);
const _: () = assert!(AlignedVec::<16>::ALIGNMENT % LINK_ALIGN == 0);
const _: () = assert!(HEAD_LEN % LINK_ALIGN == 0 && RECORD_MAC_LEN % LINK_ALIGN == 0);

type HmacSha256 = Hmac<Sha256>;

/// `len` rounded up to a multiple of [`LINK_ALIGN`].
const fn padded(len: usize) -> usize {
    len.div_ceil(LINK_ALIGN) * LINK_ALIGN
}

/// One frame off a link, read where it lies in the decoder's buffer.
#[derive(Debug)]
pub enum LinkFrame<'a> {
    /// A message frame, validated (checksum and archive structure).
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
    /// The record's MAC does not match: forged, altered, replayed,
    /// reordered, or sealed with another key.
    #[error("a record failed its authentication")]
    Auth,
    #[error(transparent)]
    Frame(#[from] FrameAccessError),
}

/// Appends a 16-byte head: `kind`, three zeros, `len`, eight zeros.
fn put_head(out: &mut Vec<u8>, kind: u8, len: usize) {
    let mut head = [0u8; HEAD_LEN];
    head[0] = kind;
    head[HEAD_LEN_AT..HEAD_LEN_AT + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&head);
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
        self.room(out, HEAD_LEN + padded(bytes.len()));
        put_head(out, KIND_MESSAGE, bytes.len());
        out.extend_from_slice(bytes);
        out.resize(out.len() + padded(bytes.len()) - bytes.len(), 0);
    }

    pub fn ping(&mut self, out: &mut Vec<u8>, nonce: u64) {
        self.control(out, KIND_PING, nonce);
    }

    pub fn pong(&mut self, out: &mut Vec<u8>, nonce: u64) {
        self.control(out, KIND_PONG, nonce);
    }

    fn control(&mut self, out: &mut Vec<u8>, kind: u8, nonce: u64) {
        self.room(out, HEAD_LEN + padded(8));
        put_head(out, kind, 8);
        out.extend_from_slice(&nonce.to_le_bytes());
        out.resize(out.len() + padded(8) - 8, 0);
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
        // A writer's buffer holds whole records from the start of a send,
        // and sends hold whole records: a record opened off the grid would
        // misalign every payload after it at the reader.
        assert_eq!(out.len() % LINK_ALIGN, 0, "a link record off the alignment grid");
        self.open = Some(out.len());
        put_head(out, KIND_RECORD, 0);
    }

    /// Seals the open record, if any: its length and its MAC. A writer
    /// calls it once before each send.
    pub fn seal(&mut self, out: &mut Vec<u8>) {
        let Some(start) = self.open.take() else {
            return;
        };
        let body_len = (out.len() - start - HEAD_LEN) as u32;
        out[start + HEAD_LEN_AT..start + HEAD_LEN_AT + 4].copy_from_slice(&body_len.to_le_bytes());
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

/// Reassembles records from received chunks in one buffer aligned to
/// [`LINK_ALIGN`], checks each one's MAC, and hands out its frames where
/// they lie. It holds at most one record's bytes plus one chunk.
pub struct LinkDecoder {
    /// Bytes received and not yet read. Offsets in it keep the stream's
    /// alignment: `start` is always a multiple of `LINK_ALIGN` between
    /// records, and the buffer only moves its bytes down from there.
    buf: AlignedVec,
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
            buf: AlignedVec::new(),
            start: 0,
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            seq: 0,
            record_end: None,
        }
    }

    /// Records whose MAC was checked so far.
    pub fn records(&self) -> u64 {
        self.seq
    }

    pub fn extend(&mut self, bytes: &[u8]) {
        // Only called once every frame of the last whole record was taken
        // (`next_frame` returns `None` only then), so nothing in use moves,
        // and `start` is on the grid, so moving down keeps every offset's
        // alignment.
        debug_assert!(self.record_end.is_none());
        assert_eq!(self.start % LINK_ALIGN, 0, "a link decoder off the alignment grid");
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
        // The length is read before the MAC can be checked, so it is
        // bounded first: a forger cannot make the reader wait for, or
        // hold, more than one largest frame.
        let len = u32::from_le_bytes(
            pending[HEAD_LEN_AT..HEAD_LEN_AT + 4]
                .try_into()
                .expect("4 bytes"),
        ) as usize;
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
        // Authentic, but a sender of another layout would put the next
        // record off the grid.
        read_head(&record[..HEAD_LEN])?;
        if len % LINK_ALIGN != 0 {
            return Err(LinkError::Layout);
        }
        self.start += HEAD_LEN;
        self.record_end = Some(self.start + len);
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
            KIND_MESSAGE => LinkFrame::Message(wire::frame::access(payload)?),
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
