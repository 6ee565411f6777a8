//! Writing your own object types and services: routerd's public object
//! API. The built-in player and room are written with exactly this API and
//! nothing else (`tests/builtins_public_api.rs` holds them to it).
//!
//! An **object type** ([`ObjectType`]) is a kind of stateful object with
//! one owner in the cluster: a guild, a match, an inventory. Each object
//! has a key ([`ObjectKey`]: the type's id, a zone, a `u64` id), lives on
//! one core of one node at a time, runs its requests one after the other,
//! and is persisted with a versioned state encoding. An object type says:
//!
//! - its `type_id` and `name`, and the client routes it serves
//!   ([`ClientRoute`]: route id, name, direction, auth, and how the key
//!   comes out of the session or the body);
//! - its persistence policy ([`Persist`]: `interval` or `on_write`) and
//!   whether a request for an object nobody owns creates it;
//! - how its state is created ([`ObjectType::create`]) and decoded
//!   ([`ObjectType::decode`], given the state version that wrote it).
//!
//! An [`Object`] handles requests through a [`Context`]: it answers,
//! pushes to sessions, sends one-way messages to other objects, forwards
//! the request to another object (which answers it), calls other objects
//! (their answers come back as [`Object::on_answer`] events, never a
//! blocking wait), defers an answer until such an event, and sets timers
//! ([`Object::on_timer`]). The router keeps the built-in guarantees for
//! all of it: one object's requests and events run in order, one at a time;
//! every request is answered exactly once (a handler that returns without
//! answering, forwarding or deferring answers INTERNAL, and says so in the
//! log); an `on_write` object's answers, pushes, messages, calls and timers
//! leave only once the state they followed is durable.
//!
//! **Refusing a request.** Every refusal says why, in words the client
//! prints: [`Context::bad_request_because`] (`body must be 8 bytes, got
//! 1`, `not a member of room 7`) or [`Context::fail_because`] with another
//! of the protocol's codes, when the code clients already branch on fits;
//! [`Context::refuse`] with the type's own [`AppCode`] when a client must
//! tell this refusal from others by its code (docs/protocol.md, section 4).
//! The reason is cut to 512 bytes. [`Context::bad_request`] and
//! [`Context::fail`] answer with the router's generic words and are best
//! left to refusals that need no explanation.
//!
//! A **service** ([`Service`]) is stateless: no owner, nothing persisted.
//! Every node that registers it runs it and advertises it in the
//! membership table; a request for one of its routes goes to one of those
//! nodes, picked on every node alike by rendezvous hashing of the
//! request's key over the catalog's snapshot ([`Pick`]), so a node that
//! stops or drains moves only its own keys.
//!
//! Both are registered in one place, [`crate::NodeBuilder`]:
//!
//! ```ignore
//! routerd::NodeBuilder::new(config)   // the built-in player and room
//!     .object_type(Guild)
//!     .service(GuildSearch { node_id: 1, weight: 1 })
//!     .serve()?;                      // until SIGINT or SIGTERM
//! ```
//!
//! `examples/guild/` is a complete one.

mod adapter;
pub mod codec;
mod context;
mod registry;
pub(crate) mod request_keys;
#[cfg(test)]
mod tests;

pub use self::context::{Context, Deferred, ServiceContext, TimerLimitReached, OBJECT_TIMERS_MAX};
pub use crate::config::Persist;
pub use crate::route::{ClientRoute, KeyFrom, Pick, RouteBody, RouteKind};
pub use crate::router::{AppCode, ClientRef, DecodeError, ErrorCode, Outcome, Refusal};
pub use wire::hash::stable_hash64;
pub use wire::ObjectKey;

pub(crate) use self::registry::Registry;
pub use self::registry::RegistryError;

use std::sync::Arc;

/// A kind of stateful object. Shared by every core of a node (hence
/// `Send` and `Sync`); each object of the type is an
/// [`ObjectType::Object`] on one core.
pub trait ObjectType: Send + Sync + 'static {
    /// The in-memory object, one per key, on the key's core.
    type Object: Object;

    /// The `type_id` of its keys: stable across releases (it is in the
    /// store) and unique on the node. routerd's own types use ids below
    /// 100 (1: the router's test counter, 2: player, 3: room).
    fn type_id(&self) -> u32;
    /// Its name in logs and errors (`guild`).
    fn name(&self) -> &'static str;
    /// The client routes whose requests go to objects of this type (and the
    /// push routes its objects send).
    fn routes(&self) -> Vec<ClientRoute>;
    /// When its changes become durable; `interval` by default.
    fn persist(&self) -> Persist {
        Persist::Interval
    }
    /// Whether a request for a key nobody owns creates the object (from
    /// [`ObjectType::create`]) on a node chosen by rendezvous hashing; if
    /// not, such a request is answered UNAVAILABLE.
    fn auto_create(&self) -> bool {
        true
    }
    /// Whether a request of `op` (a client route's id, or the op another
    /// object sent) for a key with no persisted state may create the
    /// object, when the type is `auto_create`; `Err(answer)` answers the
    /// request so (an error, or what the object would answer when it has
    /// nothing) and creates nothing. Every op may, by default: a room, for
    /// one, is created by a join only.
    fn may_create(&self, op: u32) -> Result<(), Outcome> {
        let _ = op;
        Ok(())
    }
    /// The most bytes [`Object::encode`] can write for an object of this
    /// type, when the type bounds it (a room of at most `members_max`
    /// members); `None` (the default): not bounded, or not known. A node
    /// refuses to start when a bound is over what `store.state_max_bytes`
    /// leaves for the object: the store would refuse to save such a state,
    /// and every change made since the object's last save would live in
    /// that node's memory alone.
    fn state_len_max(&self) -> Option<usize> {
        None
    }
    /// The version [`Object::encode`] writes, stored with the state. Bump it
    /// when the encoding changes, and keep decoding the versions before it.
    fn state_version(&self) -> u16 {
        1
    }
    /// A new object: the key has no persisted state yet.
    fn create(&self, key: ObjectKey) -> Self::Object;
    /// The object whose state `version` (between 1 and `state_version`)
    /// encoded as `state`. An error makes the object unavailable (its
    /// requests are answered INTERNAL) rather than run on a state nobody
    /// can read back: return it for bytes that do not decode exactly.
    fn decode(
        &self,
        key: ObjectKey,
        version: u16,
        state: &[u8],
    ) -> Result<Self::Object, DecodeError>;
}

/// One live object. Handlers are pure: they change `self` and tell the
/// context what to emit; they never block and do no IO.
pub trait Object: 'static {
    /// Appends the state to persist (and to ship when the object moves),
    /// in the encoding of the type's `state_version`.
    fn encode(&self, out: &mut Vec<u8>);
    /// One request: a client route's (op = route id) or another object's
    /// message (op of the sender's choosing).
    fn handle(&mut self, ctx: &mut Context<'_>);
    /// The answer to this object's call `tag` (`Context::call`): exactly
    /// one per call, an error among them (TIMEOUT when none came within
    /// the gateway's request timeout, UNAVAILABLE, ...).
    fn on_answer(&mut self, ctx: &mut Context<'_>, tag: u64, outcome: Outcome) {
        let _ = (ctx, tag, outcome);
    }
    /// Timer `tag` of this activation fired (`Context::set_timer`). Timers
    /// belong to the activation that set them: one that fires after the
    /// object was saved and dropped, or moved to another node, is not
    /// delivered.
    fn on_timer(&mut self, ctx: &mut Context<'_>, tag: u64) {
        let _ = (ctx, tag);
    }
    /// What an operator sees of the object in the admin endpoint's state
    /// viewer (`GET /objects/{type}/{id}`, the console's lookup), made
    /// from the object as [`ObjectType::decode`] reads it back from its
    /// saved state: words, or JSON (shown as JSON when it parses). `None`,
    /// the default, shows the saved bytes in hex. It runs on the admin
    /// thread, not a core, on a copy decoded for the view: keep it cheap
    /// and leave secrets out (docs/protocol.md, section 9).
    fn debug_view(&self) -> Option<String> {
        None
    }
}

/// A stateless service: no owner, no persisted state, run by every node
/// that registers it. Shared by every core of a node.
pub trait Service: Send + Sync + 'static {
    /// The `type_id` of its keys and its actor type in the catalog: unique
    /// on the node among types and services, 100 or more.
    fn type_id(&self) -> u32;
    /// Its name in logs and errors.
    fn name(&self) -> &'static str;
    /// The client routes it serves; the key of each request picks the node.
    fn routes(&self) -> Vec<ClientRoute>;
    /// How the serving nodes share keys; all nodes of a service must agree.
    fn pick(&self) -> Pick {
        Pick::Rendezvous
    }
    /// This node's share under [`Pick::Weighted`], advertised in the
    /// membership table; 0 takes keys only when every node has 0.
    fn weight(&self) -> u32 {
        1
    }
    /// One request, on the core it landed on.
    fn handle(&self, ctx: &mut ServiceContext<'_>);
}

impl<T: ObjectType> ObjectType for Arc<T> {
    type Object = T::Object;

    fn type_id(&self) -> u32 {
        (**self).type_id()
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn routes(&self) -> Vec<ClientRoute> {
        (**self).routes()
    }
    fn persist(&self) -> Persist {
        (**self).persist()
    }
    fn auto_create(&self) -> bool {
        (**self).auto_create()
    }
    fn may_create(&self, op: u32) -> Result<(), Outcome> {
        (**self).may_create(op)
    }
    fn state_len_max(&self) -> Option<usize> {
        (**self).state_len_max()
    }
    fn state_version(&self) -> u16 {
        (**self).state_version()
    }
    fn create(&self, key: ObjectKey) -> Self::Object {
        (**self).create(key)
    }
    fn decode(
        &self,
        key: ObjectKey,
        version: u16,
        state: &[u8],
    ) -> Result<Self::Object, DecodeError> {
        (**self).decode(key, version, state)
    }
}
