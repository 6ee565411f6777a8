//! Sends on one stream through a socket whose buffer holds a sliver of
//! each: every send is cut short by the kernel many times, and still each
//! completes whole and the peer gets the bytes in the order the sends were
//! started, also when several are in flight at once and one is dropped.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shards::net::TcpStream;

mod common;
use common::{on_a_core, one_core, wait_for};

/// Bytes of each send: many times what the socket buffers hold.
const SEND_BYTES: usize = 128 << 10;
/// The socket buffers asked for on both ends (the kernel doubles it).
const SOCKET_BUFFER_BYTES: usize = 4096;

#[test]
fn short_sends_complete_whole_and_in_the_order_started() {
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket2::SockRef::from(&peer)
        .set_recv_buffer_size(SOCKET_BUFFER_BYTES)
        .unwrap();
    let address = peer.local_addr().unwrap();
    let outcome = Arc::new(Mutex::new(None::<Vec<String>>));
    let record = outcome.clone();
    let (runtime, shutdown) = on_a_core(one_core(), move || {
        let record = record.clone();
        async move {
            let stream = TcpStream::connect(address).await.expect("connect");
            socket2::SockRef::from(&stream)
                .set_send_buffer_size(SOCKET_BUFFER_BYTES)
                .expect("SO_SNDBUF");
            // Four sends started before any is awaited; the third is
            // dropped at once and must still go out in its place.
            let a = stream.start_send(vec![b'a'; SEND_BYTES]);
            let b = stream.start_send(vec![b'b'; SEND_BYTES]);
            drop(stream.start_send(vec![b'c'; SEND_BYTES]));
            let d = stream.start_send(vec![b'd'; SEND_BYTES]);
            let mut seen = Vec::new();
            for send in [d, b, a] {
                let (sent, buf) = send.await;
                seen.push(format!("{sent:?} {}", buf[0] as char));
            }
            drop(stream);
            *record.lock().unwrap() = Some(seen);
            futures_lite::future::pending::<()>().await;
        }
    });
    let (mut accepted, _) = peer.accept().unwrap();
    accepted
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // A slow reader: the core's sends find the socket full again and again.
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match accepted.read(&mut chunk).expect("read") {
            0 => break,
            n => got.extend_from_slice(&chunk[..n]),
        }
        if got.len() % (16 << 10) < chunk.len() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let want: Vec<u8> = [b'a', b'b', b'c', b'd']
        .iter()
        .flat_map(|&byte| std::iter::repeat_n(byte, SEND_BYTES))
        .collect();
    assert_eq!(got.len(), want.len(), "bytes lost or added");
    if let Some(at) = got.iter().zip(&want).position(|(got, want)| got != want) {
        panic!(
            "bytes out of order at {at}: got {:?}, want {:?}",
            got[at] as char, want[at] as char
        );
    }
    let ok = format!("Ok({SEND_BYTES})");
    assert_eq!(
        wait_for(&outcome),
        [format!("{ok} d"), format!("{ok} b"), format!("{ok} a")]
    );
    shutdown.trigger();
    runtime.join().expect("clean stop");
}
