use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct Shared {
    triggered: AtomicBool,
    // Cold path: touched once per waiting task and once at shutdown, never
    // per request, so a mutex is fine here.
    wakers: Mutex<Vec<Waker>>,
}

/// Triggers shutdown of every core. Cheap to clone, usable from any thread
/// (a signal-handling thread, the admin thread, a test).
#[derive(Clone, Default)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// A signal not yet triggered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts shutdown; later calls do nothing.
    pub fn trigger(&self) {
        if self.shared.triggered.swap(true, Ordering::AcqRel) {
            return;
        }
        let wakers =
            std::mem::take(&mut *self.shared.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        for waker in wakers {
            waker.wake();
        }
    }

    /// Whether shutdown has started.
    pub fn is_triggered(&self) -> bool {
        self.shared.triggered.load(Ordering::Acquire)
    }

    /// A listener for a core (any number may be made).
    pub fn listener(&self) -> ShutdownListener {
        ShutdownListener {
            shared: self.shared.clone(),
        }
    }
}

/// A core's view of shutdown: poll [`ShutdownListener::is_triggered`] in
/// loops, or await [`ShutdownListener::wait`].
#[derive(Clone)]
pub struct ShutdownListener {
    shared: Arc<Shared>,
}

impl ShutdownListener {
    /// Whether shutdown has started.
    pub fn is_triggered(&self) -> bool {
        self.shared.triggered.load(Ordering::Acquire)
    }

    /// Resolves once shutdown has been triggered.
    pub fn wait(&self) -> ShutdownWait {
        ShutdownWait {
            shared: self.shared.clone(),
        }
    }
}

/// The future of [`ShutdownListener::wait`].
pub struct ShutdownWait {
    shared: Arc<Shared>,
}

impl Future for ShutdownWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.shared.triggered.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let mut wakers = self.shared.wakers.lock().unwrap_or_else(|e| e.into_inner());
        // Checked again under the lock: `trigger` sets the flag before it
        // takes the wakers, so a waker registered after this check is
        // always taken and woken.
        if self.shared.triggered.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        if !wakers.iter().any(|waker| waker.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
