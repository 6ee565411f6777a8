//! routerd's thread-per-core runtime.
//!
//! [`Runtime::start`] runs one glommio `LocalExecutor` per configured core,
//! pinned to its CPU, and hands each a [`Core`]: its index, a [`Mesh`] to send
//! messages to every other core over bounded channels, its two task queues
//! (latency-sensitive and throughput), and a [`ShutdownListener`].
//!
//! The runtime owns three node-wide behaviours:
//! - coordinated start: [`Runtime::wait_ready`] returns once every core has
//!   called [`Core::ready`], so a node reports healthy only when all serve;
//! - coordinated shutdown: [`ShutdownHandle::trigger`] reaches every core,
//!   each drains its work, and [`Runtime::join`] reports how they ended;
//! - fail-stop: a core that panics takes the whole process down with a clear
//!   log line, rather than leaving a half-alive node behind.

mod config;
mod mesh;
mod runtime;
mod shutdown;

pub use config::{CorePlacement, RuntimeConfig};
pub use mesh::{Inbox, Mesh, MeshStats, SendError};
pub use runtime::{allowed_cpus, Core, Runtime, RuntimeError};
pub use shutdown::{ShutdownHandle, ShutdownListener};
