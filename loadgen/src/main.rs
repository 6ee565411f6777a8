//! loadgen: drives routerd over docs/protocol.md (or Redis over RESP2, with the
//! same client) and measures it honestly.
//!
//! One pinned thread per `--threads`, each an io_uring loop over its share
//! of the connections (`engine.rs`), the protocol and the measurements in a
//! sans-IO connection (`conn.rs`, `conn_routerd.rs`, `conn_resp.rs`), the
//! moves of connections (redirects, reconnects, players) decided sans-IO
//! in `link.rs`. Exit status: 0 pass, 1 the run failed (protocol errors,
//! lost connections, an offered rate not kept, setup or node failure), 2
//! bad usage.

mod cli;
mod clock;
mod conn;
mod conn_resp;
mod conn_routerd;
mod custom;
mod engine;
mod hgrm;
mod hlog;
mod html;
mod keys;
mod link;
mod load;
mod moves;
mod progress;
mod report;
mod resp;
mod resume;
mod runner;
mod socket;
mod spawn;
mod stats;
#[cfg(test)]
mod testing;
mod workload;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use cli::Args;
use report::Summary;
use runner::{Context, Coordinator, Plan};
use stats::Stats;
use workload::Op;

/// Snapshots waiting for the progress display; a slow terminal drops
/// snapshots rather than slowing the generator.
const PROGRESS_QUEUE_MAX: usize = 64;

fn main() -> ExitCode {
    let mut args = Args::parse();
    if let Err(message) = args.validate().and_then(|()| args.load_custom()) {
        eprintln!("loadgen: {message}");
        return ExitCode::from(2);
    }
    let secret = args.effective_secret();
    let machine_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let generator_cpus = args
        .cpus
        .clone()
        .unwrap_or_else(|| default_cpus(args.threads, machine_cpus));

    let node = if args.spawn_node {
        match spawn_node(&mut args, &secret, &generator_cpus, machine_cpus) {
            Ok(node) => Some(node),
            Err(message) => {
                eprintln!("loadgen: --spawn-node: {message}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };

    let (stats, mut failures, warnings) = execute(&args, &secret, &generator_cpus);
    if let Some(node) = node {
        if let Err(message) = node.stop() {
            failures.push(format!("node stop: {message}"));
        }
    }
    let summary = Summary::new(&args, &stats, failures, warnings);
    print!("{}", summary.table());
    if let Err(message) = write_report_files(&args, &stats, &summary) {
        eprintln!("loadgen: {message}");
        return ExitCode::FAILURE;
    }
    if summary.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Starts the routerd node `--spawn-node` asks for and points the run at
/// its client address.
fn spawn_node(
    args: &mut Args,
    secret: &str,
    generator_cpus: &[usize],
    machine_cpus: usize,
) -> Result<spawn::Node, String> {
    let cpus = spawn::node_cpus(args, generator_cpus, machine_cpus);
    let node = spawn::Node::start(args, secret, &cpus)?;
    eprintln!(
        "loadgen: routerd node up on {} (admin {}), CPUs {cpus:?}",
        node.client_addr, node.admin_addr
    );
    args.addrs = vec![node.client_addr];
    Ok(node)
}

/// Writes the files the flags ask for (`--json`, `--html`, `--ledger`,
/// `--hgrm`), in that order, stopping at the first that cannot be written.
fn write_report_files(args: &Args, stats: &Stats, summary: &Summary) -> Result<(), String> {
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(summary).unwrap_or_default();
        write(path, text + "\n")?;
    }
    if let Some(path) = &args.html {
        // Drawn from the JSON value, so the page and `--json` agree.
        let value = serde_json::to_value(summary).unwrap_or_default();
        write(path, html::report(&value))?;
    }
    if let (Some(path), Some(ledger)) = (&args.ledger, &stats.ledger) {
        write(path, ledger_text(ledger))?;
    }
    if let Some(path) = &args.hgrm {
        write_hgrm(path, stats, args)?;
    }
    Ok(())
}

/// Writes every answer's latency distribution to `path`, the interval log
/// of its seconds beside it (`run.hlog`), and, when more than one kind of
/// request was measured, each kind's distribution (`run.get.hgrm`,
/// `run.incr.hgrm`, ...).
fn write_hgrm(path: &std::path::Path, stats: &Stats, args: &Args) -> Result<(), String> {
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
    };
    write(path, hgrm::hgrm(&stats.latency_ns()))?;
    let hlog = hlog::hlog(stats.series(), stats.series_start_wall())?;
    let hlog_path = hlog::hlog_path(path);
    std::fs::write(&hlog_path, hlog).map_err(|e| format!("write {}: {e}", hlog_path.display()))?;
    let measured: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| stats.ops[op.index()].sent > 0)
        .collect();
    if measured.len() > 1 {
        for op in measured {
            let text = hgrm::hgrm(&stats.ops[op.index()].latency_ns);
            write(&hgrm::op_path(path, &args.op_name(op)), text)?;
        }
    }
    Ok(())
}

/// The last `threads` CPUs: a node started first usually sits on CPU 0.
fn default_cpus(threads: usize, machine_cpus: usize) -> Vec<usize> {
    (0..threads)
        .map(|t| (machine_cpus + machine_cpus * threads - threads + t) % machine_cpus)
        .collect()
}

/// The `--ledger` file: a header line, then `player acked max_counter
/// uncertain` per player (`-` when no answer showed a counter).
fn ledger_text(ledger: &std::collections::BTreeMap<u64, stats::PlayerLedger>) -> String {
    let mut text = String::from("# player acked max_counter uncertain\n");
    for (player, entry) in ledger {
        let max = entry
            .max_counter
            .map_or_else(|| "-".to_string(), |counter| counter.to_string());
        text.push_str(&format!(
            "{player} {} {max} {}\n",
            entry.acked, entry.uncertain
        ));
    }
    text
}

/// Runs every generator thread; returns the merged stats, the setup or
/// runtime failures, and the warnings about connections that could not go
/// on.
fn execute(args: &Args, secret: &str, cpus: &[usize]) -> (Stats, Vec<String>, Vec<String>) {
    let coordinator = Arc::new(Coordinator::default());
    let display = if args.progress {
        Some(progress::Display::Table)
    } else {
        (!args.quiet && std::io::stderr().is_terminal()).then_some(progress::Display::Line)
    };
    let (progress_tx, progress_rx) = mpsc::sync_channel(PROGRESS_QUEUE_MAX);
    let progress_tx = display.is_some().then_some(progress_tx);
    let handles = spawn_generators(args, secret, cpus, &coordinator, progress_tx);
    start_when_ready(args, &coordinator, &handles);
    if let Some(display) = display {
        progress::display(progress_rx, args.threads, display);
    }
    join_generators(handles)
}

/// Starts one generator thread per `--threads`, each with its share of the
/// connections; a thread that cannot start marks the run failed.
fn spawn_generators(
    args: &Args,
    secret: &str,
    cpus: &[usize],
    coordinator: &Arc<Coordinator>,
    progress_tx: Option<mpsc::SyncSender<runner::Snapshot>>,
) -> Vec<std::thread::JoinHandle<runner::Outcome>> {
    let args_shared = Arc::new(args.clone());
    let secret = Arc::new(secret.to_string());
    let mut handles = Vec::with_capacity(args.threads);
    let mut first_conn = 0;
    for thread_index in 0..args.threads {
        // Spread the remainder over the first threads.
        let conn_count = args.connections / args.threads
            + usize::from(thread_index < args.connections % args.threads);
        let plan = Plan {
            thread_index,
            cpu: cpus.get(thread_index).copied(),
            first_conn,
            conn_count,
        };
        first_conn += conn_count;
        let ctx = Context {
            args: Arc::clone(&args_shared),
            secret: Arc::clone(&secret),
            coordinator: Arc::clone(coordinator),
            progress: progress_tx.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("loadgen-{thread_index}"))
            .spawn(move || runner::run_thread(plan, ctx));
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                coordinator.failed.store(true, Ordering::SeqCst);
                eprintln!("loadgen: cannot start thread: {e}");
            }
        }
    }
    // Dropping the last sender here lets the display end when the threads do.
    drop(progress_tx);
    handles
}

/// Start every thread at once, after all are connected and logged in.
fn start_when_ready(
    args: &Args,
    coordinator: &Coordinator,
    handles: &[std::thread::JoinHandle<runner::Outcome>],
) {
    while coordinator.ready.load(Ordering::SeqCst) < handles.len()
        && !coordinator.failed.load(Ordering::SeqCst)
        && !handles.iter().all(|h| h.is_finished())
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    if !coordinator.failed.load(Ordering::SeqCst) {
        eprintln!(
            "loadgen: {} connections ready; warm-up {:?}, measuring {:?}",
            args.connections, args.warmup, args.duration
        );
        coordinator
            .start_ns
            .store(clock::now_ns() + 1_000_000, Ordering::SeqCst);
    }
}

/// Waits for every generator thread and merges what each measured.
fn join_generators(
    handles: Vec<std::thread::JoinHandle<runner::Outcome>>,
) -> (Stats, Vec<String>, Vec<String>) {
    let mut stats = Stats::default();
    let mut failures = Vec::new();
    let mut warnings = Vec::new();
    for handle in handles {
        match handle.join() {
            Ok(outcome) => {
                stats.merge(&outcome.stats);
                failures.extend(outcome.error);
                warnings.extend(outcome.warnings);
            }
            Err(_) => failures.push("a generator thread panicked".to_string()),
        }
    }
    (stats, failures, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mixed run writes the total and one file per kind of request, each
    /// holding exactly that kind's answers.
    #[test]
    fn hgrm_files_per_op() {
        let dir = std::env::temp_dir().join(format!(
            "loadgen-hgrm-{}-{}",
            std::process::id(),
            clock::now_ns()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut stats = Stats::default();
        for (op, count) in [(Op::Get, 30u64), (Op::Incr, 7)] {
            for i in 0..count {
                stats.record_sent(op, 0);
                stats.record_response(op, 0, 1_000 * (i + 1));
            }
        }
        let path = dir.join("run.hgrm");
        let args = Args::parse_from(["loadgen"]);
        write_hgrm(&path, &stats, &args).expect("written");
        let total_count = |name: &str| -> u64 {
            let text = std::fs::read_to_string(dir.join(name)).expect("file");
            let line = text
                .lines()
                .find(|l| l.contains("Total count"))
                .expect("footer");
            line.trim_end_matches(']')
                .rsplit('=')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .expect("a count")
        };
        assert_eq!(total_count("run.hgrm"), 37);
        assert_eq!(total_count("run.get.hgrm"), 30);
        assert_eq!(total_count("run.incr.hgrm"), 7);
        assert!(
            !dir.join("run.ping.hgrm").exists(),
            "no file for an op never sent"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn default_cpus_are_the_last_ones() {
        assert_eq!(default_cpus(1, 2), vec![1]);
        assert_eq!(default_cpus(2, 2), vec![0, 1]);
        assert_eq!(default_cpus(2, 8), vec![6, 7]);
        assert_eq!(default_cpus(3, 2), vec![1, 0, 1]);
    }
}
