//! The router's driver: one per core, it performs the effects of that
//! core's [`RouterCore`] for real. All decisions stay in the state machine;
//! this module only moves events in and effects out:
//!
//! - inputs (client requests, node messages, store replies, timers,
//!   membership) are queued by whoever has them and handled by one router
//!   task, so nothing ever calls into the core while it is handling
//!   something else: no re-entrant call, whatever the caller;
//! - requests for objects of other cores travel the mesh as
//!   `RouterRequest` frames, answers as `RouterReply` frames to the core
//!   that made the request (its number names the core, `wire::ids`);
//! - messages for other nodes go through [`NodeLinks`], which the cluster
//!   implements; a message a link refuses goes back to the core as a send
//!   failure;
//! - answers, pushes and kicks for this node's client sessions go through
//!   [`ClientSide`], which the services implement over the gateway;
//! - store requests are [`Store`] futures; timers are the core's timers.

mod cluster_side;
mod control;
mod effects;
mod forwarded;
pub(crate) mod frames;
mod held;
mod mirror;
mod ports;
mod queue;
mod replies;
mod store_ops;
mod turn_clock;

pub use self::cluster_side::CoreStanding;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use shards::{Mesh, SendError};
use wire::frame::{ArchivedMessage, FrameBuf};
use wire::{shard_of, ObjectKey};

use self::forwarded::Forwarded;
use self::frames::{decode_node_message, decode_reply, decode_request, encode_request};
pub use self::ports::{ClientSide, Destination, FrameSource, LinkRefusal, NoLinks, NodeLinks};
use self::queue::Inputs;
pub use self::replies::{ReplyRoute, REPLY_ROUTES_MAX};
use self::replies::{ReplyRoutes, RouteKind};
use self::turn_clock::{PauseBarrier, TurnClock};
use super::types::{
    ClientRef, Effect, ErrorCode, NodeMessage, Request, RequestId, RouterHead, StoreReply,
    StoreToken, Timer, TransferDone,
};
use super::{DrainProgress, RouterCore, TransferError};
use crate::answer_gate::AnswerGate;
use crate::clock;
use crate::ids::NodeId;
use crate::metrics::CoreMetrics;
use crate::store::{MemberState, Store};

/// How often the router gauges (objects, caches, queued requests) are
/// recomputed for `/metrics`. Counting them walks every entry of the core,
/// so it runs on this period, not per request; the gauges are at most this
/// stale. Counters stay exact.
const GAUGES_MIRROR_INTERVAL: Duration = Duration::from_millis(250);
/// How long an on_write flush waits after the batch that asked for it, so
/// that the reads other connections completed in the same loop turn join
/// the same flush and the same store commit (one commit per object per
/// batch instead of one per connection); the cost is this much latency on
/// a reply that waits for a commit anyway.
const FLUSH_LINGER: Duration = Duration::from_micros(100);
/// Inputs the router task handles before it lets other tasks run.
const INPUTS_PER_TURN_MAX: usize = 1024;
/// Calls of one core's objects waiting for their answer. Beyond it a call
/// is answered OVERLOADED at once (to its caller, as an event).
pub const CALLS_MAX: usize = 1 << 16;

/// Where the answer to one object's call goes: the caller, and its number
/// for the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CallRoute {
    caller: ObjectKey,
    tag: u64,
}

/// What a driver needs from the node.
pub struct DriverParts {
    pub node: NodeId,
    /// The node's incarnation when it started, in every request number.
    pub boot_incarnation: u64,
    pub core_id: usize,
    pub core_count: usize,
    pub core: RouterCore,
    pub store: Store,
    pub mesh: Mesh<FrameBuf>,
    pub links: Rc<dyn NodeLinks>,
    pub metrics: Arc<CoreMetrics>,
    pub request_timeout_ms: u64,
    /// `cluster.fence_after_ms`: a lease's length from its heartbeat.
    pub fence_after_ms: u64,
    /// Where the core's lease is published for the writers of its answers.
    pub answer_gate: Rc<AnswerGate>,
    /// `cores.mesh_queue_max`: the most messages of this core's objects to
    /// objects of this core that may wait before the next is refused, as
    /// one to another core is past the mesh channel's bound.
    pub local_queue_max: usize,
}

/// One event for the core.
///
/// Requests are handled at the clock reading of the router's poll (see
/// `handle_inputs`), so they carry none. A client request is built in its
/// slot of the queue; every input is moved out of it again, and the rarer
/// ones into it too: at 128 bytes or less the compiler moves it with
/// inline register moves instead of a `memcpy` call (the test
/// `an_input_fits_in_128_bytes` keeps it there), so a node message, which
/// comes from another node's link, not from this core's sessions, is
/// boxed.
enum Input {
    Request {
        head: RouterHead,
        request: Request,
    },
    /// A request for a stateless service, to run on `node` (this one, or
    /// another the catalog picked).
    Service {
        node: NodeId,
        key: ObjectKey,
        request: Request,
    },
    Node {
        from: NodeId,
        message: Box<NodeMessage>,
    },
    /// A message a link took and then could not deliver.
    SendFailed {
        node: NodeId,
        message: Box<NodeMessage>,
    },
    /// A link to `node` failed after it was up.
    LinkLost {
        node: NodeId,
    },
    StoreReply {
        token: StoreToken,
        reply: StoreReply,
    },
    Timer(Timer),
    Flush,
    Member {
        node: NodeId,
        incarnation: u64,
        state: MemberState,
    },
    Lease {
        until_ms: u64,
    },
    LeaseEnd {
        at_ms: u64,
    },
    Fence,
    Rejoin {
        incarnation: u64,
        lease_until_ms: u64,
    },
    Draining(bool),
    Shutdown {
        deadline_ms: u64,
    },
    /// An operator's transfer: `done` learns how it ended.
    Transfer {
        key: ObjectKey,
        target: NodeId,
        done: TransferWaiter,
    },
    /// Starts draining the core.
    Drain {
        concurrency: usize,
    },
    /// The drain has room for more transfers (or may have).
    DrainStep,
}

/// How a transfer asked for through the driver ended: `Err` when it never
/// started.
pub type TransferReply = Result<TransferDone, TransferError>;

/// Who waits for a transfer's end.
type TransferWaiter = Box<dyn FnOnce(TransferReply)>;

/// Transfers waited for at once on one core at most (operators' calls: a
/// handful at a time).
pub const TRANSFER_WAITERS_MAX: usize = 1024;

struct Inner {
    node: NodeId,
    core_id: usize,
    core_count: u32,
    core: RefCell<RouterCore>,
    inputs: Inputs<Input>,
    task: RefCell<Option<Waker>>,
    store: Store,
    mesh: Mesh<FrameBuf>,
    links: Rc<dyn NodeLinks>,
    client_side: RefCell<Option<Rc<dyn ClientSide>>>,
    replies: RefCell<ReplyRoutes>,
    calls: RefCell<ReplyRoutes<CallRoute>>,
    forwarded: RefCell<Forwarded>,
    metrics: Arc<CoreMetrics>,
    request_timeout_ms: u64,
    pause: RefCell<PauseBarrier>,
    /// The effects being performed, reused so a batch allocates nothing.
    effects: RefCell<Vec<Effect>>,
    /// What the turn sends to clients, held to its end (`held`).
    held: RefCell<held::HeldTurn>,
    answer_gate: Rc<AnswerGate>,
    answers_withheld_total: Cell<u64>,
    /// The last reading `client_side_request` converted to the router's
    /// clock: the requests of one read batch share their batch's reading,
    /// so all but the first reuse its conversion.
    last_reading: Cell<(Instant, u64)>,
    unroutable_total: Cell<u64>,
    local_queue_max: usize,
    /// Objects' messages refused at `local_queue_max`.
    local_queue_full_total: Cell<u64>,
    /// Client requests dropped unrun, past their expiry (`expired_before_run`).
    expired_before_run_total: Cell<u64>,
    /// Answers to this core's client requests made on this node and on
    /// another (`routerd_router_client_requests_{local,remote}_total`).
    client_answers: Cell<(u64, u64)>,
    /// Operators' transfers in flight, by key (at most one per key: the
    /// core refuses a second while one runs).
    transfer_waiters: RefCell<HashMap<ObjectKey, TransferWaiter>>,
}

/// One core's router driver. Cheap to clone (an `Rc`); stays on its core.
#[derive(Clone)]
pub struct RouterDriver(Rc<Inner>);

impl RouterDriver {
    /// A driver and its router task; answers for clients need
    /// [`Self::set_client_side`] before the first request.
    pub fn new(parts: DriverParts) -> RouterDriver {
        let driver = RouterDriver(Rc::new(Inner {
            node: parts.node,
            core_id: parts.core_id,
            core_count: parts.core_count as u32,
            core: RefCell::new(parts.core),
            inputs: Inputs::new(),
            task: RefCell::new(None),
            store: parts.store,
            mesh: parts.mesh,
            links: parts.links,
            client_side: RefCell::new(None),
            forwarded: RefCell::new(Forwarded::new(parts.request_timeout_ms)),
            replies: RefCell::new(ReplyRoutes::new(
                parts.core_id,
                parts.boot_incarnation,
                parts.request_timeout_ms,
            )),
            calls: RefCell::new(ReplyRoutes::of_kind(
                RouteKind::Call,
                parts.core_id,
                parts.boot_incarnation,
                parts.request_timeout_ms,
            )),
            metrics: parts.metrics,
            request_timeout_ms: parts.request_timeout_ms,
            pause: RefCell::new(PauseBarrier::new(parts.fence_after_ms)),
            effects: RefCell::new(Vec::new()),
            held: RefCell::new(held::HeldTurn::default()),
            answer_gate: parts.answer_gate,
            answers_withheld_total: Cell::new(0),
            last_reading: Cell::new({
                let now = Instant::now();
                (now, clock::ms_at(now))
            }),
            unroutable_total: Cell::new(0),
            local_queue_max: parts.local_queue_max,
            local_queue_full_total: Cell::new(0),
            expired_before_run_total: Cell::new(0),
            client_answers: Cell::new((0, 0)),
            transfer_waiters: RefCell::new(HashMap::new()),
        }));
        shards::spawn(run(driver.clone())).detach();
        // RouterCore::new queued its first sweep timer.
        driver.wake();
        driver.spawn_periodic();
        driver
    }

    /// The driver's periodic tasks: the gauges' mirror, and the expiry of
    /// calls whose answer never came.
    fn spawn_periodic(&self) {
        self.mirror_gauges();
        let weak = Rc::downgrade(&self.0);
        shards::spawn(async move {
            loop {
                shards::sleep(GAUGES_MIRROR_INTERVAL).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let driver = RouterDriver(inner);
                driver.mirror_gauges();
                driver.mirror_client_answers();
            }
        })
        .detach();
        // Calls whose answer never came (a reply a link dropped) are
        // answered TIMEOUT to their caller: every call gets one answer.
        let weak = Rc::downgrade(&self.0);
        let tick = Duration::from_millis((self.0.request_timeout_ms / 8).max(1));
        shards::spawn_background(async move {
            loop {
                shards::sleep(tick).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                RouterDriver(inner).expire_calls();
            }
        })
        .detach();
    }

    /// Where answers, pushes and kicks for this node's sessions go.
    pub fn set_client_side(&self, client_side: Rc<dyn ClientSide>) {
        *self.0.client_side.borrow_mut() = Some(client_side);
    }

    pub fn node(&self) -> NodeId {
        self.0.node
    }

    #[inline(always)]
    fn enqueue(&self, input: Input) {
        self.enqueue_with(|| input);
    }

    /// Queues the input `build` makes, built in its slot of the queue.
    #[inline(always)]
    fn enqueue_with(&self, build: impl FnOnce() -> Input) {
        self.0.inputs.push_with(build);
        self.wake();
    }

    fn wake(&self) {
        if let Some(waker) = self.0.task.borrow_mut().take() {
            waker.wake();
        }
    }

    /// A client request of a session of this core for `key`: records where
    /// its answer goes (`route`) and hands it to the key's core. `keyed`:
    /// the body ends with the client's request key (`Request::keyed`). `now` is
    /// when its read completed. Refused (OVERLOADED) when this core already
    /// waits for `REPLY_ROUTES_MAX` answers.
    pub fn client_request(
        &self,
        key: ObjectKey,
        (op, body, keyed): (u32, Vec<u8>, bool),
        client: ClientRef,
        route: ReplyRoute,
        now: Instant,
    ) -> Result<(), ErrorCode> {
        let mut request = self.client_side_request(now, op, body, client, route)?;
        request.keyed = keyed;
        self.submit(RouterHead::local(key, self.0.node), request);
        Ok(())
    }

    /// `clock::ms_at(now)`, converted once per reading.
    fn ms_at(&self, now: Instant) -> u64 {
        let (last, last_ms) = self.0.last_reading.get();
        if now == last {
            return last_ms;
        }
        let now_ms = clock::ms_at(now);
        self.0.last_reading.set((now, now_ms));
        now_ms
    }

    /// A request read at `now` whose answer goes back to a session of this
    /// core through `route`; OVERLOADED when the core has
    /// `REPLY_ROUTES_MAX` waiting. Inlined for the reason `submit` is: a
    /// request returned through memory cost a stalled copy.
    #[inline(always)]
    fn client_side_request(
        &self,
        now: Instant,
        op: u32,
        body: Vec<u8>,
        client: ClientRef,
        route: ReplyRoute,
    ) -> Result<Request, ErrorCode> {
        let now_ms = self.ms_at(now);
        let seq = {
            let mut replies = self.0.replies.borrow_mut();
            replies.expire(now_ms);
            replies.insert(route, now_ms + self.0.request_timeout_ms)
        };
        let seq = seq.ok_or(ErrorCode::Overloaded)?;
        Ok(Request {
            id: RequestId {
                origin_node: self.0.node,
                seq,
            },
            op,
            body,
            client: Some(client),
            needs_reply: true,
            keyed: false,
        })
    }

    /// A client request of a session of this core for the stateless
    /// service of `key.type_id`, to run on `node` (picked from the catalog:
    /// this node or another that advertises the service). Its answer comes
    /// back like a client request's (`ClientSide::answer`).
    pub fn service_request(
        &self,
        node: NodeId,
        key: ObjectKey,
        request: (u32, Vec<u8>),
        client: ClientRef,
        route: ReplyRoute,
        now: Instant,
    ) -> Result<(), ErrorCode> {
        let (op, body) = request;
        let request = self.client_side_request(now, op, body, client, route)?;
        self.enqueue(Input::Service { node, key, request });
        Ok(())
    }

    /// A one-way notification to the object `key` (a session's end, a
    /// presence change): nobody waits for an answer.
    pub fn notify(&self, key: ObjectKey, op: u32, client: ClientRef) {
        self.send_one_way(key, op, Vec::new(), Some(client));
    }

    /// A one-way message to the object `key`, from `client`'s session or
    /// (`None`) from the node itself, an operator's notice: nobody waits.
    pub fn send_one_way(&self, key: ObjectKey, op: u32, body: Vec<u8>, client: Option<ClientRef>) {
        let request = Request {
            id: RequestId {
                origin_node: self.0.node,
                seq: 0,
            },
            op,
            body,
            client,
            needs_reply: false,
            keyed: false,
        };
        self.submit(RouterHead::local(key, self.0.node), request);
    }

    /// Whether `request`, a client request of this core's sessions, is
    /// past its expiry before it runs: its session was answered TIMEOUT
    /// (the request stays uncertain to the client), so it is dropped and
    /// counted instead of run. A core behind its clients would otherwise
    /// run every request they gave up on, each session sending more as the
    /// timeouts free its in-flight slots, a queue that only grows.
    fn expired_before_run(&self, request: &Request, now_ms: u64) -> bool {
        let seq = request.id.seq;
        let ours = request.needs_reply
            && request.id.origin_node == self.0.node
            && wire::ids::core_of(seq) == self.0.core_id
            && RouteKind::of(seq) == RouteKind::Client;
        if !ours || self.0.replies.borrow().is_waiting(seq, now_ms) {
            return false;
        }
        let expired = &self.0.expired_before_run_total;
        expired.set(expired.get() + 1);
        true
    }

    /// Hands a request to the core that owns its key on this node.
    ///
    /// This and `enqueue` are inlined into every caller, and the remote
    /// path is not: a request handed through calls was written to the
    /// stack field by field and read back whole at each one, a stalled
    /// copy (the store buffer cannot forward a wide load from narrow
    /// stores) per call on the path of every client request.
    #[inline(always)]
    fn submit(&self, head: RouterHead, request: Request) {
        let core = shard_of(head.key, self.0.core_count) as usize;
        if core == self.0.core_id {
            return self.enqueue_with(|| Input::Request { head, request });
        }
        self.submit_to_core(core, head, request);
    }

    /// [`Self::submit`] for a message (or a request passed on) from one of
    /// this node's objects. One for an object of this core waits in the
    /// core's queue of such messages (`queue`), which takes at most
    /// `local_queue_max`: past it the message is refused (a request
    /// answered OVERLOADED) and counted, as one to another core is past the
    /// mesh's bound. Unbounded, objects messaging each other faster than
    /// they are served (a fan-out that reaches itself) grew the queue
    /// without end.
    fn submit_from_object(&self, head: RouterHead, request: Request) {
        let core = shard_of(head.key, self.0.core_count) as usize;
        if core != self.0.core_id {
            return self.submit_to_core(core, head, request);
        }
        if self.0.inputs.messages_waiting() >= self.0.local_queue_max {
            let refused = &self.0.local_queue_full_total;
            refused.set(refused.get() + 1);
            return self.fail_request(&request, ErrorCode::Overloaded);
        }
        self.0
            .inputs
            .push_message_with(|| Input::Request { head, request });
        self.wake();
    }

    /// [`Self::submit`] to another core of this node, over the mesh.
    #[inline(never)]
    fn submit_to_core(&self, core: usize, head: RouterHead, request: Request) {
        let frame = match FrameBuf::encode_local(&encode_request(&head, &request)) {
            Ok(frame) => frame,
            Err(error) => {
                tracing::warn!(%error, "cannot encode a router request");
                return self.fail_request(&request, ErrorCode::Internal);
            }
        };
        match self.0.mesh.try_send(core, frame) {
            Ok(()) => {}
            Err(SendError::Full(_)) => self.fail_request(&request, ErrorCode::Overloaded),
            Err(_) => self.fail_request(&request, ErrorCode::Unavailable),
        }
    }

    fn fail_request(&self, request: &Request, code: ErrorCode) {
        if request.needs_reply {
            self.reply(request.id, Err(code.into()), Instant::now());
        }
    }

    /// Starts shutdown: every writable object is saved and released within
    /// `deadline`. Resolves when done or when the deadline passed, with
    /// whether every copy was released (`RouterCore::is_released`).
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        self.enqueue(Input::Shutdown {
            deadline_ms: deadline.as_millis() as u64,
        });
        let started = Instant::now();
        loop {
            shards::sleep(Duration::from_millis(5)).await;
            let core = self.0.core.borrow();
            if core.is_shutdown_complete() || started.elapsed() >= deadline {
                return core.is_released();
            }
        }
    }

    /// Handles the queued inputs, performing the effects of each before the
    /// next; returns once the queue is empty or a turn's worth was handled.
    fn handle_inputs(&self) {
        // The answers of this poll are timed at its start (the gateway's
        // latency histogram): every request they answer arrived before it,
        // and one clock reading per poll instead of one per answer is a
        // few percent of the core at high rates.
        let polled_at = Instant::now();
        // Through the cache, so the effects timed at `polled_at` read it
        // back without a clock read of their own. A long turn reads the
        // clock again every few dozen inputs (`turn_clock`): a pause inside
        // it is seen before the inputs after it are judged.
        let start_ms = self.checked_reading(self.ms_at(polled_at));
        let served_at_start = self.0.core.borrow().may_serve(start_ms);
        let mut turn = TurnClock::new(start_ms);
        let go_on = || !self.0.held.borrow().is_full();
        self.0.inputs.handle_turn_while(
            INPUTS_PER_TURN_MAX,
            |input| {
                self.apply(input, turn.next(clock::now_ms));
                self.perform_effects(polled_at);
            },
            go_on,
        );
        if turn.was_long() {
            // A pause hidden from the clock inside this turn ends the lease
            // now, so the answers the turn holds are withheld (`held`).
            self.checked_reading_now(clock::now_ms());
        }
        // The lease as the turn left it, for the writers (`answer_gate`);
        // then what the turn sends to clients leaves, if the lease held
        // through the turn (`held`).
        self.publish_lease();
        self.release_held(served_at_start, polled_at);
    }

    /// Applies one input; `polled_ms` is the turn's clock reading for it.
    fn apply(&self, input: Input, polled_ms: u64) {
        // Requests are applied at the poll's reading (one reading per
        // request would be a few percent of the core at high rates): a
        // client's, or another node's off a link, arrived before it, a
        // handler's submit during this poll, so it is at most one poll
        // late. Every other input, rare beside them, reads the clock here:
        // a lease or a timer is judged at the latest time.
        let now = match &input {
            Input::Request { .. } | Input::Service { .. } => polled_ms,
            // (A routed request off a link comes as `Input::Request`.)
            Input::Node { message, .. }
                if matches!(**message, NodeMessage::ServiceRequest { .. }) =>
            {
                polled_ms
            }
            _ => clock::now_ms(),
        };
        match &input {
            Input::Member { node, state, .. } if state.is_ended() => {
                return self.abandon_then(now, *node, input);
            }
            Input::LinkLost { node } => return self.abandon_requests_to(now, *node),
            _ => {}
        }
        if let Input::Request { request, .. } = &input {
            if self.expired_before_run(request, now) {
                return;
            }
        }
        let mut core = self.0.core.borrow_mut();
        match input {
            Input::Request { head, request } => core.on_request(now, head, request),
            Input::Service { node, key, request } if node == self.0.node => {
                core.on_service_request(now, key, request)
            }
            Input::Service { node, key, request } => {
                drop(core);
                self.send_to_node(now, node, NodeMessage::ServiceRequest { key, request });
            }
            Input::Node { from, message } => core.on_node_message(now, from, *message),
            Input::SendFailed { node, message } => core.on_send_failed(now, node, *message),
            Input::StoreReply { token, reply } => core.on_store_reply(now, token, reply),
            Input::Timer(timer) => core.on_timer(now, timer),
            Input::Flush => core.on_flush(now),
            // Off the request path, rare beside it: applied by family.
            input @ (Input::Member { .. }
            | Input::Lease { .. }
            | Input::LeaseEnd { .. }
            | Input::Fence
            | Input::Rejoin { .. }
            | Input::Draining(_)
            | Input::LinkLost { .. }) => self.apply_membership(core, now, input),
            input @ (Input::Shutdown { .. }
            | Input::Transfer { .. }
            | Input::Drain { .. }
            | Input::DrainStep) => self.apply_operator(core, now, input),
        }
    }
}

/// The router task: handles inputs as they are queued.
async fn run(driver: RouterDriver) {
    loop {
        poll_fn(|cx| {
            if driver.0.inputs.is_empty() {
                *driver.0.task.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        driver.handle_inputs();
        driver.mirror_metrics();
        if !driver.0.inputs.is_empty() {
            shards::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    /// See `Input`: past 128 bytes every request costs two `memcpy` calls
    /// more (into the queue and out of it).
    #[test]
    fn an_input_fits_in_128_bytes() {
        assert!(std::mem::size_of::<super::Input>() <= 128);
    }
}
