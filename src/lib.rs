//! routerd: a thread-per-core stateful-object router and gateway.
//!
//! One folder a concern, each with a small public face: [`config`],
//! [`store`] (ownership persistence), [`node`] (assembly), [`admin`] and
//! [`metrics`] (observability).

pub mod admin;
pub mod config;
pub mod metrics;
pub mod node;
pub mod store;
