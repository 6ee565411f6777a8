//! Request keys (docs/protocol.md, section 12): an object answers a keyed
//! request of one player once, and gives a retry with the same key the
//! answer the first run gave, instead of running it again.
//!
//! [`Keyed`] wraps every object type a node registers. Its live state holds
//! the object's and a [`Memory`]: per requesting player, the answers of the
//! last `router.request_keys_max` keyed requests, and the keyed requests
//! still running (deferred by the object), with the duplicates waiting for
//! their answer. The memory is part of the state the router persists and
//! ships: with `on_write`, an answer leaves only after the save that holds
//! it (and the state it followed) committed, in one compare-and-set write;
//! with `interval` it is as durable as the state. A request without a key
//! takes the inner object's path untouched, and an object that never saw a
//! keyed request persists exactly the bytes it did before keys existed.
//!
//! Persisted state with remembered answers: `u16 (state version | 0x8000)`,
//! `u32 object_len`, the object's encoding, then the memory: `u32 players`,
//! and per player `u64 player_id`, `u16 answers`, and per answer (oldest
//! first) `u64 key`, `u16 code` (0: a RESPONSE), `u32 len`, the RESPONSE
//! body or the ERROR reason. Without: `u16 state version`, the object's
//! encoding, as the adapter writes it.

use std::collections::{BTreeMap, VecDeque};

use wire::ObjectKey;

use crate::config::Persist;
use crate::router::handler::{HandlerReply, ObjectState};
use crate::router::types::{refusal_from_wire, refusal_wire};
use crate::router::{DecodeError, HandlerOutput, Outcome, Request, RequestId};

/// The flag on the state version that says remembered answers follow the
/// object's encoding. A type's own versions stay below it.
pub(crate) const WITH_MEMORY: u16 = 0x8000;

/// Keyed requests an object tracks as running (deferred) at most; past it
/// the oldest is forgotten (its retries then run again). A deferred answer
/// the object never gives would otherwise hold its entry forever.
const RUNNING_MAX: usize = 1024;

/// An object type whose objects remember keyed answers.
pub(crate) struct Keyed<T> {
    inner: T,
    keys_max: usize,
}

impl<T: crate::router::ObjectType> Keyed<T> {
    /// `inner`, remembering `keys_max` answers per player (0: none).
    pub(crate) fn new(inner: T, keys_max: usize) -> Keyed<T> {
        Keyed { inner, keys_max }
    }
}

impl<T: crate::router::ObjectType> crate::router::ObjectType for Keyed<T> {
    fn type_id(&self) -> u32 {
        self.inner.type_id()
    }

    fn auto_create(&self) -> bool {
        self.inner.auto_create()
    }

    fn may_create(&self, op: u32) -> Result<(), Outcome> {
        self.inner.may_create(op)
    }

    fn persist(&self) -> Persist {
        self.inner.persist()
    }

    fn decode(
        &self,
        key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError> {
        let (inner, memory) = match state {
            Some(bytes) if has_memory(bytes) => {
                let (object, memory) = split_memory(bytes).ok_or(DecodeError)?;
                (self.inner.decode(key, Some(&object))?, memory)
            }
            _ => (self.inner.decode(key, state)?, Memory::default()),
        };
        Ok(Box::new(KeyedState {
            inner,
            memory,
            keys_max: self.keys_max,
        }))
    }
}

fn has_memory(bytes: &[u8]) -> bool {
    bytes
        .first_chunk::<2>()
        .is_some_and(|version| u16::from_le_bytes(*version) & WITH_MEMORY != 0)
}

/// The adapter's `u16 version | object` and the memory after it.
fn split_memory(bytes: &[u8]) -> Option<(Vec<u8>, Memory)> {
    let mut reader = Reader(bytes);
    let version = reader.u16()? & !WITH_MEMORY;
    let object_len = reader.u32()? as usize;
    let object = reader.take(object_len)?;
    let mut plain = Vec::with_capacity(2 + object_len);
    plain.extend_from_slice(&version.to_le_bytes());
    plain.extend_from_slice(object);
    let memory = Memory::decode(&mut reader)?;
    reader.0.is_empty().then_some((plain, memory))
}

/// One object's live state with its memory of keyed answers.
struct KeyedState {
    inner: Box<dyn ObjectState>,
    memory: Memory,
    keys_max: usize,
}

impl ObjectState for KeyedState {
    fn encode(&self) -> Vec<u8> {
        let plain = self.inner.encode();
        if self.memory.answers.is_empty() {
            return plain;
        }
        let Some((version, object)) = plain.split_first_chunk::<2>() else {
            return plain;
        };
        let mut out = Vec::with_capacity(plain.len() + 64);
        out.extend_from_slice(&(u16::from_le_bytes(*version) | WITH_MEMORY).to_le_bytes());
        out.extend_from_slice(&(object.len() as u32).to_le_bytes());
        out.extend_from_slice(object);
        self.memory.encode(&mut out);
        out
    }

    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        let keyed = match request.client {
            Some(client) if request.keyed && request.needs_reply && self.keys_max > 0 => {
                Some((client.player_id, request.request_key()))
            }
            _ => None,
        };
        let Some(asked) = keyed else {
            self.inner.handle(key, request, out);
            self.memory.settle(out, self.keys_max);
            return;
        };
        if let Some(answer) = self.memory.answer(asked) {
            out.answer(answer.clone());
            return;
        }
        if let Some(running) = self.memory.running.iter_mut().find(|r| r.asked == asked) {
            // Answered when the first run's answer comes (`settle`).
            running.waiters.push(request.id);
            out.reply = HandlerReply::Delegated;
            return;
        }
        self.inner.handle(key, request, out);
        match &out.reply {
            HandlerReply::Answer(outcome) => {
                let outcome = outcome.clone();
                self.memory.remember(asked, outcome, self.keys_max);
            }
            // Forwarded: another object answers it, so this one cannot
            // remember the answer (docs/protocol.md says so).
            HandlerReply::Delegated if out.sends.iter().any(|(_, r)| r.id == request.id) => {}
            HandlerReply::Delegated => {
                if self.memory.running.len() >= RUNNING_MAX {
                    self.memory.running.pop_front();
                }
                self.memory.running.push_back(Running {
                    asked,
                    id: request.id,
                    waiters: Vec::new(),
                });
            }
        }
        self.memory.settle(out, self.keys_max);
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
struct Memory {
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
