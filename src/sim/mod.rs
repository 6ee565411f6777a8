//! The deterministic simulator: several nodes of real `RouterCore`s and
//! real membership machines (`cluster::membership`), a fake clock per node,
//! a fake store (`MemoryTable` and `MemberTable`) with faults, a fake
//! network with faults, crashes, restarts, pauses and partitions, driven by
//! one seed. `run(seed, &config)` replays exactly; its error names the seed
//! and, in brackets, the broken invariant (`check::Invariant`).
//!
//! What a run does (`world.rs`): three nodes of two cores each start and
//! join through the membership table; clients send counter requests and
//! the real `player` and `room` services' requests; for a fault phase
//! longer than the lock lifetime everything can go wrong: store writes are
//! busy, Indeterminate and applied or not or late; messages are delayed,
//! reordered, duplicated, lost, or refused by their link (`on_send_failed`);
//! nodes crash, restart, shut down, are partitioned, are cut off from the
//! store but not from their peers, and freeze for up to longer than
//! `down_after_ms` and than the lock lifetime while their clocks run on,
//! each at its own rate; an outside writer re-saves records; a process may
//! start with a longer lease than the others' config (another operator's
//! timers), which they must wait out before claiming. Nobody is told
//! of a crash: peers learn through membership, declare the node down, and
//! claim its objects; a node past its lease fences and rejoins. Then a calm
//! phase checks that everything recovers, and every node shuts down.
//!
//! Invariants (each with its name, `check::Invariant`):
//! - at each applied write: no claim of another node's live lock
//!   (`claim-of-live-lock`); one route version names one owner
//!   (`route-version-owner`, also checked on every route cache);
//! - at each accepted write (a handler run that mutated its object): the
//!   node may serve (`fenced-write`) and no other node's copy could accept
//!   a write at that instant (`two-writers`);
//! - no copy the store showed stale stays writable, and once the cluster
//!   settled every writable copy is the store's current record
//!   (`stale-writable`);
//! - every request is answered, within a deadline that leaves out pauses,
//!   unless its loss is provable (`request-unanswered`);
//! - every counter answer is no lower than the value acknowledged before
//!   the request was sent (`read-below-acked`);
//! - after every step: a writable copy came from an Applied write of its
//!   node, and one whose CAS version is current belongs to the store's
//!   owner; route versions never decrease; at most one answer per request;
//! - at the end: no acknowledged `on_write` increment is lost, none counted
//!   twice; in the calm phase every request succeeds;
//! - the player and room services' push invariants (`room_model.rs`).
//!
//! `mutants.rs` puts known bugs into the router one at a time and counts
//! the seeds each invariant catches.

mod answers;
mod check;
mod clients;
pub mod counter;
mod effects;
mod faults;
mod members;
#[cfg(test)]
mod mutants;
mod network;
mod nodes;
mod phases;
mod recorder;
mod room_model;
mod room_ops;
mod safety;
mod world;

#[cfg(test)]
mod tests;

pub use world::{run, SimConfig, SimReport};
