//! A scripted type as the public object API sees it: [`ScriptedType`] is an
//! `ObjectType` whose shape comes from the script's declaration, and each
//! live object a [`Scripted`] holding its state as JSON between calls.
//!
//! Persisted state, inside the adapter's framing (state version 1 of the
//! object API): `u32 script version (LE) | JSON`, the JSON `null` for an
//! object whose `init` has not run yet.

use std::sync::Arc;
use std::time::Duration;

use super::call::{self, Before, Invocation};
use super::vm::StateMark;
use super::{Codec, Declaration, Library};
use crate::config::Persist;
use crate::object::{
    ClientRef, ClientRoute, Context, DecodeError, ErrorCode, Object, ObjectKey, ObjectType,
    OBJECT_TIMERS_MAX,
};

/// The bytes before the JSON in a persisted state (the script version).
pub(super) const STATE_HEADER_BYTES: usize = 4;

/// Sessions an object remembers for `ctx:push` to players other than the
/// caller: the latest of each player that sent it a request.
const SESSIONS_REMEMBERED_MAX: usize = 64;

/// One scripted type: its declaration at start (a reload keeps its shape).
pub(super) struct ScriptedType {
    library: Arc<Library>,
    declaration: Arc<Declaration>,
}

impl ScriptedType {
    pub fn new(library: Arc<Library>, declaration: Arc<Declaration>) -> ScriptedType {
        ScriptedType {
            library,
            declaration,
        }
    }
}

impl ObjectType for ScriptedType {
    type Object = Scripted;

    fn type_id(&self) -> u32 {
        self.declaration.type_id
    }

    fn name(&self) -> &'static str {
        self.declaration.name
    }

    fn routes(&self) -> Vec<ClientRoute> {
        let requests = self.declaration.routes.iter().map(|route| {
            let declared = ClientRoute::request(route.id, route.name, route.key);
            match route.codec {
                Codec::Json => declared.json_body(),
                Codec::Raw => declared,
            }
        });
        let pushes =
            (self.declaration.pushes.iter()).map(|push| ClientRoute::push(push.id, push.name));
        requests.chain(pushes).collect()
    }

    fn persist(&self) -> Persist {
        self.declaration.persist
    }

    fn auto_create(&self) -> bool {
        self.declaration.create_on_request
    }

    fn create(&self, _key: ObjectKey) -> Scripted {
        Scripted::new(self.library.clone(), self.declaration.type_id, 0, None)
    }

    fn decode(&self, _key: ObjectKey, version: u16, state: &[u8]) -> Result<Scripted, DecodeError> {
        if version != 1 {
            return Err(DecodeError);
        }
        let (script_version, json) = state
            .split_first_chunk::<STATE_HEADER_BYTES>()
            .ok_or(DecodeError)?;
        let parsed: serde_json::Value = serde_json::from_slice(json).map_err(|_| DecodeError)?;
        let json = (!parsed.is_null()).then(|| json.to_vec());
        let script_version = u32::from_le_bytes(*script_version);
        Ok(Scripted::new(
            self.library.clone(),
            self.declaration.type_id,
            script_version,
            json,
        ))
    }
}

/// One live scripted object.
pub(super) struct Scripted {
    library: Arc<Library>,
    type_id: u32,
    /// The version of the script that wrote `state`.
    version: u32,
    /// The state's JSON; `None` until `init` ran in a call that returned.
    state: Option<Vec<u8>>,
    /// Which state `state` is, for the VM that may hold its table.
    mark: StateMark,
    /// Sessions of players that sent requests to this activation.
    sessions: Vec<ClientRef>,
    /// Pending timers: `(tag, name)`.
    timers: Vec<(u64, String)>,
    next_timer: u64,
}

impl Scripted {
    fn new(library: Arc<Library>, type_id: u32, version: u32, state: Option<Vec<u8>>) -> Scripted {
        Scripted {
            library,
            type_id,
            version,
            state,
            mark: StateMark::new(),
            sessions: Vec::new(),
            timers: Vec::new(),
            next_timer: 1,
        }
    }

    fn remember(&mut self, client: ClientRef) {
        // A run of requests from one session finds it last already.
        if self.sessions.last() == Some(&client) {
            return;
        }
        self.sessions
            .retain(|known| known.player_id != client.player_id);
        if self.sessions.len() == SESSIONS_REMEMBERED_MAX {
            self.sessions.remove(0);
        }
        self.sessions.push(client);
    }

    fn run(&mut self, ctx: &mut Context<'_>, invocation: &Invocation<'_>) {
        let before = Before {
            type_id: self.type_id,
            object_id: ctx.key().object_id,
            version: self.version,
            state: self.state.as_deref(),
            mark: self.mark,
            player: ctx.player_id(),
        };
        let ran = self
            .library
            .with_vm(|vm| call::run(vm, &before, invocation))
            .unwrap_or_else(|reason| {
                // The core has no VM to run it in: the call did not run,
                // and a retry runs once the build succeeds (UNAVAILABLE is
                // not remembered as a keyed request's answer).
                Err(crate::object::Refusal::explained(
                    ErrorCode::Unavailable,
                    &reason,
                ))
            });
        let ran = ran.and_then(|ran| {
            let timers = self.timers.len() + ran.effects.timers.len();
            if timers > OBJECT_TIMERS_MAX as usize {
                let reason = format!("more than {OBJECT_TIMERS_MAX} timers would be pending");
                return Err(crate::object::Refusal::explained(
                    ErrorCode::Internal,
                    &reason,
                ));
            }
            Ok(ran)
        });
        let ran = match ran {
            Ok(ran) => ran,
            Err(refusal) => {
                if ctx.needs_answer() {
                    ctx.answer(Err(refusal));
                } else {
                    tracing::warn!(key = ?ctx.key(), ?refusal, "a script's message or timer failed");
                }
                return;
            }
        };
        self.version = ran.version;
        self.mark = self.mark.next();
        if let Some(state) = ran.changed {
            self.state = Some(state);
            ctx.mark_changed();
        }
        self.release(ctx, ran.effects);
        if ctx.needs_answer() {
            ctx.answer(Ok(ran.answer));
        }
    }
}

impl Scripted {
    /// What a call that returned asked for: pushes, one-way sends, timers.
    fn release(&mut self, ctx: &mut Context<'_>, effects: super::Effects) {
        for (player, route, body) in effects.pushes {
            let client = ctx
                .client()
                .filter(|client| client.player_id == player)
                .or_else(|| {
                    self.sessions
                        .iter()
                        .rev()
                        .find(|c| c.player_id == player)
                        .copied()
                });
            match client {
                Some(client) => ctx.push(client, route, body),
                None => {
                    tracing::debug!(player, route, "ctx:push to a player with no known session")
                }
            }
        }
        for ((type_id, id, op), body) in effects.sends {
            ctx.send(ObjectKey::new(type_id, 0, id), op, body);
        }
        for (ms, name) in effects.timers {
            let tag = self.next_timer;
            self.next_timer += 1;
            if ctx.set_timer(Duration::from_millis(ms), tag).is_ok() {
                self.timers.push((tag, name));
            }
        }
    }
}

impl Object for Scripted {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.version.to_le_bytes());
        match &self.state {
            Some(state) => out.extend_from_slice(state),
            None => out.extend_from_slice(b"null"),
        }
    }

    fn handle(&mut self, ctx: &mut Context<'_>) {
        if let Some(client) = ctx.client() {
            self.remember(client);
        }
        let invocation = Invocation::Request {
            op: ctx.op(),
            body: ctx.body(),
        };
        self.run(ctx, &invocation);
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, tag: u64) {
        let Some(at) = self.timers.iter().position(|(known, _)| *known == tag) else {
            return;
        };
        let (_, name) = self.timers.remove(at);
        self.run(ctx, &Invocation::Timer { name: &name });
    }

    /// The state as the script keeps it: its JSON, `null` before `init`
    /// ran (the admin endpoint's state viewer shows it as JSON).
    fn debug_view(&self) -> Option<String> {
        let json = self.state.as_deref().unwrap_or(b"null");
        Some(String::from_utf8_lossy(json).into_owned())
    }
}
