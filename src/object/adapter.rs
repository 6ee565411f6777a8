//! How the router sees a type written with the public API: a blanket
//! `router::ObjectType` for every [`ObjectType`], whose live states wrap
//! the user's [`Object`] with the state version, the activation's timers,
//! and the translation of the router's events (call answers, timers) into
//! `on_answer` / `on_timer`. Services get the same for `ServiceHandler`.
//!
//! Persisted state is `u16 version (LE) | the object's encoding`: the
//! version is written here and handed to `ObjectType::decode`, so a type
//! can change its encoding and still read what older builds wrote. An
//! object that remembers answers of keyed requests persists them after
//! its encoding, flagged in the version's top bit (`request_keys`), so a
//! type's own versions stay below `0x8000`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wire::ObjectKey;

use super::context::{Context, ServiceContext, Timers};
use super::{Object, ObjectType, Service};
use crate::config::Persist;
use crate::router::handler::{
    decode_answer_event, decode_timer_event, ObjectState, ServiceHandler, OP_ANSWER, OP_TIMER,
};
use crate::router::{DecodeError, HandlerOutput, Request};

/// Bytes of the state version in front of every persisted state.
pub(crate) const STATE_VERSION_LEN: usize = 2;

/// Activation numbers: unique in this process, so a timer armed by an
/// earlier activation of a key never reaches a later one.
static NEXT_ACTIVATION: AtomicU64 = AtomicU64::new(1);

impl<T: ObjectType> crate::router::ObjectType for T {
    fn type_id(&self) -> u32 {
        ObjectType::type_id(self)
    }

    fn auto_create(&self) -> bool {
        ObjectType::auto_create(self)
    }

    fn may_create(&self, op: u32) -> Result<(), crate::router::Outcome> {
        ObjectType::may_create(self, op)
    }

    fn persist(&self) -> Persist {
        ObjectType::persist(self)
    }

    fn decode(
        &self,
        key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError> {
        let current = self.state_version();
        let object = match state {
            None => self.create(key),
            Some(bytes) => {
                let (version, state) = split_version(bytes).ok_or(DecodeError)?;
                if version == 0 || version > current {
                    tracing::warn!(
                        type_name = self.name(),
                        ?key,
                        version,
                        current,
                        "a state of a version this build does not know"
                    );
                    return Err(DecodeError);
                }
                ObjectType::decode(self, key, version, state)?
            }
        };
        Ok(Box::new(Live {
            object,
            type_name: self.name(),
            state_version: current,
            activation: NEXT_ACTIVATION.fetch_add(1, Ordering::Relaxed),
            timers_pending: 0,
        }))
    }
}

/// The version and the object's own bytes of a persisted state.
fn split_version(bytes: &[u8]) -> Option<(u16, &[u8])> {
    let (version, state) = bytes.split_first_chunk::<STATE_VERSION_LEN>()?;
    Some((u16::from_le_bytes(*version), state))
}

/// One activation of a user object, as the router holds it.
struct Live<O> {
    object: O,
    type_name: &'static str,
    state_version: u16,
    activation: u64,
    /// Timers this activation set that have not fired yet.
    timers_pending: u32,
}

impl<O: Object> ObjectState for Live<O> {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&self.state_version.to_le_bytes());
        self.object.encode(&mut out);
        out
    }

    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        let event = matches!(request.op, OP_ANSWER | OP_TIMER);
        let mut ctx = Context::new(
            key,
            (!event).then_some(request),
            out,
            Some(Timers {
                activation: self.activation,
                pending: &mut self.timers_pending,
            }),
        );
        match request.op {
            OP_ANSWER => match decode_answer_event(&request.body) {
                Some((tag, outcome)) => self.object.on_answer(&mut ctx, tag, outcome),
                None => tracing::warn!(type_name = self.type_name, "malformed answer event"),
            },
            OP_TIMER => match decode_timer_event(&request.body) {
                Some((activation, tag)) if activation == self.activation => {
                    // `ctx` holds the count; the handler may set another.
                    if let Some(timers) = ctx_timers(&mut ctx) {
                        *timers = timers.saturating_sub(1);
                    }
                    self.object.on_timer(&mut ctx, tag)
                }
                // Armed by an earlier activation of this key: not ours.
                Some(_) => {}
                None => tracing::warn!(type_name = self.type_name, "malformed timer event"),
            },
            _ => self.object.handle(&mut ctx),
        }
        ctx.finish(self.type_name);
    }
}

fn ctx_timers<'c>(ctx: &'c mut Context<'_>) -> Option<&'c mut u32> {
    ctx.timers_pending()
}

/// A service written with the public API, as the router runs it.
pub(crate) struct ServiceAdapter<S>(pub Arc<S>);

impl<S: Service> ServiceHandler for ServiceAdapter<S> {
    fn type_id(&self) -> u32 {
        self.0.type_id()
    }

    fn handle(&self, key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        let mut ctx = ServiceContext(Context::new(key, Some(request), out, None));
        self.0.handle(&mut ctx);
        ctx.0.finish(self.0.name());
    }
}
