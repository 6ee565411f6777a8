//! A dependency's log lines cannot be made to flood the log: rustls warns
//! once per ClientHello whose SNI is an IP address, and 200 such
//! handshakes against a `routerd serve` child write a handful of those
//! lines, not 200. Naming the target in the filter lets every line out.

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use edge::{client_config, make_cert, TestCert};
use rustls::pki_types::ServerName;
use support::{ServeProcess, SECRET};

/// Handshakes sent.
const HANDSHAKES: usize = 200;
/// What rustls says of each.
const WARNING: &str = "Illegal SNI extension: ignoring IP address presented as hostname";

/// A node with a TLS listener on a free port, logging with `filter`, and
/// where that listener is.
fn serve(dir: &Path, cert: &TestCert, filter: &str) -> (ServeProcess, SocketAddr) {
    let path = dir.join("node.toml");
    let text = format!(
        "[node]\ndata_dir = {data:?}\n[cores]\ncount = 1\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\ntls_listen = \"127.0.0.1:0\"\n\
         tls_cert_file = {cert:?}\ntls_key_file = {key:?}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[auth]\nsecret = \"{SECRET}\"\n\
         [cluster]\nlisten = \"127.0.0.1:0\"\n",
        data = dir.display().to_string(),
        cert = cert.cert_file.display().to_string(),
        key = cert.key_file.display().to_string(),
    );
    std::fs::write(&path, text).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
    command
        .args(["serve", "--config"])
        .arg(&path)
        .env("ROUTERD_LOG", filter);
    let node = ServeProcess::spawn(command);
    let tls = node
        .serving_address("tls")
        .expect("tls in the serving line");
    (node, tls)
}

/// A real client's ClientHello whose SNI names `127.0.0.1` (rustls sends
/// no SNI for an IP address, so a host name of the same length is
/// replaced in the bytes: the server checks no MAC over a ClientHello).
fn client_hello_with_ip_sni(cert: &TestCert) -> Vec<u8> {
    let name = "sni-name1";
    let config = client_config(&cert.der, b"routerd");
    let server = ServerName::try_from(name).unwrap();
    let mut conn = rustls::ClientConnection::new(config, server).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    let at = hello
        .windows(name.len())
        .position(|window| window == name.as_bytes())
        .expect("the SNI in the ClientHello");
    hello[at..at + name.len()].copy_from_slice(b"127.0.0.1");
    hello
}

/// Sends the ClientHello on fresh connections, each read until the server
/// answers (its ServerHello), then closed.
fn handshakes(tls: SocketAddr, hello: &[u8]) {
    for _ in 0..HANDSHAKES {
        let mut stream = TcpStream::connect(tls).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        stream.write_all(hello).unwrap();
        let mut answer = [0u8; 512];
        assert!(stream.read(&mut answer).unwrap() > 0, "the server answers");
    }
}

/// The node's lines that carry rustls's warning, once they stop growing.
fn warnings(node: &ServeProcess) -> usize {
    let count = || {
        let log = node.log.lock().unwrap();
        log.iter().filter(|line| line.contains(WARNING)).count()
    };
    let mut last = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        let now = count();
        if now == last {
            break;
        }
        last = now;
    }
    last
}

#[test]
fn a_third_party_warning_per_handshake_is_rate_limited_unless_named() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let hello = client_hello_with_ip_sni(&cert);

    let (node, tls) = serve(dir.path(), &cert, "info");
    let started = Instant::now();
    handshakes(tls, &hello);
    let seconds = started.elapsed().as_secs() as usize;
    let limited = warnings(&node);
    node.stop();
    // One line, and one more each interval (5 s) the run lasted.
    assert!(limited >= 1, "rustls's warning is still logged");
    assert!(
        limited <= 2 + seconds / 5,
        "{limited} warnings for {HANDSHAKES} handshakes in {seconds} s"
    );

    // Named in the filter: every line.
    let (node, tls) = serve(dir.path(), &cert, "info,rustls=warn");
    handshakes(tls, &hello);
    let named = warnings(&node);
    node.stop();
    assert_eq!(named, HANDSHAKES);
}

/// A `ROUTERD_LOG` that does not parse used to become `info` without a
/// word: the operator who asked for `debug` saw fewer lines and no reason.
#[test]
fn a_log_filter_that_does_not_parse_is_said_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let run = |filter: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_routerd"))
            .arg("check-config")
            .current_dir(dir.path())
            .env("ROUTERD_LOG", filter)
            .output()
            .unwrap()
    };
    let output = run("routerd=notalevel");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "still runs, at info: {stderr}");
    assert!(
        stderr.contains("ROUTERD_LOG=\"routerd=notalevel\" is not a log filter"),
        "{stderr}"
    );
    assert!(stderr.contains("logging at info instead"), "{stderr}");
    let output = run("warn,routerd::cluster=debug");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("ROUTERD_LOG"),
        "a filter that parses: {stderr}"
    );
}
