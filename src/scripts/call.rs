//! One call of a script, all or nothing: the state decoded into a fresh
//! table (created by `init`, or migrated up to the script's `version`), the
//! function run under the budget, and either everything it did (the new
//! state, its answer, what it asked `ctx` for) or a refusal that changes
//! nothing.

use mlua::{Table, Value};

use super::vm::{Loaded, Vm};
use super::{encode_value, value, Codec, Effects};
use crate::object::{AppCode, ErrorCode, Refusal};

/// What a call runs.
pub(super) enum Invocation<'a> {
    /// A request or a one-way message: op (a route id) and body.
    Request { op: u32, body: &'a [u8] },
    /// `on_timer(ctx, state, name)`.
    Timer { name: &'a str },
}

/// The object as the call found it.
pub(super) struct Before<'a> {
    pub type_id: u32,
    pub object_id: u64,
    /// The state's version, and its JSON (`None`: not created yet).
    pub version: u32,
    pub state: Option<&'a [u8]>,
    /// The session's player, for `ctx.player`.
    pub player: Option<u64>,
}

/// A call that returned.
pub(super) struct Ran {
    pub answer: Vec<u8>,
    pub version: u32,
    /// The state's JSON when it changed (or was created, or migrated).
    pub changed: Option<Vec<u8>>,
    pub effects: Effects,
}

/// Runs `invocation` on `before`; `Err` is the refusal to answer with, and
/// nothing of the call is kept.
pub(super) fn run(
    vm: &Vm,
    before: &Before<'_>,
    invocation: &Invocation<'_>,
) -> Result<Ran, Refusal> {
    let internal = |reason: String| Refusal::explained(ErrorCode::Internal, &reason);
    let Some(loaded) = vm.types.get(&before.type_id) else {
        return Err(internal(format!("type {} is not loaded", before.type_id)));
    };
    let declaration = &loaded.declaration;
    let (state, version) = state_table(vm, loaded, before)?;
    let (function, request) = match invocation {
        Invocation::Request { op, body } => {
            let Some(route) = declaration.route(*op) else {
                return Err(Refusal::explained(
                    ErrorCode::BadRequest,
                    &format!("{} serves no route {op}", declaration.name),
                ));
            };
            let function = vm
                .handler(loaded, route.id)
                .map_err(|error| internal(error.to_string()))?
                .ok_or_else(|| internal(format!("no handler for {}", route.name)))?;
            (
                function,
                request_value(vm, route.codec, body).map_err(lua_internal)?,
            )
        }
        Invocation::Timer { name } => match &loaded.on_timer {
            Some(function) => {
                let name = vm.string(name.as_bytes()).map_err(lua_internal)?;
                (function.clone(), name)
            }
            None => return Err(internal(format!("{} has no on_timer", declaration.name))),
        },
    };
    let ctx = vm
        .ctx(before.player, before.object_id)
        .map_err(lua_internal)?;
    vm.effects.take();
    let returned = vm.call(&function, (ctx, state.clone(), request));
    let effects = vm.effects.take();
    let answer = returned.map_err(|error| refusal(&error))?;
    let json = value::encode(&Value::Table(state))
        .map_err(|why| internal(format!("the state has no JSON form: {why}")))?;
    let changed =
        (before.state != Some(json.as_slice()) || version != before.version).then_some(json);
    let answer = encode_value(&answer)
        .map_err(|why| internal(format!("the answer has no JSON form: {why}")))?;
    Ok(Ran {
        answer,
        version,
        changed,
        effects,
    })
}

/// The state as a fresh table at the script's version: `init(key)` for an
/// object not created yet, `migrate(state, from)` for an older one.
fn state_table(vm: &Vm, loaded: &Loaded, before: &Before<'_>) -> Result<(Table, u32), Refusal> {
    let current = loaded.declaration.version;
    let Some(bytes) = before.state else {
        let key = Value::Number(before.object_id as f64);
        let created = vm.call(&loaded.init, key);
        return match created.map_err(|error| refusal(&error))? {
            Value::Table(table) => Ok((table, current)),
            other => Err(Refusal::explained(
                ErrorCode::Internal,
                &format!("init returned a {}, not a table", other.type_name()),
            )),
        };
    };
    let decoded = vm
        .decode(bytes)
        .map_err(|error| Refusal::explained(ErrorCode::Internal, &error.to_string()))?;
    let Value::Table(table) = decoded else {
        return Err(Refusal::explained(
            ErrorCode::Internal,
            "the state is not a table",
        ));
    };
    if before.version > current {
        return Err(Refusal::explained(
            ErrorCode::Internal,
            &format!(
                "the state is of version {}, newer than the script's {current}",
                before.version
            ),
        ));
    }
    if before.version == current {
        return Ok((table, current));
    }
    let Some(migrate) = &loaded.migrate else {
        return Ok((table, current));
    };
    let from = Value::Number(f64::from(before.version));
    let migrated = vm.call(migrate, (table.clone(), from));
    match migrated.map_err(|error| refusal(&error))? {
        Value::Table(migrated) => Ok((migrated, current)),
        Value::Nil => Ok((table, current)),
        other => Err(Refusal::explained(
            ErrorCode::Internal,
            &format!("migrate returned a {}, not a table", other.type_name()),
        )),
    }
}

fn request_value(vm: &Vm, codec: Codec, body: &[u8]) -> mlua::Result<Value> {
    if codec == Codec::Json {
        if let Ok(value) = vm.decode(body) {
            return Ok(value);
        }
    }
    vm.string(body)
}

/// The answer to an error a script raised: `error({code = "BAD_REQUEST",
/// reason = "..."})` is that code (a protocol code's name, or a number
/// from 32768 for the type's own), anything else INTERNAL with its words.
fn refusal(error: &Value) -> Refusal {
    if let Value::Table(table) = error {
        let reason: String = match table.raw_get::<Value>("reason") {
            Ok(Value::String(text)) => text.to_string_lossy(),
            _ => String::new(),
        };
        match table.raw_get::<Value>("code") {
            Ok(Value::String(code)) => {
                let code = code.to_string_lossy();
                let known = ErrorCode::ALL.into_iter().find(|known| {
                    known.name() == code && *known as u16 >= ErrorCode::AuthFailed as u16
                });
                return match known {
                    Some(known) => Refusal::explained(known, &reason),
                    None => Refusal::explained(
                        ErrorCode::Internal,
                        &format!("error code {code} is not one a handler answers: {reason}"),
                    ),
                };
            }
            Ok(Value::Integer(code)) => {
                if let Some(code) = u16::try_from(code).ok().and_then(AppCode::new) {
                    return Refusal::app(code, &reason);
                }
            }
            Ok(Value::Number(code)) => {
                if let Some(code) = (code.fract() == 0.0 && (0.0..65536.0).contains(&code))
                    .then(|| AppCode::new(code as u16))
                    .flatten()
                {
                    return Refusal::app(code, &reason);
                }
            }
            _ => {}
        }
    }
    let words = match error {
        Value::String(text) => text.to_string_lossy(),
        Value::Error(error) => error.to_string(),
        other => other
            .to_string()
            .unwrap_or_else(|_| other.type_name().to_string()),
    };
    Refusal::explained(
        ErrorCode::Internal,
        words.lines().next().unwrap_or_default(),
    )
}

fn lua_internal(error: mlua::Error) -> Refusal {
    Refusal::explained(ErrorCode::Internal, &error.to_string())
}
