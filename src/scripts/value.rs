//! The one value model between clients, the store and Luau: JSON. A request
//! body (on a `json` route), an object's state and a handler's answer cross
//! into Luau and back through here.
//!
//! A Lua table whose keys are exactly 1..n (n > 0) is a JSON array; any
//! other table is a JSON object (number keys become their decimal text),
//! so an empty table is `{}`. Integers that fit `i64` stay integers;
//! other numbers are floats. Functions, userdata and other values that
//! JSON cannot hold are an error, as is nesting deeper than `DEPTH_MAX`
//! (a table that holds itself).

use mlua::{Lua, Table, Value};
use serde_json::{Map, Number, Value as Json};

/// Tables deeper than this do not convert (a cycle, or a runaway script).
const DEPTH_MAX: usize = 64;

/// `json` as a Lua value.
pub(super) fn to_lua(lua: &Lua, json: &Json) -> mlua::Result<Value> {
    Ok(match json {
        Json::Null => Value::Nil,
        Json::Bool(flag) => Value::Boolean(*flag),
        Json::Number(number) => match number.as_i64() {
            // Luau numbers are doubles: integers beyond 2^53 lose digits,
            // as they would in JavaScript.
            Some(integer) => Value::Number(integer as f64),
            None => Value::Number(number.as_f64().unwrap_or(0.0)),
        },
        Json::String(text) => Value::String(lua.create_string(text)?),
        Json::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (index, item) in items.iter().enumerate() {
                table.raw_set(index + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        Json::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (name, item) in fields {
                table.raw_set(name.as_str(), to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

/// A Lua value as JSON, or why it has no JSON form.
pub(super) fn from_lua(value: &Value) -> Result<Json, String> {
    from_lua_at(value, 0)
}

fn from_lua_at(value: &Value, depth: usize) -> Result<Json, String> {
    Ok(match value {
        Value::Nil => Json::Null,
        Value::Boolean(flag) => Json::Bool(*flag),
        Value::Integer(integer) => Json::from(*integer),
        Value::Number(number) => number_json(*number)?,
        Value::String(text) => Json::String(text.to_string_lossy()),
        Value::Table(table) => {
            if depth >= DEPTH_MAX {
                return Err(format!("a table nested deeper than {DEPTH_MAX}"));
            }
            table_json(table, depth + 1)?
        }
        other => return Err(format!("a {} has no JSON form", other.type_name())),
    })
}

fn number_json(number: f64) -> Result<Json, String> {
    if number.fract() == 0.0 && number.abs() < 9.007_199_254_740_992e15 {
        return Ok(Json::from(number as i64));
    }
    Number::from_f64(number)
        .map(Json::Number)
        .ok_or_else(|| format!("{number} has no JSON form"))
}

fn table_json(table: &Table, depth: usize) -> Result<Json, String> {
    let len = table.raw_len();
    let mut count = 0usize;
    let mut pairs = Vec::new();
    for pair in table.pairs::<Value, Value>() {
        let (key, item) = pair.map_err(|error| error.to_string())?;
        count += 1;
        pairs.push((key, item));
    }
    if len > 0 && count == len {
        let mut items = vec![Json::Null; len];
        for (key, item) in &pairs {
            let index = match key {
                Value::Integer(index) => *index as usize,
                Value::Number(index) => *index as usize,
                _ => return object_json(pairs, depth),
            };
            if index == 0 || index > len {
                return object_json(pairs, depth);
            }
            items[index - 1] = from_lua_at(item, depth)?;
        }
        return Ok(Json::Array(items));
    }
    object_json(pairs, depth)
}

fn object_json(pairs: Vec<(Value, Value)>, depth: usize) -> Result<Json, String> {
    let mut fields = Map::new();
    for (key, item) in pairs {
        let name = match &key {
            Value::String(text) => text.to_string_lossy(),
            Value::Integer(integer) => integer.to_string(),
            Value::Number(number) => number_json(*number)?.to_string(),
            other => return Err(format!("a table key of type {}", other.type_name())),
        };
        fields.insert(name, from_lua_at(&item, depth)?);
    }
    Ok(Json::Object(fields))
}
