//! The events that reach the router core from outside, one file per
//! family. Each finds the entry it concerns, asks the step it starts what
//! happens (or changes what no step owns: membership's view, the lease),
//! and hands the step's [`Next`](super::steps::Next) to the dispatcher
//! (`core.rs`), which alone chains steps; then checks the entry.
//!
//! - `requests.rs`: a request entering this core, and one a link could not
//!   carry;
//! - `node_messages.rs`: what other nodes send (routed requests, route
//!   syncs, a transfer's state and its ack);
//! - `store_replies.rs`: the store's answers, a write's retry, and the
//!   end-of-batch flush of held outputs;
//! - `membership.rs`: other nodes up and down, this node's lease, fence
//!   and rejoin;
//! - `timers.rs`: the timers the core armed (sweep, retries, object
//!   timers);
//! - `admin.rs`: what an operator or the assembly asks (transfer,
//!   shutdown and its release batches).

mod admin;
mod membership;
mod node_messages;
mod requests;
mod store_replies;
mod timers;
