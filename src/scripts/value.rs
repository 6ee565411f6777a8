//! The one value model between clients, the store and Luau: JSON. A request
//! body (on a `json` route), an object's state and a handler's answer cross
//! into Luau and back through here, straight between JSON text and Lua
//! values (no JSON tree in between: a call makes and drops one each way).
//!
//! A Lua table whose keys are exactly 1..n (n > 0) is a JSON array; any
//! other table is a JSON object (number keys become their decimal text),
//! its fields in the order of their names, so the same table always
//! encodes to the same bytes; an empty table is `{}`. Integers that fit
//! `i64` stay integers; other numbers are floats. Functions, userdata and
//! other values that JSON cannot hold are an error, as is nesting deeper
//! than `DEPTH_MAX` (a table that holds itself).

use std::fmt;

use mlua::{Lua, Table, Value};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Error as _, Serialize, SerializeMap, SerializeSeq, Serializer};

/// Tables deeper than this do not convert (a cycle, or a runaway script).
const DEPTH_MAX: usize = 64;

/// Room a decoded array or object starts with when the text does not say
/// its length (serde_json never does): most bodies and states are a few
/// fields, and a table that grows field by field pays a rehash each time.
const FIELDS_GUESSED: usize = 4;

/// The JSON text `bytes` as a Lua value (`null` is nil), or why it is not
/// JSON.
pub(super) fn decode(lua: &Lua, bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let value = Decoder { lua }.deserialize(&mut json)?;
    json.end()?;
    Ok(value)
}

/// A Lua value as JSON text, or why it has no JSON form.
pub(super) fn encode(value: &Value) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&Encoder { value, depth: 0 }).map_err(|error| error.to_string())
}

/// Makes Lua values from a JSON document as it is read.
#[derive(Clone, Copy)]
struct Decoder<'lua> {
    lua: &'lua Lua,
}

fn lua_error<E: serde::de::Error>(error: mlua::Error) -> E {
    E::custom(error)
}

impl<'de> DeserializeSeed<'de> for Decoder<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, json: D) -> Result<Value, D::Error> {
        json.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Decoder<'_> {
    type Value = Value;

    fn expecting(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        out.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }

    fn visit_bool<E: serde::de::Error>(self, flag: bool) -> Result<Value, E> {
        Ok(Value::Boolean(flag))
    }

    // Luau numbers are doubles: integers beyond 2^53 lose digits, as they
    // would in JavaScript.
    fn visit_i64<E: serde::de::Error>(self, integer: i64) -> Result<Value, E> {
        Ok(Value::Number(integer as f64))
    }

    fn visit_u64<E: serde::de::Error>(self, integer: u64) -> Result<Value, E> {
        Ok(Value::Number(integer as f64))
    }

    fn visit_f64<E: serde::de::Error>(self, number: f64) -> Result<Value, E> {
        Ok(Value::Number(number))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Value, E> {
        self.lua
            .create_string(text)
            .map(Value::String)
            .map_err(lua_error)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let table = self
            .lua
            .create_table_with_capacity(items.size_hint().unwrap_or(FIELDS_GUESSED), 0)
            .map_err(lua_error)?;
        let mut index = 0usize;
        // A null keeps its place: the next item's index counts it.
        while let Some(item) = items.next_element_seed(self)? {
            index += 1;
            table.raw_set(index, item).map_err(lua_error)?;
        }
        Ok(Value::Table(table))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Value, A::Error> {
        let table = self
            .lua
            .create_table_with_capacity(0, fields.size_hint().unwrap_or(FIELDS_GUESSED))
            .map_err(lua_error)?;
        while let Some(name) = fields.next_key_seed(self)? {
            let item = fields.next_value_seed(self)?;
            table.raw_set(name, item).map_err(lua_error)?;
        }
        Ok(Value::Table(table))
    }
}

/// Writes a Lua value as JSON as it walks it.
struct Encoder<'a> {
    value: &'a Value,
    depth: usize,
}

impl Serialize for Encoder<'_> {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Nil => out.serialize_unit(),
            Value::Boolean(flag) => out.serialize_bool(*flag),
            Value::Integer(integer) => out.serialize_i64(*integer),
            Value::Number(number) => match json_number(*number) {
                Ok(JsonNumber::Integer(integer)) => out.serialize_i64(integer),
                Ok(JsonNumber::Float(number)) => out.serialize_f64(number),
                Err(why) => Err(S::Error::custom(why)),
            },
            Value::String(text) => out.serialize_str(&text.to_string_lossy()),
            Value::Table(table) => {
                if self.depth >= DEPTH_MAX {
                    return Err(S::Error::custom(format!(
                        "a table nested deeper than {DEPTH_MAX}"
                    )));
                }
                encode_table(table, self.depth + 1, out)
            }
            other => Err(S::Error::custom(format!(
                "a {} has no JSON form",
                other.type_name()
            ))),
        }
    }
}

enum JsonNumber {
    Integer(i64),
    Float(f64),
}

fn json_number(number: f64) -> Result<JsonNumber, String> {
    if number.fract() == 0.0 && number.abs() < 9.007_199_254_740_992e15 {
        return Ok(JsonNumber::Integer(number as i64));
    }
    if !number.is_finite() {
        return Err(format!("{number} has no JSON form"));
    }
    Ok(JsonNumber::Float(number))
}

fn encode_table<S: Serializer>(table: &Table, depth: usize, out: S) -> Result<S::Ok, S::Error> {
    let len = table.raw_len();
    let mut pairs = Vec::new();
    for pair in table.pairs::<Value, Value>() {
        pairs.push(pair.map_err(S::Error::custom)?);
    }
    if len > 0 && pairs.len() == len {
        if let Some(items) = array_items(&pairs, len) {
            let mut array = out.serialize_seq(Some(len))?;
            for item in items {
                let value = item.unwrap_or(&Value::Nil);
                array.serialize_element(&Encoder { value, depth })?;
            }
            return array.end();
        }
    }
    encode_object(pairs, depth, out)
}

/// The items of a table whose keys are 1..=len, in order; `None` when a
/// key is anything else.
fn array_items(pairs: &[(Value, Value)], len: usize) -> Option<Vec<Option<&Value>>> {
    let mut items = vec![None; len];
    for (key, item) in pairs {
        let index = match key {
            Value::Integer(index) => *index as usize,
            Value::Number(index) => *index as usize,
            _ => return None,
        };
        if index == 0 || index > len {
            return None;
        }
        items[index - 1] = Some(item);
    }
    Some(items)
}

/// A table as a JSON object, its fields sorted by name. Two keys with the
/// same text (`1` and `"1"`) are one field, the later in the walk; the
/// other must still have a JSON form.
fn encode_object<S: Serializer>(
    pairs: Vec<(Value, Value)>,
    depth: usize,
    out: S,
) -> Result<S::Ok, S::Error> {
    let mut fields = Vec::with_capacity(pairs.len());
    for (key, item) in pairs {
        let name = match &key {
            Value::String(text) => text.to_string_lossy(),
            Value::Integer(integer) => integer.to_string(),
            Value::Number(number) => match json_number(*number).map_err(S::Error::custom)? {
                JsonNumber::Integer(integer) => integer.to_string(),
                JsonNumber::Float(number) => serde_json::Number::from_f64(number)
                    .map_or_else(|| number.to_string(), |number| number.to_string()),
            },
            other => {
                return Err(S::Error::custom(format!(
                    "a table key of type {}",
                    other.type_name()
                )))
            }
        };
        fields.push((name, item));
    }
    // A stable sort keeps fields of the same name in walk order.
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let mut object = out.serialize_map(Some(fields.len()))?;
    for (at, (name, item)) in fields.iter().enumerate() {
        let value = Encoder { value: item, depth };
        if fields.get(at + 1).is_some_and(|next| next.0 == *name) {
            serde_json::to_writer(std::io::sink(), &value).map_err(S::Error::custom)?;
            continue;
        }
        object.serialize_entry(name, &value)?;
    }
    object.end()
}
