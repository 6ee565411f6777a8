//! The admin port against clients that hold it without a request to
//! show, and against browsers: under 70 connections holding bodies and 150
//! slow heads, `/healthz` and `/metrics` answer every time within 1 s;
//! 80 scrapes left unread keep `/healthz` busy for 2 s at most; a
//! refused call is answered at once, not after its body (401, 413); a
//! `Host` that is not the endpoint's is refused 421, a mutating call from
//! another origin 403. Against a `routerd serve` child, as deployed.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use routerd::admin::{BODY_READ_TIMEOUT, CONNECTIONS_MAX};
use support::{ServeProcess, SECRET};

const TOKEN: &str = "admin-edge-token-7f3a";

/// Connections that send a head, then part of a body, and hold it.
const BODY_HOLDERS: usize = 70;
/// Connections that send their head a byte a second, reconnecting.
const SLOW_HEADS: usize = 150;
/// What a probe may take, attack or not.
const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// A `routerd serve` child with `admin` lines added to its `[admin]`.
fn serve(dir: &Path, admin: &str) -> ServeProcess {
    let path = dir.join("node.toml");
    let text = format!(
        "[node]\ndata_dir = {data:?}\n[cores]\ncount = 1\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n{admin}\n\
         [auth]\nsecret = \"{SECRET}\"\n[cluster]\nlisten = \"127.0.0.1:0\"\n",
        data = dir.display().to_string(),
    );
    std::fs::write(&path, text).unwrap();
    ServeProcess::serve_file(&path)
}

/// Writes `head` and `body`, reads the answer: its status, and how long
/// it took from the first byte written.
fn timed(admin: SocketAddr, head: &str, body: &[u8], limit: Duration) -> (u16, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&admin, limit).expect("admin accepts");
    stream.set_read_timeout(Some(limit)).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // The status line is enough; the rest of a scrape is read to its end.
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(error) => panic!("{head:?}: no answer within {limit:?}: {error}"),
        }
    }
    let status = std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{head:?}: not an HTTP answer"));
    (status, started.elapsed())
}

/// One connection holding a body open, again and again until `stop`: a
/// complete head with the token, 2 bytes of the 1000 it declares.
fn hold_a_body(admin: SocketAddr, stop: &AtomicBool) {
    let head = format!(
        "POST /log-level HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 1000\r\n\r\nin"
    );
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(admin) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(head.as_bytes()).is_err() {
            continue;
        }
        // Until the server gives up on it (or the test stops).
        let mut sink = [0u8; 1024];
        while !stop.load(Ordering::Relaxed) {
            match stream.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
    }
}

/// One client sending its head a byte a second, reconnecting when closed.
fn send_a_slow_head(admin: SocketAddr, stop: &AtomicBool) {
    let head = format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\n\r\n");
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(admin) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        for byte in head.as_bytes() {
            if stop.load(Ordering::Relaxed) || stream.write_all(&[*byte]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

#[test]
fn probes_answer_within_a_second_under_held_bodies_and_slow_heads() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(dir.path(), &format!("token = \"{TOKEN}\""));
    let admin = node.admin;
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    for index in 0..BODY_HOLDERS + SLOW_HEADS {
        let stop = stop.clone();
        let attacker = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                if index < BODY_HOLDERS {
                    hold_a_body(admin, &stop)
                } else {
                    send_a_slow_head(admin, &stop)
                }
            })
            .unwrap();
        attackers.push(attacker);
    }
    // Every attacker connected, and the body holders past the slots.
    std::thread::sleep(Duration::from_millis(1500));

    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        for path in ["/healthz", "/metrics"] {
            let head = format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
            let (status, took) = timed(admin, &head, b"", PROBE_LIMIT);
            assert_eq!(status, 200, "{path}");
            assert!(took < PROBE_LIMIT, "{path} took {took:?}");
            slowest = slowest.max(took);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "slowest probe under {BODY_HOLDERS} held bodies and {SLOW_HEADS} slow heads: {slowest:?}"
    );

    // Refused on the head, at once: not after the body they declare.
    let at_once = BODY_READ_TIMEOUT / 4;
    let no_token = format!("POST /drain HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 1000\r\n\r\n");
    let (status, took) = timed(admin, &no_token, b"{}", BODY_READ_TIMEOUT * 2);
    assert_eq!(status, 401);
    assert!(took < at_once, "401 after {took:?}");
    let huge = format!(
        "POST /log-level HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 1000000000\r\n\r\n"
    );
    let (status, took) = timed(admin, &huge, b"debug", BODY_READ_TIMEOUT * 2);
    assert_eq!(status, 413);
    assert!(took < at_once, "413 after {took:?}");

    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.join().unwrap();
    }
    // The held bodies past the slots were refused at once, the others
    // timed out; the slow heads timed out.
    let head = format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    let metrics = support::http::exchange(admin, &head, b"").body;
    let refused = |reason: &str| -> u64 {
        let series = format!("routerd_admin_refused_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&series)?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in the scrape"))
    };
    assert!(refused("slots") >= (BODY_HOLDERS - CONNECTIONS_MAX) as u64);
    assert!(refused("deadline") >= SLOW_HEADS as u64);
    assert_eq!(refused("unauthorized"), 1);
    assert_eq!(refused("too_large"), 1);
    node.stop();
}

/// Clients that send a scrape request and never read the answer: once
/// the answer outgrows the socket buffers its write waits, and without a
/// deadline each held its slot for the connection's 30 s lifetime, so
/// eighty of them took every slot a probe may use and `/healthz` answered
/// 503 busy. Now a write that makes no progress for 2 s ends its
/// connection.
#[test]
fn probes_answer_while_scrapes_go_unread() {
    const UNREAD: usize = 80;
    let dir = tempfile::tempdir().unwrap();
    let node = serve(dir.path(), &format!("token = \"{TOKEN}\""));
    let admin = node.admin;
    let scrape = format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\n\r\n");
    let size = support::http::exchange(admin, &scrape, b"").body.len();
    assert!(
        size > 32 * 1024,
        "the scrape ({size} bytes) fits in the buffers"
    );
    let unread: Vec<TcpStream> = (0..UNREAD)
        .map(|_| {
            let socket =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            socket.set_recv_buffer_size(1024).unwrap();
            // A small segment size, as a real network has (loopback's 64 KiB
            // would size the node's send buffer past any answer).
            socket.set_mss(536).unwrap();
            socket.connect(&admin.into()).unwrap();
            let mut stream: TcpStream = socket.into();
            stream.write_all(scrape.as_bytes()).unwrap();
            stream
        })
        .collect();
    let started = Instant::now();
    let healthz = format!("GET /healthz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    loop {
        let (status, _) = timed(admin, &healthz, b"", PROBE_LIMIT);
        if status == 200 && started.elapsed() > Duration::from_millis(500) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "/healthz still {status} {:?} after {UNREAD} unread scrapes",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "/healthz answered 200 {:?} after {UNREAD} unread scrapes of {size} bytes",
        started.elapsed()
    );
    drop(unread);
    node.stop();
}

/// A `Host` this endpoint is not is refused 421 (DNS rebinding reads
/// nothing), the probes excepted; a mutating call from another origin is
/// refused 403 and changes nothing; the endpoint's own origin and those
/// configured pass.
#[test]
fn foreign_hosts_and_origins_are_refused_on_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(
        dir.path(),
        "allowed_hosts = [\"ops.example\"]\nallowed_origins = [\"https://console.example\"]",
    );
    let admin = node.admin;
    let call = |method: &str, path: &str, headers: &[String], body: &str| {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for header in headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        support::http::exchange(admin, &head, body.as_bytes())
    };
    let host = |name: &str| format!("Host: {name}");
    let own = host(&admin.to_string());
    let filter = || {
        let answer = call("GET", "/log-level", std::slice::from_ref(&own), "");
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body
    };
    let before = filter();

    for path in ["/config", "/sessions", "/metrics", "/log-level"] {
        let answer = call("GET", path, &[host("evil.example")], "");
        assert_eq!(answer.status, 421, "{path}: {}", answer.body);
        assert!(
            answer.body.contains("admin.allowed_hosts"),
            "{}",
            answer.body
        );
        let port = admin.port();
        for good in [
            own.clone(),
            host(&format!("localhost:{port}")),
            host("ops.example"),
        ] {
            assert_eq!(
                call("GET", path, std::slice::from_ref(&good), "").status,
                200,
                "{path} {good}"
            );
        }
    }
    // Load balancers' probes say what Host they like.
    assert_eq!(
        call("GET", "/healthz", &[host("lb.internal")], "").status,
        200
    );

    let evil = [own.clone(), "Origin: http://evil.example".to_string()];
    let answer = call("POST", "/log-level", &evil, "trace");
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert_eq!(call("PUT", "/log-level", &evil, "trace").status, 403);
    let null = [own.clone(), "Origin: null".to_string()];
    assert_eq!(call("POST", "/drain", &null, "").status, 403);
    assert_eq!(filter(), before);

    let same = [own.clone(), format!("Origin: http://{admin}")];
    assert_eq!(call("POST", "/log-level", &same, "debug").status, 200);
    let listed = [own.clone(), "Origin: https://console.example".to_string()];
    assert_eq!(call("POST", "/log-level", &listed, "info").status, 200);
    // No Origin: not a browser (the CLI, curl).
    assert_eq!(
        call("POST", "/log-level", std::slice::from_ref(&own), "warn").status,
        200
    );
    assert!(filter().contains("warn"));
    // Bad arguments get a clear 400, and are counted.
    let answer = call(
        "PUT",
        "/log-level",
        std::slice::from_ref(&own),
        "routerd=notalevel",
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(
        call("DELETE", "/log-level", std::slice::from_ref(&own), "").status,
        405
    );

    let metrics = call("GET", "/metrics", std::slice::from_ref(&own), "").body;
    assert!(
        metrics.contains("routerd_admin_refused_total{reason=\"host\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("routerd_admin_refused_total{reason=\"origin\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("routerd_admin_refused_total{reason=\"bad_request\"} 2"),
        "{metrics}"
    );
    node.stop();
}
