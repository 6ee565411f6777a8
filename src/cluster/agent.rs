//! Membership's driver. At start-up, [`join`] takes this node's
//! incarnation before any core runs, blocking on the store (the cores'
//! request numbers carry the incarnation, so it must be known first).
//! Then an [`Agent`] on core 0 keeps membership going: it performs the
//! machine's table reads and writes with their deadlines, feeds back their
//! answers on this node's monotonic clock, and publishes what happened to
//! the [`ClusterView`] every core follows, to the catalog and to the
//! metrics. At a clean stop it writes `left`, once every core has saved
//! and released its objects.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::before;
use super::membership::{down_wait_ms, Action, Event, MemberOpError, Membership, WriteTag};
use super::view::{ClusterView, Peer, Standing};
use crate::catalog::{ActorConfig, ActorEvents, Catalog};
use crate::clock;
use crate::ids::NodeId;
use crate::metrics::{CoreMetrics, ErrorOp};
use crate::store::{AdvertisedActor, MemberRow, MemberState, MemberTimers, Store};

/// What a start-up join gives.
pub struct Joined {
    pub membership: Membership,
    pub incarnation: u64,
    pub lease_until_ms: u64,
    /// The other members as the join read them.
    pub peers: Vec<MemberRow>,
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "node id {0} is held by a live process (its heartbeat advances in the membership \
         table): stop that process or give this one another node.id"
    )]
    Refused(u64),
    #[error("could not take an incarnation within {0:?}: the store did not answer")]
    Unreachable(Duration),
}

/// Takes this node's incarnation, blocking the calling thread. A start
/// after a crash waits until the crashed process's row stood still for
/// `down_after_ms` (or someone declared it down).
pub fn join(
    store: &Store,
    mut membership: Membership,
    give_up: Duration,
) -> Result<Joined, JoinError> {
    let started = Instant::now();
    let mut incarnation = None;
    let mut lease_until_ms = None;
    loop {
        let now = clock::now_ms();
        membership.on_tick(now);
        loop {
            let actions = membership.take_actions();
            if actions.is_empty() {
                break;
            }
            for action in actions {
                // The store's own request timeout bounds each wait.
                perform_blocking(store, &mut membership, action);
            }
        }
        for event in membership.take_events() {
            match event {
                Event::Joined { incarnation: taken } => incarnation = Some(taken),
                Event::Lease { until_ms } => lease_until_ms = Some(until_ms),
                Event::Refused { node } => return Err(JoinError::Refused(node.0)),
                Event::Member { row } => {
                    warn_of_other_timers(membership.timers(), &row);
                    super::view::warn_of_unspecified_addresses(&row);
                }
                _ => {}
            }
        }
        // The cores start with the whole view: the first listing is done.
        let joined = incarnation
            .zip(lease_until_ms)
            .filter(|_| membership.has_listed());
        if let Some((incarnation, lease_until_ms)) = joined {
            let peers = membership.members().cloned().collect();
            return Ok(Joined {
                membership,
                incarnation,
                lease_until_ms,
                peers,
            });
        }
        if started.elapsed() >= give_up {
            return Err(JoinError::Unreachable(give_up));
        }
        std::thread::sleep(Duration::from_millis(membership.tick_ms()));
    }
}

/// A member whose row shows other timers than `own` is safe (nobody
/// declares it down before its own lease ran out) but is detected later
/// than the operator may think, and is a config that drifted: said at the
/// join's first listing and at every change of its row.
fn warn_of_other_timers(own: MemberTimers, row: &MemberRow) {
    let Some(theirs) = row.timers.filter(|theirs| *theirs != own) else {
        return;
    };
    if row.state.is_ended() {
        return;
    }
    tracing::warn!(
        node = row.node_id.0,
        heartbeat_interval_ms = theirs.heartbeat_interval_ms,
        fence_after_ms = theirs.fence_after_ms,
        down_after_ms = theirs.down_after_ms,
        declared_down_after_ms = down_wait_ms(own, Some(theirs)),
        "this member runs other cluster timers than this node: this node declares it down only \
         once its own lease has run out (declared_down_after_ms); run the same timers on every \
         node (docs/cluster.md, The timing rule)"
    );
}

/// Performs one action on the calling thread, blocking on the store.
fn perform_blocking(store: &Store, membership: &mut Membership, action: Action) {
    use futures_lite::future::block_on;
    match action {
        Action::Poll { nodes } => match block_on(store.poll_members(nodes)) {
            Ok(poll) => membership.on_polled(clock::now_ms(), poll),
            Err(_) => membership.on_poll_failed(),
        },
        Action::List { since, after } => match block_on(store.list_members(since, after)) {
            Ok(page) => membership.on_listed(clock::now_ms(), page),
            Err(_) => membership.on_list_failed(),
        },
        Action::Write { tag, write } => {
            let outcome = block_on(store.write_member(write.clone()));
            let outcome = outcome.map_err(MemberOpError::from);
            membership.on_written(clock::now_ms(), tag, &write, outcome);
        }
        Action::Delete { node, version } => {
            let outcome = block_on(store.delete_member(node, version));
            let outcome = outcome.map_err(MemberOpError::from);
            membership.on_deleted(clock::now_ms(), node, outcome);
        }
    }
}

/// Writes `left` for a node whose cores never ran (a start that failed
/// after its join), blocking; best effort within a few heartbeats.
pub fn leave_blocking(store: &Store, mut membership: Membership) {
    let started = Instant::now();
    membership.set_state(clock::now_ms(), MemberState::Left);
    while membership.written_state() != Some(MemberState::Left)
        && started.elapsed() < Duration::from_secs(5)
    {
        for action in membership.take_actions() {
            match action {
                Action::Poll { .. } => membership.on_poll_failed(),
                Action::List { .. } => membership.on_list_failed(),
                Action::Delete { node, .. } => {
                    membership.on_deleted(clock::now_ms(), node, Err(MemberOpError::NotSent))
                }
                write @ Action::Write { .. } => perform_blocking(store, &mut membership, write),
            }
        }
        std::thread::sleep(Duration::from_millis(10));
        membership.on_tick(clock::now_ms());
    }
}

/// The catalog's form of what a member advertises.
pub fn actor_configs(row: &MemberRow) -> Vec<ActorConfig> {
    row.actors
        .iter()
        .map(|actor| ActorConfig {
            actor_id: actor.actor_id,
            node_id: row.node_id.0,
            actor_type: actor.actor_type,
            shard: 0,
            supported_msg_ids: actor.msg_ids.clone().into(),
            weight: actor.weight,
            address: row.gateway.as_str().into(),
        })
        .collect()
}

/// The membership row's form of this node's actors.
pub fn advertised(actors: &[ActorConfig]) -> Vec<AdvertisedActor> {
    actors
        .iter()
        .map(|actor| AdvertisedActor {
            actor_id: actor.actor_id,
            actor_type: actor.actor_type,
            msg_ids: actor.supported_msg_ids.to_vec(),
            weight: actor.weight,
        })
        .collect()
}

/// Passes a member's row to the catalog: the actors of a member that is
/// up are candidates; a joining member's are not yet (its cores may not
/// serve), and a draining or ended member's are not any more, so that its
/// keys, and only its keys, move to the others.
pub fn feed_catalog(catalog: &Catalog, row: &MemberRow) {
    if row.state != MemberState::Up {
        catalog.node_down(row.node_id.0);
    } else if let Err(error) = catalog.node_up(row.node_id.0, actor_configs(row)) {
        tracing::warn!(node = row.node_id.0, %error, "advertisement refused");
    }
}

/// What a membership event changes in the catalog: a row feeds it
/// (`feed_catalog`); a deleted row takes the member's actors out. A member
/// that leaves cleanly may go from `up` to deleted between two listings, so
/// the deletion is the only event this node sees of its leaving: without
/// it the catalog would keep picking the ended node for its keys.
pub fn catalog_follows(catalog: &Catalog, event: &Event) {
    match event {
        Event::Member { row } => feed_catalog(catalog, row),
        Event::Removed { node } => {
            catalog.node_down(node.0);
        }
        _ => {}
    }
}

/// Membership on core 0.
pub struct Agent {
    membership: RefCell<Membership>,
    store: Store,
    view: Arc<ClusterView>,
    catalog: Arc<Catalog>,
    metrics: Arc<CoreMetrics>,
    /// A heartbeat write unanswered this long counts as failed (it may
    /// still apply: see `Membership::on_written`).
    heartbeat_deadline: Duration,
    /// Any other table operation.
    request_deadline: Duration,
    core_count: usize,
}

pub struct AgentParts {
    pub membership: Membership,
    pub store: Store,
    pub view: Arc<ClusterView>,
    pub catalog: Arc<Catalog>,
    pub metrics: Arc<CoreMetrics>,
    pub heartbeat_deadline: Duration,
    pub request_deadline: Duration,
    pub core_count: usize,
}

impl Agent {
    pub fn new(parts: AgentParts) -> Rc<Agent> {
        Rc::new(Agent {
            membership: RefCell::new(parts.membership),
            store: parts.store,
            view: parts.view,
            catalog: parts.catalog,
            metrics: parts.metrics,
            heartbeat_deadline: parts.heartbeat_deadline,
            request_deadline: parts.request_deadline,
            core_count: parts.core_count,
        })
    }

    /// Ticks membership until the core stops.
    pub async fn run(self: Rc<Self>) {
        let tick_ms = self.membership.borrow().tick_ms();
        let tick = Duration::from_millis(tick_ms);
        // Time unseen by the monotonic clock eats into the timing rule's
        // margin (`ClusterConfig::check_timing`); a jump of more than one
        // tick ends the lease at once.
        let mut jumps = clock::JumpWatch::new(tick_ms);
        // A pause no clock counted, which the kernel's timer did: the
        // same, and a heartbeat goes at once (`clock::PauseTimer`).
        let mut pauses = clock::PauseTimer::new();
        loop {
            let seen = self.view.version();
            let wanted = self.view.take_wanted_state();
            {
                let mut membership = self.membership.borrow_mut();
                if let Some(cause) = jumps.observe(clock::Readings::now()) {
                    membership.clock_jumped(clock::now_ms(), cause);
                }
                if let Some(hidden) = pauses.check(clock::now_ms()) {
                    let cause = format!("{hidden} ms passed that no clock counted");
                    membership.clock_jumped(clock::now_ms(), cause);
                }
                if let Some(state) = wanted {
                    membership.set_state(clock::now_ms(), state);
                }
                membership.on_tick(clock::now_ms());
                self.view
                    .report_heartbeats(membership.heartbeats_moved_at());
            }
            self.pump();
            // Any change of the view (a state asked for, among others)
            // ticks early; ticking more often than due does nothing.
            futures_lite::future::or(shards::sleep(tick), self.view.changed(seen)).await;
        }
    }

    /// Writes `left` once every core released its objects (or `deadline`
    /// passed), and waits for the store to apply it: from then on other
    /// nodes may claim this node's objects at once.
    pub async fn leave(self: &Rc<Self>, deadline: Instant) {
        while self.view.cores_released() < self.core_count && Instant::now() < deadline {
            let seen = self.view.version();
            before(deadline, self.view.changed(seen)).await;
        }
        if self.view.cores_released() < self.core_count {
            // A core still holds objects it could not save: leaving now
            // would let others claim them while it may serve. Let the
            // observers declare this incarnation down after `down_after`.
            tracing::warn!("not every core released its objects; leaving without `left`");
            return;
        }
        self.membership
            .borrow_mut()
            .set_state(clock::now_ms(), MemberState::Left);
        self.pump();
        while Instant::now() < deadline {
            if self.membership.borrow().written_state() != Some(MemberState::Left) {
                shards::sleep(Duration::from_millis(5)).await;
                // Ticks retry a write that failed.
                self.membership.borrow_mut().on_tick(clock::now_ms());
                self.pump();
                continue;
            }
            tracing::info!("left the cluster");
            return;
        }
        tracing::warn!("could not write `left` before the shutdown deadline");
    }

    /// Performs every action membership asked for and publishes its
    /// events.
    fn pump(self: &Rc<Self>) {
        let mut membership = self.membership.borrow_mut();
        membership.debug_check(clock::now_ms());
        let actions = membership.take_actions();
        drop(membership);
        for action in actions {
            match action {
                Action::Poll { nodes } => {
                    let polled = self.store.poll_members(nodes);
                    self.answer(
                        (polled, ErrorOp::ListMembers),
                        self.request_deadline,
                        |m, now, polled| match polled {
                            Ok(poll) => m.on_polled(now, poll),
                            Err(_) => m.on_poll_failed(),
                        },
                    );
                }
                Action::List { since, after } => {
                    let listed = self.store.list_members(since, after);
                    self.answer(
                        (listed, ErrorOp::ListMembers),
                        self.request_deadline,
                        |m, now, listed| match listed {
                            Ok(page) => m.on_listed(now, page),
                            Err(_) => m.on_list_failed(),
                        },
                    );
                }
                Action::Delete { node, version } => {
                    let deleted = (
                        self.store.delete_member(node, version),
                        ErrorOp::WriteMember,
                    );
                    self.answer(deleted, self.request_deadline, move |m, now, deleted| {
                        m.on_deleted(now, node, deleted)
                    });
                }
                Action::Write { tag, write } => {
                    let wait = match tag {
                        WriteTag::Heartbeat { .. } => self.heartbeat_deadline,
                        _ => self.request_deadline,
                    };
                    let written = (self.store.write_member(write.clone()), ErrorOp::WriteMember);
                    self.answer(written, wait, move |m, now, outcome| {
                        m.on_written(now, tag, &write, outcome)
                    });
                }
            }
        }
        self.publish();
    }

    /// Feeds the answer to operation `op` to membership once it is in
    /// (`Err` with why not, by `wait`), then performs what that asked for.
    /// An answer given up at `wait` is the store's failure, and counted so
    /// (`Store::gave_up`): the store never sees its answer awaited.
    fn answer<T: 'static>(
        self: &Rc<Self>,
        (answer, op): (
            crate::store::StoreFuture<Result<T, crate::store::MembershipError>>,
            ErrorOp,
        ),
        wait: Duration,
        feed: impl FnOnce(&mut Membership, u64, Result<T, MemberOpError>) + 'static,
    ) {
        let agent = self.clone();
        let started = Instant::now();
        let deadline = started + wait;
        shards::spawn(async move {
            let result = match before(deadline, answer).await {
                Some(Ok(value)) => Ok(value),
                Some(Err(error)) => Err(MemberOpError::Store(error)),
                None => {
                    agent.store.gave_up(op, started.elapsed());
                    Err(MemberOpError::TimedOut {
                        waited_ms: wait.as_millis() as u64,
                    })
                }
            };
            feed(&mut agent.membership.borrow_mut(), clock::now_ms(), result);
            agent.pump();
        })
        .detach();
    }

    fn publish(&self) {
        let events = self.membership.borrow_mut().take_events();
        if events.is_empty() {
            return;
        }
        for event in &events {
            self.log_event(event);
            catalog_follows(&self.catalog, event);
        }
        let state = self.membership.borrow().written_state();
        self.view.update(|me, peers| {
            for event in events {
                apply_to_view(me, peers, event);
            }
            if let Some(state) = state {
                me.state = state;
            }
        });
        self.mirror_gauges();
    }

    /// What an operator reads of a membership event, and what it changes
    /// outside the view and the catalog: a node id taken by another process
    /// ends this one.
    fn log_event(&self, event: &Event) {
        match event {
            Event::Removed { node } => {
                tracing::info!(node = node.0, "member row deleted (it left)")
            }
            Event::Member { row } => {
                tracing::info!(
                    node = row.node_id.0,
                    incarnation = row.incarnation,
                    state = row.state.as_str(),
                    "member"
                );
                warn_of_other_timers(self.membership.borrow().timers(), row);
                super::view::warn_of_unspecified_addresses(row);
            }
            Event::LeaseLapsed { cause, .. } => {
                tracing::warn!(
                    "lease lapsed: this node serves nothing until a heartbeat applies: {cause}"
                )
            }
            Event::LeaseRenewed { lapsed_for_ms } => tracing::warn!(
                lapsed_for_ms,
                "lease renewed: serving again with the same incarnation, nothing lost"
            ),
            Event::Fenced { cause } => tracing::warn!(
                "fenced: {cause}; this node serves nothing until it rejoins, its objects kept \
                 aside to be written back by compare-and-set"
            ),
            Event::Rejoined { incarnation, .. } => {
                tracing::warn!(incarnation, "rejoined with a new incarnation")
            }
            Event::TakenOver { incarnation } => {
                let message = format!(
                    "node id {} was taken by another process (incarnation {incarnation}): \
                     this process exits without serving again",
                    self.view.me().0
                );
                tracing::error!("{message}");
                eprintln!("routerd: {message}");
                std::process::exit(1);
            }
            _ => {}
        }
    }

    fn mirror_gauges(&self) {
        let snapshot = self.view.snapshot();
        let stats = &self.metrics.cluster;
        let mut counts = [0i64; 5];
        let states = snapshot
            .peers
            .values()
            .map(|peer| peer.state)
            .chain(std::iter::once(if snapshot.me.fenced {
                MemberState::Down
            } else {
                snapshot.me.state
            }));
        for state in states {
            counts[state as usize - 1] += 1;
        }
        stats.members_joining.set(counts[0]);
        stats.members_up.set(counts[1]);
        stats.members_draining.set(counts[2]);
        stats.members_left.set(counts[3]);
        stats.members_down.set(counts[4]);
        let serving = !snapshot.me.fenced && clock::now_ms() < snapshot.me.lease_until_ms;
        stats.fenced.set(i64::from(!serving));
    }
}

/// What a membership event changes of the view the cores read: this
/// node's incarnation, lease and fence, and the peers' rows.
fn apply_to_view(me: &mut Standing, peers: &mut BTreeMap<NodeId, Peer>, event: Event) {
    match event {
        Event::Joined { incarnation } => me.incarnation = incarnation,
        Event::Lease { until_ms } => me.lease_until_ms = me.lease_until_ms.max(until_ms),
        // A lapse at the lease's end changes nothing the cores
        // do not see themselves; one at a clock jump cuts the
        // lease short, and the cores follow it down.
        Event::LeaseLapsed { at_ms, .. } => me.lease_until_ms = me.lease_until_ms.min(at_ms),
        Event::Fenced { .. } => me.fenced = true,
        Event::Rejoined {
            incarnation,
            lease_until_ms,
        } => {
            me.incarnation = incarnation;
            me.lease_until_ms = lease_until_ms;
            me.fenced = false;
        }
        Event::Member { row } => {
            peers.insert(row.node_id, Peer::from_row(&row));
        }
        Event::Removed { node } => {
            peers.remove(&node);
        }
        Event::Refused { .. } | Event::TakenOver { .. } | Event::LeaseRenewed { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemberVersion;

    fn row(node: u64, state: MemberState) -> MemberRow {
        MemberRow {
            node_id: NodeId(node),
            incarnation: 1,
            state,
            heartbeat: 1,
            gateway: format!("127.0.0.1:{}", 7000 + node),
            admin: String::new(),
            cluster: Vec::new(),
            core_count: 1,
            actors: vec![AdvertisedActor {
                actor_id: node << 16 | 5,
                actor_type: 50,
                msg_ids: vec![500],
                weight: 1,
            }],
            timers: None,
            version: MemberVersion(1),
        }
    }

    fn candidates(catalog: &Catalog) -> Vec<u64> {
        let snapshot = catalog.rebuild_snapshot();
        snapshot.candidates(500).iter().map(|a| a.node_id).collect()
    }

    #[test]
    fn a_member_deleted_while_up_leaves_the_catalog() {
        let catalog = Catalog::new();
        for node in [1, 2] {
            let row = row(node, MemberState::Up);
            catalog_follows(&catalog, &Event::Member { row });
        }
        assert_eq!(candidates(&catalog), [1, 2]);
        // Node 1 left between two listings: its row is simply gone.
        catalog_follows(&catalog, &Event::Removed { node: NodeId(1) });
        assert_eq!(candidates(&catalog), [2]);
    }

    #[test]
    fn a_member_that_stops_being_up_leaves_the_catalog() {
        let catalog = Catalog::new();
        let up = row(2, MemberState::Up);
        catalog_follows(&catalog, &Event::Member { row: up });
        let draining = row(2, MemberState::Draining);
        catalog_follows(&catalog, &Event::Member { row: draining });
        assert!(candidates(&catalog).is_empty());
    }
}
