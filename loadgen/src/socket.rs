//! Sockets for the engine: a non-blocking TCP socket made without
//! connecting (io_uring connects it), and a `SocketAddr` in the kernel's
//! layout for that connect.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;

/// Low latency and no blocking, for a socket connected either way.
pub fn prepare(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    // Non-blocking sockets let io_uring poll them instead of parking a
    // kernel worker thread per blocked recv.
    stream.set_nonblocking(true)
}

/// A non-blocking, close-on-exec TCP socket for `addr`'s family.
pub fn new_socket(addr: &SocketAddr) -> io::Result<TcpStream> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) with constant arguments; it returns a new fd or -1.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it,
    // so the stream takes sole ownership and closes it once.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    prepare(&stream)?;
    Ok(stream)
}

/// `addr` in the kernel's layout.
pub fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage, sockaddr_in and sockaddr_in6 are plain C
    // data for which all-zero bytes are a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: as above.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(v4.ip().octets()),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every
            // socket address type, sockaddr_in included.
            unsafe {
                std::ptr::addr_of_mut!(storage)
                    .cast::<libc::sockaddr_in>()
                    .write(sin)
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: v6.ip().octets(),
            };
            sin6.sin6_scope_id = v6.scope_id();
            // SAFETY: as for sockaddr_in.
            unsafe {
                std::ptr::addr_of_mut!(storage)
                    .cast::<libc::sockaddr_in6>()
                    .write(sin6)
            };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_have_the_kernels_layout() {
        let v4: SocketAddr = "127.0.0.1:7400".parse().expect("v4");
        let (storage, len) = sockaddr(&v4);
        assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in>());
        // SAFETY: `sockaddr` wrote a sockaddr_in at the start of `storage`.
        let sin = unsafe { &*std::ptr::addr_of!(storage).cast::<libc::sockaddr_in>() };
        assert_eq!(sin.sin_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(u16::from_be(sin.sin_port), 7400);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [127, 0, 0, 1]);

        let v6: SocketAddr = "[::1]:9".parse().expect("v6");
        let (storage, len) = sockaddr(&v6);
        assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in6>());
        // SAFETY: `sockaddr` wrote a sockaddr_in6 at the start of `storage`.
        let sin6 = unsafe { &*std::ptr::addr_of!(storage).cast::<libc::sockaddr_in6>() };
        assert_eq!(sin6.sin6_family, libc::AF_INET6 as libc::sa_family_t);
        assert_eq!(u16::from_be(sin6.sin6_port), 9);
        assert_eq!(
            sin6.sin6_addr.s6_addr,
            std::net::Ipv6Addr::LOCALHOST.octets()
        );
    }
}
