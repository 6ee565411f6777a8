//! The simulated nodes: one process at a time per node id, with its own
//! clock, its membership machine and, once it joined, its router cores.
//! Processes start, join, crash, shut down, pause and resume here.

use std::collections::VecDeque;

use rand::RngExt;
use wire::{shard_of, ObjectKey};

use super::counter::CounterType;
use super::recorder::{Recorded, WriteLog};
use super::room_model::PLAYERS;
use super::world::{Event, Fate, World};
use crate::builtins::player::PlayerType;
use crate::builtins::room::RoomType;
use crate::cluster::membership::{Advertisement, Membership};
use crate::config::{ClusterConfig, DuplicateLogin, Persist};
use crate::ids::NodeId;
use crate::router::RouterCore;
use crate::store::MemberState;

/// Events one paused process may have waiting; more would mean the
/// simulation itself runs away, and the run fails.
const HELD_EVENTS_MAX: usize = 100_000;

/// How far apart the nodes' clock rates are, in parts per million either
/// way: far more than real oscillators, well inside the timing rule's
/// margin (`ClusterConfig::check_timing`).
const CLOCK_RATE_SPREAD_PPM: u64 = 30_000;

/// A node's monotonic clock against the simulation's true time: its own
/// offset (each process starts its clock anew) and rate.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    offset_ms: u64,
    rate_ppm: u64,
}

impl Clock {
    const UNIT_PPM: u64 = 1_000_000;

    fn random(world: &mut World) -> Clock {
        let offset_ms = world.rng.random_range(1..=1_000_000);
        let rate_ppm = if world.faults {
            world.rng.random_range(
                Clock::UNIT_PPM - CLOCK_RATE_SPREAD_PPM..=Clock::UNIT_PPM + CLOCK_RATE_SPREAD_PPM,
            )
        } else {
            Clock::UNIT_PPM
        };
        Clock {
            offset_ms,
            rate_ppm,
        }
    }

    /// This clock's reading at true time `true_ms`.
    pub fn local(&self, true_ms: u64) -> u64 {
        self.offset_ms + true_ms * self.rate_ppm / Clock::UNIT_PPM
    }

    /// The first true time at which this clock reads `local_ms` or more.
    pub fn true_at(&self, local_ms: u64) -> u64 {
        let Some(elapsed) = local_ms.checked_sub(self.offset_ms) else {
            return 0;
        };
        (elapsed * Clock::UNIT_PPM).div_ceil(self.rate_ppm)
    }
}

/// A process frozen since `since_ms` (true time).
#[derive(Clone, Copy, Debug)]
pub(super) struct Pause {
    pub since_ms: u64,
}

pub(super) struct SimNode {
    /// Counts this node's process starts. Events carry it, so nothing a
    /// dead process asked for reaches a later one.
    pub process: u64,
    /// A process runs (it may be paused, or still joining).
    pub up: bool,
    /// The router cores, once membership gave the process an incarnation.
    pub cores: Vec<RouterCore>,
    pub membership: Option<Membership>,
    pub clock: Clock,
    pub paused: Option<Pause>,
    /// Events addressed to the process while it is paused, in order.
    pub held: VecDeque<Event>,
    pub shutting_down: bool,
    /// Until then (true time) the process cannot reach the store.
    pub store_cut_until_ms: u64,
    /// Keys of the mutating handler runs of this process, checked after
    /// each router call (`safety.rs`).
    pub writes: WriteLog,
}

impl SimNode {
    /// The process serves: it joined and its cores run.
    pub fn serving(&self) -> bool {
        self.up && !self.cores.is_empty()
    }
}

impl World {
    /// Starts a new process of `node`: it reads the membership table to
    /// take an incarnation; its cores start when it has one.
    pub(super) fn start_node(&mut self, node: u64) {
        let clock = Clock::random(self);
        let process = self.nodes.get(&node).map_or(1, |n| n.process + 1);
        let advert = Advertisement {
            gateway: format!("node{node}:7000"),
            core_count: self.config.cores,
            ..Advertisement::default()
        };
        let timers = self.process_timers();
        let membership = Membership::new(NodeId(node), &timers, advert);
        self.nodes.insert(
            node,
            SimNode {
                process,
                up: true,
                cores: Vec::new(),
                membership: Some(membership),
                clock,
                paused: None,
                held: VecDeque::new(),
                shutting_down: false,
                store_cut_until_ms: 0,
                writes: WriteLog::default(),
            },
        );
        self.schedule(self.now_ms, Event::MemberTick { node, process });
    }

    /// The membership timers of a new process: the config's, or, in one
    /// start of five under faults, a lease two or three times as long with
    /// the shortest `down_after_ms` its own config check allows. Every
    /// other process must wait that lease out before it claims what this
    /// one owns (the safety check's claims while a lease holds).
    fn process_timers(&mut self) -> ClusterConfig {
        let mut timers = self.config.cluster.clone();
        if self.faults && self.rng.random_range(0..5) == 0 {
            timers.fence_after_ms *= self.rng.random_range(2..=3);
            timers.down_after_ms = timers.fence_after_ms + 2 * timers.heartbeat_interval_ms;
            self.report.longer_leases += 1;
        }
        timers
    }

    /// Membership gave `node` its first incarnation: its cores start, with
    /// what membership knows of the other nodes.
    pub(super) fn join_cores(&mut self, node: u64, incarnation: u64) {
        let persist = self.services_persist;
        let cores = self.config.cores;
        let router = self.config.router.clone();
        let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) else {
            return;
        };
        let now = sim_node.clock.local(self.now_ms);
        let rows: Vec<_> = sim_node
            .membership
            .as_ref()
            .map(|m| m.members().cloned().collect())
            .unwrap_or_default();
        let log = sim_node.writes.clone();
        let process = sim_node.process;
        sim_node.cores = (0..cores)
            .map(|core| {
                let seed = node * 1_000_003 + process * 7919 + u64::from(core);
                let mut router = RouterCore::new(NodeId(node), router.clone(), seed, now);
                router.set_incarnation(incarnation);
                let counter = CounterType {
                    persist: Persist::OnWrite,
                };
                let player = PlayerType {
                    persist: persist.0,
                    duplicate_login: DuplicateLogin::KickOld,
                    created_per_session_max: u32::MAX,
                };
                let room = RoomType {
                    persist: persist.1,
                    members_max: PLAYERS as usize,
                    ..RoomType::default()
                };
                router.register(Recorded::wrap(Box::new(counter), &log));
                router.register(Recorded::wrap(Box::new(player), &log));
                router.register(Recorded::wrap(Box::new(room), &log));
                for row in &rows {
                    router.on_member(row.node_id, row.incarnation, row.state);
                }
                router
            })
            .collect();
        for core in 0..cores {
            self.drain(node, core);
        }
        self.with_membership(node, |m, now| m.set_state(now, MemberState::Up));
    }

    /// Runs `f` on every core of `node` (if its process serves), performing
    /// the effects of each.
    pub(super) fn with_cores(&mut self, node: u64, mut f: impl FnMut(&mut RouterCore, u64)) {
        for core in 0..self.config.cores {
            self.on_core(node, core, &mut f);
        }
    }

    /// The current process of `node`, if one runs.
    pub(super) fn process_of(&self, node: u64) -> Option<u64> {
        self.nodes.get(&node).filter(|n| n.up).map(|n| n.process)
    }

    pub(super) fn serving(&self, node: u64) -> bool {
        self.nodes.get(&node).is_some_and(SimNode::serving)
    }

    pub(super) fn is_paused(&self, node: u64) -> bool {
        self.nodes
            .get(&node)
            .is_some_and(|n| n.up && n.paused.is_some())
    }

    /// `node`'s clock now (true time if it has no process).
    pub(super) fn local_now(&self, node: u64) -> u64 {
        self.nodes
            .get(&node)
            .map_or(self.now_ms, |n| n.clock.local(self.now_ms))
    }

    pub(super) fn core_of(&self, key: ObjectKey) -> u32 {
        shard_of(key, self.config.cores)
    }

    /// Runs `f` on one core of `node` with the node's clock, performs its
    /// effects, then checks the writes it accepted.
    pub(super) fn on_core(&mut self, node: u64, core: u32, f: impl FnOnce(&mut RouterCore, u64)) {
        let true_now = self.now_ms;
        let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.serving()) else {
            return;
        };
        let now = sim_node.clock.local(true_now);
        f(&mut sim_node.cores[core as usize], now);
        self.changes.cores.insert((node, core));
        self.drain(node, core);
        self.check_accepted_writes(node, core);
    }

    /// Keeps `event` until `node`'s process resumes.
    pub(super) fn hold(&mut self, node: u64, event: Event) {
        let Some(sim_node) = self.nodes.get_mut(&node) else {
            return;
        };
        assert!(
            sim_node.held.len() < HELD_EVENTS_MAX,
            "node {node}: more than {HELD_EVENTS_MAX} held events: the simulation runs away"
        );
        sim_node.held.push_back(event);
        self.report.held_events += 1;
    }

    /// Freezes `node`'s process for `duration_ms`: its memory and the work
    /// it has in flight stay, its clock runs on.
    pub(super) fn pause(&mut self, node: u64, duration_ms: u64) {
        let now = self.now_ms;
        let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) else {
            return;
        };
        if sim_node.paused.is_some() {
            return;
        }
        sim_node.paused = Some(Pause { since_ms: now });
        let process = sim_node.process;
        self.report.pauses += 1;
        if duration_ms > self.config.cluster.down_after_ms {
            self.report.long_pauses += 1;
        }
        self.schedule(now + duration_ms, Event::Resume { node, process });
    }

    /// The process runs again: what was addressed to it arrives now, in
    /// order.
    pub(super) fn resume(&mut self, node: u64) {
        let now = self.now_ms;
        let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) else {
            return;
        };
        let Some(pause) = sim_node.paused.take() else {
            return;
        };
        let held = std::mem::take(&mut sim_node.held);
        self.answers
            .resumed(node, now.saturating_sub(pause.since_ms));
        for event in held {
            self.schedule(now, event);
        }
    }

    /// Resumes every paused process now (the calm phase).
    pub(super) fn resume_all(&mut self) {
        let paused: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up && n.paused.is_some())
            .map(|(id, _)| *id)
            .collect();
        for node in paused {
            self.resume(node);
        }
    }

    /// Ends `node`'s process (a crash, a refused start, or the end of a
    /// shutdown): its memory and everything addressed to it are lost, its
    /// clients' requests lose their connection. Nobody is told: the other
    /// nodes find out through membership.
    pub(super) fn take_down(&mut self, node: u64) {
        let Some(sim_node) = self.nodes.get_mut(&node) else {
            return;
        };
        self.changes.store = true;
        sim_node.up = false;
        sim_node.shutting_down = false;
        let fences: u64 = sim_node
            .cores
            .iter()
            .map(|c| c.counters().fences_total)
            .sum();
        self.report.fences += fences;
        sim_node.cores.clear();
        sim_node.membership = None;
        sim_node.paused = None;
        sim_node.held.clear();
        sim_node.writes.borrow_mut().clear();
        for (id, op) in self.ops.iter_mut() {
            if id.origin_node == NodeId(node) && op.fate == Fate::Pending {
                op.fate = Fate::Unknown;
            }
        }
        self.answers.node_lost(node);
        self.checker.node_down(node);
    }

    /// Starts shutdown on every core of `node`.
    pub(super) fn shut_down(&mut self, node: u64) {
        if let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) {
            sim_node.shutting_down = true;
        }
        self.with_cores(node, |c, now| c.shutdown(now, 2_000));
    }

    /// Nodes whose shutdown completed write `left` and exit.
    pub(super) fn finish_shutdowns(&mut self) {
        let done: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.up && n.shutting_down
                    && n.paused.is_none()
                    && n.cores.iter().all(|c| c.is_shutdown_complete())
            })
            .map(|(id, _)| *id)
            .collect();
        for node in done {
            // The `left` write leaves with the process; its answer finds
            // nobody, and if it fails the others declare the node down.
            self.with_membership(node, |m, now| m.set_state(now, MemberState::Left));
            self.take_down(node);
        }
    }
}
