//! The router's manager interface: one `ObjectType` per router type,
//! registered with `RouterCore::register`, and one `ServiceHandler` per
//! stateless service, registered with `RouterCore::register_service`.
//!
//! User code does not implement these directly: it implements the public
//! API of [`crate::object`], which reaches the router through a blanket
//! adapter (versioned state, a handler context, calls, timers). The traits
//! here stay small and byte-oriented so that the router, its tests and the
//! simulator can drive any object type the same way.

use wire::ObjectKey;

use super::types::{ClientRef, ErrorCode, Outcome, Request, RequestId, Timer};
use crate::config::Persist;
use crate::ids::NodeId;

/// A router object type: how its state is created, decoded and persisted.
pub trait ObjectType {
    /// The `type_id` of the keys this type owns.
    fn type_id(&self) -> u32;
    /// Whether a request for a key nobody owns may create the object on the
    /// default node (rendezvous hash over live nodes).
    fn auto_create(&self) -> bool;
    /// Whether a request of `op` for a key with no record may create the
    /// object (asked of `auto_create` types only); `Err(answer)` answers the
    /// request so instead, and nothing is created.
    fn may_create(&self, op: u32) -> Result<(), Outcome> {
        let _ = op;
        Ok(())
    }
    fn persist(&self) -> Persist;
    /// Decodes persisted state; `None` is a new object (no record yet). A
    /// decoding error makes the claim fail with INTERNAL rather than run on
    /// a state nobody can read back.
    fn decode(
        &self,
        key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError>;
}

/// The live state of one writable object.
pub trait ObjectState {
    /// The bytes persisted and shipped inside `router_transfer`.
    fn encode(&self) -> Vec<u8>;
    /// Runs one request. Pure: it may only change `self` and fill `out`.
    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput);
}

/// A stateless service: no owner, no persisted state. Any node that
/// registers it runs its requests on whichever core they land on; which
/// node gets a request was decided before it reached the router (the
/// catalog's pick over the nodes that advertise the service).
pub trait ServiceHandler {
    /// The `type_id` of the keys of its requests (its actor type in the
    /// catalog).
    fn type_id(&self) -> u32;
    /// Runs one request. Pure: it may only fill `out` (no timers, no calls:
    /// a stateless service has no key to be called back on).
    fn handle(&self, key: ObjectKey, request: &Request, out: &mut HandlerOutput);
}

/// A stored state or a body this build cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError;

/// What a handler produced. The router emits it: at once for reads and
/// `interval` objects, after the save's CAS applied for a mutation of an
/// `on_write` object (and drops all of it if that save fails).
#[derive(Debug, Default)]
pub struct HandlerOutput {
    pub reply: HandlerReply,
    /// The state changed (it must be saved).
    pub mutated: bool,
    /// `(client, route_id, body)` PUSHes.
    pub pushes: Vec<(ClientRef, u32, Vec<u8>)>,
    /// Requests to other objects, routed like client requests.
    pub sends: Vec<(ObjectKey, Request)>,
    /// Sessions the gateway must kick (duplicate login).
    pub kicks: Vec<ClientRef>,
    /// Sessions whose gateway must say whether they still stand as named
    /// (a login refused because of one): one that does not is unbound
    /// from its player.
    pub session_checks: Vec<ClientRef>,
    /// Requests to other objects whose answers come back to `caller` as
    /// an answer event (see [`answer_event`]).
    pub calls: Vec<ObjectCall>,
    /// Answers to requests an earlier handler run deferred.
    pub late_answers: Vec<(RequestId, Outcome)>,
    /// Timers to arm for this object (see [`ObjectTimer`]).
    pub timers: Vec<ObjectTimer>,
    /// The timers above as the router armed them: fire time and timer,
    /// filled by the router when it ran the handler.
    pub(crate) armed: Vec<(u64, Timer)>,
}

#[derive(Debug, Default)]
pub enum HandlerReply {
    /// Answer the request with this.
    Answer(Outcome),
    /// The request (same `RequestId`) was passed on in `sends`; whoever gets
    /// it answers. Also the value for requests with `needs_reply == false`.
    #[default]
    Delegated,
}

/// A request to another object whose answer the caller gets back as an
/// event. The driver gives it a request number of its own and routes the
/// answer (or TIMEOUT, if none comes within the request timeout) to
/// `caller` as a one-way [`OP_ANSWER`] request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectCall {
    pub to: ObjectKey,
    pub op: u32,
    pub body: Vec<u8>,
    pub caller: ObjectKey,
    /// The caller's own number for this call, given back with the answer.
    pub tag: u64,
}

/// A timer one object asked for: after `after_ms`, the router hands the
/// object a one-way [`OP_TIMER`] request with `activation` and `tag`, if
/// the object is still writable on this core then. `activation` is opaque
/// to the router: the object type uses it to ignore a timer armed by an
/// earlier activation of the same key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectTimer {
    pub after_ms: u64,
    pub activation: u64,
    pub tag: u64,
}

impl HandlerOutput {
    pub fn answer(&mut self, outcome: Outcome) {
        self.reply = HandlerReply::Answer(outcome);
    }

    pub fn bad_request(&mut self) {
        self.reply = HandlerReply::Answer(Err(ErrorCode::BadRequest.into()));
    }

    /// Nothing but the reply (and the mutated flag): no push, send, kick,
    /// session check, call, late answer or timer. Every field is named, so a list added
    /// to the output cannot be forgotten here (`output::emit` skips
    /// its lists when this holds).
    pub(crate) fn is_answer_only(&self) -> bool {
        let HandlerOutput {
            reply: _,
            mutated: _,
            pushes,
            sends,
            kicks,
            session_checks,
            calls,
            late_answers,
            timers,
            armed,
        } = self;
        pushes.is_empty()
            && sends.is_empty()
            && kicks.is_empty()
            && session_checks.is_empty()
            && calls.is_empty()
            && late_answers.is_empty()
            && timers.is_empty()
            && armed.is_empty()
    }
}

pub use crate::route::OP_RESERVED_MIN;
/// The answer to an [`ObjectCall`], for its caller: body
/// `u64 tag, u16 error code (0: success), answer body`.
pub const OP_ANSWER: u32 = 0xFFFF_FFF0;
/// A timer of the object fired: body `u64 activation, u64 tag`.
pub const OP_TIMER: u32 = 0xFFFF_FFF1;

/// A one-way request nobody answers (an event, a notification).
pub(crate) fn one_way(op: u32, body: Vec<u8>) -> Request {
    Request {
        // The id of a one-way request is never answered; 0 is no node.
        id: RequestId {
            origin_node: NodeId::NONE,
            seq: 0,
        },
        op,
        body,
        client: None,
        needs_reply: false,
        keyed: false,
    }
}

/// The event that carries the answer to call `tag` back to its caller.
pub fn answer_event(tag: u64, outcome: Outcome) -> Request {
    let (code, answer) = match outcome {
        Ok(body) => (0u16, body),
        Err(refusal) => super::types::refusal_wire(refusal),
    };
    let mut body = Vec::with_capacity(10 + answer.len());
    body.extend_from_slice(&tag.to_le_bytes());
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&answer);
    one_way(OP_ANSWER, body)
}

/// `(tag, outcome)` of an answer event's body; `None` if malformed.
pub fn decode_answer_event(body: &[u8]) -> Option<(u64, Outcome)> {
    let (tag, rest) = body.split_at_checked(8)?;
    let (code, answer) = rest.split_at_checked(2)?;
    let tag = u64::from_le_bytes(tag.try_into().ok()?);
    let outcome = match u16::from_le_bytes(code.try_into().ok()?) {
        0 => Ok(answer.to_vec()),
        code => Err(super::types::refusal_from_wire(code, answer)),
    };
    Some((tag, outcome))
}

/// The event that tells an object one of its timers fired.
pub fn timer_event(activation: u64, tag: u64) -> Request {
    let mut body = Vec::with_capacity(16);
    body.extend_from_slice(&activation.to_le_bytes());
    body.extend_from_slice(&tag.to_le_bytes());
    one_way(OP_TIMER, body)
}

/// `(activation, tag)` of a timer event's body; `None` if malformed.
pub fn decode_timer_event(body: &[u8]) -> Option<(u64, u64)> {
    let bytes: &[u8; 16] = body.try_into().ok()?;
    let (activation, tag) = bytes.split_at(8);
    Some((
        u64::from_le_bytes(activation.try_into().ok()?),
        u64::from_le_bytes(tag.try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_garbage_is_refused() {
        for outcome in [
            Ok(b"answer".to_vec()),
            Ok(Vec::new()),
            Err(ErrorCode::Timeout.into()),
            Err(ErrorCode::BadRequest.into()),
            Err(crate::router::Refusal::app(
                crate::router::AppCode::nth(3),
                "an object's own",
            )),
        ] {
            let event = answer_event(u64::MAX - 1, outcome.clone());
            assert_eq!(event.op, OP_ANSWER);
            assert!(!event.needs_reply);
            assert_eq!(
                decode_answer_event(&event.body),
                Some((u64::MAX - 1, outcome))
            );
        }
        let event = timer_event(7, 9);
        assert_eq!(event.op, OP_TIMER);
        assert_eq!(decode_timer_event(&event.body), Some((7, 9)));
        assert_eq!(decode_answer_event(&[1, 2, 3]), None);
        assert_eq!(decode_answer_event(&[0; 9]), None);
        assert_eq!(decode_timer_event(&[0; 15]), None);
        assert_eq!(decode_timer_event(&[0; 17]), None);
        // Events can never be mistaken for a client route's op.
        const { assert!(OP_ANSWER >= OP_RESERVED_MIN) };
        const { assert!(OP_TIMER >= OP_RESERVED_MIN) };
    }
}
