//! routerd's wire formats.
//!
//! - [`key`]: object keys and `shard_of`, the stable key-to-core partition.
//! - [`hash`]: the stable hash every node agrees on.

pub mod hash;
pub mod key;

pub use key::{shard_of, ObjectKey};
