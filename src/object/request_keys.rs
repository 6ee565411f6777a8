//! Request keys (docs/protocol.md, section 12): an object answers a keyed
//! request of one player once, and gives a retry with the same key the
//! answer the first run gave, instead of running it again.
//!
//! Every live object of a type a node registers (the adapter's `Live`)
//! holds its [`RequestKeys`]: a [`Memory`] of, per requesting player, the
//! answers of the last `router.request_keys_max` keyed requests, and the
//! keyed requests still running (deferred by the object), with the
//! duplicates waiting for their answer. The memory is part of the state
//! the router persists and ships: with `on_write`, an answer leaves only
//! after the save that holds it (and the state it followed) committed, in
//! one compare-and-set write; with `interval` it is as durable as the
//! state. A request without a key takes the object's path untouched, and an
//! object that never saw a keyed request keeps no memory and persists
//! exactly the bytes it did before keys existed.
//!
//! The memory is bounded in bytes by the bound on a saved state
//! (`store.state_max_bytes`), oldest answer first, whichever player asked,
//! and a save writes only the newest answers that fit beside the object:
//! what an object remembers never makes its state too large to save (a
//! state the store refuses leaves every change since the last save in this
//! node's memory alone). An object whose own bytes leave no room for an
//! answer saves without it, and a retry of it after a crash runs again.
//!
//! Persisted state with remembered answers: `u16 (state version | 0x8000)`,
//! `u32 object_len`, the object's encoding, then the memory: `u32 (players
//! | 0x8000_0000)`, and per player `u64 player_id`, `u16 answers`, and per
//! answer (oldest first) `u64 key`, `u64 seq` (its place in the order the
//! object's answers were remembered, whoever asked), `u16 code` (0: a
//! RESPONSE), `u32 len`, the RESPONSE body or the ERROR reason. Without:
//! `u16 state version`, the object's encoding. A memory saved without the
//! `0x8000_0000` flag (by an earlier build) has no `seq`: its answers are
//! taken as remembered in the order they are read.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::router::handler::HandlerReply;
use crate::router::types::{refusal_from_wire, refusal_wire, ErrorCode, Refusal};
use crate::router::{HandlerOutput, Outcome, Request, RequestId};

/// The flag on the state version that says remembered answers follow the
/// object's encoding. A type's own versions stay below it.
const WITH_MEMORY: u16 = 0x8000;

/// Keyed requests an object tracks as running (deferred) at most; past it
/// a new keyed request is refused OVERLOADED before it runs. A deferred
/// answer the object never gives holds its entry until the object is
/// dropped from memory.
const RUNNING_MAX: usize = 1024;

/// Duplicates that wait for one running keyed request at most; past it a
/// duplicate is refused OVERLOADED (it did not run, so a later retry may
/// still get the answer). A client that retries a deferred request at each
/// timeout would otherwise grow the list until the object answers.
const WAITERS_MAX: usize = 64;

/// One object's memory of keyed answers, beside its state in the adapter's
/// live activation: nothing on the heap until the object's first keyed
/// request, and one branch on the path of a request without a key.
pub(crate) struct RequestKeys {
    memory: Option<Box<Memory>>,
    bounds: Bounds,
}

/// What an object's memory of answers may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Answers remembered per player (0: none).
    pub keys_max: usize,
    /// Bytes of the whole persisted state (`store.state_max_bytes`): the
    /// memory never holds more, and a save writes only the newest answers
    /// that fit beside the object's own bytes.
    pub state_max: usize,
}

impl RequestKeys {
    /// Remembering answers within `bounds`, starting from a saved memory.
    pub(crate) fn new(bounds: Bounds, memory: Option<Memory>) -> RequestKeys {
        RequestKeys {
            memory: memory.map(Box::new),
            bounds,
        }
    }

    /// Runs `request` through the object's handler `run`, unless it is a
    /// keyed retry: a remembered answer is given again, and a duplicate of
    /// a keyed request still running waits for that request's answer.
    #[inline]
    pub(crate) fn handle(
        &mut self,
        request: &Request,
        out: &mut HandlerOutput,
        run: impl FnOnce(&mut HandlerOutput),
    ) {
        // A node that remembers no answers (`keys_max` 0) still gives the
        // ones an object brought from its last owner: a retry must not run
        // again because it reached a node configured otherwise.
        let remembers = self.bounds.keys_max > 0 || self.memory.is_some();
        match request.client {
            Some(client) if request.keyed && request.needs_reply && remembers => {
                self.handle_keyed((client.player_id, request.request_key()), request, out, run)
            }
            _ => {
                run(out);
                if let Some(memory) = &mut self.memory {
                    memory.settle(out, self.bounds);
                }
            }
        }
    }

    fn handle_keyed(
        &mut self,
        asked: (u64, u64),
        request: &Request,
        out: &mut HandlerOutput,
        run: impl FnOnce(&mut HandlerOutput),
    ) {
        let memory = self.memory.get_or_insert_with(Box::default);
        if let Some(answer) = memory.answer(asked) {
            out.answer(answer.clone());
            return;
        }
        if let Some(running) = memory.running.iter_mut().find(|r| r.asked == asked) {
            if running.waiters.len() >= WAITERS_MAX {
                out.answer(Err(ErrorCode::Overloaded.into()));
                return;
            }
            // Answered when the first run's answer comes (`settle`).
            running.waiters.push(request.id);
            out.reply = HandlerReply::Delegated;
            return;
        }
        if memory.running.len() >= RUNNING_MAX {
            // Refused before it runs: forgetting a running request instead
            // would let its retry run a second time.
            out.answer(Err(ErrorCode::Overloaded.into()));
            return;
        }
        run(out);
        match &out.reply {
            HandlerReply::Answer(outcome) => {
                let outcome = outcome.clone();
                if memory.remember(asked, outcome, self.bounds) {
                    out.mutated = true;
                }
            }
            // Forwarded: another object answers it, so this one cannot
            // remember the answer (docs/protocol.md says so).
            HandlerReply::Delegated if out.sends.iter().any(|(_, r)| r.id == request.id) => {}
            HandlerReply::Delegated => {
                memory.running.push_back(Running {
                    asked,
                    id: request.id,
                    waiters: Vec::new(),
                });
            }
        }
        memory.settle(out, self.bounds);
    }

    /// The persisted state: `encode_object` writes the object's encoding
    /// after the version, and the remembered answers follow it when there
    /// are any (the layout at the top of this file), as many of the newest
    /// as fit in `store.state_max_bytes` beside the object: an object
    /// whose own bytes fit is never refused a save for what it remembers.
    pub(crate) fn encode_state(
        &self,
        state_version: u16,
        encode_object: impl FnOnce(&mut Vec<u8>),
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        let Some(memory) = self.memory.as_ref().filter(|m| !m.answers.is_empty()) else {
            out.extend_from_slice(&state_version.to_le_bytes());
            encode_object(&mut out);
            return out;
        };
        out.extend_from_slice(&(state_version | WITH_MEMORY).to_le_bytes());
        out.extend_from_slice(&[0; STATE_HEAD_BYTES - STATE_VERSION_BYTES]);
        let object_start = out.len();
        encode_object(&mut out);
        let object_len = (out.len() - object_start) as u32;
        out[object_start - 4..object_start].copy_from_slice(&object_len.to_le_bytes());
        let room = self.bounds.state_max.saturating_sub(out.len());
        match memory.oldest_fitting(room) {
            Some(oldest_kept) => memory.encode(&mut out, oldest_kept),
            None => {
                // Not one answer fits: the state without memory.
                out.drain(STATE_VERSION_BYTES..STATE_HEAD_BYTES);
                out[..STATE_VERSION_BYTES].copy_from_slice(&state_version.to_le_bytes());
            }
        }
        out
    }
}

/// A persisted state taken apart: the type's state version, the object's
/// own bytes, and the remembered answers saved with it, if any.
pub(crate) struct SavedState<'a> {
    pub version: u16,
    pub object: &'a [u8],
    pub memory: Option<Memory>,
}

impl<'a> SavedState<'a> {
    /// `None` when the bytes are cut short or run past their lengths.
    pub(crate) fn split(bytes: &'a [u8]) -> Option<SavedState<'a>> {
        let mut reader = Reader(bytes);
        let version = reader.u16()?;
        if version & WITH_MEMORY == 0 {
            return Some(SavedState {
                version,
                object: reader.0,
                memory: None,
            });
        }
        let object_len = reader.u32()? as usize;
        let object = reader.take(object_len)?;
        let memory = Memory::decode(&mut reader)?;
        reader.0.is_empty().then_some(SavedState {
            version: version & !WITH_MEMORY,
            object,
            memory: Some(memory),
        })
    }
}

/// A keyed request the object deferred, and the duplicates waiting for it.
struct Running {
    asked: (u64, u64),
    id: RequestId,
    waiters: Vec<RequestId>,
}

/// Remembered answers per player, oldest first, and the running requests.
///
/// Every answer carries its place in the order answers were remembered
/// (`seq`; a decoded memory numbers them as it reads them), so that when
/// the memory outgrows its bound in bytes the oldest answer of any player
/// goes first. `fronts` holds each player's oldest answer by that order,
/// so finding the oldest costs a lookup, not a walk of every player.
#[derive(Default)]
pub(crate) struct Memory {
    answers: BTreeMap<u64, VecDeque<Remembered>>,
    fronts: BTreeSet<(u64, u64)>,
    next_seq: u64,
    /// What `encode` would write but its count of players: kept as
    /// answers come and go.
    bytes: usize,
    running: VecDeque<Running>,
}

/// One remembered answer.
struct Remembered {
    seq: u64,
    key: u64,
    outcome: Outcome,
}

/// Every saved state starts with its `u16` version.
pub(crate) const STATE_VERSION_BYTES: usize = 2;
/// A state with memory starts with its version and the object's length.
const STATE_HEAD_BYTES: usize = STATE_VERSION_BYTES + 4;
/// The encoded memory's own count of players.
const MEMORY_HEAD_BYTES: usize = 4;
/// The flag on the count of players that says each answer carries its
/// `seq`.
const ORDERED: u32 = 0x8000_0000;
/// A player's id and count of answers.
const PLAYER_HEAD_BYTES: usize = 8 + 2;

impl Remembered {
    /// Its encoding's length: key, seq, code, length, then the body or
    /// reason.
    fn bytes(&self) -> usize {
        let carried = match &self.outcome {
            Ok(body) => body.len(),
            Err(Refusal::Code(_)) => 0,
            Err(Refusal::Explained { reason, .. } | Refusal::App { reason, .. }) => reason.len(),
        };
        8 + 8 + 2 + 4 + carried
    }
}

impl Memory {
    fn answer(&self, (player, key): (u64, u64)) -> Option<&Outcome> {
        let answers = self.answers.get(&player)?;
        answers.iter().find(|r| r.key == key).map(|r| &r.outcome)
    }

    /// Remembers `outcome`, then forgets the player's oldest past
    /// `keys_max`, and the oldest of any player while the memory is over
    /// the state bound, less the state's head (more could never be saved,
    /// and would only hold the core's memory). Whether it remembered: an
    /// answer that says the request did not run is not, nor one the bounds
    /// leave no room for. One remembered
    /// changes the state the object saves, so the caller marks its output
    /// mutated: with `on_write` the answer then leaves only once the save
    /// that holds it committed, so a retry after a crash of the owner gets
    /// it even when the request changed nothing else (a `room.say`, whose
    /// effect is its pushes).
    fn remember(&mut self, (player, key): (u64, u64), outcome: Outcome, bounds: Bounds) -> bool {
        if !is_final(&outcome) {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let remembered = Remembered { seq, key, outcome };
        self.bytes += remembered.bytes();
        let answers = self.answers.entry(player).or_default();
        if answers.is_empty() {
            self.bytes += PLAYER_HEAD_BYTES;
            self.fronts.insert((seq, player));
        }
        answers.push_back(remembered);
        while self.answers.get(&player).map_or(0, VecDeque::len) > bounds.keys_max {
            self.forget_oldest_of(player);
        }
        while self.encoded_len() > bounds.state_max.saturating_sub(STATE_HEAD_BYTES) {
            let Some(&(_, oldest)) = self.fronts.first() else {
                break;
            };
            self.forget_oldest_of(oldest);
        }
        // Still there unless the bounds left no room for it.
        self.answers
            .get(&player)
            .and_then(VecDeque::back)
            .is_some_and(|newest| newest.seq == seq)
    }

    fn forget_oldest_of(&mut self, player: u64) {
        let Some(answers) = self.answers.get_mut(&player) else {
            return;
        };
        let Some(forgotten) = answers.pop_front() else {
            return;
        };
        self.bytes -= forgotten.bytes();
        self.fronts.remove(&(forgotten.seq, player));
        match answers.front() {
            Some(next) => {
                self.fronts.insert((next.seq, player));
            }
            None => {
                self.answers.remove(&player);
                self.bytes -= PLAYER_HEAD_BYTES;
            }
        }
    }

    fn encoded_len(&self) -> usize {
        MEMORY_HEAD_BYTES + self.bytes
    }

    /// Remembers the deferred answers among `out.late_answers` of running
    /// keyed requests, and answers their waiting duplicates the same.
    fn settle(&mut self, out: &mut HandlerOutput, bounds: Bounds) {
        if self.running.is_empty() {
            return;
        }
        for index in 0..out.late_answers.len() {
            let id = out.late_answers[index].0;
            let Some(position) = self.running.iter().position(|r| r.id == id) else {
                continue;
            };
            let Some(running) = self.running.remove(position) else {
                continue;
            };
            let outcome = out.late_answers[index].1.clone();
            for waiter in running.waiters {
                out.late_answers.push((waiter, outcome.clone()));
            }
            if self.remember(running.asked, outcome, bounds) {
                out.mutated = true;
            }
        }
    }

    /// Writes the answers from `oldest_kept` on (by `seq`).
    fn encode(&self, out: &mut Vec<u8>, oldest_kept: u64) {
        let kept = |answers: &VecDeque<Remembered>| {
            answers.iter().filter(|r| r.seq >= oldest_kept).count()
        };
        let players = self.answers.values().filter(|a| kept(a) > 0).count();
        out.extend_from_slice(&(players as u32 | ORDERED).to_le_bytes());
        for (player, answers) in &self.answers {
            let count = kept(answers);
            if count == 0 {
                continue;
            }
            out.extend_from_slice(&player.to_le_bytes());
            out.extend_from_slice(&(count as u16).to_le_bytes());
            for remembered in answers.iter().filter(|r| r.seq >= oldest_kept) {
                let (code, bytes) = match &remembered.outcome {
                    Ok(body) => (0, body.clone()),
                    Err(refusal) => refusal_wire(refusal.clone()),
                };
                out.extend_from_slice(&remembered.key.to_le_bytes());
                out.extend_from_slice(&remembered.seq.to_le_bytes());
                out.extend_from_slice(&code.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
        }
    }

    /// The `seq` from which on the newest answers fit in `room` bytes (0
    /// when all do), so that a save leaves out the oldest, as `remember`
    /// would forget them; `None` when not one does. Walks every answer
    /// only for a state the bound cuts.
    fn oldest_fitting(&self, room: usize) -> Option<u64> {
        if self.encoded_len() <= room {
            return Some(0);
        }
        let mut newest_first: Vec<(u64, u64, usize)> = self
            .answers
            .iter()
            .flat_map(|(player, answers)| answers.iter().map(|r| (r.seq, *player, r.bytes())))
            .collect();
        newest_first.sort_unstable_by_key(|answer| std::cmp::Reverse(answer.0));
        let mut players = BTreeSet::new();
        let mut used = MEMORY_HEAD_BYTES;
        let mut oldest_kept = None;
        for (seq, player, bytes) in newest_first {
            let head = if players.contains(&player) {
                0
            } else {
                PLAYER_HEAD_BYTES
            };
            if used + head + bytes > room {
                break;
            }
            used += head + bytes;
            players.insert(player);
            oldest_kept = Some(seq);
        }
        oldest_kept
    }

    fn decode(reader: &mut Reader<'_>) -> Option<Memory> {
        let mut memory = Memory::default();
        let head = reader.u32()?;
        let ordered = head & ORDERED != 0;
        for _ in 0..head & !ORDERED {
            let player = reader.u64()?;
            if memory.answers.contains_key(&player) {
                // Each player once: `encode` wrote no other.
                return None;
            }
            let count = reader.u16()?;
            let mut answers: VecDeque<Remembered> = VecDeque::with_capacity(usize::from(count));
            for _ in 0..count {
                let key = reader.u64()?;
                let seq = if ordered {
                    reader.u64()?
                } else {
                    memory.next_seq
                };
                let code = reader.u16()?;
                let len = reader.u32()? as usize;
                let bytes = reader.take(len)?;
                let outcome = match code {
                    0 => Ok(bytes.to_vec()),
                    code => Err(refusal_from_wire(code, bytes)),
                };
                // A player's answers are oldest first, and no two answers
                // share a place: anything else was not written by `encode`.
                if answers.back().is_some_and(|last| last.seq >= seq) {
                    return None;
                }
                memory.next_seq = memory.next_seq.max(seq.checked_add(1)?);
                let remembered = Remembered { seq, key, outcome };
                memory.bytes += remembered.bytes();
                answers.push_back(remembered);
            }
            if let Some(front) = answers.front() {
                if !memory.fronts.insert((front.seq, player)) {
                    return None;
                }
                memory.bytes += PLAYER_HEAD_BYTES;
                memory.answers.insert(player, answers);
            }
        }
        Some(memory)
    }
}

/// Whether an object's answer is the request's last word, to give every
/// retry of its key. UNAVAILABLE, OVERLOADED and TIMEOUT say it did not
/// run (a session replaced by a newer login, say): remembered, the
/// client's retries, which the protocol tells it to send, would get the
/// same refusal until the key was forgotten, and never run.
fn is_final(outcome: &Outcome) -> bool {
    !matches!(
        outcome.as_ref().err().and_then(Refusal::code),
        Some(ErrorCode::Unavailable | ErrorCode::Overloaded | ErrorCode::Timeout)
    )
}

/// Little-endian fields off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(head)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
#[path = "request_keys_tests.rs"]
mod tests;
