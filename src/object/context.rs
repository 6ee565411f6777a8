//! What a handler sees of the router: the request (or event) it runs, and
//! the effects it asks for. Everything a handler asks for is collected in
//! the router's `HandlerOutput` and released by the router in order (for
//! an `on_write` object, once the state it followed is durable).

use std::time::Duration;

use wire::ObjectKey;

use crate::router::handler::{one_way, ObjectCall, ObjectTimer, OP_RESERVED_MIN};
use crate::router::{
    AppCode, ClientRef, ErrorCode, HandlerOutput, HandlerReply, Outcome, Refusal, Request,
    RequestId,
};

/// Timers one activation of an object may have pending: bounds the timers
/// a client can make one object hold.
pub const OBJECT_TIMERS_MAX: u32 = 64;

/// `Context::set_timer` refused: the object has [`OBJECT_TIMERS_MAX`]
/// timers pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{OBJECT_TIMERS_MAX} timers are pending on this object")]
pub struct TimerLimitReached;

/// The answer to a request, held back by [`Context::defer`] until the
/// object answers it with [`Context::answer_deferred`] (for instance once a
/// call it made was answered). Not `Clone`: a request is answered once.
/// It lives in the object's memory only: if the object is dropped or moves
/// first, the client's gateway answers TIMEOUT.
#[derive(Debug, PartialEq, Eq)]
pub struct Deferred {
    request: RequestId,
}

/// Where a request's one answer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Not answered yet.
    Owed,
    /// Answered, forwarded, or deferred.
    Settled,
    /// Nothing to answer: an event, or a one-way message.
    None,
}

/// The timers of one activation, kept by its adapter.
pub(super) struct Timers<'a> {
    pub activation: u64,
    pub pending: &'a mut u32,
}

/// A handler's view of one request or event of an object.
pub struct Context<'a> {
    key: ObjectKey,
    request: Option<&'a Request>,
    out: &'a mut HandlerOutput,
    answer: Answer,
    /// `None` for a service, which has no key to call back.
    timers: Option<Timers<'a>>,
}

impl<'a> Context<'a> {
    /// The context of `request` (or of an event, `None`) on `key`.
    pub(super) fn new(
        key: ObjectKey,
        request: Option<&'a Request>,
        out: &'a mut HandlerOutput,
        timers: Option<Timers<'a>>,
    ) -> Context<'a> {
        let answer = match request {
            Some(request) if request.needs_reply => Answer::Owed,
            _ => Answer::None,
        };
        Context {
            key,
            request,
            out,
            answer,
            timers,
        }
    }

    /// The key of the object (or of the service request) being run.
    pub fn key(&self) -> ObjectKey {
        self.key
    }

    /// The request's op: its client route id, or the op another object
    /// sent it with; 0 in an event handler.
    pub fn op(&self) -> u32 {
        self.request.map_or(0, |request| request.op)
    }

    /// The request's body; empty in an event handler. It outlives the
    /// borrow of the context, so a handler can read it while answering.
    pub fn body(&self) -> &'a [u8] {
        self.request.map_or(&[], |request| request.route_body())
    }

    /// The session that sent the request, when a client did (or when the
    /// object that forwarded it kept it).
    pub fn client(&self) -> Option<ClientRef> {
        self.request.and_then(|request| request.client)
    }

    /// The logged-in player of the session that sent the request.
    pub fn player_id(&self) -> Option<u64> {
        self.client().map(|client| client.player_id)
    }

    /// Whether someone waits for this request's answer.
    pub fn needs_answer(&self) -> bool {
        self.answer == Answer::Owed
    }

    /// The one answer: a RESPONSE body, or an ERROR code. A second answer
    /// is ignored (and logged): a request is answered exactly once.
    pub fn answer(&mut self, outcome: Outcome) {
        match self.answer {
            Answer::Owed => {
                self.answer = Answer::Settled;
                self.out.reply = HandlerReply::Answer(outcome);
            }
            Answer::Settled => self.misuse("answered twice; the first answer stands"),
            Answer::None => {}
        }
    }

    /// Answers ERROR `code` with the router's words for it. Prefer
    /// [`Context::fail_because`]: a refusal should say why.
    pub fn fail(&mut self, code: ErrorCode) {
        self.answer(Err(code.into()));
    }

    /// Answers ERROR `code` with `reason` (cut to
    /// `wire::client::APP_REASON_LEN_MAX` bytes): clients branch on the
    /// protocol's code, the person reading the error reads why
    /// (`counter would overflow`).
    pub fn fail_because(&mut self, code: ErrorCode, reason: &str) {
        self.answer(Err(Refusal::explained(code, reason)));
    }

    /// Answers ERROR with the type's own `code` and `reason` (cut to
    /// `wire::client::APP_REASON_LEN_MAX` bytes): the client reads both,
    /// so it can tell one refusal from another (docs/protocol.md, section 4).
    pub fn refuse(&mut self, code: AppCode, reason: &str) {
        self.answer(Err(Refusal::app(code, reason)));
    }

    /// Answers BAD_REQUEST with the router's generic words. Prefer
    /// [`Context::bad_request_because`].
    pub fn bad_request(&mut self) {
        self.fail(ErrorCode::BadRequest);
    }

    /// Answers BAD_REQUEST saying why: the body does not fit the route
    /// (`body must be 8 bytes, got 1`), or the object refuses it (`not a
    /// member of room 7`).
    pub fn bad_request_because(&mut self, reason: &str) {
        self.fail_because(ErrorCode::BadRequest, reason);
    }

    /// Passes this request on to the object `key` as op `op` with `body`:
    /// that object answers it (or forwards it further), and gets the same
    /// client session and request key: the object that answers a keyed
    /// request remembers its answer (docs/protocol.md, section 12), so a
    /// retry forwarded again is answered from that memory. Routed like a
    /// client request, in order with this object's other messages to it.
    pub fn forward(&mut self, key: ObjectKey, op: u32, body: Vec<u8>) {
        let Some(request) = self.request else {
            return self.misuse("forward outside a request");
        };
        if self.answer == Answer::Settled {
            return self.misuse("forward of a request already answered");
        }
        if !op_allowed(op) {
            return self.fail(ErrorCode::Internal);
        }
        if self.answer == Answer::Owed {
            self.answer = Answer::Settled;
        }
        self.out.reply = HandlerReply::Delegated;
        let mut forwarded = Request {
            id: request.id,
            op,
            body,
            client: request.client,
            needs_reply: request.needs_reply,
            keyed: false,
        };
        forwarded.add_request_key(request.request_key());
        self.out.sends.push((key, forwarded));
    }

    /// A PUSH on server-to-client route `route_id` to one session. The
    /// session's gateway drops it if the session has ended or logged in
    /// again since (the egress gate's epoch check).
    pub fn push(&mut self, client: ClientRef, route_id: u32, body: Vec<u8>) {
        self.out.pushes.push((client, route_id, body));
    }

    /// A one-way message to the object `key` (op `op`, no client, no
    /// answer), routed like a request, in order with this object's other
    /// messages to it.
    pub fn send(&mut self, key: ObjectKey, op: u32, body: Vec<u8>) {
        if !op_allowed(op) {
            return self.misuse("send with a reserved op");
        }
        self.out.sends.push((key, one_way(op, body)));
    }

    /// Closes a session: PUSH `sys.kicked`, then the connection closes.
    pub fn kick(&mut self, client: ClientRef) {
        self.out.kicks.push(client);
    }

    /// Asks `client`'s gateway whether the session still stands as
    /// `client` names it. If it does not (it closed, was never bound, or
    /// its node restarted or was declared down), its player object gets
    /// the session's unbind, as at a close: only the built-in player type
    /// asks (a login refused under `single`).
    pub(crate) fn check_session(&mut self, client: ClientRef) {
        self.out.session_checks.push(client);
    }

    /// Says the state changed and must be saved: at once for an `on_write`
    /// type (what this run emits waits for that save), at the next periodic
    /// save otherwise.
    pub fn mark_changed(&mut self) {
        self.out.mutated = true;
    }

    /// Asks the object `key` (op `op`, `body`): its answer comes back to
    /// this object as `on_answer(tag, ..)`, exactly once, an error among
    /// them. Nothing waits meanwhile; this object keeps running requests.
    pub fn call(&mut self, key: ObjectKey, op: u32, body: Vec<u8>, tag: u64) {
        if self.timers.is_none() {
            return self.misuse("call from a service");
        }
        if !op_allowed(op) {
            return self.misuse("call with a reserved op");
        }
        self.out.calls.push(ObjectCall {
            to: key,
            op,
            body,
            caller: self.key,
            tag,
        });
    }

    /// Holds this request's answer for [`Self::answer_deferred`] in a later
    /// run (an `on_answer`, an `on_timer`, another request). `None` when
    /// there is nothing to hold: an event, a one-way message, or a request
    /// answered already.
    pub fn defer(&mut self) -> Option<Deferred> {
        if self.answer != Answer::Owed || self.timers.is_none() {
            return None;
        }
        let request = self.request?;
        self.answer = Answer::Settled;
        Some(Deferred {
            request: request.id,
        })
    }

    /// Answers a request an earlier run deferred.
    pub fn answer_deferred(&mut self, deferred: Deferred, outcome: Outcome) {
        self.out.late_answers.push((deferred.request, outcome));
    }

    /// Calls this object's `on_timer(tag)` after `after` (milliseconds
    /// granularity), in order with its requests, if this activation is
    /// still the object's then. At most [`OBJECT_TIMERS_MAX`] pending.
    pub fn set_timer(&mut self, after: Duration, tag: u64) -> Result<(), TimerLimitReached> {
        let Some(timers) = self.timers.as_mut() else {
            self.misuse("timer in a service");
            return Err(TimerLimitReached);
        };
        if *timers.pending >= OBJECT_TIMERS_MAX {
            return Err(TimerLimitReached);
        }
        *timers.pending += 1;
        self.out.timers.push(ObjectTimer {
            after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
            activation: timers.activation,
            tag,
        });
        Ok(())
    }

    /// The activation's count of pending timers (`None` in a service).
    pub(super) fn timers_pending(&mut self) -> Option<&mut u32> {
        self.timers.as_mut().map(|timers| &mut *timers.pending)
    }

    /// Ends the run: a request still owed an answer gets INTERNAL, so that
    /// every request is answered exactly once whatever the handler did.
    ///
    /// Inlined: called, it took the context by value through a copy on the
    /// stack, and re-reading the answer flag just written in that copy
    /// stalled every request (see `crate::in_place`).
    #[inline(always)]
    pub(super) fn finish(self, type_name: &str) {
        if self.answer == Answer::Owed {
            tracing::warn!(
                type_name,
                key = ?self.key,
                op = self.op(),
                "a handler returned without answering its request: answered INTERNAL"
            );
            self.out.reply = HandlerReply::Answer(Err(ErrorCode::Internal.into()));
        }
    }

    fn misuse(&self, what: &str) {
        tracing::warn!(key = ?self.key, op = self.op(), "{what}");
    }
}

/// A service handler's view of one request: a [`Context`] without what
/// needs a key to come back to (calls, deferred answers, timers).
pub struct ServiceContext<'a>(pub(super) Context<'a>);

impl ServiceContext<'_> {
    /// The request's key: the service's type id and the object id its
    /// route took from the session or the body.
    pub fn key(&self) -> ObjectKey {
        self.0.key()
    }
    /// See [`Context::op`].
    pub fn op(&self) -> u32 {
        self.0.op()
    }
    /// See [`Context::body`].
    pub fn body(&self) -> &[u8] {
        self.0.body()
    }
    /// See [`Context::client`].
    pub fn client(&self) -> Option<ClientRef> {
        self.0.client()
    }
    /// See [`Context::player_id`].
    pub fn player_id(&self) -> Option<u64> {
        self.0.player_id()
    }
    /// See [`Context::answer`].
    pub fn answer(&mut self, outcome: Outcome) {
        self.0.answer(outcome)
    }
    /// See [`Context::fail`].
    pub fn fail(&mut self, code: ErrorCode) {
        self.0.fail(code)
    }
    /// See [`Context::bad_request`].
    pub fn bad_request(&mut self) {
        self.0.bad_request()
    }
    /// See [`Context::fail_because`].
    pub fn fail_because(&mut self, code: ErrorCode, reason: &str) {
        self.0.fail_because(code, reason)
    }
    /// See [`Context::bad_request_because`].
    pub fn bad_request_because(&mut self, reason: &str) {
        self.0.bad_request_because(reason)
    }
    /// See [`Context::refuse`].
    pub fn refuse(&mut self, code: AppCode, reason: &str) {
        self.0.refuse(code, reason)
    }
    /// See [`Context::forward`]: the object `key` answers this request.
    pub fn forward(&mut self, key: ObjectKey, op: u32, body: Vec<u8>) {
        self.0.forward(key, op, body)
    }
    /// See [`Context::push`].
    pub fn push(&mut self, client: ClientRef, route_id: u32, body: Vec<u8>) {
        self.0.push(client, route_id, body)
    }
    /// See [`Context::send`].
    pub fn send(&mut self, key: ObjectKey, op: u32, body: Vec<u8>) {
        self.0.send(key, op, body)
    }
}

fn op_allowed(op: u32) -> bool {
    op < OP_RESERVED_MIN
}
