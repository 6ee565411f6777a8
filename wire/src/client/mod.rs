//! The client frame codec of docs/protocol.md (version 1), sans-IO.
//!
//! Every frame is a 16-byte little-endian [`Header`] (magic `"RT"`, version,
//! kind, `route_id`, `seq`, `body_len`) followed by `body_len` body bytes.
//! [`decode_header`] validates one header; [`FrameDecoder`] turns a byte
//! stream cut at arbitrary points into frames; [`encode_frame`] and
//! [`encode_error_frame`] write them.
//!
//! # Reading a connection
//!
//! The decoder owns one bounded buffer (at most `HEADER_LEN + max_body`
//! bytes, starting at [`INITIAL_BUFFER_LEN`] and grown only for a frame whose
//! header already passed the `max_body` check). Read straight into its spare
//! space, then drain every complete frame before the next read:
//!
//! ```ignore
//! // A glommio gateway (the server decodes what a client sent).
//! let mut decoder = FrameDecoder::new(Peer::Client, config.max_body);
//! loop {
//!     let n = stream.read(decoder.read_buf()).await?;
//!     if n == 0 {
//!         break; // end of stream
//!     }
//!     decoder.advance(n);
//!     while let Some(frame) = decoder.next_frame()? {
//!         handle(frame.header, frame.body); // `body` borrows the buffer
//!     }
//! }
//! ```
//!
//! An io_uring client does the same with `Peer::Server`: submit a read into
//! `read_buf()` (the slice stays valid until the next `&mut` call on the
//! decoder), then `advance(n)` on completion and drain `next_frame()`.
//! Code that already holds bytes in its own buffer can feed them with
//! [`FrameDecoder::extend`], which copies what fits and returns the count.
//!
//! After `next_frame` returns `Ok(None)`, `read_buf()` is never empty, so a
//! 0-byte read always means end of stream. Consumed bytes are compacted
//! lazily (a memmove of at most one partial frame, only when the tail is
//! short), and nothing allocates once the buffer has grown to the largest
//! frame seen. Any [`FrameError`] is final: docs/protocol.md closes the
//! connection, and the decoder keeps returning the same error.

mod decoder;
mod error_body;
mod header;

pub use decoder::{FrameDecoder, FrameRef, INITIAL_BUFFER_LEN};
pub use error_body::{
    bounded_reason, decode_error_body, encode_app_error_body, encode_error_body,
    encode_error_frame, AppCode, ErrorCode, APP_CODE_MIN, APP_REASON_LEN_MAX, ERROR_CODE_LEN,
};
pub use header::{
    decode_header, decode_header_versioned, encode_frame, encode_keyed_request, FrameError,
    FrameKind, Header, Peer, DEFAULT_MAX_BODY, HEADER_LEN, MAGIC, REQUEST_KEY_LEN, VERSION,
    VERSION_2,
};

/// docs/protocol.md's route ids. Direction and auth live in the gateway's
/// route table; these are only the numbers both sides agree on.
pub mod route {
    /// `sys.ping`: client to server, no auth; echoes the body.
    pub const SYS_PING: u32 = 1;
    /// `auth.login`: client to server, no auth; body is a token.
    pub const AUTH_LOGIN: u32 = 2;
    /// `auth.resume`: client to server, no auth, version 2 only; body is a
    /// resume token and the last push seq received.
    pub const AUTH_RESUME: u32 = 3;
    /// `player.get`: client to server, auth.
    pub const PLAYER_GET: u32 = 10;
    /// `player.incr`: client to server, auth.
    pub const PLAYER_INCR: u32 = 11;
    /// `room.join`: client to server, auth.
    pub const ROOM_JOIN: u32 = 20;
    /// `room.leave`: client to server, auth.
    pub const ROOM_LEAVE: u32 = 21;
    /// `room.say`: client to server, auth.
    pub const ROOM_SAY: u32 = 22;
    /// `room.message`: server to client PUSH.
    pub const ROOM_MESSAGE: u32 = 100;
    /// `sys.kicked`: server to client PUSH, sent before closing a session
    /// replaced by a duplicate login.
    pub const SYS_KICKED: u32 = 101;
    /// `sys.redirect`: server to client PUSH from a draining node (`u32
    /// grace_ms`, then a gateway's `host:port`).
    pub const SYS_REDIRECT: u32 = 102;
    /// `sys.session`: server to client PUSH after a version-2 login (a
    /// 16-byte resume token, then `u32 resume_window_ms`).
    pub const SYS_SESSION: u32 = 103;
}
