//! routerd's wire formats.
//!
//! - [`client`]: the client frame codec of docs/protocol.md (header,
//!   stream decoder, ERROR bodies, route ids).
//! - [`token`]: docs/protocol.md login tokens
//!   (`v1.<player_id>.<expiry>.<mac>`).
//! - [`frame`]: the internal rkyv frame envelope between cores and nodes.
//! - [`key`]: object keys and `shard_of`, the stable key-to-core partition.
//! - [`hash`]: the stable hash every node agrees on.
//! - [`ids`]: how session ids and request numbers name their core.
//! - `layers` (feature `client-layers`): a client's TLS and WebSocket
//!   layers, sans-IO.
//! - [`websocket`]: RFC 6455's handshake and framing, sans-IO, for the
//!   gateway's WebSocket listener and the project's clients.

pub mod client;
pub mod frame;
pub mod hash;
pub mod ids;
pub mod key;
#[cfg(feature = "client-layers")]
pub mod layers;
pub mod token;
pub mod websocket;

pub use key::{shard_of, ObjectKey};
