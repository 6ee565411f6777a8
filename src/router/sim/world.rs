//! The simulated world: nodes, clock, network, store, clients.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wire::{shard_of, ObjectKey};

use super::check::Checker;
use super::counter::{CounterType, OP_ADD};
use super::room_model::{RoomModel, RoomOp, RoomStats, PLAYERS};
use crate::config::{DuplicateLogin, Persist, RouterConfig};
use crate::router::{
    ClientRef, Effect, NodeMessage, Outcome, Request, RequestId, RouterCore, RouterHead, StoreOp,
    StoreReply, StoreToken, Timer,
};
use crate::services::player::PlayerType;
use crate::services::room::RoomType;
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
                pull_attempts_max: 3,
                forward_hops_max: 8,
                pending_queue_max: 64,
                entries_per_core_max: 1_000,
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
    pub rooms: RoomStats,
    pub events: u64,
    /// `on_flush` calls delivered (each after a random further delay).
    pub flushes: u64,
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
    /// `on_flush`, asked for by `Effect::FlushSavesAfterBatch`.
    Flush {
        node: u64,
        incarnation: u64,
        core: u32,
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

/// One request as a gateway hands it to its node's router.
pub(super) struct Submission {
    pub origin: u64,
    pub key: ObjectKey,
    pub op: u32,
    pub body: Vec<u8>,
    pub client: Option<ClientRef>,
}

pub(super) struct World {
    pub config: SimConfig,
    pub rng: SmallRng,
    pub now_ms: u64,
    pub(super) queue: BTreeMap<(u64, u64), Event>,
    pub(super) next_event: u64,
    pub nodes: BTreeMap<u64, SimNode>,
    pub table: MemoryTable,
    pub partitions: BTreeSet<(u64, u64)>,
    pub faults: bool,
    pub ops: BTreeMap<RequestId, ClientOp>,
    pub(super) next_seq: u64,
    pub checker: Checker,
    pub rooms: RoomModel,
    /// Persistence of the player and room types in this run (the counter is
    /// always `on_write`: its check needs it).
    pub services_persist: (Persist, Persist),
    pub report: SimReport,
}

/// Runs one seed; the error says which invariant broke, with the seed.
pub fn run(seed: u64, config: &SimConfig) -> Result<SimReport, String> {
    let mut world = World::new(seed, config.clone());
    world
        .run()
        .map_err(|error| format!("seed {seed}: {error}"))?;
    world.report.rooms = world.rooms.stats;
    Ok(world.report)
}

impl World {
    pub(super) fn new(seed: u64, config: SimConfig) -> World {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut persist = || {
            if rng.gen_bool(0.5) {
                Persist::OnWrite
            } else {
                Persist::Interval
            }
        };
        let services_persist = (persist(), persist());
        let mut rooms = RoomModel::default();
        rooms.leaves_durable = services_persist.1 == Persist::OnWrite || !config.faults;
        let mut world = World {
            faults: config.faults,
            config,
            rng,
            now_ms: 0,
            queue: BTreeMap::new(),
            next_event: 0,
            nodes: BTreeMap::new(),
            table: MemoryTable::default(),
            partitions: BTreeSet::new(),
            ops: BTreeMap::new(),
            next_seq: 0,
            checker: Checker::default(),
            rooms,
            services_persist,
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
        if let Some(error) = self.rooms.error() {
            return Err(error.to_string());
        }
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
        self.report.events += 1;
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
                // Membership incarnations start at 1; the simulator counts
                // restarts from 0.
                router.set_incarnation(incarnation + 1);
                router.register(Box::new(CounterType {
                    persist: Persist::OnWrite,
                }));
                router.register(Box::new(PlayerType {
                    persist: self.services_persist.0,
                    duplicate_login: DuplicateLogin::KickOld,
                }));
                router.register(Box::new(RoomType {
                    persist: self.services_persist.1,
                    members_max: PLAYERS as usize,
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
        let peers: Vec<(u64, u64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .map(|(id, n)| (*id, n.incarnation))
            .collect();
        for (peer, peer_incarnation) in &peers {
            self.with_cores(*peer, |core| core.on_node_up(NodeId(node), incarnation + 1));
            if *peer != node {
                self.with_cores(node, |core| {
                    core.on_node_up(NodeId(*peer), peer_incarnation + 1)
                });
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
            Event::Flush {
                node,
                incarnation,
                core,
            } => {
                if self.incarnation(node) == Some(incarnation) {
                    self.report.flushes += 1;
                    self.on_core(node, core, |c, now| c.on_flush(now));
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
                Effect::FlushSavesAfterBatch => {
                    // After the events already due now, and sometimes after
                    // later ones too: requests, store replies, timers and
                    // transfers interleave with the pending flush.
                    let at = self.now_ms + self.rng.gen_range(0..=3);
                    self.schedule(
                        at,
                        Event::Flush {
                            node,
                            incarnation,
                            core,
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
                    self.rooms.replied(request, &outcome);
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
                Effect::Push {
                    client,
                    route_id,
                    body,
                } => self.rooms.push(client, route_id, &body),
                Effect::Kick { client } => self.rooms.kick(client),
                // Nobody waits for a transfer's end in the simulator.
                Effect::TransferDone(_) => {}
            }
        }
        self.rooms.settle();
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

    /// A counter request (`OP_ADD` adds `delta`).
    pub(super) fn submit(&mut self, origin: u64, key: ObjectKey, op: u32, delta: i64, calm: bool) {
        let (body, delta) = if op == OP_ADD {
            (delta.to_le_bytes().to_vec(), delta)
        } else {
            (Vec::new(), 0)
        };
        let submission = Submission {
            origin,
            key,
            op,
            body,
            client: None,
        };
        self.submit_request(submission, delta, calm, None);
    }

    /// Sends one client request through its gateway node `origin`; the
    /// services model follows it when `room_op` (with a say's room) is given.
    pub(super) fn submit_request(
        &mut self,
        submission: Submission,
        delta: i64,
        calm: bool,
        room_op: Option<(RoomOp, u64)>,
    ) -> RequestId {
        let id = self.next_request_id(submission.origin);
        let op = ClientOp {
            key: submission.key,
            delta,
            fate: Fate::Pending,
            calm,
        };
        self.ops.insert(id, op);
        if let Some((room_op, say_room)) = room_op {
            self.rooms.sent(id, room_op, say_room);
        }
        self.report.requests += 1;
        if self.incarnation(submission.origin).is_none() {
            self.lose(id);
            return id;
        }
        self.deliver_request(submission, id, true);
        id
    }

    /// A one-way request: nobody waits for an answer.
    pub(super) fn notify(&mut self, submission: Submission) {
        let id = self.next_request_id(submission.origin);
        self.deliver_request(submission, id, false);
    }

    fn next_request_id(&mut self, origin: u64) -> RequestId {
        self.next_seq += 1;
        RequestId {
            origin_node: NodeId(origin),
            seq: self.next_seq,
        }
    }

    fn deliver_request(&mut self, submission: Submission, id: RequestId, needs_reply: bool) {
        let Submission {
            origin,
            key,
            op,
            body,
            client,
        } = submission;
        let request = Request {
            id,
            op,
            body,
            client,
            needs_reply,
        };
        let head = RouterHead::local(key, NodeId(origin));
        let core = self.core_of(key);
        self.on_core(origin, core, |c, now| c.on_request(now, head, request));
    }
}
