//! The shared receive buffer ring under pressure: a connection that finds
//! it empty waits without spinning and resumes when buffers come back, and
//! a slow reader cannot take it from the fast connections beside it.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::net::{TcpListener, TcpStream};
use shards::{RecvBufferStats, Runtime, ShutdownHandle};

mod common;
use common::{on_a_core, one_core, process_cpu, wait_for};

/// What a slow connection's reader saw: the ring while it held back, and
/// whether every byte it then read was the one its peer sent.
#[derive(Clone, Debug)]
struct SlowReport {
    while_held: RecvBufferStats,
    intact: bool,
}

/// Bytes a slow connection's client sends after its first byte.
const SLOW_BYTES: usize = 8 << 10;

fn slow_pattern(at: usize) -> u8 {
    (at % 251) as u8
}

/// A server on the core: a connection whose first byte is `S` is read once
/// and then held (its first buffer kept, no more `recv`) until `release`;
/// every other connection is echoed.
fn serve(
    published: Arc<Mutex<Option<SocketAddr>>>,
    release: Arc<AtomicBool>,
    report: Arc<Mutex<Option<SlowReport>>>,
) -> impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send + Clone + 'static
{
    move || {
        let published = published.clone();
        let release = release.clone();
        let report = report.clone();
        Box::pin(async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            loop {
                let stream = listener.accept().await.expect("accept");
                let release = release.clone();
                let report = report.clone();
                stream.set_nodelay(true).expect("TCP_NODELAY");
                shards::spawn(async move {
                    let Some(first) = stream.recv().await.expect("recv") else {
                        return;
                    };
                    if first[0] == b'S' {
                        hold_then_read(&stream, first, &release, &report).await;
                    } else {
                        echo(&stream, first).await;
                    }
                })
                .detach();
            }
        })
    }
}

async fn echo(stream: &TcpStream, first: shards::RecvBuf) {
    let mut next = Some(first);
    while let Some(buf) = next {
        let (sent, _) = stream.send_all(buf.to_vec()).await;
        drop(buf);
        if sent.is_err() {
            return;
        }
        next = stream.recv().await.ok().flatten();
    }
}

async fn hold_then_read(
    stream: &TcpStream,
    first: shards::RecvBuf,
    release: &AtomicBool,
    report: &Mutex<Option<SlowReport>>,
) {
    let mut seen: Vec<u8> = first[1..].to_vec();
    let mut while_held = shards::recv_buffers();
    while !release.load(Ordering::SeqCst) {
        while_held = shards::recv_buffers();
        shards::sleep(Duration::from_millis(2)).await;
    }
    drop(first);
    while seen.len() < SLOW_BYTES {
        match stream.recv().await {
            Ok(Some(buf)) => seen.extend_from_slice(&buf),
            _ => break,
        }
    }
    let intact = seen.len() == SLOW_BYTES
        && seen
            .iter()
            .enumerate()
            .all(|(at, &byte)| byte == slow_pattern(at));
    *report.lock().unwrap() = Some(SlowReport { while_held, intact });
}

fn connect(address: SocketAddr) -> std::net::TcpStream {
    common::connect(address, Duration::from_secs(3))
}

/// A core running [`serve`], one connection's buffers bounded by
/// `recv_buffers_per_conn_max`, and the test's handles on it.
struct SlowReaderSetup {
    address: SocketAddr,
    release: Arc<AtomicBool>,
    report: Arc<Mutex<Option<SlowReport>>>,
    runtime: Runtime,
    shutdown: ShutdownHandle,
}

impl SlowReaderSetup {
    fn start(recv_buffers_per_conn_max: u32) -> SlowReaderSetup {
        let mut config = one_core();
        config.recv_buffers_per_conn_max = recv_buffers_per_conn_max;
        let address = Arc::new(Mutex::new(None));
        let release = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(None::<SlowReport>));
        let (runtime, shutdown) = on_a_core(
            config,
            serve(address.clone(), release.clone(), report.clone()),
        );
        SlowReaderSetup {
            address: wait_for(&address),
            release,
            report,
            runtime,
            shutdown,
        }
    }

    /// Lets the slow reader read on, and what it saw.
    fn release_slow_reader(&self) -> SlowReport {
        self.release.store(true, Ordering::SeqCst);
        wait_for(&self.report)
    }

    fn stop(self) {
        self.shutdown.trigger();
        self.runtime.join().expect("clean stop");
    }
}

/// Round trips of `payload` on a fast connection; panics if one stalls.
fn round_trips(client: &mut std::net::TcpStream, payload: &[u8], count: usize) {
    let mut back = vec![0u8; payload.len()];
    for n in 0..count {
        client.write_all(payload).unwrap();
        client
            .read_exact(&mut back)
            .unwrap_or_else(|error| panic!("round trip {n} stalled: {error}"));
        assert_eq!(back, payload);
    }
}

/// A slow client: `S`, then its bytes in buffer-sized pieces a moment
/// apart (a trickle, as a peer feeding a reader that fell behind).
fn trickle(client: &mut std::net::TcpStream, piece_bytes: usize) {
    client.write_all(b"S").unwrap();
    let bytes: Vec<u8> = (0..SLOW_BYTES).map(slow_pattern).collect();
    for piece in bytes.chunks(piece_bytes) {
        client.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// With no bound per connection, a slow reader fills the whole ring; a
/// fast connection then waits for a buffer on the waiter list (counted)
/// while the core sleeps, and is served as soon as buffers come back.
#[test]
fn a_connection_finding_the_ring_empty_waits_without_spinning() {
    let ring_buffers = one_core().recv_buffers;
    let setup = SlowReaderSetup::start(u32::from(ring_buffers));
    let mut slow = connect(setup.address);
    // Far more than the ring holds (8 buffers of 64 bytes) arrives at once.
    slow.write_all(b"S").unwrap();
    let bytes: Vec<u8> = (0..SLOW_BYTES).map(slow_pattern).collect();
    let writer = std::thread::spawn(move || {
        slow.write_all(&bytes).unwrap();
        slow
    });
    std::thread::sleep(Duration::from_millis(50));
    let mut fast = connect(setup.address);
    fast.write_all(b"ping").unwrap();
    // The fast connection is starved now; the core must sleep meanwhile.
    std::thread::sleep(Duration::from_millis(20));
    let before = process_cpu();
    std::thread::sleep(Duration::from_millis(300));
    let starved_cpu = process_cpu() - before;
    setup.release.store(true, Ordering::SeqCst);
    let mut back = [0u8; 4];
    fast.read_exact(&mut back)
        .expect("served once buffers came back");
    assert_eq!(&back, b"ping");
    let slow_report = setup.release_slow_reader();
    let _slow = writer.join().unwrap();
    assert!(
        starved_cpu < Duration::from_millis(60),
        "the core spun while a connection waited for buffers: {starved_cpu:?} in 300 ms"
    );
    assert!(slow_report.intact, "the slow connection's bytes");
    assert_eq!(
        slow_report.while_held.lent, ring_buffers,
        "the slow reader held the whole ring: {:?}",
        slow_report.while_held
    );
    let held = slow_report.while_held;
    assert!(
        held.waiting >= 1 && held.recv_buffer_waits_total >= 1,
        "the fast connection waited on the list: {held:?}"
    );
    setup.stop();
}

/// Buffers a connection may hold in the test below.
const HELD_MAX: u32 = 2;

/// A slow reader holds at most its share of the ring, and the fast
/// connections beside it keep being served while it holds back.
#[test]
fn a_slow_reader_cannot_starve_the_fast_connections_beside_it() {
    let setup = SlowReaderSetup::start(HELD_MAX);
    let address = setup.address;
    let slow = std::thread::spawn(move || {
        let mut slow = connect(address);
        trickle(&mut slow, 64);
        slow
    });
    std::thread::sleep(Duration::from_millis(30));
    let fast: Vec<_> = (0..3u8)
        .map(|tag| {
            std::thread::spawn(move || {
                let mut client = connect(address);
                round_trips(&mut client, &[tag; 100], 50);
            })
        })
        .collect();
    let started = Instant::now();
    for client in fast {
        client.join().expect("a fast connection was starved");
    }
    let fast_elapsed = started.elapsed();
    // Let the echo tasks give their last buffers back before the slow
    // reader's last look at the ring.
    std::thread::sleep(Duration::from_millis(20));
    let slow_report = setup.release_slow_reader();
    let _slow = slow.join().unwrap();
    assert!(slow_report.intact, "the slow connection's bytes");
    let held = slow_report.while_held;
    assert!(
        held.held_max_total >= 1,
        "the bound was never reached: {held:?}"
    );
    assert!(
        u32::from(held.lent) <= HELD_MAX,
        "the slow reader held more than its share: {held:?}"
    );
    assert!(fast_elapsed < Duration::from_secs(3), "{fast_elapsed:?}");
    setup.stop();
}

/// A burst far past the connection's share arrives at once, so one kernel
/// pass fills buffers past the bound before the core sees any: the bytes
/// past it are copied out and their buffers given back, so the slow reader
/// still holds no more than its share and the fast connections are served.
#[test]
fn a_burst_to_a_slow_reader_is_held_to_its_share() {
    let setup = SlowReaderSetup::start(HELD_MAX);
    let address = setup.address;
    let mut slow = connect(address);
    let mut burst = b"S".to_vec();
    burst.extend((0..SLOW_BYTES).map(slow_pattern));
    slow.write_all(&burst).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let fast: Vec<_> = (0..3u8)
        .map(|tag| {
            std::thread::spawn(move || {
                let mut client = connect(address);
                round_trips(&mut client, &[tag; 100], 20);
            })
        })
        .collect();
    for client in fast {
        client.join().expect("a fast connection was starved");
    }
    std::thread::sleep(Duration::from_millis(20));
    let slow_report = setup.release_slow_reader();
    assert!(slow_report.intact, "the slow connection's bytes");
    let held = slow_report.while_held;
    assert!(
        u32::from(held.lent) <= HELD_MAX,
        "the slow reader held more than its share: {held:?}"
    );
    assert!(
        held.recv_buffer_spilled_total >= 1,
        "nothing was copied out: {held:?}"
    );
    setup.stop();
}

/// A buffer back in an empty ring reaches the connection whose bytes wait
/// in its socket, not only the connection that has waited longest: an idle
/// connection woken first arms its receive, takes no buffer, and must not
/// use up the wake (on a quiet core no other buffer would come back).
#[test]
fn a_buffer_back_in_an_empty_ring_reaches_the_connection_with_bytes_waiting() {
    let mut config = one_core();
    config.recv_buffers = 2;
    config.recv_buffers_per_conn_max = 2;
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let holding = Arc::new(Mutex::new(None::<RecvBufferStats>));
    let held = holding.clone();
    let release = Arc::new(AtomicBool::new(false));
    let released = release.clone();
    let waiting = Arc::new(Mutex::new(None::<RecvBufferStats>));
    let report = waiting.clone();
    let (runtime, shutdown) = on_a_core(config, move || {
        let (published, held, released) = (published.clone(), held.clone(), released.clone());
        let report = report.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            // The holder takes both buffers of the ring and keeps them.
            let holder = listener.accept().await.expect("holder");
            let mut bufs = Vec::new();
            while bufs
                .iter()
                .map(|buf: &shards::RecvBuf| buf.len())
                .sum::<usize>()
                < 128
            {
                bufs.push(holder.recv().await.expect("recv").expect("bytes"));
            }
            *held.lock().unwrap() = Some(shards::recv_buffers());
            // Two idle connections, then one whose bytes already wait: all
            // find the ring empty and wait on its list, in that order.
            for _ in 0..3 {
                let stream = listener.accept().await.expect("accept");
                shards::spawn(async move {
                    while let Ok(Some(buf)) = stream.recv().await {
                        if stream.send_all(buf.to_vec()).await.0.is_err() {
                            return;
                        }
                    }
                })
                .detach();
            }
            while !released.load(Ordering::SeqCst) {
                *report.lock().unwrap() = Some(shards::recv_buffers());
                shards::sleep(Duration::from_millis(5)).await;
            }
            // One buffer back; the other stays held.
            bufs.pop();
            futures_lite::future::pending::<()>().await;
        }
    });
    let address = wait_for(&address);
    let mut holder = connect(address);
    holder.write_all(&[b'h'; 128]).unwrap();
    assert_eq!(wait_for(&holding).lent, 2, "the holder has the ring");
    let idle: Vec<_> = (0..2)
        .map(|_| {
            let client = connect(address);
            std::thread::sleep(Duration::from_millis(30));
            client
        })
        .collect();
    let mut busy = connect(address);
    busy.write_all(b"ping").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = wait_for(&waiting);
        if seen.waiting == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "not all waiting: {seen:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    release.store(true, Ordering::SeqCst);
    let mut back = [0u8; 4];
    busy.read_exact(&mut back)
        .expect("the waiting bytes are served once a buffer is back");
    assert_eq!(&back, b"ping");
    drop((idle, holder));
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A connection that reached its bound receives one buffer per submission
/// only until it catches up: once a receive finds its socket drained it is
/// back on a multishot receive, not paying a submission per read for life.
#[test]
fn a_connection_that_caught_up_leaves_one_buffer_receives() {
    let mut config = one_core();
    config.recv_buffers_per_conn_max = 2;
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let stats = Arc::new(Mutex::new(None::<RecvBufferStats>));
    let report = stats.clone();
    let (runtime, shutdown) = on_a_core(config, move || {
        let (published, report) = (published.clone(), report.clone());
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            let stream = listener.accept().await.expect("accept");
            // Two buffers held at once: the bound.
            let first = stream.recv().await.expect("recv").expect("bytes");
            let second = stream.recv().await.expect("recv").expect("bytes");
            *report.lock().unwrap() = Some(shards::recv_buffers());
            drop((first, second));
            while let Ok(Some(buf)) = stream.recv().await {
                *report.lock().unwrap() = Some(shards::recv_buffers());
                if stream.send_all(buf.to_vec()).await.0.is_err() {
                    return;
                }
            }
        }
    });
    let mut client = connect(wait_for(&address));
    // Two buffers' worth (64 bytes each), held by the reader.
    client.write_all(&[b'x'; 128]).unwrap();
    let at_bound = wait_for(&stats);
    assert!(at_bound.held_max_total >= 1, "{at_bound:?}");
    round_trips(&mut client, b"small", 1);
    let caught_up = wait_for(&stats).capped_receives_total;
    round_trips(&mut client, b"small", 20);
    let after = wait_for(&stats).capped_receives_total;
    assert!(
        after - caught_up <= 1,
        "{} one-buffer receives for 20 reads after the reader caught up",
        after - caught_up
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
