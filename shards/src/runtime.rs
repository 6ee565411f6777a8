use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Once};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use futures_lite::future;
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{
    ExecutorJoinHandle, Latency, LocalExecutorBuilder, Placement, Shares, TaskQueueHandle,
};

use crate::config::{CorePlacement, RuntimeConfig};
use crate::mesh::{Inbox, Mesh, MeshStats};
use crate::shutdown::{ShutdownHandle, ShutdownListener};

/// Why the runtime could not start, or how it ended badly.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no cores configured")]
    NoCores,
    #[error("{wanted} cores requested but only {available} CPUs are available to this process")]
    NotEnoughCpus { wanted: usize, available: usize },
    #[error("cannot start core {core}: {message}")]
    Spawn { core: usize, message: String },
    #[error("core {core} stopped before it was ready")]
    ExitedBeforeReady { core: usize },
    #[error("cores not ready within {0:?}")]
    ReadyTimeout(Duration),
    #[error("core {core} failed: {message}")]
    CoreFailed { core: usize, message: String },
}

/// What a core's body gets: who it is, how to reach the other cores, its
/// task queues and the shutdown signal.
pub struct Core<T: Send + 'static> {
    id: usize,
    count: usize,
    mesh: Mesh<T>,
    inbox: Option<Inbox<T>>,
    shutdown: ShutdownListener,
    latency_queue: TaskQueueHandle,
    throughput_queue: TaskQueueHandle,
    events: Sender<CoreEvent>,
    shutdown_deadline: Duration,
}

impl<T: Send + 'static> Core<T> {
    pub fn id(&self) -> usize {
        self.id
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn mesh(&self) -> &Mesh<T> {
        &self.mesh
    }

    /// The incoming side of the mesh; taken once, by whoever serves it.
    pub fn take_inbox(&mut self) -> Option<Inbox<T>> {
        self.inbox.take()
    }

    pub fn shutdown(&self) -> &ShutdownListener {
        &self.shutdown
    }

    /// How long this core may take to drain once shutdown is triggered.
    pub fn shutdown_deadline(&self) -> Duration {
        self.shutdown_deadline
    }

    /// The queue for client IO and routing: work whose latency matters.
    pub fn latency_queue(&self) -> TaskQueueHandle {
        self.latency_queue
    }

    /// The queue for background work: periodic saves, cleanup sweeps.
    pub fn throughput_queue(&self) -> TaskQueueHandle {
        self.throughput_queue
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
    Ready(usize),
    Exited(usize),
    /// Stopped before joining the mesh, so before it had an index.
    Aborted,
}

/// A running set of cores.
pub struct Runtime {
    handles: Vec<ExecutorJoinHandle<()>>,
    events: Receiver<CoreEvent>,
    shutdown: ShutdownHandle,
    mesh_stats: Vec<Arc<MeshStats>>,
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

impl Runtime {
    /// Starts one executor per configured core and runs `core_main` on
    /// each. `core_main` should call [`Core::ready`] once it serves, and
    /// return once it has drained after shutdown.
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
        let mesh_builder = MeshBuilder::<T, _>::full(count, config.mesh_queue_max);
        let (events_tx, events) = crossbeam_channel::bounded(count * 4);
        let mut handles = Vec::with_capacity(count);
        let mut mesh_stats = Vec::with_capacity(count);
        for (index, cpu) in cpus.into_iter().enumerate() {
            let placement = cpu.map_or(Placement::Unbound, Placement::Fixed);
            let stats = Arc::new(MeshStats::default());
            mesh_stats.push(stats.clone());
            let body = CoreBody {
                mesh_builder: mesh_builder.clone(),
                listener: shutdown.listener(),
                events: events_tx.clone(),
                config: config.clone(),
                stats,
                core_main: core_main.clone(),
            };
            let handle = LocalExecutorBuilder::new(placement)
                .name(&config.thread_name_prefix)
                .io_memory(config.io_memory_bytes)
                .ring_depth(config.ring_depth)
                .spin_before_park(config.spin_before_park)
                .spawn(move || body.run())
                .map_err(|error| RuntimeError::Spawn {
                    core: index,
                    message: error.to_string(),
                });
            match handle {
                Ok(handle) => handles.push(handle),
                Err(error) => {
                    // Cores already started wait in the mesh join for a
                    // peer that will never come: release them.
                    shutdown.trigger();
                    return Err(error);
                }
            }
        }
        Ok(Runtime {
            handles,
            events,
            shutdown,
            mesh_stats,
        })
    }

    pub fn core_count(&self) -> usize {
        self.handles.len()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Each core's mesh counters, by core index.
    pub fn mesh_stats(&self) -> &[Arc<MeshStats>] {
        &self.mesh_stats
    }

    /// Waits until every core has reported ready.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), RuntimeError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut ready = vec![false; self.handles.len()];
        while ready.iter().any(|r| !r) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(CoreEvent::Ready(core)) => ready[core] = true,
                Ok(CoreEvent::Exited(core)) => {
                    return Err(RuntimeError::ExitedBeforeReady { core })
                }
                Ok(CoreEvent::Aborted) => return Err(RuntimeError::ExitedBeforeReady { core: 0 }),
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
        for (core, handle) in self.handles.into_iter().enumerate() {
            if let Err(error) = handle.join() {
                first_error.get_or_insert(RuntimeError::CoreFailed {
                    core,
                    message: error.to_string(),
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

struct CoreBody<T: Send + 'static, F> {
    mesh_builder: MeshBuilder<T, glommio::channels::channel_mesh::Full>,
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
    async fn run(self) {
        FAIL_STOP.with(|flag| flag.set(true));
        let joined = future::or(async { Some(self.mesh_builder.join().await) }, async {
            self.listener.wait().await;
            None
        })
        .await;
        let Some(Ok((senders, receivers))) = joined else {
            // Shutdown before every peer joined (another core failed to
            // start): there is nothing to serve.
            let _ = self.events.try_send(CoreEvent::Aborted);
            return;
        };
        let executor = glommio::executor();
        let latency_queue = executor.create_task_queue(
            Shares::Static(self.config.latency_shares),
            Latency::Matters(Duration::from_millis(1)),
            "latency",
        );
        let throughput_queue = executor.create_task_queue(
            Shares::Static(self.config.throughput_shares),
            Latency::NotImportant,
            "throughput",
        );
        let id = senders.peer_id();
        let mesh = Mesh::new(senders, self.stats);
        let core = Core {
            id,
            count: mesh.core_count(),
            mesh: mesh.clone(),
            inbox: Some(Inbox::new(receivers)),
            shutdown: self.listener.clone(),
            latency_queue,
            throughput_queue,
            events: self.events.clone(),
            shutdown_deadline: self.config.shutdown_deadline,
        };
        let body = glommio::spawn_local_into((self.core_main)(core), latency_queue)
            .expect("the latency queue was just created on this executor");
        let deadline = self.config.shutdown_deadline;
        let finished = future::or(
            async {
                body.await;
                true
            },
            async {
                self.listener.wait().await;
                glommio::timer::sleep(deadline).await;
                false
            },
        )
        .await;
        if !finished {
            tracing::warn!(
                core = id,
                ?deadline,
                "core did not drain within the shutdown deadline"
            );
        }
        mesh.close();
        let _ = self.events.try_send(CoreEvent::Exited(id));
    }
}
