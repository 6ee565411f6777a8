//! One generator thread's life: pin, connect at a bounded rate, log in (and
//! join rooms), wait for every thread, run warm-up and the measured phase
//! (`load.rs`), drain, count what went unanswered.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{Args, Workload};
use crate::clock::now_ns;
use crate::conn::{Conn, Event, Phase, Window};
use crate::engine::Engine;
use crate::load::RunPhase;
use crate::stats::{Progress, Stats};
use crate::workload::{room_role, PlayerRing};

/// Longest a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest login and room joins may take, after the connections are open.
const SETUP_TIMEOUT_NS: u64 = 30_000_000_000;

/// The longest a thread sleeps in the kernel between looks at the clock
/// (progress, end of phase, reconnect backoffs).
pub const IDLE_WAIT_NS: u64 = 20_000_000;

/// Warnings one thread reports at most (each names a connection that could
/// not go on); the counters hold the rest.
pub const WARNINGS_MAX: usize = 8;

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

/// A thread's figures for the progress line, sent once per second.
pub struct Snapshot {
    pub thread_index: usize,
    pub progress: Progress,
}

pub struct Outcome {
    pub stats: Stats,
    /// The run could not be measured (connect, login, ring, socket).
    pub error: Option<String>,
    /// Connections that could not go on during the run, in words (at most
    /// `WARNINGS_MAX`).
    pub warnings: Vec<String>,
}

pub struct Context {
    pub args: Arc<Args>,
    pub secret: Arc<String>,
    pub coordinator: Arc<Coordinator>,
    pub progress: Option<SyncSender<Snapshot>>,
}

pub fn run_thread(plan: Plan, ctx: Context) -> Outcome {
    let mut stats = Stats::default();
    if ctx.args.ledger.is_some() {
        stats.enable_ledger();
    }
    let mut warnings = Vec::new();
    let error = match run(&plan, &ctx, &mut stats, &mut warnings) {
        Ok(()) => None,
        Err(message) => {
            ctx.coordinator.failed.store(true, Ordering::SeqCst);
            Some(format!("thread {}: {message}", plan.thread_index))
        }
    };
    Outcome {
        stats,
        error,
        warnings,
    }
}

fn run(
    plan: &Plan,
    ctx: &Context,
    stats: &mut Stats,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    if let Some(cpu) = plan.cpu {
        pin_to_cpu(cpu)?;
    }
    let args = &ctx.args;
    let mut engine = Engine::new(plan.conn_count).map_err(|e| format!("io_uring setup: {e}"))?;
    engine.set_layers(args.layers()?);
    connect_all(plan, ctx, &mut engine)?;
    let token_expiry_unix_s = token_expiry(args);
    let redirected = setup_sessions(args, &ctx.secret, token_expiry_unix_s, &mut engine)?;
    // Followed from the first turn of the run (warm-up), like any other.
    stats.redirects += redirected.len() as u64;
    engine.events.extend(redirected);

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
    // Every thread starts at the common instant: a request sent before it
    // would fall before the warm-up (with --warmup 0, before the measured
    // phase) and be neither warm-up nor measured.
    let now = now_ns();
    if start_ns > now {
        std::thread::sleep(Duration::from_nanos(start_ns - now));
    }
    let measure_start_ns = start_ns + args.warmup.as_nanos() as u64;
    let window = Window {
        start_ns: measure_start_ns,
        end_ns: measure_start_ns + args.duration.as_nanos() as u64,
    };
    stats.start_series(window.start_ns);
    let mut phase = RunPhase::new(plan, ctx, &engine, start_ns, window, token_expiry_unix_s);
    let loaded = phase.load(&mut engine, ctx, stats);
    let drained = loaded.and_then(|()| phase.drain(&mut engine, args, stats));
    warnings.extend(phase.take_warnings());
    drained?;
    for slot in &mut engine.slots {
        slot.conn.abandon(stats);
    }
    engine.shutdown(now_ns, now_ns() + 1_000_000_000);
    Ok(())
}

/// Login tokens stay valid through setup, warm-up, the run and an hour of
/// slack, so a login after a reconnect uses the same expiry.
fn token_expiry(args: &Args) -> u64 {
    let now_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    now_unix_s + 3600 + args.warmup.as_secs() + args.duration.as_secs()
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
        let addr = args.addrs[global % args.addrs.len()];
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| format!("connect {addr} (connection {global}): {e}"))?;
        let player = PlayerRing::new(global, args.connections, args.player_count()).current();
        let conn = Conn::new(
            args.proto,
            args.player_base + player,
            room_id,
            args.pipeline,
            args.max_body,
        )
        .with_custom(args.custom.clone())
        .with_keys(args.keys)
        .with_resume(args.resume);
        engine
            .add(conn, stream)
            .map_err(|e| format!("socket setup: {e}"))?;
    }
    Ok(())
}

/// Logs every connection in (and joins its room), or fails the run.
/// Returns the `sys.redirect`s sessions got meanwhile (a node that places
/// sessions on their player's node sends one right after the login
/// answer): such a connection is set up, and moves once the run starts.
fn setup_sessions(
    args: &Args,
    secret: &str,
    token_expiry_unix_s: u64,
    engine: &mut Engine,
) -> Result<Vec<(usize, Event)>, String> {
    let mut redirected = Vec::new();
    if !args.needs_login() {
        for slot in &mut engine.slots {
            slot.conn.skip_setup();
        }
        return Ok(redirected);
    }
    for i in 0..engine.slots.len() {
        let player_id = engine.slots[i].conn.player_id();
        let token = wire::token::mint(secret.as_bytes(), player_id, token_expiry_unix_s);
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
                Event::SetupFailed { reason, .. } => return Err(reason),
                Event::Kicked => return Err("a session was kicked during setup".to_string()),
                Event::Redirect(redirect) => {
                    redirected.push((index, Event::Redirect(redirect)));
                }
                // Setup logs in; nothing resumes before the run.
                Event::LoggedIn | Event::Joined | Event::Resumed | Event::ResumeRefused => {}
            }
        }
        engine.take_touched(&mut Vec::new());
        if engine.slots.iter().any(|s| !s.is_open()) || !engine.link_events.is_empty() {
            return Err("a connection closed during setup".to_string());
        }
        if scratch.protocol_errors > 0 {
            return Err("protocol error during setup".to_string());
        }
        // A redirected connection (`Draining`) waits for the run to move.
        if engine
            .slots
            .iter()
            .all(|s| matches!(s.conn.phase(), Phase::Ready | Phase::Draining))
        {
            return Ok(redirected);
        }
        if now_ns() > deadline {
            return Err("login/join did not finish in 30 s".to_string());
        }
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
