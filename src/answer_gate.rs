//! The gate a core's successful answers pass on their way to the kernel.
//!
//! A router answers inside its membership lease, and what it hands on
//! reaches a socket later: at the turn's end, then through a session's
//! outbox or a link's queue, then a send the connection's task starts. A
//! process stopped (`SIGSTOP`, a starved CPU) anywhere on that way for
//! longer than `cluster.down_after_ms` would resume and write answers made
//! before the pause after another node declared it down and took its
//! objects over from their last save: under `interval`, acknowledgements
//! of changes the new owner never saw.
//!
//! So every writer that holds a RESPONSE (the gateway's connection task,
//! a link's writer) asks the gate, at a clock reading taken just before
//! it sends, whether the lease still holds. When it does, nothing can
//! have been claimed: a claim needs the node declared down, which no
//! observer does before the lease's end. When it does not, the writer
//! waits: a heartbeat that applies renews the lease (its compare-and-set
//! shows nobody declared the node down, so the answers were right) and the
//! writer sends; a fence (somebody did) ends the wait with the answers
//! dropped, and their connection with them (a client's requests stay
//! uncertain, as a timeout would leave them). Errors, pushes and kicks do
//! not wait: they acknowledge nothing.
//!
//! One gate a core, written by its router (`publish`, `fence`) and read
//! by the writers on the same thread. A node without a cluster has no
//! lease, and its gate is always open.

use std::cell::{Cell, RefCell};
use std::task::{Context, Poll, Waker};

/// One core's gate; see the module documentation.
pub struct AnswerGate {
    /// Answers leave while the clock reads less than this (the router's
    /// lease, `u64::MAX` without one, 0 while fenced).
    until_ms: Cell<u64>,
    /// How many times the node fenced: a writer that waited across a
    /// fence drops what it held.
    fences: Cell<u64>,
    /// Writers holding answers until the gate opens or the node fences.
    waiting: RefCell<Vec<Waker>>,
    /// How many waits began: a writer polled again while it waits is not
    /// counted again (`waits_begun`).
    waits_begun: Cell<u64>,
    /// Run at each fence: what holds answers the writers have not taken
    /// yet (a session's queue) drops them.
    fence_hooks: RefCell<Vec<Box<dyn Fn()>>>,
}

impl Default for AnswerGate {
    fn default() -> AnswerGate {
        AnswerGate {
            until_ms: Cell::new(u64::MAX),
            fences: Cell::new(0),
            waiting: RefCell::new(Vec::new()),
            waits_begun: Cell::new(0),
            fence_hooks: RefCell::new(Vec::new()),
        }
    }
}

/// What a writer holding answers may do with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passage {
    /// Send them.
    Open,
    /// Drop them with their connection: the node fenced since they were
    /// made.
    Fenced,
}

impl AnswerGate {
    /// Whether answers may leave at `now_ms` (a fresh clock reading).
    pub fn open_at(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.get()
    }

    /// The fence count a writer notes before it waits (`poll_pass`).
    pub fn fences(&self) -> u64 {
        self.fences.get()
    }

    /// A writer holding answers since the gate's fence count was
    /// `fences_seen`: whether they may leave at `now_ms`, must be dropped,
    /// or wait (the task is woken when the lease is renewed or the node
    /// fences).
    pub fn poll_pass(&self, cx: &Context<'_>, fences_seen: u64, now_ms: u64) -> Poll<Passage> {
        if self.fences.get() != fences_seen {
            return Poll::Ready(Passage::Fenced);
        }
        if self.open_at(now_ms) {
            return Poll::Ready(Passage::Open);
        }
        let mut waiting = self.waiting.borrow_mut();
        if !waiting.iter().any(|waker| waker.will_wake(cx.waker())) {
            waiting.push(cx.waker().clone());
            self.waits_begun.set(self.waits_begun.get() + 1);
        }
        Poll::Pending
    }

    /// How many times a writer began to wait (`poll_pass` pending with a
    /// waker it did not hold yet): a writer counts what it held by the
    /// change across its poll, once per wait however often it is polled.
    pub fn waits_begun(&self) -> u64 {
        self.waits_begun.get()
    }

    /// The router's lease, as it stands after a turn: `None` without one
    /// (no cluster), `Some(0)` while it serves nothing. A longer lease
    /// wakes the writers waiting (they check it against the clock).
    pub fn publish(&self, until_ms: Option<u64>) {
        let until_ms = until_ms.unwrap_or(u64::MAX);
        let renewed = until_ms > self.until_ms.get();
        self.until_ms.set(until_ms);
        if renewed {
            self.wake_all();
        }
    }

    /// Runs `hook` at every fence, after the gate closed.
    pub fn on_fence(&self, hook: Box<dyn Fn()>) {
        self.fence_hooks.borrow_mut().push(hook);
    }

    /// The node fenced: what writers hold now was made by an incarnation
    /// that ended, and never leaves.
    pub fn fence(&self) {
        self.fences.set(self.fences.get() + 1);
        self.until_ms.set(0);
        for hook in self.fence_hooks.borrow().iter() {
            hook();
        }
        self.wake_all();
    }

    fn wake_all(&self) {
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        for waker in waiting {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wait_is_counted_once_however_often_the_writer_is_polled() {
        let gate = AnswerGate::default();
        gate.publish(Some(10));
        let (_, waker) = waker();
        let cx = Context::from_waker(&waker);
        for _ in 0..3 {
            assert_eq!(gate.poll_pass(&cx, 0, 20), Poll::Pending);
        }
        assert_eq!(gate.waits_begun(), 1);
        // Woken by a renewal that still lies behind the clock: a new wait.
        gate.publish(Some(15));
        assert_eq!(gate.poll_pass(&cx, 0, 20), Poll::Pending);
        assert_eq!(gate.waits_begun(), 2);
        gate.publish(Some(30));
        assert_eq!(gate.poll_pass(&cx, 0, 20), Poll::Ready(Passage::Open));
        assert_eq!(gate.waits_begun(), 2);
    }

    #[test]
    fn without_a_lease_the_gate_is_always_open() {
        let gate = AnswerGate::default();
        let (_, waker) = waker();
        let cx = Context::from_waker(&waker);
        assert_eq!(
            gate.poll_pass(&cx, 0, u64::MAX - 1),
            Poll::Ready(Passage::Open)
        );
    }

    #[test]
    fn answers_wait_past_the_lease_and_leave_when_a_heartbeat_renews_it() {
        let gate = AnswerGate::default();
        gate.publish(Some(1_000));
        let (woken, waker) = waker();
        let cx = Context::from_waker(&waker);
        let seen = gate.fences();
        assert_eq!(gate.poll_pass(&cx, seen, 999), Poll::Ready(Passage::Open));
        // Resumed after a pause past the lease: the answers wait.
        assert_eq!(gate.poll_pass(&cx, seen, 3_000), Poll::Pending);
        // Registered once however often it asks.
        assert_eq!(gate.poll_pass(&cx, seen, 3_001), Poll::Pending);
        // A lease no longer than the old one wakes nobody.
        gate.publish(Some(900));
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
        gate.publish(Some(4_000));
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(gate.poll_pass(&cx, seen, 3_100), Poll::Ready(Passage::Open));
    }

    #[test]
    fn a_fence_drops_what_waited_across_it_even_after_a_rejoin() {
        let gate = AnswerGate::default();
        gate.publish(Some(1_000));
        let (woken, waker) = waker();
        let cx = Context::from_waker(&waker);
        let seen = gate.fences();
        assert_eq!(gate.poll_pass(&cx, seen, 3_000), Poll::Pending);
        let hooked = std::rc::Rc::new(Cell::new(0));
        gate.on_fence(Box::new({
            let hooked = hooked.clone();
            move || hooked.set(hooked.get() + 1)
        }));
        gate.fence();
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(hooked.get(), 1);
        assert!(!gate.open_at(3_000));
        // The node rejoined with a new lease before the writer ran again:
        // what it held still never leaves.
        gate.publish(Some(9_000));
        assert_eq!(
            gate.poll_pass(&cx, seen, 3_100),
            Poll::Ready(Passage::Fenced)
        );
        // Answers made after the rejoin pass.
        assert_eq!(
            gate.poll_pass(&cx, gate.fences(), 3_100),
            Poll::Ready(Passage::Open)
        );
    }
}
