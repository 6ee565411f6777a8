//! The channel mesh between cores: one bounded channel per ordered pair of
//! cores, and per receiving core one signal its inbox task waits on.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Poll, Waker};

use crate::sync::{fence, AtomicBool, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};

/// Why a message could not be queued for another core. The message comes
/// back so the caller can answer it (OVERLOADED, UNAVAILABLE) instead of
/// losing it.
#[derive(Debug)]
pub enum SendError<T> {
    /// The target core's channel already holds `mesh_queue_max` messages.
    Full(T),
    /// The target core is gone (it stopped, or is stopping).
    Closed(T),
    /// The target is this core: deliver it locally, without a channel.
    ToSelf(T),
    /// No such core.
    NoSuchCore(T),
}

impl<T> SendError<T> {
    /// The message that was not sent, back to its sender.
    pub fn into_inner(self) -> T {
        match self {
            SendError::Full(m)
            | SendError::Closed(m)
            | SendError::ToSelf(m)
            | SendError::NoSuchCore(m) => m,
        }
    }
}

/// Counters of one core's outgoing mesh traffic. Each counter is written
/// only by its own core and read by the metrics endpoint, so a relaxed
/// load-and-store is enough and costs no locked instruction.
#[derive(Debug, Default)]
pub struct MeshStats {
    /// Messages sent to another core.
    pub sent_total: AtomicU64,
    /// Sends refused because the target's channel was full.
    pub full_total: AtomicU64,
    /// Sends refused because the target core was gone.
    pub closed_total: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Wakes a receiving core's inbox task after a send. The sender pays one
/// load when the task is busy draining (not registered), and the task is
/// woken once per drain however many messages arrive meanwhile. The loom
/// tests below check that no send is left unseen with the task asleep.
pub(crate) struct Signal {
    registered: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Default for Signal {
    fn default() -> Signal {
        Signal {
            registered: AtomicBool::new(false),
            waker: Mutex::new(None),
        }
    }
}

impl Signal {
    /// After a message is queued: wakes the receiver if it registered.
    fn wake(&self) {
        // Pairs with the fence in `register`: either the receiver sees the
        // message on its re-check, or this sees it registered.
        fence(Ordering::SeqCst);
        if self.registered.load(Ordering::Relaxed) && self.registered.swap(false, Ordering::AcqRel)
        {
            let waker = self.lock().take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Before the receiver's last look at its channels: a send after that
    /// look wakes `waker`.
    fn register(&self, waker: &Waker) {
        *self.lock() = Some(waker.clone());
        self.registered.store(true, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, Option<Waker>> {
        self.waker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The most memory the mesh's channels may take. Each of the C·(C−1)
/// channels of C cores is an array of `mesh_queue_max` slots allocated
/// (and written) when the runtime starts, whether or not a message ever
/// waits: a queue bound meant for a few cores takes gigabytes on a
/// machine of a hundred.
pub const MESH_BYTES_MAX: u128 = 4 << 30;

/// The bytes the channels of `cores` cores take up front with room for
/// `queue_max` messages of `T` each: a slot is the message beside a stamp
/// (crossbeam's bounded channel).
pub fn mesh_bytes<T>(cores: usize, queue_max: usize) -> u128 {
    let align = std::mem::align_of::<T>().max(std::mem::align_of::<usize>());
    let slot = (std::mem::size_of::<usize>() + std::mem::size_of::<T>()).next_multiple_of(align);
    let channels = cores as u128 * cores.saturating_sub(1) as u128;
    channels * queue_max as u128 * slot as u128
}

/// The channels of `count` cores: `senders[from][to]`, `receivers[to][from]`.
pub(crate) struct Wiring<T> {
    pub senders: Vec<Vec<Option<Sender<T>>>>,
    pub receivers: Vec<Vec<Option<Receiver<T>>>>,
    pub signals: Vec<Arc<Signal>>,
}

impl<T> Wiring<T> {
    pub fn new(count: usize, queue_max: usize) -> Wiring<T> {
        let mut senders: Vec<Vec<Option<Sender<T>>>> = (0..count)
            .map(|_| (0..count).map(|_| None).collect())
            .collect();
        let mut receivers: Vec<Vec<Option<Receiver<T>>>> = (0..count)
            .map(|_| (0..count).map(|_| None).collect())
            .collect();
        for (from, row) in senders.iter_mut().enumerate() {
            for (to, slot) in row.iter_mut().enumerate() {
                if from != to {
                    let (sender, receiver) = crossbeam_channel::bounded(queue_max);
                    *slot = Some(sender);
                    receivers[to][from] = Some(receiver);
                }
            }
        }
        Wiring {
            senders,
            receivers,
            signals: (0..count).map(|_| Arc::default()).collect(),
        }
    }
}

/// A core's handle for sending to the other cores. Cheap to clone within
/// the core (`Rc`-based; it stays on its core).
pub struct Mesh<T: Send> {
    inner: Rc<MeshInner<T>>,
}

struct MeshInner<T: Send> {
    id: usize,
    senders: Vec<Option<Sender<T>>>,
    signals: Vec<Arc<Signal>>,
    stats: Arc<MeshStats>,
}

impl<T: Send> Clone for Mesh<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Send + 'static> Mesh<T> {
    pub(crate) fn new(
        id: usize,
        senders: Vec<Option<Sender<T>>>,
        signals: Vec<Arc<Signal>>,
        stats: Arc<MeshStats>,
    ) -> Self {
        Self {
            inner: Rc::new(MeshInner {
                id,
                senders,
                signals,
                stats,
            }),
        }
    }

    /// This core's index.
    pub fn core_id(&self) -> usize {
        self.inner.id
    }

    /// How many cores the mesh joins.
    pub fn core_count(&self) -> usize {
        self.inner.senders.len()
    }

    /// Queues `message` for core `to` without waiting. A full queue is
    /// counted and reported, never waited on: a core must not stall
    /// because another is slow.
    pub fn try_send(&self, to: usize, message: T) -> Result<(), SendError<T>> {
        if to == self.inner.id {
            return Err(SendError::ToSelf(message));
        }
        let Some(Some(sender)) = self.inner.senders.get(to) else {
            return Err(SendError::NoSuchCore(message));
        };
        match sender.try_send(message) {
            Ok(()) => {
                bump(&self.inner.stats.sent_total);
                self.inner.signals[to].wake();
                Ok(())
            }
            Err(TrySendError::Full(message)) => {
                bump(&self.inner.stats.full_total);
                Err(SendError::Full(message))
            }
            Err(TrySendError::Disconnected(message)) => {
                bump(&self.inner.stats.closed_total);
                Err(SendError::Closed(message))
            }
        }
    }

    /// This core's outgoing counters.
    pub fn stats(&self) -> &Arc<MeshStats> {
        &self.inner.stats
    }
}

/// Messages one inbox task hands to its handler before it yields, so a
/// flood from other cores cannot monopolise this one.
const INBOX_BATCH_MAX: usize = 256;

/// A core's incoming mesh channels, one per peer core.
pub struct Inbox<T: Send> {
    receivers: Vec<(usize, Receiver<T>)>,
    signal: Arc<Signal>,
}

impl<T: Send + 'static> Inbox<T> {
    pub(crate) fn new(receivers: Vec<Option<Receiver<T>>>, signal: Arc<Signal>) -> Self {
        Self {
            receivers: receivers
                .into_iter()
                .enumerate()
                .filter_map(|(from, receiver)| Some((from, receiver?)))
                .collect(),
            signal,
        }
    }

    /// Runs `handler(from_core, message)` for every message from every
    /// peer, in one task on this core. The task ends when every peer has
    /// stopped (their channels disconnect).
    pub fn serve(self, handler: Rc<dyn Fn(usize, T)>) -> crate::JoinHandle<()> {
        crate::spawn(async move {
            let next = Cell::new(0usize);
            loop {
                let served = std::future::poll_fn(|cx| {
                    let mut served = 0;
                    let mut open = 0;
                    let start = next.get();
                    for offset in 0..self.receivers.len() {
                        let (from, receiver) =
                            &self.receivers[(start + offset) % self.receivers.len()];
                        loop {
                            match receiver.try_recv() {
                                Ok(message) => {
                                    handler(*from, message);
                                    served += 1;
                                    if served >= INBOX_BATCH_MAX {
                                        next.set((start + offset + 1) % self.receivers.len());
                                        return Poll::Ready(Some(served));
                                    }
                                }
                                Err(TryRecvError::Empty) => {
                                    open += 1;
                                    break;
                                }
                                Err(TryRecvError::Disconnected) => break,
                            }
                        }
                    }
                    if served > 0 {
                        return Poll::Ready(Some(served));
                    }
                    if open == 0 {
                        return Poll::Ready(None);
                    }
                    self.signal.register(cx.waker());
                    // A message sent before the registration was published
                    // is seen here.
                    if self.receivers.iter().any(|(_, r)| !r.is_empty()) {
                        cx.waker().wake_by_ref();
                    }
                    Poll::Pending
                })
                .await;
                match served {
                    Some(_) => crate::yield_now().await,
                    None => return,
                }
            }
        })
    }

    /// Waits for the next message from core `from`; `None` once it stopped.
    pub async fn recv_from(&self, from: usize) -> Option<T> {
        let (_, receiver) = self.receivers.iter().find(|(peer, _)| *peer == from)?;
        std::future::poll_fn(|cx| match receiver.try_recv() {
            Ok(message) => Poll::Ready(Some(message)),
            Err(TryRecvError::Disconnected) => Poll::Ready(None),
            Err(TryRecvError::Empty) => {
                self.signal.register(cx.waker());
                match receiver.try_recv() {
                    Ok(message) => Poll::Ready(Some(message)),
                    Err(TryRecvError::Disconnected) => Poll::Ready(None),
                    Err(TryRecvError::Empty) => Poll::Pending,
                }
            }
        })
        .await
    }
}

#[cfg(all(test, not(loom)))]
mod signal_tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A receiver is woken once per registration however many sends come,
    /// and a send with nobody registered (the receiver draining) wakes no
    /// one.
    #[test]
    fn a_signal_wakes_a_registered_receiver_once() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let signal = Signal::default();
        signal.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        signal.register(&waker);
        signal.wake();
        signal.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        signal.register(&waker);
        signal.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}

/// The mesh signal under loom's model checker (`sync.rs`): every
/// interleaving of senders and the receiving task, with the channel
/// modelled by a counter the sender publishes with a read-modify-write
/// (as the channel's send does) and the receiver reads with an acquire
/// load (as its emptiness check does).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Notify;
    use std::task::Wake;

    /// The receiving task's waker: a wake lets its next park return.
    struct Parker(Notify);

    impl Wake for Parker {
        fn wake(self: Arc<Self>) {
            self.0.notify();
        }
    }

    /// The inbox task's loop (`Inbox::serve`): take what was sent; with
    /// nothing new, register, look once more, and park until woken. Ends
    /// once `want` messages were taken; a lost wake leaves it parked with
    /// every sender gone, which loom reports as a deadlock.
    fn receive(signal: &Signal, sent: &AtomicUsize, want: usize) {
        let parker = Arc::new(Parker(Notify::new()));
        let waker = Waker::from(parker.clone());
        let mut taken = 0;
        loop {
            let available = sent.load(Ordering::Acquire);
            if available > taken {
                taken = available;
                if taken == want {
                    return;
                }
                continue;
            }
            signal.register(&waker);
            // A message sent before the registration was published.
            if sent.load(Ordering::Acquire) > taken {
                continue;
            }
            parker.0.wait();
        }
    }

    fn send(signal: &Signal, sent: &AtomicUsize) {
        sent.fetch_add(1, Ordering::Release);
        signal.wake();
    }

    /// Loom's model with three threads, bounded to three preemptions
    /// per execution (as tokio's loom runs are): the unbounded search of
    /// three threads runs for hours, and the wakes here need fewer
    /// preemptions to go wrong than that (a lost wake needs one or two).
    fn three_threads() -> loom::model::Builder {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model
    }

    /// The whole chain a message from another core travels, each link the
    /// runtime's own: `Mesh::try_send` (the bounded channel, then
    /// `Signal::wake`) on the peer's thread; `Inbox::recv_from` polled by
    /// the core with its task's waker, the `TaskHeader`, whose wake from
    /// off the core goes through the core's `Remote` queue and eventfd; and
    /// the core's loop of drain, poll, announce sleep and sleep
    /// (`Executor::turn` and `park`). A wake lost at any link leaves the
    /// core asleep with the peer gone: loom reports a deadlock. The
    /// channel's own atomics are not loom's, so each of its operations is
    /// one step of the model (it is linearizable): what is searched is
    /// every order of those steps against the signal's, the task header's
    /// and the remote queue's, and what their orderings let each side see.
    #[test]
    fn loom_a_message_from_another_core_reaches_its_sleeping_inbox() {
        use crate::remote::Remote;
        use crate::task::{Priority, TaskHeader};
        use std::future::Future;
        use std::task::Context;

        loom::model(|| {
            let wiring: Wiring<u32> = Wiring::new(2, 1);
            let Wiring {
                mut senders,
                mut receivers,
                signals,
            } = wiring;
            let to_core_1 = std::mem::take(&mut senders[0]);
            let inbox = Inbox::new(std::mem::take(&mut receivers[1]), signals[1].clone());
            let peer = loom::thread::spawn(move || {
                let mesh = Mesh::new(0, to_core_1, signals, Arc::new(MeshStats::default()));
                mesh.try_send(1, 7).expect("room for one");
            });
            let remote = Arc::new(Remote::new().unwrap());
            let task = Arc::new(TaskHeader {
                index: 0,
                priority: Priority::Latency,
                scheduled: crate::sync::AtomicBool::new(true),
                remote: remote.clone(),
            });
            let waker = Waker::from(task.clone());
            let mut cx = Context::from_waker(&waker);
            let mut receive = Box::pin(inbox.recv_from(0));
            // The task starts scheduled, as a spawned one does.
            let mut woken = vec![task];
            loop {
                let mut done = None;
                for task in woken.drain(..) {
                    task.begin_poll();
                    if let Poll::Ready(message) = receive.as_mut().poll(&mut cx) {
                        done = Some(message);
                    }
                }
                if let Some(message) = done {
                    assert_eq!(message, Some(7));
                    break;
                }
                if remote.prepare_sleep() {
                    remote.wait_for_wake();
                    remote.woke();
                }
                remote.drain(&mut woken);
            }
            peer.join().unwrap();
        });
    }

    #[test]
    fn loom_a_send_wakes_a_receiver_that_is_about_to_park() {
        loom::model(|| {
            let signal = Arc::new(Signal::default());
            let sent = Arc::new(AtomicUsize::new(0));
            let sender = {
                let (signal, sent) = (signal.clone(), sent.clone());
                loom::thread::spawn(move || send(&signal, &sent))
            };
            receive(&signal, &sent, 1);
            sender.join().unwrap();
        });
    }

    /// Two senders (two peer cores): the second may find the receiver
    /// registered while the first's wake is still taking its waker.
    #[test]
    fn loom_two_senders_never_leave_a_message_unseen() {
        three_threads().check(|| {
            let signal = Arc::new(Signal::default());
            let sent = Arc::new(AtomicUsize::new(0));
            let senders: Vec<_> = (0..2)
                .map(|_| {
                    let (signal, sent) = (signal.clone(), sent.clone());
                    loom::thread::spawn(move || send(&signal, &sent))
                })
                .collect();
            receive(&signal, &sent, 2);
            for sender in senders {
                sender.join().unwrap();
            }
        });
    }
}
