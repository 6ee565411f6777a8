//! Rebalancing (`POST /rebalance`, `routerd rebalance`): objects move so
//! that every up node holds about its rendezvous share. A node that joins
//! gets nothing by itself (an object stays where it was claimed), so each
//! node moves its own objects whose default node (rendezvous hashing of
//! the key over the nodes that take new objects, the rule that places a
//! new object) is now another, with the router's transfer: the state
//! shipped, requests arriving meanwhile queued and passed on in order, the
//! move confirmed by the target's compare-and-set.
//!
//! Each node rebalances its own objects only (nobody else may move them),
//! so a rebalance of the cluster is one on every member: the node asked
//! starts its own and asks every other up member to start theirs
//! (`?scope=node`), with its admin token. On a node, a task on the admin
//! thread asks every core for its plan (one walk of its entries), then
//! keeps at most `cluster.rebalance_concurrency` transfers in flight over
//! the node until the plan is done. What moved, and what did not and why,
//! is in `GET /rebalance` and the `routerd_rebalance_*` metrics. With
//! `cluster.rebalance_on_join`, every node starts one by itself when
//! another member comes up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wire::ObjectKey;

use super::transfer::TRANSFER_WAIT;
use super::{Command, Ops, Phase, Unreached};
use crate::config::REBALANCE_CONCURRENCY_MAX;
use crate::ids::NodeId;
use crate::metrics::AdminStats;
use crate::router::driver::{TransferReply, TRANSFER_WAITERS_MAX};
use crate::store::MemberState;

// Every transfer in flight waits at its core; a core waits for at most
// TRANSFER_WAITERS_MAX.
const _: () = assert!(REBALANCE_CONCURRENCY_MAX <= TRANSFER_WAITERS_MAX);

/// How long a transfer waits for room in its core's command channel
/// between tries, and how many tries it gets.
const BUSY_WAIT: Duration = Duration::from_millis(20);
const BUSY_TRIES_MAX: u32 = 50;
/// How long a rebalance waits between asks for the cores' plans while a
/// core has not taken every up member into its view yet, and how many
/// asks it makes (membership reaches the cores within milliseconds).
const PLAN_RETRY_WAIT: Duration = Duration::from_millis(20);
const PLAN_ASKS_MAX: u32 = 250;
/// How long the node asked waits for each member to start its own.
const FAN_OUT_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a join not rebalanced to yet (a run was under way, or the
/// node did not serve) is looked at again.
const JOIN_RETRY_WAIT: Duration = Duration::from_millis(200);

/// One node's rebalances: the last one's progress.
#[derive(Debug, Default)]
struct Progress {
    running: bool,
    runs: u64,
    started_at: Option<Instant>,
    elapsed_ms: Option<u64>,
    /// Objects the plan named.
    planned: u64,
    moved: u64,
    failed: u64,
    /// Transfers in flight now, and the most at once in this run.
    moving: usize,
    moving_max: usize,
    /// Objects moved, by target node.
    moved_to: BTreeMap<u64, u64>,
    /// Objects not moved, by why (the transfer call's error names).
    failures: BTreeMap<&'static str, u64>,
}

/// The node's rebalance, shared by the admin handlers and its task.
pub struct RebalanceStatus {
    progress: Mutex<Progress>,
    concurrency: usize,
    on_join: bool,
    metrics: Arc<AdminStats>,
}

fn lock(mutex: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl RebalanceStatus {
    pub(super) fn new(concurrency: usize, on_join: bool, metrics: Arc<AdminStats>) -> Self {
        RebalanceStatus {
            progress: Mutex::new(Progress::default()),
            concurrency: concurrency.clamp(1, REBALANCE_CONCURRENCY_MAX),
            on_join,
            metrics,
        }
    }

    fn to_json(&self, node_id: u64) -> Value {
        let progress = lock(&self.progress);
        let elapsed_ms = progress.elapsed_ms.or_else(|| {
            progress
                .started_at
                .map(|at| at.elapsed().as_millis() as u64)
        });
        let moved_to: serde_json::Map<String, Value> = progress
            .moved_to
            .iter()
            .map(|(node, count)| (node.to_string(), json!(count)))
            .collect();
        json!({
            "node_id": node_id,
            "running": progress.running,
            "runs": progress.runs,
            "elapsed_ms": elapsed_ms,
            "planned": progress.planned,
            "moved": progress.moved,
            "failed": progress.failed,
            "moving": progress.moving,
            "moving_max": progress.moving_max,
            "concurrency": self.concurrency,
            "moved_to": moved_to,
            "failures": progress.failures,
        })
    }

    fn started(&self, moving: usize) {
        let mut progress = lock(&self.progress);
        progress.moving = moving;
        progress.moving_max = progress.moving_max.max(moving);
        self.metrics.rebalance_in_flight.set(moving as i64);
    }

    fn ended(&self, target: NodeId, moving: usize, failure: Option<&'static str>) {
        let mut progress = lock(&self.progress);
        progress.moving = moving;
        self.metrics.rebalance_in_flight.set(moving as i64);
        match failure {
            None => {
                progress.moved += 1;
                *progress.moved_to.entry(target.0).or_default() += 1;
                self.metrics.rebalance_moves.inc();
            }
            Some(why) => {
                progress.failed += 1;
                *progress.failures.entry(why).or_default() += 1;
                self.metrics.rebalance_failures.inc();
            }
        }
    }
}

/// What a rebalance asked for after a join did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterJoin {
    /// A run started, whose plan sees the members up now.
    Started,
    /// Not now: a run planned before the join is under way, or the node
    /// does not serve (starting, fenced). Asked again later.
    Later,
    /// Never: the node drains or stops.
    Refused(RebalanceRefused),
}

/// Why a rebalance could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebalanceRefused {
    /// The node does not serve yet.
    Starting,
    /// The node drains: its drain moves every object away already.
    Draining,
    /// The node is stopping.
    Stopping,
}

impl Ops {
    /// Starts a rebalance of this node's objects (while one runs, a call
    /// changes nothing) and returns its status. Must be called on the
    /// admin thread's runtime, where the rebalance then runs.
    pub fn rebalance(&self) -> Result<Value, RebalanceRefused> {
        self.start_rebalance()?;
        Ok(self.rebalance_status())
    }

    /// Starts a run unless one is under way; whether it started one.
    fn start_rebalance(&self) -> Result<bool, RebalanceRefused> {
        match self.0.phase.get() {
            Phase::Starting => return Err(RebalanceRefused::Starting),
            Phase::Draining => return Err(RebalanceRefused::Draining),
            Phase::Stopping => return Err(RebalanceRefused::Stopping),
            Phase::Serving => {}
        }
        let status = &self.0.rebalance;
        let mut progress = lock(&status.progress);
        if progress.running {
            return Ok(false);
        }
        let runs = progress.runs + 1;
        *progress = Progress {
            running: true,
            runs,
            started_at: Some(Instant::now()),
            ..Progress::default()
        };
        status.metrics.rebalance_runs.inc();
        drop(tokio::spawn(self.clone().run_rebalance()));
        Ok(true)
    }

    /// A rebalance for members that joined: a run of its own, since one
    /// under way planned without them.
    fn rebalance_after_join(&self) -> AfterJoin {
        if self.0.view.snapshot().me.fenced {
            return AfterJoin::Later;
        }
        match self.start_rebalance() {
            Ok(true) => AfterJoin::Started,
            Ok(false) | Err(RebalanceRefused::Starting) => AfterJoin::Later,
            Err(refused) => AfterJoin::Refused(refused),
        }
    }

    /// This node's last rebalance, as `GET /rebalance` shows it.
    pub fn rebalance_status(&self) -> Value {
        self.0.rebalance.to_json(self.0.view.me().0)
    }

    /// A rebalance of the cluster: this node's, and every other up
    /// member's, asked on its admin endpoint (`POST /rebalance?scope=node`,
    /// with this node's token). The answer lists each node's status, or
    /// why it could not be asked.
    pub async fn rebalance_cluster(&self) -> Result<Value, RebalanceRefused> {
        let own = self.rebalance()?;
        let mut nodes = vec![own];
        nodes.extend(
            self.ask_every_peer("POST", "/rebalance?scope=node", FAN_OUT_TIMEOUT)
                .await,
        );
        nodes.sort_by_key(|node| node["node_id"].as_u64());
        Ok(json!({ "nodes": nodes }))
    }

    /// With `cluster.rebalance_on_join`: watches membership and starts a
    /// rebalance of this node each time another member comes up. A join
    /// while a run is under way (its plan did not see the new member), or
    /// while the node starts or is fenced, is rebalanced to once the run
    /// ended or the node serves. Runs on the admin thread's runtime for
    /// the node's life.
    pub async fn rebalance_on_joins(self) {
        if !self.0.rebalance.on_join {
            return;
        }
        let view = self.0.view.clone();
        let up = |view: &crate::cluster::view::ClusterView| -> BTreeSet<NodeId> {
            view.snapshot()
                .peers
                .values()
                .filter(|peer| peer.state == MemberState::Up)
                .map(|peer| peer.node)
                .collect()
        };
        let mut known = up(&view);
        // Members that joined and no run has planned with yet.
        let mut joined: BTreeSet<u64> = BTreeSet::new();
        loop {
            let seen = view.version();
            if joined.is_empty() {
                view.changed(seen).await;
            } else {
                futures_lite::future::or(view.changed(seen), tokio::time::sleep(JOIN_RETRY_WAIT))
                    .await;
            }
            let now_up = up(&view);
            joined.extend(now_up.difference(&known).map(|node| node.0));
            known = now_up;
            if joined.is_empty() {
                continue;
            }
            match self.rebalance_after_join() {
                AfterJoin::Started => {
                    tracing::info!(?joined, "rebalancing: members joined");
                    joined.clear();
                }
                AfterJoin::Later => {}
                AfterJoin::Refused(refused) => {
                    tracing::info!(?joined, ?refused, "not rebalancing on join");
                    joined.clear();
                }
            }
        }
    }

    /// One rebalance of this node: the cores' plans, then their transfers,
    /// `concurrency` at a time.
    async fn run_rebalance(self) {
        let status = self.0.rebalance.clone();
        let plan = match self.plan().await {
            Ok(plan) => plan,
            Err(why) => {
                // Not a success that moved nothing: the run says it failed.
                status.ended(NodeId(0), 0, Some(why));
                Vec::new()
            }
        };
        lock(&status.progress).planned = plan.len() as u64;
        tracing::info!(planned = plan.len(), "rebalancing this node's objects");
        let mut in_flight = tokio::task::JoinSet::new();
        let mut plan = plan.into_iter();
        loop {
            while in_flight.len() < status.concurrency && self.0.phase.get() == Phase::Serving {
                let Some((key, target)) = plan.next() else {
                    break;
                };
                match self.send_transfer_patiently(key, target).await {
                    Ok(answer) => {
                        in_flight.spawn(async move {
                            let reply = tokio::time::timeout(TRANSFER_WAIT, answer).await;
                            (target, failure_of(reply))
                        });
                        status.started(in_flight.len());
                    }
                    Err(unreached) => {
                        let why = match unreached {
                            Unreached::Busy => "busy",
                            Unreached::Stopped => "stopping",
                        };
                        status.ended(target, in_flight.len(), Some(why));
                    }
                }
            }
            let Some(joined) = in_flight.join_next().await else {
                break;
            };
            let (target, failure) = joined.unwrap_or((NodeId(0), Some("internal")));
            status.ended(target, in_flight.len(), failure);
        }
        // Objects of the plan never started (the node began to drain or
        // stop): not moved, and counted so.
        for (_, target) in plan.by_ref() {
            status.ended(target, 0, Some("not_started"));
        }
        let mut progress = lock(&status.progress);
        progress.running = false;
        progress.moving = 0;
        progress.elapsed_ms = progress
            .started_at
            .map(|at| at.elapsed().as_millis() as u64);
        tracing::info!(
            moved = progress.moved,
            failed = progress.failed,
            left = plan.len(),
            "rebalance done"
        );
    }

    /// Every core's plan, made once every core knows the members this node
    /// sees up (a plan made before would leave a member that just joined
    /// out). `Err` names why there is none: a core did not answer
    /// (`plan_unavailable`), or one never saw every member up within
    /// `PLAN_ASKS_MAX` asks (`plan_incomplete`: its objects stay).
    async fn plan(&self) -> Result<Vec<(ObjectKey, NodeId)>, &'static str> {
        let expected: Vec<NodeId> = self
            .0
            .view
            .snapshot()
            .peers
            .values()
            .filter(|peer| peer.state == MemberState::Up)
            .map(|peer| peer.node)
            .collect();
        for ask in 1..=PLAN_ASKS_MAX {
            let plans = self
                .ask_every_core(|reply| Command::RebalancePlan {
                    expected: expected.clone(),
                    reply,
                })
                .await;
            match plans {
                Ok(plans) if plans.iter().all(Option::is_some) => {
                    return Ok(plans.into_iter().flatten().flatten().collect());
                }
                Ok(_) if ask < PLAN_ASKS_MAX => tokio::time::sleep(PLAN_RETRY_WAIT).await,
                Ok(_) => {
                    tracing::warn!("rebalance: a core never saw every member up; nothing moves");
                    return Err("plan_incomplete");
                }
                Err(unreached) => {
                    tracing::warn!(?unreached, "rebalance: a core did not give its plan");
                    return Err("plan_unavailable");
                }
            }
        }
        Err("plan_incomplete")
    }

    /// `send_transfer`, waiting out a full command channel for a while.
    async fn send_transfer_patiently(
        &self,
        key: ObjectKey,
        target: NodeId,
    ) -> Result<futures_channel::oneshot::Receiver<TransferReply>, Unreached> {
        let mut tries = 0;
        loop {
            match self.send_transfer(key, target) {
                Err(Unreached::Busy) if tries < BUSY_TRIES_MAX => {
                    tries += 1;
                    tokio::time::sleep(BUSY_WAIT).await;
                }
                sent => return sent,
            }
        }
    }
}

/// Why a rebalance transfer did not move its object (`None`: it moved),
/// in the words of `POST /objects/../transfer`'s errors.
fn failure_of(
    reply: Result<
        Result<TransferReply, futures_channel::oneshot::Canceled>,
        tokio::time::error::Elapsed,
    >,
) -> Option<&'static str> {
    use crate::router::TransferError;
    match reply {
        Err(_) => Some("timed_out"),
        Ok(Err(_)) => Some("stopping"),
        Ok(Ok(Err(error))) => Some(match error {
            TransferError::UnknownNode => "unknown_node",
            TransferError::TargetUnavailable => "target_unavailable",
            TransferError::TargetDraining => "target_draining",
            TransferError::InProgress => "busy",
            TransferError::NotWritable => "not_active",
            TransferError::SameNode => "same_node",
            TransferError::ShuttingDown => "stopping",
            TransferError::Fenced => "fenced",
            TransferError::UnknownType => "no_such_type",
        }),
        // The record names the target: it serves the object, or loads it
        // from the store on its next request (refused, or no answer).
        Ok(Ok(Ok(done))) if done.outcome.moved() => None,
        Ok(Ok(Ok(_))) => Some("not_moved"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::view::{ClusterView, Standing};
    use crate::ops::{NodePhase, OpsParts};

    /// A rebalance whose cores never answer for a plan moved nothing: it
    /// must say it failed (the CLI exits 3 on failures), not that it
    /// succeeded with nothing planned.
    #[test]
    fn a_rebalance_that_could_not_plan_is_a_failure() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let standing = Standing {
            incarnation: 1,
            lease_until_ms: u64::MAX,
            fenced: false,
            state: MemberState::Up,
        };
        let shutdown = shards::ShutdownHandle::new();
        let phase = NodePhase::new(shutdown.clone());
        phase.set_serving();
        let (store, _) = crate::store::open_memory(&crate::config::StoreConfig::default());
        // The cores' receiving ends are kept and never served.
        let (ops, _cores) = Ops::new(OpsParts {
            core_count: 1,
            view: Arc::new(ClusterView::new(NodeId(1), 1, standing)),
            store,
            phase,
            shutdown,
            token: None,
            rebalance_concurrency: 4,
            rebalance_on_join: false,
            metrics: Arc::new(AdminStats::default()),
        });
        let status = runtime.block_on(async {
            ops.rebalance().unwrap();
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let status = ops.rebalance_status();
                if status["running"] == false {
                    return status;
                }
            }
        });
        assert_eq!(status["planned"], 0);
        assert_eq!(status["failed"], 1, "{status}");
        assert_eq!(status["failures"]["plan_unavailable"], 1, "{status}");
    }

    /// The plan asks a core receives, held until the test answers them.
    async fn next_plan_ask(
        cores: &mut [crate::ops::CoreCommands],
        within: Duration,
    ) -> Option<futures_channel::oneshot::Sender<Option<Vec<(ObjectKey, NodeId)>>>> {
        use futures_lite::StreamExt;
        let next = tokio::time::timeout(within, cores[0].0.next()).await;
        match next.ok()?? {
            crate::ops::Command::RebalancePlan { reply, .. } => Some(reply),
            _ => panic!("only plans are asked for"),
        }
    }

    fn join(view: &ClusterView, node: u64) {
        view.update(|_, peers| {
            peers.insert(
                NodeId(node),
                crate::cluster::view::Peer {
                    node: NodeId(node),
                    incarnation: 1,
                    state: MemberState::Up,
                    cores: Vec::new(),
                    gateway: Default::default(),
                    admin: String::new(),
                    timers: None,
                },
            );
        });
    }

    /// A member that joined while a run was under way (planned without
    /// it), or while the node was starting, was never rebalanced to: the
    /// join's call found the run going, or the node not serving, and was
    /// dropped. It is now kept until a run can plan with the member.
    #[test]
    fn a_join_during_a_run_or_the_start_is_rebalanced_to_after() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let standing = Standing {
            incarnation: 1,
            lease_until_ms: u64::MAX,
            fenced: false,
            state: MemberState::Up,
        };
        let shutdown = shards::ShutdownHandle::new();
        let phase = NodePhase::new(shutdown.clone());
        let (store, _) = crate::store::open_memory(&crate::config::StoreConfig::default());
        let view = Arc::new(ClusterView::new(NodeId(1), 1, standing));
        let (ops, mut cores) = Ops::new(OpsParts {
            core_count: 1,
            view: view.clone(),
            store,
            phase: phase.clone(),
            shutdown,
            token: None,
            rebalance_concurrency: 4,
            rebalance_on_join: true,
            metrics: Arc::new(AdminStats::default()),
        });
        let wait = Duration::from_secs(3);
        let settle = Duration::from_millis(400);
        runtime.block_on(async {
            drop(tokio::spawn(ops.clone().rebalance_on_joins()));
            tokio::task::yield_now().await;
            // Node 2 joins while this node starts: nothing runs yet.
            join(&view, 2);
            assert!(next_plan_ask(&mut cores, settle).await.is_none());
            phase.set_serving();
            let first = next_plan_ask(&mut cores, wait).await;
            let first = first.expect("a run once the node serves");
            // Node 3 joins while that run (planned without it) goes on.
            join(&view, 3);
            assert!(next_plan_ask(&mut cores, settle).await.is_none());
            first.send(Some(Vec::new())).unwrap();
            let second = next_plan_ask(&mut cores, wait).await;
            let second = second.expect("a run for the member that joined during the first");
            second.send(Some(Vec::new())).unwrap();
            tokio::time::sleep(settle).await;
        });
        let status = ops.rebalance_status();
        assert_eq!(
            (&status["runs"], &status["running"]),
            (&json!(2), &json!(false)),
            "{status}"
        );
    }
}
