//! The gateway's body codec (the codec plugin, docs/origins.md), sans-IO:
//! on a listener with `gateway.body_codec = "msgpack"` (or the TLS or
//! WebSocket listener's key), the body of a request on a `json` route
//! (`RouteBody::Json`) is MessagePack. The gateway decodes it once into
//! the JSON value it holds ([`decode_request`]), which goes to the object
//! with the request (`Ingress::decoded_request`), and encodes the answer
//! the object made in JSON back into MessagePack for that session
//! ([`encode_answer`]). Handlers see one value model whatever the
//! listener: docs/scripts.md, "Codecs and listeners".
//!
//! MessagePack to JSON: nil, booleans, integers, finite floats, UTF-8
//! strings, arrays, and maps whose keys are strings or integers (an
//! integer key becomes its decimal text, as a Lua table's number key
//! does). Binary, extension types, non-finite floats and other keys have
//! no JSON form and are refused, as is nesting deeper than `DEPTH_MAX`
//! and anything that is not MessagePack (the reserved byte, a value cut
//! short, bytes after the value).

use rmpv::Value as Pack;
use serde_json::{Map, Number, Value as Json};

use crate::config::{BodyCodec, GatewayConfig};
use crate::gateway_addresses::Transport;

/// Request bodies nested deeper than this are refused (no recursion on a
/// core's stack is bounded by the client).
const DEPTH_MAX: usize = 64;

/// Items a list's decoding reserves room for before they come (see
/// `Reader::list`).
const LIST_RESERVED_MAX: usize = 256;

/// The body codec of each listener of a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerCodecs {
    pub plain: BodyCodec,
    pub tls: BodyCodec,
    pub websocket: BodyCodec,
}

impl ListenerCodecs {
    pub fn from_config(config: &GatewayConfig) -> ListenerCodecs {
        ListenerCodecs {
            plain: config.body_codec,
            tls: config.tls_body_codec,
            websocket: config.websocket_body_codec,
        }
    }

    /// The codec of a session accepted on a listener of `transport`.
    pub fn of(self, transport: Transport) -> BodyCodec {
        match transport {
            Transport::Plain => self.plain,
            Transport::Tls => self.tls,
            Transport::Ws | Transport::Wss => self.websocket,
        }
    }
}

/// The JSON bytes of the value a request body holds, or why it holds
/// none. `None` when `codec` leaves bodies as they are, and for an empty
/// body (no value: the handler gets what an empty body gives on any
/// listener). JSON longer than `json_max` (the listener's body bound) is
/// refused: a MessagePack byte can stand for six of JSON (`false,`), and
/// the JSON is what travels to the object, in one frame.
///
/// Decoded here rather than by `rmpv`, which reads the reserved byte
/// `0xc1` as nil: a body that is not MessagePack must be refused.
pub fn decode_request(
    codec: BodyCodec,
    body: &[u8],
    json_max: usize,
) -> Result<Option<Vec<u8>>, String> {
    if codec == BodyCodec::None || body.is_empty() {
        return Ok(None);
    }
    let mut reader = Reader { rest: body };
    let json = reader
        .value(0)
        .map_err(|why| format!("body is not MessagePack: {why}"))?;
    if !reader.rest.is_empty() {
        return Err(format!(
            "body is not MessagePack: {} bytes after the value",
            reader.rest.len()
        ));
    }
    let json = serde_json::to_vec(&json).map_err(|error| error.to_string())?;
    if json.len() > json_max {
        return Err(format!(
            "body is {} bytes as JSON, past the {json_max} a request may carry",
            json.len()
        ));
    }
    Ok(Some(json))
}

/// A MessagePack decoder straight into JSON over the bytes left.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if self.rest.len() < len {
            return Err("cut short".to_string());
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A length of `bytes` big-endian bytes.
    fn len(&mut self, bytes: usize) -> Result<usize, String> {
        Ok(match bytes {
            1 => usize::from(self.array::<1>()?[0]),
            2 => usize::from(u16::from_be_bytes(self.array()?)),
            _ => u32::from_be_bytes(self.array()?) as usize,
        })
    }

    fn text(&mut self, len: usize) -> Result<String, String> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| "a string that is not UTF-8 has no JSON form".to_string())
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > DEPTH_MAX {
            return Err(format!("nested deeper than {DEPTH_MAX}"));
        }
        let marker = self.array::<1>()?[0];
        Ok(match marker {
            0x00..=0x7f => Json::from(marker),
            0x80..=0x8f => self.map(usize::from(marker & 0x0f), depth)?,
            0x90..=0x9f => self.list(usize::from(marker & 0x0f), depth)?,
            0xa0..=0xbf => Json::String(self.text(usize::from(marker & 0x1f))?),
            0xc0 => Json::Null,
            0xc2 => Json::Bool(false),
            0xc3 => Json::Bool(true),
            0xc4..=0xc9 | 0xd4..=0xd8 => {
                return Err(if marker <= 0xc6 {
                    "binary data has no JSON form".to_string()
                } else {
                    "an extension type has no JSON form".to_string()
                })
            }
            0xca => finite(f64::from(f32::from_be_bytes(self.array()?)))?,
            0xcb => finite(f64::from_be_bytes(self.array()?))?,
            0xcc => Json::from(self.array::<1>()?[0]),
            0xcd => Json::from(u16::from_be_bytes(self.array()?)),
            0xce => Json::from(u32::from_be_bytes(self.array()?)),
            0xcf => Json::from(u64::from_be_bytes(self.array()?)),
            0xd0 => Json::from(i8::from_be_bytes(self.array()?)),
            0xd1 => Json::from(i16::from_be_bytes(self.array()?)),
            0xd2 => Json::from(i32::from_be_bytes(self.array()?)),
            0xd3 => Json::from(i64::from_be_bytes(self.array()?)),
            0xd9..=0xdb => {
                let len = self.len(1 << (marker - 0xd9))?;
                Json::String(self.text(len)?)
            }
            0xdc | 0xdd => {
                let len = self.len(2 << (marker - 0xdc))?;
                self.list(len, depth)?
            }
            0xde | 0xdf => {
                let len = self.len(2 << (marker - 0xde))?;
                self.map(len, depth)?
            }
            0xe0..=0xff => Json::from(marker as i8),
            0xc1 => return Err("the reserved byte 0xc1".to_string()),
        })
    }

    fn list(&mut self, len: usize, depth: usize) -> Result<Json, String> {
        // Every item is at least a byte: a length past the body is a lie,
        // and no allocation follows it. A length within the body may still
        // be a lie at every level of a nesting (each reserving up to the
        // body's length in 32-byte values, about 130 MB for a 64 KiB body
        // of nested headers), so the reservation is capped: a real list
        // grows as its items come.
        if len > self.rest.len() {
            return Err("cut short".to_string());
        }
        let mut items = Vec::with_capacity(len.min(LIST_RESERVED_MAX));
        for _ in 0..len {
            items.push(self.value(depth + 1)?);
        }
        Ok(Json::Array(items))
    }

    fn map(&mut self, len: usize, depth: usize) -> Result<Json, String> {
        if len > self.rest.len() / 2 {
            return Err("cut short".to_string());
        }
        let mut fields = Map::new();
        for _ in 0..len {
            let name = match self.value(depth + 1)? {
                Json::String(text) => text,
                Json::Number(number) if number.is_i64() || number.is_u64() => number.to_string(),
                _ => return Err("a map key that is neither a string nor an integer".to_string()),
            };
            fields.insert(name, self.value(depth + 1)?);
        }
        Ok(Json::Object(fields))
    }
}

/// An answer's body (JSON, or the bytes of a string a handler returned) as
/// a session of `codec` reads it: for MessagePack, the value the JSON
/// holds, or a string (binary when not UTF-8) for other bytes; an empty
/// body stays empty. `None` when the body goes as it is.
pub fn encode_answer(codec: BodyCodec, body: &[u8]) -> Option<Vec<u8>> {
    if codec == BodyCodec::None || body.is_empty() {
        return None;
    }
    let value = match serde_json::from_slice::<Json>(body) {
        Ok(json) => to_pack(json),
        Err(_) => match std::str::from_utf8(body) {
            Ok(text) => Pack::from(text),
            Err(_) => Pack::Binary(body.to_vec()),
        },
    };
    let mut out = Vec::with_capacity(body.len() + 8);
    // Writing to a Vec fails only if it cannot grow, which aborts first.
    rmpv::encode::write_value(&mut out, &value).ok()?;
    Some(out)
}

fn finite(float: f64) -> Result<Json, String> {
    Number::from_f64(float)
        .map(Json::Number)
        .ok_or_else(|| format!("{float} has no JSON form"))
}

fn to_pack(json: Json) -> Pack {
    match json {
        Json::Null => Pack::Nil,
        Json::Bool(flag) => Pack::Boolean(flag),
        Json::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(signed), _) => Pack::from(signed),
            (None, Some(unsigned)) => Pack::from(unsigned),
            _ => Pack::F64(number.as_f64().unwrap_or(0.0)),
        },
        Json::String(text) => Pack::from(text),
        Json::Array(items) => Pack::Array(items.into_iter().map(to_pack).collect()),
        Json::Object(fields) => Pack::Map(
            fields
                .into_iter()
                .map(|(name, item)| (Pack::from(name), to_pack(item)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pack(value: &Pack) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, value).unwrap();
        out
    }

    fn decoded(body: &[u8]) -> Result<Json, String> {
        let bytes = decode_request(BodyCodec::Msgpack, body, 1 << 20)?.expect("a value");
        Ok(serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn a_msgpack_body_decodes_to_the_json_value_it_holds() {
        let body = pack(&Pack::Map(vec![
            (Pack::from("by"), Pack::from(5)),
            (Pack::from("id"), Pack::from(u64::MAX)),
            (Pack::from("x"), Pack::F64(1.5)),
            (
                Pack::from("tags"),
                Pack::Array(vec![Pack::from("a"), Pack::Nil]),
            ),
            (Pack::from(7), Pack::Boolean(true)),
        ]));
        assert_eq!(
            decoded(&body).unwrap(),
            json!({"by": 5, "id": u64::MAX, "x": 1.5, "tags": ["a", null], "7": true})
        );
        assert_eq!(decoded(&pack(&Pack::from(-3))).unwrap(), json!(-3));
        // Every width of every kind, as an encoder writes them.
        let long = "x".repeat(300);
        let wide = Pack::Array(vec![
            Pack::from(200u8),
            Pack::from(-300i16),
            Pack::from(70_000u32),
            Pack::from(i64::MIN),
            Pack::from(-100i8),
            Pack::F32(0.5),
            Pack::from("y".repeat(40)),
            Pack::from(long.clone()),
            Pack::Array(vec![Pack::from(1); 20]),
            Pack::Map((0..20).map(|i| (Pack::from(i), Pack::Nil)).collect()),
        ]);
        let fields: serde_json::Map<String, Json> =
            (0..20).map(|i| (i.to_string(), Json::Null)).collect();
        assert_eq!(
            decoded(&pack(&wide)).unwrap(),
            json!([
                200,
                -300,
                70000,
                i64::MIN,
                -100,
                0.5,
                "y".repeat(40),
                long,
                vec![1; 20],
                fields
            ])
        );
    }

    #[test]
    fn a_body_without_a_json_form_is_refused_with_its_reason() {
        let refused = |body: &[u8]| decode_request(BodyCodec::Msgpack, body, 1 << 20).unwrap_err();
        assert!(
            refused(&[0xc1]).contains("not MessagePack"),
            "reserved byte"
        );
        assert!(
            refused(&[0x92, 0x01]).contains("not MessagePack"),
            "cut short"
        );
        assert!(refused(&[0x01, 0x02]).contains("after the value"));
        assert!(refused(&pack(&Pack::Binary(vec![1]))).contains("binary"));
        assert!(refused(&pack(&Pack::Ext(1, vec![1]))).contains("extension"));
        assert!(refused(&pack(&Pack::F64(f64::NAN))).contains("no JSON form"));
        let key = Pack::Map(vec![(Pack::Nil, Pack::from(1))]);
        assert!(refused(&pack(&key)).contains("map key"));
        assert!(refused(&[0x91, 0xc1]).contains("reserved"));
        assert!(refused(&[0xdd, 0xff, 0xff, 0xff, 0xff]).contains("cut short"));
        assert!(refused(&[0xa2, 0xff, 0xfe]).contains("UTF-8"));
        let mut deep = Pack::Nil;
        for _ in 0..DEPTH_MAX * 2 {
            deep = Pack::Array(vec![deep]);
        }
        assert!(refused(&pack(&deep)).contains("not MessagePack"));
    }

    /// 65,535 `false`s are 65,538 bytes of MessagePack and 393,211 of
    /// JSON: the JSON is held to the body bound, not the MessagePack.
    #[test]
    fn a_body_whose_json_passes_the_bound_is_refused() {
        let mut body = vec![0xdc, 0xff, 0xff];
        body.extend(std::iter::repeat_n(0xc2, 65_535));
        let bound = 1 << 18;
        let refused = decode_request(BodyCodec::Msgpack, &body, bound).unwrap_err();
        assert!(refused.contains("393211 bytes as JSON"), "{refused}");
        let json = decode_request(BodyCodec::Msgpack, &body[..3 + 100], bound);
        assert!(json.is_err(), "cut short is still refused");
        let small = [0x92, 0xc2, 0xc3];
        assert_eq!(
            decode_request(BodyCodec::Msgpack, &small, 12),
            Ok(Some(b"[false,true]".to_vec()))
        );
        assert!(decode_request(BodyCodec::Msgpack, &small, 11).is_err());
    }

    #[test]
    fn no_codec_and_empty_bodies_pass_as_they_are() {
        assert_eq!(decode_request(BodyCodec::None, &[0xc1], 0), Ok(None));
        assert_eq!(decode_request(BodyCodec::Msgpack, b"", 0), Ok(None));
        assert_eq!(encode_answer(BodyCodec::None, br#"{"n":1}"#), None);
        assert_eq!(encode_answer(BodyCodec::Msgpack, b""), None);
    }

    #[test]
    fn an_answer_is_encoded_from_its_json_or_as_a_string() {
        let answer = encode_answer(BodyCodec::Msgpack, br#"{"n":6,"list":[1,2.5]}"#).unwrap();
        let value = rmpv::decode::read_value(&mut answer.as_slice()).unwrap();
        assert_eq!(
            value,
            Pack::Map(vec![
                (
                    Pack::from("list"),
                    Pack::Array(vec![Pack::from(1), Pack::F64(2.5)])
                ),
                (Pack::from("n"), Pack::from(6)),
            ])
        );
        let plain = encode_answer(BodyCodec::Msgpack, b"plain text").unwrap();
        assert_eq!(
            rmpv::decode::read_value(&mut plain.as_slice()).unwrap(),
            Pack::from("plain text")
        );
        let bytes = encode_answer(BodyCodec::Msgpack, &[0xff, 0x00]).unwrap();
        assert_eq!(
            rmpv::decode::read_value(&mut bytes.as_slice()).unwrap(),
            Pack::Binary(vec![0xff, 0x00])
        );
    }

    #[test]
    fn each_listener_has_its_codec() {
        let config = GatewayConfig {
            websocket_body_codec: BodyCodec::Msgpack,
            ..GatewayConfig::default()
        };
        let codecs = ListenerCodecs::from_config(&config);
        assert_eq!(codecs.of(Transport::Plain), BodyCodec::None);
        assert_eq!(codecs.of(Transport::Tls), BodyCodec::None);
        assert_eq!(codecs.of(Transport::Ws), BodyCodec::Msgpack);
        assert_eq!(codecs.of(Transport::Wss), BodyCodec::Msgpack);
    }
}
