//! The simulated world: its shape (`SimConfig`), its events, and the loop
//! that runs them in order of simulated time.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use wire::ObjectKey;

use super::answers::Answers;
use super::check::{Changes, Checker, Invariant};
use super::members::MemberReply;
use super::nodes::SimNode;
use super::room_model::{RoomModel, RoomStats};
use super::safety::Safety;
use crate::cluster::membership::{Action, WriteTag};
use crate::config::{ClusterConfig, Persist, RouterConfig};
use crate::router::{NodeMessage, Outcome, Request, RequestId, RouterHead, StoreOp, StoreReply};
use crate::router::{StoreToken, Timer};
use crate::store::{MemberTable, MemberWrite, MemoryTable, RecordWrite};

/// The shape of one simulated run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: u64,
    pub cores: u32,
    pub keys: u64,
    /// The fault phase lasts a random time in this range of simulated
    /// milliseconds; then the calm phase checks that everything recovers.
    pub fault_phase_ms: (u64, u64),
    /// Store faults, network faults, crashes, pauses, partitions, clock
    /// drift, store cut-offs, outside writers.
    pub faults: bool,
    pub router: RouterConfig,
    /// Membership timers (the rest of the section is unused here).
    pub cluster: ClusterConfig,
}

impl Default for SimConfig {
    /// Short timers, so a run of a few simulated seconds sees heartbeats,
    /// declarations, fences and the end of several lock lifetimes: the
    /// fault phase (2 to 4 s) is longer than `object_free_timeout_ms`
    /// (1.5 s), and pauses reach past both it and `down_after_ms`.
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            cores: 2,
            keys: 4,
            fault_phase_ms: (2_000, 4_000),
            faults: true,
            router: RouterConfig {
                cache_update_interval_ms: 1_000,
                cache_free_timeout_ms: 1_200,
                object_free_timeout_ms: 1_500,
                object_save_interval_ms: 500,
                cache_retry_interval_ms: 40,
                object_retry_interval_ms: 40,
                pull_attempts_max: 3,
                forward_hops_max: 8,
                pending_queue_max: 64,
                entries_per_core_max: 1_000,
                transfer_ack_timeout_ms: 300,
                request_keys_max: 128,
            },
            cluster: ClusterConfig {
                heartbeat_interval_ms: 50,
                fence_after_ms: 200,
                down_after_ms: 400,
                // Short, so that rows of nodes that left are deleted and
                // rejoins meet their tombstones within a run.
                left_retention_ms: 800,
                ..ClusterConfig::default()
            },
        }
    }
}

/// What a run did, for the caller to look at (and for the tests to prove
/// that each fault and each check had cases to look at).
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    pub requests: u64,
    pub acked: u64,
    pub crashes: u64,
    pub transfers: u64,
    pub store_faults: u64,
    pub dropped_messages: u64,
    pub rooms: RoomStats,
    pub events: u64,
    /// `on_flush` calls delivered (each after a random further delay).
    pub flushes: u64,
    /// Processes frozen, and those frozen longer than `down_after_ms`.
    pub pauses: u64,
    pub long_pauses: u64,
    /// Processes started with a longer lease than the config's (a node
    /// whose operator set other timers), which the others must wait out.
    pub longer_leases: u64,
    /// Events held for a paused process and delivered when it resumed.
    pub held_events: u64,
    /// Members declared down by another node's CAS.
    pub declarations: u64,
    /// Rows of nodes that left, deleted after the retention.
    pub deletions: u64,
    /// Router cores fenced (lease run out, or declared down).
    pub fences: u64,
    /// Rejoins with a higher incarnation after a fence.
    pub rejoins: u64,
    /// Leases that ran out (or were cut short) before a heartbeat renewed
    /// them: the node paused, kept everything, and served again after the
    /// next applied heartbeat unless it was declared down meanwhile.
    pub lapses: u64,
    /// Starts refused because the id looked alive.
    pub refused_starts: u64,
    /// `SendToNode` refused by a link and given back (`on_send_failed`).
    pub send_failures: u64,
    /// Nodes cut off from the store (not from their peers) for a while.
    pub store_cuts: u64,
    /// Stalls of the store: for a while every record write times out
    /// (Indeterminate), some applied then, some later, some never.
    pub store_stalls: u64,
    /// Records re-saved as they were by an outside writer.
    pub outside_writes: u64,
    /// Save or claim writes answered with a CAS conflict.
    pub cas_conflicts: u64,
    /// Records claimed from an owner whose incarnation had ended.
    pub dead_owner_claims: u64,
    /// Mutating handler runs checked against every other copy.
    pub writes_checked: u64,
    /// Counter answers checked against the highest acknowledged value.
    pub reads_checked: u64,
}

pub(super) enum Event {
    Deliver {
        to: u64,
        from: u64,
        message: NodeMessage,
    },
    Answer {
        request: RequestId,
        outcome: Outcome,
    },
    Submit {
        node: u64,
        process: u64,
        head: RouterHead,
        request: Request,
    },
    StoreApply {
        node: u64,
        process: u64,
        core: u32,
        token: StoreToken,
        op: StoreOp,
    },
    StoreReply {
        node: u64,
        process: u64,
        core: u32,
        token: StoreToken,
        reply: StoreReply,
    },
    /// A write answered Indeterminate reaches the store now.
    LateApply { node: u64, write: RecordWrite },
    Timer {
        node: u64,
        process: u64,
        core: u32,
        timer: Timer,
    },
    /// `on_flush`, asked for by `Effect::FlushSavesAfterBatch`.
    Flush { node: u64, process: u64, core: u32 },
    /// The membership machine's periodic call.
    MemberTick { node: u64, process: u64 },
    /// A membership table operation reaches the store.
    MemberApply {
        node: u64,
        process: u64,
        action: Action,
    },
    /// Its answer reaches the node.
    MemberReply {
        node: u64,
        process: u64,
        reply: MemberReply,
    },
    /// A membership write answered Indeterminate reaches the table now.
    MemberLateApply { tag: WriteTag, write: MemberWrite },
    /// A paused process runs again.
    Resume { node: u64, process: u64 },
    /// The next random client operation (or fault) of the fault phase.
    ClientStep,
}

impl Event {
    /// The process this event is for, as (node, process): once that process
    /// ended, the event is dropped. A store operation in flight is not: the
    /// store performs it whatever became of its sender.
    pub(super) fn process(&self) -> Option<(u64, u64)> {
        match self {
            Event::Submit { node, process, .. }
            | Event::StoreReply { node, process, .. }
            | Event::Timer { node, process, .. }
            | Event::Flush { node, process, .. }
            | Event::MemberTick { node, process }
            | Event::MemberReply { node, process, .. }
            | Event::Resume { node, process } => Some((*node, *process)),
            Event::Deliver { .. }
            | Event::Answer { .. }
            | Event::StoreApply { .. }
            | Event::LateApply { .. }
            | Event::MemberApply { .. }
            | Event::MemberLateApply { .. }
            | Event::ClientStep => None,
        }
    }

    /// The node whose process handles this event: held while it is paused.
    pub(super) fn addressee(&self) -> Option<u64> {
        match self {
            Event::Deliver { to, .. } => Some(*to),
            Event::Answer { request, .. } => Some(request.origin_node.0),
            Event::Submit { node, .. }
            | Event::StoreReply { node, .. }
            | Event::Timer { node, .. }
            | Event::Flush { node, .. }
            | Event::MemberTick { node, .. }
            | Event::MemberReply { node, .. } => Some(*node),
            Event::StoreApply { .. }
            | Event::LateApply { .. }
            | Event::MemberApply { .. }
            | Event::MemberLateApply { .. }
            | Event::Resume { .. }
            | Event::ClientStep => None,
        }
    }
}

/// One client request's fate, as the gateway saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    Pending,
    Acked,
    /// An error answer, a dropped answer, or an origin that crashed.
    Unknown,
}

pub(super) struct ClientOp {
    pub key: ObjectKey,
    pub op: u32,
    pub delta: i64,
    pub fate: Fate,
    pub calm: bool,
    /// For a counter: the highest value acknowledged to any client when
    /// this request was sent; its answer may not be lower.
    pub floor: i64,
}

pub(super) struct World {
    pub config: SimConfig,
    pub rng: SmallRng,
    /// The simulation's true time. Nodes read their own clocks (`Clock`).
    pub now_ms: u64,
    pub(super) queue: BTreeMap<(u64, u64), Event>,
    pub(super) next_event: u64,
    pub nodes: BTreeMap<u64, SimNode>,
    pub table: MemoryTable,
    pub members: MemberTable,
    pub partitions: BTreeSet<(u64, u64)>,
    pub faults: bool,
    /// Until when (true time) the store stalls record writes.
    pub store_stalled_until_ms: u64,
    /// When the fault phase ends (true time).
    pub fault_end_ms: u64,
    /// From this time on the cluster has settled: the checks that hold
    /// only without faults apply.
    pub settled_from_ms: Option<u64>,
    pub ops: BTreeMap<RequestId, ClientOp>,
    pub(super) next_seq: u64,
    /// Per counter: the highest value an ADD was acknowledged with.
    pub acked_values: BTreeMap<ObjectKey, i64>,
    pub checker: Checker,
    pub safety: Safety,
    pub answers: Answers,
    pub rooms: RoomModel,
    /// Persistence of the player and room types in this run (the counter is
    /// always `on_write`: its check needs it).
    pub services_persist: (Persist, Persist),
    pub report: SimReport,
    pub trace: bool,
    /// What changed since the last check: steps that touch neither a
    /// router nor the records (membership ticks and reads, loads) skip the
    /// checks whose answer cannot have changed.
    pub changes: Changes,
}

/// Runs one seed; the error says which invariant broke, with the seed. A
/// panic inside the run (a router assertion) is caught and reported the
/// same way.
pub fn run(seed: u64, config: &SimConfig) -> Result<SimReport, String> {
    run_checked(seed, config, &BTreeSet::new())
}

/// `run` with some invariants switched off, so that a later check can be
/// shown catching a broken router on its own (`mutants.rs`).
pub(super) fn run_checked(
    seed: u64,
    config: &SimConfig,
    disabled: &BTreeSet<Invariant>,
) -> Result<SimReport, String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut world = World::new(seed, config.clone());
        world.safety.disabled = disabled.clone();
        world.run().map(|()| {
            world.report.rooms = world.rooms.stats;
            world.report.clone()
        })
    }));
    match outcome {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(error)) => Err(format!("seed {seed}: {error}")),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(format!(
                "seed {seed}: [{}] {message}",
                Invariant::Panic.name()
            ))
        }
    }
}

impl World {
    pub(super) fn new(seed: u64, config: SimConfig) -> World {
        assert!(config.cluster.check_timing().is_ok(), "sim cluster timing");
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut persist = || {
            if rng.random_bool(0.5) {
                Persist::OnWrite
            } else {
                Persist::Interval
            }
        };
        let services_persist = (persist(), persist());
        let mut rooms = RoomModel::default();
        rooms.leaves_durable = services_persist.1 == Persist::OnWrite || !config.faults;
        let (low, high) = config.fault_phase_ms;
        let fault_end_ms = rng.random_range(low..=high.max(low));
        let mut world = World {
            faults: config.faults,
            store_stalled_until_ms: 0,
            config,
            rng,
            now_ms: 0,
            queue: BTreeMap::new(),
            next_event: 0,
            nodes: BTreeMap::new(),
            table: MemoryTable::default(),
            members: MemberTable::default(),
            partitions: BTreeSet::new(),
            fault_end_ms,
            settled_from_ms: None,
            ops: BTreeMap::new(),
            next_seq: 0,
            acked_values: BTreeMap::new(),
            checker: Checker::default(),
            safety: Safety::default(),
            answers: Answers::default(),
            rooms,
            services_persist,
            report: SimReport::default(),
            trace: std::env::var("ROUTERD_SIM_TRACE").is_ok(),
            changes: Changes {
                store: true,
                ..Changes::default()
            },
        };
        for node in 1..=world.config.nodes {
            world.start_node(node);
        }
        world.schedule(0, Event::ClientStep);
        world
    }

    pub(super) fn run(&mut self) -> Result<(), String> {
        let fault_end_ms = self.fault_end_ms;
        self.run_until(fault_end_ms)?;
        self.calm_phase()?;
        self.final_check()
    }

    /// Every invariant checked after each step.
    pub(super) fn check(&mut self) -> Result<(), String> {
        if let Some(error) = self.rooms.error() {
            let error = Invariant::Rooms.fail(error);
            self.unless_disabled(Err(error))?;
        }
        if let Some(error) = self.safety.error.take() {
            return Err(error);
        }
        self.check_answers()?;
        if self.changes.is_empty() {
            return Ok(());
        }
        let changes = std::mem::take(&mut self.changes);
        let mut checker = std::mem::take(&mut self.checker);
        let result = checker.check(self, &changes);
        self.checker = checker;
        self.unless_disabled(result)?;
        self.check_entries(&changes)
    }

    /// `result`, or Ok when the invariant its error names is switched off.
    pub(super) fn unless_disabled(&self, result: Result<(), String>) -> Result<(), String> {
        match result {
            Err(error)
                if Invariant::of_failure(&error)
                    .is_some_and(|invariant| self.safety.is_disabled(invariant)) =>
            {
                Ok(())
            }
            result => result,
        }
    }

    pub(super) fn schedule(&mut self, at_ms: u64, event: Event) {
        self.next_event += 1;
        self.queue.insert((at_ms, self.next_event), event);
    }

    /// Runs events until `until_ms`, checking after each.
    pub(super) fn run_until(&mut self, until_ms: u64) -> Result<(), String> {
        while self
            .queue
            .first_key_value()
            .is_some_and(|((at, _), _)| *at <= until_ms)
        {
            self.next_step()?;
            self.check()?;
        }
        self.now_ms = self.now_ms.max(until_ms);
        Ok(())
    }

    /// Runs events, checking after each, while `go_on` holds and until
    /// `until_ms` at the latest (or no event is left).
    pub(super) fn run_while(
        &mut self,
        until_ms: u64,
        go_on: impl Fn(&World) -> bool,
    ) -> Result<(), String> {
        while go_on(self) && self.now_ms < until_ms {
            if !self.next_step()? {
                break;
            }
            self.check()?;
        }
        Ok(())
    }

    /// Processes the next event; false when none is left.
    pub(super) fn next_step(&mut self) -> Result<bool, String> {
        self.report.events += 1;
        let Some(((at_ms, _), event)) = self.queue.pop_first() else {
            return Ok(false);
        };
        self.now_ms = self.now_ms.max(at_ms);
        self.process(event);
        Ok(true)
    }

    pub(super) fn process(&mut self, event: Event) {
        if let Some((node, process)) = event.process() {
            if self.process_of(node) != Some(process) {
                // For a process that ended: nobody reads it.
                return;
            }
        }
        if let Some(node) = event.addressee() {
            if self.is_paused(node) {
                return self.hold(node, event);
            }
        }
        match event {
            Event::Deliver { to, from, message } => self.deliver(to, from, message),
            Event::Answer { request, outcome } => self.answer(request, outcome),
            Event::Submit {
                node,
                head,
                request,
                ..
            } => {
                self.answers.moved(request.id, node);
                let core = self.core_of(head.key);
                self.on_core(node, core, |c, now| c.on_request(now, head, request));
            }
            Event::StoreApply {
                node,
                process,
                core,
                token,
                op,
            } => self.store_apply(node, process, core, token, op),
            Event::StoreReply {
                node,
                core,
                token,
                reply,
                ..
            } => self.store_reply(node, core, token, reply),
            Event::LateApply { node, write } => {
                self.apply_write(node, &write);
            }
            Event::Timer {
                node, core, timer, ..
            } => self.on_core(node, core, |c, now| c.on_timer(now, timer)),
            Event::Flush { node, core, .. } => {
                self.report.flushes += 1;
                self.on_core(node, core, |c, now| c.on_flush(now));
            }
            Event::MemberTick { node, process } => self.member_tick(node, process),
            Event::MemberApply {
                node,
                process,
                action,
            } => self.member_apply(node, process, action),
            Event::MemberReply { node, reply, .. } => self.member_reply(node, reply),
            Event::MemberLateApply { tag, write } => self.member_late_apply(tag, &write),
            Event::Resume { node, .. } => self.resume(node),
            Event::ClientStep => {
                if self.now_ms < self.fault_end_ms {
                    self.client_step();
                    let at = self.now_ms + self.rng.random_range(1..=16);
                    self.schedule(at, Event::ClientStep);
                }
            }
        }
        self.finish_shutdowns();
    }
}
