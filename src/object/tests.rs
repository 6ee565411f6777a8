//! The public object API through the real router state machine: calls
//! answered as events, deferred answers, timers, the one-answer rule, and
//! versioned state. A small harness plays the driver (store, submissions,
//! call numbering and answer routing), one node and one core.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::codec::Reader;
use super::*;
use crate::config::RouterConfig;
use crate::ids::NodeId;
use crate::router::handler::answer_event;
use crate::router::{
    Effect, Request, RequestId, RouterCore, RouterHead, StoreOp, StoreReply, Timer,
};
use crate::store::{MemoryTable, RecordWrite, WriteCondition};

const ACCOUNT_TYPE_ID: u32 = 150;
const OP_GET: u32 = 1;
const OP_ADD: u32 = 2;
/// `u32 type, u64 id`: answers this balance plus that object's, asked by
/// a call.
const OP_SUM_WITH: u32 = 3;
/// `u64 after_ms, u64 tag`: sets a timer, answers at once.
const OP_REMIND: u32 = 4;
/// Answers the timer tags fired so far, as u64s.
const OP_FIRED: u32 = 5;
/// Returns without answering.
const OP_FORGET: u32 = 6;
/// Answers twice.
const OP_TWICE: u32 = 7;

struct AccountType {
    persist: Persist,
    version: u16,
}

#[derive(Default)]
struct Account {
    balance: i64,
    fired: Vec<u64>,
    /// Requests waiting for a call's answer, by call tag.
    waiting: BTreeMap<u64, Deferred>,
    next_tag: u64,
}

fn account(id: u64) -> ObjectKey {
    ObjectKey::new(ACCOUNT_TYPE_ID, 0, id)
}

impl ObjectType for AccountType {
    type Object = Account;

    fn type_id(&self) -> u32 {
        ACCOUNT_TYPE_ID
    }
    fn name(&self) -> &'static str {
        "account"
    }
    fn routes(&self) -> Vec<ClientRoute> {
        vec![ClientRoute::request(300, "account.get", KeyFrom::Session)]
    }
    fn persist(&self) -> Persist {
        self.persist
    }
    fn state_version(&self) -> u16 {
        self.version
    }
    fn create(&self, _key: ObjectKey) -> Account {
        Account::default()
    }
    /// Version 1 kept the balance in an i32; version 2 in an i64.
    fn decode(&self, _key: ObjectKey, version: u16, state: &[u8]) -> Result<Account, DecodeError> {
        let mut reader = Reader::new(state);
        let balance = match version {
            1 => i64::from(reader.u32().ok_or(DecodeError)? as i32),
            2 => reader.i64().ok_or(DecodeError)?,
            _ => return Err(DecodeError),
        };
        if !reader.is_empty() {
            return Err(DecodeError);
        }
        Ok(Account {
            balance,
            ..Account::default()
        })
    }
}

impl Object for Account {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.balance.to_le_bytes());
    }

    fn debug_view(&self) -> Option<String> {
        Some(format!("{{\"balance\": {}}}", self.balance))
    }

    fn handle(&mut self, ctx: &mut Context<'_>) {
        let mut body = Reader::new(ctx.body());
        match ctx.op() {
            OP_GET => ctx.answer(Ok(self.balance.to_le_bytes().to_vec())),
            OP_ADD => {
                self.balance += body.i64().unwrap_or(0);
                ctx.mark_changed();
                ctx.answer(Ok(self.balance.to_le_bytes().to_vec()));
            }
            OP_SUM_WITH => {
                let (Some(type_id), Some(id)) = (body.u32(), body.u64()) else {
                    return ctx.bad_request();
                };
                self.next_tag += 1;
                let peer = ObjectKey::new(type_id, 0, id);
                ctx.call(peer, OP_GET, Vec::new(), self.next_tag);
                let deferred = ctx.defer().expect("a request to hold");
                self.waiting.insert(self.next_tag, deferred);
            }
            OP_REMIND => {
                let (Some(after_ms), Some(tag)) = (body.u64(), body.u64()) else {
                    return ctx.bad_request();
                };
                match ctx.set_timer(Duration::from_millis(after_ms), tag) {
                    Ok(()) => ctx.answer(Ok(Vec::new())),
                    Err(TimerLimitReached) => ctx.fail(ErrorCode::Overloaded),
                }
            }
            OP_FIRED => {
                let fired = self.fired.iter().flat_map(|t| t.to_le_bytes()).collect();
                ctx.answer(Ok(fired));
            }
            OP_FORGET => {}
            OP_TWICE => {
                ctx.answer(Ok(b"first".to_vec()));
                ctx.answer(Ok(b"second".to_vec()));
            }
            _ => ctx.bad_request(),
        }
    }

    fn on_answer(&mut self, ctx: &mut Context<'_>, tag: u64, outcome: Outcome) {
        let Some(deferred) = self.waiting.remove(&tag) else {
            return;
        };
        let outcome = outcome.and_then(|peer| {
            let peer = Reader::new(&peer).i64().ok_or(ErrorCode::Internal)?;
            Ok((self.balance + peer).to_le_bytes().to_vec())
        });
        ctx.answer_deferred(deferred, outcome);
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, tag: u64) {
        self.fired.push(tag);
        // Answering in an event has no request to go to: ignored.
        ctx.answer(Ok(Vec::new()));
    }
}

/// One node, one core, a driver played by hand.
struct Harness {
    core: RouterCore,
    table: MemoryTable,
    now_ms: u64,
    next_seq: u64,
    /// Calls in flight: request number -> (caller, tag).
    calls: BTreeMap<u64, (ObjectKey, u64)>,
    /// Object timers armed: (at, timer).
    timers: Vec<(u64, Timer)>,
    /// Answers to the test's own requests, by request number.
    answers: BTreeMap<u64, crate::router::Outcome>,
}

impl Harness {
    fn new(kind: AccountType) -> Harness {
        let mut core = RouterCore::new(NodeId(1), RouterConfig::default(), 1, 0);
        core.register(Box::new(kind));
        core.drain_effects().for_each(drop);
        Harness {
            core,
            table: MemoryTable::default(),
            now_ms: 0,
            next_seq: 1 << 20,
            calls: BTreeMap::new(),
            timers: Vec::new(),
            answers: BTreeMap::new(),
        }
    }

    /// Sends `op` to account `id` and runs until quiet; returns its answer.
    fn ask(&mut self, id: u64, op: u32, body: Vec<u8>) -> Option<crate::router::Outcome> {
        self.next_seq += 1;
        let seq = self.next_seq;
        let request = Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq,
            },
            op,
            body,
            client: None,
            needs_reply: true,
            keyed: false,
        };
        self.core.on_request(
            self.now_ms,
            RouterHead::local(account(id), NodeId(1)),
            request,
        );
        self.settle();
        self.answers.remove(&seq)
    }

    fn settle(&mut self) {
        let mut queue: VecDeque<Effect> = self.core.drain_effects().collect();
        while let Some(effect) = queue.pop_front() {
            let now = self.now_ms;
            match effect {
                Effect::Store { token, op } => {
                    let reply = match op {
                        StoreOp::Load(key) => StoreReply::Loaded(self.table.load(key)),
                        StoreOp::Write(write) => StoreReply::Written(self.table.write(&write)),
                        StoreOp::WriteBatch(writes) => StoreReply::WrittenBatch(
                            writes.iter().map(|w| self.table.write(w)).collect(),
                        ),
                    };
                    self.core.on_store_reply(now, token, reply);
                }
                Effect::Submit { head, request } => self.core.on_request(now, head, *request),
                Effect::Call {
                    head,
                    mut request,
                    caller,
                    tag,
                } => {
                    self.next_seq += 1;
                    request.id.seq = self.next_seq;
                    self.calls.insert(self.next_seq, (caller, tag));
                    self.core.on_request(now, head, *request);
                }
                Effect::Reply { request, outcome } => match self.calls.remove(&request.seq) {
                    Some((caller, tag)) => self.core.on_request(
                        now,
                        RouterHead::local(caller, NodeId(1)),
                        answer_event(tag, outcome),
                    ),
                    None => {
                        let first = self.answers.insert(request.seq, outcome);
                        assert!(first.is_none(), "request {} answered twice", request.seq);
                    }
                },
                Effect::ArmTimer {
                    at_ms,
                    timer: timer @ Timer::Object { .. },
                } => self.timers.push((at_ms, timer)),
                Effect::FlushSavesAfterBatch => self.core.on_flush(now),
                _ => {}
            }
            queue.extend(self.core.drain_effects());
        }
    }

    /// Advances the clock to `now_ms` and fires the object timers due.
    fn advance(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        let (due, later): (Vec<_>, Vec<_>) =
            self.timers.drain(..).partition(|(at, _)| *at <= now_ms);
        self.timers = later;
        for (_, timer) in due {
            self.core.on_timer(now_ms, timer);
            self.settle();
        }
    }
}

fn i64_of(outcome: Option<crate::router::Outcome>) -> i64 {
    let bytes = outcome.expect("answered").expect("a response");
    i64::from_le_bytes(bytes.try_into().expect("an i64"))
}

fn account_type(persist: Persist) -> AccountType {
    AccountType {
        persist,
        version: 2,
    }
}

fn peer(type_id: u32, id: u64) -> Vec<u8> {
    let mut body = type_id.to_le_bytes().to_vec();
    body.extend_from_slice(&id.to_le_bytes());
    body
}

#[test]
fn a_call_is_answered_as_an_event_and_the_deferred_answer_follows() {
    for persist in [Persist::Interval, Persist::OnWrite] {
        let mut h = Harness::new(account_type(persist));
        assert_eq!(i64_of(h.ask(1, OP_ADD, 5i64.to_le_bytes().to_vec())), 5);
        assert_eq!(i64_of(h.ask(2, OP_ADD, 7i64.to_le_bytes().to_vec())), 7);
        // Account 1 asks account 2 and answers its client from on_answer.
        let sum = h.ask(1, OP_SUM_WITH, peer(ACCOUNT_TYPE_ID, 2));
        assert_eq!(i64_of(sum), 12, "{persist:?}");
        // A call the router refuses (no such type here) is answered too,
        // by its error, which the deferred answer carries.
        let refused = h.ask(1, OP_SUM_WITH, peer(ACCOUNT_TYPE_ID + 1, 2));
        assert_eq!(refused, Some(Err(ErrorCode::BadRequest.into())));
        assert!(h.calls.is_empty(), "every call answered once");
    }
}

#[test]
fn every_request_is_answered_once_whatever_the_handler_does() {
    let mut h = Harness::new(account_type(Persist::Interval));
    assert_eq!(
        h.ask(1, OP_FORGET, Vec::new()),
        Some(Err(ErrorCode::Internal.into()))
    );
    assert_eq!(h.ask(1, OP_TWICE, Vec::new()), Some(Ok(b"first".to_vec())));
    assert_eq!(
        h.ask(1, 999, Vec::new()),
        Some(Err(ErrorCode::BadRequest.into()))
    );
}

/// OP_REMIND's body: fire tag `tag` after `after_ms`.
fn remind(after_ms: u64, tag: u64) -> Vec<u8> {
    let mut body = after_ms.to_le_bytes().to_vec();
    body.extend_from_slice(&tag.to_le_bytes());
    body
}

/// The tags account `id`'s timers fired, in order.
fn fired(h: &mut Harness, id: u64) -> Vec<u64> {
    let bytes = h.ask(id, OP_FIRED, Vec::new()).unwrap().unwrap();
    bytes
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A lapsed lease pauses the core without losing what nobody retries: an
/// object's timers that fire in the lapse run once a heartbeat renews the
/// lease. Dropped, they never ran, and their places among the object's
/// pending timers were never given back (at the bound, every later timer
/// was refused).
#[test]
fn timers_that_fire_while_the_lease_lapsed_run_once_it_is_renewed() {
    let mut h = Harness::new(account_type(Persist::Interval));
    h.core.extend_lease(0, 1_000);
    for tag in 0..OBJECT_TIMERS_MAX as u64 {
        assert_eq!(h.ask(1, OP_REMIND, remind(500, tag)), Some(Ok(Vec::new())));
    }
    h.core.end_lease(400);
    h.advance(600);
    assert_eq!(
        h.ask(1, OP_FIRED, Vec::new()),
        Some(Err(ErrorCode::Unavailable.into())),
        "the lapse pauses the core"
    );
    h.core.extend_lease(700, 5_000);
    h.settle();
    h.now_ms = 700;
    let all: Vec<u64> = (0..OBJECT_TIMERS_MAX as u64).collect();
    assert_eq!(fired(&mut h, 1), all);
    assert_eq!(h.ask(1, OP_REMIND, remind(10, 99)), Some(Ok(Vec::new())));
    assert_eq!(h.core.counters().paused_events_dropped_total, 0);
}

#[test]
fn timers_fire_in_order_for_their_activation_only_and_are_bounded() {
    let mut h = Harness::new(account_type(Persist::Interval));
    assert_eq!(h.ask(1, OP_REMIND, remind(200, 2)), Some(Ok(Vec::new())));
    assert_eq!(h.ask(1, OP_REMIND, remind(100, 1)), Some(Ok(Vec::new())));
    let fired = |h: &mut Harness| fired(h, 1);
    h.advance(99);
    assert_eq!(fired(&mut h), Vec::<u64>::new());
    h.advance(150);
    assert_eq!(fired(&mut h), vec![1]);
    h.advance(200);
    assert_eq!(fired(&mut h), vec![1, 2]);
    // The bound: OBJECT_TIMERS_MAX pending, then OVERLOADED; a fired one
    // frees its place.
    for tag in 0..OBJECT_TIMERS_MAX as u64 {
        assert_eq!(
            h.ask(1, OP_REMIND, remind(1_000, tag)),
            Some(Ok(Vec::new()))
        );
    }
    assert_eq!(
        h.ask(1, OP_REMIND, remind(10, 77)),
        Some(Err(ErrorCode::Overloaded.into()))
    );
    h.advance(1_200);
    assert_eq!(h.ask(1, OP_REMIND, remind(10, 78)), Some(Ok(Vec::new())));
    // A timer of an earlier activation never reaches a later one: the
    // object is saved and dropped (shutdown), then loaded again.
    let pending = h.timers.clone();
    assert!(!pending.is_empty());
    h.core.shutdown(h.now_ms, 1_000);
    h.settle();
    let mut h2 = Harness::new(account_type(Persist::Interval));
    h2.table = std::mem::take(&mut h.table);
    h2.now_ms = h.now_ms;
    assert_eq!(
        h2.ask(1, OP_GET, Vec::new()),
        Some(Ok(0i64.to_le_bytes().to_vec()))
    );
    h2.timers = pending;
    h2.advance(5_000);
    assert!(
        fired(&mut h2).is_empty(),
        "the new activation got no old timer"
    );
}

#[test]
fn a_state_is_decoded_with_the_version_that_wrote_it() {
    let mut h = Harness::new(AccountType {
        persist: Persist::OnWrite,
        version: 1,
    });
    // A record version 1 wrote: the balance as an i32.
    let mut state = 1u16.to_le_bytes().to_vec();
    state.extend_from_slice(&(-3i32).to_le_bytes());
    let write = RecordWrite {
        key: account(1),
        condition: WriteCondition::Absent,
        owner_node: NodeId::NONE,
        owner_incarnation: 0,
        route_version: crate::ids::RouteVersion(1),
        save_timepoint_ms: 0,
        state,
    };
    h.table.write(&write);
    let mut h2 = Harness::new(account_type(Persist::OnWrite));
    h2.table = std::mem::take(&mut h.table);
    // Read as version 1 by a build at version 2, saved back as version 2.
    assert_eq!(i64_of(h2.ask(1, OP_ADD, 1i64.to_le_bytes().to_vec())), -2);
    let saved = h2.table.load(account(1)).expect("saved").state;
    assert_eq!(saved[..2], 2u16.to_le_bytes());
    assert_eq!(saved[2..], (-2i64).to_le_bytes());
    // A version newer than the build's is refused, not misread.
    let mut h3 = Harness::new(AccountType {
        persist: Persist::OnWrite,
        version: 1,
    });
    h3.table = std::mem::take(&mut h2.table);
    assert_eq!(
        h3.ask(1, OP_GET, Vec::new()),
        Some(Err(ErrorCode::Internal.into()))
    );
}

/// The state viewer's view of a user type: the object decoded from the
/// saved state with the version that wrote it, through `debug_view`, with
/// or without remembered answers after it; none for a state that does not
/// decode, a version past the build's, a type
/// not registered, or a type without a view (the built-in room's default).
#[test]
fn a_saved_state_is_shown_through_the_types_debug_view() {
    let mut registry = Registry::default();
    registry
        .add_object_type(account_type(Persist::OnWrite))
        .unwrap();
    registry
        .add_object_type(crate::builtins::room::RoomType::default())
        .unwrap();
    let saved = |version: u16, state: &[u8]| {
        let mut saved = version.to_le_bytes().to_vec();
        saved.extend_from_slice(state);
        saved
    };
    let view = |key, saved: &[u8]| registry.debug_view(key, saved);
    assert_eq!(
        view(account(1), &saved(2, &(-7i64).to_le_bytes())).as_deref(),
        Some("{\"balance\": -7}")
    );
    assert_eq!(
        view(account(1), &saved(1, &5i32.to_le_bytes())).as_deref(),
        Some("{\"balance\": 5}")
    );
    // Saved with remembered answers of keyed requests after the state:
    // one player (7) with one answer (key 5, an empty RESPONSE).
    let mut with_answers = (2u16 | 0x8000).to_le_bytes().to_vec();
    with_answers.extend_from_slice(&8u32.to_le_bytes());
    with_answers.extend_from_slice(&(-7i64).to_le_bytes());
    with_answers.extend_from_slice(&1u32.to_le_bytes());
    with_answers.extend_from_slice(&7u64.to_le_bytes());
    with_answers.extend_from_slice(&1u16.to_le_bytes());
    with_answers.extend_from_slice(&5u64.to_le_bytes());
    with_answers.extend_from_slice(&[0; 6]);
    assert_eq!(
        view(account(1), &with_answers).as_deref(),
        Some("{\"balance\": -7}")
    );
    assert_eq!(
        view(account(1), &with_answers[..with_answers.len() - 1]),
        None
    );
    assert_eq!(view(account(1), &saved(2, b"short")), None);
    assert_eq!(view(account(1), &saved(3, &0i64.to_le_bytes())), None);
    assert_eq!(view(account(1), &[2]), None);
    assert_eq!(view(ObjectKey::new(999, 0, 1), &saved(1, &[])), None);
    let room = ObjectKey::new(crate::builtins::ROOM_TYPE_ID, 0, 1);
    assert_eq!(view(room, &saved(1, &0u32.to_le_bytes())), None);
}
