use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Once};
use std::thread::JoinHandle as ThreadHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use futures_lite::future;

use crate::config::{CorePlacement, RuntimeConfig};
use crate::executor::{Executor, ExecutorConfig};
use crate::mesh::{Inbox, Mesh, MeshStats, Wiring};
use crate::reactor::RingConfig;
use crate::ring::{RingError, TaskRun};
use crate::shutdown::{ShutdownHandle, ShutdownListener};

/// Why the runtime could not start, or how it ended badly.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The placement names no core.
    #[error("no cores configured")]
    NoCores,
    /// More pinned cores than CPUs this process may run on.
    #[error("{wanted} cores requested but only {available} CPUs are available to this process")]
    NotEnoughCpus {
        /// Cores asked for.
        wanted: usize,
        /// CPUs in the process's affinity mask.
        available: usize,
    },
    /// A core's thread could not be started.
    #[error("cannot start core {core}: {message}")]
    Spawn {
        /// The core's index.
        core: usize,
        /// Why.
        message: String,
    },
    /// A core could not create its ring.
    #[error("core {core} cannot set up its io_uring: {source}")]
    Ring {
        /// The core's index.
        core: usize,
        /// The ring's error.
        source: RingError,
    },
    /// A core ended before it said it was ready.
    #[error("core {core} stopped before it was ready")]
    ExitedBeforeReady {
        /// The core's index.
        core: usize,
    },
    /// Not every core was ready within the set-up timeout.
    #[error("cores not ready within {0:?}")]
    ReadyTimeout(Duration),
    /// The mesh's channels would take more than `MESH_BYTES_MAX` bytes.
    #[error(
        "the channels between {cores} cores with mesh_queue_max = {queue_max} would take \
         {bytes} bytes up front, over {max}: lower mesh_queue_max or run fewer cores",
        max = crate::mesh::MESH_BYTES_MAX
    )]
    MeshTooLarge {
        /// The cores asked for.
        cores: usize,
        /// Messages per channel.
        queue_max: usize,
        /// What the channels would take.
        bytes: u128,
    },
    /// A core's body panicked or failed.
    #[error("core {core} failed: {message}")]
    CoreFailed {
        /// The core's index.
        core: usize,
        /// What it said.
        message: String,
    },
}

/// Refuses a mesh whose channels would take more than `MESH_BYTES_MAX`,
/// before any is made.
fn check_mesh<T>(cores: usize, queue_max: usize) -> Result<(), RuntimeError> {
    let bytes = crate::mesh::mesh_bytes::<T>(cores, queue_max);
    if bytes > crate::mesh::MESH_BYTES_MAX {
        return Err(RuntimeError::MeshTooLarge {
            cores,
            queue_max,
            bytes,
        });
    }
    Ok(())
}

/// How long `Runtime::start` waits for every core to set up its ring.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What a core's body gets: who it is, how to reach the other cores and
/// the shutdown signal.
pub struct Core<T: Send + 'static> {
    id: usize,
    count: usize,
    mesh: Mesh<T>,
    inbox: Option<Inbox<T>>,
    shutdown: ShutdownListener,
    events: Sender<CoreEvent>,
    shutdown_deadline: Duration,
    ring_taskrun: TaskRun,
}

impl<T: Send + 'static> Core<T> {
    /// This core's index, from 0.
    pub fn id(&self) -> usize {
        self.id
    }

    /// How many cores the runtime runs.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The sending side of the channels to every other core.
    pub fn mesh(&self) -> &Mesh<T> {
        &self.mesh
    }

    /// The incoming side of the mesh; taken once, by whoever serves it.
    pub fn take_inbox(&mut self) -> Option<Inbox<T>> {
        self.inbox.take()
    }

    /// The runtime's shutdown signal, as this core sees it.
    pub fn shutdown(&self) -> &ShutdownListener {
        &self.shutdown
    }

    /// How long this core may take to drain once shutdown is triggered.
    pub fn shutdown_deadline(&self) -> Duration {
        self.shutdown_deadline
    }

    /// How this core's ring runs completion work.
    pub fn ring_taskrun(&self) -> TaskRun {
        self.ring_taskrun
    }

    /// Reports this core ready to serve. The node is healthy once every
    /// core has reported.
    pub fn ready(&self) {
        // Never blocks the core: the channel holds every event of every
        // core, and a repeated report is harmless to drop.
        let _ = self.events.try_send(CoreEvent::Ready(self.id));
    }
}

enum CoreEvent {
    /// The core's ring is set up; its body runs.
    Started,
    SetupFailed(usize, RingError),
    Ready(usize),
    Exited(usize),
}

/// A running set of cores.
pub struct Runtime {
    threads: Vec<ThreadHandle<()>>,
    events: Receiver<CoreEvent>,
    /// Events that arrived while `start` waited for the rings.
    early: std::sync::Mutex<Vec<CoreEvent>>,
    shutdown: ShutdownHandle,
    mesh_stats: Vec<Arc<MeshStats>>,
    ring_taskrun: TaskRun,
}

thread_local! {
    static FAIL_STOP: Cell<bool> = const { Cell::new(false) };
}

/// A panic on a core leaves its objects, sessions and queues in an unknown
/// state while the other cores go on routing to it. Stopping the whole
/// process is the only honest answer: clients reconnect, and the store's
/// ownership records are what survive.
fn install_fail_stop_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            if FAIL_STOP.with(Cell::get) {
                let thread = std::thread::current();
                let name = thread.name().unwrap_or("unnamed");
                tracing::error!(
                    thread = name,
                    "a core panicked: {info}; stopping the process"
                );
                eprintln!("routerd: core thread {name} panicked; stopping the process");
                std::process::abort();
            }
        }));
    });
}

fn resolve_cpus(placement: &CorePlacement) -> Result<Vec<Option<usize>>, RuntimeError> {
    let cpus: Vec<Option<usize>> = match placement {
        CorePlacement::Cpus(cpus) => cpus.iter().copied().map(Some).collect(),
        CorePlacement::Unpinned(n) => vec![None; *n],
        CorePlacement::Count(n) => {
            let allowed = allowed_cpus();
            if *n > allowed.len() {
                return Err(RuntimeError::NotEnoughCpus {
                    wanted: *n,
                    available: allowed.len(),
                });
            }
            allowed.into_iter().take(*n).map(Some).collect()
        }
    };
    if cpus.is_empty() {
        return Err(RuntimeError::NoCores);
    }
    Ok(cpus)
}

/// The CPUs this process may run on, in ascending order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask that sched_getaffinity fills in; we
    // pass its exact size, and read it only through the libc accessors.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|cpu| libc::CPU_ISSET(*cpu, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: as in `allowed_cpus`: a zeroed bitmask set through libc's
    // accessors and passed with its exact size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The most completion queue entries the kernel gives a ring
/// (`IORING_MAX_CQ_ENTRIES`).
const CQ_ENTRIES_MAX: u32 = 65_536;

/// A core's completion queue: `cq_factor` times its submission queue, and
/// at least one entry per connection it expects (its registered file
/// table's size), so one pass in which every connection's multishot receive
/// completes fits. An overflowing queue makes the kernel end multishot
/// receives (each then re-armed by a submission of its own) and keep the
/// overflow in memory it allocates, and past that drop completions.
fn completion_queue_entries(config: &RuntimeConfig) -> u32 {
    let by_depth = config.ring_depth.max(8) * config.cq_factor.max(2);
    by_depth
        .max(
            config
                .registered_files
                .min(CQ_ENTRIES_MAX)
                .next_power_of_two(),
        )
        .min(CQ_ENTRIES_MAX)
}

fn executor_config(config: &RuntimeConfig) -> ExecutorConfig {
    ExecutorConfig {
        ring: RingConfig {
            entries: config.ring_depth.max(8),
            cq_entries: completion_queue_entries(config),
            mode: config.ring_taskrun,
            recv_buffers: config.recv_buffers,
            recv_buffer_bytes: config.recv_buffer_bytes,
            registered_files: config.registered_files,
            recv_buffers_per_conn_max: config.recv_buffers_per_conn_max,
        },
        spin_before_park: config.spin_before_park,
        latency_shares: config.latency_shares as u64,
        background_shares: config.throughput_shares as u64,
    }
}

impl Runtime {
    /// Starts one executor thread per configured core and runs `core_main`
    /// on each. Returns once every core has set up its ring (or with the
    /// first core's setup error). `core_main` should call [`Core::ready`]
    /// once it serves, and return once it has drained after shutdown.
    pub fn start<T, F, Fut>(
        config: &RuntimeConfig,
        shutdown: ShutdownHandle,
        core_main: F,
    ) -> Result<Runtime, RuntimeError>
    where
        T: Send + 'static,
        F: Fn(Core<T>) -> Fut + Send + Clone + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        install_fail_stop_hook();
        let cpus = resolve_cpus(&config.placement)?;
        let count = cpus.len();
        check_mesh::<T>(count, config.mesh_queue_max)?;
        let mut wiring = Wiring::<T>::new(count, config.mesh_queue_max);
        let (events_tx, events) = crossbeam_channel::bounded(count * 8);
        let mut threads = Vec::with_capacity(count);
        let mut mesh_stats = Vec::with_capacity(count);
        for (index, cpu) in cpus.into_iter().enumerate() {
            let stats = Arc::new(MeshStats::default());
            mesh_stats.push(stats.clone());
            let body = CoreBody {
                index,
                count,
                cpu,
                senders: std::mem::take(&mut wiring.senders[index]),
                receivers: std::mem::take(&mut wiring.receivers[index]),
                signals: wiring.signals.clone(),
                listener: shutdown.listener(),
                events: events_tx.clone(),
                config: config.clone(),
                stats,
                core_main: core_main.clone(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{index}", config.thread_name_prefix))
                .spawn(move || body.run());
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(error) => {
                    shutdown.trigger();
                    return Err(RuntimeError::Spawn {
                        core: index,
                        message: error.to_string(),
                    });
                }
            }
        }
        let mut runtime = Runtime {
            threads,
            events,
            early: std::sync::Mutex::new(Vec::new()),
            shutdown,
            mesh_stats,
            ring_taskrun: config.ring_taskrun,
        };
        if let Err(error) = runtime.wait_started(count) {
            runtime.shutdown.trigger();
            for thread in runtime.threads.drain(..) {
                let _ = thread.join();
            }
            return Err(error);
        }
        Ok(runtime)
    }

    fn wait_started(&self, count: usize) -> Result<(), RuntimeError> {
        let deadline = std::time::Instant::now() + SETUP_TIMEOUT;
        let mut started = 0;
        let mut early_ready = Vec::new();
        while started < count {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(CoreEvent::Started) => started += 1,
                Ok(CoreEvent::SetupFailed(core, source)) => {
                    return Err(RuntimeError::Ring { core, source })
                }
                // Kept for `wait_ready`: a body may report before every
                // core has started.
                Ok(event) => early_ready.push(event),
                Err(_) => return Err(RuntimeError::ReadyTimeout(SETUP_TIMEOUT)),
            }
        }
        *self.early.lock().unwrap_or_else(|e| e.into_inner()) = early_ready;
        Ok(())
    }

    /// How many cores run.
    pub fn core_count(&self) -> usize {
        self.threads.len()
    }

    /// A handle that starts the runtime's shutdown.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Each core's mesh counters, by core index.
    pub fn mesh_stats(&self) -> &[Arc<MeshStats>] {
        &self.mesh_stats
    }

    /// How every core's ring runs completion work.
    pub fn ring_taskrun(&self) -> TaskRun {
        self.ring_taskrun
    }

    /// Waits until every core has reported ready.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), RuntimeError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut ready = vec![false; self.threads.len()];
        let mut early = std::mem::take(&mut *self.early.lock().unwrap_or_else(|e| e.into_inner()));
        early.reverse();
        while ready.iter().any(|r| !r) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let event = match early.pop() {
                Some(event) => Ok(event),
                None => self.events.recv_timeout(left),
            };
            match event {
                Ok(CoreEvent::Ready(core)) => ready[core] = true,
                Ok(CoreEvent::Exited(core)) => {
                    return Err(RuntimeError::ExitedBeforeReady { core })
                }
                Ok(CoreEvent::Started) | Ok(CoreEvent::SetupFailed(..)) => {}
                Err(RecvTimeoutError::Timeout) => return Err(RuntimeError::ReadyTimeout(timeout)),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RuntimeError::ExitedBeforeReady { core: 0 })
                }
            }
        }
        Ok(())
    }

    /// Waits for every core to finish. Call after triggering shutdown (or
    /// to serve until something else does).
    pub fn join(self) -> Result<(), RuntimeError> {
        let mut first_error = None;
        for (core, thread) in self.threads.into_iter().enumerate() {
            if thread.join().is_err() {
                first_error.get_or_insert(RuntimeError::CoreFailed {
                    core,
                    message: "the core thread panicked".to_string(),
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

struct CoreBody<T: Send + 'static, F> {
    index: usize,
    count: usize,
    cpu: Option<usize>,
    senders: Vec<Option<Sender<T>>>,
    receivers: Vec<Option<Receiver<T>>>,
    signals: Vec<Arc<crate::mesh::Signal>>,
    listener: ShutdownListener,
    events: Sender<CoreEvent>,
    config: RuntimeConfig,
    stats: Arc<MeshStats>,
    core_main: F,
}

impl<T, F, Fut> CoreBody<T, F>
where
    T: Send + 'static,
    F: Fn(Core<T>) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = ()> + 'static,
{
    fn run(self) {
        FAIL_STOP.with(|flag| flag.set(true));
        let index = self.index;
        if let Some(cpu) = self.cpu {
            if let Err(error) = pin_to(cpu) {
                tracing::warn!(core = index, cpu, %error, "cannot pin the core to its CPU");
            }
        }
        let executor = match Executor::new(executor_config(&self.config)) {
            Ok(executor) => executor,
            Err(error) => {
                let _ = self.events.try_send(CoreEvent::SetupFailed(index, error));
                return;
            }
        };
        let _ = self.events.try_send(CoreEvent::Started);
        let ring_taskrun = executor.mode();
        let events = self.events.clone();
        let deadline = self.config.shutdown_deadline;
        let listener = self.listener.clone();
        let signal = self.signals[index].clone();
        let core = Core {
            id: index,
            count: self.count,
            mesh: Mesh::new(index, self.senders, self.signals, self.stats),
            inbox: Some(Inbox::new(self.receivers, signal)),
            shutdown: self.listener,
            events: self.events,
            shutdown_deadline: deadline,
            ring_taskrun,
        };
        let core_main = self.core_main;
        executor.run(async move {
            let body = crate::spawn(core_main(core));
            let finished = future::or(
                async {
                    body.await;
                    true
                },
                async {
                    listener.wait().await;
                    crate::sleep(deadline).await;
                    false
                },
            )
            .await;
            if !finished {
                tracing::warn!(
                    core = index,
                    ?deadline,
                    "core did not drain within the shutdown deadline"
                );
            }
        });
        let _ = events.try_send(CoreEvent::Exited(index));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The completion queue holds a completion of every connection the core
    /// expects (its registered file table), within the kernel's bound.
    #[test]
    fn the_completion_queue_is_sized_from_the_connections() {
        let mut config = RuntimeConfig::new(CorePlacement::Unpinned(1));
        assert_eq!(config.ring_depth * config.cq_factor, 2048);
        config.registered_files = 10_000;
        assert_eq!(completion_queue_entries(&config), 16_384);
        config.registered_files = 0;
        assert_eq!(completion_queue_entries(&config), 2048);
        config.registered_files = u32::MAX;
        assert_eq!(completion_queue_entries(&config), CQ_ENTRIES_MAX);
    }
}
