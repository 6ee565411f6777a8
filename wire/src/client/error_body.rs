//! The ERROR frame body: `u16 code` (little-endian), then an optional UTF-8
//! reason filling the rest of the body.

use super::header::{FrameKind, Header, HEADER_LEN};

/// Bytes of the code that starts every ERROR body.
pub const ERROR_CODE_LEN: usize = 2;

/// docs/protocol.md's ERROR codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    UnknownRoute = 1,
    DirectionRejected = 2,
    AuthRequired = 3,
    AuthFailed = 4,
    BadRequest = 5,
    Overloaded = 6,
    Unavailable = 7,
    Timeout = 8,
    Internal = 9,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::UnknownRoute,
        ErrorCode::DirectionRejected,
        ErrorCode::AuthRequired,
        ErrorCode::AuthFailed,
        ErrorCode::BadRequest,
        ErrorCode::Overloaded,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    pub const fn from_u16(code: u16) -> Option<ErrorCode> {
        match code {
            1 => Some(ErrorCode::UnknownRoute),
            2 => Some(ErrorCode::DirectionRejected),
            3 => Some(ErrorCode::AuthRequired),
            4 => Some(ErrorCode::AuthFailed),
            5 => Some(ErrorCode::BadRequest),
            6 => Some(ErrorCode::Overloaded),
            7 => Some(ErrorCode::Unavailable),
            8 => Some(ErrorCode::Timeout),
            9 => Some(ErrorCode::Internal),
            _ => None,
        }
    }

    /// The protocol's name for the code, e.g. `"UNKNOWN_ROUTE"`.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorCode::UnknownRoute => "UNKNOWN_ROUTE",
            ErrorCode::DirectionRejected => "DIRECTION_REJECTED",
            ErrorCode::AuthRequired => "AUTH_REQUIRED",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::Overloaded => "OVERLOADED",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Internal => "INTERNAL",
        }
    }
}

/// An ERROR body: the code, then `reason`'s bytes.
pub fn encode_error_body(code: ErrorCode, reason: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(ERROR_CODE_LEN + reason.len());
    body.extend_from_slice(&(code as u16).to_le_bytes());
    body.extend_from_slice(reason.as_bytes());
    body
}

/// Appends a whole ERROR frame to `out` without an intermediate body
/// buffer: the gateway answers overload with these, so they stay cheap.
///
/// # Panics
///
/// If the body would be longer than `u32::MAX` bytes (see `encode_frame`).
pub fn encode_error_frame(
    out: &mut Vec<u8>,
    route_id: u32,
    seq: u32,
    code: ErrorCode,
    reason: &str,
) {
    let body_len =
        u32::try_from(ERROR_CODE_LEN + reason.len()).expect("error reason longer than u32::MAX");
    let header = Header {
        kind: FrameKind::Error,
        route_id,
        seq,
        body_len,
    };
    out.reserve(HEADER_LEN + body_len as usize);
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(&(code as u16).to_le_bytes());
    out.extend_from_slice(reason.as_bytes());
}

/// Splits an ERROR body into its raw code and reason. The code stays raw
/// (map it with [`ErrorCode::from_u16`]) so a client survives codes added by
/// a newer server. `None` if the body is shorter than the code or the
/// reason is not UTF-8, both violations of docs/protocol.md.
pub fn decode_error_body(body: &[u8]) -> Option<(u16, &str)> {
    let (code, reason) = body.split_first_chunk::<ERROR_CODE_LEN>()?;
    let reason = std::str::from_utf8(reason).ok()?;
    Some((u16::from_le_bytes(*code), reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{decode_header, Peer};

    #[test]
    fn codes_round_trip_and_match_the_protocol_table() {
        for (index, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(*code as u16, index as u16 + 1);
            assert_eq!(ErrorCode::from_u16(*code as u16), Some(*code));
        }
        assert_eq!(ErrorCode::from_u16(0), None);
        assert_eq!(ErrorCode::from_u16(10), None);
        assert_eq!(ErrorCode::UnknownRoute.name(), "UNKNOWN_ROUTE");
        assert_eq!(ErrorCode::DirectionRejected.name(), "DIRECTION_REJECTED");
        assert_eq!(ErrorCode::Internal.name(), "INTERNAL");
    }

    #[test]
    fn body_round_trips() {
        let body = encode_error_body(ErrorCode::AuthFailed, "expired");
        assert_eq!(&body[..2], &[4, 0]);
        assert_eq!(decode_error_body(&body), Some((4, "expired")));
        let bare = encode_error_body(ErrorCode::Timeout, "");
        assert_eq!(decode_error_body(&bare), Some((8, "")));
        assert_eq!(decode_error_body(&[0x34, 0x12]), Some((0x1234, "")));
    }

    #[test]
    fn malformed_bodies_are_none() {
        assert_eq!(decode_error_body(&[]), None);
        assert_eq!(decode_error_body(&[1]), None);
        assert_eq!(decode_error_body(&[1, 0, 0xFF]), None);
    }

    #[test]
    fn error_frame_equals_header_plus_body() {
        let mut out = Vec::new();
        encode_error_frame(&mut out, 11, 42, ErrorCode::Overloaded, "busy");
        let mut expected = Vec::new();
        crate::client::encode_frame(
            &mut expected,
            FrameKind::Error,
            11,
            42,
            &encode_error_body(ErrorCode::Overloaded, "busy"),
        );
        assert_eq!(out, expected);
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&out[..HEADER_LEN]);
        let header = decode_header(&head, Peer::Server, 64).expect("valid");
        assert_eq!(header.body_len, 6);
    }
}
