//! Timers: `sleep` and `sleep_until`, kept in an ordered map per executor.
//! The executor fires what is due once per loop turn and parks no longer
//! than the earliest deadline.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The timers of one executor, by (deadline, sequence number).
#[derive(Default)]
pub(crate) struct Timers {
    entries: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
}

impl Timers {
    pub fn insert(&mut self, deadline: Instant, waker: Waker) -> (Instant, u64) {
        self.next_id += 1;
        let key = (deadline, self.next_id);
        self.entries.insert(key, waker);
        key
    }

    /// Replaces the waker of a timer still armed (a task polled again from
    /// another waker context).
    pub fn update(&mut self, key: (Instant, u64), waker: &Waker) {
        if let Some(entry) = self.entries.get_mut(&key) {
            if !entry.will_wake(waker) {
                *entry = waker.clone();
            }
        }
    }

    pub fn remove(&mut self, key: (Instant, u64)) {
        self.entries.remove(&key);
    }

    /// Takes the wakers of every timer due at `now`.
    pub fn take_due(&mut self, now: Instant, into: &mut Vec<Waker>) {
        while let Some(entry) = self.entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            into.push(entry.remove());
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.keys().next().map(|(deadline, _)| *deadline)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Waits until `duration` has passed. Must be awaited on a core.
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(Instant::now() + duration)
}

/// Waits until `deadline`. Must be awaited on a core.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline,
        key: None,
        _on_this_core: std::marker::PhantomData,
    }
}

/// The future of [`sleep`].
pub struct Sleep {
    deadline: Instant,
    key: Option<(Instant, u64)>,
    /// The key names a timer of the core that polled it; on another core it
    /// would name (and remove) one of that core's timers.
    _on_this_core: std::marker::PhantomData<*const ()>,
}

impl Sleep {
    /// When the sleep ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let now = crate::executor::loop_now();
        if now >= self.deadline {
            if let Some(key) = self.key.take() {
                crate::executor::with_timers(|timers| timers.remove(key));
            }
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        match self.key {
            Some(key) => crate::executor::with_timers(|timers| timers.update(key, cx.waker())),
            None => {
                let key = crate::executor::with_timers(|timers| {
                    timers.insert(deadline, cx.waker().clone())
                });
                self.key = Some(key);
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // A Sleep dropped after its executor ended has nothing to undo.
            crate::executor::try_with_timers(|timers| timers.remove(key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Compiles only for a type that is not `Send` (see `net.rs`'s tests).
    trait MaybeSend<Which> {
        const HOLDS: () = ();
    }
    impl<T: ?Sized> MaybeSend<()> for T {}
    impl<T: ?Sized + Send> MaybeSend<u8> for T {}

    /// A sleep holds a key into its core's timers: it cannot move to
    /// another core, where the key would name another timer.
    #[test]
    fn a_sleep_stays_on_its_core() {
        let () = <Sleep as MaybeSend<_>>::HOLDS;
    }

    #[test]
    fn due_timers_fire_in_deadline_order_and_removed_ones_never() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let start = Instant::now();
        let mut timers = Timers::default();
        let late = timers.insert(start + Duration::from_millis(30), waker.clone());
        let early = timers.insert(start + Duration::from_millis(10), waker.clone());
        let removed = timers.insert(start + Duration::from_millis(5), waker.clone());
        timers.remove(removed);
        assert_eq!(timers.next_deadline(), Some(early.0));
        let mut due = Vec::new();
        timers.take_due(start + Duration::from_millis(20), &mut due);
        assert_eq!(due.len(), 1);
        due.drain(..).for_each(Waker::wake);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(timers.next_deadline(), Some(late.0));
        timers.take_due(start + Duration::from_millis(30), &mut due);
        assert_eq!(due.len(), 1);
        assert_eq!(timers.len(), 0);
    }
}
