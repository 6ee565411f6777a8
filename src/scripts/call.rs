//! One call of a script, all or nothing: the state as a table (created by
//! `init`, or migrated up to the script's `version`), the function run
//! under the budget, and either everything it did (the new state, its
//! answer, what it asked `ctx` for) or a refusal that changes nothing.
//!
//! The table is the state's JSON decoded afresh, or the very table the
//! object's last call left when its JSON decodes back to an equal one
//! (`value::Fidelity`): the VM keeps that one table, read-only, for the
//! object's next call (`Vm::keep_state`), so a run of calls to one object
//! decodes its state once. A call that fails drops the table it changed.
//!
//! A call works on its VM's stack directly: the state, the request and the
//! answer go between JSON and the stack (`value`) with nothing in between.

use std::ffi::c_int;

use mlua::ffi;
use mlua::Value;

use super::value::{self, Fidelity, Unwritten};
use super::vm::{Failed, Loaded, StackTop, StateMark, Vm};
use super::{Codec, Effects};
use crate::object::{AppCode, ErrorCode, Refusal};

/// Stack slots a call uses before its values nest: the state kept, the
/// function, `ctx`, the state again, the request, and room for lookups.
const CALL_SLOTS: c_int = 8;

/// Bytes an answer's text, or a new object's state, is given before it is
/// written: most are shorter.
const TEXT_SLACK: usize = 32;

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
    /// Which state of the object that is: the VM may hold its table.
    pub mark: StateMark,
    /// The session's player, for `ctx.player`.
    pub player: Option<u64>,
}

/// A call that returned; the object that keeps it moves on to
/// `before.mark.next()`.
pub(super) struct Ran {
    pub answer: Vec<u8>,
    pub version: u32,
    /// The state's JSON when it changed (or was created, or migrated).
    pub changed: Option<Vec<u8>>,
    pub effects: Effects,
}

/// Runs `invocation` on `before`; `Err` is the refusal to answer with, and
/// nothing of the call is kept.
///
/// A call refused on the memory bound runs once more after a full garbage
/// collection: Luau collects nothing when an allocation fails, so the
/// bound could otherwise be reached by garbage alone, and a refused call
/// left nothing behind to run again over.
pub(super) fn run(
    vm: &Vm,
    before: &Before<'_>,
    invocation: &Invocation<'_>,
) -> Result<Ran, Refusal> {
    let ran = attempt(vm, before, invocation);
    if ran.is_err() && vm.took_out_of_memory() {
        vm.collect_garbage();
        return attempt(vm, before, invocation);
    }
    ran
}

fn attempt(vm: &Vm, before: &Before<'_>, invocation: &Invocation<'_>) -> Result<Ran, Refusal> {
    let internal = |reason: String| Refusal::explained(ErrorCode::Internal, &reason);
    let Some(loaded) = vm.loaded(before.type_id) else {
        return Err(internal(format!("type {} is not loaded", before.type_id)));
    };
    let declaration = &loaded.declaration;
    // The route a request takes (a timer's is `None`), and the bytes its
    // function gets: the request's body, or the timer's name.
    let (route, body) = match invocation {
        Invocation::Request { op, body } => match declaration.route(*op) {
            Some(route) => (Some(route), *body),
            None => {
                return Err(Refusal::explained(
                    ErrorCode::BadRequest,
                    &format!("{} serves no route {op}", declaration.name),
                ))
            }
        },
        Invocation::Timer { name } => (None, name.as_bytes()),
    };
    let Some(_top) = StackTop::keep(vm, CALL_SLOTS) else {
        return Err(internal("the VM's stack is full".to_string()));
    };
    let state = vm.state();
    // SAFETY: the stack has room for what this pushes (`CALL_SLOTS`; the
    // conversions check their own), no memory bound holds outside `pcall`,
    // and `_top` puts the stack back however this returns.
    unsafe {
        let version = push_state(vm, loaded, before)?;
        let kept = ffi::lua_gettop(state);
        match route {
            Some(route) => {
                if !vm.push_handler(loaded, route.id) {
                    return Err(internal(format!("no handler for {}", route.name)));
                }
            }
            None => {
                let Some(on_timer) = loaded.on_timer else {
                    return Err(internal(format!("{} has no on_timer", declaration.name)));
                };
                vm.push(on_timer);
            }
        }
        vm.push_ctx(before.player, before.object_id);
        ffi::lua_pushvalue(state, kept);
        // A body that is not JSON reaches a `json` route as its bytes.
        let as_json = route.is_some_and(|route| route.codec == Codec::Json);
        if !as_json || value::push(state, body).is_err() {
            value::push_string(state, body);
        }
        vm.effects.take();
        let returned = vm.pcall(3);
        let effects = vm.effects.take();
        returned.map_err(|failed| refusal(vm, failed))?;
        let Left {
            changed,
            answer,
            fidelity,
        } = leave_text(vm, kept, before, version)?;
        if fidelity == Fidelity::Same {
            vm.keep_state(kept, before.mark.next());
        }
        Ok(Ran {
            answer,
            version,
            changed,
            effects,
        })
    }
}

/// The text a call that returned leaves.
struct Left {
    /// The state's JSON, if it changed (or the version did).
    changed: Option<Vec<u8>>,
    answer: Vec<u8>,
    /// Whether the state's JSON decodes back to an equal table.
    fidelity: Fidelity,
}

/// What a call that returned leaves: its state's JSON if it changed (or
/// the version did), and its answer's bytes, each within its bound; and
/// whether the state's JSON decodes back to an equal table.
///
/// # Safety
/// As in `run`, the state's table at `kept` and the answer on top.
unsafe fn leave_text(
    vm: &Vm,
    kept: c_int,
    before: &Before<'_>,
    version: u32,
) -> Result<Left, Refusal> {
    let bounds = vm.bounds();
    let refused = |what: &str, bound: String, unwritten: Unwritten| {
        let reason = match unwritten {
            Unwritten::Longer => format!("the {what} would be longer than {bound}"),
            Unwritten::Invalid(why) => format!("the {what} has no JSON form: {why}"),
        };
        Refusal::explained(ErrorCode::Internal, &reason)
    };
    // Room for what the state and the answer most likely take, so that
    // neither grows while it is written. The state's text stays with the
    // object, room and all: it gets what it took last time, no more.
    let mut json = Vec::with_capacity(before.state.map_or(TEXT_SLACK, <[u8]>::len));
    let mut answer = Vec::with_capacity(TEXT_SLACK);
    // SAFETY: this function's own contract (its `# Safety`).
    let fidelity = unsafe {
        let fidelity = value::write_state(vm.state(), kept, &mut json, bounds.state_max).map_err(
            |unwritten| {
                let bound = format!(
                    "store.state_max_bytes allows ({} bytes of JSON)",
                    bounds.state_max
                );
                refused("state", bound, unwritten)
            },
        )?;
        value::write_answer(vm.state(), -1, &mut answer, bounds.body_max).map_err(|unwritten| {
            let bound = format!("gateway.body_max_bytes ({})", bounds.body_max);
            refused("answer", bound, unwritten)
        })?;
        fidelity
    };
    let changed =
        (before.state != Some(json.as_slice()) || version != before.version).then_some(json);
    Ok(Left {
        changed,
        answer,
        fidelity,
    })
}

/// Pushes the state as a table at the script's version, and says that
/// version: the table the object's last call left if the VM kept it,
/// else its JSON decoded afresh; `init(key)` for an object not created
/// yet, `migrate(state, from)` for an older one.
///
/// # Safety
/// As in `run`: room on the stack, no script code running.
unsafe fn push_state(vm: &Vm, loaded: &Loaded, before: &Before<'_>) -> Result<u32, Refusal> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let state = vm.state();
        let current = loaded.declaration.version;
        let internal = |reason: &str| Refusal::explained(ErrorCode::Internal, reason);
        let Some(bytes) = before.state else {
            vm.push(loaded.init);
            ffi::lua_pushnumber(state, before.object_id as f64);
            vm.pcall(1).map_err(|failed| refusal(vm, failed))?;
            if ffi::lua_type(state, -1) != ffi::LUA_TTABLE {
                let found = value::type_name(state, -1);
                return Err(internal(&format!("init returned a {found}, not a table")));
            }
            return Ok(current);
        };
        if before.version == current && vm.take_state(before.mark) {
            return Ok(current);
        }
        value::push(state, bytes).map_err(|error| internal(&error.to_string()))?;
        if ffi::lua_type(state, -1) != ffi::LUA_TTABLE {
            return Err(internal("the state is not a table"));
        }
        if before.version > current {
            // UNAVAILABLE, not INTERNAL: the call did not run, and runs
            // once this node has the newer script (a reload that reached
            // other nodes first), so a keyed retry must not be given this
            // refusal from the object's memory of answers.
            return Err(Refusal::explained(
                ErrorCode::Unavailable,
                &format!(
                    "the state is of version {}, newer than the script's {current}",
                    before.version
                ),
            ));
        }
        let Some(migrate) = loaded.migrate.filter(|_| before.version < current) else {
            return Ok(current);
        };
        vm.push(migrate);
        ffi::lua_pushvalue(state, -2);
        ffi::lua_pushnumber(state, f64::from(before.version));
        vm.pcall(2).map_err(|failed| refusal(vm, failed))?;
        match ffi::lua_type(state, -1) {
            // The migrated table in the old one's place.
            ffi::LUA_TTABLE => ffi::lua_remove(state, -2),
            // Migrated in place.
            ffi::LUA_TNIL => ffi::lua_pop(state, 1),
            _ => {
                let found = value::type_name(state, -1);
                return Err(internal(&format!(
                    "migrate returned a {found}, not a table"
                )));
            }
        }
        Ok(current)
    }
}

/// The answer to a call that failed. An error a script raised is on top
/// of the stack: `error({code = "BAD_REQUEST", reason = "..."})` is that
/// code (a protocol code's name, or a number from 32768 for the type's
/// own), anything else INTERNAL with its words.
///
/// # Safety
/// As in `run`; for [`Failed::Raised`] the error value on top.
unsafe fn refusal(vm: &Vm, failed: Failed) -> Refusal {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let words = match failed {
            Failed::Overran(words) => return Refusal::explained(ErrorCode::Internal, &words),
            Failed::Raised => {
                let state = vm.state();
                match ffi::lua_type(state, -1) {
                    ffi::LUA_TTABLE => {
                        if let Some(refusal) = refusal_of_table(state) {
                            return refusal;
                        }
                        "table".to_string()
                    }
                    ffi::LUA_TSTRING => {
                        String::from_utf8_lossy(value::string_at(state, -1)).into_owned()
                    }
                    // Never through `tostring`: a value's `__tostring`
                    // would run here, past the call's time and memory
                    // bounds (a loop in it held the core for good).
                    _ => match vm.pop_value() {
                        Value::Error(error) => error.to_string(),
                        Value::Boolean(value) => value.to_string(),
                        Value::Integer(value) => value.to_string(),
                        Value::Number(value) => value.to_string(),
                        other => other.type_name().to_string(),
                    },
                }
            }
        };
        Refusal::explained(
            ErrorCode::Internal,
            words.lines().next().unwrap_or_default(),
        )
    }
}

/// The refusal an error table on top of the stack names, if it has a code.
///
/// # Safety
/// As in `run`, with the error table on top of the stack.
unsafe fn refusal_of_table(state: *mut ffi::lua_State) -> Option<Refusal> {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        let reason = match ffi::lua_rawgetfield(state, -1, c"reason".as_ptr()) {
            ffi::LUA_TSTRING => String::from_utf8_lossy(value::string_at(state, -1)).into_owned(),
            _ => String::new(),
        };
        ffi::lua_pop(state, 1);
        let code_type = ffi::lua_rawgetfield(state, -1, c"code".as_ptr());
        let refusal = match code_type {
            ffi::LUA_TSTRING => {
                let code = String::from_utf8_lossy(value::string_at(state, -1)).into_owned();
                let known = ErrorCode::ALL.into_iter().find(|known| {
                    known.name() == code && *known as u16 >= ErrorCode::AuthFailed as u16
                });
                Some(match known {
                    Some(known) => Refusal::explained(known, &reason),
                    None => Refusal::explained(
                        ErrorCode::Internal,
                        &format!("error code {code} is not one a handler answers: {reason}"),
                    ),
                })
            }
            ffi::LUA_TNUMBER => {
                let code = ffi::lua_tonumber(state, -1);
                (code.fract() == 0.0 && (0.0..65536.0).contains(&code))
                    .then(|| AppCode::new(code as u16))
                    .flatten()
                    .map(|code| Refusal::app(code, &reason))
            }
            _ => None,
        };
        ffi::lua_pop(state, 1);
        refusal
    }
}
