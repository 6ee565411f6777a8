//! The ERROR frame body: `u16 code` (little-endian), then an optional UTF-8
//! reason filling the rest of the body.

use super::header::{FrameKind, Header, HEADER_LEN};

/// Bytes of the code that starts every ERROR body.
pub const ERROR_CODE_LEN: usize = 2;

/// docs/protocol.md's ERROR codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// `UNKNOWN_ROUTE`: the `route_id` is not in the route table.
    UnknownRoute = 1,
    /// `DIRECTION_REJECTED`: the route exists but a client may not send it
    /// (a server-to-client route).
    DirectionRejected = 2,
    /// `AUTH_REQUIRED`: the route needs a logged-in session and this one is
    /// not.
    AuthRequired = 3,
    /// `AUTH_FAILED`: `auth.login` with a malformed, forged or expired token,
    /// or refused by the duplicate-login policy; the session stays unbound.
    AuthFailed = 4,
    /// `BAD_REQUEST`: the body does not fit the route, a duplicate in-flight
    /// `seq`, or `auth.login` on a logged-in session.
    BadRequest = 5,
    /// `OVERLOADED`: a bound on in-flight requests, request rate or object
    /// creation refused the request before any object ran it.
    Overloaded = 6,
    /// `UNAVAILABLE`: the object's owner cannot be reached, or a migration
    /// could not complete; the request may or may not have taken effect.
    Unavailable = 7,
    /// `TIMEOUT`: no answer within the gateway's `request_timeout`; the
    /// request may still have taken effect.
    Timeout = 8,
    /// `INTERNAL`: a server fault; the details are in the server's log, not
    /// in the reason.
    Internal = 9,
}

impl ErrorCode {
    /// Every protocol code, in code order (1 to 9).
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

    /// The protocol code numbered `code`, `None` for a number outside 1 to 9
    /// (an application code, or one this version does not know).
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

/// The first code of the application range: codes from here to
/// `u16::MAX` are an object type's own (docs/protocol.md, section 4), and
/// the protocol's codes stay below it, so the two can never collide.
pub const APP_CODE_MIN: u16 = 0x8000;

/// Bytes of reason an application error carries at most: a longer one is
/// cut at a character boundary, so an object cannot grow an ERROR frame
/// past what a person reads.
pub const APP_REASON_LEN_MAX: usize = 512;

/// An object type's own error code: a number from [`APP_CODE_MIN`] to
/// `u16::MAX`, sent as the ERROR body's code with the type's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppCode(u16);

impl AppCode {
    /// `code` when it is in the application range, else `None`.
    pub const fn new(code: u16) -> Option<AppCode> {
        if code >= APP_CODE_MIN {
            Some(AppCode(code))
        } else {
            None
        }
    }

    /// The application code `APP_CODE_MIN + offset`; for constants, where a
    /// type numbers its errors 1, 2, 3... (`AppCode::nth(1)` is 32769).
    ///
    /// # Panics
    ///
    /// If `offset` is past the range (32767 or more), at compile time in a
    /// `const`.
    pub const fn nth(offset: u16) -> AppCode {
        assert!(
            offset <= u16::MAX - APP_CODE_MIN,
            "application code offset past the range"
        );
        AppCode(APP_CODE_MIN + offset)
    }

    /// The code as the wire carries it.
    pub const fn get(self) -> u16 {
        self.0
    }
}

/// `reason` cut to at most [`APP_REASON_LEN_MAX`] bytes, at a character
/// boundary.
pub fn bounded_reason(reason: &str) -> &str {
    if reason.len() <= APP_REASON_LEN_MAX {
        return reason;
    }
    let mut end = APP_REASON_LEN_MAX;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// An ERROR body: the code, then `reason`'s bytes.
pub fn encode_error_body(code: ErrorCode, reason: &str) -> Vec<u8> {
    encode_raw_error_body(code as u16, reason)
}

/// An ERROR body of an application code: the code, then the reason, cut
/// to [`APP_REASON_LEN_MAX`] bytes.
pub fn encode_app_error_body(code: AppCode, reason: &str) -> Vec<u8> {
    encode_raw_error_body(code.get(), bounded_reason(reason))
}

fn encode_raw_error_body(code: u16, reason: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(ERROR_CODE_LEN + reason.len());
    body.extend_from_slice(&code.to_le_bytes());
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
    fn application_codes_sit_above_every_protocol_code() {
        for code in ErrorCode::ALL {
            assert_eq!(AppCode::new(code as u16), None, "{code:?}");
        }
        assert_eq!(AppCode::new(APP_CODE_MIN - 1), None);
        assert_eq!(AppCode::new(APP_CODE_MIN).map(AppCode::get), Some(0x8000));
        assert_eq!(AppCode::new(u16::MAX).map(AppCode::get), Some(u16::MAX));
        assert_eq!(AppCode::nth(3).get(), 32771);
        assert_eq!(ErrorCode::from_u16(AppCode::nth(1).get()), None);
        let body = encode_app_error_body(AppCode::nth(1), "name taken");
        assert_eq!(&body[..2], &[0x01, 0x80]);
        assert_eq!(decode_error_body(&body), Some((0x8001, "name taken")));
    }

    #[test]
    fn a_long_application_reason_is_cut_at_a_character_boundary() {
        // 'é' is two bytes: a cut at an odd byte would split one.
        let long = "é".repeat(APP_REASON_LEN_MAX);
        let body = encode_app_error_body(AppCode::nth(1), &long);
        let (_, reason) = decode_error_body(&body).expect("still UTF-8");
        assert_eq!(reason.len(), APP_REASON_LEN_MAX);
        let odd = format!("a{long}");
        let cut = bounded_reason(&odd);
        assert_eq!(cut.len(), APP_REASON_LEN_MAX - 1);
        assert!(cut.starts_with('a'));
        assert_eq!(bounded_reason("short"), "short");
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
