//! routerd's thread-per-core runtime.
//!
//! [`Runtime::start`] runs one executor thread per configured core, pinned
//! to its CPU, each with its own io_uring ring set up for a single issuer
//! with deferred completion work (see `ring.rs` for why), and hands each a
//! [`Core`]: its index, a [`Mesh`] to send messages to every other core over
//! bounded channels, and a [`ShutdownListener`]. On a core, [`spawn`] and
//! [`spawn_background`] run tasks, [`sleep`] waits, [`net`] does TCP
//! through the ring, and [`TimerTicks`] counts a kernel timer's periods
//! without a system call per look.
//!
//! The runtime owns three node-wide behaviours:
//! - coordinated start: [`Runtime::start`] fails if a core cannot set up its
//!   ring, and [`Runtime::wait_ready`] returns once every core has called
//!   [`Core::ready`], so a node reports healthy only when all serve;
//! - coordinated shutdown: [`ShutdownHandle::trigger`] reaches every core,
//!   each drains its work, and [`Runtime::join`] reports how they ended;
//! - fail-stop: a core that panics takes the whole process down with a clear
//!   log line, rather than leaving a half-alive node behind.
//!
//! What a core holds in its ring can be watched from the core, for metrics
//! and for tests that prove nothing leaks: [`ops_in_flight`], the receive
//! buffer ring's [`recv_buffers`] (including how often connections waited
//! for a buffer), the registered [`file_table`], and the process's
//! [`registered_files_mode`] (whether this kernel may use one at all).

mod bufring;
mod config;
mod executor;
mod files;
mod mesh;
pub mod net;
mod reactor;
mod remote;
mod ring;
mod runtime;
mod shutdown;
mod sync;
mod task;
mod ticks;
mod timer;

pub use bufring::{RecvBuf, RecvBufferStats};
pub use config::{CorePlacement, RuntimeConfig, TaskRun};
pub use executor::{
    file_table, kernel_entries, ops_in_flight, recv_buffers, ring_mode, spawn, spawn_background,
    spawn_detached, yield_now, FileTableStats, JoinHandle,
};
pub use files::{registered_files_mode, RegisteredFiles};
pub use mesh::{mesh_bytes, Inbox, Mesh, MeshStats, SendError, MESH_BYTES_MAX};
pub use ring::RingError;
pub use runtime::{allowed_cpus, pin_to, Core, Runtime, RuntimeError};
pub use shutdown::{ShutdownHandle, ShutdownListener};
pub use ticks::TimerTicks;
pub use timer::{sleep, sleep_until, Sleep};
