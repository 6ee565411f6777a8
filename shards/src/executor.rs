//! One core's executor: its tasks, two run queues with shares, timers, and
//! the loop that runs tasks and enters the kernel once per turn.
//!
//! A loop turn runs the woken tasks (up to a budget, latency work before
//! background work by their shares), takes wakes that came from other
//! threads, fires due timers, and then enters the kernel once: to submit
//! every operation the turn queued and reap completions, waiting only when
//! nothing is runnable. With `DEFER_TASKRUN` that one entry is where all
//! completion work happens, so a busy core pays one system call per turn
//! however many connections it serves.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::reactor::{Reactor, RingConfig};
use crate::remote::Remote;
use crate::ring::{RingError, TaskRun};
use crate::task::{Priority, TaskHeader};
use crate::timer::Timers;

/// Task polls per loop turn at most before the kernel is entered again, so
/// tasks that keep waking each other cannot starve IO.
const POLLS_PER_TURN_MAX: usize = 256;
/// How long a turn polls tasks at most before it looks at timers and the
/// ring again. A poll's own work has no bound here (a router poll handles
/// up to a thousand requests, each maybe a script), so a count of polls
/// alone let a turn of heavy polls run for seconds while every timer of
/// the core, a membership heartbeat's among them, and every completion
/// waited: the node's lease lapsed under its own load.
const POLLING_PER_TURN_MAX: Duration = Duration::from_millis(1);
/// How long a stopping executor waits for the kernel to release the memory
/// of cancelled operations.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(2);

/// Executor tuning, from the runtime config.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExecutorConfig {
    pub ring: RingConfig,
    pub spin_before_park: Duration,
    pub latency_shares: u64,
    pub background_shares: u64,
}

type BoxFuture = Pin<Box<dyn Future<Output = ()>>>;

struct TaskSlot {
    future: Option<BoxFuture>,
    header: Arc<TaskHeader>,
}

/// The two run queues and their virtual run times: each poll advances its
/// queue's clock by the inverse of its shares, and the queue behind runs.
struct Queues {
    queues: [VecDeque<Arc<TaskHeader>>; 2],
    vruntime: [u64; 2],
    cost: [u64; 2],
}

impl Queues {
    fn new(latency_shares: u64, background_shares: u64) -> Queues {
        // Scaled so that a share of 1 costs 1,000,000 per poll.
        let cost = |shares: u64| 1_000_000 / shares.max(1);
        Queues {
            queues: [VecDeque::new(), VecDeque::new()],
            vruntime: [0, 0],
            cost: [cost(latency_shares), cost(background_shares)],
        }
    }

    fn push(&mut self, task: Arc<TaskHeader>) {
        let queue = task.priority as usize;
        if self.queues[queue].is_empty() {
            // A queue that was idle does not bank credit: it resumes at the
            // other's clock, as CFS does for a waking task.
            let other = 1 - queue;
            self.vruntime[queue] = self.vruntime[queue].max(self.vruntime[other]);
        }
        self.queues[queue].push_back(task);
    }

    fn pop(&mut self) -> Option<Arc<TaskHeader>> {
        let queue = match (self.queues[0].is_empty(), self.queues[1].is_empty()) {
            (true, true) => return None,
            (false, true) => 0,
            (true, false) => 1,
            (false, false) => usize::from(self.vruntime[1] < self.vruntime[0]),
        };
        self.vruntime[queue] += self.cost[queue];
        self.queues[queue].pop_front()
    }

    fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }
}

pub(crate) struct Executor {
    tasks: RefCell<Vec<Option<TaskSlot>>>,
    free_tasks: RefCell<Vec<usize>>,
    queues: RefCell<Queues>,
    timers: RefCell<Timers>,
    pub reactor: Reactor,
    remote: Arc<Remote>,
    now: Cell<Instant>,
    spin_before_park: Duration,
}

thread_local! {
    /// The executor running on this thread, while `Executor::run` runs.
    static CURRENT: Cell<*const Executor> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with this thread's executor, if one is running.
fn try_with<R>(f: impl FnOnce(&Executor) -> R) -> Option<R> {
    let current = CURRENT.with(Cell::get);
    if current.is_null() {
        return None;
    }
    // SAFETY: CURRENT is set only inside `Executor::run`, which holds the
    // executor alive on its stack for as long as the pointer is set and
    // clears it before returning (also on unwind, through `Reset`).
    Some(f(unsafe { &*current }))
}

/// Runs `f` with this thread's executor.
///
/// # Panics
/// Outside a core: spawning or doing IO there is a bug of the caller.
pub(crate) fn with<R>(f: impl FnOnce(&Executor) -> R) -> R {
    try_with(f).expect("this must run on a shards core (inside Runtime::start)")
}

/// Queues a woken task on this thread's executor if it is the task's own;
/// false if the wake comes from another thread.
pub(crate) fn schedule_local(task: &Arc<TaskHeader>) -> bool {
    try_with(|executor| {
        if !Arc::ptr_eq(&executor.remote, &task.remote) {
            return false;
        }
        executor.queues.borrow_mut().push(task.clone());
        true
    })
    .unwrap_or(false)
}

/// The time at the start of the current loop turn (the clock outside a
/// core): timers compare against it, so a turn reads the clock once.
pub(crate) fn loop_now() -> Instant {
    try_with(|executor| executor.now.get()).unwrap_or_else(Instant::now)
}

pub(crate) fn with_reactor<R>(f: impl FnOnce(&Reactor) -> R) -> R {
    with(|executor| f(&executor.reactor))
}

pub(crate) fn try_with_reactor<R>(f: impl FnOnce(&Reactor) -> R) -> Option<R> {
    try_with(|executor| f(&executor.reactor))
}

pub(crate) fn with_timers<R>(f: impl FnOnce(&mut Timers) -> R) -> R {
    with(|executor| f(&mut executor.timers.borrow_mut()))
}

pub(crate) fn try_with_timers(f: impl FnOnce(&mut Timers)) {
    try_with(|executor| f(&mut executor.timers.borrow_mut()));
}

/// Spawns `future` on this core's latency queue. The task runs even if
/// the handle is dropped.
///
/// # Panics
/// Outside a core.
pub fn spawn<T: 'static>(future: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    spawn_with(Priority::Latency, future)
}

/// Spawns `future` on this core's background queue: it runs in the gaps
/// of latency work, within `background_shares`.
pub fn spawn_background<T: 'static>(future: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    spawn_with(Priority::Background, future)
}

fn spawn_with<T: 'static>(
    priority: Priority,
    future: impl Future<Output = T> + 'static,
) -> JoinHandle<T> {
    let state = Rc::new(RefCell::new(JoinState::Running(None)));
    let result = state.clone();
    let task = async move {
        let output = future.await;
        let previous = std::mem::replace(&mut *result.borrow_mut(), JoinState::Done(output));
        if let JoinState::Running(Some(waker)) = previous {
            waker.wake();
        }
    };
    with(|executor| executor.spawn_boxed(priority, Box::pin(task)));
    JoinHandle { state }
}

/// Spawns `future` on this core's latency queue with nobody to await it:
/// [`spawn`] then `detach`, without the shared slot a [`JoinHandle`] reads
/// its output from. For tasks made by the thousand (one per connection),
/// where that slot is a fifth of the task's memory.
///
/// # Panics
/// Outside a core.
pub fn spawn_detached(future: impl Future<Output = ()> + 'static) {
    with(|executor| executor.spawn_boxed(Priority::Latency, Box::pin(future)));
}

/// Yields once: the task runs again in a later turn, after other work.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

enum JoinState<T> {
    Running(Option<Waker>),
    Done(T),
    Taken,
}

/// Awaits a spawned task's output. Dropping it detaches the task.
pub struct JoinHandle<T> {
    state: Rc<RefCell<JoinState<T>>>,
}

impl<T> JoinHandle<T> {
    /// Lets the task run on without anyone waiting for it.
    pub fn detach(self) {}

    /// Whether the task has ended (its output may still be waiting).
    pub fn is_finished(&self) -> bool {
        !matches!(*self.state.borrow(), JoinState::Running(_))
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut state = self.state.borrow_mut();
        match std::mem::replace(&mut *state, JoinState::Taken) {
            JoinState::Done(output) => Poll::Ready(output),
            JoinState::Running(_) => {
                *state = JoinState::Running(Some(cx.waker().clone()));
                Poll::Pending
            }
            JoinState::Taken => panic!("a JoinHandle polled after it returned"),
        }
    }
}

/// Clears CURRENT when `run` ends, also by a panic.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        CURRENT.with(|current| current.set(std::ptr::null()));
    }
}

impl Executor {
    pub fn new(config: ExecutorConfig) -> Result<Executor, RingError> {
        let remote = Arc::new(Remote::new().map_err(RingError::Other)?);
        // A task per connection: room for as many as the file table names,
        // reserved (not resident) for the reason `SlotTable::with_capacity`
        // gives.
        let expected_tasks = config.ring.registered_files as usize;
        let reactor = Reactor::new(config.ring, remote.eventfd())?;
        Ok(Executor {
            tasks: RefCell::new(Vec::with_capacity(expected_tasks)),
            free_tasks: RefCell::new(Vec::with_capacity(expected_tasks)),
            queues: RefCell::new(Queues::new(config.latency_shares, config.background_shares)),
            timers: RefCell::new(Timers::default()),
            reactor,
            remote,
            now: Cell::new(Instant::now()),
            spin_before_park: config.spin_before_park,
        })
    }

    pub fn mode(&self) -> TaskRun {
        self.reactor.mode()
    }

    fn spawn_boxed(&self, priority: Priority, future: BoxFuture) {
        let mut tasks = self.tasks.borrow_mut();
        let index = self.free_tasks.borrow_mut().pop().unwrap_or(tasks.len());
        let header = Arc::new(TaskHeader {
            index: u32::try_from(index).expect("fewer than 2^32 tasks on a core"),
            priority,
            scheduled: crate::sync::AtomicBool::new(true),
            remote: self.remote.clone(),
        });
        let slot = TaskSlot {
            future: Some(future),
            header: header.clone(),
        };
        if index == tasks.len() {
            tasks.push(Some(slot));
        } else {
            tasks[index] = Some(slot);
        }
        drop(tasks);
        self.queues.borrow_mut().push(header);
    }

    /// Runs `main` (and every task it spawns) until `main` completes, then
    /// cancels what is left in the kernel and returns `main`'s output.
    /// Tasks still alive then are dropped with the executor.
    pub fn run<T: 'static>(&self, main: impl Future<Output = T> + 'static) -> T {
        CURRENT.with(|current| {
            assert!(current.get().is_null(), "one executor per thread");
            current.set(self as *const Executor);
        });
        let _reset = Reset;
        let main = spawn(main);
        let mut remote_woken = Vec::new();
        let mut due = Vec::new();
        while !main.is_finished() {
            self.turn(&mut remote_woken, &mut due, &|| main.is_finished());
        }
        let output = match Rc::try_unwrap(main.state).ok().map(RefCell::into_inner) {
            Some(JoinState::Done(output)) => output,
            _ => unreachable!("main finished"),
        };
        // Futures may own buffers of operations in flight: drop every task
        // (their ops become orphans) before letting the kernel go.
        self.tasks.borrow_mut().clear();
        if !self.reactor.quiesce(Instant::now() + QUIESCE_TIMEOUT) {
            tracing::warn!("io_uring operations outlived the core; leaking their memory");
            self.reactor.leak();
        }
        output
    }

    /// One loop turn; it does not wait in the kernel once `done` says the
    /// main task has finished.
    fn turn(
        &self,
        remote_woken: &mut Vec<Arc<TaskHeader>>,
        due: &mut Vec<Waker>,
        done: &dyn Fn() -> bool,
    ) {
        self.now.set(Instant::now());
        self.run_tasks();
        if done() {
            return;
        }
        self.remote.drain(remote_woken);
        for task in remote_woken.drain(..) {
            self.queues.borrow_mut().push(task);
        }
        self.timers.borrow_mut().take_due(self.now.get(), due);
        due.drain(..).for_each(Waker::wake);
        if !self.queues.borrow().is_empty() {
            if self.reactor.needs_enter() {
                self.enter(None);
            }
            self.reactor.reap();
            return;
        }
        if self.spin() {
            return;
        }
        self.park();
    }

    fn run_tasks(&self) {
        let started = self.now.get();
        for _ in 0..POLLS_PER_TURN_MAX {
            let Some(task) = self.queues.borrow_mut().pop() else {
                return;
            };
            self.poll_task(task);
            // A clock read a poll: a few dozen nanoseconds beside a poll's
            // work, and a heavy poll is the case this bound is for.
            let now = Instant::now();
            if now.duration_since(started) >= POLLING_PER_TURN_MAX {
                // Timers are judged at the time the polling stopped.
                self.now.set(now);
                return;
            }
        }
    }

    fn poll_task(&self, task: Arc<TaskHeader>) {
        // Cleared before the poll: a wake during the poll queues it again.
        task.begin_poll();
        let future = {
            let mut tasks = self.tasks.borrow_mut();
            match tasks.get_mut(task.slot()).and_then(Option::as_mut) {
                Some(slot) if Arc::ptr_eq(&slot.header, &task) => slot.future.take(),
                // A wake of a task that finished (its slot reused or free).
                _ => None,
            }
        };
        let Some(mut future) = future else {
            return;
        };
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let polled = future.as_mut().poll(&mut cx);
        match polled {
            Poll::Ready(()) => {
                drop(future);
                self.tasks.borrow_mut()[task.slot()] = None;
                self.free_tasks.borrow_mut().push(task.slot());
            }
            Poll::Pending => {
                if let Some(Some(slot)) = self.tasks.borrow_mut().get_mut(task.slot()) {
                    slot.future = Some(future);
                }
            }
        }
    }

    /// Busy-polls the kernel and the remote queue for up to
    /// `spin_before_park`; true when something became runnable.
    fn spin(&self) -> bool {
        if self.spin_before_park.is_zero() {
            return false;
        }
        let until = self.now.get() + self.spin_before_park;
        loop {
            self.enter(None);
            if self.reactor.reap() > 0 || self.remote_pending() {
                return true;
            }
            let now = Instant::now();
            if self
                .timers
                .borrow()
                .next_deadline()
                .is_some_and(|at| at <= now)
            {
                return true;
            }
            if now >= until {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    fn remote_pending(&self) -> bool {
        let mut woken = Vec::new();
        self.remote.drain(&mut woken);
        let any = !woken.is_empty();
        let mut queues = self.queues.borrow_mut();
        woken.into_iter().for_each(|task| queues.push(task));
        any
    }

    /// Waits in the kernel for a completion, a remote wake or the next
    /// timer.
    fn park(&self) {
        self.reactor.arm_wake();
        let timeout = self
            .timers
            .borrow()
            .next_deadline()
            .map(|at| at.saturating_duration_since(Instant::now()));
        if timeout.is_some_and(|timeout| timeout.is_zero()) {
            self.enter(None);
        } else if self.remote.prepare_sleep() {
            self.enter(Some(timeout));
            self.remote.woke();
        } else {
            self.enter(None);
        }
        self.reactor.reap();
    }

    fn enter(&self, wait: Option<Option<Duration>>) {
        if let Err(error) = self.reactor.enter(wait) {
            // EAGAIN/ENOMEM are transient kernel shortages; anything else
            // means the ring is unusable, and a core without IO is dead.
            match error.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOMEM) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => panic!("{}", enter_failure(&error)),
            }
        }
    }
}

/// What a failed kernel entry that ends the core says.
fn enter_failure(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        // IORING_FEAT_NODROP: the kernel keeps completions that overflow
        // the completion queue in memory of its own, and says EBADR once
        // when it could not and dropped one. An operation's only result is
        // lost: its future would wait forever and its memory stay lent.
        Some(libc::EBADR) => format!(
            "io_uring_enter failed: the kernel dropped a completion (EBADR: the completion \
             queue overflowed and the kernel had no memory to keep the overflow); an \
             operation's result is lost, so the core stops (raise cores.ring_depth, or give \
             the process more memory): {error}"
        ),
        _ => format!("io_uring_enter failed: {error}"),
    }
}

/// A snapshot for tests and metrics: kernel entries made on this core.
pub fn kernel_entries() -> u64 {
    with(|executor| executor.reactor.enters.get())
}

/// Operations this core's ring still owns: futures waiting for their
/// completion, and dropped ones whose memory the kernel has not let go of.
/// At rest it comes back to what the core's long-lived operations need (a
/// receive per connection, an accept per listener); a count that only grows
/// is a leak.
pub fn ops_in_flight() -> usize {
    with(|executor| executor.reactor.in_flight())
}

/// This core's registered file table: indexes in use (a stream's socket,
/// or a close not yet completed) and streams that found it full and use
/// their descriptor instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileTableStats {
    /// Table indexes in use.
    pub in_use: u32,
    /// Streams that found the table full and use their descriptor.
    pub unregistered: u64,
}

/// A snapshot of this core's registered file table.
pub fn file_table() -> FileTableStats {
    with(|executor| FileTableStats {
        in_use: executor.reactor.files_in_use(),
        unregistered: executor.reactor.files_unregistered(),
    })
}

/// A snapshot of this core's receive buffer ring: buffers lent out,
/// connections waiting for one, and how often they waited or reached their
/// `recv_buffers_per_conn_max`.
pub fn recv_buffers() -> crate::bufring::RecvBufferStats {
    with(|executor| executor.reactor.bufs.stats())
}

/// How this core's ring was set up.
pub fn ring_mode() -> TaskRun {
    with(Executor::mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(priority: Priority, remote: &Arc<Remote>) -> Arc<TaskHeader> {
        Arc::new(TaskHeader {
            index: 0,
            priority,
            scheduled: crate::sync::AtomicBool::new(true),
            remote: remote.clone(),
        })
    }

    /// A completion the kernel dropped is named in the core's last words,
    /// not left as a bare errno.
    #[test]
    fn a_dropped_completion_is_named_when_the_core_stops() {
        let text = enter_failure(&std::io::Error::from_raw_os_error(libc::EBADR));
        assert!(text.contains("dropped a completion"), "{text}");
        assert!(text.contains("cores.ring_depth"), "{text}");
    }

    #[test]
    fn shares_divide_polls_between_busy_queues() {
        let remote = Arc::new(Remote::new().unwrap());
        let mut queues = Queues::new(1000, 100);
        for _ in 0..1100 {
            queues.push(header(Priority::Latency, &remote));
            queues.push(header(Priority::Background, &remote));
        }
        let mut background = 0;
        for _ in 0..1100 {
            if queues.pop().unwrap().priority == Priority::Background {
                background += 1;
            }
        }
        // 100 / (1000 + 100) of the polls, give or take one.
        assert!((99..=101).contains(&background), "{background}");
    }

    #[test]
    fn an_idle_queue_banks_no_credit() {
        let remote = Arc::new(Remote::new().unwrap());
        let mut queues = Queues::new(1, 1);
        for _ in 0..100 {
            queues.push(header(Priority::Latency, &remote));
            queues.pop();
        }
        for _ in 0..10 {
            queues.push(header(Priority::Latency, &remote));
            queues.push(header(Priority::Background, &remote));
        }
        let first: Vec<Priority> = (0..4).map(|_| queues.pop().unwrap().priority).collect();
        assert!(first.contains(&Priority::Latency), "{first:?}");
        assert!(first.contains(&Priority::Background), "{first:?}");
    }
}

/// Runs whole executors: a main task with what it spawns, and the stop.
#[cfg(test)]
mod run_tests {
    use super::*;
    use crate::reactor::RingConfig;

    /// A small ring (16 entries, 16 receive buffers of 1 KiB) and no spin.
    fn config() -> ExecutorConfig {
        ExecutorConfig {
            ring: RingConfig {
                entries: 16,
                cq_entries: 64,
                mode: TaskRun::Defer,
                recv_buffers: 16,
                recv_buffer_bytes: 1024,
                registered_files: 64,
                recv_buffers_per_conn_max: 8,
            },
            spin_before_park: Duration::ZERO,
            latency_shares: 1000,
            background_shares: 100,
        }
    }

    #[test]
    fn runs_a_future_and_its_spawned_tasks() {
        let executor = Executor::new(config()).unwrap();
        let out = executor.run(async {
            let a = spawn(async { 2 });
            let b = spawn(async {
                crate::sleep(Duration::from_millis(5)).await;
                3
            });
            a.await + b.await
        });
        assert_eq!(out, 5);
    }

    /// When the main task ends, every task is dropped and what their
    /// operations held in the kernel is let go well before the quiesce
    /// deadline: a receive armed, a send blocked on a peer that does not
    /// read, a listener's accept, and the core's wake read.
    #[test]
    fn a_stopping_core_waits_for_the_kernel_to_let_go_and_no_longer() {
        let executor = Executor::new(config()).unwrap();
        let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = peer.local_addr().unwrap();
        let (held, main_ended) = executor.run(async move {
            let listener =
                crate::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            spawn(async move {
                let _ = listener.accept().await;
            })
            .detach();
            let stream = Rc::new(crate::net::TcpStream::connect(address).await.unwrap());
            let reader = stream.clone();
            spawn(async move {
                let _ = reader.recv().await;
            })
            .detach();
            spawn(async move {
                loop {
                    let (sent, _) = stream.send(vec![1u8; 1 << 20]).await;
                    if sent.is_err() {
                        return;
                    }
                }
            })
            .detach();
            // Let the send fill both socket buffers and block, and the core
            // park once (arming its wake read).
            crate::sleep(Duration::from_millis(50)).await;
            (with_reactor(|reactor| reactor.in_flight()), Instant::now())
        });
        let stop_took = main_ended.elapsed();
        assert!(held >= 3, "accept, receive and send in flight: {held}");
        assert_eq!(
            executor.reactor.in_flight(),
            0,
            "the kernel still holds slots"
        );
        assert!(
            stop_took < QUIESCE_TIMEOUT / 4,
            "the core waited {stop_took:?} for the kernel to let go"
        );
        drop(peer);
    }
}
