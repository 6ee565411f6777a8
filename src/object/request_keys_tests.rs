//! Keyed requests through the wrapper, as the router runs a state: the
//! answer is remembered per player and key, survives encode and decode,
//! is bounded, and reaches a duplicate that came while the first ran.

use std::sync::Arc;

use wire::ObjectKey;

use crate::ids::NodeId;
use crate::object::adapter::Keyed;
use crate::object::codec::Reader as BodyReader;
use crate::object::request_keys::Bounds;
use crate::object::{ClientRoute, Context, Deferred, ErrorCode, KeyFrom, Object, ObjectType};
use crate::router::handler::{HandlerReply, ObjectState};
use crate::router::types::Refusal;
use crate::router::{
    ClientRef, DecodeError, HandlerOutput, ObjectType as RouterObjectType, Request, RequestId,
};

const COUNTER_TYPE_ID: u32 = 160;
const OP_ADD: u32 = 1;
const OP_GET: u32 = 2;
/// Defers its answer until `OP_RELEASE`.
const OP_LATER: u32 = 3;
/// Answers the deferred `OP_LATER` with the counter.
const OP_RELEASE: u32 = 4;
/// Answers UNAVAILABLE, running nothing.
const OP_UNAVAILABLE: u32 = 5;

struct CounterType;

#[derive(Default)]
struct Counter {
    value: i64,
    later: Option<Deferred>,
}

impl ObjectType for CounterType {
    type Object = Counter;
    fn type_id(&self) -> u32 {
        COUNTER_TYPE_ID
    }
    fn name(&self) -> &'static str {
        "counter"
    }
    fn routes(&self) -> Vec<ClientRoute> {
        vec![ClientRoute::request(301, "counter.add", KeyFrom::Session)]
    }
    fn create(&self, _key: ObjectKey) -> Counter {
        Counter::default()
    }
    fn decode(&self, _key: ObjectKey, _version: u16, state: &[u8]) -> Result<Counter, DecodeError> {
        let value = BodyReader::new(state).i64().ok_or(DecodeError)?;
        Ok(Counter { value, later: None })
    }
}

impl Object for Counter {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.value.to_le_bytes());
    }
    fn handle(&mut self, ctx: &mut Context<'_>) {
        match ctx.op() {
            OP_ADD => {
                self.value += BodyReader::new(ctx.body()).i64().unwrap_or(0);
                ctx.mark_changed();
                ctx.answer(Ok(self.value.to_le_bytes().to_vec()));
            }
            OP_GET => ctx.answer(Ok(self.value.to_le_bytes().to_vec())),
            OP_UNAVAILABLE => ctx.fail(ErrorCode::Unavailable),
            OP_LATER => self.later = ctx.defer(),
            OP_RELEASE => {
                if let Some(later) = self.later.take() {
                    ctx.answer_deferred(later, Ok(self.value.to_le_bytes().to_vec()));
                }
                ctx.answer(Ok(Vec::new()));
            }
            _ => ctx.bad_request(),
        }
    }
}

fn key() -> ObjectKey {
    ObjectKey::new(COUNTER_TYPE_ID, 0, 1)
}

fn kind(keys_max: usize) -> Keyed<Arc<CounterType>> {
    bounded(keys_max, crate::config::PAYLOAD_MAX_BYTES)
}

fn bounded(keys_max: usize, state_max: usize) -> Keyed<Arc<CounterType>> {
    Keyed::new(
        Arc::new(CounterType),
        Bounds {
            keys_max,
            state_max,
        },
    )
}

struct Run {
    state: Box<dyn ObjectState>,
    next_seq: u64,
}

impl Run {
    /// Remembering 128 answers a player, within `state_max` bytes.
    fn bounded(state_max: usize) -> Run {
        let state = bounded(128, state_max).decode(key(), None).unwrap();
        Run { state, next_seq: 1 }
    }

    fn new(keys_max: usize) -> Run {
        let state = kind(keys_max).decode(key(), None).expect("a new counter");
        Run { state, next_seq: 1 }
    }

    fn request(&mut self, player: u64, op: u32, delta: i64, request_key: u64) -> HandlerOutput {
        self.next_seq += 1;
        let mut request = Request {
            id: RequestId {
                origin_node: NodeId(1),
                seq: self.next_seq,
            },
            op,
            body: delta.to_le_bytes().to_vec(),
            client: Some(ClientRef {
                gateway_node: NodeId(1),
                session_id: 9,
                session_epoch: 1,
                player_id: player,
            }),
            needs_reply: true,
            keyed: false,
        };
        request.add_request_key(request_key);
        let mut out = HandlerOutput::default();
        self.state.handle(key(), &request, &mut out);
        out
    }

    /// The answer's i64, or `None` when the request got no answer yet.
    fn value(&mut self, player: u64, op: u32, delta: i64, request_key: u64) -> Option<i64> {
        match self.request(player, op, delta, request_key).reply {
            HandlerReply::Answer(Ok(body)) => Some(i64::from_le_bytes(body.try_into().ok()?)),
            _ => None,
        }
    }
}

#[test]
fn a_keyed_retry_gets_the_first_answer_and_runs_once() {
    let mut run = Run::new(128);
    assert_eq!(run.value(7, OP_ADD, 5, 100), Some(5));
    assert_eq!(run.value(7, OP_ADD, 5, 100), Some(5), "remembered");
    assert_eq!(
        run.value(7, OP_GET, 0, 0),
        Some(5),
        "the counter moved once"
    );
    // Without a key, every request runs.
    assert_eq!(run.value(7, OP_ADD, 1, 0), Some(6));
    assert_eq!(run.value(7, OP_ADD, 1, 0), Some(7));
    // Keys are per player: another player's key 100 is another request.
    assert_eq!(run.value(8, OP_ADD, 1, 100), Some(8));
    assert_eq!(run.value(8, OP_ADD, 1, 100), Some(8));
}

#[test]
fn the_memory_travels_with_the_state_and_plain_states_keep_their_bytes() {
    let mut run = Run::new(128);
    assert_eq!(run.value(7, OP_ADD, 1, 0), Some(1));
    // No keyed request yet: exactly the adapter's `u16 version | object`.
    let plain = run.state.encode();
    assert_eq!(
        plain,
        [&1u16.to_le_bytes()[..], &1i64.to_le_bytes()].concat()
    );
    assert_eq!(run.value(7, OP_ADD, 2, 41), Some(3));
    let bytes = run.state.encode();
    assert_ne!(bytes, plain);
    // A new owner decoding the saved state answers the retry from memory.
    let mut moved = Run {
        state: kind(128).decode(key(), Some(&bytes)).expect("decodes"),
        next_seq: 50,
    };
    assert_eq!(moved.value(7, OP_ADD, 2, 41), Some(3));
    assert_eq!(moved.value(7, OP_GET, 0, 0), Some(3));
    assert_eq!(moved.state.encode(), bytes);
    // Truncated bytes are refused, not misread.
    for cut in 0..bytes.len() {
        assert!(kind(128).decode(key(), Some(&bytes[..cut])).is_err() || cut < 2);
    }
}

#[test]
fn only_the_last_keys_max_answers_are_remembered() {
    let mut run = Run::new(2);
    assert_eq!(run.value(7, OP_ADD, 1, 1), Some(1));
    assert_eq!(run.value(7, OP_ADD, 1, 2), Some(2));
    assert_eq!(run.value(7, OP_ADD, 1, 3), Some(3));
    assert_eq!(run.value(7, OP_ADD, 1, 3), Some(3));
    assert_eq!(run.value(7, OP_ADD, 1, 2), Some(2));
    assert_eq!(run.value(7, OP_ADD, 1, 1), Some(4), "forgotten: runs again");
    // 0 remembers nothing.
    let mut off = Run::new(0);
    assert_eq!(off.value(7, OP_ADD, 1, 1), Some(1));
    assert_eq!(off.value(7, OP_ADD, 1, 1), Some(2));
}

#[test]
fn a_duplicate_while_the_first_runs_gets_its_answer() {
    let mut run = Run::new(128);
    assert_eq!(run.value(7, OP_ADD, 4, 0), Some(4));
    assert_eq!(run.value(7, OP_LATER, 0, 9), None, "deferred");
    let duplicate = run.request(7, OP_LATER, 0, 9);
    assert!(matches!(duplicate.reply, HandlerReply::Delegated));
    assert!(duplicate.late_answers.is_empty());
    let released = run.request(7, OP_RELEASE, 0, 0);
    let answers: Vec<_> = released
        .late_answers
        .iter()
        .map(|(id, outcome)| (id.seq, outcome.clone()))
        .collect();
    let four = Ok(4i64.to_le_bytes().to_vec());
    // The first (seq 3) and its duplicate (seq 4), the same answer.
    assert_eq!(answers, vec![(3, four.clone()), (4, four)]);
    // And remembered for later retries.
    assert_eq!(run.value(7, OP_LATER, 0, 9), Some(4));
}

#[test]
fn duplicates_waiting_for_one_deferred_request_are_bounded() {
    let mut run = Run::new(128);
    assert_eq!(run.value(7, OP_LATER, 0, 9), None, "deferred");
    for _ in 0..64 {
        let duplicate = run.request(7, OP_LATER, 0, 9);
        assert!(matches!(duplicate.reply, HandlerReply::Delegated));
    }
    let refused = run.request(7, OP_LATER, 0, 9);
    assert!(
        matches!(
            refused.reply,
            HandlerReply::Answer(Err(Refusal::Code(ErrorCode::Overloaded)))
        ),
        "the 65th duplicate is refused, not kept"
    );
    let released = run.request(7, OP_RELEASE, 0, 0);
    assert_eq!(
        released.late_answers.len(),
        65,
        "the first and 64 duplicates"
    );
    // The refused duplicate did not run: a retry now gets the answer.
    assert_eq!(run.value(7, OP_LATER, 0, 9), Some(0));
}

#[test]
fn a_remembered_answer_changes_the_state_even_when_the_request_did_not() {
    let mut run = Run::new(128);
    // A keyless read changes nothing: with on_write it leaves at once.
    assert!(!run.request(7, OP_GET, 0, 0).mutated);
    // A keyed one is remembered: the save that holds the memory must
    // commit before its answer leaves, or a retry after a crash runs again.
    assert!(run.request(7, OP_GET, 0, 5).mutated);
    // A retry answered from memory changes nothing more.
    assert!(!run.request(7, OP_GET, 0, 5).mutated);
    // Nor does a refusal that says the request did not run.
    assert!(!run.request(7, OP_UNAVAILABLE, 0, 6).mutated);
    // A deferred answer is remembered when it is given.
    assert!(!run.request(7, OP_LATER, 0, 8).mutated, "deferred");
    assert!(run.request(7, OP_RELEASE, 0, 0).mutated);
}

#[test]
fn past_the_running_bound_a_keyed_request_is_refused_before_it_runs() {
    let mut run = Run::new(128);
    for key in 1..=1024 {
        assert_eq!(run.value(7, OP_LATER, 0, key), None, "deferred");
    }
    let refused = run.request(7, OP_ADD, 1, 2000);
    assert!(matches!(
        refused.reply,
        HandlerReply::Answer(Err(Refusal::Code(ErrorCode::Overloaded)))
    ));
    assert_eq!(run.value(7, OP_GET, 0, 0), Some(0), "the add did not run");
    // The first deferred request is still known as running: its retry
    // waits for its answer instead of running a second time.
    let retry = run.request(7, OP_LATER, 0, 1);
    assert!(matches!(retry.reply, HandlerReply::Delegated));
}

#[test]
fn a_node_that_remembers_nothing_still_gives_the_answers_an_object_brought() {
    let mut run = Run::new(128);
    assert_eq!(run.value(7, OP_ADD, 5, 41), Some(5));
    let bytes = run.state.encode();
    // The object moves to a node with `router.request_keys_max = 0`.
    let mut moved = Run {
        state: kind(0).decode(key(), Some(&bytes)).expect("decodes"),
        next_seq: 50,
    };
    assert_eq!(
        moved.value(7, OP_ADD, 5, 41),
        Some(5),
        "the retry ran again"
    );
    assert_eq!(moved.value(7, OP_GET, 0, 0), Some(5));
    // New keyed requests are not remembered there, and change no state
    // for a memory they are not in.
    let fresh = moved.request(7, OP_GET, 0, 42);
    assert!(!fresh.mutated);
}

/// Keyed requests of `players` players, `per_player` each, adding 1.
fn keyed_adds(run: &mut Run, players: u64, per_player: u64) {
    for key in 1..=per_player {
        for player in 1..=players {
            run.value(player, OP_ADD, 1, key);
        }
    }
}

#[test]
fn what_an_object_remembers_never_makes_its_state_too_large_to_save() {
    // 40 players x 128 answers of 8 bytes is some 150 KB of memory: with
    // the bound at 4 KiB, a state that kept them all could never be saved
    // (the store refuses it), and every change acknowledged since would
    // live only in this node's memory.
    const STATE_MAX: usize = 4096;
    let mut run = Run::bounded(STATE_MAX);
    keyed_adds(&mut run, 40, 128);
    let saved = run.state.encode();
    assert!(saved.len() <= STATE_MAX, "{} bytes", saved.len());
    // The newest answers are the ones kept, through a save and a move.
    let mut moved = Run {
        state: bounded(128, STATE_MAX).decode(key(), Some(&saved)).unwrap(),
        next_seq: 1_000_000,
    };
    let total = 40 * 128;
    assert_eq!(moved.value(40, OP_ADD, 1, 128), Some(total), "the newest");
    assert_eq!(moved.value(1, OP_ADD, 1, 128), Some(total - 39));
    assert_eq!(
        moved.value(1, OP_ADD, 1, 1),
        Some(total + 1),
        "the oldest was forgotten: runs again"
    );
    assert!(moved.state.encode().len() <= STATE_MAX);
}

#[test]
fn the_memory_in_the_core_is_bounded_by_the_state_bound_too() {
    // Forgetting at the bound, oldest first, whoever asked.
    const STATE_MAX: usize = 2048;
    let mut run = Run::bounded(STATE_MAX);
    keyed_adds(&mut run, 3, 100);
    // Each answer is 30 bytes (key, seq, code, length, 8 of body): at
    // most some 68 fit, the last asked.
    assert_eq!(run.value(3, OP_ADD, 1, 100), Some(300), "the newest");
    assert_eq!(run.value(1, OP_ADD, 1, 80), Some(238), "recent enough");
    assert_eq!(
        run.value(2, OP_ADD, 1, 1),
        Some(301),
        "forgotten: runs again"
    );
    // And what is in memory is what a save writes (nothing cut there).
    let saved = run.state.encode();
    let moved = bounded(128, STATE_MAX).decode(key(), Some(&saved)).unwrap();
    assert_eq!(moved.encode(), saved);
}

#[test]
fn an_object_that_fills_the_bound_itself_saves_without_its_answers() {
    // An object of 8 bytes under a bound of 2 + 4 + 8 + 4 + 10: room for
    // the memory's heads, not for one answer.
    const STATE_MAX: usize = 28;
    let mut run = Run {
        state: kind(128).decode(key(), None).unwrap(),
        next_seq: 1,
    };
    assert_eq!(run.value(7, OP_ADD, 1, 5), Some(1));
    let tight = bounded(128, STATE_MAX)
        .decode(key(), Some(&run.state.encode()))
        .unwrap();
    // Saved as a state without memory: `u16 version | object`.
    let saved = tight.encode();
    assert_eq!(
        saved,
        [&1u16.to_le_bytes()[..], &1i64.to_le_bytes()].concat()
    );
    let mut moved = Run {
        state: kind(128).decode(key(), Some(&saved)).unwrap(),
        next_seq: 50,
    };
    assert_eq!(
        moved.value(7, OP_GET, 0, 0),
        Some(1),
        "the object's own state"
    );
    assert_eq!(
        moved.value(7, OP_ADD, 1, 5),
        Some(2),
        "its answer did not fit"
    );
}

#[test]
fn a_refusal_that_says_the_request_did_not_run_is_not_remembered() {
    let mut run = Run::new(128);
    // A session replaced by a newer login is answered UNAVAILABLE, say:
    // the client's retry of the key, from its new session, runs.
    assert_eq!(run.value(7, OP_UNAVAILABLE, 0, 5), None);
    assert_eq!(run.value(7, OP_ADD, 3, 5), Some(3));
    assert_eq!(run.value(7, OP_ADD, 3, 5), Some(3), "remembered now");
    // A refusal that is the request's last word is remembered.
    assert_eq!(run.value(7, 99, 0, 6), None, "BAD_REQUEST");
    assert_eq!(run.value(7, OP_ADD, 3, 6), None, "the same BAD_REQUEST");
    assert_eq!(run.value(7, OP_GET, 0, 0), Some(3));
}

#[test]
fn the_order_answers_were_remembered_in_survives_a_save() {
    // 66 answers of 30 bytes: just within the memory's 2042 bytes.
    const STATE_MAX: usize = 2048;
    let mut run = Run::bounded(STATE_MAX);
    for key in 1..=33 {
        run.value(2, OP_ADD, 1, key);
    }
    for key in 1..=33 {
        run.value(1, OP_ADD, 1, key);
    }
    let mut moved = Run {
        state: bounded(128, STATE_MAX)
            .decode(key(), Some(&run.state.encode()))
            .unwrap(),
        next_seq: 1_000,
    };
    // Two more answers push the oldest two out: player 2's first two,
    // though player 1's id comes first in the saved bytes.
    moved.value(3, OP_ADD, 1, 1);
    moved.value(3, OP_ADD, 1, 2);
    assert_eq!(moved.value(1, OP_ADD, 1, 1), Some(34), "remembered");
    assert_eq!(moved.value(2, OP_ADD, 1, 3), Some(3), "remembered");
    assert_eq!(
        moved.value(2, OP_ADD, 1, 1),
        Some(69),
        "the oldest: runs again"
    );
}
