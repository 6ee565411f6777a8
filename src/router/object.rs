//! The public manager API business objects implement: one `ObjectType` per
//! router type, registered with `RouterCore::register`. A new object type is
//! one new file in `services/`.

use wire::ObjectKey;

use super::types::{ClientRef, ErrorCode, Outcome, Request};
use crate::config::Persist;

/// A router object type: how its state is created, decoded and persisted.
pub trait ObjectType {
    /// The `type_id` of the keys this type owns.
    fn type_id(&self) -> u32;
    /// Whether a request for a key nobody owns may create the object on the
    /// default node (rendezvous hash over live nodes).
    fn auto_create(&self) -> bool;
    fn persist(&self) -> Persist;
    /// Decodes persisted state; `None` is a new object (no record yet). A
    /// decoding error makes the claim fail with INTERNAL rather than run on
    /// a state nobody can read back.
    fn decode(
        &self,
        key: ObjectKey,
        state: Option<&[u8]>,
    ) -> Result<Box<dyn ObjectState>, DecodeError>;
}

/// The live state of one writable object.
pub trait ObjectState {
    /// The bytes persisted and shipped inside `router_transfer`.
    fn encode(&self) -> Vec<u8>;
    /// Runs one request. Pure: it may only change `self` and fill `out`.
    fn handle(&mut self, key: ObjectKey, request: &Request, out: &mut HandlerOutput);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError;

/// What a handler produced. The router releases it: at once for reads and
/// `interval` objects, after the save's CAS applied for a mutation of an
/// `on_write` object (and drops all of it if that save fails).
#[derive(Debug, Default)]
pub struct HandlerOutput {
    pub reply: HandlerReply,
    /// The state changed (it must be saved).
    pub mutated: bool,
    /// `(client, route_id, body)` PUSHes.
    pub pushes: Vec<(ClientRef, u32, Vec<u8>)>,
    /// Requests to other objects, routed like client requests.
    pub sends: Vec<(ObjectKey, Request)>,
    /// Sessions the gateway must kick (duplicate login).
    pub kicks: Vec<ClientRef>,
}

#[derive(Debug, Default)]
pub enum HandlerReply {
    /// Answer the request with this.
    Answer(Outcome),
    /// The request (same `RequestId`) was passed on in `sends`; whoever gets
    /// it answers. Also the value for requests with `needs_reply == false`.
    #[default]
    Delegated,
}

impl HandlerOutput {
    pub fn answer(&mut self, outcome: Outcome) {
        self.reply = HandlerReply::Answer(outcome);
    }

    pub fn bad_request(&mut self) {
        self.reply = HandlerReply::Answer(Err(ErrorCode::BadRequest));
    }
}
