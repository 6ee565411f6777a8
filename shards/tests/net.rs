//! TCP through a core's ring, wakes from other threads, and a core that
//! sleeps when idle.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shards::net::{TcpListener, TcpStream};
use shards::TaskRun;

mod common;
use common::{accept_and_read_all, connect, on_a_core, one_core, process_cpu, wait_for};

/// An echo server on the core: many small receives through the buffer
/// ring (8 buffers of 64 bytes, so they are reused), sends of owned
/// buffers, and the end of stream when the client closes.
#[test]
fn echo_through_the_ring_reuses_receive_buffers() {
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let served = Arc::new(AtomicUsize::new(0));
    let counted = served.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let published = published.clone();
        let counted = counted.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            loop {
                let stream = listener.accept().await.expect("accept");
                let counted = counted.clone();
                shards::spawn(async move {
                    stream.set_nodelay(true).unwrap();
                    while let Some(buf) = stream.recv().await.expect("recv") {
                        let (sent, _) = stream.send_all(buf.to_vec()).await;
                        sent.expect("send");
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                })
                .detach();
            }
        }
    });
    let address = wait_for(&address);
    for _ in 0..3 {
        let mut client = connect(address, Duration::from_secs(5));
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let mut client = client.try_clone().unwrap();
            let payload = payload.clone();
            std::thread::spawn(move || client.write_all(&payload).unwrap())
        };
        let mut echoed = vec![0u8; payload.len()];
        client.read_exact(&mut echoed).expect("echo");
        writer.join().unwrap();
        assert_eq!(echoed, payload);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while served.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(served.load(Ordering::SeqCst), 3, "each end of stream seen");
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A connection made through the ring, and a refused one.
#[test]
fn connect_through_the_ring() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let refused = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        closed.local_addr().unwrap()
    };
    let outcome = Arc::new(Mutex::new(None::<(bool, bool)>));
    let record = outcome.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let record = record.clone();
        async move {
            let ok = match TcpStream::connect(address).await {
                Ok(stream) => {
                    let (sent, _) = stream.send_all(b"hi".to_vec()).await;
                    sent.is_ok()
                }
                Err(_) => false,
            };
            let refused_ok = TcpStream::connect(refused).await.is_err();
            *record.lock().unwrap() = Some((ok, refused_ok));
            futures_lite::future::pending::<()>().await;
        }
    });
    let (mut accepted, _) = listener.accept().unwrap();
    let mut hi = [0u8; 2];
    accepted.read_exact(&mut hi).unwrap();
    assert_eq!(&hi, b"hi");
    assert_eq!(wait_for(&outcome), (true, true));
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A send started and awaited later (or never) still goes out, in the
/// order started, and its buffer comes back to whoever awaits it.
#[test]
fn a_started_send_completes_without_being_awaited() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let outcome = Arc::new(Mutex::new(None::<Vec<String>>));
    let record = outcome.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let record = record.clone();
        async move {
            let stream = TcpStream::connect(address).await.expect("connect");
            let mut seen = Vec::new();
            let first = stream.start_send(b"one,".to_vec());
            // Turns pass and the send completes with nobody waiting on it.
            shards::sleep(Duration::from_millis(5)).await;
            let (sent, buf) = first.await;
            seen.push(format!("{sent:?} {}", String::from_utf8_lossy(&buf)));
            let (sent, buf) = stream.start_send(b"two,".to_vec()).await;
            seen.push(format!("{sent:?} {}", String::from_utf8_lossy(&buf)));
            // Dropped at once: the kernel keeps the buffer and sends it.
            drop(stream.start_send(b"three".to_vec()));
            shards::sleep(Duration::from_millis(5)).await;
            drop(stream);
            *record.lock().unwrap() = Some(seen);
            futures_lite::future::pending::<()>().await;
        }
    });
    assert_eq!(accept_and_read_all(&listener), b"one,two,three");
    assert_eq!(wait_for(&outcome), ["Ok(4) one,", "Ok(4) two,"]);
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// Streams past the registered file table's size use their descriptor and
/// work the same; a closed stream's index returns to the table once its
/// close completes, and the next stream takes it.
#[test]
fn streams_past_the_file_table_use_descriptors_and_indexes_come_back() {
    let mut config = one_core();
    config.registered_files = 4;
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let stats = Arc::new(Mutex::new(None::<shards::FileTableStats>));
    let report = stats.clone();
    let (runtime, shutdown) = on_a_core(config, move || {
        let published = published.clone();
        let report = report.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            shards::spawn(async move {
                loop {
                    *report.lock().unwrap() = Some(shards::file_table());
                    shards::sleep(Duration::from_millis(2)).await;
                }
            })
            .detach();
            loop {
                let stream = listener.accept().await.expect("accept");
                shards::spawn(async move {
                    while let Some(buf) = stream.recv().await.expect("recv") {
                        let (sent, _) = stream.send_all(buf.to_vec()).await;
                        sent.expect("send");
                    }
                })
                .detach();
            }
        }
    });
    let address = wait_for(&address);
    let expect = |in_use: u32, unregistered: u64| {
        let want = shards::FileTableStats {
            in_use,
            unregistered,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let seen = stats.lock().unwrap().unwrap_or(shards::FileTableStats {
                in_use: u32::MAX,
                unregistered: u64::MAX,
            });
            if seen == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "file table {seen:?}, want {want:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    let echo = |client: &mut std::net::TcpStream, tag: u8| {
        let payload = vec![tag; 300];
        client.write_all(&payload).unwrap();
        let mut back = vec![0u8; payload.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, payload, "connection {tag}");
    };

    let mut first: Vec<std::net::TcpStream> = (0..6)
        .map(|_| connect(address, Duration::from_secs(5)))
        .collect();
    for (tag, client) in first.iter_mut().enumerate() {
        echo(client, tag as u8);
    }
    expect(4, 2);
    drop(first);
    expect(0, 2);
    let mut second: Vec<std::net::TcpStream> = (0..4)
        .map(|_| connect(address, Duration::from_secs(5)))
        .collect();
    for (tag, client) in second.iter_mut().enumerate() {
        echo(client, 10 + tag as u8);
    }
    expect(4, 2);
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A send still queued for a stream that is then dropped goes to that
/// stream's socket, never to the next stream's: the dropped stream's index
/// stays taken until the ring has closed it, so a stream made meanwhile
/// gets another index (here, with a table of one, none).
#[test]
fn a_queued_send_of_a_dropped_stream_never_reaches_the_next_stream() {
    let mut config = one_core();
    config.registered_files = 1;
    let first_peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let second_peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let first_address = first_peer.local_addr().unwrap();
    let second_address = second_peer.local_addr().unwrap();
    // What the core saw: the table after the second stream was made, each
    // later send's outcome (a send through another stream's index fails),
    // and the table at the end.
    type Seen = (shards::FileTableStats, Vec<String>, shards::FileTableStats);
    let seen = Arc::new(Mutex::new(None::<Seen>));
    let record = seen.clone();
    let (runtime, shutdown) = on_a_core(config, move || {
        let record = record.clone();
        async move {
            let first = TcpStream::connect(first_address).await.expect("first");
            {
                // Queue the send (one poll pushes its submission) and drop
                // it and its stream before the ring sees the queue.
                let mut send = Box::pin(first.send(b"first".to_vec()));
                assert!(futures_lite::future::poll_once(&mut send).await.is_none());
            }
            drop(first);
            let second = TcpStream::connect(second_address).await.expect("second");
            let while_closing = shards::file_table();
            let mut sends = Vec::new();
            let (sent, _) = second.send_all(b"second".to_vec()).await;
            sends.push(format!("second: {sent:?}"));
            drop(second);
            let third = TcpStream::connect(second_address).await.expect("third");
            let (sent, _) = third.send_all(b"third".to_vec()).await;
            sends.push(format!("third: {sent:?}"));
            *record.lock().unwrap() = Some((while_closing, sends, shards::file_table()));
            futures_lite::future::pending::<()>().await;
        }
    });
    let to_first = accept_and_read_all(&first_peer);
    assert!(
        to_first.is_empty() || to_first == b"first",
        "the first peer got {to_first:?}"
    );
    let (while_closing, sends, after) = wait_for(&seen);
    assert_eq!(sends, ["second: Ok(())", "third: Ok(())"]);
    assert_eq!(accept_and_read_all(&second_peer), b"second");
    assert_eq!(
        while_closing.unregistered, 1,
        "the second stream found the only index still closing: {while_closing:?}"
    );
    assert_eq!(
        after,
        shards::FileTableStats {
            in_use: 1,
            unregistered: 1
        },
        "the third stream took the index back"
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}

/// A future completed on another thread (as a store reply is) wakes a core
/// that sleeps in the kernel, and an idle core uses almost no CPU.
#[test]
fn a_sleeping_core_wakes_for_another_thread_and_idles_cheaply() {
    for mode in [TaskRun::Defer, TaskRun::Coop] {
        let mut config = one_core();
        config.ring_taskrun = mode;
        let (sender, receiver) =
            std::sync::mpsc::channel::<futures_channel::oneshot::Sender<u32>>();
        let sender = Arc::new(Mutex::new(sender));
        let got = Arc::new(Mutex::new(None::<u32>));
        let record = got.clone();
        let (runtime, shutdown) = on_a_core(config, move || {
            let sender = sender.clone();
            let record = record.clone();
            async move {
                let (reply, answer) = futures_channel::oneshot::channel();
                sender.lock().unwrap().send(reply).unwrap();
                *record.lock().unwrap() = answer.await.ok();
                futures_lite::future::pending::<()>().await;
            }
        });
        let reply = receiver.recv().unwrap();
        // Let the core park, and measure what it costs meanwhile.
        std::thread::sleep(Duration::from_millis(50));
        let before = process_cpu();
        std::thread::sleep(Duration::from_millis(300));
        let idle_cpu = process_cpu() - before;
        assert!(
            idle_cpu < Duration::from_millis(60),
            "{mode:?}: an idle core used {idle_cpu:?} of CPU in 300 ms"
        );
        reply.send(42).unwrap();
        assert_eq!(wait_for(&got), 42, "{mode:?}");
        shutdown.trigger();
        runtime.join().expect("clean stop");
    }
}

/// A connection closed while an older one idles with its receive armed
/// ends at once for its peer (on kernels before 6.13 the registered file
/// table would keep it open behind the idle receive; the runtime then
/// names sockets by descriptor).
#[test]
fn a_closed_connection_ends_while_an_older_one_idles() {
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let published = published.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            // The first connection idles; each later one is closed as soon
            // as it sent a byte.
            let idle = listener.accept().await.expect("accept");
            shards::spawn(async move { while let Ok(Some(_)) = idle.recv().await {} }).detach();
            loop {
                let stream = listener.accept().await.expect("accept");
                shards::spawn(async move {
                    let _ = stream.recv().await;
                })
                .detach();
            }
        }
    });
    let address = wait_for(&address);
    let _idle = std::net::TcpStream::connect(address).expect("connect");
    std::thread::sleep(Duration::from_millis(20));
    for n in 0..3 {
        let mut client = connect(address, Duration::from_secs(2));
        client.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            client.read(&mut byte).map_err(|error| error.kind()),
            Ok(0),
            "connection {n} never ended ({})",
            shards::RegisteredFiles::name(shards::registered_files_mode())
        );
    }
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
