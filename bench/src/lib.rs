//! Benchmarks live in `benches/` and the whole-system scripts beside this crate.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}
