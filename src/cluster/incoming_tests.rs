//! The accepting side on loopback, against diallers played by hand (they
//! send only what a test says) or by a core's own links: who may link in,
//! and that no link in outlives its dialler's interest in it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::mpsc;

use super::*;
use crate::answer_gate::AnswerGate;
use crate::cluster::conn::send_all_progressing;
use crate::cluster::view::Standing;
use crate::gateway_addresses::GatewayAddresses;
use crate::router::driver::{Destination, NodeLinks};
use crate::store::MemberState;
use wire::frame::Message;

/// The links' ping interval: short, so that three of them pass within a
/// test's time.
const PING: Duration = Duration::from_millis(100);
/// The acceptor, at its incarnation.
const ME: NodeId = NodeId(1);
const ME_INCARNATION: u64 = 1;
/// The dialling node, at its incarnation.
const DIALLER: NodeId = NodeId(2);
const DIALLER_INCARNATION: u64 = 5;

fn peer(node: u64, incarnation: u64, state: MemberState) -> Peer {
    Peer {
        node: NodeId(node),
        incarnation,
        state,
        cores: Vec::new(),
        gateway: GatewayAddresses::default(),
        admin: String::new(),
        timers: None,
    }
}

#[test]
fn only_members_link_in_and_only_at_a_live_incarnation() {
    let peers: BTreeMap<NodeId, Peer> = [
        (NodeId(2), peer(2, 5, MemberState::Up)),
        (NodeId(3), peer(3, 4, MemberState::Down)),
    ]
    .into();
    assert_eq!(admission(&peers, NodeId(2), 5), Ok(()));
    assert_eq!(admission(&peers, NodeId(2), 6), Ok(()), "rejoined");
    assert_eq!(
        admission(&peers, NodeId(2), 4),
        Err(Refusal::StaleIncarnation)
    );
    assert_eq!(
        admission(&peers, NodeId(3), 4),
        Err(Refusal::StaleIncarnation)
    );
    assert_eq!(admission(&peers, NodeId(9), 1), Err(Refusal::NotMember));
}

fn settings(me: NodeId, ping_interval: Duration) -> LinkSettings {
    LinkSettings {
        cluster: "test".to_string(),
        secret: b"the tests' cluster secret".to_vec(),
        me,
        core: 0,
        queue_max: 64,
        ping_interval,
        handshake_timeout: ping_interval * SUSPECT_AFTER_PINGS,
    }
}

/// A view of `me` at `incarnation` whose one other member is `peer`.
fn view(me: NodeId, incarnation: u64, peer: Peer) -> Arc<ClusterView> {
    let standing = Standing {
        incarnation,
        lease_until_ms: u64::MAX,
        fenced: false,
        state: MemberState::Up,
    };
    let view = Arc::new(ClusterView::new(me, 1, standing));
    view.update(|_, peers| {
        peers.insert(peer.node, peer);
    });
    view
}

/// Runs `body` on a core of its own and gives back what it returned: the
/// test's thread asserts on it (a panic on a core stops the process).
fn on_a_core<T, F, Fut>(body: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + Clone + 'static,
    Fut: Future<Output = T> + 'static,
{
    let (report, reported) = mpsc::channel();
    let shutdown = shards::ShutdownHandle::new();
    let mut config = shards::RuntimeConfig::new(shards::CorePlacement::Unpinned(1));
    config.shutdown_deadline = Duration::from_secs(2);
    let runtime = shards::Runtime::start::<(), _, _>(&config, shutdown.clone(), move |core| {
        let (report, body) = (report.clone(), body.clone());
        async move {
            core.ready();
            let _ = report.send(body().await);
            core.shutdown().wait().await;
        }
    })
    .expect("runtime starts");
    let result = reported.recv_timeout(Duration::from_secs(30));
    shutdown.trigger();
    runtime.join().expect("the core ends");
    result.expect("the core reported")
}

/// Node 1's core 0 accepting links on loopback; its view holds node 2 up.
struct Acceptor {
    incoming: Incoming,
    address: SocketAddr,
    metrics: Arc<CoreMetrics>,
    /// How many messages it handed on.
    handed_on: Rc<Cell<usize>>,
}

impl Acceptor {
    fn start(ping_interval: Duration) -> Acceptor {
        let view = view(
            ME,
            ME_INCARNATION,
            peer(DIALLER.0, DIALLER_INCARNATION, MemberState::Up),
        );
        let settings = settings(ME, ping_interval);
        let metrics = Arc::new(CoreMetrics::default());
        let links = CoreLinks::new(
            settings.clone(),
            view.clone(),
            metrics.clone(),
            Rc::default(),
        );
        let handed_on = Rc::new(Cell::new(0));
        let counted = handed_on.clone();
        let dispatch: Dispatch = Rc::new(move |_, _, _| counted.set(counted.get() + 1));
        let incoming = Incoming::new(settings, view, dispatch, links, metrics.clone());
        let listener = TcpListener::bind(([127, 0, 0, 1], 0).into()).expect("a loopback port");
        let address = listener.local_addr();
        shards::spawn(incoming.clone().serve(listener)).detach();
        Acceptor {
            incoming,
            address,
            metrics,
            handed_on,
        }
    }

    /// The links in its list, open or ended.
    fn links_listed(&self) -> usize {
        self.incoming.0.incoming.borrow().len()
    }

    fn closed_silent(&self) -> u64 {
        self.metrics.cluster.links_closed_silent.get()
    }
}

/// A link node 2's core `core` dialled to the acceptor by hand: after
/// the handshake it sends only what the test says.
struct HandDialled {
    stream: Rc<TcpStream>,
    sealer: codec::Sealer,
}

impl HandDialled {
    async fn dial(to: SocketAddr, core: usize) -> HandDialled {
        let stream = TcpStream::connect(to).await.expect("connects");
        let mut conn = Conn::new(stream, Instant::now() + Duration::from_secs(5));
        let settings = settings(DIALLER, PING);
        let local = LocalEnd {
            cluster: &settings.cluster,
            secret: &settings.secret,
            node: DIALLER,
            incarnation: DIALLER_INCARNATION,
            core,
        };
        let accepted = conn.dial(&local, (ME, 0), ME_INCARNATION).await;
        let accepted = accepted.expect("the handshake passes");
        let (stream, sealer, _) = conn.into_link(&accepted.keys, End::Dialler);
        HandDialled { stream, sealer }
    }

    /// How long until the acceptor ended the link, if it did within
    /// `patience`; what it sends meanwhile (pongs) is read and dropped.
    async fn ended_within(&self, patience: Duration) -> Option<Duration> {
        let started = Instant::now();
        loop {
            match before(started + patience, self.stream.recv()).await {
                None => return None,
                Some(Ok(Some(_))) => continue,
                Some(Ok(None) | Err(_)) => return Some(started.elapsed()),
            }
        }
    }

    /// Pings `count` times a ping interval apart, as a dialler with
    /// nothing else to send does; whether the link stayed open throughout.
    async fn ping(&mut self, count: u64) -> bool {
        for nonce in 0..count {
            let mut ping = codec::Batch::new();
            ping.ping(nonce);
            self.sealer.seal(&mut ping);
            if self.stream.send_all(ping.take_sealed()).await.0.is_err() {
                return false;
            }
            if self.ended_within(PING).await.is_some() {
                return false;
            }
        }
        true
    }
}

/// A dialler that finished its handshake and then sent nothing (it gave
/// the link up across a cut that lost its reset, or it hangs) has its link
/// closed after three ping intervals, counted; before, it held the
/// connection, its descriptor and its task for good.
#[test]
fn a_link_in_that_stays_silent_is_closed_after_three_ping_intervals() {
    let (ended, closed_silent) = on_a_core(|| async {
        let acceptor = Acceptor::start(PING);
        let link = HandDialled::dial(acceptor.address, 0).await;
        let ended = link.ended_within(PING * 20).await;
        (ended, acceptor.closed_silent())
    });
    let ended = ended.expect("the silent link was not closed within 20 ping intervals");
    assert!(
        ended >= PING * 5 / 2 && ended <= PING * 6,
        "closed {ended:?} after the handshake, for a ping interval of {PING:?}"
    );
    assert_eq!(closed_silent, 1);
}

/// The silence is counted from the last bytes that arrived: a dialler
/// that only pings, every interval, keeps its link however long.
#[test]
fn a_link_in_whose_dialler_pings_stays_open() {
    let (stayed, closed_silent) = on_a_core(|| async {
        let acceptor = Acceptor::start(PING);
        let mut link = HandDialled::dial(acceptor.address, 0).await;
        let stayed = link.ping(3 * u64::from(SUSPECT_AFTER_PINGS)).await;
        (stayed, acceptor.closed_silent())
    });
    assert!(stayed, "a link whose dialler pings was closed");
    assert_eq!(closed_silent, 0);
}

/// A dialler keeps one link to each core, so a new link from one of its
/// cores closes the one that core had: at once, long before its silence
/// would (a ping interval of 1 s here: 3 s). A link from its other core
/// stays, and so does the new one.
#[test]
fn a_new_link_from_a_dialling_core_closes_the_one_it_had() {
    let (first, other_core, second, listed) = on_a_core(|| async {
        let acceptor = Acceptor::start(PING * 10);
        let first = HandDialled::dial(acceptor.address, 0).await;
        let other_core = HandDialled::dial(acceptor.address, 1).await;
        let second = HandDialled::dial(acceptor.address, 0).await;
        (
            first.ended_within(PING * 5).await,
            other_core.ended_within(PING).await,
            second.ended_within(PING).await,
            acceptor.links_listed(),
        )
    });
    assert!(first.is_some(), "the link core 0 had stayed open");
    assert_eq!(other_core, None, "core 1's link was closed");
    assert_eq!(second, None, "core 0's new link was closed");
    assert_eq!(listed, 2);
}

/// Links that ended leave the acceptor's list as the next is added:
/// however many came and went, it holds no more than the links open.
#[test]
fn links_in_that_ended_leave_the_list_as_the_next_is_added() {
    let listed = on_a_core(|| async {
        let acceptor = Acceptor::start(PING * 10);
        // From four cores, so none replaces another: each one ends
        // (its dialler closes it) before the next is dialled.
        for core in 0..4 {
            let link = HandDialled::dial(acceptor.address, core).await;
            link.stream.shutdown();
            shards::sleep(PING / 2).await;
        }
        let _open = HandDialled::dial(acceptor.address, 4).await;
        acceptor.links_listed()
    });
    assert_eq!(listed, 1);
}

/// A successful answer for node 1.
fn answer() -> Message {
    Message::RouterReply {
        origin_node: 1,
        request_seq: 7,
        error_code: 0,
        body: Vec::new(),
    }
}

/// A dialling core's writer that holds an answer while the answer gate is
/// shut (its node's lease ran out) keeps pinging: a ping acknowledges
/// nothing, and a link silent for three intervals looks dead to the
/// acceptor. The answer leaves once the gate opens.
#[test]
fn a_writer_waiting_at_the_answer_gate_keeps_pinging_and_its_link_open() {
    let (while_shut, after, closed_silent) = on_a_core(|| async {
        let acceptor = Acceptor::start(PING);
        let mut node_1 = peer(ME.0, ME_INCARNATION, MemberState::Up);
        node_1.cores = vec![acceptor.address];
        let view = view(DIALLER, DIALLER_INCARNATION, node_1);
        let gate = Rc::new(AnswerGate::default());
        gate.publish(Some(0));
        let metrics = Arc::new(CoreMetrics::default());
        let links = CoreLinks::new(settings(DIALLER, PING), view, metrics, gate.clone());
        let queued = links.send(ME, Destination::Core(0), &answer());
        shards::sleep(PING * 3 * SUSPECT_AFTER_PINGS).await;
        let records = &acceptor.metrics.cluster.records_received;
        let while_shut = (acceptor.handed_on.get(), records.get());
        gate.publish(Some(u64::MAX));
        for _ in 0..20 {
            if acceptor.handed_on.get() > 0 {
                break;
            }
            shards::sleep(PING / 2).await;
        }
        let after = (queued, acceptor.handed_on.get());
        (while_shut, after, acceptor.closed_silent())
    });
    let (handed_on, records) = while_shut;
    assert_eq!(handed_on, 0, "an answer passed the shut gate");
    // A ping every interval, each in a record of its own.
    assert!(
        records >= u64::from(SUSPECT_AFTER_PINGS) * 2,
        "{records} records arrived while the gate was shut for {} ping intervals",
        3 * SUSPECT_AFTER_PINGS
    );
    assert_eq!(
        after,
        (Ok(()), 1),
        "the answer did not arrive once the gate opened"
    );
    assert_eq!(closed_silent, 0);
}

/// A peer that reads a large batch slowly but steadily is not silent: the
/// batch crosses in pieces, each within the silence allowed, though the
/// whole takes several times that. Under one deadline for the whole batch
/// the link was closed as silent, and its frames failed.
#[test]
fn a_slow_but_steady_reader_is_not_taken_for_a_silent_peer() {
    use std::io::Read;
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    listener
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    listener.listen(1).unwrap();
    let address = listener.local_addr().unwrap().as_socket().unwrap();
    const TOTAL: usize = 24 << 20;
    let reader = std::thread::spawn(move || {
        let mut stream: std::net::TcpStream = listener.accept().unwrap().0.into();
        let (mut read, mut buf) = (0, vec![0u8; 64 << 10]);
        while read < TOTAL {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        read
    });
    let silence = Duration::from_millis(1000);
    let (sent, took) = on_a_core(move || async move {
        let stream = TcpStream::connect(address).await.unwrap();
        let started = std::time::Instant::now();
        let sent = send_all_progressing(&stream, vec![7u8; TOTAL], silence).await;
        (sent.map(|(result, _)| result.is_ok()), started.elapsed())
    });
    assert_eq!(sent, Some(true), "sent in {took:?}");
    assert!(took > silence, "the reader was not slow: {took:?}");
    assert_eq!(reader.join().unwrap(), TOTAL);
}
