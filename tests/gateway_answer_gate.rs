//! The answer gate on the real gateway driver and a real TCP connection: a
//! successful answer queued while the node's lease has run out (a process
//! paused after making it) is not written until a heartbeat renews the
//! lease, and a fence drops it with the connection.

mod support;

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::atomic::AtomicU32;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use routerd::gateway::driver::{serve, GatewayShared};
use routerd::gateway::GatewayHandle;
use routerd::metrics::CoreMetrics;
use shards::{CorePlacement, Runtime, RuntimeConfig, ShutdownHandle};
use support::port::RecordingPort;
use support::token;
use wire::client::{encode_frame, route, FrameDecoder, FrameKind, Peer};
use wire::frame::FrameBuf;

/// What the test asks of the core's router side.
#[derive(Debug)]
enum Lease {
    /// The lease ran out long ago (a pause past its end).
    Lapsed,
    /// A heartbeat renewed it.
    Renewed,
    /// The node was declared down.
    Fenced,
}

/// A raw client: the login is written, and what comes back is read with a
/// short timeout, so that "nothing yet" is an answer.
struct RawClient {
    stream: TcpStream,
    decoder: FrameDecoder,
}

enum Read1 {
    Frame(FrameKind),
    Nothing,
    Closed,
}

impl RawClient {
    fn login(address: SocketAddr, player_id: u64) -> RawClient {
        let mut stream = TcpStream::connect(address).unwrap();
        let mut bytes = Vec::new();
        let token = token(player_id, 3600);
        encode_frame(
            &mut bytes,
            FrameKind::Request,
            route::AUTH_LOGIN,
            1,
            token.as_bytes(),
        );
        stream.write_all(&bytes).unwrap();
        RawClient {
            stream,
            decoder: FrameDecoder::new(Peer::Server, 1 << 16),
        }
    }

    fn send(&mut self, route_id: u32, seq: u32, body: &[u8]) {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, FrameKind::Request, route_id, seq, body);
        self.stream.write_all(&bytes).unwrap();
    }

    fn read_within(&mut self, limit: Duration) -> Read1 {
        self.stream.set_read_timeout(Some(limit)).unwrap();
        loop {
            if let Some(frame) = self.decoder.next_frame().unwrap() {
                return Read1::Frame(frame.header.kind);
            }
            match self.stream.read(self.decoder.read_buf()) {
                Ok(0) => return Read1::Closed,
                Ok(n) => self.decoder.advance(n),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Read1::Nothing
                }
                Err(_) => return Read1::Closed,
            }
        }
    }
}

/// One core serving the gateway, whose answer gate follows `leases`; each
/// change is acknowledged on `done`.
fn start_core(
    leases: Receiver<Lease>,
    done: Sender<()>,
) -> (Runtime, ShutdownHandle, SocketAddr, Arc<CoreMetrics>) {
    let mut runtime_config = RuntimeConfig::new(CorePlacement::Unpinned(1));
    runtime_config.recv_buffers = 64;
    runtime_config.shutdown_deadline = Duration::from_secs(1);
    let config = support::config();
    let shared = Arc::new(GatewayShared {
        node_id: config.node.id,
        config: config.gateway.clone(),
        secret: support::SECRET.as_bytes().to_vec(),
        boot_incarnation: 1,
        sessions_open: Arc::new(AtomicU32::new(0)),
        routes: Arc::new(routerd::builtins::builtin_routes()),
        resume: Default::default(),
    });
    let metrics = Arc::new(CoreMetrics::default());
    let (address_tx, address_rx) = channel();
    let leases = Arc::new(Mutex::new(leases));
    let shutdown = ShutdownHandle::new();
    let core_metrics = metrics.clone();
    let runtime =
        Runtime::start::<FrameBuf, _, _>(&runtime_config, shutdown.clone(), move |core| {
            let (shared, metrics, address_tx, leases, done) = (
                shared.clone(),
                core_metrics.clone(),
                address_tx.clone(),
                leases.clone(),
                done.clone(),
            );
            async move {
                let listener =
                    shards::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).expect("bind");
                address_tx.send(listener.local_addr()).unwrap();
                let gateway = GatewayHandle::new(core.id(), core.mesh().clone(), &shared, metrics);
                let bound = Rc::new(RefCell::new(Vec::new()));
                gateway.set_services_side(Rc::new(RecordingPort::plugged(&gateway, &bound)));
                let gate = gateway.answer_gate();
                // The router's part: a lease that holds, as after a heartbeat.
                gate.publish(Some(u64::MAX - 1));
                shards::spawn(serve(gateway.clone(), listener, Vec::new())).detach();
                // The router's part, played from the test thread (polled:
                // the test thread is not on this executor).
                shards::spawn(async move {
                    loop {
                        let next = leases.lock().unwrap().try_recv();
                        match next {
                            Ok(Lease::Lapsed) => gate.publish(Some(1)),
                            Ok(Lease::Renewed) => gate.publish(Some(u64::MAX - 1)),
                            Ok(Lease::Fenced) => gate.fence(),
                            Err(std::sync::mpsc::TryRecvError::Empty) => {
                                shards::sleep(Duration::from_millis(2)).await;
                                continue;
                            }
                            Err(_) => return,
                        }
                        done.send(()).unwrap();
                    }
                })
                .detach();
                core.ready();
                core.shutdown().wait().await;
            }
        })
        .expect("runtime starts");
    let address = address_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the core listens");
    (runtime, shutdown, address, metrics)
}

#[test]
fn answers_wait_for_a_renewed_lease_and_a_fence_drops_them_with_the_connection() {
    let (lease_tx, lease_rx) = channel();
    let (done_tx, done_rx) = channel();
    let (runtime, shutdown, address, metrics) = start_core(lease_rx, done_tx);
    let set = |lease: Lease| {
        lease_tx.send(lease).unwrap();
        done_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    };

    // With the lease holding, a login's answer leaves at once.
    let mut first = RawClient::login(address, 1);
    assert!(matches!(
        first.read_within(Duration::from_secs(5)),
        Read1::Frame(FrameKind::Response)
    ));

    // Past the lease's end the answer waits...
    set(Lease::Lapsed);
    let mut waiting = RawClient::login(address, 2);
    assert!(matches!(
        waiting.read_within(Duration::from_millis(400)),
        Read1::Nothing
    ));
    // A request read meanwhile polls the connection again: the batch
    // that waits is counted once.
    waiting.send(route::SYS_PING, 2, b"");
    assert!(matches!(
        waiting.read_within(Duration::from_millis(200)),
        Read1::Nothing
    ));
    assert_eq!(metrics.gateway.answers_held.get(), 1);
    // ...and leaves when a heartbeat renews the lease.
    set(Lease::Renewed);
    assert!(matches!(
        waiting.read_within(Duration::from_secs(5)),
        Read1::Frame(FrameKind::Response)
    ));

    // Past the lease's end again, and the node is declared down: the
    // answer never leaves, and its connection closes.
    set(Lease::Lapsed);
    let mut dropped = RawClient::login(address, 3);
    assert!(matches!(
        dropped.read_within(Duration::from_millis(400)),
        Read1::Nothing
    ));
    set(Lease::Fenced);
    // A rejoin right after must not let it out either.
    set(Lease::Renewed);
    assert!(matches!(
        dropped.read_within(Duration::from_secs(5)),
        Read1::Closed
    ));

    shutdown.trigger();
    runtime.join().expect("the core exits cleanly");
}
