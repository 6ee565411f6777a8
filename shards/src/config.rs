use std::time::Duration;

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
    pub placement: CorePlacement,
    /// io_uring registered buffer memory per executor. Locked memory is
    /// scarce (`ulimit -l`), so keep it small when many executors start.
    pub io_memory_bytes: usize,
    pub ring_depth: usize,
    /// Busy-spin before parking an idle executor; zero parks at once.
    pub spin_before_park: Duration,
    /// Scheduler shares of the latency-sensitive task queue.
    pub latency_shares: usize,
    /// Scheduler shares of the throughput task queue.
    pub throughput_shares: usize,
    /// Messages one core-to-core channel holds before sends to it fail.
    pub mesh_queue_max: usize,
    /// How long a core may take to drain after shutdown is triggered.
    pub shutdown_deadline: Duration,
    /// How executor threads are named: `<prefix>-<core index>`.
    pub thread_name_prefix: String,
}

impl RuntimeConfig {
    pub fn new(placement: CorePlacement) -> Self {
        Self {
            placement,
            io_memory_bytes: 512 * 1024,
            ring_depth: 128,
            spin_before_park: Duration::ZERO,
            latency_shares: 1000,
            throughput_shares: 100,
            mesh_queue_max: 4096,
            shutdown_deadline: Duration::from_secs(5),
            thread_name_prefix: "routerd-core".to_string(),
        }
    }
}
