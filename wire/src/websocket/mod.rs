//! WebSocket (RFC 6455) as a sans-IO codec: the opening handshake
//! ([`upgrade`]) and the framing ([`frame`]), for both ends. No IO here:
//! the gateway's driver feeds received bytes in and sends what comes out,
//! and the project's clients do the same from the other end.
//!
//! The mapping onto the client protocol (docs/protocol.md): each binary
//! message carries one or more whole protocol frames, and the receiving
//! side reads the payloads of consecutive messages as one stream of
//! protocol frames, so a message never needs to be held whole: payload
//! bytes are unmasked into the caller's buffer as they arrive, and the
//! message bound is checked on each frame's header, before its payload is
//! read.

pub mod frame;
pub mod upgrade;

pub use frame::{
    encode_close, encode_frame, encode_masked, push_header, Control, Decoder, Opcode, Role,
    WsError, FRAME_HEADER_MAX_LEN,
};
pub use upgrade::{
    accept_key, client_request, parse_client_response, parse_request, Refusal, Upgrade,
    UpgradeRequestError, UPGRADE_REQUEST_MAX_BYTES,
};

/// Close codes the gateway sends (RFC 6455 section 7.4.1).
pub mod close {
    /// The session ended normally.
    pub const NORMAL: u16 = 1000;
    /// The server goes away (shutdown, drain, idle timeout).
    pub const GOING_AWAY: u16 = 1001;
    /// A frame broke the framing rules (unmasked from a client, reserved
    /// bits or opcodes, a control frame too long or fragmented, a
    /// continuation with no message).
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// A text message: the protocol is binary.
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// A close reason that is not UTF-8.
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// A message over the bound.
    pub const MESSAGE_TOO_BIG: u16 = 1009;

    /// Whether `code` may travel in a close frame (RFC 6455 section 7.4
    /// and the IANA registry): 1000 to 1003 and 1007 to 1014 are defined
    /// (1004 is reserved; 1005, 1006 and 1015 only report what happened
    /// locally and are never sent), 3000 to 4999 belong to libraries and
    /// applications; the rest is unassigned. A received close with any
    /// other code is a protocol error.
    pub fn is_sendable(code: u16) -> bool {
        matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}
