//! One core's listener for links from other nodes' cores. A connection
//! must send its Hello within a heartbeat interval and finish its
//! handshake within the handshake timeout, and at most `HANDSHAKES_MAX`
//! may be handshaking at once: past that the oldest is closed to admit
//! the newest, so connections that never prove themselves cost a bounded
//! amount and cannot keep a real peer's link from forming (its handshake
//! takes a round trip or two; a flood must open `HANDSHAKES_MAX`
//! connections in that time to push it out). After it, every frame is
//! validated (length, checksum, archive) before it is handed on; a frame
//! that fails closes the link and is counted. The dialling side sends the
//! messages; this side only answers its pings.
//!
//! A dialler gives a link up (silent, retired, restarted) with a reset
//! that a cut network may lose, and dials again; so this side lets no link
//! outlive its dialler's interest. A link on which nothing arrived for
//! `SUSPECT_AFTER_PINGS` of the dialler's ping intervals is closed, as the
//! dialler closes one whose pongs stop; a new link from a dialling core
//! closes the one it had before (a dialler keeps one link to each core);
//! and the links that ended leave the list as the next is added. Each
//! flap of a network would otherwise leave a descriptor and a task here
//! for good, until accepts fail.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shards::net::{TcpListener, TcpStream};
use wire::frame::ArchivedMessage;

use super::codec::{self, LinkFrame};
use super::conn::{before, Conn, Dialler, End, LocalEnd};
use super::handshake::Refusal;
use super::outgoing::{count_refusal, CoreLinks, LinkSettings, SUSPECT_AFTER_PINGS};
use super::view::{ClusterView, Peer};
use crate::ids::NodeId;
use crate::metrics::CoreMetrics;

/// Connections handshaking at once on one core; past it the oldest is
/// closed.
pub const HANDSHAKES_MAX: usize = 64;
/// The shortest time a dialler has for its Hello (it sends it as soon as
/// it connected): the heartbeat interval, but not less than this.
const HELLO_TIMEOUT_MIN: Duration = Duration::from_millis(200);
/// Refused handshakes are logged at most once per this period per core
/// (each is counted): a misconfigured or hostile peer cannot flood the log.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// A connection handshaking: its number, its stream, whether its Hello
/// arrived.
type Handshaking = (u64, Weak<TcpStream>, Rc<Cell<bool>>);

/// A link in: the dialling node, its incarnation and core, the
/// connection's number (in the order accepted), and the connection (gone
/// once the link ended).
struct LinkIn {
    node: NodeId,
    incarnation: u64,
    core: usize,
    number: u64,
    stream: Weak<TcpStream>,
}

/// Where a validated message from another node goes: read where it lies
/// in the link's buffer, so the callee copies what it keeps; with when the
/// bytes that carried it arrived (one clock reading per receive).
pub type Dispatch = Rc<dyn Fn(NodeId, &ArchivedMessage, Instant)>;

/// One core's accepting side. Cheap to clone; stays on its core.
#[derive(Clone)]
pub struct Incoming(Rc<Inner>);

struct Inner {
    settings: LinkSettings,
    view: Arc<ClusterView>,
    dispatch: Dispatch,
    /// This core's links out, told when a peer links in.
    links: CoreLinks,
    metrics: Arc<CoreMetrics>,
    /// Connections handshaking, oldest first, with their number and
    /// whether their Hello arrived.
    handshaking: RefCell<VecDeque<Handshaking>>,
    /// The number of the next connection accepted.
    accepted: Cell<u64>,
    /// When a refusal was last logged, and how many went unlogged since.
    refusals_logged: Cell<(Option<Instant>, u64)>,
    /// Links in, oldest first; those that ended are dropped as the next
    /// is added.
    incoming: RefCell<Vec<LinkIn>>,
}

impl Incoming {
    pub fn new(
        settings: LinkSettings,
        view: Arc<ClusterView>,
        dispatch: Dispatch,
        links: CoreLinks,
        metrics: Arc<CoreMetrics>,
    ) -> Incoming {
        Incoming(Rc::new(Inner {
            settings,
            view,
            dispatch,
            links,
            metrics,
            handshaking: RefCell::default(),
            accepted: Cell::new(0),
            refusals_logged: Cell::new((None, 0)),
            incoming: RefCell::default(),
        }))
    }

    /// Accepts links until the listener fails.
    pub async fn serve(self, listener: TcpListener) {
        loop {
            let stream = match listener.accept().await {
                Ok(stream) => stream,
                Err(error) => {
                    // Out of descriptors, typically: wait rather than spin.
                    tracing::warn!(%error, "cannot accept a link");
                    shards::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let conn = Conn::new(stream, Instant::now() + self.0.settings.handshake_timeout);
            let number = self.admit_handshake(&conn);
            let incoming = self.clone();
            shards::spawn(async move { incoming.serve_link(conn, number).await }).detach();
        }
    }

    /// Closes every link in from `node` at an incarnation below `live`
    /// (or at all, with `None`: the node ended).
    pub fn close_older(&self, node: NodeId, live: Option<u64>) {
        self.0.incoming.borrow_mut().retain(|link| {
            let Some(stream) = link.stream.upgrade() else {
                return false;
            };
            let stale = link.node == node && live.is_none_or(|live| link.incarnation < live);
            if stale {
                stream.shutdown();
            }
            !stale
        });
    }

    /// Closes every link in (this node took a new incarnation).
    pub fn close_all(&self) {
        for link in self.0.incoming.borrow_mut().drain(..) {
            if let Some(stream) = link.stream.upgrade() {
                stream.shutdown();
            }
        }
    }

    /// Counts a new connection as handshaking; at `HANDSHAKES_MAX` one is
    /// shut down (its handshake then fails) and counted: the oldest that
    /// has not sent its Hello, else the oldest. A real peer sends its Hello
    /// as soon as it connected, so silent connections go first. Returns
    /// the connection's number.
    fn admit_handshake(&self, conn: &Conn) -> u64 {
        let number = self.0.accepted.get();
        self.0.accepted.set(number + 1);
        let mut handshaking = self.0.handshaking.borrow_mut();
        if handshaking.len() >= HANDSHAKES_MAX {
            let at = handshaking
                .iter()
                .position(|(_, _, hello_read)| !hello_read.get())
                .unwrap_or(0);
            if let Some(evicted) = handshaking.remove(at).and_then(|(_, s, _)| s.upgrade()) {
                self.0.metrics.cluster.handshakes_evicted.inc();
                evicted.shutdown();
            }
        }
        handshaking.push_back((number, Rc::downgrade(&conn.stream), conn.hello_read.clone()));
        number
    }

    /// Connection `number`'s handshake ended; `false` if it had been
    /// evicted.
    fn end_handshake(&self, number: u64) -> bool {
        let mut handshaking = self.0.handshaking.borrow_mut();
        match handshaking.iter().position(|(n, _, _)| *n == number) {
            Some(at) => {
                handshaking.remove(at);
                true
            }
            None => false,
        }
    }

    async fn serve_link(&self, mut conn: Conn, number: u64) {
        let inner = &self.0;
        let _ = conn.stream.set_nodelay(true);
        let hello_timeout = inner
            .settings
            .ping_interval
            .max(HELLO_TIMEOUT_MIN)
            .min(inner.settings.handshake_timeout);
        let incarnation = inner.view.snapshot().me.incarnation;
        let local = LocalEnd {
            cluster: &inner.settings.cluster,
            secret: &inner.settings.secret,
            node: inner.settings.me,
            incarnation,
            core: inner.settings.core,
        };
        let admitted = conn.accept(
            &local,
            Instant::now() + hello_timeout,
            |node, incarnation| self.admit(node, incarnation),
        );
        let admitted = admitted.await;
        let evicted = !self.end_handshake(number);
        let dialler = match admitted {
            Ok(dialler) => dialler,
            // Closed to make room, and counted so.
            Err(_) if evicted => return,
            Err(reason) => {
                count_refusal(&inner.metrics.cluster, reason);
                self.log_refusal(&conn, reason);
                conn.stream.shutdown();
                return;
            }
        };
        let (stream, sealer, decoder) = conn.into_link(&dialler.keys, End::Acceptor);
        inner.links.peer_alive(dialler.node, dialler.incarnation);
        self.add_link(&dialler, number, &stream);
        tracing::debug!(
            node = dialler.node.0,
            incarnation = dialler.incarnation,
            core = dialler.core,
            "link in"
        );
        let silence_max = self.silence_max(dialler.node);
        self.read(dialler.node, &stream, sealer, decoder, silence_max)
            .await;
        stream.shutdown();
    }

    /// Lists the link in from `dialler` on connection `number`. A dialler
    /// keeps one link to each core, so the link its core had here before
    /// (accepted earlier, at its incarnation or an older one) is one it
    /// gave up on, and is shut down: its reset may have been lost in the
    /// cut that made it give up. Earlier by accept order, not by the end
    /// of the handshake: one the dialler gave up on mid-handshake may
    /// finish here after its successor. The links that ended leave the
    /// list, so it holds no more than the links open.
    fn add_link(&self, dialler: &Dialler, number: u64, stream: &Rc<TcpStream>) {
        let mut incoming = self.0.incoming.borrow_mut();
        incoming.retain(|link| {
            let Some(earlier) = link.stream.upgrade() else {
                return false;
            };
            let replaced = link.node == dialler.node
                && link.core == dialler.core
                && link.incarnation <= dialler.incarnation
                && link.number < number;
            if replaced {
                earlier.shutdown();
            }
            !replaced
        });
        incoming.push(LinkIn {
            node: dialler.node,
            incarnation: dialler.incarnation,
            core: dialler.core,
            number,
            stream: Rc::downgrade(stream),
        });
    }

    /// How long a link in from `node` may stay silent before it is
    /// closed: `SUSPECT_AFTER_PINGS` of its pings, as the dialler allows
    /// this side for its pongs. The dialler pings every heartbeat interval
    /// of its own, which its membership row names; a member may run other
    /// timers than this node (`agent::warn_of_other_timers`), so the longer
    /// of the two counts, and a link is never closed while its dialler
    /// still pings on time.
    fn silence_max(&self, node: NodeId) -> Duration {
        let peers = self.0.view.snapshot().peers;
        let theirs = peers.get(&node).and_then(|peer| peer.timers);
        let theirs = theirs.map_or(Duration::ZERO, |timers| {
            Duration::from_millis(timers.heartbeat_interval_ms)
        });
        self.0.settings.ping_interval.max(theirs) * SUSPECT_AFTER_PINGS
    }

    fn log_refusal(&self, conn: &Conn, reason: Refusal) {
        let (last, unlogged) = self.0.refusals_logged.get();
        let now = Instant::now();
        if last.is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_PERIOD) {
            self.0.refusals_logged.set((last, unlogged + 1));
            return;
        }
        self.0.refusals_logged.set((Some(now), 0));
        let peer = conn.stream.peer_addr().ok();
        tracing::warn!(
            ?peer,
            reason = reason.as_str(),
            unlogged_since_last = unlogged,
            "link refused"
        );
    }

    fn admit(&self, node: NodeId, incarnation: u64) -> Result<(), Refusal> {
        admission(&self.0.view.snapshot().peers, node, incarnation)
    }

    /// Serves the link until it fails, is closed, or stays silent for
    /// `silence_max` (on this node's clock, from the last bytes that
    /// arrived: every ping is some).
    async fn read(
        &self,
        from: NodeId,
        stream: &TcpStream,
        mut sealer: codec::Sealer,
        mut decoder: codec::LinkDecoder,
        silence_max: Duration,
    ) {
        let stats = &self.0.metrics.cluster;
        let mut pongs = codec::Batch::new();
        let mut records = decoder.records();
        let mut arrived_at = Instant::now();
        loop {
            // Every frame of what arrived, then one send of the pongs it
            // asked for (in one record).
            if !self.hand_on(from, &mut decoder, &mut pongs, arrived_at) {
                return;
            }
            stats.records_received.add(decoder.records() - records);
            records = decoder.records();
            if !pongs.is_empty() {
                sealer.seal(&mut pongs);
                let deadline = Instant::now() + self.0.settings.handshake_timeout;
                match before(deadline, stream.send_all(pongs.take_sealed())).await {
                    Some((Ok(()), back)) => pongs.reuse(back),
                    _ => return,
                }
            }
            match before(arrived_at + silence_max, stream.recv()).await {
                Some(Ok(Some(bytes))) => decoder.extend(&bytes),
                Some(Ok(None) | Err(_)) => return,
                None => {
                    stats.links_closed_silent.inc();
                    tracing::warn!(node = from.0, "link dialler silent; closed");
                    return;
                }
            }
            arrived_at = Instant::now();
        }
    }

    /// Hands on every message `decoder` holds whole, and queues a pong in
    /// `pongs` for every ping; `false` when a frame fails (counted and
    /// logged) and the link is to close.
    fn hand_on(
        &self,
        from: NodeId,
        decoder: &mut codec::LinkDecoder,
        pongs: &mut codec::Batch,
        arrived_at: Instant,
    ) -> bool {
        let stats = &self.0.metrics.cluster;
        loop {
            match decoder.next_frame() {
                Ok(None) => return true,
                Ok(Some(LinkFrame::Message(message))) => {
                    stats.frames_received.inc();
                    (self.0.dispatch)(from, message, arrived_at);
                }
                Ok(Some(LinkFrame::Ping(nonce))) => pongs.pong(nonce),
                Ok(Some(LinkFrame::Pong(_))) => {
                    stats.frames_invalid.inc();
                    tracing::warn!(node = from.0, "a pong sent to the accepting side; closed");
                    return false;
                }
                Err(error) if error.is_unauthenticated() => {
                    stats.link_auth_failures.inc();
                    tracing::warn!(
                        node = from.0,
                        %error,
                        "a link record failed its authentication; closed"
                    );
                    return false;
                }
                Err(error) => {
                    stats.frames_invalid.inc();
                    tracing::warn!(node = from.0, %error, "invalid frame on a link; closed");
                    return false;
                }
            }
        }
    }
}

/// Whether a dialler that holds the cluster secret may link in as `node`
/// at `incarnation`, by the membership view: a node id that is not a
/// member is refused (the secret alone does not make one), as is an
/// incarnation membership knows ended or replaced. A newer incarnation
/// than the view's is let in: a node that rejoined links before its new
/// row reached everyone. A node that just joined may be refused until the
/// view holds its row (a heartbeat interval); its link dials again within
/// its backoff.
fn admission(
    peers: &BTreeMap<NodeId, Peer>,
    node: NodeId,
    incarnation: u64,
) -> Result<(), Refusal> {
    match peers.get(&node) {
        None => Err(Refusal::NotMember),
        Some(peer)
            if incarnation < peer.incarnation
                || (incarnation == peer.incarnation && !peer.is_live()) =>
        {
            Err(Refusal::StaleIncarnation)
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
#[path = "incoming_tests.rs"]
mod tests;
