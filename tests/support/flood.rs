//! A flood of silent connections: TCP connections to a port that never
//! send a byte, each opened again as soon as the server closes it. It is
//! the cheapest attack on a listener that bounds its pending handshakes
//! (TLS, links, WebSocket upgrades): the bound must evict the silent ones
//! rather than refuse the real client.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct SilentFlood {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<usize>,
}

impl SilentFlood {
    /// Opens `count` silent connections to `address` and keeps that many
    /// open, looking every `every` for the ones the server closed.
    pub fn start(address: SocketAddr, count: usize, every: Duration) -> SilentFlood {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let connect = || {
                let stream = TcpStream::connect(address).ok()?;
                stream.set_nonblocking(true).ok()?;
                Some(stream)
            };
            let mut silent: Vec<_> = (0..count).filter_map(|_| connect()).collect();
            let mut reopened = 0usize;
            while !stopped.load(Ordering::Relaxed) {
                // A read that does not block found the server's end.
                let mut buf = [0u8; 64];
                silent.retain_mut(|stream| match stream.read(&mut buf) {
                    Err(error) => error.kind() == std::io::ErrorKind::WouldBlock,
                    Ok(_) => false,
                });
                while silent.len() < count {
                    match connect() {
                        Some(stream) => silent.push(stream),
                        None => break,
                    }
                    reopened += 1;
                }
                std::thread::sleep(every);
            }
            reopened
        });
        SilentFlood { stop, thread }
    }

    /// Ends the flood (its connections close); returns how many it opened
    /// again after the server closed them.
    pub fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
