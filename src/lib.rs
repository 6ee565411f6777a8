//! routerd: a thread-per-core stateful-object router and gateway.
//!
//! Writing your own object types and services: [`object`] (the API) and
//! [`NodeBuilder`] (registering them); `examples/guild/` is a whole one.
//!
//! One folder a concern, each with a small public face: [`config`],
//! [`store`] (ownership persistence), [`catalog`] (the msgId snapshot),
//! [`router`] (ownership, route caches, repair and transfer, as a sans-IO
//! state machine), [`services`] (the built-in business objects), [`node`]
//! (assembly), [`admin`] and [`metrics`] (observability), [`ops`] (transfer
//! one object, drain a node) with [`ctl`] their command line, and
//! [`client`] (`routerd client`, a line-oriented client to try a node
//! with).

pub mod admin;
mod builder;
pub mod builtins;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod gateway;
mod in_place;
pub mod metrics;
pub mod node;
pub mod object;
pub mod ops;
pub mod route;
pub mod router;
#[cfg(test)]
mod sim;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use builder::{serving_addresses, NodeBuilder};

/// routerd's version, with `+pgo` for a profile-guided build (the variable
/// is set by `tuning/pgo_build.sh`), so `--version` and the
/// `routerd_build_info` metric say which build runs.
pub const VERSION: &str = match option_env!("ROUTERD_PGO_BUILD") {
    Some(_) => concat!(env!("CARGO_PKG_VERSION"), "+pgo"),
    None => env!("CARGO_PKG_VERSION"),
};
