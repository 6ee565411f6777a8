//! Performing the core's effects: what the router core asked for goes out
//! to this node's gateway, another core, another node, the store or the
//! timers. Each effect is performed once, in the order the core gave them.

use std::time::Instant;

use wire::frame::{FrameBuf, Message};

use super::frames::{client_wire, encode_node_message, encode_reply};
use super::held::Held;
use super::replies::RouteKind;
use super::store_ops::perform_store_op;
use super::{CallRoute, Destination, Input, LinkRefusal, RouterDriver, FLUSH_LINGER};
use crate::clock;
use crate::ids::NodeId;
use crate::router::handler::answer_event;
use crate::router::types::{
    ClientRef, Effect, ErrorCode, NodeMessage, Outcome, Request, RequestId, RouterHead, StoreOp,
    StoreToken, Timer, TransferDone,
};

impl RouterDriver {
    /// Performs the core's queued effects until it is quiet. Effects that
    /// feed this core again (a submission to itself) queue inputs, handled
    /// after the current one. `polled_at`: the turn's clock reading.
    pub(super) fn perform_effects(&self, polled_at: Instant) {
        let mut effects = self.0.effects.take();
        loop {
            self.0.core.borrow_mut().take_effects(&mut effects);
            if effects.is_empty() {
                break;
            }
            for effect in effects.drain(..) {
                self.perform(effect, polled_at);
            }
        }
        self.0.effects.replace(effects);
    }

    fn perform(&self, effect: Effect, polled_at: Instant) {
        match effect {
            Effect::Submit { head, request } => self.submit_from_object(head, *request),
            Effect::Store { token, op } => self.store(token, op),
            Effect::ArmTimer { at_ms, timer } => self.arm(at_ms, timer),
            Effect::Reply { request, outcome } => self.hold(|| Held::Reply { request, outcome }),
            Effect::Push {
                client,
                route_id,
                body,
            } => self.hold(|| Held::Push {
                client,
                route_id,
                body,
            }),
            Effect::Kick { client } => self.hold(|| Held::Kick { client }),
            // Not held: a question changes nothing until its answer, which
            // goes to the player object like a close does.
            Effect::CheckSession { client } => self.check_session(client),
            Effect::SessionGone { client } => {
                if let Some(client_side) = self.0.client_side.borrow().clone() {
                    client_side.session_gone(client);
                }
            }
            Effect::Call {
                head,
                request,
                caller,
                tag,
            } => self.call(head, *request, CallRoute { caller, tag }),
            Effect::SendToNode { node, message } => {
                // The reading of the batch's poll (converted once, then
                // cached): a forwarded request's wait starts at most one
                // poll early, as its arrival is judged, with no clock read
                // per request.
                let now_ms = self.ms_at(polled_at);
                self.send_to_node(now_ms, node, *message)
            }
            Effect::FlushSavesAfterBatch => self.flush_after_batch(),
            Effect::TransferDone(done) => self.transfer_done(done),
        }
    }

    fn transfer_done(&self, done: TransferDone) {
        let waiter = self.0.transfer_waiters.borrow_mut().remove(&done.key);
        if let Some(waiter) = waiter {
            waiter(Ok(done));
        }
        // A drain has room for the next transfer.
        if self.0.core.borrow().is_draining() {
            self.enqueue(Input::DrainStep);
        }
    }

    /// Starts the held on_write saves once `FLUSH_LINGER` passed: every
    /// request of the current batch, and of the other connections' reads
    /// of the same loop turn, shares its object's save.
    fn flush_after_batch(&self) {
        let driver = self.clone();
        shards::spawn(async move {
            shards::sleep(FLUSH_LINGER).await;
            driver.enqueue(Input::Flush);
        })
        .detach();
    }

    /// Submits an object's call with a number of this core's call slab, so
    /// its answer finds its way back to the caller (`answer_local`).
    fn call(&self, head: RouterHead, mut request: Request, route: CallRoute) {
        let now_ms = clock::now_ms();
        let seq = self
            .0
            .calls
            .borrow_mut()
            .insert(route, now_ms + self.0.request_timeout_ms);
        let Some(seq) = seq else {
            return self.answer_call(route, Err(ErrorCode::Overloaded.into()));
        };
        request.id = RequestId {
            origin_node: self.0.node,
            seq,
        };
        self.submit(head, request);
    }

    /// Hands the answer to a call to its caller, as an event routed by key
    /// like any request (the caller may have moved meanwhile).
    fn answer_call(&self, route: CallRoute, outcome: Outcome) {
        let event = answer_event(route.tag, outcome);
        self.submit(RouterHead::local(route.caller, self.0.node), event);
    }

    /// Answers TIMEOUT to the calls that waited `request_timeout_ms`.
    pub(super) fn expire_calls(&self) {
        let mut expired = Vec::new();
        self.0
            .calls
            .borrow_mut()
            .expire_each(clock::now_ms(), |route| expired.push(route));
        for route in expired {
            self.answer_call(route, Err(ErrorCode::Timeout.into()));
        }
    }

    /// Sends `message` to `node`; `now_ms` starts the wait for its answer.
    pub(super) fn send_to_node(&self, now_ms: u64, node: NodeId, message: NodeMessage) {
        let waits = match &message {
            NodeMessage::Routed { request, .. } | NodeMessage::ServiceRequest { request, .. } => {
                request.needs_reply.then_some(request.id)
            }
            _ => None,
        };
        if let Some(request) = waits {
            self.0.forwarded.borrow_mut().sent(now_ms, request, node);
        }
        let frame = encode_node_message(&message);
        let sent = self
            .0
            .links
            .send(node, Destination::Object(message.key()), &frame);
        if let Err(refusal) = sent {
            self.count_unroutable(node, refusal);
            // Back to the core, which answers or resolves the route again.
            self.0
                .core
                .borrow_mut()
                .on_send_failed(clock::now_ms(), node, message);
        }
    }

    fn count_unroutable(&self, node: NodeId, refusal: LinkRefusal) {
        let unroutable = &self.0.unroutable_total;
        unroutable.set(unroutable.get() + 1);
        tracing::debug!(node = node.0, reason = refusal.as_str(), "message not sent");
    }

    /// `answered_at`: the clock reading the answer is timed at.
    pub(super) fn reply(&self, request: RequestId, outcome: Outcome, answered_at: Instant) {
        let core = wire::ids::core_of(request.seq);
        if request.origin_node != self.0.node {
            let sent = self.0.links.send(
                request.origin_node,
                Destination::Core(core),
                &encode_reply(request, outcome),
            );
            // The client's gateway answers TIMEOUT for it.
            if let Err(refusal) = sent {
                self.count_unroutable(request.origin_node, refusal);
            }
            return;
        }
        if core == self.0.core_id {
            return self.answer_local(request.seq, outcome, answered_at, self.0.node);
        }
        match FrameBuf::encode_local(&encode_reply(request, outcome)) {
            // A reply that cannot cross is answered TIMEOUT by the gateway;
            // the mesh has counted it.
            Ok(frame) => drop(self.0.mesh.try_send(core, frame)),
            Err(error) => tracing::warn!(%error, "cannot encode a router reply"),
        }
    }

    /// An answer for a request this core made: a client's, or a call of
    /// one of its objects. `answered_by` is the node that made it.
    pub(super) fn answer_local(
        &self,
        request_seq: u64,
        outcome: Outcome,
        answered_at: Instant,
        answered_by: NodeId,
    ) {
        if RouteKind::of(request_seq) == RouteKind::Call {
            // None: answered TIMEOUT at expiry already, or abandoned.
            let route = self.0.calls.borrow_mut().take(request_seq);
            if let Some(route) = route {
                self.answer_call(route, outcome);
            }
            return;
        }
        let route = self.0.replies.borrow_mut().take(request_seq);
        let client_side = self.0.client_side.borrow().clone();
        match (route, client_side) {
            (Some(route), Some(client_side)) => {
                // Plain counts on the hot path, mirrored per batch
                // (`mirror_metrics`), as the core's counters are.
                let (local, remote) = self.0.client_answers.get();
                self.0.client_answers.set(if answered_by == self.0.node {
                    (local + 1, remote)
                } else {
                    (local, remote + 1)
                });
                client_side.answer(route, outcome, answered_at, answered_by)
            }
            // A request abandoned when its node died had mostly been
            // answered long before (`forwarded` keeps no answers): not late.
            _ if outcome == Err(ErrorCode::Timeout.into()) => {}
            // Expired: the gateway answered TIMEOUT already.
            _ => self.0.metrics.gateway.late_answers.inc(),
        }
    }

    pub(super) fn push(&self, client: ClientRef, route_id: u32, body: Vec<u8>) {
        if client.gateway_node == self.0.node {
            if let Some(client_side) = self.0.client_side.borrow().clone() {
                client_side.push(client, route_id, &body);
            }
            return;
        }
        let message = Message::ClientEgress {
            session_id: client.session_id,
            session_epoch: client.session_epoch,
            player_id: client.player_id,
            kind: wire::client::FrameKind::Push as u8,
            route_id,
            seq: 0,
            body,
        };
        self.send_to_session(client, &message);
    }

    pub(super) fn kick(&self, client: ClientRef) {
        if client.gateway_node == self.0.node {
            if let Some(client_side) = self.0.client_side.borrow().clone() {
                client_side.kick(client);
            }
            return;
        }
        let message = Message::SessionKick {
            session_id: client.session_id,
            player_id: client.player_id,
            reason: b"logged in elsewhere".to_vec(),
        };
        self.send_to_session(client, &message);
    }

    fn check_session(&self, client: ClientRef) {
        if client.gateway_node == self.0.node {
            if let Some(client_side) = self.0.client_side.borrow().clone() {
                client_side.check_session(client);
            }
            return;
        }
        let message = Message::SessionCheck {
            client: client_wire(client),
        };
        self.send_to_session(client, &message);
    }

    /// Sends `message` to the core of another node that owns the session.
    fn send_to_session(&self, client: ClientRef, message: &Message) {
        let core = wire::ids::core_of(client.session_id);
        let sent = self
            .0
            .links
            .send(client.gateway_node, Destination::Core(core), message);
        if let Err(refusal) = sent {
            self.count_unroutable(client.gateway_node, refusal);
        }
    }

    fn store(&self, token: StoreToken, op: StoreOp) {
        let reply = perform_store_op(self.0.store.clone(), op);
        let driver = self.clone();
        shards::spawn(async move {
            let reply = reply.await;
            driver.enqueue(Input::StoreReply { token, reply });
        })
        .detach();
    }

    fn arm(&self, at_ms: u64, timer: Timer) {
        let driver = self.clone();
        let at = clock::instant_at(at_ms);
        let fire = async move {
            shards::sleep_until(at).await;
            driver.enqueue(Input::Timer(timer));
        };
        // The periodic sweep's wake-up yields to client traffic.
        match timer {
            Timer::Sweep => shards::spawn_background(fire).detach(),
            _ => shards::spawn(fire).detach(),
        }
    }
}
