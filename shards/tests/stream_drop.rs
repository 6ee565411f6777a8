//! A dropped stream lets go of its socket at once, whatever operation was
//! in flight on it: a connect still retrying its SYN, a send blocked on a
//! peer that does not read.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::net::TcpStream;

mod common;
use common::{on_a_core, one_core, wait_for};

/// How long the operations of a dropped stream may take to end.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

/// Waits on the core until `shards::ops_in_flight()` is back to `rest`;
/// the count it ended at.
async fn settle_to(rest: usize) -> usize {
    let deadline = Instant::now() + RELEASE_PATIENCE;
    loop {
        let now = shards::ops_in_flight();
        if now <= rest || Instant::now() >= deadline {
            return now;
        }
        shards::sleep(Duration::from_millis(5)).await;
    }
}

/// Sockets of this host in SYN_SENT towards `port` (from /proc/net/tcp).
fn syn_sent_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let remote_port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3 && fields[2].ends_with(&remote_port) && fields[3] == "02"
        })
        .count()
}

/// A listener whose accept queue is full: the kernel drops further SYNs,
/// so a connect to it hangs as one to a black-holed address does.
fn black_hole() -> (socket2::Socket, std::net::TcpStream, SocketAddr) {
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&any.into()).expect("bind");
    listener.listen(0).expect("listen");
    let address = listener.local_addr().unwrap().as_socket().unwrap();
    // A backlog of 0 holds one connection; it fills the queue.
    let filler = std::net::TcpStream::connect(address).expect("fills the queue");
    (listener, filler, address)
}

#[test]
fn a_connect_abandoned_by_its_deadline_lets_go_of_its_socket() {
    let (_listener, _filler, address) = black_hole();
    let seen = Arc::new(Mutex::new(None::<(usize, bool, usize)>));
    let record = seen.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let record = record.clone();
        async move {
            let rest = shards::ops_in_flight();
            let connected = futures_lite::future::or(
                async { Some(TcpStream::connect(address).await.is_ok()) },
                async {
                    shards::sleep(Duration::from_millis(200)).await;
                    None
                },
            )
            .await;
            let after = settle_to(rest).await;
            *record.lock().unwrap() = Some((rest, connected.is_none(), after));
            futures_lite::future::pending::<()>().await;
        }
    });
    let (rest, timed_out, after) = wait_for(&seen);
    assert!(timed_out, "the full accept queue did not hold the connect");
    assert_eq!(after, rest, "the abandoned connect still holds a slot");
    assert_eq!(
        syn_sent_to(address.port()),
        0,
        "its socket still sends SYNs"
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// Bytes of each send the core makes to a peer that does not read.
const SEND_BYTES: usize = 64 << 10;
/// Sends made at most before one blocks (both sockets' buffers hold far
/// less than this many bytes).
const SENDS_MAX: usize = 1024;

#[test]
fn a_send_blocked_on_a_silent_peer_ends_with_its_stream() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = peer.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(None::<(usize, usize, usize)>));
    let record = seen.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let record = record.clone();
        async move {
            let rest = shards::ops_in_flight();
            let stream = TcpStream::connect(address).await.expect("connect");
            socket2::SockRef::from(&stream)
                .set_send_buffer_size(4096)
                .expect("SO_SNDBUF");
            // Each send takes what the buffers still hold, until one finds
            // them full and waits; that one is left in flight.
            let mut blocked_after = None;
            for sends in 0..SENDS_MAX {
                let send = stream.start_send(vec![7u8; SEND_BYTES]);
                let done = futures_lite::future::or(async { Some(send.await) }, async {
                    shards::sleep(Duration::from_millis(50)).await;
                    None
                })
                .await;
                match done {
                    None => {
                        blocked_after = Some(sends);
                        break;
                    }
                    Some((sent, _)) => assert!(sent.is_ok(), "{sent:?}"),
                }
            }
            assert!(blocked_after.is_some(), "no send blocked");
            let blocked = shards::ops_in_flight();
            // Queued behind the blocked send, never handed to the kernel.
            let queued = stream.start_send(vec![8u8; SEND_BYTES]);
            drop(stream);
            let (queued, _) = queued.await;
            assert_eq!(
                queued.map_err(|error| error.raw_os_error()),
                Err(Some(libc::ECANCELED)),
                "a send queued behind the blocked one"
            );
            let after = settle_to(rest).await;
            *record.lock().unwrap() = Some((rest, blocked, after));
            futures_lite::future::pending::<()>().await;
        }
    });
    let (mut accepted, _) = peer.accept().unwrap();
    let (rest, blocked, after) = wait_for(&seen);
    assert!(
        blocked > rest,
        "the send did not block: {blocked} ops in flight"
    );
    assert_eq!(after, rest, "the blocked send still holds its slot");
    accepted
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    accepted
        .read_to_end(&mut got)
        .expect("the peer sees the end");
    assert!(got.iter().all(|&byte| byte == 7));
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A reply started just before its stream is dropped (the last words of a
/// connection the server ends) still reaches the peer, before the end of
/// the stream: the close's shutdown comes after the send, as a close did.
#[test]
fn a_send_started_just_before_the_drop_still_goes_out() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = peer.local_addr().unwrap();
    let (runtime, shutdown) = on_a_core(one_core(), move || async move {
        let stream = TcpStream::connect(address).await.expect("connect");
        drop(stream.start_send(b"last words".to_vec()));
        drop(stream);
        futures_lite::future::pending::<()>().await;
    });
    assert_eq!(common::accept_and_read_all(&peer), b"last words");
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A stream given up on (`discard_unsent_on_close`) and dropped while the
/// peer reads nothing: what the kernel still held to send never reaches
/// the peer, which sees a reset instead of the end of the stream after it.
#[test]
fn a_stream_closed_discarding_its_unsent_bytes_never_delivers_them() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = peer.local_addr().unwrap();
    let done = Arc::new(Mutex::new(None::<bool>));
    let record = done.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let record = record.clone();
        async move {
            let stream = TcpStream::connect(address).await.expect("connect");
            // Sends until the peer's buffers and ours are full.
            let mut blocked = false;
            for _ in 0..SENDS_MAX {
                let send = stream.start_send(vec![7u8; SEND_BYTES]);
                let done = futures_lite::future::or(async { Some(send.await) }, async {
                    shards::sleep(Duration::from_millis(50)).await;
                    None
                })
                .await;
                if done.is_none() {
                    blocked = true;
                    break;
                }
            }
            stream.discard_unsent_on_close().expect("SO_LINGER");
            drop(stream);
            *record.lock().unwrap() = Some(blocked);
            futures_lite::future::pending::<()>().await;
        }
    });
    let (mut accepted, _) = peer.accept().unwrap();
    assert!(wait_for(&done), "no send blocked");
    accepted
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let ended = accepted.read_to_end(&mut got);
    assert_eq!(
        ended.map_err(|error| error.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "the peer read {} bytes and then the end of the stream",
        got.len()
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
