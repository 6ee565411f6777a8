//! The deterministic simulator: several nodes of real `RouterCore`s, a fake
//! clock, a fake store (`MemoryTable`) with faults, a fake network with
//! faults, crashes and restarts, driven by one seed. `run(seed, &config)`
//! replays exactly; its error names the seed and the broken invariant.
//!
//! Invariants checked after every step (`check.rs`):
//! - a writable copy whose CAS version is the store's current one belongs to
//!   the record's owner (so at most one node holds a writable copy whose
//!   saves can commit), and every writable copy came from an Applied write
//!   of that node;
//! - route versions never decrease, in any core's entries or in the store;
//! - the router emits at most one answer per request;
//! - at the end: no acknowledged `on_write` increment is lost, none counted
//!   twice (final = acked + a subset of unacknowledged deltas), and in a calm
//!   phase after the faults every request gets a successful answer;
//! - the real `player` and `room` services run beside the counter: logins
//!   with fresh sessions, joins, leaves and says. Every push goes to a
//!   session that player bound, belongs to a say, at most once per player;
//!   a say answered Ok(n) pushed exactly n times; no push goes to a player
//!   certainly out of the room (`room_model.rs` says what is certain under
//!   faults); in the calm phase a say reaches exactly the members, each on
//!   its newest session.

mod check;
mod clients;
pub mod counter;
mod faults;
mod phases;
mod room_model;
mod room_ops;
mod world;

#[cfg(test)]
mod tests;

pub use room_model::RoomStats;
pub use world::{run, SimConfig, SimReport};
