//! The internal frame envelope for cross-core and cross-node messages.
//!
//! A frame is one [`Message`] archived with rkyv 0.8, followed by an 8-byte
//! little-endian XXH64 checksum of the archive (seed [`CHECKSUM_SEED`]):
//!
//! ```text
//! [ rkyv archive of Message, root at its end ][ xxh64(archive) u64 LE ]
//! ```
//!
//! [`FrameBuf`] holds one frame in one 16-byte-aligned buffer, written once
//! by its producer and immutable afterwards. There are two ways to get one,
//! and they decide how it may be read:
//!
//! - [`FrameBuf::encode`] in this process: the bytes came from rkyv's own
//!   serializer, so [`FrameBuf::message`] reads them without validation.
//!   [`FrameBuf::encode_local`] is the cross-core path: encode on one core,
//!   move the `FrameBuf` through a channel, read it on another with no
//!   copy and no check, and no checksum computed either (it guards bytes
//!   that cross a network; memory handed between threads needs none). Only
//!   a frame from `encode` (or one that passed validation) carries its
//!   checksum and may be sent: [`FrameBuf::as_bytes`] refuses a local one.
//! - [`FrameBuf::from_network`] (copies once into aligned storage) or
//!   [`FrameBuf::from_aligned`] (takes an aligned buffer the reader filled):
//!   the checksum and then rkyv's bytecheck validation run first, and only a
//!   frame that passes both becomes a `FrameBuf`.
//!
//! [`access`] validates bytes in place without copying, for a caller that
//! already has them in aligned memory; [`access_archive`] does the same for
//! an archive without its checksum, which only a carrier that authenticates
//! its bytes may send ([`FrameBuf::archive`]).
//!
//! Why a checksum on top of bytecheck: bytecheck proves the archive is
//! structurally sound (tags, lengths, relative pointers, alignment), so
//! reading it is memory-safe, but a flipped bit in an integer or payload byte
//! still yields a valid, different message. The checksum turns that into an
//! error, and it also rejects truncation, which could otherwise move the
//! root onto bytes that happen to validate. It is not authentication:
//! nodes trust their network peers.

mod message;

pub use message::{
    ArchivedClientWire, ArchivedKeyWire, ArchivedMessage, ArchivedRouterHead, ClientWire, KeyWire,
    Message, RouterHead,
};

use rkyv::rancor;
use rkyv::util::AlignedVec;
use thiserror::Error;

use crate::hash::xxh64;

/// The largest frame, checksum included. It bounds one message between
/// cores or nodes, so it bounds what a node reads from a peer before
/// checking it, and the largest object state that can migrate.
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// Bytes of the checksum trailer.
pub const CHECKSUM_LEN: usize = 8;

/// The XXH64 seed of the trailer ("RTFR" and format version 2). A frame
/// format change changes the seed, so old and new frames never validate as
/// each other.
pub const CHECKSUM_SEED: u64 = 0x5254_4652_0000_0002;

/// The alignment a frame's bytes need for in-place access.
pub const FRAME_ALIGN: usize = std::mem::align_of::<ArchivedMessage>();

/// Why a message could not become a frame.
#[derive(Debug, Error)]
pub enum FrameEncodeError {
    /// The message archives to more than [`MAX_FRAME_LEN`] (an object state
    /// too large to migrate, for instance); nothing was sent.
    #[error("encoded frame is {len} bytes, more than MAX_FRAME_LEN {max_len}")]
    TooLarge {
        /// Bytes the frame would take, checksum included.
        len: usize,
        /// [`MAX_FRAME_LEN`].
        max_len: usize,
    },
    /// rkyv's serializer failed (it allocates; the error carries why).
    #[error("rkyv serialization failed: {0}")]
    Serialize(#[source] rancor::Error),
}

/// Why bytes from a peer (or a reader's buffer) are not a frame. Any of
/// these from a peer is a fault of the link that carried it.
#[derive(Debug, Error)]
pub enum FrameAccessError {
    /// Fewer bytes than the checksum and the smallest archive take.
    #[error("frame of {len} bytes is shorter than the smallest frame")]
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// More bytes than [`MAX_FRAME_LEN`]; refused before anything is copied.
    #[error("frame of {len} bytes exceeds MAX_FRAME_LEN {max_len}")]
    TooLarge {
        /// Bytes given.
        len: usize,
        /// [`MAX_FRAME_LEN`].
        max_len: usize,
    },
    /// The bytes do not start at a multiple of [`FRAME_ALIGN`] (only
    /// [`access`] asks; [`FrameBuf::from_network`] copies instead).
    #[error("frame bytes are not aligned to {FRAME_ALIGN}")]
    Misaligned,
    /// The trailer is not the XXH64 of the archive: bits changed or the
    /// frame was cut.
    #[error("frame checksum does not match its contents")]
    BadChecksum,
    /// rkyv's bytecheck refused the archive (a bad tag, length or relative
    /// pointer).
    #[error("frame failed validation: {0}")]
    Invalid(#[source] rancor::Error),
}

/// One frame in one aligned buffer. See the module documentation.
#[derive(Clone)]
pub struct FrameBuf {
    /// Invariant: holds a frame that either this process serialized or that
    /// passed `access`, and is never mutated after construction.
    bytes: AlignedVec,
    /// Whether the trailer holds the archive's checksum (zeros otherwise:
    /// an `encode_local` frame, which never leaves the process).
    sealed: bool,
}

impl FrameBuf {
    /// Archives `message` into a new frame, checksum included: one that
    /// may be sent to a peer ([`Self::as_bytes`]).
    pub fn encode(message: &Message) -> Result<FrameBuf, FrameEncodeError> {
        let mut frame = FrameBuf::encode_local(message)?;
        let checksum = xxh64(frame.archive(), CHECKSUM_SEED);
        let at = frame.bytes.len() - CHECKSUM_LEN;
        frame.bytes[at..].copy_from_slice(&checksum.to_le_bytes());
        frame.sealed = true;
        Ok(frame)
    }

    /// Archives `message` into a frame for another core of this process:
    /// the same layout, but the checksum is not computed (the trailer is
    /// zero), which saves hashing every frame twice per cross-core request.
    pub fn encode_local(message: &Message) -> Result<FrameBuf, FrameEncodeError> {
        let mut bytes =
            rkyv::to_bytes::<rancor::Error>(message).map_err(FrameEncodeError::Serialize)?;
        let len = bytes.len() + CHECKSUM_LEN;
        if len > MAX_FRAME_LEN {
            return Err(FrameEncodeError::TooLarge {
                len,
                max_len: MAX_FRAME_LEN,
            });
        }
        bytes.extend_from_slice(&[0; CHECKSUM_LEN]);
        Ok(FrameBuf {
            bytes,
            sealed: false,
        })
    }

    /// A frame of an archive a carrier held for this process (frames a link
    /// queued and could not send, given back): copied once into aligned
    /// storage and validated, without a checksum (see [`Self::archive`]),
    /// so it cannot be sent again as it is.
    pub fn from_archive(archive: &[u8]) -> Result<FrameBuf, FrameAccessError> {
        check_len(archive.len() + CHECKSUM_LEN)?;
        let mut bytes = AlignedVec::with_capacity(archive.len() + CHECKSUM_LEN);
        bytes.extend_from_slice(archive);
        access_archive(&bytes)?;
        bytes.extend_from_slice(&[0; CHECKSUM_LEN]);
        Ok(FrameBuf {
            bytes,
            sealed: false,
        })
    }

    /// Validates `bytes` from a peer (any alignment) and copies them once
    /// into aligned storage. The length is checked before anything is
    /// allocated, and the checksum before anything is copied.
    pub fn from_network(bytes: &[u8]) -> Result<FrameBuf, FrameAccessError> {
        check_len(bytes.len())?;
        check_checksum(bytes)?;
        let mut aligned = AlignedVec::with_capacity(bytes.len());
        aligned.extend_from_slice(bytes);
        FrameBuf::from_aligned(aligned)
    }

    /// Validates a frame a reader already placed in aligned storage, without
    /// copying it.
    pub fn from_aligned(bytes: AlignedVec) -> Result<FrameBuf, FrameAccessError> {
        access(&bytes)?;
        Ok(FrameBuf {
            bytes,
            sealed: true,
        })
    }

    /// The message, read in place without validation.
    pub fn message(&self) -> &ArchivedMessage {
        // SAFETY: `bytes` is only ever set by `encode`, where rkyv's own
        // serializer wrote a `Message` archive into 16-byte-aligned storage
        // followed by the trailer, or by `from_aligned`, after `access`
        // validated exactly these bytes with bytecheck. No method hands out
        // `&mut` to them, so they are unchanged since; the archive is
        // `bytes` minus the trailer, as both constructors laid it out.
        unsafe { rkyv::access_unchecked::<ArchivedMessage>(self.archive()) }
    }

    /// The frame's bytes, checksum included: what goes on the network.
    ///
    /// # Panics
    /// For a frame from [`Self::encode_local`], which has no checksum: a
    /// peer would reject it, so sending one is a bug in this process.
    pub fn as_bytes(&self) -> &[u8] {
        assert!(
            self.sealed,
            "an encode_local frame has no checksum and must not leave the process"
        );
        &self.bytes
    }

    /// Whether the frame carries its checksum (see [`Self::encode_local`]).
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Bytes of the frame, checksum included (at most [`MAX_FRAME_LEN`]).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: even the smallest message archives to some bytes. Here
    /// for the `len`/`is_empty` convention.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The rkyv archive alone, without the checksum trailer: for a
    /// carrier that authenticates what it carries (the cluster's sealed
    /// link records), where a checksum would only repeat what the carrier's
    /// tag proved. Its reader validates it with [`access_archive`].
    pub fn archive(&self) -> &[u8] {
        &self.bytes[..self.bytes.len() - CHECKSUM_LEN]
    }
}

impl std::fmt::Debug for FrameBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameBuf")
            .field("len", &self.len())
            .field("message", self.message())
            .finish()
    }
}

/// Validates a frame in place: length, alignment, checksum, then rkyv's
/// bytecheck over the archive. `bytes` must start at a multiple of
/// [`FRAME_ALIGN`] (an `AlignedVec` does); use [`FrameBuf::from_network`]
/// for bytes of unknown alignment.
pub fn access(bytes: &[u8]) -> Result<&ArchivedMessage, FrameAccessError> {
    check_len(bytes.len())?;
    check_aligned(bytes)?;
    let archive = check_checksum(bytes)?;
    rkyv::access::<ArchivedMessage, rancor::Error>(archive).map_err(FrameAccessError::Invalid)
}

/// Appends the archive of `message` to `out` (no checksum: see
/// [`FrameBuf::archive`]) and returns its length: a carrier that lays
/// frames out in its own buffer encodes each in place instead of into a
/// buffer of its own. `out` must end at a multiple of [`FRAME_ALIGN`] from
/// where its reader's aligned storage will start, since rkyv aligns what it
/// writes to `out`'s positions. A message past [`MAX_FRAME_LEN`] leaves `out`
/// as it was.
pub fn encode_archive_into(
    message: &Message,
    out: &mut Vec<u8>,
) -> Result<usize, FrameEncodeError> {
    let start = out.len();
    debug_assert_eq!(start % FRAME_ALIGN, 0);
    let written = rkyv::api::high::to_bytes_in::<_, rancor::Error>(message, &mut *out);
    if let Err(error) = written {
        out.truncate(start);
        return Err(FrameEncodeError::Serialize(error));
    }
    let len = out.len() - start;
    if len + CHECKSUM_LEN > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(FrameEncodeError::TooLarge {
            len: len + CHECKSUM_LEN,
            max_len: MAX_FRAME_LEN,
        });
    }
    Ok(len)
}

/// Validates an archive without its trailer ([`FrameBuf::archive`]) in
/// place: length, alignment, then rkyv's bytecheck. Only for bytes a
/// carrier authenticated, so that no bit of them changed on the way (the
/// cluster's link records): bytecheck alone makes reading them memory-safe,
/// not right.
pub fn access_archive(archive: &[u8]) -> Result<&ArchivedMessage, FrameAccessError> {
    check_len(archive.len() + CHECKSUM_LEN)?;
    check_aligned(archive)?;
    rkyv::access::<ArchivedMessage, rancor::Error>(archive).map_err(FrameAccessError::Invalid)
}

fn check_aligned(bytes: &[u8]) -> Result<(), FrameAccessError> {
    // Alignments are powers of two, so the low bits are the remainder.
    if bytes.as_ptr() as usize & (FRAME_ALIGN - 1) != 0 {
        return Err(FrameAccessError::Misaligned);
    }
    Ok(())
}

fn check_len(len: usize) -> Result<(), FrameAccessError> {
    if len > MAX_FRAME_LEN {
        return Err(FrameAccessError::TooLarge {
            len,
            max_len: MAX_FRAME_LEN,
        });
    }
    if len < CHECKSUM_LEN + std::mem::size_of::<ArchivedMessage>() {
        return Err(FrameAccessError::TooShort { len });
    }
    Ok(())
}

/// Returns the archive part of a frame whose trailer matches it.
fn check_checksum(bytes: &[u8]) -> Result<&[u8], FrameAccessError> {
    let Some((archive, trailer)) = bytes.split_last_chunk::<CHECKSUM_LEN>() else {
        return Err(FrameAccessError::TooShort { len: bytes.len() });
    };
    if xxh64(archive, CHECKSUM_SEED) != u64::from_le_bytes(*trailer) {
        return Err(FrameAccessError::BadChecksum);
    }
    Ok(archive)
}

#[cfg(test)]
mod tests;
