//! The cluster: membership in the store with incarnations, failure
//! detection and fencing on each node's own clock, and links between the
//! cores of different nodes.
//!
//! Sans-IO: [`membership`] (the join, heartbeat, lease and observer state
//! machine). The drivers that run it on the cores live beside it.

pub mod codec;
pub mod handshake;
pub mod link;
pub mod membership;
