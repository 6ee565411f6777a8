//! The node's listening sockets, bound before the cores start: the
//! gateway's address reserved (with port 0 every core must bind the one
//! free port the reservation found), and each core's cluster listener (so
//! its address can be advertised in the membership row).
//!
//! Each address is claimed first (`shards::net::wait_until_free`): a node
//! restarted at once after a crash would otherwise share its gateway port
//! with the dead process's listener, whose share of the connections is
//! reset, and fail to bind its cluster port while that listener lingers.

use std::net::SocketAddr;
use std::time::Duration;

use super::NodeError;
use crate::config::Config;

/// How long a bind waits for another listener on its address to go away:
/// a dead process's goes within milliseconds; one that stays is a running
/// process, and the node refuses to start beside it.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

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
                shards::net::wait_until_free(address, RELEASE_PATIENCE)?;
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
        shards::net::wait_until_free(address, RELEASE_PATIENCE)?;
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
