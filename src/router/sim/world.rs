//! The simulated world: nodes, clock, network, store, clients.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wire::{shard_of, ObjectKey};

use super::check::Checker;
use super::counter::{CounterType, COUNTER_TYPE_ID, OP_ADD};
use crate::config::{Persist, RouterConfig};
use crate::router::{
    Effect, NodeMessage, Outcome, Request, RequestId, RouterCore, RouterHead, StoreOp, StoreReply,
    StoreToken, Timer,
};
use crate::store::{MemoryTable, NodeId, RecordWrite};

/// The shape of one simulated run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: u64,
    pub cores: u32,
    pub keys: u64,
    pub steps: usize,
    /// Store faults, network faults, crashes, partitions.
    pub faults: bool,
    pub router: RouterConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            cores: 2,
            keys: 4,
            steps: 400,
            faults: true,
            router: RouterConfig {
                cache_update_interval_ms: 1_500,
                cache_free_timeout_ms: 2_000,
                object_free_timeout_ms: 3_000,
                object_save_interval_ms: 1_000,
                cache_retry_interval_ms: 40,
                object_retry_interval_ms: 40,
                retry_max_ttl: 3,
                transfer_max_ttl: 8,
                pending_queue_max: 64,
                entries_max_per_core: 1_000,
                transfer_ack_timeout_ms: 300,
            },
        }
    }
}

/// What a run did, for the caller to look at.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    pub requests: u64,
    pub acked: u64,
    pub crashes: u64,
    pub transfers: u64,
    pub store_faults: u64,
    pub dropped_messages: u64,
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
        incarnation: u64,
        head: RouterHead,
        request: Request,
    },
    StoreApply {
        node: u64,
        incarnation: u64,
        core: u32,
        token: StoreToken,
        op: StoreOp,
    },
    StoreReply {
        node: u64,
        incarnation: u64,
        core: u32,
        token: StoreToken,
        reply: StoreReply,
    },
    LateApply {
        write: RecordWrite,
    },
    Timer {
        node: u64,
        incarnation: u64,
        core: u32,
        timer: Timer,
    },
}

pub(super) struct SimNode {
    pub incarnation: u64,
    pub up: bool,
    pub cores: Vec<RouterCore>,
    pub shutting_down: bool,
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
    pub delta: i64,
    pub fate: Fate,
    pub calm: bool,
}

pub(super) struct World {
    pub config: SimConfig,
    pub rng: SmallRng,
    pub now_ms: u64,
    queue: BTreeMap<(u64, u64), Event>,
    pub(super) next_event: u64,
    pub nodes: BTreeMap<u64, SimNode>,
    pub table: MemoryTable,
    pub partitions: BTreeSet<(u64, u64)>,
    pub faults: bool,
    pub ops: BTreeMap<RequestId, ClientOp>,
    pub(super) next_seq: u64,
    pub checker: Checker,
    pub report: SimReport,
}

/// Runs one seed; the error says which invariant broke, with the seed.
pub fn run(seed: u64, config: &SimConfig) -> Result<SimReport, String> {
    let mut world = World::new(seed, config.clone());
    world
        .run()
        .map_err(|error| format!("seed {seed}: {error}"))?;
    Ok(world.report)
}

impl World {
    pub(super) fn new(seed: u64, config: SimConfig) -> World {
        let mut world = World {
            faults: config.faults,
            config,
            rng: SmallRng::seed_from_u64(seed),
            now_ms: 0,
            queue: BTreeMap::new(),
            next_event: 0,
            nodes: BTreeMap::new(),
            table: MemoryTable::default(),
            partitions: BTreeSet::new(),
            ops: BTreeMap::new(),
            next_seq: 0,
            checker: Checker::default(),
            report: SimReport::default(),
        };
        for node in 1..=world.config.nodes {
            world.start_node(node, 0);
        }
        world
    }

    pub(super) fn run(&mut self) -> Result<(), String> {
        for _ in 0..self.config.steps {
            if self.rng.gen_range(0..100) < 25 {
                self.client_step()?;
            } else if !self.next_step()? {
                break;
            }
            self.check()?;
        }
        self.calm_phase()?;
        self.final_check()
    }

    pub(super) fn check(&mut self) -> Result<(), String> {
        let mut checker = std::mem::take(&mut self.checker);
        let result = checker.check(self);
        self.checker = checker;
        result
    }

    pub(super) fn schedule(&mut self, at_ms: u64, event: Event) {
        self.next_event += 1;
        self.queue.insert((at_ms, self.next_event), event);
    }

    /// Processes the next event; false when none is left.
    pub(super) fn next_step(&mut self) -> Result<bool, String> {
        let Some(((at_ms, _), event)) = self.queue.pop_first() else {
            return Ok(false);
        };
        self.now_ms = self.now_ms.max(at_ms);
        self.process(event)?;
        Ok(true)
    }

    pub(super) fn start_node(&mut self, node: u64, incarnation: u64) {
        let now_ms = self.now_ms;
        let cores: Vec<RouterCore> = (0..self.config.cores)
            .map(|core| {
                let seed = node * 1_000_003 + incarnation * 7919 + u64::from(core);
                let mut router =
                    RouterCore::new(NodeId(node), self.config.router.clone(), seed, now_ms);
                router.register(Box::new(CounterType {
                    persist: Persist::OnWrite,
                }));
                router
            })
            .collect();
        self.nodes.insert(
            node,
            SimNode {
                incarnation,
                up: true,
                cores,
                shutting_down: false,
            },
        );
        let peers: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .map(|(id, _)| *id)
            .collect();
        for peer in &peers {
            self.with_cores(*peer, |core| core.on_node_up(NodeId(node)));
            if *peer != node {
                self.with_cores(node, |core| core.on_node_up(NodeId(*peer)));
            }
        }
        for core in 0..self.config.cores {
            self.drain(node, core);
        }
    }

    pub(super) fn with_cores(&mut self, node: u64, mut f: impl FnMut(&mut RouterCore)) {
        if let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) {
            sim_node.cores.iter_mut().for_each(&mut f);
        }
    }

    pub(super) fn incarnation(&self, node: u64) -> Option<u64> {
        self.nodes
            .get(&node)
            .filter(|n| n.up)
            .map(|n| n.incarnation)
    }

    pub(super) fn core_of(&self, key: ObjectKey) -> u32 {
        shard_of(key, self.config.cores)
    }

    /// Runs `f` on the core owning `key` at `node`, then performs its effects.
    pub(super) fn on_core(&mut self, node: u64, core: u32, f: impl FnOnce(&mut RouterCore, u64)) {
        let now_ms = self.now_ms;
        let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) else {
            return;
        };
        f(&mut sim_node.cores[core as usize], now_ms);
        self.drain(node, core);
    }

    fn process(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Deliver { to, from, message } => {
                let core = self.core_of(message.key());
                self.on_core(to, core, |c, now| {
                    c.on_node_message(now, NodeId(from), message)
                });
            }
            Event::Answer { request, outcome } => self.answer(request, outcome),
            Event::Submit {
                node,
                incarnation,
                head,
                request,
            } => {
                if self.incarnation(node) == Some(incarnation) {
                    let core = self.core_of(head.key);
                    self.on_core(node, core, |c, now| c.on_request(now, head, request));
                }
            }
            Event::StoreApply {
                node,
                incarnation,
                core,
                token,
                op,
            } => self.store_apply(node, incarnation, core, token, op),
            Event::StoreReply {
                node,
                incarnation,
                core,
                token,
                reply,
            } => {
                if self.incarnation(node) == Some(incarnation) {
                    self.on_core(node, core, |c, now| c.on_store_reply(now, token, reply));
                }
            }
            Event::LateApply { write } => {
                self.table.write(&write);
            }
            Event::Timer {
                node,
                incarnation,
                core,
                timer,
            } => {
                if self.incarnation(node) == Some(incarnation) {
                    self.on_core(node, core, |c, now| c.on_timer(now, timer));
                }
            }
        }
        self.finish_shutdowns();
        Ok(())
    }

    /// Performs the effects of one core.
    pub(super) fn drain(&mut self, node: u64, core: u32) {
        let Some(sim_node) = self.nodes.get_mut(&node) else {
            return;
        };
        let incarnation = sim_node.incarnation;
        let effects: Vec<Effect> = sim_node.cores[core as usize].drain_effects().collect();
        if std::env::var("ROUTERD_SIM_TRACE").is_ok() {
            for effect in &effects {
                eprintln!("{} n{node}.{core}: {effect:?}", self.now_ms);
            }
        }
        for effect in effects {
            match effect {
                Effect::SendToNode { node: to, message } => self.send(node, to.0, message),
                Effect::Submit { head, request } => self.schedule(
                    self.now_ms,
                    Event::Submit {
                        node,
                        incarnation,
                        head,
                        request,
                    },
                ),
                Effect::Store { token, op } => {
                    let at = self.now_ms + self.rng.gen_range(1..=10);
                    self.schedule(
                        at,
                        Event::StoreApply {
                            node,
                            incarnation,
                            core,
                            token,
                            op,
                        },
                    );
                }
                Effect::ArmTimer { at_ms, timer } => self.schedule(
                    at_ms,
                    Event::Timer {
                        node,
                        incarnation,
                        core,
                        timer,
                    },
                ),
                Effect::Reply { request, outcome } => {
                    self.checker.reply_produced(request);
                    let origin = request.origin_node.0;
                    if origin != node && !self.link_ok(node, origin) {
                        self.report.dropped_messages += 1;
                        self.lose(request);
                        continue;
                    }
                    let at = self.now_ms
                        + if origin == node {
                            0
                        } else {
                            self.rng.gen_range(1..=20)
                        };
                    self.schedule(at, Event::Answer { request, outcome });
                }
                Effect::Push { .. } | Effect::Kick { .. } => {}
            }
        }
    }

    pub(super) fn answer(&mut self, request: RequestId, outcome: Outcome) {
        let Some(op) = self.ops.get_mut(&request) else {
            return;
        };
        if op.fate != Fate::Pending {
            return;
        }
        if outcome.is_ok() {
            op.fate = Fate::Acked;
            self.report.acked += 1;
        } else {
            op.fate = Fate::Unknown;
        }
    }

    pub(super) fn lose(&mut self, request: RequestId) {
        if let Some(op) = self.ops.get_mut(&request) {
            if op.fate == Fate::Pending {
                op.fate = Fate::Unknown;
            }
        }
    }

    pub(super) fn submit(&mut self, origin: u64, key: ObjectKey, op: u32, delta: i64, calm: bool) {
        self.next_seq += 1;
        let id = RequestId {
            origin_node: NodeId(origin),
            seq: self.next_seq,
        };
        let body = if op == OP_ADD {
            delta.to_le_bytes().to_vec()
        } else {
            Vec::new()
        };
        let delta = if op == OP_ADD { delta } else { 0 };
        self.ops.insert(
            id,
            ClientOp {
                key,
                delta,
                fate: Fate::Pending,
                calm,
            },
        );
        self.report.requests += 1;
        if self.incarnation(origin).is_none() {
            self.lose(id);
            return;
        }
        let request = Request {
            id,
            op,
            body,
            client: None,
            needs_reply: true,
        };
        let head = RouterHead::local(key, NodeId(origin));
        let core = self.core_of(key);
        self.on_core(origin, core, |c, now| c.on_request(now, head, request));
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

    /// Faults off, partitions healed, every node up; after the old locks
    /// expire, every request must succeed.
    pub(super) fn calm_phase(&mut self) -> Result<(), String> {
        self.faults = false;
        self.partitions.clear();
        // Shutdowns in progress end (by their deadline at the latest) first.
        let until = self.now_ms + 3_000;
        while self.nodes.values().any(|n| n.shutting_down) && self.now_ms < until {
            if !self.next_step()? {
                break;
            }
            self.check()?;
        }
        let down: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.up)
            .map(|(id, _)| *id)
            .collect();
        for node in down {
            let incarnation = self.nodes[&node].incarnation + 1;
            self.start_node(node, incarnation);
        }
        let settle = self.now_ms + self.config.router.object_free_timeout_ms * 2;
        self.run_until(settle)?;
        for object_id in 0..self.config.keys {
            let key = ObjectKey::new(COUNTER_TYPE_ID, 0, object_id);
            for origin in 1..=self.config.nodes {
                self.submit(origin, key, OP_ADD, 1, true);
            }
        }
        let until = self.now_ms + 2_000;
        self.run_until(until)?;
        for (id, op) in &self.ops {
            if op.calm && op.fate != Fate::Acked {
                if std::env::var("ROUTERD_SIM_DEBUG").is_ok() {
                    eprintln!("store {:?}", self.table.load(op.key));
                    for (node, n) in &self.nodes {
                        for (c, core) in n.cores.iter().enumerate() {
                            for v in core.entries().filter(|v| v.key == op.key) {
                                eprintln!("node {node} core {c} {v:?} {:?}", core.counters());
                            }
                        }
                    }
                    eprintln!("now {}", self.now_ms);
                    for (id, n) in &self.nodes {
                        eprintln!(
                            "node {id} up {} shutting {} inc {}",
                            n.up, n.shutting_down, n.incarnation
                        );
                    }
                }
                return Err(format!(
                    "calm request {id:?} for {:?} ended {:?}",
                    op.key, op.fate
                ));
            }
        }
        Ok(())
    }

    /// Every node shuts down cleanly; then the store holds each counter.
    pub(super) fn final_check(&mut self) -> Result<(), String> {
        let nodes: Vec<u64> = self.nodes.keys().copied().collect();
        for node in nodes {
            if let Some(sim_node) = self.nodes.get_mut(&node) {
                sim_node.shutting_down = true;
            }
            for core in 0..self.config.cores {
                self.on_core(node, core, |c, now| c.shutdown(now, 2_000));
            }
        }
        let until = self.now_ms + 5_000;
        self.run_until(until)?;
        if let Some((id, _)) = self.nodes.iter().find(|(_, n)| n.up) {
            return Err(format!("node {id} did not finish its shutdown"));
        }
        self.checker.check_counters(self)
    }
}
