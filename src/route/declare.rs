//! How an object type or a service declares its client routes: the route
//! id and name clients use, who may send it, whether it needs a logged-in
//! session, and which object (or which key of a service) a request for it
//! addresses.

use wire::hash::stable_hash64;

/// Ops at or above this are the router's own events; no client route and
/// no object-to-object op may use them.
pub const OP_RESERVED_MIN: u32 = 0xFFFF_FF00;

/// How the key of the object a request addresses comes out of the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFrom {
    /// The logged-in session's player id: one object of the type per player.
    Session,
    /// The first eight bytes of the body, a little-endian `u64` (a room
    /// id, a guild id). A shorter body is answered BAD_REQUEST.
    BodyU64,
    /// The stable hash of the whole body (a name): requests with the same
    /// body address the same object, or the same service key.
    BodyHash,
    /// A whole-number field of the JSON body (a scripted route's
    /// `key = "field:NAME"`). A body that is not a JSON object with that
    /// field, a whole number from 0, is answered BAD_REQUEST.
    JsonField(&'static str),
}

impl KeyFrom {
    /// The object id a request of `player_id` with `body` addresses, or
    /// `None` when the body cannot name one.
    pub fn object_id(self, player_id: u64, body: &[u8]) -> Option<u64> {
        match self {
            KeyFrom::Session => Some(player_id),
            KeyFrom::BodyU64 => Some(u64::from_le_bytes(*body.first_chunk::<8>()?)),
            KeyFrom::BodyHash => Some(stable_hash64(body)),
            KeyFrom::JsonField(field) => json_field(body, field),
        }
    }
}

/// The whole-number field `field` of the JSON object `body`.
fn json_field(body: &[u8], field: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let number = value.get(field)?;
    number.as_u64().or_else(|| {
        let float = number.as_f64()?;
        (float >= 0.0 && float.fract() == 0.0 && float < 9.007_199_254_740_992e15)
            .then_some(float as u64)
    })
}

/// How a service's nodes share its keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// Rendezvous hashing: every serving node gets an equal share.
    #[default]
    Rendezvous,
    /// Weighted rendezvous: a node gets `weight / sum of weights` of the
    /// keys, by the weight it advertises (`object::Service::weight`).
    Weighted,
}

/// What a route carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// Client-to-server REQUESTs, each answered by exactly one RESPONSE or
    /// ERROR; `key` says which object (or service key) gets it.
    Request {
        /// Where the addressed key comes from.
        key: KeyFrom,
        /// Whether the session must have logged in.
        requires_auth: bool,
    },
    /// Server-to-client PUSHes; a client may not send it.
    Push,
}

/// What a route's bodies are, for the gateway's body codec
/// (`gateway.body_codec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RouteBody {
    /// Bytes the object type defines: the gateway never looks inside.
    #[default]
    Bytes,
    /// A JSON value (a scripted route's `codec = "json"`): on a listener
    /// with a body codec the gateway decodes each request body into it and
    /// encodes the answer from it.
    Json,
}

/// One client route of an object type or a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientRoute {
    /// The `route_id` of the client protocol. routerd's own routes are
    /// below 200; a node refuses two declarations of one id.
    pub id: u32,
    /// Its name in metrics and logs (`guild.join`).
    pub name: &'static str,
    /// What it carries and who may send it.
    pub kind: RouteKind,
    /// What its bodies are.
    pub body: RouteBody,
}

impl ClientRoute {
    /// A client request that needs a logged-in session; its op in the
    /// handler is `id`.
    pub const fn request(id: u32, name: &'static str, key: KeyFrom) -> ClientRoute {
        ClientRoute {
            id,
            name,
            kind: RouteKind::Request {
                key,
                requires_auth: true,
            },
            body: RouteBody::Bytes,
        }
    }

    /// A server-to-client PUSH route.
    pub const fn push(id: u32, name: &'static str) -> ClientRoute {
        ClientRoute {
            id,
            name,
            kind: RouteKind::Push,
            body: RouteBody::Bytes,
        }
    }

    /// The same request route, open to sessions that have not logged in.
    /// Before login every request goes to the node's auth service, which
    /// answers only `sys.ping` and `auth.login`: a route other than those
    /// is refused there, so this is for routerd's own `sys.ping`.
    pub const fn without_auth(self) -> ClientRoute {
        match self.kind {
            RouteKind::Request { key, .. } => ClientRoute {
                kind: RouteKind::Request {
                    key,
                    requires_auth: false,
                },
                ..self
            },
            RouteKind::Push => self,
        }
    }

    /// The same route, its bodies JSON values (see [`RouteBody::Json`]).
    pub const fn json_body(self) -> ClientRoute {
        ClientRoute {
            body: RouteBody::Json,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_session_or_the_body() {
        assert_eq!(KeyFrom::Session.object_id(42, &[]), Some(42));
        let field = KeyFrom::JsonField("id");
        assert_eq!(field.object_id(42, br#"{"id": 7, "by": 1}"#), Some(7));
        assert_eq!(field.object_id(42, br#"{"id": 7.0}"#), Some(7));
        assert_eq!(field.object_id(42, br#"{"id": -1}"#), None);
        assert_eq!(field.object_id(42, br#"{"id": "7"}"#), None);
        assert_eq!(field.object_id(42, b"not json"), None);
        let mut body = 7u64.to_le_bytes().to_vec();
        body.extend_from_slice(b"text");
        assert_eq!(KeyFrom::BodyU64.object_id(42, &body), Some(7));
        assert_eq!(KeyFrom::BodyU64.object_id(42, &[1, 2, 3]), None);
        assert_eq!(
            KeyFrom::BodyHash.object_id(1, b"name"),
            KeyFrom::BodyHash.object_id(2, b"name")
        );
        assert_ne!(
            KeyFrom::BodyHash.object_id(1, b"name"),
            KeyFrom::BodyHash.object_id(1, b"other")
        );
        let open = ClientRoute::request(1, "sys.ping", KeyFrom::Session).without_auth();
        assert_eq!(
            open.kind,
            RouteKind::Request {
                key: KeyFrom::Session,
                requires_auth: false
            }
        );
        assert_eq!(
            ClientRoute::push(9, "x").without_auth().kind,
            RouteKind::Push
        );
    }
}
