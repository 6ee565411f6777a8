//! The cluster: membership in the store with incarnations, failure
//! detection and fencing on each node's own clock, and links between the
//! cores of different nodes.
//!
//! Sans-IO cores: [`membership`] (join, heartbeat, lease, observing),
//! [`link`] (one link's queue and backoff), [`handshake`] and [`codec`]
//! (the bytes of a link). Drivers: [`agent`] runs membership (the start-up
//! join, then on core 0), [`view`] is what it publishes to every core,
//! [`follow`] carries the view into each core's router and links,
//! [`outgoing`] and [`incoming`] are each core's links. `docs/cluster.md`
//! explains the whole for operators.

pub mod agent;
pub mod codec;
mod conn;
pub mod follow;
pub mod handshake;
pub mod incoming;
pub mod link;
pub mod membership;
pub mod outgoing;
pub mod view;
