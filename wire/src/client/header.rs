//! The 16-byte client frame header: layout, validation, encoding.

use thiserror::Error;

/// Bytes in every client frame header.
pub const HEADER_LEN: usize = 16;
/// The two bytes every frame starts with (ASCII "RT").
pub const MAGIC: [u8; 2] = *b"RT";
/// The protocol version of every frame but a keyed request.
pub const VERSION: u8 = 1;
/// The version of a keyed REQUEST (docs/protocol.md, "Protocol version 2"):
/// its body starts with a `u64` request key. Only a client sends it, and
/// only a decoder made with [`crate::client::FrameDecoder::accept_version_2`]
/// accepts it.
pub const VERSION_2: u8 = 2;
/// Bytes of the request key at the start of a version-2 REQUEST's body.
pub const REQUEST_KEY_LEN: usize = 8;
/// docs/protocol.md's default `max_body`; the gateway reads the real value
/// from config.
pub const DEFAULT_MAX_BODY: u32 = 65536;

/// The frame kind byte (offset 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Client to server.
    Request = 1,
    /// Server to client: the answer to one REQUEST (same `route_id`, `seq`).
    Response = 2,
    /// Server to client, unsolicited; `seq` is 0.
    Push = 3,
    /// Server to client: the failed answer to one REQUEST; see `ErrorCode`.
    Error = 4,
}

impl FrameKind {
    /// The kind numbered `kind` on the wire, `None` for a byte this version
    /// does not know (a protocol violation: the connection closes).
    pub const fn from_u8(kind: u8) -> Option<FrameKind> {
        match kind {
            1 => Some(FrameKind::Request),
            2 => Some(FrameKind::Response),
            3 => Some(FrameKind::Push),
            4 => Some(FrameKind::Error),
            _ => None,
        }
    }

    /// Whether `sender` may send frames of this kind: clients send only
    /// REQUEST, servers send everything else.
    pub const fn sent_by(self, sender: Peer) -> bool {
        match sender {
            Peer::Client => matches!(self, FrameKind::Request),
            Peer::Server => !matches!(self, FrameKind::Request),
        }
    }
}

/// Who sent the bytes being decoded. A server decodes bytes `from`
/// `Peer::Client` and accepts only REQUEST; a client decodes bytes `from`
/// `Peer::Server` and accepts only RESPONSE, PUSH and ERROR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A client of the gateway: sends REQUEST frames only.
    Client,
    /// A routerd gateway: sends RESPONSE, PUSH and ERROR frames.
    Server,
}

/// A decoded, validated frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The frame kind (offset 3).
    pub kind: FrameKind,
    /// The route the frame belongs to (offset 4, `u32` LE); the numbers are
    /// in [`crate::client::route`] and the gateway's route table.
    pub route_id: u32,
    /// Chosen by the client per REQUEST and echoed by its one answer
    /// (offset 8, `u32` LE); 0 in a PUSH.
    pub seq: u32,
    /// Bytes of body after the header (offset 12, `u32` LE), at most the
    /// receiver's `max_body`.
    pub body_len: u32,
}

impl Header {
    /// The header's wire bytes, integers little-endian.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut bytes = [0u8; HEADER_LEN];
        bytes[0..2].copy_from_slice(&MAGIC);
        bytes[2] = VERSION;
        bytes[3] = self.kind as u8;
        bytes[4..8].copy_from_slice(&self.route_id.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.seq.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.body_len.to_le_bytes());
        bytes
    }
}

/// A protocol violation in a frame header. Each one closes the connection
/// (docs/protocol.md, "1. Transport and framing").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The first two bytes (carried here) are not [`MAGIC`].
    #[error("bad magic {0:02x?}, expected \"RT\" [52, 54]")]
    BadMagic([u8; 2]),
    /// The version byte (carried here) is not [`VERSION`].
    #[error("unsupported protocol version {0}, expected 1")]
    BadVersion(u8),
    /// The kind byte (carried here) is unknown, or a kind this peer may not
    /// send (a client's RESPONSE, a server's REQUEST).
    #[error("frame kind {0} is unknown or not allowed from this peer")]
    BadKind(u8),
    /// The header announces more body than the receiver accepts.
    #[error("body_len {body_len} exceeds max_body {max_body}")]
    BodyTooLarge {
        /// The length the header announced.
        body_len: u32,
        /// The receiver's bound on a body.
        max_body: u32,
    },
    /// A version-2 REQUEST whose body (length carried here) cannot hold
    /// its 8-byte request key.
    #[error("version-2 request body_len {0} is shorter than its 8-byte request key")]
    MissingRequestKey(u32),
}

/// Validates a header sent by `from`. The checks run in wire order (magic,
/// version, kind, length), so the error names the first bad field.
pub fn decode_header(
    bytes: &[u8; HEADER_LEN],
    from: Peer,
    max_body: u32,
) -> Result<Header, FrameError> {
    decode_header_versioned(bytes, from, max_body, false).map(|(header, _)| header)
}

/// [`decode_header`] that also accepts, when `accept_version_2`, a client's
/// version-2 REQUEST; the flag returned says which version the header was.
/// A version-2 header of another kind, or whose body cannot hold the
/// request key, is a violation.
pub fn decode_header_versioned(
    bytes: &[u8; HEADER_LEN],
    from: Peer,
    max_body: u32,
    accept_version_2: bool,
) -> Result<(Header, bool), FrameError> {
    let magic = [bytes[0], bytes[1]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let version_2 = bytes[2] == VERSION_2 && accept_version_2 && from == Peer::Client;
    if bytes[2] != VERSION && !version_2 {
        return Err(FrameError::BadVersion(bytes[2]));
    }
    let kind = match FrameKind::from_u8(bytes[3]) {
        Some(kind) if kind.sent_by(from) => kind,
        _ => return Err(FrameError::BadKind(bytes[3])),
    };
    let body_len = read_u32_le(bytes, 12);
    if body_len > max_body {
        return Err(FrameError::BodyTooLarge { body_len, max_body });
    }
    if version_2 && (body_len as usize) < REQUEST_KEY_LEN {
        return Err(FrameError::MissingRequestKey(body_len));
    }
    let header = Header {
        kind,
        route_id: read_u32_le(bytes, 4),
        seq: read_u32_le(bytes, 8),
        body_len,
    };
    Ok((header, version_2))
}

fn read_u32_le(bytes: &[u8; HEADER_LEN], offset: usize) -> u32 {
    u32::from_le_bytes([
        bytes[offset],
        bytes[offset + 1],
        bytes[offset + 2],
        bytes[offset + 3],
    ])
}

/// Appends one frame (header, then `body`) to `out`.
///
/// # Panics
///
/// If `body` is longer than `u32::MAX` bytes: such a frame cannot be
/// expressed, and every caller bounds its bodies far below that.
pub fn encode_frame(out: &mut Vec<u8>, kind: FrameKind, route_id: u32, seq: u32, body: &[u8]) {
    let body_len = u32::try_from(body.len()).expect("frame body longer than u32::MAX");
    let header = Header {
        kind,
        route_id,
        seq,
        body_len,
    };
    out.reserve(HEADER_LEN + body.len());
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(body);
}

/// Appends one version-2 REQUEST: the header (version 2, `body_len`
/// counting the key), the little-endian `request_key` (0: no key), then
/// the route's ordinary `body`.
///
/// # Panics
///
/// As [`encode_frame`], if the body cannot be expressed.
pub fn encode_keyed_request(
    out: &mut Vec<u8>,
    route_id: u32,
    seq: u32,
    request_key: u64,
    body: &[u8],
) {
    let body_len = u32::try_from(REQUEST_KEY_LEN + body.len()).expect("frame body too long");
    let mut header = Header {
        kind: FrameKind::Request,
        route_id,
        seq,
        body_len,
    }
    .encode();
    header[2] = VERSION_2;
    out.reserve(HEADER_LEN + body_len as usize);
    out.extend_from_slice(&header);
    out.extend_from_slice(&request_key.to_le_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_2_requests_only_where_accepted() {
        let mut frame = Vec::new();
        encode_keyed_request(&mut frame, 11, 2, 0x0102, &5i64.to_le_bytes());
        let head: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().expect("16 bytes");
        assert_eq!(head[2], VERSION_2);
        assert_eq!(
            decode_header_versioned(&head, Peer::Client, 64, true),
            Ok((header(FrameKind::Request, 16).with(11, 2), true))
        );
        // Version-1 decoders (and every client) refuse it as before.
        assert_eq!(
            decode_header(&head, Peer::Client, 64),
            Err(FrameError::BadVersion(2))
        );
        let mut push = header(FrameKind::Push, 8).encode();
        push[2] = VERSION_2;
        assert_eq!(
            decode_header_versioned(&push, Peer::Server, 64, true),
            Err(FrameError::BadVersion(2))
        );
        let mut short = head;
        short[12] = 7;
        assert_eq!(
            decode_header_versioned(&short, Peer::Client, 64, true),
            Err(FrameError::MissingRequestKey(7))
        );
        let v1 = header(FrameKind::Request, 0).encode();
        assert_eq!(
            decode_header_versioned(&v1, Peer::Client, 64, true),
            Ok((header(FrameKind::Request, 0), false))
        );
    }

    fn header(kind: FrameKind, body_len: u32) -> Header {
        Header {
            kind,
            route_id: 0x0102_0304,
            seq: 0xA0B0_C0D0,
            body_len,
        }
    }

    #[test]
    fn encode_is_little_endian_and_pinned() {
        let bytes = header(FrameKind::Request, 5).encode();
        assert_eq!(
            bytes,
            [0x52, 0x54, 1, 1, 0x04, 0x03, 0x02, 0x01, 0xD0, 0xC0, 0xB0, 0xA0, 5, 0, 0, 0]
        );
    }

    #[test]
    fn round_trips_every_kind_in_its_direction() {
        let kinds = [
            (FrameKind::Request, Peer::Client),
            (FrameKind::Response, Peer::Server),
            (FrameKind::Push, Peer::Server),
            (FrameKind::Error, Peer::Server),
        ];
        for (kind, from) in kinds {
            let h = header(kind, 7);
            assert_eq!(decode_header(&h.encode(), from, 7), Ok(h));
            assert_eq!(FrameKind::from_u8(kind as u8), Some(kind));
        }
    }

    #[test]
    fn rejects_kind_from_the_wrong_direction() {
        let request = header(FrameKind::Request, 0).encode();
        assert_eq!(
            decode_header(&request, Peer::Server, 0),
            Err(FrameError::BadKind(1))
        );
        for kind in [FrameKind::Response, FrameKind::Push, FrameKind::Error] {
            let bytes = header(kind, 0).encode();
            assert_eq!(
                decode_header(&bytes, Peer::Client, 0),
                Err(FrameError::BadKind(kind as u8))
            );
        }
    }

    #[test]
    fn rejects_each_bad_field() {
        let good = header(FrameKind::Request, 10).encode();

        let mut bad_magic = good;
        bad_magic[1] = b'X';
        assert_eq!(
            decode_header(&bad_magic, Peer::Client, 10),
            Err(FrameError::BadMagic(*b"RX"))
        );

        let mut bad_version = good;
        bad_version[2] = 2;
        assert_eq!(
            decode_header(&bad_version, Peer::Client, 10),
            Err(FrameError::BadVersion(2))
        );

        for kind in [0u8, 5, 255] {
            let mut bad_kind = good;
            bad_kind[3] = kind;
            assert_eq!(
                decode_header(&bad_kind, Peer::Client, 10),
                Err(FrameError::BadKind(kind))
            );
            assert_eq!(
                decode_header(&bad_kind, Peer::Server, 10),
                Err(FrameError::BadKind(kind))
            );
        }

        assert!(decode_header(&good, Peer::Client, 10).is_ok());
        assert_eq!(
            decode_header(&good, Peer::Client, 9),
            Err(FrameError::BodyTooLarge {
                body_len: 10,
                max_body: 9
            })
        );
    }

    #[test]
    fn first_bad_field_wins() {
        let mut bytes = [0xFFu8; HEADER_LEN];
        assert_eq!(
            decode_header(&bytes, Peer::Client, 0),
            Err(FrameError::BadMagic([0xFF, 0xFF]))
        );
        bytes[0..2].copy_from_slice(&MAGIC);
        assert_eq!(
            decode_header(&bytes, Peer::Client, 0),
            Err(FrameError::BadVersion(0xFF))
        );
        bytes[2] = VERSION;
        assert_eq!(
            decode_header(&bytes, Peer::Client, 0),
            Err(FrameError::BadKind(0xFF))
        );
    }

    #[test]
    fn encode_frame_appends() {
        let mut out = vec![9u8];
        encode_frame(&mut out, FrameKind::Push, 100, 0, b"hi");
        assert_eq!(out.len(), 1 + HEADER_LEN + 2);
        assert_eq!(out[0], 9);
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&out[1..1 + HEADER_LEN]);
        let decoded = decode_header(&head, Peer::Server, 2).expect("valid header");
        assert_eq!(decoded, header(FrameKind::Push, 2).with(100, 0));
        assert_eq!(&out[1 + HEADER_LEN..], b"hi");
    }

    impl Header {
        fn with(mut self, route_id: u32, seq: u32) -> Header {
            self.route_id = route_id;
            self.seq = seq;
            self
        }
    }

    #[test]
    fn error_messages_are_clear() {
        assert_eq!(
            FrameError::BodyTooLarge {
                body_len: 65537,
                max_body: 65536
            }
            .to_string(),
            "body_len 65537 exceeds max_body 65536"
        );
        assert_eq!(
            FrameError::BadVersion(3).to_string(),
            "unsupported protocol version 3, expected 1"
        );
    }
}
