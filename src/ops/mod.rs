//! Operations on a running node, asked for on the admin endpoint: move one
//! object to another node ([`transfer`]), drain the node ([`drain`]: its
//! objects to the others, its clients told where to reconnect, then a
//! clean exit), and move its objects to their rendezvous nodes
//! ([`rebalance`]).
//!
//! The admin endpoint runs on a thread of its own and the objects live on
//! the cores, so [`Ops`] (the admin side) reaches a core through a bounded
//! channel per core; each core's [`serve_core`] task performs what arrives
//! on its router and gateway, and answers on a oneshot the admin thread
//! awaits. Nothing here blocks a core: a full channel is answered at once
//! (503), and every wait on the admin side has a deadline.

pub mod client;
pub mod drain;
mod fan_out;
mod find;
mod hot;
pub mod listing;
mod phase;
pub mod rebalance;
pub mod sessions;
pub mod transfer;

use std::sync::{Arc, Mutex};

use futures_channel::{mpsc, oneshot};
use futures_lite::StreamExt;
use wire::ObjectKey;

use self::drain::{CoreDrainParts, DrainStatus};
pub use self::phase::{NodePhase, Phase};
use self::rebalance::RebalanceStatus;
use crate::cluster::view::ClusterView;
use crate::config::{ClusterConfig, Secret};
use crate::gateway::GatewayHandle;
pub use crate::gateway::SessionPush;
use crate::ids::NodeId;
use crate::metrics::AdminStats;
use crate::router::driver::{RouterDriver, TransferReply};
use crate::store::Store;

/// Commands queued for one core at most; past it a call is answered busy.
pub const CORE_COMMANDS_MAX: usize = 64;

/// A command that took this long is followed by a pause as long (see
/// `serve_core`), so commands take at most about half of a core.
const COMMAND_PAUSE_FROM: std::time::Duration = std::time::Duration::from_millis(1);

/// What the admin side asks of a core.
enum Command {
    /// Transfer `key` (owned by this core) to `target`; answer on `reply`.
    Transfer {
        key: ObjectKey,
        target: NodeId,
        reply: oneshot::Sender<TransferReply>,
    },
    /// A page of the core's objects of one type.
    ListObjects {
        page: listing::PageAsk,
        type_id: u32,
        reply: oneshot::Sender<Vec<listing::ObjectRow>>,
    },
    /// The core's session count and a page of its sessions.
    ListSessions {
        page: listing::PageAsk,
        player: Option<u64>,
        reply: oneshot::Sender<(usize, Vec<listing::SessionRow>)>,
    },
    /// The core's hottest objects and the time their counts cover.
    HotObjects {
        reply: oneshot::Sender<(Vec<crate::router::HotObject>, u64)>,
    },
    /// Kick the core's session `session_id` if it is bound to `player_id`;
    /// answers whether it did.
    Kick {
        session_id: u64,
        player_id: u64,
        reply: oneshot::Sender<bool>,
    },
    /// PUSH `body` on `route_id` to the core's session `session_id` if it
    /// is bound to `player_id`; answers what became of it.
    Push {
        session_id: u64,
        player_id: u64,
        route_id: u32,
        body: Vec<u8>,
        reply: oneshot::Sender<crate::gateway::SessionPush>,
    },
    /// Send a one-way message from the node to the object `key`; answers
    /// once it is on its way.
    OneWay {
        key: ObjectKey,
        op: u32,
        body: Vec<u8>,
        reply: oneshot::Sender<()>,
    },
    /// The core's objects whose rendezvous node is another, with it;
    /// `None` until the core knows every node of `expected`.
    RebalancePlan {
        expected: Vec<NodeId>,
        reply: oneshot::Sender<Option<Vec<(ObjectKey, NodeId)>>>,
    },
}

/// The receiving end of one core's commands, for [`serve_core`].
pub struct CoreCommands(mpsc::Receiver<Command>);

/// The admin side of operations: cheap to clone, used from the admin
/// thread.
#[derive(Clone)]
pub struct Ops(Arc<Inner>);

struct Inner {
    /// One sender per core; a `Mutex` so every call shares the channel's
    /// one bound (a clone of a sender would bring a slot of its own).
    cores: Vec<Mutex<mpsc::Sender<Command>>>,
    view: Arc<ClusterView>,
    store: Store,
    phase: NodePhase,
    drain: Arc<DrainStatus>,
    rebalance: Arc<RebalanceStatus>,
    /// `admin.token`, sent with the calls forwarded to another node.
    token: Option<Secret>,
    /// Listings under way (`listing::LISTINGS_AT_ONCE_MAX`).
    listings: std::sync::atomic::AtomicUsize,
}

/// What the node gives operations.
pub struct OpsParts {
    pub core_count: usize,
    pub view: Arc<ClusterView>,
    pub store: Store,
    pub phase: NodePhase,
    pub shutdown: shards::ShutdownHandle,
    /// `admin.token`: a transfer forwarded to the owner's admin endpoint
    /// presents it there.
    pub token: Option<Secret>,
    /// `cluster.rebalance_concurrency` and `cluster.rebalance_on_join`.
    pub rebalance_concurrency: usize,
    pub rebalance_on_join: bool,
    /// Where rebalances are counted.
    pub metrics: Arc<AdminStats>,
}

/// Why a command did not reach its core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unreached {
    /// The core's channel is full.
    Busy,
    /// The core stopped.
    Stopped,
}

impl Ops {
    /// The admin side, and each core's receiving end (in core order).
    pub fn new(parts: OpsParts) -> (Ops, Vec<CoreCommands>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..parts.core_count)
            .map(|_| {
                let (sender, receiver) = mpsc::channel(CORE_COMMANDS_MAX);
                (Mutex::new(sender), CoreCommands(receiver))
            })
            .unzip();
        let drain = Arc::new(DrainStatus::new(parts.core_count, parts.shutdown));
        let ops = Ops(Arc::new(Inner {
            cores: senders,
            view: parts.view,
            store: parts.store,
            phase: parts.phase,
            drain,
            rebalance: Arc::new(RebalanceStatus::new(
                parts.rebalance_concurrency,
                parts.rebalance_on_join,
                parts.metrics,
            )),
            token: parts.token,
            listings: std::sync::atomic::AtomicUsize::new(0),
        }));
        (ops, receivers)
    }

    pub(crate) fn drain_status(&self) -> &Arc<DrainStatus> {
        &self.0.drain
    }

    /// Sends `command` (made for each core by `make`) to every core; the
    /// answers in core order, or why a core could not be asked.
    async fn ask_every_core<T>(
        &self,
        mut make: impl FnMut(oneshot::Sender<T>) -> Command,
    ) -> Result<Vec<T>, Unreached> {
        let mut answers = Vec::with_capacity(self.0.cores.len());
        for core in &self.0.cores {
            let (reply, answer) = oneshot::channel();
            let mut sender = core.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            match sender.try_send(make(reply)) {
                Ok(()) => answers.push(answer),
                Err(error) if error.is_full() => return Err(Unreached::Busy),
                Err(_) => return Err(Unreached::Stopped),
            }
        }
        let mut out = Vec::with_capacity(answers.len());
        for answer in answers {
            match tokio::time::timeout(listing::CORE_ANSWER_WAIT, answer).await {
                Ok(Ok(value)) => out.push(value),
                // A core that does not answer in time is as good as busy.
                Err(_) => return Err(Unreached::Busy),
                Ok(Err(_)) => return Err(Unreached::Stopped),
            }
        }
        Ok(out)
    }

    /// Hands a transfer to the core that owns `key` on this node.
    fn send_transfer(
        &self,
        key: ObjectKey,
        target: NodeId,
    ) -> Result<oneshot::Receiver<TransferReply>, Unreached> {
        let core = wire::shard_of(key, self.0.cores.len() as u32) as usize;
        let (reply, answer) = oneshot::channel();
        let mut sender = self.0.cores[core]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match sender.try_send(Command::Transfer { key, target, reply }) {
            Ok(()) => Ok(answer),
            Err(error) if error.is_full() => Err(Unreached::Busy),
            Err(_) => Err(Unreached::Stopped),
        }
    }
}

/// What one core's operations need.
pub struct CoreOps {
    pub core: usize,
    pub core_count: usize,
    pub router: RouterDriver,
    pub gateway: GatewayHandle,
    pub view: Arc<ClusterView>,
    pub drain: Arc<DrainStatus>,
    pub cluster: ClusterConfig,
}

/// One core's operations task: performs the commands of its channel, and
/// starts this core's drain once the node drains (the drain is asked for
/// through the cluster view, which every core watches already, so it
/// needs no room in a channel that transfers may have filled).
pub async fn serve_core(commands: CoreCommands, ops: CoreOps) {
    let mut commands = commands.0;
    let mut draining = false;
    loop {
        let seen = ops.view.version();
        if !draining && ops.drain.is_requested() {
            draining = true;
            shards::spawn(drain::drain_core(CoreDrainParts {
                core: ops.core,
                core_count: ops.core_count,
                router: ops.router.clone(),
                gateway: ops.gateway.clone(),
                view: ops.view.clone(),
                status: ops.drain.clone(),
                cluster: ops.cluster.clone(),
            }))
            .detach();
        }
        let next = futures_lite::future::or(async { Some(commands.next().await) }, async {
            ops.view.changed(seen).await;
            None
        })
        .await;
        match next {
            Some(Some(command)) => {
                let started = std::time::Instant::now();
                perform(&ops, command);
                // One command a turn, and after a long one a pause as long
                // as it took: a listing walks what the core holds (up to
                // `router.entries_per_core_max` entries, tens of ms), and
                // the queue's 64 of them in one poll held the core's
                // requests and its membership agent for seconds, long
                // enough to be fenced. A plain yield is not enough: the
                // task runs first again in the next turn, before the
                // requests that arrived meanwhile.
                let spent = started.elapsed();
                if spent >= COMMAND_PAUSE_FROM {
                    shards::sleep(spent).await;
                } else {
                    shards::yield_now().await;
                }
            }
            // Every sender is gone: the node is going away.
            Some(None) => return,
            None => {}
        }
    }
}

/// Performs one command of the admin side on this core, and answers it.
fn perform(ops: &CoreOps, command: Command) {
    match command {
        Command::Transfer { key, target, reply } => {
            ops.router.transfer(key, target, move |answer| {
                // The caller may have given up waiting.
                let _ = reply.send(answer);
            });
        }
        // A listing whose caller gave up is not walked.
        Command::ListObjects { reply, .. } if reply.is_canceled() => {}
        Command::ListSessions { reply, .. } if reply.is_canceled() => {}
        Command::ListObjects {
            page,
            type_id,
            reply,
        } => {
            let rows = listing::core_objects(&ops.router, ops.core, type_id, page);
            let _ = reply.send(rows);
        }
        Command::ListSessions {
            page,
            player,
            reply,
        } => {
            let count = ops.gateway.session_count();
            let rows = listing::core_sessions(&ops.gateway, ops.core, player, page);
            let _ = reply.send((count, rows));
        }
        Command::HotObjects { reply } => {
            let _ = reply.send(ops.router.hot_objects());
        }
        Command::Kick {
            session_id,
            player_id,
            reply,
        } => {
            let _ = reply.send(sessions::core_kick(&ops.gateway, session_id, player_id));
        }
        Command::Push {
            session_id,
            player_id,
            route_id,
            body,
            reply,
        } => {
            let pushed = ops.gateway.push_to(session_id, player_id, route_id, &body);
            let _ = reply.send(pushed);
        }
        Command::OneWay {
            key,
            op,
            body,
            reply,
        } => {
            ops.router.send_one_way(key, op, body, None);
            let _ = reply.send(());
        }
        Command::RebalancePlan { expected, reply } => {
            let _ = reply.send(ops.router.rebalance_plan(&expected));
        }
    }
}
