//! The `routerd` command: serve a node, check a config, mint a token, talk
//! to a node as a client, and operate a cluster (status, transfer, drain, rebalance).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use routerd::config::Config;
use routerd::NodeBuilder;

/// Every request allocates its body and its answer, so the allocator is on
/// the path of every request: glibc's malloc and free took 3.5% of a core
/// at pipeline 16, and with mimalloc's per-thread free lists the routed
/// path ran 1.04x as fast (bench/build_vs_build.sh, median of 7 rounds).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc advises transparent huge pages for its arenas, so on a kernel
/// in THP `madvise` mode the heap becomes resident 2 MiB at a time: an
/// idle connection's few hundred bytes of session state, spread over the
/// arena, cost 4.2 to 5.7 KB of resident memory per connection instead of
/// 3.4 KB (`bench/memory_per_session.sh`, 10,000 connections). Turned off
/// for the whole process before anything else runs (a flag of the process,
/// checked at every page fault, so mappings made before it are covered
/// too). An error (a kernel without the flag) leaves the default.
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only this
    // process's memory policy.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// How often the memory-upkeep thread lets mimalloc purge: freed memory
/// goes back to the kernel within its purge delay (1000 ms by default)
/// and this.
const PURGE_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// mimalloc hands pages freed more than its `purge_delay` ago back to the
/// kernel, but only from inside a later allocator call, which an idle node
/// does not make: after sessions came and went, its resident memory kept
/// what they had freed, 1.44 to 1.87 KB per logged-in player over three
/// runs of `bench/memory_per_session.sh` (and 1.71 to 1.97 KB per idle
/// connection). A thread of its own asks four times a second (`mi_collect`
/// without force: only the purges that are due), so the cores' request
/// path does no more than before; a purge delay of 0 instead
/// (`MIMALLOC_PURGE_DELAY=0`) held the figures as still, but purged on the
/// request path.
///
/// What it reaches: memory a core's heap has handed back to the shared
/// arenas (pages whose blocks were all freed, and everything of a thread
/// that ended), whose purge is due; the arenas are the whole process's, so
/// this covers every core. What it cannot reach: pages a core's heap still
/// owns (partly used, or free but kept for reuse), which only that core's
/// own allocator calls collect. Its purges unmap pages the pinned cores
/// touched, so each sends those cores a TLB-flush interrupt: at most one
/// purge pass per purge delay.
///
/// The thread initialises its own mimalloc heap first: in mimalloc v3 (the
/// one `libmimalloc-sys` builds) `mi_collect` from a thread whose heap was
/// never initialised returns at once, purging nothing. Today the standard
/// library's thread start allocates on the new thread, which initialises
/// it, but nothing promises that.
fn purge_freed_memory_when_due() {
    let upkeep = std::thread::Builder::new()
        .name("memory-upkeep".to_string())
        .spawn(|| {
            // SAFETY: `mi_thread_init` takes nothing and sets up the
            // calling thread's heap (a no-op if it already has one).
            unsafe { libmimalloc_sys::mi_thread_init() };
            loop {
                std::thread::sleep(PURGE_CHECK_INTERVAL);
                // SAFETY: `mi_collect` takes no pointer; it collects the
                // calling thread's own heap and purges what is due in the
                // shared arenas under mimalloc's own synchronisation.
                unsafe { libmimalloc_sys::mi_collect(false) };
            }
        });
    if let Err(error) = upkeep {
        eprintln!("routerd: no memory-upkeep thread ({error}): freed memory is purged later");
    }
}

#[derive(Parser)]
#[command(
    name = "routerd",
    version = routerd::VERSION,
    about = "A thread-per-core stateful-object router and gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node until SIGINT, SIGTERM or SIGHUP (each stops it cleanly:
    /// objects saved, the cluster left, exit 0).
    Serve {
        /// TOML config file; without it the defaults of tuning/default.toml apply.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the effective config (defaults filled in), or fail naming what
    /// is wrong: it refuses every config `serve` refuses before binding.
    CheckConfig {
        /// TOML config file to check; without it the defaults (and the
        /// ROUTERD_* environment) are checked and printed.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print a login token for a player, signed with the configured secret.
    Token {
        /// The player the token logs in as (not 0).
        #[arg(long)]
        player_id: u64,
        /// Lifetime of the token in seconds.
        #[arg(long, default_value_t = 86_400)]
        ttl_secs: u64,
        /// Config file whose `auth.secret` signs the token (ROUTERD_AUTH_SECRET
        /// wins over it); without it, the development secret a node without
        /// a config uses.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Connect to a gateway and send commands read from stdin, one a line
    /// (`help` lists them); print every answer and push as it arrives.
    Client(routerd::cli::client::ClientArgs),
    /// The cluster as a node sees it (`routerd cluster status --admin ADDR`).
    #[command(subcommand)]
    Cluster(routerd::cli::ctl::ClusterCommand),
    /// Move one object to another node, through any node's admin endpoint.
    /// Exit 0 moved (or there already), 1 admin unreachable, 2 refused,
    /// 3 unavailable or timed out.
    Transfer(routerd::cli::ctl::TransferArgs),
    /// Drain a node: its objects move to the others, its clients are told
    /// where to reconnect, then it leaves the cluster and exits; follows it
    /// to the end. Exit 0 drained, 1 admin unreachable, 2 refused,
    /// 3 not finished in time, or the node stopped with objects it did not
    /// move (no other node took them, or cluster.drain_timeout_ms passed).
    Drain(routerd::cli::ctl::DrainArgs),
    /// Move objects so that every up node holds about its rendezvous
    /// share, through any node's admin endpoint; follows every node's
    /// rebalance to its end and prints what moved. Exit 0 done, 1 admin
    /// unreachable, 2 refused, 3 objects not moved or not finished in time.
    Rebalance(routerd::cli::rebalance::RebalanceArgs),
    /// The cluster's scripted object types (`routerd scripts reload --admin
    /// ADDR`: every node loads `[scripts] dir` again). Exit 0 every file
    /// taken, 1 admin unreachable, 2 a file refused (kept at its version).
    #[command(subcommand)]
    Scripts(routerd::cli::scripts::ScriptsCommand),
}

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Serve { config } => serve(config),
        Command::CheckConfig { config } => check_config(config),
        Command::Token {
            player_id,
            ttl_secs,
            config,
        } => token(player_id, ttl_secs, config),
        Command::Client(args) => routerd::cli::client::run(&args).map_err(|e| e.to_string()),
        Command::Cluster(command) => return ctl_exit(routerd::cli::ctl::cluster(&command)),
        Command::Transfer(args) => return ctl_exit(routerd::cli::ctl::transfer(&args)),
        Command::Drain(args) => return ctl_exit(routerd::cli::ctl::drain(&args)),
        Command::Rebalance(args) => return ctl_exit(routerd::cli::rebalance::run(&args)),
        Command::Scripts(command) => return ctl_exit(routerd::cli::scripts::run(&command)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("routerd: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The exit of a cluster operation: its own codes (see `routerd::cli::ctl`).
fn ctl_exit(result: Result<(), routerd::cli::ctl::Failed>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failed) => {
            eprintln!("routerd: {}", failed.message);
            ExitCode::from(failed.exit as u8)
        }
    }
}

fn serve(config: Option<PathBuf>) -> Result<(), String> {
    let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
    purge_freed_memory_when_due();
    NodeBuilder::new(config).serve().map_err(|e| e.to_string())
}

/// `serve`'s own checks (`NodeBuilder::check`), without binding anything.
/// The log filter of `ROUTERD_LOG` (`info` without it). One that does not
/// parse is said on stderr, naming the variable and why, before the node
/// logs at `info`: an operator who asked for `debug` with a typo would
/// otherwise see only fewer lines than asked for.
fn init_logging() {
    let filter = std::env::var("ROUTERD_LOG").unwrap_or_else(|_| "info".to_string());
    if let Err(error) = routerd::init_logging(&filter) {
        eprintln!(
            "routerd: warning: ROUTERD_LOG={filter:?} is not a log filter ({error}); logging at \
             info instead"
        );
    }
}

fn check_config(config: Option<PathBuf>) -> Result<(), String> {
    let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
    let effective = config.to_toml();
    NodeBuilder::new(config)
        .check()
        .map_err(|e| e.to_string())?;
    print!("{effective}");
    Ok(())
}

fn token(player_id: u64, ttl_secs: u64, config: Option<PathBuf>) -> Result<(), String> {
    let config = Config::load(config.as_deref()).map_err(|e| e.to_string())?;
    if player_id == 0 {
        return Err("player ids are never 0".to_string());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let expiry = now.checked_add(ttl_secs).ok_or("--ttl-secs is too large")?;
    println!(
        "{}",
        wire::token::mint(config.auth.secret.as_bytes(), player_id, expiry)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// This process's resident memory, read without entering the allocator
    /// (an allocator call may purge by itself, which would hide whether the
    /// upkeep thread did).
    fn resident_bytes() -> u64 {
        let mut buf = [0u8; 128];
        // SAFETY: opens a NUL-terminated path, reads into a stack buffer
        // of the length given, and closes the descriptor it opened.
        let read = unsafe {
            let fd = libc::open(c"/proc/self/statm".as_ptr(), libc::O_RDONLY);
            assert!(fd >= 0, "/proc/self/statm");
            let read = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            read
        };
        let text = &buf[..usize::try_from(read).expect("read statm")];
        let pages = text
            .split(|&byte| byte == b' ')
            .nth(1)
            .and_then(|field| std::str::from_utf8(field).ok()?.parse::<u64>().ok())
            .expect("statm's resident field");
        // SAFETY: sysconf takes and returns plain integers.
        pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
    }

    /// Memory a thread freed goes back to the kernel once its purge delay
    /// has passed, with nothing but the upkeep thread calling the
    /// allocator: the node idles, the cores allocate nothing.
    #[test]
    fn the_upkeep_thread_purges_what_other_threads_freed() {
        const FREED: u64 = 64 << 20;
        const BLOCK: usize = 64 << 10;
        std::thread::spawn(|| {
            let blocks: Vec<Vec<u8>> = (0..FREED as usize / BLOCK)
                .map(|_| vec![1u8; BLOCK])
                .collect();
            drop(blocks);
        })
        .join()
        .unwrap();
        let before = resident_bytes();
        purge_freed_memory_when_due();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = resident_bytes();
            if before.saturating_sub(now) > FREED / 2 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "resident {before} bytes before, {now} after 5 s of upkeep"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
