//! What the integration tests share: a runtime of one core running a test
//! body, and waiting for what that body reports.

#![allow(dead_code)] // Each test file uses its own part of this.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shards::{CorePlacement, Runtime, RuntimeConfig, ShutdownHandle};

/// One unpinned core with a small receive buffer ring (8 buffers of 64
/// bytes), so tests reuse and exhaust buffers quickly.
pub fn one_core() -> RuntimeConfig {
    let mut config = RuntimeConfig::new(CorePlacement::Unpinned(1));
    config.recv_buffers = 8;
    config.recv_buffer_bytes = 64;
    config.shutdown_deadline = Duration::from_secs(2);
    config
}

/// Runs `main` on one core until it returns; gives back the runtime's
/// shutdown handle for the caller's side of the test.
pub fn on_a_core<F, Fut>(config: RuntimeConfig, main: F) -> (Runtime, ShutdownHandle)
where
    F: Fn() -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let shutdown = ShutdownHandle::new();
    let runtime = Runtime::start::<(), _, _>(&config, shutdown.clone(), move |core| {
        let main = main.clone();
        async move {
            core.ready();
            futures_lite::future::or(main(), core.shutdown().wait()).await;
        }
    })
    .expect("runtime starts");
    runtime
        .wait_ready(Duration::from_secs(10))
        .expect("core ready");
    (runtime, shutdown)
}

/// Accepts one connection and reads it to its end (5 s at most per read).
pub fn accept_and_read_all(listener: &std::net::TcpListener) -> Vec<u8> {
    let (mut accepted, _) = listener.accept().unwrap();
    accepted
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    accepted.read_to_end(&mut got).unwrap();
    got
}

/// What `slot` holds once something put it there (5 s at most).
pub fn wait_for<T: Clone>(slot: &Mutex<Option<T>>) -> T {
    wait_for_within(slot, Duration::from_secs(5))
}

pub fn wait_for_within<T: Clone>(slot: &Mutex<Option<T>>, patience: Duration) -> T {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(value) = slot.lock().unwrap().clone() {
            return value;
        }
        assert!(Instant::now() < deadline, "nothing arrived in time");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A blocking client connection to `address` whose reads give up after
/// `read_timeout` (a stalled server fails the test instead of hanging it).
pub fn connect(address: SocketAddr, read_timeout: Duration) -> std::net::TcpStream {
    let client = std::net::TcpStream::connect(address).expect("connect");
    client.set_read_timeout(Some(read_timeout)).unwrap();
    client.set_nodelay(true).unwrap();
    client
}

/// CPU time this process has used, user and system.
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let micros = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// Raises this process's soft open-file limit to its hard one; returns the
/// limit now in force.
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit");
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: setrlimit reads the struct; a soft limit up to the hard one
    // needs no privilege.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(set, 0, "setrlimit");
    limit.rlim_cur
}
