//! The router: which node owns a stateful object, and how a message reaches
//! it (docs/architecture.md, the router core).
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
//! The core is a dispatcher (`core.rs`) over steps (`steps/`) that never
//! call each other: each step takes one entry and the event it meets and
//! returns what happens next (`steps::Next`); only the dispatcher chains
//! them. The router design's operations keep their names (docs/origins.md
//! says what each does): `filter_router_msg`, `mutable_cache`,
//! `mutable_object` and `send_msg` in `steps/route.rs`, `pull_cache` /
//! `pull_object` in `steps/pull.rs` and its claim in `steps/claim.rs`,
//! `save_object` in `steps/save.rs`, `transfer` / `remove_object` in
//! `steps/transfer.rs` (`router_transfer`'s target side is a claim),
//! shutdown in `steps/release.rs`. The per-object `io_task_guard` is
//! `Entry::io`: one store operation per object at a time, requests queued
//! behind it (bounded).

mod core;
mod ctx;
mod drain;
mod entry;
mod events;
pub mod handler;
mod hot;
pub(crate) mod mutant;
mod output;
mod paused;
mod service;
mod steps;
pub mod types;
mod view;

pub mod driver;

#[cfg(test)]
mod tests;

pub use self::core::RouterCore;
pub use ctx::{
    rendezvous_score, sweep_interval_ms, RouterCounters, REPAIR_ATTEMPTS_MAX, SEND_ATTEMPTS_MAX,
    SHUTDOWN_BATCH_MAX,
};
pub use drain::DrainProgress;
pub use handler::{
    DecodeError, HandlerOutput, HandlerReply, ObjectCall, ObjectState, ObjectTimer, ObjectType,
    ServiceHandler,
};
pub use hot::{HotObject, HOT_OBJECTS_KEPT, HOT_WINDOW_MS};
pub use types::{
    AppCode, ClientRef, Effect, ErrorCode, NodeMessage, Outcome, Refusal, Request, RequestId,
    RouterHead, RouterTransfer, StoreFailure, StoreOp, StoreReply, StoreToken, Timer, TransferDone,
    TransferError, TransferOutcome,
};
pub use view::EntryView;
