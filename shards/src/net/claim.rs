//! Waiting for a listening address to be free before a process joins it.
//!
//! Every core listens on one address with SO_REUSEPORT (routerd's
//! gateway, the bench echo), so the kernel spreads connections over them.
//! SO_REUSEPORT admits any listener of the same user into that group, not
//! only this process's cores:
//! - a node started twice on one address by mistake would silently take
//!   a share of the other's connections;
//! - a process that has just died (killed, crashed) leaves its listener
//!   behind for a while, because a listener with an accept armed in an
//!   io_uring is held by the ring, and the kernel tears rings down in a
//!   worker after the process is gone (about 10 ms measured here). A node
//!   restarted at once joins the dead listener's group. The kernel hands
//!   it a share of the new connections, which nobody accepts, and resets
//!   them when the ring finally lets go.
//!
//! So before its listeners bind, a process claims the address: it binds a
//! socket without SO_REUSEPORT, which fails while any other socket listens
//! there, and retries until that listener is gone or patience runs out.
//! The claim is let go before the listeners bind, so a process that starts
//! in that instant can still slip in; the wait is for the common mistakes
//! and the dead listener, not a lock.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

/// How long `wait_until_free` sleeps between attempts.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// Returns once no socket listens on `address`, trying for up to
/// `patience`; fails with `AddrInUse` if one still does then. An address
/// with port 0 is always free (each bind gets a port of its own).
///
/// Blocking: call it before the cores start, not on one.
pub fn wait_until_free(address: SocketAddr, patience: Duration) -> io::Result<()> {
    if address.port() == 0 {
        return Ok(());
    }
    let deadline = Instant::now() + patience;
    loop {
        match try_claim(address) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::AddrInUse => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "another socket still listens on {address} after {patience:?} \
                             (a running process, or one that has just ended and whose \
                             rings have not released it)"
                        ),
                    ));
                }
                std::thread::sleep(RETRY_EVERY);
            }
            Err(error) => return Err(error),
        }
    }
}

/// One attempt: binds without SO_REUSEPORT (fails while anything listens
/// on `address`) and releases the address at once.
fn try_claim(address: SocketAddr) -> io::Result<()> {
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
    // Connections of an earlier process in TIME_WAIT do not hold the
    // address against a listener; only a listening socket should.
    socket.set_reuse_address(true)?;
    socket.bind(&address.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener in a SO_REUSEPORT group, as every core's (and a dead
    /// process's) is.
    fn reuseport_listener(address: SocketAddr) -> Socket {
        let socket = Socket::new(Domain::for_address(address), Type::STREAM, None).unwrap();
        socket.set_reuse_address(true).unwrap();
        socket.set_reuse_port(true).unwrap();
        socket.bind(&address.into()).unwrap();
        socket.listen(16).unwrap();
        socket
    }

    fn free_address() -> SocketAddr {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    }

    #[test]
    fn an_address_nobody_listens_on_is_free_at_once() {
        let address = free_address();
        let started = Instant::now();
        wait_until_free(address, Duration::from_secs(5)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_listener_that_stays_makes_the_wait_fail_with_addr_in_use() {
        let address = free_address();
        let _held = reuseport_listener(address);
        let started = Instant::now();
        let error = wait_until_free(address, Duration::from_millis(100)).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
        assert!(error.to_string().contains(&address.to_string()), "{error}");
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn the_wait_ends_when_the_listener_goes_away() {
        let address = free_address();
        let held = reuseport_listener(address);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let started = Instant::now();
        wait_until_free(address, Duration::from_secs(5)).unwrap();
        let waited = started.elapsed();
        releaser.join().unwrap();
        assert!(
            waited >= Duration::from_millis(90),
            "returned after {waited:?}"
        );
        // Free means free: a listener of this process binds it alone now.
        let _mine = reuseport_listener(address);
    }

    #[test]
    fn a_socket_that_is_bound_but_not_listening_does_not_hold_the_address() {
        // routerd reserves its gateway port with such a socket; a claim
        // by another process must see only listeners.
        let address = free_address();
        let reservation = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        reservation.set_reuse_address(true).unwrap();
        reservation.set_reuse_port(true).unwrap();
        reservation.bind(&address.into()).unwrap();
        wait_until_free(address, Duration::from_millis(100)).unwrap();
    }
}
