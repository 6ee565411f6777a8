//! A listener dropped with accepted connections still queued in its
//! multishot accept: every client behind them sees its connection closed.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shards::net::TcpListener;

mod common;
use common::{on_a_core, one_core, wait_for};

/// Clients that connect after the first one was accepted.
const QUEUED_CLIENTS: usize = 16;

#[test]
fn a_dropped_listener_closes_the_connections_it_accepted_but_never_handed_out() {
    let address = Arc::new(Mutex::new(None::<SocketAddr>));
    let published = address.clone();
    let all_connected = Arc::new(AtomicBool::new(false));
    let connected = all_connected.clone();
    let dropped = Arc::new(Mutex::new(None::<()>));
    let report = dropped.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let published = published.clone();
        let connected = connected.clone();
        let report = report.clone();
        async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            *published.lock().unwrap() = Some(listener.local_addr());
            // The first accept arms the multishot; the connections after it
            // are accepted by the kernel into its completions, which nobody
            // takes.
            let first = listener.accept().await.expect("accept");
            while !connected.load(Ordering::SeqCst) {
                shards::sleep(Duration::from_millis(2)).await;
            }
            shards::sleep(Duration::from_millis(50)).await;
            drop(listener);
            drop(first);
            *report.lock().unwrap() = Some(());
            futures_lite::future::pending::<()>().await;
        }
    });
    let address = wait_for(&address);
    let connect = || common::connect(address, Duration::from_secs(3));
    let mut first = connect();
    let mut queued: Vec<std::net::TcpStream> = (0..QUEUED_CLIENTS).map(|_| connect()).collect();
    all_connected.store(true, Ordering::SeqCst);
    wait_for(&dropped);
    let mut byte = [0u8; 1];
    assert_eq!(
        first.read(&mut byte).expect("the handed-out stream closes"),
        0
    );
    for (n, client) in queued.iter_mut().enumerate() {
        match client.read(&mut byte) {
            Ok(0) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("client {n} was not closed: {other:?}"),
        }
    }
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
