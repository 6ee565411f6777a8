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
//!
//! A node registers its types as [`Keyed`], which gives each live object
//! the node's `router.request_keys_max`; the blanket implementation
//! remembers no new answers (it still reads and keeps saved ones).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use wire::ObjectKey;

use super::context::{Context, ServiceContext, Timers};
use super::request_keys::{Bounds, RequestKeys, SavedState};
use super::{Object, ObjectType, Service};
use crate::config::{Persist, PAYLOAD_MAX_BYTES};
use crate::router::handler::{
    decode_answer_event, decode_timer_event, ObjectState, ServiceHandler, OP_ANSWER, OP_TIMER,
};
use crate::router::{DecodeError, HandlerOutput, Outcome, Request};

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
        let bounds = Bounds {
            keys_max: 0,
            state_max: PAYLOAD_MAX_BYTES,
        };
        activate(self, key, state, bounds)
    }
}

/// An object type as a node registers it: its objects remember the answers
/// of the last `keys_max` keyed requests per player (0: none), within the
/// store's bound on a state.
pub(crate) struct Keyed<T> {
    kind: T,
    bounds: Bounds,
}

impl<T: ObjectType> Keyed<T> {
    pub(crate) fn new(kind: T, bounds: Bounds) -> Keyed<T> {
        Keyed { kind, bounds }
    }
}

impl<T: ObjectType> crate::router::ObjectType for Keyed<T> {
    fn type_id(&self) -> u32 {
        ObjectType::type_id(&self.kind)
    }

    fn auto_create(&self) -> bool {
        ObjectType::auto_create(&self.kind)
    }

    fn may_create(&self, op: u32) -> Result<(), Outcome> {
        ObjectType::may_create(&self.kind, op)
    }

    fn persist(&self) -> Persist {
        ObjectType::persist(&self.kind)
    }

    fn decode(
        &self,
        key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError> {
        activate(&self.kind, key, state, self.bounds)
    }
}

/// A live object of `kind` from its saved `state` (`None`: a new one).
fn activate<T: ObjectType>(
    kind: &T,
    key: ObjectKey,
    state: Option<&[u8]>,
    bounds: Bounds,
) -> Result<Box<dyn ObjectState>, DecodeError> {
    let current = kind.state_version();
    let (object, memory) = match state {
        None => (kind.create(key), None),
        Some(bytes) => {
            let saved = SavedState::split(bytes).ok_or(DecodeError)?;
            if saved.version == 0 || saved.version > current {
                tracing::warn!(
                    type_name = kind.name(),
                    ?key,
                    version = saved.version,
                    current,
                    "a state of a version this build does not know"
                );
                return Err(DecodeError);
            }
            let object = ObjectType::decode(kind, key, saved.version, saved.object)?;
            (object, saved.memory)
        }
    };
    Ok(Box::new(Live {
        activation: Activation {
            object,
            type_name: kind.name(),
            state_version: current,
            number: NEXT_ACTIVATION.fetch_add(1, Ordering::Relaxed),
            timers_pending: 0,
        },
        keys: RequestKeys::new(bounds, memory),
    }))
}

/// One activation of a user object, as the router holds it, with its
/// memory of keyed answers.
struct Live<O> {
    activation: Activation<O>,
    keys: RequestKeys,
}

impl<O: Object> ObjectState for Live<O> {
    fn encode(&self) -> Vec<u8> {
        let activation = &self.activation;
        self.keys.encode_state(activation.state_version, |out| {
            activation.object.encode(out)
        })
    }

    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        let activation = &mut self.activation;
        self.keys
            .handle(request, out, |out| activation.handle(key, request, out));
    }
}

/// The user's object, the state version it is saved under, and the timers
/// of this activation.
struct Activation<O> {
    object: O,
    type_name: &'static str,
    state_version: u16,
    number: u64,
    /// Timers this activation set that have not fired yet.
    timers_pending: u32,
}

impl<O: Object> Activation<O> {
    /// A request, or the router's answer and timer events, as the user's
    /// `handle`, `on_answer` and `on_timer`.
    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput) {
        let event = matches!(request.op, OP_ANSWER | OP_TIMER);
        let mut ctx = Context::new(
            key,
            (!event).then_some(request),
            out,
            Some(Timers {
                activation: self.number,
                pending: &mut self.timers_pending,
            }),
        );
        match request.op {
            OP_ANSWER => match decode_answer_event(&request.body) {
                Some((tag, outcome)) => self.object.on_answer(&mut ctx, tag, outcome),
                None => tracing::warn!(type_name = self.type_name, "malformed answer event"),
            },
            OP_TIMER => match decode_timer_event(&request.body) {
                Some((activation, tag)) if activation == self.number => {
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
