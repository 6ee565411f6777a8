//! routerd: a thread-per-core stateful-object router and gateway.
//!
//! The public API: [`object`] (writing your own object types and services),
//! [`NodeBuilder`] (registering them and starting a node), [`config`] (the
//! node's configuration, `routerd serve`'s file) and [`store`] (ownership
//! persistence); `examples/guild/` is a whole program written with them.
//!
//! Everything else is internal; docs/architecture.md draws its layers and
//! which module may import which. Integration tests and benchmarks reach the
//! internals through the `testing` feature.

pub mod config;
pub mod object;
pub mod store;

#[doc(hidden)]
pub mod cli;

// The internal modules: private to the crate in a shipped build, public
// under the `testing` feature (integration tests, benchmarks) and hidden
// from the documentation either way. Each is declared twice, one line per
// build, rather than through a macro, so that rustfmt (which does not look
// inside macro calls) formats every file. Their faces keep what the
// integration tests and benchmarks reach through the feature (route
// constants, inspection methods, counters), which a shipped build does not
// call: that, and only that, is why dead code is allowed without it.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod admin;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod admin;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod answer_gate;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod answer_gate;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod builtins;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod builtins;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod catalog;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod catalog;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod clock;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod clock;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod cluster;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod cluster;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod gateway;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod gateway;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod gateway_addresses;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod gateway_addresses;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod ids;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod ids;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod metrics;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod metrics;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod node;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod node;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod ops;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod ops;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod page;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod page;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod route;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod route;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod router;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod router;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod scripts;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unused_imports)]
mod scripts;

mod builder;
mod in_place;
#[cfg(test)]
mod sim;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[doc(hidden)]
pub use builder::serving_addresses;

/// Installs the process's log subscriber with `filter` (EnvFilter syntax),
/// changeable at run time through the admin endpoint's `/log-level`. A
/// filter that does not parse logs at `info` instead: `Err` says why.
#[doc(hidden)]
pub fn init_logging(filter: &str) -> Result<(), String> {
    admin::log_level::init(filter)
}
pub use builder::NodeBuilder;

/// routerd's version, with `+pgo` for a profile-guided build (the variable
/// is set by `tuning/pgo_build.sh`), so `--version` and the
/// `routerd_build_info` metric say which build runs.
pub const VERSION: &str = match option_env!("ROUTERD_PGO_BUILD") {
    Some(_) => concat!(env!("CARGO_PKG_VERSION"), "+pgo"),
    None => env!("CARGO_PKG_VERSION"),
};
