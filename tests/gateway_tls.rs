//! The TLS listener (`gateway.tls_listen`): rustls's and Python's `ssl`
//! clients log in over TLS 1.3 and 1.2 with ALPN and resumption; the
//! certificate is re-read when its files change; plaintext, garbage after
//! the ClientHello, a ClientHello that never arrives (or dribbles) and the
//! oldest handshake past the per-core bound are each closed and counted,
//! with a session beside them unharmed; and 600 silent connections do not
//! keep real clients out.

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use edge::{client_config, make_cert, tcp_connect, test_python, StreamClient, TestCert};
use routerd::config::Config;
use rustls::pki_types::ServerName;
use support::flood::SilentFlood;
use support::{config, TestNode, SECRET};

fn tls_config(cert: &TestCert) -> Config {
    let mut config = config();
    config.gateway.tls_listen = Some("127.0.0.1:0".parse().unwrap());
    config.gateway.tls_cert_file = Some(cert.cert_file.clone());
    config.gateway.tls_key_file = Some(cert.key_file.clone());
    config
}

fn tls_client(node: &TestNode, cert: &TestCert) -> StreamClient {
    StreamClient::new(edge::tls_connect(
        node.tls(),
        client_config(&cert.der, b"routerd"),
    ))
}

#[test]
fn a_rustls_client_logs_in_and_increments_with_alpn_routerd() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let node = TestNode::start(tls_config(&cert));
    let mut client = tls_client(&node, &cert);
    client.login(71, 1);
    let first = client.incr(2);
    assert_eq!(client.incr(3), first + 1);
    // Pipelined: sixteen requests in one write, sixteen answers.
    let mut bytes = Vec::new();
    for seq in 10..26 {
        wire::client::encode_frame(
            &mut bytes,
            wire::client::FrameKind::Request,
            wire::client::route::PLAYER_INCR,
            seq,
            &1i64.to_le_bytes(),
        );
    }
    client.wire.write_all(&bytes).unwrap();
    for seq in 10..26 {
        assert_eq!(client.recv().seq, seq);
    }
    // The ALPN the server chose.
    let config = client_config(&cert.der, b"routerd");
    let mut conn =
        rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut tcp = tcp_connect(node.tls());
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    assert_eq!(conn.alpn_protocol(), Some(&b"routerd"[..]));
    node.wait_metric("routerd_gateway_tls_handshakes_total{kind=\"full\"}", 2);
}

#[test]
fn python_ssl_logs_in_over_tls_1_3_and_1_2_and_resumes() {
    let Some(python) = test_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let node = TestNode::start(tls_config(&cert));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/tls_session.py");
    let address = node.tls();
    let output = Command::new(python)
        .arg(script)
        .arg(address.ip().to_string())
        .arg(address.port().to_string())
        .arg(&cert.cert_file)
        .args([SECRET, "72"])
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success()
            && stdout.contains("TLSv1.3 resumed")
            && stdout.contains("TLSv1.2 resumed")
            && stdout.ends_with("ok\n"),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // One resumption of each version.
    node.wait_metric("routerd_gateway_tls_handshakes_total{kind=\"resumed\"}", 2);
}

/// Reads until the server closes; fails if it sends more than `limit`
/// bytes (an alert is a few).
fn expect_closed(stream: &mut std::net::TcpStream, limit: usize) {
    let mut total = 0;
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => total += n,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                panic!("not closed within the read timeout")
            }
            Err(_) => return,
        }
        assert!(total <= limit, "{total} bytes before the close");
    }
}

/// The first flight of a real client: its ClientHello records.
fn client_hello(cert: &TestCert) -> Vec<u8> {
    let config = client_config(&cert.der, b"routerd");
    let mut conn =
        rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

#[test]
fn plaintext_and_garbage_after_the_client_hello_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let node = TestNode::start(tls_config(&cert));
    let mut bystander = tls_client(&node, &cert);
    bystander.login(73, 1);
    let before = bystander.incr(2);

    let mut plaintext = tcp_connect(node.tls());
    let mut frame = Vec::new();
    wire::client::encode_frame(&mut frame, wire::client::FrameKind::Request, 1, 1, b"");
    plaintext.write_all(&frame).unwrap();
    expect_closed(&mut plaintext, 0);
    node.wait_metric("routerd_gateway_tls_refused_total{reason=\"plaintext\"}", 1);

    let mut garbage = tcp_connect(node.tls());
    let mut bytes = client_hello(&cert);
    bytes.extend_from_slice(&[0x16, 0x03, 0x03, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef, 0x00]);
    garbage.write_all(&bytes).unwrap();
    // The server's flight and an alert, then the close.
    expect_closed(&mut garbage, 16 * 1024);
    node.wait_metric(
        "routerd_gateway_tls_refused_total{reason=\"bad_handshake\"}",
        1,
    );

    assert_eq!(bystander.incr(3), before + 1);
}

#[test]
fn a_silent_connection_is_closed_at_its_client_hello_deadline_and_the_oldest_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let mut config = tls_config(&cert);
    // One core, so every connection counts against the same bound.
    config.cores.count = 1;
    config.gateway.tls_handshakes_max = 2;
    config.gateway.tls_client_hello_timeout_ms = 600;
    let node = TestNode::start(config);
    let mut bystander = tls_client(&node, &cert);
    bystander.login(74, 1);

    // Two silent connections hold the core's two handshake slots.
    let started = Instant::now();
    let mut silent: Vec<_> = (0..2).map(|_| tcp_connect(node.tls())).collect();
    // Wait until both are accepted (a plain incr round trip orders it).
    bystander.incr(2);
    std::thread::sleep(Duration::from_millis(50));
    // A third evicts the oldest and is served.
    let mut third = tls_client(&node, &cert);
    third.login(75, 1);
    node.wait_metric("routerd_gateway_tls_refused_total{reason=\"evicted\"}", 1);
    expect_closed(&mut silent[0], 0);
    // The other meets its ClientHello deadline.
    expect_closed(&mut silent[1], 0);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "closed after {waited:?}"
    );
    node.wait_metric(
        "routerd_gateway_tls_refused_total{reason=\"client_hello_timeout\"}",
        1,
    );
    // A ClientHello sent a byte at a time is as late as none.
    let hello = client_hello(&cert);
    let mut dribbler = tcp_connect(node.tls());
    let dribbled = Instant::now();
    for byte in &hello[..6] {
        // Closed at the deadline: a later byte may fail.
        let _ = dribbler.write_all(std::slice::from_ref(byte));
        std::thread::sleep(Duration::from_millis(150));
    }
    expect_closed(&mut dribbler, 0);
    assert!(dribbled.elapsed() >= Duration::from_millis(500));
    node.wait_metric(
        "routerd_gateway_tls_refused_total{reason=\"client_hello_timeout\"}",
        2,
    );
    bystander.incr(3);
    third.incr(2);
}

/// A listener held by silence: 600 TCP connections to the TLS port
/// that never send a ClientHello, reopened as the server closes them,
/// while real clients connect one after another. Every real handshake
/// completes (and its session logs in): the silent ones are evicted for
/// them, and closed at their ClientHello deadline.
#[test]
fn six_hundred_silent_connections_do_not_keep_real_clients_out() {
    const SILENT: usize = 600;
    const TRIES: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let node = TestNode::start(tls_config(&cert));
    let address = node.tls();
    let flood = SilentFlood::start(address, SILENT, Duration::from_millis(20));
    // The flood holds every slot of both cores.
    std::thread::sleep(Duration::from_millis(500));
    let mut completed = 0;
    let mut failures = Vec::new();
    let started = Instant::now();
    for try_ in 0..TRIES {
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut client = tls_client(&node, &cert);
            client.login(1000 + try_ as u64, 1);
        }));
        match attempt {
            Ok(()) => completed += 1,
            Err(_) => failures.push(try_),
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let took = started.elapsed();
    let reopened = flood.stop();
    eprintln!(
        "TLS handshakes completed: {completed} of {TRIES} in {took:?}, with {SILENT} silent \
         connections ({reopened} reopened)"
    );
    assert_eq!(completed, TRIES, "tries that failed: {failures:?}");
    assert!(node.metric("routerd_gateway_tls_refused_total{reason=\"evicted\"}") > 0);
}

#[test]
fn a_changed_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let old = make_cert(dir.path(), "gateway");
    let mut config = tls_config(&old);
    config.gateway.tls_reload_interval_ms = 100;
    let node = TestNode::start(config);
    let mut before = tls_client(&node, &old);
    before.login(76, 1);

    // A new pair written over the same files.
    let fresh = make_cert(dir.path(), "next");
    std::fs::copy(&fresh.key_file, &old.key_file).unwrap();
    std::fs::copy(&fresh.cert_file, &old.cert_file).unwrap();
    node.wait_metric("routerd_gateway_tls_reloads_total{result=\"ok\"}", 1);
    let mut after = tls_client(&node, &fresh);
    after.login(77, 1);
    // A client that trusts only the old certificate is refused by its own
    // check: the server presents the new one.
    let mut stale = rustls::ClientConnection::new(
        client_config(&old.der, b"routerd"),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut tcp = tcp_connect(node.tls());
    let handshake = (0..10).try_for_each(|_| stale.complete_io(&mut tcp).map(|_| ()));
    assert!(
        handshake.is_err(),
        "a client of the old certificate still connected"
    );

    // A broken file keeps the certificate in use, counted.
    let failed = "routerd_gateway_tls_reloads_total{result=\"failed\"}";
    let failed_before = node.metric(failed);
    std::fs::write(&old.cert_file, "not a certificate").unwrap();
    node.wait_metric(failed, failed_before + 1);
    let mut still = tls_client(&node, &fresh);
    still.login(78, 1);
    // Sessions opened before the reload go on.
    before.incr(2);
}

/// `routerd client --tls` to the TLS listener, and `--websocket --tls` to
/// a `websocket_tls` listener, each with the test CA.
#[test]
fn routerd_client_speaks_tls_and_websocket_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let mut config = tls_config(&cert);
    config.gateway.websocket_listen = Some("127.0.0.1:0".parse().unwrap());
    config.gateway.websocket_tls = true;
    let node = TestNode::start(config);
    let run = |address: std::net::SocketAddr, websocket: bool, player: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_routerd"));
        command
            .args(["client", "--addr", &format!("localhost:{}", address.port())])
            .args(["--tls", "--ca-file"])
            .arg(&cert.cert_file)
            .args(["--player-id", player])
            .env("ROUTERD_AUTH_SECRET", SECRET)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if websocket {
            command.arg("--websocket");
        }
        let mut child = command.spawn().expect("routerd client");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"incr 5\nincr 2\n")
            .unwrap();
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let over_tls = run(node.tls(), false, "81");
    assert!(
        over_tls.contains("OK login 81") && over_tls.contains("OK incr 7"),
        "{over_tls}"
    );
    let over_wss = run(node.websocket(), true, "82");
    assert!(
        over_wss.contains("OK login 82") && over_wss.contains("OK incr 7"),
        "{over_wss}"
    );
}
