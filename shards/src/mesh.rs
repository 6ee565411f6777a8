use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use glommio::channels::channel_mesh::{Receivers, Senders};
use glommio::channels::shared_channel::ConnectedReceiver;
use glommio::{GlommioError, ResourceType};

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
    pub sent_total: AtomicU64,
    pub full_total: AtomicU64,
    pub closed_total: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// A core's handle for sending to the other cores. Cheap to clone within
/// the core (it is `Rc`-based and stays on its executor).
pub struct Mesh<T: Send> {
    senders: Rc<Senders<T>>,
    stats: Arc<MeshStats>,
}

impl<T: Send> Clone for Mesh<T> {
    fn clone(&self) -> Self {
        Self {
            senders: self.senders.clone(),
            stats: self.stats.clone(),
        }
    }
}

impl<T: Send + 'static> Mesh<T> {
    pub(crate) fn new(senders: Senders<T>, stats: Arc<MeshStats>) -> Self {
        Self {
            senders: Rc::new(senders),
            stats,
        }
    }

    /// This core's index.
    pub fn core_id(&self) -> usize {
        self.senders.peer_id()
    }

    pub fn core_count(&self) -> usize {
        self.senders.nr_consumers()
    }

    /// Queues `message` for core `to` without waiting. A full queue is
    /// counted and reported, never waited on: a core must not stall
    /// because another is slow.
    pub fn try_send(&self, to: usize, message: T) -> Result<(), SendError<T>> {
        if to == self.core_id() {
            return Err(SendError::ToSelf(message));
        }
        if to >= self.core_count() {
            return Err(SendError::NoSuchCore(message));
        }
        match self.senders.try_send_to(to, message) {
            Ok(()) => {
                bump(&self.stats.sent_total);
                Ok(())
            }
            Err(GlommioError::WouldBlock(ResourceType::Channel(message))) => {
                bump(&self.stats.full_total);
                Err(SendError::Full(message))
            }
            Err(GlommioError::Closed(ResourceType::Channel(message))) => {
                bump(&self.stats.closed_total);
                Err(SendError::Closed(message))
            }
            Err(other) => {
                // try_send_to returns only the variants above for a valid
                // peer index; anything else is a glommio contract change.
                panic!("unexpected mesh send error: {other:?}")
            }
        }
    }

    pub fn stats(&self) -> &Arc<MeshStats> {
        &self.stats
    }

    /// Closes this core's sending side, so peers see their inboxes end.
    pub(crate) fn close(&self) {
        self.senders.close();
    }
}

/// A core's incoming mesh channels, one per peer core.
pub struct Inbox<T: Send> {
    streams: Vec<(usize, ConnectedReceiver<T>)>,
}

impl<T: Send + 'static> Inbox<T> {
    pub(crate) fn new(mut receivers: Receivers<T>) -> Self {
        Self {
            streams: receivers.streams(),
        }
    }

    /// Runs `handler(from_core, message)` for every message from every peer,
    /// one task per peer on the current task queue. The tasks end when the
    /// peers close their side (at shutdown).
    pub fn serve(self, handler: Rc<dyn Fn(usize, T)>) -> Vec<glommio::task::JoinHandle<()>> {
        self.streams
            .into_iter()
            .map(|(from, receiver)| {
                let handler = handler.clone();
                glommio::spawn_local(async move {
                    while let Some(message) = receiver.recv().await {
                        handler(from, message);
                    }
                })
                .detach()
            })
            .collect()
    }

    /// Waits for the next message from core `from`; `None` once it closed.
    pub async fn recv_from(&self, from: usize) -> Option<T> {
        let (_, receiver) = self.streams.iter().find(|(peer, _)| *peer == from)?;
        receiver.recv().await
    }
}
