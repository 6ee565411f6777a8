//! routerd: a thread-per-core stateful-object router and gateway.
//!
//! One folder a concern, each with a small public face:
//! [`config`], [`store`] (ownership persistence), [`catalog`] (the msgId
//! snapshot), [`gateway`], [`router`], [`services`].

pub mod catalog;
pub mod config;
pub mod store;
