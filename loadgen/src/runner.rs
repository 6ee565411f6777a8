//! One generator thread's life: pin, connect at a bounded rate, log in (and
//! join rooms), wait for every thread, run warm-up and the measured phase
//! (closed or open loop), drain, count what went unanswered.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::cli::{Args, Workload};
use crate::clock::now_ns;
use crate::conn::{Conn, Event, Phase, Window};
use crate::engine::Engine;
use crate::stats::Stats;
use crate::workload::{room_role, Chooser, Generator, Pacer};

/// Open-loop requests that may wait for one connection's pipeline; past it
/// the schedule is not being kept and the run fails.
pub const OPEN_LOOP_QUEUE_MAX: usize = 4096;

/// Longest a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest login and room joins may take, after the connections are open.
const SETUP_TIMEOUT_NS: u64 = 30_000_000_000;

/// The longest a closed-loop thread sleeps in the kernel between looks at
/// the clock (progress, end of phase).
const IDLE_WAIT_NS: u64 = 20_000_000;

/// How the threads agree on one start time.
#[derive(Default)]
pub struct Coordinator {
    pub ready: AtomicUsize,
    pub failed: AtomicBool,
    /// 0 until the main thread sets the common start.
    pub start_ns: AtomicU64,
}

/// The share of one thread.
#[derive(Clone, Debug)]
pub struct Plan {
    pub thread_index: usize,
    pub cpu: Option<usize>,
    pub first_conn: usize,
    pub conn_count: usize,
}

/// A cumulative copy of a thread's stats, sent once per second.
pub struct Snapshot {
    pub thread_index: usize,
    pub stats: Stats,
}

pub struct Outcome {
    pub stats: Stats,
    /// The run could not be measured (connect, login, ring, socket).
    pub error: Option<String>,
}

pub struct Context {
    pub args: Arc<Args>,
    pub secret: Arc<String>,
    pub coordinator: Arc<Coordinator>,
    pub progress: Option<SyncSender<Snapshot>>,
}

pub fn run_thread(plan: Plan, ctx: Context) -> Outcome {
    let mut stats = Stats::default();
    let error = match run(&plan, &ctx, &mut stats) {
        Ok(()) => None,
        Err(message) => {
            ctx.coordinator.failed.store(true, Ordering::SeqCst);
            Some(format!("thread {}: {message}", plan.thread_index))
        }
    };
    Outcome { stats, error }
}

fn run(plan: &Plan, ctx: &Context, stats: &mut Stats) -> Result<(), String> {
    if let Some(cpu) = plan.cpu {
        pin_to_cpu(cpu)?;
    }
    let args = &ctx.args;
    let mut engine = Engine::new(plan.conn_count).map_err(|e| format!("io_uring setup: {e}"))?;
    connect_all(plan, ctx, &mut engine)?;
    setup_sessions(args, &ctx.secret, &mut engine)?;

    ctx.coordinator.ready.fetch_add(1, Ordering::SeqCst);
    let start_ns = loop {
        if ctx.coordinator.failed.load(Ordering::SeqCst) {
            return Err("another thread failed during setup".to_string());
        }
        let start = ctx.coordinator.start_ns.load(Ordering::SeqCst);
        if start != 0 {
            break start;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let measure_start_ns = start_ns + args.warmup.as_nanos() as u64;
    let window = Window {
        start_ns: measure_start_ns,
        end_ns: measure_start_ns + args.duration.as_nanos() as u64,
    };
    let mut phase = RunPhase::new(plan, args, &engine, start_ns, window);
    phase.load(&mut engine, ctx, stats)?;
    phase.drain(&mut engine, args, stats)?;
    for slot in &mut engine.slots {
        slot.conn.abandon(stats);
    }
    engine.shutdown(now_ns, now_ns() + 1_000_000_000);
    Ok(())
}

fn pin_to_cpu(cpu: usize) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it and
    // sched_setaffinity(0, ...) only reads it for the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!(
            "cannot pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn connect_all(plan: &Plan, ctx: &Context, engine: &mut Engine) -> Result<(), String> {
    let args = &ctx.args;
    let rate_per_thread = (args.connect_rate as f64 / args.threads as f64).max(1.0);
    let t0 = now_ns();
    for i in 0..plan.conn_count {
        let due = t0 + (i as f64 * 1e9 / rate_per_thread) as u64;
        let now = now_ns();
        if due > now {
            std::thread::sleep(Duration::from_nanos(due - now));
        }
        let global = plan.first_conn + i;
        let (room_id, _) = room_role(global, args.room_size, args.say_fraction);
        let stream = TcpStream::connect_timeout(&args.addr, CONNECT_TIMEOUT)
            .map_err(|e| format!("connect {} (connection {global}): {e}", args.addr))?;
        let conn = Conn::new(
            args.player_base + global as u64,
            room_id,
            args.pipeline,
            args.max_body,
        );
        engine
            .add(conn, stream)
            .map_err(|e| format!("socket setup: {e}"))?;
    }
    Ok(())
}

/// Logs every connection in (and joins its room), or fails the run.
fn setup_sessions(args: &Args, secret: &str, engine: &mut Engine) -> Result<(), String> {
    if !args.workload.needs_login() {
        for slot in &mut engine.slots {
            slot.conn.skip_setup();
        }
        return Ok(());
    }
    let now_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Valid through setup, warm-up, the run and an hour of slack.
    let expiry_unix_s = now_unix_s + 3600 + args.warmup.as_secs() + args.duration.as_secs();
    for i in 0..engine.slots.len() {
        let player_id = engine.slots[i].conn.player_id();
        let token = wire::token::mint(secret.as_bytes(), player_id, expiry_unix_s);
        engine.slots[i].conn.start_login(&token, now_ns());
        engine.queue_flush(i);
    }
    let deadline = now_ns() + SETUP_TIMEOUT_NS;
    let mut scratch = Stats::default();
    loop {
        engine
            .pump(IDLE_WAIT_NS, now_ns, Window::NONE, &mut scratch)
            .map_err(|e| format!("io_uring: {e}"))?;
        for (index, event) in std::mem::take(&mut engine.events) {
            match event {
                Event::LoggedIn if args.workload == Workload::Room => {
                    engine.slots[index].conn.start_join(now_ns());
                    engine.queue_flush(index);
                }
                Event::SetupFailed(reason) => return Err(reason),
                Event::Kicked => return Err("a session was kicked during setup".to_string()),
                Event::LoggedIn | Event::Joined => {}
            }
        }
        engine.take_touched(&mut Vec::new());
        if engine.slots.iter().any(|s| s.dead) {
            return Err("a connection closed during setup".to_string());
        }
        if scratch.protocol_errors > 0 {
            return Err("protocol error during setup".to_string());
        }
        if engine.slots.iter().all(|s| s.conn.phase() == Phase::Ready) {
            return Ok(());
        }
        if now_ns() > deadline {
            return Err("login/join did not finish in 30 s".to_string());
        }
    }
}

/// The load phases of one thread.
struct RunPhase {
    thread_index: usize,
    window: Window,
    generator: Generator,
    rng: SmallRng,
    /// Slots that send (all, or the room's sayers).
    senders: Vec<usize>,
    /// Open loop only.
    pacer: Option<Pacer>,
    /// `--batch`: a connection sends only when all its answers are in.
    batch: bool,
    chooser: Chooser,
    waiting: Vec<std::collections::VecDeque<u64>>,
    body: Vec<u8>,
    /// Reused list of the slots to look at this loop.
    touched: Vec<usize>,
}

impl RunPhase {
    fn new(plan: &Plan, args: &Args, engine: &Engine, start_ns: u64, window: Window) -> RunPhase {
        let senders: Vec<usize> = (0..engine.slots.len())
            .filter(|&i| {
                args.workload != Workload::Room
                    || room_role(plan.first_conn + i, args.room_size, args.say_fraction).1
            })
            .collect();
        let pacer = args
            .rate
            .map(|rate| Pacer::new(start_ns, rate as f64 / args.threads as f64));
        RunPhase {
            thread_index: plan.thread_index,
            window,
            generator: Generator::new(args.workload, args.mix, args.body_bytes),
            rng: SmallRng::seed_from_u64(0x5eed ^ plan.thread_index as u64),
            chooser: Chooser::new(args.dist, senders.len().max(1), args.zipf_s),
            senders,
            pacer,
            batch: args.batch,
            waiting: vec![std::collections::VecDeque::new(); engine.slots.len()],
            body: Vec::with_capacity(args.body_bytes + 32),
            touched: Vec::with_capacity(engine.slots.len()),
        }
    }

    /// Warm-up and the measured phase.
    fn load(
        &mut self,
        engine: &mut Engine,
        ctx: &Context,
        stats: &mut Stats,
    ) -> Result<(), String> {
        if self.senders.is_empty() && self.pacer.is_some() {
            return Err("open loop with no sending connection on this thread".to_string());
        }
        for &index in &self.senders {
            engine.touch(index);
        }
        let mut next_progress_ns = now_ns() + 1_000_000_000;
        loop {
            let now = now_ns();
            if now >= self.window.end_ns {
                return Ok(());
            }
            if self.pacer.is_some() {
                self.schedule(engine, now, stats);
            }
            let mut touched = std::mem::take(&mut self.touched);
            engine.take_touched(&mut touched);
            for &index in &touched {
                self.top_up(engine, index, now, stats);
            }
            self.touched = touched;
            // Kicks are already counted in `stats`; nothing else happens
            // after setup.
            engine.events.clear();
            if now >= next_progress_ns {
                next_progress_ns += 1_000_000_000;
                if let Some(progress) = &ctx.progress {
                    let snapshot = Snapshot {
                        thread_index: self.thread_index,
                        stats: stats.clone(),
                    };
                    // Never block the generator on the display.
                    let _ = progress.try_send(snapshot);
                }
            }
            let mut wait = IDLE_WAIT_NS.min(self.window.end_ns - now);
            if let Some(pacer) = &self.pacer {
                wait = wait.min(pacer.next_due_ns().saturating_sub(now));
            }
            engine
                .pump(wait, now_ns, self.window, stats)
                .map_err(|e| format!("io_uring: {e}"))?;
        }
    }

    /// Assigns every request the schedule made due to a connection.
    fn schedule(&mut self, engine: &mut Engine, now: u64, stats: &mut Stats) {
        let Some(pacer) = &mut self.pacer else { return };
        while let Some(due) = pacer.pop_due(now) {
            if due >= self.window.end_ns {
                break;
            }
            let index = self.senders[self.chooser.pick(&mut self.rng)];
            if self.waiting[index].len() >= OPEN_LOOP_QUEUE_MAX {
                if self.window.contains(due) {
                    stats.schedule_overflow += 1;
                }
                continue;
            }
            self.waiting[index].push_back(due);
            engine.touch(index);
        }
    }

    /// Sends what a connection may: up to the pipeline depth in closed
    /// loop, its waiting scheduled requests in open loop.
    fn top_up(&mut self, engine: &mut Engine, index: usize, now: u64, stats: &mut Stats) {
        let open_loop = self.pacer.is_some();
        let slot = &mut engine.slots[index];
        if slot.dead || (!open_loop && !self.senders.contains_sorted(index)) {
            return;
        }
        if self.batch && slot.conn.outstanding() > 0 {
            return;
        }
        let mut queued = false;
        while slot.conn.can_send() {
            let intended = if open_loop {
                match self.waiting[index].pop_front() {
                    Some(due) => due,
                    None => break,
                }
            } else {
                now
            };
            let room_id = slot.conn.room_id();
            let route = self
                .generator
                .next(&mut self.rng, room_id, intended, &mut self.body);
            let measured = self.window.contains(intended);
            if slot
                .conn
                .send(route, &self.body, intended, measured, stats)
                .is_err()
            {
                break;
            }
            queued = true;
        }
        if queued {
            engine.queue_flush(index);
        }
    }

    /// Waits for the answers still outstanding, at most `--drain`.
    fn drain(&mut self, engine: &mut Engine, args: &Args, stats: &mut Stats) -> Result<(), String> {
        let deadline = now_ns() + args.drain.as_nanos() as u64;
        engine.take_touched(&mut self.touched);
        loop {
            let pending = engine
                .slots
                .iter()
                .any(|s| !s.dead && s.conn.outstanding() > 0);
            let now = now_ns();
            if !pending || now >= deadline {
                return Ok(());
            }
            engine
                .pump(IDLE_WAIT_NS.min(deadline - now), now_ns, self.window, stats)
                .map_err(|e| format!("io_uring: {e}"))?;
            engine.take_touched(&mut self.touched);
            engine.events.clear();
        }
    }
}

trait SortedContains {
    fn contains_sorted(&self, value: usize) -> bool;
}

impl SortedContains for Vec<usize> {
    fn contains_sorted(&self, value: usize) -> bool {
        self.binary_search(&value).is_ok()
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
