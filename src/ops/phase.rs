//! Where the node is in its life, as `/healthz` reports it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use shards::ShutdownHandle;

/// A node's phase, in the only order it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Binding listeners, starting cores: not serving yet.
    Starting,
    /// Every core serves clients.
    Serving,
    /// Moving its objects and clients to other nodes before it leaves; it
    /// still answers, but a load balancer should send new clients elsewhere.
    Draining,
    /// Shutting down.
    Stopping,
}

impl Phase {
    const ALL: [Phase; 4] = [
        Phase::Starting,
        Phase::Serving,
        Phase::Draining,
        Phase::Stopping,
    ];

    /// The word `/healthz` answers with.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Serving => "ok",
            Phase::Draining => "draining",
            Phase::Stopping => "stopping",
        }
    }
}

/// The node's phase, set by the node and read by the admin thread. It only
/// moves forward (a node that drained or began to stop never serves again
/// in this process), so setters racing each other cannot move it back.
/// Once shutdown has been triggered it reads [`Phase::Stopping`], whoever
/// triggered it (a signal, a test, a core that failed).
#[derive(Clone)]
pub struct NodePhase {
    phase: Arc<AtomicU8>,
    shutdown: ShutdownHandle,
}

impl NodePhase {
    /// A node that is starting and stops when `shutdown` is triggered.
    pub fn new(shutdown: ShutdownHandle) -> NodePhase {
        NodePhase {
            phase: Arc::new(AtomicU8::new(Phase::Starting as u8)),
            shutdown,
        }
    }

    pub fn set_serving(&self) {
        self.advance(Phase::Serving);
    }

    pub fn set_draining(&self) {
        self.advance(Phase::Draining);
    }

    pub fn set_stopping(&self) {
        self.advance(Phase::Stopping);
    }

    pub fn get(&self) -> Phase {
        if self.shutdown.is_triggered() {
            return Phase::Stopping;
        }
        let stored = self.phase.load(Ordering::Acquire);
        Phase::ALL
            .into_iter()
            .find(|phase| *phase as u8 == stored)
            .unwrap_or(Phase::Stopping)
    }

    fn advance(&self, to: Phase) {
        self.phase.fetch_max(to as u8, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for NodePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NodePhase").field(&self.get()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_only_moves_forward_and_shutdown_means_stopping() {
        let shutdown = ShutdownHandle::new();
        let phase = NodePhase::new(shutdown.clone());
        assert_eq!(phase.get(), Phase::Starting);
        phase.set_serving();
        assert_eq!(phase.get(), Phase::Serving);
        phase.set_draining();
        phase.set_serving();
        assert_eq!(phase.get(), Phase::Draining);
        shutdown.trigger();
        assert_eq!(phase.get(), Phase::Stopping);

        let phase = NodePhase::new(ShutdownHandle::new());
        phase.set_stopping();
        phase.set_serving();
        assert_eq!(phase.get(), Phase::Stopping);
    }
}
