//! The engine's socket lifecycle on loopback: connect, refuse, close on
//! purpose, closed by the peer.

use std::net::{TcpListener, TcpStream};

use super::*;
use crate::cli::Proto;
use crate::clock::now_ns;

fn engine_with_one_slot() -> (Engine, TcpListener) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let stream = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let mut engine = Engine::new(1).expect("io_uring");
    engine
        .add(Conn::new(Proto::Routerd, 1, 0, 1, 1 << 16), stream)
        .expect("add");
    (engine, listener)
}

/// Pumps until a link event arrives (at most 5 s).
fn next_link_event(engine: &mut Engine) -> (usize, LinkEvent) {
    let deadline = now_ns() + 5_000_000_000;
    let mut stats = Stats::default();
    while engine.link_events.is_empty() {
        assert!(now_ns() < deadline, "no link event");
        engine
            .pump(10_000_000, now_ns, Window::NONE, &mut stats)
            .expect("pump");
    }
    engine.link_events.remove(0)
}

#[test]
fn a_closed_slot_reconnects_and_a_refused_connect_is_reported() {
    let (mut engine, listener) = engine_with_one_slot();
    let (_accepted, _) = listener.accept().expect("accept");
    // Post a recv, then close on purpose: the recv completes, the socket
    // goes, and the runner hears it was not the peer.
    let mut stats = Stats::default();
    engine
        .pump(0, now_ns, Window::NONE, &mut stats)
        .expect("pump");
    engine.close(0);
    assert_eq!(
        next_link_event(&mut engine),
        (0, LinkEvent::Down { by_peer: false })
    );
    assert_eq!(engine.slots[0].link(), Link::Down);
    assert!(engine.slots[0].idle());

    engine
        .connect(0, listener.local_addr().expect("addr"), 1_000_000_000)
        .expect("post");
    assert_eq!(engine.slots[0].link(), Link::Connecting);
    assert_eq!(next_link_event(&mut engine), (0, LinkEvent::Connected));
    assert!(engine.slots[0].is_open());
    let (accepted, _) = listener.accept().expect("the new connection");

    // The peer goes away: by_peer.
    drop(accepted);
    assert_eq!(
        next_link_event(&mut engine),
        (0, LinkEvent::Down { by_peer: true })
    );

    // Nobody listens on a closed port: refused, reported with its errno.
    let closed = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr")
    };
    engine.connect(0, closed, 1_000_000_000).expect("post");
    assert_eq!(
        next_link_event(&mut engine),
        (
            0,
            LinkEvent::ConnectFailed {
                errno: libc::ECONNREFUSED
            }
        )
    );
    assert_eq!(engine.slots[0].link(), Link::Down);
    assert!(!engine.busy(), "both the connect and its timeout completed");
}

#[test]
fn a_cut_resets_the_connection_without_an_orderly_end() {
    let (mut engine, listener) = engine_with_one_slot();
    let (mut accepted, _) = listener.accept().expect("accept");
    let mut stats = Stats::default();
    // A recv is posted: the cut must complete it.
    engine
        .pump(0, now_ns, Window::NONE, &mut stats)
        .expect("pump");
    engine.cut(0);
    assert_eq!(
        next_link_event(&mut engine),
        (0, LinkEvent::Down { by_peer: false })
    );
    assert!(engine.slots[0].idle());
    // The peer reads a reset, not the end of stream a FIN would give.
    accepted
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    let read = std::io::Read::read(&mut accepted, &mut buf);
    assert_eq!(
        read.map_err(|error| error.kind()),
        Err(std::io::ErrorKind::ConnectionReset)
    );
}
