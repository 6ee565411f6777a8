//! The node's listening sockets, bound before the cores start: the
//! gateway's address reserved (with port 0 every core must bind the one
//! free port the reservation found), and each core's cluster listener (so
//! its address can be advertised in the membership row).

use std::net::SocketAddr;

use super::NodeError;
use crate::config::Config;

/// Binds each core's cluster listener: `cluster.listen`'s port + core, or
/// any free port each (port 0). Returns each with the port it bound.
pub(super) fn bind_cluster(
    config: &Config,
    core_count: usize,
) -> Result<Vec<(std::net::TcpListener, u16)>, NodeError> {
    (0..core_count)
        .map(|core| {
            let address = config.cluster.listen_for(core);
            let bind = || -> std::io::Result<(std::net::TcpListener, u16)> {
                let socket = socket2::Socket::new(
                    socket2::Domain::for_address(address),
                    socket2::Type::STREAM,
                    None,
                )?;
                socket.set_reuse_address(true)?;
                socket.bind(&address.into())?;
                socket.listen(1024)?;
                let listener: std::net::TcpListener = socket.into();
                let port = listener.local_addr()?.port();
                Ok((listener, port))
            };
            bind().map_err(|source| NodeError::ClusterBind {
                address,
                core,
                source,
            })
        })
        .collect()
}

/// Binds `address` with SO_REUSEPORT so the cores can bind it beside this
/// reservation.
pub(super) fn reserve(address: SocketAddr) -> Result<std::net::TcpListener, NodeError> {
    let bind = || -> std::io::Result<std::net::TcpListener> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_port(true)?;
        socket.set_reuse_address(true)?;
        socket.bind(&address.into())?;
        Ok(socket.into())
    };
    bind().map_err(|source| NodeError::GatewayBind { address, source })
}
