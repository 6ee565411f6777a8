//! The router: which node owns a stateful object, and how a message reaches
//! it (seed `router-system.txt`).
//!
//! [`RouterCore`] is a sans-IO state machine, one per core, holding one
//! manager per object type (keyed by `type_id`). Drivers feed it events with
//! the current time (`on_request`, `on_node_message`, `on_store_reply`,
//! `on_timer`, `on_node_up`/`on_node_down`, `transfer`, `shutdown`, and
//! `on_flush` at the end of a batch of events when asked by
//! `Effect::FlushSavesAfterBatch`) and perform the [`Effect`]s it queues
//! (`drain_effects`). It does no IO, reads no clock, and draws randomness
//! only from the seed it was built with, so the simulator (`crate::sim`, test-only) can run
//! many nodes of it deterministically.
//!
//! The seed's operations keep their names: `mutable_cache` / `pull_cache`
//! and `filter_router_msg` / `send_msg` in `dispatch.rs`, `pull_object` and
//! `save_object` in `io.rs`, `transfer` / `remove_object` /
//! `router_transfer` in `transfer.rs`, timers and shutdown in `timers.rs`.
//! The per-object `io_task_guard` is `Entry::io`: one store operation per
//! object at a time, requests queued behind it (bounded).

mod core;
mod dispatch;
mod drain;
mod entry;
pub mod handler;
mod io;
pub(crate) mod mutant;
mod service;
mod timers;
mod transfer;
pub mod types;

pub mod driver;

#[cfg(test)]
mod tests;

pub use self::core::{
    rendezvous_score, sweep_interval_ms, EntryView, RouterCore, RouterCounters,
    REPAIR_ATTEMPTS_MAX, SEND_ATTEMPTS_MAX, SHUTDOWN_BATCH_MAX,
};
pub use drain::DrainProgress;
pub use handler::{
    DecodeError, HandlerOutput, HandlerReply, ObjectCall, ObjectState, ObjectTimer, ObjectType,
    ServiceHandler,
};
pub use transfer::TransferError;
pub use types::{
    AppCode, ClientRef, Effect, ErrorCode, NodeMessage, Outcome, Refusal, Request, RequestId, RouterHead,
    RouterTransfer, StoreFailure, StoreOp, StoreReply, StoreToken, Timer, TransferDone,
    TransferOutcome,
};
