use std::time::Duration;

pub use crate::ring::TaskRun;

/// Which CPUs the runtime's cores run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorePlacement {
    /// `n` cores pinned to the first `n` CPUs this process may run on.
    Count(usize),
    /// One core pinned to each listed CPU.
    Cpus(Vec<usize>),
    /// `n` cores left to the kernel's scheduler: for tests that start
    /// runtimes beside each other on a small machine.
    Unpinned(usize),
}

impl CorePlacement {
    /// How many cores this placement runs.
    pub fn core_count(&self) -> usize {
        match self {
            CorePlacement::Count(n) | CorePlacement::Unpinned(n) => *n,
            CorePlacement::Cpus(cpus) => cpus.len(),
        }
    }
}

/// Per-core executor tuning and the runtime's own bounds.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Which CPUs the cores run on.
    pub placement: CorePlacement,
    /// Submission queue entries of each core's ring (a power of two); the
    /// completion queue is `cq_factor` times longer.
    pub ring_depth: u32,
    /// Completion queue length as a multiple of `ring_depth`: multishot
    /// receives complete many times per submission. The queue is made at
    /// least `registered_files` long (one completion per connection).
    pub cq_factor: u32,
    /// How completion work runs on the ring (see [`TaskRun`]).
    pub ring_taskrun: TaskRun,
    /// Buffers in each core's receive buffer ring (a power of two).
    pub recv_buffers: u16,
    /// Bytes of each receive buffer.
    pub recv_buffer_bytes: usize,
    /// Receive buffers one connection may hold at once (lent to its reader
    /// or filled and not yet read): at the bound its receive stops until
    /// the reader gives one back, and bytes a burst brought past it are
    /// copied out of the ring, so a slow reader cannot take the ring from
    /// the core's other connections. At least 1.
    pub recv_buffers_per_conn_max: u32,
    /// Entries of each core's registered file table: this many of a
    /// core's sockets are named by index in its ring's operations, the rest
    /// by descriptor (a little slower). Lowered to the open-file limit;
    /// zero registers no table.
    pub registered_files: u32,
    /// Busy-poll the ring this long before an idle core sleeps; zero
    /// sleeps at once.
    pub spin_before_park: Duration,
    /// Scheduler shares of the latency-sensitive task queue.
    pub latency_shares: usize,
    /// Scheduler shares of the background task queue.
    pub throughput_shares: usize,
    /// Messages one core-to-core channel holds before sends to it fail.
    pub mesh_queue_max: usize,
    /// How long a core may take to drain after shutdown is triggered.
    pub shutdown_deadline: Duration,
    /// How core threads are named: `<prefix>-<core index>`.
    pub thread_name_prefix: String,
}

impl RuntimeConfig {
    /// The defaults, on `placement`.
    pub fn new(placement: CorePlacement) -> Self {
        Self {
            placement,
            ring_depth: 256,
            cq_factor: 8,
            ring_taskrun: TaskRun::Defer,
            recv_buffers: 512,
            recv_buffer_bytes: 16 * 1024,
            recv_buffers_per_conn_max: 32,
            registered_files: 16 * 1024,
            spin_before_park: Duration::ZERO,
            latency_shares: 1000,
            throughput_shares: 100,
            mesh_queue_max: 4096,
            shutdown_deadline: Duration::from_secs(5),
            thread_name_prefix: "routerd-core".to_string(),
        }
    }
}
