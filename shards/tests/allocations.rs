//! The core's loop allocates nothing per request once warm: a request's
//! receive, its send and the turns between them reuse what earlier ones
//! made. Counted by a global allocator that counts the core thread's
//! allocations only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shards::net::TcpListener;

mod common;
use common::{on_a_core, one_core, wait_for};

/// Counts allocations made on threads that asked to be counted.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTED.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's promises, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's promises, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Round trips measured, after as many to warm up.
const ROUND_TRIPS: u64 = 500;

#[test]
fn an_echoed_request_allocates_nothing_on_the_core() {
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let published = published.clone();
        async move {
            COUNTED.with(|counted| counted.set(true));
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            let stream = listener.accept().await.expect("accept");
            // One buffer for every answer, handed back by each send.
            let mut answer = Vec::with_capacity(64);
            while let Ok(Some(buf)) = stream.recv().await {
                answer.clear();
                answer.extend_from_slice(&buf);
                drop(buf);
                let (sent, back) = stream.send(answer).await;
                answer = back;
                if sent.is_err() {
                    return;
                }
            }
        }
    });
    let mut client = common::connect(wait_for(&address), Duration::from_secs(5));
    let mut round_trip = || {
        let mut back = [0u8; 4];
        client.write_all(b"ping").unwrap();
        client.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ping");
    };
    for _ in 0..ROUND_TRIPS {
        round_trip();
    }
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..ROUND_TRIPS {
        round_trip();
    }
    let made = ALLOCATIONS.load(Ordering::SeqCst) - before;
    assert!(
        made < ROUND_TRIPS / 10,
        "{made} allocations on the core for {ROUND_TRIPS} echoed requests"
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
