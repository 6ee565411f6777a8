//! Draining a node (`POST /drain`): from the first moment `/healthz`
//! answers 503 `draining` and membership writes `draining`, so no node
//! places a new object here; then every core, at once,
//! - transfers every object it owns to the node rendezvous hashing picks
//!   among the others, `cluster.drain_concurrency` at a time over the node
//!   (the router's `start_drain`);
//! - tells every client session to move (`sys.redirect` with
//!   `cluster.redirect_grace_ms` and another up node's gateway), keeps
//!   answering it until the client closes or the grace ends, then closes
//!   it (the gateway's `redirect_all`);
//!
//! and once every core has nothing left to move and no session open (or
//! `cluster.drain_timeout_ms` passed), the node stops as on SIGTERM: what is
//! left is saved and released, membership writes `left`, the process
//! exits 0. The drain's last status says whether it was complete (nothing
//! left behind); the node keeps answering `GET /drain` with it until it was
//! read once (at most `FINAL_STATUS_WAIT`), so whoever follows the drain
//! learns how it ended before the endpoint goes away.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use super::Ops;
use crate::cluster::view::ClusterView;
use crate::config::ClusterConfig;
use crate::gateway::GatewayHandle;
use crate::gateway_addresses::GatewayAddresses;
use crate::router::driver::RouterDriver;
use crate::router::DrainProgress;
use crate::store::MemberState;

/// How often a draining core looks at its progress.
const DRAIN_TICK: Duration = Duration::from_millis(50);
/// How often a draining core lets its router try objects it could not
/// place (a member may have come up), besides the steps transfers make.
const DRAIN_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How long a finished drain waits for its last status to be read
/// (`GET /drain`) before the node stops; `routerd drain` reads it within
/// its poll interval.
const FINAL_STATUS_WAIT: Duration = Duration::from_secs(1);

/// The node's drain, shared by the admin thread and the cores.
pub struct DrainStatus {
    requested: AtomicBool,
    started_at: Mutex<Option<Instant>>,
    cores: Mutex<Vec<CoreDrain>>,
    cores_done: AtomicUsize,
    /// The status of a finished drain was read (`to_json` after the last
    /// core was done).
    final_read: AtomicBool,
    shutdown: shards::ShutdownHandle,
}

/// One core's last report.
#[derive(Clone, Copy, Debug, Default)]
struct CoreDrain {
    progress: DrainProgress,
    sessions: usize,
    done: bool,
    /// It stopped at `cluster.drain_timeout_ms`, not with nothing left.
    timed_out: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic on a core stops the process (fail-stop): a poisoned lock is
    // only seen on the way out, with whole data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl DrainStatus {
    pub(super) fn new(core_count: usize, shutdown: shards::ShutdownHandle) -> DrainStatus {
        DrainStatus {
            requested: AtomicBool::new(false),
            started_at: Mutex::new(None),
            cores: Mutex::new(vec![CoreDrain::default(); core_count]),
            cores_done: AtomicUsize::new(0),
            final_read: AtomicBool::new(false),
            shutdown,
        }
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    fn report(&self, core: usize, progress: DrainProgress, sessions: usize) {
        if let Some(slot) = lock(&self.cores).get_mut(core) {
            slot.progress = progress;
            slot.sessions = sessions;
        }
    }

    /// A core finished (`timed_out`: at the drain's timeout); whether it
    /// was the last one, which stops the node (`stop_when_reported`).
    fn core_done(&self, core: usize, timed_out: bool) -> bool {
        let mut cores = lock(&self.cores);
        let Some(slot) = cores.get_mut(core) else {
            return false;
        };
        if slot.done {
            return false;
        }
        slot.done = true;
        slot.timed_out = timed_out;
        let total = cores.len();
        drop(cores);
        self.cores_done.fetch_add(1, Ordering::AcqRel) + 1 == total
    }

    /// Stops the node once the finished drain's status was read, or
    /// `FINAL_STATUS_WAIT` passed.
    async fn stop_when_reported(&self) {
        let finished = Instant::now();
        while !self.final_read.load(Ordering::Acquire) && finished.elapsed() < FINAL_STATUS_WAIT {
            shards::sleep(DRAIN_TICK).await;
        }
        tracing::info!(status = %self.to_json(), "drained: stopping");
        self.shutdown.trigger();
    }

    /// The drain as `/drain` reports it. Once every core is done,
    /// `complete` says whether the drain left nothing behind: no object
    /// still here (given up on, with no node to take it, or not moved
    /// before the timeout) and no transfer in flight.
    pub fn to_json(&self) -> serde_json::Value {
        let started_at = *lock(&self.started_at);
        let cores = lock(&self.cores).clone();
        let sum = |f: fn(&CoreDrain) -> u64| cores.iter().map(f).sum::<u64>();
        let finished = !cores.is_empty() && cores.iter().all(|c| c.done);
        let left = sum(|c| (c.progress.objects + c.progress.moving) as u64);
        if finished {
            self.final_read.store(true, Ordering::Release);
        }
        json!({
            "draining": self.is_requested(),
            "elapsed_ms": started_at.map(|at| at.elapsed().as_millis() as u64),
            "objects": sum(|c| c.progress.objects as u64),
            "moving": sum(|c| c.progress.moving as u64),
            "moved": sum(|c| c.progress.moved),
            "not_moved": sum(|c| c.progress.not_moved),
            "given_up": sum(|c| c.progress.given_up as u64),
            "no_target": cores.iter().any(|c| c.progress.no_target),
            "timed_out": cores.iter().any(|c| c.timed_out),
            "sessions": sum(|c| c.sessions as u64),
            "cores_done": cores.iter().filter(|c| c.done).count(),
            "cores": cores.len(),
            "complete": finished.then_some(left == 0),
        })
    }
}

/// Why a drain could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainRefused {
    /// The node does not serve yet.
    Starting,
    /// The node is stopping already.
    Stopping,
}

impl Ops {
    /// Starts draining the node (a second call changes nothing) and
    /// returns the drain's status.
    pub fn drain(&self) -> Result<serde_json::Value, DrainRefused> {
        let inner = &self.0;
        match inner.phase.get() {
            crate::ops::Phase::Starting => return Err(DrainRefused::Starting),
            crate::ops::Phase::Stopping => return Err(DrainRefused::Stopping),
            crate::ops::Phase::Serving | crate::ops::Phase::Draining => {}
        }
        if !inner.drain.requested.swap(true, Ordering::AcqRel) {
            *lock(&inner.drain.started_at) = Some(Instant::now());
            inner.phase.set_draining();
            tracing::info!("draining: moving objects and sessions to other nodes");
            // Wakes every core's operations task as well (`serve_core`).
            inner.view.request_state(MemberState::Draining);
        }
        Ok(inner.drain.to_json())
    }
}

/// What one core's drain needs.
pub(super) struct CoreDrainParts {
    pub core: usize,
    pub core_count: usize,
    pub router: RouterDriver,
    pub gateway: GatewayHandle,
    pub view: Arc<ClusterView>,
    pub status: Arc<DrainStatus>,
    pub cluster: ClusterConfig,
}

/// The gateways of the other members that take clients: up, not
/// draining, with an address; in node order. Each session is sent to one
/// that serves its own transport.
fn redirect_targets(view: &ClusterView) -> Vec<GatewayAddresses> {
    view.snapshot()
        .peers
        .values()
        .filter(|peer| peer.state == MemberState::Up && !peer.gateway.is_empty())
        .map(|peer| peer.gateway.clone())
        .collect()
}

/// One core's drain, until it has nothing left or the drain timed out.
pub(super) async fn drain_core(parts: CoreDrainParts) {
    let started = Instant::now();
    let timeout = Duration::from_millis(parts.cluster.drain_timeout_ms);
    let concurrency = parts
        .cluster
        .drain_concurrency
        .div_ceil(parts.core_count.max(1));
    parts.router.start_drain(concurrency);
    let mut seen = parts.view.version();
    parts.gateway.redirect_all(
        Duration::from_millis(parts.cluster.redirect_grace_ms),
        redirect_targets(&parts.view),
    );
    let mut last_retry = Instant::now();
    let mut timed_out = false;
    loop {
        shards::sleep(DRAIN_TICK).await;
        if parts.view.version() != seen {
            seen = parts.view.version();
            parts
                .gateway
                .set_redirect_targets(redirect_targets(&parts.view));
            parts.router.drain_step();
        } else if last_retry.elapsed() >= DRAIN_RETRY_INTERVAL {
            last_retry = Instant::now();
            parts.router.drain_step();
        }
        let progress = parts.router.drain_progress();
        let sessions = parts.gateway.session_count();
        parts.status.report(parts.core, progress, sessions);
        if progress.finished() && sessions == 0 {
            tracing::info!(
                core = parts.core,
                moved = progress.moved,
                left = progress.objects,
                "core drained"
            );
            break;
        }
        if started.elapsed() >= timeout {
            tracing::warn!(
                core = parts.core,
                objects = progress.objects,
                moving = progress.moving,
                sessions,
                "drain timed out: stopping with what is left"
            );
            timed_out = true;
            break;
        }
    }
    if parts.status.core_done(parts.core, timed_out) {
        parts.status.stop_when_reported().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(objects: usize, moving: usize, no_target: bool) -> DrainProgress {
        DrainProgress {
            started: true,
            objects,
            moving,
            no_target,
            ..DrainProgress::default()
        }
    }

    /// Every core done used to read the same whether it moved everything
    /// or stopped with objects left: `complete` tells them apart, and says
    /// nothing until the last core is done.
    #[test]
    fn a_finished_drain_says_whether_it_left_objects_behind() {
        let status = DrainStatus::new(2, shards::ShutdownHandle::new());
        status.report(0, progress(0, 0, false), 0);
        assert!(!status.core_done(0, false), "one core of two");
        assert_eq!(status.to_json()["complete"], serde_json::Value::Null);
        assert!(!status.final_read.load(Ordering::Acquire));
        status.report(1, progress(3, 0, true), 0);
        assert!(status.core_done(1, false), "the last core");
        assert!(!status.core_done(1, false), "once");
        let last = status.to_json();
        assert_eq!(
            (&last["complete"], &last["no_target"], &last["objects"]),
            (&json!(false), &json!(true), &json!(3)),
            "{last}"
        );
        assert!(status.final_read.load(Ordering::Acquire), "read once");

        let status = DrainStatus::new(1, shards::ShutdownHandle::new());
        status.report(0, progress(0, 1, false), 0);
        status.core_done(0, true);
        let last = status.to_json();
        assert_eq!(last["complete"], false, "a transfer in flight: {last}");
        assert_eq!(last["timed_out"], true, "{last}");

        let status = DrainStatus::new(1, shards::ShutdownHandle::new());
        status.report(0, progress(0, 0, true), 0);
        status.core_done(0, false);
        assert_eq!(status.to_json()["complete"], true, "nothing to move");
    }
}
