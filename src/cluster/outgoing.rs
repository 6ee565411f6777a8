//! One core's links to other nodes' cores: the router's [`NodeLinks`].
//!
//! A message for another node goes to the core that handles it there
//! (`shard_of` over that node's cores for an object, the named core for a
//! session's answer), on this core's own link to that core: frames land
//! where they are handled, and no link is shared between cores. A link is
//! dialled by the first frame for its peer core and then kept; one writer
//! task per connection batches what queued into one send. The sender
//! never waits: a frame is queued (bounded by `link_queue_max`) or refused
//! at once, and the frames a failed link still held go back to the router
//! as send failures.
//!
//! The writer pings every heartbeat interval, also while a batch waits at
//! the answer gate; a peer that answers no ping for `SUSPECT_AFTER_PINGS`
//! intervals, or takes that long to take bytes, is closed as dead: direct
//! link heartbeats find a frozen or cut-off peer long before membership
//! declares it down, so its frames fail fast instead of queueing.
//! Declaring a node down stays membership's decision.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use shards::net::TcpStream;
use wire::frame::{FrameBuf, Message};

use super::codec::{self, LinkFrame};
use super::conn::{before, send_all_progressing, Conn, End, LocalEnd};
use super::handshake::Refusal;
use super::link::{Link, LinkState, Refused};
use super::view::{ClusterView, LinkStatus, Snapshot};
use crate::answer_gate::{AnswerGate, Passage};
use crate::clock;
use crate::ids::NodeId;
use crate::metrics::{ClusterStats, CoreMetrics};
use crate::router::driver::{Destination, LinkRefusal, NodeLinks};

/// Pings a peer may leave unanswered before its link is closed.
pub const SUSPECT_AFTER_PINGS: u32 = 3;

/// What every link of a node shares.
#[derive(Clone, Debug)]
pub struct LinkSettings {
    pub cluster: String,
    pub secret: Vec<u8>,
    pub me: NodeId,
    pub core: usize,
    pub queue_max: usize,
    pub ping_interval: Duration,
    /// How long a dial and its handshake may take.
    pub handshake_timeout: Duration,
}

impl LinkSettings {
    fn suspect_after(&self) -> Duration {
        self.ping_interval * SUSPECT_AFTER_PINGS
    }
}

/// Where frames a failed link gave back go (the router, as send failures).
pub type Returned = Rc<dyn Fn(NodeId, FrameBuf)>;
/// Told when a link that was up fails: what it wrote lately may never have
/// arrived (the router answers the requests waiting on that node).
pub type Lost = Rc<dyn Fn(NodeId)>;

/// One core's outgoing links. Cheap to clone; stays on its core.
#[derive(Clone)]
pub struct CoreLinks(Rc<Inner>);

struct Inner {
    settings: LinkSettings,
    view: Arc<ClusterView>,
    /// The view as this core last read it.
    seen: RefCell<Snapshot>,
    /// Looked up for every frame sent: hashed with ahash, not SipHash
    /// (the keys are this node's own peers, nothing a client chooses).
    links: RefCell<HashMap<(NodeId, usize), Rc<Slot>, ahash::RandomState>>,
    /// Incarnations peers proved by linking in, newer than the view knew
    /// then: a node that rejoined is reachable before this node's next
    /// read of the membership table says so.
    learned: RefCell<HashMap<NodeId, u64>>,
    returned: RefCell<Option<Returned>>,
    lost: RefCell<Option<Lost>>,
    metrics: Arc<CoreMetrics>,
    /// What a batch holding successful answers passes before it is sent.
    answer_gate: Rc<AnswerGate>,
}

/// One link and the connection serving it, if any.
struct Slot {
    node: NodeId,
    core: usize,
    address: SocketAddr,
    link: RefCell<Link>,
    /// The writer's waker, and whether it has something new to look at.
    waker: Cell<Option<Waker>>,
    notified: Cell<bool>,
    stream: RefCell<Option<Rc<TcpStream>>>,
    /// Replaced (the peer restarted or was declared down): the writer
    /// stops, also mid-handshake (woken through `retired_waker`).
    retired: Cell<bool>,
    retired_waker: Cell<Option<Waker>>,
    /// The queued frames hold a successful answer (`carries_answer`).
    answers: Cell<bool>,
}

impl Slot {
    fn notify(&self) {
        self.notified.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    async fn notified(&self) {
        poll_fn(|cx| {
            if self.notified.replace(false) {
                Poll::Ready(())
            } else {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }

    fn close(&self) {
        self.retired.set(true);
        if let Some(stream) = self.stream.borrow().as_ref() {
            stream.shutdown();
        }
        self.notify();
        if let Some(waker) = self.retired_waker.take() {
            waker.wake();
        }
    }

    async fn until_retired(&self) -> Ended {
        poll_fn(|cx| {
            if self.retired.get() {
                Poll::Ready(Ended::Retired)
            } else {
                self.retired_waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// Why a connection ended.
enum Ended {
    Refused(Refusal),
    Io,
    /// The peer answered no ping, or took no bytes, for too long.
    Silent,
    Retired,
}

impl CoreLinks {
    pub fn new(
        settings: LinkSettings,
        view: Arc<ClusterView>,
        metrics: Arc<CoreMetrics>,
        answer_gate: Rc<AnswerGate>,
    ) -> Self {
        let seen = view.snapshot();
        CoreLinks(Rc::new(Inner {
            settings,
            view,
            seen: RefCell::new(seen),
            links: RefCell::default(),
            learned: RefCell::default(),
            returned: RefCell::new(None),
            lost: RefCell::new(None),
            metrics,
            answer_gate,
        }))
    }

    /// Where the frames of failed links go, and who hears of a link that
    /// failed after it was up.
    pub fn set_router_hooks(&self, returned: Returned, lost: Lost) {
        *self.0.returned.borrow_mut() = Some(returned);
        *self.0.lost.borrow_mut() = Some(lost);
    }

    /// Closes every link to `node`: it restarted, was declared down, or
    /// this node took a new incarnation (links announce the incarnation in
    /// their handshake). Frames they held go back as send failures.
    pub fn close_node(&self, node: Option<NodeId>) {
        self.0.links.borrow_mut().retain(|&(peer, _), slot| {
            let close = node.is_none_or(|node| node == peer);
            if close {
                slot.close();
            }
            !close
        });
    }

    /// `node` linked to this core as `incarnation`, proving it: it is alive
    /// and reachable, so links to it that are backing off dial again with
    /// the next frame, and an incarnation newer than the view's counts as
    /// live (it may have just rejoined, before membership says so).
    pub fn peer_alive(&self, node: NodeId, incarnation: u64) {
        let mut learned = self.0.learned.borrow_mut();
        let known = learned.entry(node).or_insert(incarnation);
        *known = (*known).max(incarnation);
        for ((peer, _), slot) in self.0.links.borrow().iter() {
            if *peer == node {
                slot.link.borrow_mut().retry_now();
            }
        }
    }

    /// How each link stands, for `/cluster`.
    pub fn statuses(&self) -> Vec<LinkStatus> {
        let mut statuses: Vec<LinkStatus> = self
            .0
            .links
            .borrow()
            .values()
            .map(|slot| {
                let link = slot.link.borrow();
                LinkStatus {
                    node: slot.node,
                    core: slot.core,
                    state: match link.state() {
                        LinkState::Connecting => "connecting",
                        LinkState::Up => "up",
                        LinkState::Backoff { .. } => "backoff",
                    },
                    queued: link.queued(),
                    last_refusal: link.refused.map(Refusal::as_str),
                }
            })
            .collect();
        statuses.sort_by_key(|status| (status.node, status.core));
        statuses
    }

    /// The view, read again if it moved.
    fn refresh(&self) {
        if self.0.view.version() != self.0.seen.borrow().version {
            *self.0.seen.borrow_mut() = self.0.view.snapshot();
        }
    }

    /// The link to `core` of `node`, opened for its incarnation now.
    fn slot(&self, node: NodeId, core: usize, incarnation: u64, address: SocketAddr) -> Rc<Slot> {
        let key = (node, core);
        if let Some(slot) = self.0.links.borrow().get(&key) {
            if slot.link.borrow().peer_incarnation == incarnation && slot.address == address {
                return slot.clone();
            }
            slot.close();
        }
        let slot = Rc::new(Slot {
            node,
            core,
            address,
            link: RefCell::new(Link::new(self.0.settings.queue_max, incarnation)),
            waker: Cell::new(None),
            notified: Cell::new(false),
            stream: RefCell::new(None),
            retired: Cell::new(false),
            retired_waker: Cell::new(None),
            answers: Cell::new(false),
        });
        self.0.links.borrow_mut().insert(key, slot.clone());
        self.start_writer(slot.clone());
        slot
    }

    fn start_writer(&self, slot: Rc<Slot>) {
        let links = self.clone();
        shards::spawn(async move { links.drive(slot).await }).detach();
    }

    /// One connection of `slot`, from dial to failure.
    async fn drive(&self, slot: Rc<Slot>) {
        let ended =
            futures_lite::future::or(self.connect_and_write(&slot), slot.until_retired()).await;
        let stats = &self.0.metrics.cluster;
        if let Ended::Silent = ended {
            tracing::warn!(
                node = slot.node.0,
                core = slot.core,
                "link peer silent; closed"
            );
        }
        if let Ended::Refused(reason) = ended {
            count_refusal(stats, reason);
            slot.link.borrow_mut().refused = Some(reason);
            // One line per attempt: the backoff (up to 5 s) bounds the rate.
            tracing::warn!(
                node = slot.node.0,
                core = slot.core,
                reason = reason.as_str(),
                "link handshake refused"
            );
        }
        let was_up = slot.link.borrow().state() == LinkState::Up;
        if let Some(stream) = slot.stream.borrow_mut().take() {
            // The requests it carried are answered TIMEOUT now (`lost`
            // below): what the kernel still holds of them must not reach
            // the peer once the path is back, seconds later, where a keyed
            // one's retry may have been answered meanwhile and its key
            // forgotten since (docs/protocol.md, section 12).
            let _ = stream.discard_unsent_on_close();
            stream.shutdown();
        }
        let jitter = rand::random::<f64>();
        let frames = slot.link.borrow_mut().failed(clock::now_ms(), jitter);
        let returned = self.0.returned.borrow().clone();
        for frame in frames {
            count_failure(stats, LinkRefusal::Down);
            if let Some(returned) = &returned {
                returned(slot.node, frame);
            }
        }
        if was_up {
            if let Some(lost) = self.0.lost.borrow().clone() {
                lost(slot.node);
            }
        }
    }

    async fn connect_and_write(&self, slot: &Rc<Slot>) -> Ended {
        let settings = &self.0.settings;
        let deadline = Instant::now() + settings.handshake_timeout;
        let stream = match before(deadline, TcpStream::connect(slot.address)).await {
            None => return Ended::Refused(Refusal::Timeout),
            Some(Err(_)) => return Ended::Io,
            Some(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        let mut conn = Conn::new(stream, deadline);
        let incarnation = self.0.view.snapshot().me.incarnation;
        let local = LocalEnd {
            cluster: &settings.cluster,
            secret: &settings.secret,
            node: settings.me,
            incarnation,
            core: settings.core,
        };
        let expected = slot.link.borrow().peer_incarnation;
        let accepted = match conn.dial(&local, (slot.node, slot.core), expected).await {
            Ok(accepted) => accepted,
            // A peer that went away mid-handshake is an IO failure, not a
            // refusal worth counting.
            Err(Refusal::Malformed) => return Ended::Io,
            Err(reason) => return Ended::Refused(reason),
        };
        tracing::debug!(
            node = slot.node.0,
            core = slot.core,
            incarnation = accepted.incarnation,
            "link out"
        );
        if slot.retired.get() {
            return Ended::Retired;
        }
        let (stream, sealer, decoder) = conn.into_link(&accepted.keys, End::Dialler);
        *slot.stream.borrow_mut() = Some(stream.clone());
        slot.link.borrow_mut().connected();
        self.write(slot.clone(), stream, sealer, decoder).await
    }

    /// Writes what queues, pings, and watches the pongs. What queued
    /// since the last send leaves in one send, sealed in one record (two
    /// past `codec::RECORD_BODY_MAX_BYTES`): the writer is woken by the
    /// first frame of a loop turn and runs after the tasks already woken in
    /// it, so the frames the turn's other tasks queue go with it.
    async fn write(
        &self,
        slot: Rc<Slot>,
        stream: Rc<TcpStream>,
        mut sealer: codec::Sealer,
        decoder: codec::LinkDecoder,
    ) -> Ended {
        let settings = &self.0.settings;
        let base = Instant::now();
        let last_pong = Rc::new(Cell::new(base));
        let reader_done = Rc::new(Cell::new(false));
        shards::spawn(read_pongs(
            slot.clone(),
            stream.clone(),
            decoder,
            base,
            last_pong.clone(),
            reader_done.clone(),
            self.0.metrics.clone(),
        ))
        .detach();
        // What the last send carried, empty again: swapped with the link's
        // queue each turn, so the two batches' buffers are reused.
        let mut batch = codec::Batch::new();
        let mut next_ping = base;
        loop {
            if slot.retired.get() {
                return Ended::Retired;
            }
            if reader_done.get() {
                return Ended::Io;
            }
            slot.link.borrow_mut().take_all(&mut batch);
            let sent = batch.messages() as u64;
            if slot.answers.replace(false) && sent > 0 {
                let pinging = Pinging {
                    stream: &stream,
                    sealer: &mut sealer,
                    base,
                    next_ping: &mut next_ping,
                };
                if !self.pass_answer_gate(pinging).await {
                    return Ended::Io;
                }
            }
            let now = Instant::now();
            if now >= next_ping {
                batch.ping(base.elapsed().as_micros() as u64);
                next_ping = now + settings.ping_interval;
            }
            if !batch.is_empty() {
                if let Err(ended) = self.send(&stream, &mut sealer, &mut batch, sent).await {
                    return ended;
                }
                continue;
            }
            if now.duration_since(last_pong.get()) > settings.suspect_after() {
                return Ended::Silent;
            }
            futures_lite::future::or(slot.notified(), async {
                shards::sleep_until(next_ping).await;
            })
            .await;
        }
    }

    /// Seals `batch`, which holds `sent` message frames, and sends it,
    /// counted; it comes back empty, its buffer kept for the next. A peer
    /// that takes no bytes for `SUSPECT_AFTER_PINGS` intervals is silent.
    async fn send(
        &self,
        stream: &TcpStream,
        sealer: &mut codec::Sealer,
        batch: &mut codec::Batch,
        sent: u64,
    ) -> Result<(), Ended> {
        let stats = &self.0.metrics.cluster;
        let records_before = sealer.records_sealed();
        sealer.seal(batch);
        let records = sealer.records_sealed() - records_before;
        let sealed = batch.take_sealed();
        let bytes = sealed.len() as u64;
        let silence = self.0.settings.suspect_after();
        match send_all_progressing(stream, sealed, silence).await {
            None => return Err(Ended::Silent),
            Some((Err(_), _)) => return Err(Ended::Io),
            Some((Ok(()), back)) => batch.reuse(back),
        }
        stats.frames_sent.add(sent);
        count_send(stats, sent);
        stats.records_sent.add(records);
        stats.record_bytes_sent.add(bytes);
        Ok(())
    }
}

/// What a writer needs to ping while it waits: its connection and sealer,
/// the time its ping nonces count from, and when the next ping is due.
struct Pinging<'a> {
    stream: &'a TcpStream,
    sealer: &'a mut codec::Sealer,
    base: Instant,
    next_ping: &'a mut Instant,
}

impl CoreLinks {
    /// Whether a batch holding successful answers may be sent: only while
    /// the lease holds (`answer_gate`). After a pause it waits for a
    /// heartbeat to renew the lease; `false` when the node fenced meanwhile,
    /// and the batch is dropped with the connection (a rejoin closes every
    /// link too), or when a ping sent while waiting failed. The peer is
    /// pinged meanwhile, when pings fall due: a ping acknowledges nothing,
    /// and the wait may outlast the silence after which the accepting side
    /// closes a link (`SUSPECT_AFTER_PINGS` intervals), answers and all.
    async fn pass_answer_gate(&self, pinging: Pinging<'_>) -> bool {
        let gate = &self.0.answer_gate;
        let fences = gate.fences();
        let mut passage = pin!(poll_fn(|cx| gate.poll_pass(cx, fences, clock::now_ms())));
        let passage = loop {
            if let Some(passage) = before(*pinging.next_ping, &mut passage).await {
                break passage;
            }
            let mut ping = codec::Batch::new();
            ping.ping(pinging.base.elapsed().as_micros() as u64);
            *pinging.next_ping = Instant::now() + self.0.settings.ping_interval;
            let sent = self.send(pinging.stream, pinging.sealer, &mut ping, 0);
            if sent.await.is_err() {
                return false;
            }
        };
        if passage == Passage::Fenced {
            self.0.metrics.cluster.links_closed_at_fence.inc();
            return false;
        }
        true
    }
}

/// Whether `message` acknowledges something: a router's successful answer,
/// or a RESPONSE for a client of the other node.
fn carries_answer(message: &Message) -> bool {
    match message {
        Message::RouterReply { error_code, .. } => *error_code == 0,
        Message::ClientEgress { kind, .. } => *kind == wire::client::FrameKind::Response as u8,
        _ => false,
    }
}

/// The dialling side's reader: only pongs come back on a link.
async fn read_pongs(
    slot: Rc<Slot>,
    stream: Rc<TcpStream>,
    mut decoder: codec::LinkDecoder,
    base: Instant,
    last_pong: Rc<Cell<Instant>>,
    done: Rc<Cell<bool>>,
    metrics: Arc<CoreMetrics>,
) {
    loop {
        let bytes = match stream.recv().await {
            Ok(Some(bytes)) => bytes,
            Ok(None) | Err(_) => break,
        };
        decoder.extend(&bytes);
        drop(bytes);
        let mut bad = false;
        loop {
            match decoder.next_frame() {
                Ok(None) => break,
                Ok(Some(LinkFrame::Pong(sent_us))) => {
                    let rtt = base
                        .elapsed()
                        .saturating_sub(Duration::from_micros(sent_us));
                    metrics.cluster.link_rtt.record(rtt);
                    last_pong.set(Instant::now());
                }
                Err(error) if error.is_unauthenticated() => {
                    metrics.cluster.link_auth_failures.inc();
                    tracing::warn!(
                        node = slot.node.0,
                        %error,
                        "a link record failed its authentication; closed"
                    );
                    bad = true;
                    break;
                }
                Ok(Some(_)) | Err(_) => {
                    metrics.cluster.frames_invalid.inc();
                    bad = true;
                    break;
                }
            }
        }
        if bad {
            break;
        }
    }
    done.set(true);
    stream.shutdown();
    slot.notify();
}

pub(super) fn count_refusal(stats: &ClusterStats, reason: Refusal) {
    match reason {
        Refusal::Version => stats.refused_version.inc(),
        Refusal::ClusterName => stats.refused_cluster_name.inc(),
        Refusal::BadSecret => stats.refused_bad_secret.inc(),
        Refusal::StaleIncarnation => stats.refused_stale_incarnation.inc(),
        Refusal::WrongNode => stats.refused_wrong_node.inc(),
        Refusal::Malformed => stats.refused_malformed.inc(),
        Refusal::Timeout => stats.refused_timeout.inc(),
        Refusal::NotMember => stats.refused_not_member.inc(),
    }
}

/// One send of a link that carried `frames` message frames.
fn count_send(stats: &ClusterStats, frames: u64) {
    match frames {
        0 => stats.sends_0.inc(),
        1 => stats.sends_1.inc(),
        2..=7 => stats.sends_2_to_7.inc(),
        8..=63 => stats.sends_8_to_63.inc(),
        _ => stats.sends_64_up.inc(),
    }
}

fn count_failure(stats: &ClusterStats, refusal: LinkRefusal) {
    match refusal {
        LinkRefusal::Full => stats.send_failed_queue_full.inc(),
        LinkRefusal::Down => stats.send_failed_link_down.inc(),
        LinkRefusal::UnknownNode => stats.send_failed_unknown_node.inc(),
    }
}

impl NodeLinks for CoreLinks {
    fn send(&self, node: NodeId, to: Destination, message: &Message) -> Result<(), LinkRefusal> {
        let sent = self.offer(node, to, message);
        if let Err(refusal) = sent {
            count_failure(&self.0.metrics.cluster, refusal);
        }
        sent
    }
}

impl CoreLinks {
    fn offer(&self, node: NodeId, to: Destination, message: &Message) -> Result<(), LinkRefusal> {
        self.refresh();
        let (incarnation, address, core) = {
            let seen = self.0.seen.borrow();
            let peer = seen.peers.get(&node).ok_or(LinkRefusal::UnknownNode)?;
            let mut learned = self.0.learned.borrow_mut();
            let newer = match learned.get(&node) {
                Some(&learned) if learned > peer.incarnation => Some(learned),
                Some(_) => {
                    // The view caught up.
                    learned.remove(&node);
                    None
                }
                None => None,
            };
            if !peer.is_live() && newer.is_none() {
                return Err(LinkRefusal::Down);
            }
            let incarnation = newer.unwrap_or(peer.incarnation);
            if peer.cores.is_empty() {
                return Err(LinkRefusal::UnknownNode);
            }
            let core = match to {
                Destination::Object(key) => wire::shard_of(key, peer.cores.len() as u32) as usize,
                Destination::Core(core) => core,
            };
            let address = *peer.cores.get(core).ok_or(LinkRefusal::UnknownNode)?;
            (incarnation, address, core)
        };
        let slot = self.slot(node, core, incarnation, address);
        // Encoded once, into the records the writer seals and sends.
        let offered = slot.link.borrow_mut().offer(clock::now_ms, message);
        match offered {
            Ok(dial) => {
                if carries_answer(message) {
                    slot.answers.set(true);
                }
                if dial {
                    self.0.metrics.cluster.reconnects.inc();
                    self.start_writer(slot.clone());
                }
                slot.notify();
                Ok(())
            }
            Err(Refused::Link(refusal)) => Err(refusal),
            Err(Refused::Encode(error)) => {
                // Only a message past the frame limit fails to encode; the
                // router treats it as any message no link took.
                tracing::warn!(%error, "cannot encode a message for another node");
                Err(LinkRefusal::Full)
            }
        }
    }
}
