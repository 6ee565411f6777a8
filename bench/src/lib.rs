//! Benchmarks live in `benches/` and the whole-system scripts beside this crate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Starts `routerd serve --config CONFIG` (no `ROUTERD_AUTH_SECRET` from the
/// environment: the config names the secret) and waits up to 30 s for the
/// line that logs its gateway and admin addresses. The bench binaries that
/// drive real nodes (memory per session, failover) start them this way.
pub fn spawn_node(routerd: &str, config: &Path) -> (Child, SocketAddr, SocketAddr) {
    let mut child = Command::new(routerd)
        .args(["serve", "--config"])
        .arg(config)
        .env_remove("ROUTERD_AUTH_SECRET")
        .stderr(Stdio::piped())
        .spawn()
        .expect("routerd starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addresses) = routerd::serving_addresses(&line) {
                let _ = tx.send(addresses);
            }
        }
    });
    let (gateway, admin) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("routerd logs its addresses");
    (child, gateway, admin)
}

/// `GET path` on a node's admin endpoint: the whole HTTP answer, head and
/// body, as text (what came, if the connection failed mid-read).
///
/// # Panics
/// If the endpoint cannot be reached or the request not written.
pub fn http_get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// Counts every allocation (alloc, alloc_zeroed, realloc) in the process.
/// A benchmark installs it as its `#[global_allocator]` and reads
/// [`allocations`] around what it measures.
pub struct CountingAlloc;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counter has no effect on
// memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is; `ptr` came from this allocator, i.e. System.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from this allocator, i.e. System.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations made so far in this process, when [`CountingAlloc`] is its
/// global allocator (0 otherwise).
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}
