//! The bridge between callers on any executor and a backend's own thread
//! (the SQLite store thread, the Scylla driver's tokio thread): bounded
//! crossbeam queues of requests, each carrying a futures-aware oneshot for
//! its answer.
//!
//! Two lanes: object traffic (`load`, `write_batch`) and membership traffic
//! (`write_member`, `delete_member`, `poll_members`, `list_members`) have a
//! queue each, and every backend
//! serves the membership queue on its own connection, beside the object
//! one. A heartbeat then never waits behind object reads and writes, nor
//! rides in their group commit: a node under store load keeps its lease.
//!
//! A request is sent when the `Store` method is called, not when its future
//! is first polled, and `try_send` never blocks: a full queue answers
//! `Overloaded` at once, so a glommio core never waits on the store.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use futures_channel::oneshot;
use wire::ObjectKey;

use super::error::{BackendError, LoadError, MembershipError, WriteError};
use super::membership::{
    MemberOutcome, MemberPage, MemberPoll, MemberVersion, MemberWrite, TableVersion,
};
use super::record::{NodeId, RecordWrite, RouteRecord, WriteOutcome};
use crate::metrics::{Histogram, StoreStats};

/// The future every store operation returns: boxed so the backend trait
/// stays object-safe, `Send` so any executor (or thread) may await it.
pub type StoreFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

pub(crate) fn ready<T: Send + 'static>(value: T) -> StoreFuture<T> {
    Box::pin(std::future::ready(value))
}

pub(crate) type LoadReply = oneshot::Sender<Result<Option<RouteRecord>, LoadError>>;
pub(crate) type WriteReply = oneshot::Sender<Result<Vec<WriteOutcome>, WriteError>>;
pub(crate) type MemberWriteReply = oneshot::Sender<Result<MemberOutcome, MembershipError>>;
pub(crate) type ListReply = oneshot::Sender<Result<MemberPage, MembershipError>>;
pub(crate) type PollReply = oneshot::Sender<Result<MemberPoll, MembershipError>>;

/// One queued operation. `deadline` is when the caller stops caring: a
/// request still queued then is answered as timed out without being run.
pub(crate) struct Request {
    pub deadline: Instant,
    pub op: Op,
    reply: Reply,
}

pub(crate) enum Op {
    Load(ObjectKey),
    Write(Vec<RecordWrite>),
    /// Boxed: a row is several times larger than the other ops.
    WriteMember(Box<MemberWrite>),
    /// Answered as a `WriteMember`.
    DeleteMember(NodeId, MemberVersion),
    PollMembers(Vec<NodeId>),
    ListMembers {
        since: TableVersion,
        after: NodeId,
    },
}

impl Op {
    /// Whether the op only reads.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Op::Load(_) | Op::PollMembers(_) | Op::ListMembers { .. }
        )
    }

    /// The answer of a write op whose outcome is unknown (every write in
    /// it `Indeterminate`); `None` for a read.
    pub fn indeterminate(&self) -> Option<Done> {
        match self {
            Op::Write(writes) => Some(Done::Write(vec![WriteOutcome::Indeterminate; writes.len()])),
            Op::WriteMember(_) | Op::DeleteMember(..) => {
                Some(Done::WriteMember(MemberOutcome::Indeterminate))
            }
            Op::Load(_) | Op::PollMembers(_) | Op::ListMembers { .. } => None,
        }
    }
}

enum Reply {
    Load(LoadReply),
    Write(WriteReply),
    WriteMember(MemberWriteReply),
    List(ListReply),
    Poll(PollReply),
}

/// A backend's answer to one `Op`, in the same shape (`DeleteMember` is
/// answered `WriteMember`).
pub(crate) enum Done {
    Load(Option<RouteRecord>),
    Write(Vec<WriteOutcome>),
    WriteMember(MemberOutcome),
    List(MemberPage),
    Poll(MemberPoll),
}

impl Request {
    /// How many writes this request adds to a group commit.
    pub fn weight(&self) -> usize {
        match &self.op {
            Op::Write(writes) => writes.len().max(1),
            _ => 1,
        }
    }

    /// Answers the caller. A receiver that gave up is not an error.
    pub fn answer(self, result: Result<Done, BackendError>) {
        // A send fails only when the caller dropped its future: nobody
        // waits for the answer, so there is nothing to do.
        match (self.reply, result) {
            (Reply::Load(reply), Ok(Done::Load(record))) => drop(reply.send(Ok(record))),
            (Reply::Write(reply), Ok(Done::Write(outcomes))) => drop(reply.send(Ok(outcomes))),
            (Reply::WriteMember(reply), Ok(Done::WriteMember(outcome))) => {
                drop(reply.send(Ok(outcome)))
            }
            (Reply::List(reply), Ok(Done::List(page))) => drop(reply.send(Ok(page))),
            (Reply::Poll(reply), Ok(Done::Poll(poll))) => drop(reply.send(Ok(poll))),
            (reply, Ok(_)) => {
                debug_assert!(false, "a backend answered an op with another op's result");
                reply.fail(BackendError::Corrupt(
                    "backend answered with a mismatched result",
                ));
            }
            (reply, Err(error)) => reply.fail(error),
        }
    }

    /// Answers a request that ran out of time. A write becomes
    /// `Indeterminate`: the caller must re-read, whether or not it ran.
    pub fn expire(self) {
        match self.reply {
            Reply::Load(reply) => drop(reply.send(Err(LoadError::Timeout))),
            Reply::Write(reply) => {
                let count = match &self.op {
                    Op::Write(writes) => writes.len(),
                    _ => 0,
                };
                drop(reply.send(Ok(vec![WriteOutcome::Indeterminate; count])));
            }
            Reply::WriteMember(reply) => drop(reply.send(Ok(MemberOutcome::Indeterminate))),
            Reply::List(reply) => drop(reply.send(Err(MembershipError::Timeout))),
            Reply::Poll(reply) => drop(reply.send(Err(MembershipError::Timeout))),
        }
    }
}

impl Reply {
    fn fail(self, error: BackendError) {
        match self {
            Reply::Load(reply) => drop(reply.send(Err(error.into()))),
            Reply::Write(reply) => drop(reply.send(Err(error.into()))),
            Reply::WriteMember(reply) => drop(reply.send(Err(error.into()))),
            Reply::List(reply) => drop(reply.send(Err(error.into()))),
            Reply::Poll(reply) => drop(reply.send(Err(error.into()))),
        }
    }
}

/// Membership requests waiting at most: one node has one heartbeat, a
/// poll, a listing page, a declaration of each peer it watches and a
/// deletion in flight at most, so a full membership queue means the
/// membership connection is stuck, and a caller is told at once.
pub const MEMBER_QUEUE_MAX: usize = 64;

/// Whether membership has a lane of its own. `Shared` puts it in the
/// object queue, behind object traffic and in its group commits, as
/// before the lanes existed: it exists for the benchmark's baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberLane {
    /// Membership requests on a lane of their own.
    Own,
    /// Membership requests in the object queue (the benchmark's baseline).
    Shared,
}

/// The receivers a backend drains, one a lane.
pub(crate) struct Lanes {
    /// `Load` and `Write`.
    pub objects: Receiver<Request>,
    /// `WriteMember`, `DeleteMember`, `PollMembers` and `ListMembers`.
    pub members: Receiver<Request>,
}

/// The caller's side of a backend thread.
pub(crate) struct Bridge {
    objects: Sender<Request>,
    members: Sender<Request>,
    timeout: Duration,
    /// Latencies of the operations that reached the queue, recorded by the
    /// core that awaited them (every backend with a thread has a bridge,
    /// so this is the one place that sees them all).
    stats: Arc<StoreStats>,
}

/// Records into `histogram` how long the operation that started at
/// `started` took, once its answer is in.
async fn timed<T>(
    answer: impl Future<Output = T>,
    stats: Arc<StoreStats>,
    histogram: fn(&StoreStats) -> &Histogram,
    started: Instant,
) -> T {
    let result = answer.await;
    histogram(&stats).record_shared(started.elapsed());
    result
}

impl Bridge {
    /// A bridge and the receivers its backend drains. `queue_max` bounds
    /// the object requests waiting, `MEMBER_QUEUE_MAX` the membership ones.
    pub fn new(queue_max: usize, timeout: Duration, lane: MemberLane) -> (Bridge, Lanes) {
        let (objects, objects_receiver) = crossbeam_channel::bounded(queue_max);
        let (mut members, members_receiver) = crossbeam_channel::bounded(MEMBER_QUEUE_MAX);
        if lane == MemberLane::Shared {
            // The membership receiver's sender is gone: its worker stops
            // at once, and membership requests go to the object queue.
            members = objects.clone();
        }
        let stats = Arc::default();
        (
            Bridge {
                objects,
                members,
                timeout,
                stats,
            },
            Lanes {
                objects: objects_receiver,
                members: members_receiver,
            },
        )
    }

    /// Queues `op` on its lane; returns when it was queued.
    fn submit(&self, op: Op, reply: Reply) -> Result<Instant, TrySendError<Request>> {
        let now = Instant::now();
        let lane = match op {
            Op::Load(_) | Op::Write(_) => &self.objects,
            Op::WriteMember(_)
            | Op::DeleteMember(..)
            | Op::PollMembers(_)
            | Op::ListMembers { .. } => &self.members,
        };
        lane.try_send(Request {
            deadline: now + self.timeout,
            op,
            reply,
        })
        .map(|()| now)
    }

    pub fn load(&self, key: ObjectKey) -> StoreFuture<Result<Option<RouteRecord>, LoadError>> {
        let (reply, answer) = oneshot::channel();
        match self.submit(Op::Load(key), Reply::Load(reply)) {
            // A dropped reply means the backend thread died: for a read,
            // that is simply a closed store.
            Ok(started) => Box::pin(timed(
                async move { answer.await.unwrap_or(Err(LoadError::Closed)) },
                self.stats.clone(),
                |stats| &stats.load,
                started,
            )),
            Err(TrySendError::Full(_)) => ready(Err(LoadError::Overloaded)),
            Err(TrySendError::Disconnected(_)) => ready(Err(LoadError::Closed)),
        }
    }

    pub fn write_batch(
        &self,
        writes: Vec<RecordWrite>,
    ) -> StoreFuture<Result<Vec<WriteOutcome>, WriteError>> {
        let count = writes.len();
        let (reply, answer) = oneshot::channel();
        match self.submit(Op::Write(writes), Reply::Write(reply)) {
            // The request was handed over, so a backend thread that died
            // before answering may have committed it: Indeterminate.
            Ok(started) => Box::pin(timed(
                async move {
                    answer
                        .await
                        .unwrap_or_else(|_| Ok(vec![WriteOutcome::Indeterminate; count]))
                },
                self.stats.clone(),
                |stats| &stats.write,
                started,
            )),
            Err(TrySendError::Full(_)) => ready(Err(WriteError::Overloaded)),
            Err(TrySendError::Disconnected(_)) => ready(Err(WriteError::Closed)),
        }
    }

    pub fn write_member(
        &self,
        write: MemberWrite,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        self.member_op(Op::WriteMember(Box::new(write)))
    }

    pub fn delete_member(
        &self,
        node_id: NodeId,
        expected: MemberVersion,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        self.member_op(Op::DeleteMember(node_id, expected))
    }

    fn member_op(&self, op: Op) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        let (reply, answer) = oneshot::channel();
        match self.submit(op, Reply::WriteMember(reply)) {
            // Handed over: a backend thread that died may have applied it.
            Ok(started) => Box::pin(timed(
                async move { answer.await.unwrap_or(Ok(MemberOutcome::Indeterminate)) },
                self.stats.clone(),
                |stats| &stats.write_member,
                started,
            )),
            Err(TrySendError::Full(_)) => ready(Err(MembershipError::Overloaded)),
            Err(TrySendError::Disconnected(_)) => ready(Err(MembershipError::Closed)),
        }
    }

    pub fn poll_members(
        &self,
        nodes: Vec<NodeId>,
    ) -> StoreFuture<Result<MemberPoll, MembershipError>> {
        let (reply, answer) = oneshot::channel();
        self.member_read(Op::PollMembers(nodes), Reply::Poll(reply), answer)
    }

    pub fn list_members(
        &self,
        since: TableVersion,
        after: NodeId,
    ) -> StoreFuture<Result<MemberPage, MembershipError>> {
        let (reply, answer) = oneshot::channel();
        self.member_read(Op::ListMembers { since, after }, Reply::List(reply), answer)
    }

    fn member_read<T: Send + 'static>(
        &self,
        op: Op,
        reply: Reply,
        answer: oneshot::Receiver<Result<T, MembershipError>>,
    ) -> StoreFuture<Result<T, MembershipError>> {
        match self.submit(op, reply) {
            Ok(started) => Box::pin(timed(
                async move { answer.await.unwrap_or(Err(MembershipError::Closed)) },
                self.stats.clone(),
                |stats| &stats.list_members,
                started,
            )),
            Err(TrySendError::Full(_)) => ready(Err(MembershipError::Overloaded)),
            Err(TrySendError::Disconnected(_)) => ready(Err(MembershipError::Closed)),
        }
    }
}

/// The SQLite and Scylla backends are each a thread behind a bridge: the
/// bridge is their `Backend`.
impl super::api::Backend for Bridge {
    fn load(&self, key: ObjectKey) -> StoreFuture<Result<Option<RouteRecord>, LoadError>> {
        Bridge::load(self, key)
    }

    fn write_batch(
        &self,
        writes: Vec<RecordWrite>,
    ) -> StoreFuture<Result<Vec<WriteOutcome>, WriteError>> {
        Bridge::write_batch(self, writes)
    }

    fn write_member(
        &self,
        write: MemberWrite,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        Bridge::write_member(self, write)
    }

    fn delete_member(
        &self,
        node_id: NodeId,
        expected: MemberVersion,
    ) -> StoreFuture<Result<MemberOutcome, MembershipError>> {
        Bridge::delete_member(self, node_id, expected)
    }

    fn poll_members(&self, nodes: Vec<NodeId>) -> StoreFuture<Result<MemberPoll, MembershipError>> {
        Bridge::poll_members(self, nodes)
    }

    fn list_members(
        &self,
        since: TableVersion,
        after: NodeId,
    ) -> StoreFuture<Result<MemberPage, MembershipError>> {
        Bridge::list_members(self, since, after)
    }

    fn stats(&self) -> Option<Arc<StoreStats>> {
        Some(self.stats.clone())
    }

    fn queue_depth(&self) -> usize {
        if self.members.same_channel(&self.objects) {
            return self.objects.len();
        }
        self.objects.len() + self.members.len()
    }
}

/// The one-worker tokio runtime a driver thread (PostgreSQL, ScyllaDB)
/// serves its lanes on, its threads named `thread_name`; `None` once
/// `ready` has been told why it could not be built.
#[cfg(any(feature = "postgres", feature = "scylla"))]
pub(super) fn driver_runtime(
    thread_name: &str,
    ready: &std::sync::mpsc::SyncSender<Result<(), super::OpenError>>,
) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(thread_name)
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            drop(ready.send(Err(super::OpenError::Thread(error))));
            None
        }
    }
}
