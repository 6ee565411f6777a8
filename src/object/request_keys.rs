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
//! Persisted state with remembered answers: `u16 (state version | 0x8000)`,
//! `u32 object_len`, the object's encoding, then the memory: `u32 players`,
//! and per player `u64 player_id`, `u16 answers`, and per answer (oldest
//! first) `u64 key`, `u16 code` (0: a RESPONSE), `u32 len`, the RESPONSE
//! body or the ERROR reason. Without: `u16 state version`, the object's
//! encoding.

use std::collections::{BTreeMap, VecDeque};

use crate::router::handler::HandlerReply;
use crate::router::types::{refusal_from_wire, refusal_wire};
use crate::router::{HandlerOutput, Outcome, Request, RequestId};

/// The flag on the state version that says remembered answers follow the
/// object's encoding. A type's own versions stay below it.
const WITH_MEMORY: u16 = 0x8000;

/// Keyed requests an object tracks as running (deferred) at most; past it
/// the oldest is forgotten (its retries then run again). A deferred answer
/// the object never gives would otherwise hold its entry forever.
const RUNNING_MAX: usize = 1024;

/// One object's memory of keyed answers, beside its state in the adapter's
/// live activation: nothing on the heap until the object's first keyed
/// request, and one branch on the path of a request without a key.
pub(crate) struct RequestKeys {
    memory: Option<Box<Memory>>,
    /// Answers remembered per player (0: none).
    max: usize,
}

impl RequestKeys {
    /// Remembering `max` answers per player, starting from a saved memory.
    pub(crate) fn new(max: usize, memory: Option<Memory>) -> RequestKeys {
        RequestKeys {
            memory: memory.map(Box::new),
            max,
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
        match request.client {
            Some(client) if request.keyed && request.needs_reply && self.max > 0 => {
                self.handle_keyed((client.player_id, request.request_key()), request, out, run)
            }
            _ => {
                run(out);
                if let Some(memory) = &mut self.memory {
                    memory.settle(out, self.max);
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
            // Answered when the first run's answer comes (`settle`).
            running.waiters.push(request.id);
            out.reply = HandlerReply::Delegated;
            return;
        }
        run(out);
        match &out.reply {
            HandlerReply::Answer(outcome) => {
                let outcome = outcome.clone();
                memory.remember(asked, outcome, self.max);
            }
            // Forwarded: another object answers it, so this one cannot
            // remember the answer (docs/protocol.md says so).
            HandlerReply::Delegated if out.sends.iter().any(|(_, r)| r.id == request.id) => {}
            HandlerReply::Delegated => {
                if memory.running.len() >= RUNNING_MAX {
                    memory.running.pop_front();
                }
                memory.running.push_back(Running {
                    asked,
                    id: request.id,
                    waiters: Vec::new(),
                });
            }
        }
        memory.settle(out, self.max);
    }

    /// The persisted state: `encode_object` writes the object's encoding
    /// after the version, and the remembered answers follow it when there
    /// are any (the layout at the top of this file).
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
        out.extend_from_slice(&[0; 4]);
        let object_start = out.len();
        encode_object(&mut out);
        let object_len = (out.len() - object_start) as u32;
        out[object_start - 4..object_start].copy_from_slice(&object_len.to_le_bytes());
        memory.encode(&mut out);
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
#[derive(Default)]
pub(crate) struct Memory {
    answers: BTreeMap<u64, VecDeque<(u64, Outcome)>>,
    running: VecDeque<Running>,
}

impl Memory {
    fn answer(&self, (player, key): (u64, u64)) -> Option<&Outcome> {
        let answers = self.answers.get(&player)?;
        answers.iter().find(|(k, _)| *k == key).map(|(_, o)| o)
    }

    fn remember(&mut self, (player, key): (u64, u64), outcome: Outcome, keys_max: usize) {
        let answers = self.answers.entry(player).or_default();
        while answers.len() >= keys_max {
            answers.pop_front();
        }
        answers.push_back((key, outcome));
    }

    /// Remembers the deferred answers among `out.late_answers` of running
    /// keyed requests, and answers their waiting duplicates the same.
    fn settle(&mut self, out: &mut HandlerOutput, keys_max: usize) {
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
            self.remember(running.asked, outcome, keys_max);
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.answers.len() as u32).to_le_bytes());
        for (player, answers) in &self.answers {
            out.extend_from_slice(&player.to_le_bytes());
            out.extend_from_slice(&(answers.len() as u16).to_le_bytes());
            for (key, outcome) in answers {
                let (code, bytes) = match outcome {
                    Ok(body) => (0, body.clone()),
                    Err(refusal) => refusal_wire(refusal.clone()),
                };
                out.extend_from_slice(&key.to_le_bytes());
                out.extend_from_slice(&code.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
        }
    }

    fn decode(reader: &mut Reader<'_>) -> Option<Memory> {
        let mut memory = Memory::default();
        for _ in 0..reader.u32()? {
            let player = reader.u64()?;
            let count = reader.u16()?;
            let mut answers = VecDeque::with_capacity(usize::from(count));
            for _ in 0..count {
                let key = reader.u64()?;
                let code = reader.u16()?;
                let len = reader.u32()? as usize;
                let bytes = reader.take(len)?;
                let outcome = match code {
                    0 => Ok(bytes.to_vec()),
                    code => Err(refusal_from_wire(code, bytes)),
                };
                answers.push_back((key, outcome));
            }
            memory.answers.insert(player, answers);
        }
        Some(memory)
    }
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
