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

/// Declares the internal modules: private to the crate in a shipped build,
/// public under the `testing` feature (integration tests, benchmarks) and
/// hidden from the documentation either way. Their faces keep what the
/// integration tests and benchmarks reach through the feature (route
/// constants, inspection methods, counters), which a shipped build does not
/// call: that, and only that, is why dead code is allowed without it.
macro_rules! internal {
    ($($module:ident),* $(,)?) => {
        $(
            #[cfg(feature = "testing")]
            #[doc(hidden)]
            pub mod $module;
            #[cfg(not(feature = "testing"))]
            #[allow(dead_code, unused_imports)]
            mod $module;
        )*
    };
}

pub mod config;
pub mod object;
pub mod store;

#[doc(hidden)]
pub mod cli;

internal!(admin, builtins, catalog, clock, cluster, gateway, metrics, node, ops, route, router);

mod builder;
mod in_place;
#[cfg(test)]
mod sim;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[doc(hidden)]
pub use builder::serving_addresses;

/// Installs the process's log subscriber with `filter` (EnvFilter syntax),
/// changeable at run time through the admin endpoint's `/log-level`.
#[doc(hidden)]
pub fn init_logging(filter: &str) {
    admin::log_level::init(filter);
}
pub use builder::NodeBuilder;

/// routerd's version, with `+pgo` for a profile-guided build (the variable
/// is set by `tuning/pgo_build.sh`), so `--version` and the
/// `routerd_build_info` metric say which build runs.
pub const VERSION: &str = match option_env!("ROUTERD_PGO_BUILD") {
    Some(_) => concat!(env!("CARGO_PKG_VERSION"), "+pgo"),
    None => env!("CARGO_PKG_VERSION"),
};
