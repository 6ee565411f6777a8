//! Performing the router's effects, and the client side of requests: what
//! a gateway sends into its node's router and the answers it gets back.

use rand::RngExt;
use wire::ObjectKey;

use super::check::Invariant;
use super::counter::{counter_value, COUNTER_TYPE_ID, OP_ADD};
use super::room_model::RoomOp;
use super::world::{ClientOp, Event, Fate, World};
use crate::builtins::player::{self, player_key};
use crate::ids::NodeId;
use crate::router::{ClientRef, Effect, Outcome, Request, RequestId, RouterHead};

/// One request as a gateway hands it to its node's router.
pub(super) struct Submission {
    pub origin: u64,
    pub key: ObjectKey,
    pub op: u32,
    pub body: Vec<u8>,
    pub client: Option<ClientRef>,
}

impl World {
    /// Performs the effects of one core until it produces no more (a send
    /// a link refuses comes back to the core as `on_send_failed`).
    pub(super) fn drain(&mut self, node: u64, core: u32) {
        while let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.serving()) {
            let effects: Vec<Effect> = sim_node.cores[core as usize].drain_effects().collect();
            if effects.is_empty() {
                break;
            }
            for effect in effects {
                if self.trace {
                    eprintln!("{} n{node}.{core}: {effect:?}", self.now_ms);
                }
                self.perform(node, core, effect);
            }
        }
        self.rooms.settle();
    }

    fn perform(&mut self, node: u64, core: u32, effect: Effect) {
        let Some(process) = self.process_of(node) else {
            return;
        };
        match effect {
            Effect::SendToNode { node: to, message } => self.send(node, core, to.0, *message),
            // Counter, player and room never call another object: a call
            // here is a router bug the run must not hide.
            Effect::Call { .. } => panic!("n{node}.{core}: a call from a simulated object"),
            Effect::Submit { head, request } => self.schedule(
                self.now_ms,
                Event::Submit {
                    node,
                    process,
                    head,
                    request: *request,
                },
            ),
            Effect::Store { token, op } => {
                let at = self.now_ms + self.rng.random_range(1..=10);
                let event = Event::StoreApply {
                    node,
                    process,
                    core,
                    token,
                    op,
                };
                self.schedule(at, event);
            }
            Effect::FlushSavesAfterBatch => {
                // After the events already due now, and sometimes after
                // later ones too: requests, store replies, timers and
                // transfers interleave with the pending flush.
                let at = self.now_ms + self.rng.random_range(0..=3);
                self.schedule(
                    at,
                    Event::Flush {
                        node,
                        process,
                        core,
                    },
                );
            }
            Effect::ArmTimer { at_ms, timer } => {
                let clock = self.nodes[&node].clock;
                let at = clock.true_at(at_ms).max(self.now_ms);
                let event = Event::Timer {
                    node,
                    process,
                    core,
                    timer,
                };
                self.schedule(at, event);
            }
            Effect::Reply { request, outcome } => self.reply(node, request, outcome),
            Effect::Push {
                client,
                route_id,
                body,
            } => self.rooms.push(client, route_id, &body),
            Effect::Kick { client } => self.rooms.kick(client),
            // Only a login refused under `single` asks; the simulated
            // players log in under `kick_old`, whose logins are never
            // refused, and no simulated gateway would answer.
            Effect::CheckSession { .. } => {}
            Effect::SessionGone { client } => self.session_gone(node, process, client),
            // Nobody waits for a transfer's end in the simulator.
            Effect::TransferDone(_) => {}
        }
    }

    /// A push found `client`'s node declared down: `node` unbinds the
    /// session from its player through its router's input queue, as its
    /// gateway's port does (the player takes the session back if it asks
    /// again).
    fn session_gone(&mut self, node: u64, process: u64, client: ClientRef) {
        let request = Request {
            id: self.next_request_id(node),
            op: player::OP_UNBIND,
            body: Vec::new(),
            client: Some(client),
            needs_reply: false,
            keyed: false,
        };
        let head = RouterHead::local(player_key(client.player_id), NodeId(node));
        let event = Event::Submit {
            node,
            process,
            head,
            request,
        };
        self.schedule(self.now_ms, event);
    }

    /// The one answer of `request`, produced at `node`, on its way to the
    /// gateway that holds the client.
    fn reply(&mut self, node: u64, request: RequestId, outcome: Outcome) {
        self.checker.reply_produced(request);
        self.rooms.replied(request, &outcome);
        self.answers.answered(request);
        let origin = request.origin_node.0;
        if origin != node && !self.link_ok(node, origin) {
            self.report.dropped_messages += 1;
            self.lose(request);
            return;
        }
        let delay = if origin == node {
            0
        } else {
            self.rng.random_range(1..=20)
        };
        self.schedule(self.now_ms + delay, Event::Answer { request, outcome });
    }

    /// The gateway got the answer: the client's view, and the reads check.
    pub(super) fn answer(&mut self, request: RequestId, outcome: Outcome) {
        let Some(op) = self.ops.get_mut(&request) else {
            return;
        };
        if op.fate != Fate::Pending {
            return;
        }
        let Ok(body) = &outcome else {
            op.fate = Fate::Unknown;
            return;
        };
        op.fate = Fate::Acked;
        self.report.acked += 1;
        if op.key.type_id != COUNTER_TYPE_ID {
            return;
        }
        let (key, floor, is_add) = (op.key, op.floor, op.op == OP_ADD);
        let Some(value) = counter_value(body) else {
            return;
        };
        self.report.reads_checked += 1;
        if value < floor && !self.safety.is_disabled(Invariant::ReadBelowAcked) {
            self.safety.fail(
                Invariant::ReadBelowAcked,
                format!(
                    "{request:?} on {key:?} answered {value}, below {floor} acknowledged \
                     before it was sent"
                ),
            );
        }
        if is_add {
            let acked = self.acked_values.entry(key).or_insert(0);
            *acked = (*acked).max(value);
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
        let floor = self.acked_values.get(&submission.key).copied().unwrap_or(0);
        let op = ClientOp {
            key: submission.key,
            op: submission.op,
            delta,
            fate: Fate::Pending,
            calm,
            floor,
        };
        self.ops.insert(id, op);
        if let Some((room_op, say_room)) = room_op {
            self.rooms.sent(id, room_op, say_room);
        }
        self.report.requests += 1;
        if !self.serving(submission.origin) {
            self.lose(id);
            return id;
        }
        self.answers.sent(id, submission.origin, self.now_ms);
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

    /// Hands the request to the gateway's router, or keeps it for a paused
    /// gateway (its connection's bytes wait in the kernel).
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
            keyed: false,
        };
        let head = RouterHead::local(key, NodeId(origin));
        let Some(process) = self.process_of(origin) else {
            return;
        };
        if self.is_paused(origin) {
            let event = Event::Submit {
                node: origin,
                process,
                head,
                request,
            };
            return self.hold(origin, event);
        }
        let core = self.core_of(key);
        self.on_core(origin, core, |c, now| c.on_request(now, head, request));
    }
}
