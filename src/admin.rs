//! The admin HTTP endpoint: `/healthz` and `/metrics`.
//!
//! It runs on a plain thread of its own, not on a core: it is cold, it must
//! answer even when every core is saturated, and a scrape must never add
//! latency to client traffic. It speaks just enough HTTP/1.1 for probes and
//! Prometheus: one request per connection, bounded in size and time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::metrics::NodeMetrics;

/// Largest request head the endpoint reads before giving up.
const REQUEST_HEAD_MAX: usize = 8 * 1024;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop checks for shutdown.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// State the endpoint reports.
#[derive(Clone)]
pub struct AdminState {
    pub ready: Arc<AtomicBool>,
    pub metrics: Arc<NodeMetrics>,
}

/// A running admin endpoint.
pub struct Admin {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Admin {
    /// Binds `listen` now (so a bad address fails start-up) and serves on a
    /// thread of its own.
    pub fn start(listen: SocketAddr, state: AdminState) -> std::io::Result<Admin> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("routerd-admin".to_string())
            .spawn(move || serve(listener, state, stopping))?;
        Ok(Admin {
            address,
            stop,
            thread: Some(thread),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: TcpListener, state: AdminState, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(error) = answer(stream, &state) {
                    tracing::debug!(%error, "admin request failed");
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
            }
            Err(error) => {
                tracing::warn!(%error, "admin accept failed");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

fn answer(mut stream: TcpStream, state: &AdminState) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 || head.len() + n > REQUEST_HEAD_MAX {
            return respond(&mut stream, 400, "text/plain", "bad request\n");
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if method != b"GET" {
        return respond(&mut stream, 405, "text/plain", "only GET\n");
    }
    match path {
        b"/healthz" if state.ready.load(Ordering::Acquire) => respond(&mut stream, 200, "text/plain", "ok"),
        b"/healthz" => respond(&mut stream, 503, "text/plain", "starting"),
        b"/metrics" => {
            let body = state.metrics.render();
            respond(&mut stream, 200, "text/plain; version=0.0.4", &body)
        }
        _ => respond(&mut stream, 404, "text/plain", "not found\n"),
    }
}

fn respond(stream: &mut TcpStream, status: u16, content_type: &str, body: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}
