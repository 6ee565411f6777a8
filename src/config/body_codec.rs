//! The body codec of a gateway listener (`gateway.body_codec`,
//! `gateway.tls_body_codec`, `gateway.websocket_body_codec`): how the
//! clients of that listener encode the bodies of `json` routes
//! (docs/scripts.md, "Codecs and listeners").

use serde::{Deserialize, Serialize};

/// What the bodies of a listener's `json` routes are on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyCodec {
    /// UTF-8 JSON, as the handler's route declares it: the gateway passes
    /// the bytes through untouched.
    #[default]
    None,
    /// MessagePack: the gateway decodes each request body of a `json`
    /// route into the JSON value it holds (a body that does not decode is
    /// answered BAD_REQUEST there) and encodes the answer back.
    Msgpack,
}

impl BodyCodec {
    /// The name the configuration spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyCodec::None => "none",
            BodyCodec::Msgpack => "msgpack",
        }
    }
}
