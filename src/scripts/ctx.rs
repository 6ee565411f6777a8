//! `ctx`'s methods, the calls a handler makes to the node, and what they
//! record: a call's pushes, sends and timers wait in [`Effects`] until it
//! returns, and leave only then (`object::Scripted::release`).
//!
//! What waits is held outside the VM, so it is bounded as the VM is: each
//! body by `gateway.body_max_bytes`, and all of a call's effects together
//! with the VM's own memory by `scripts.memory_max_bytes`. A method that
//! would pass either raises an error in the script, which fails the call
//! (so nothing of it leaves).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use mlua::ffi;
use mlua::{Function, Lua, Table, Value};

use super::value::{self, Unwritten};
use super::{Bounds, Declaration};

/// What an effect costs beside its body: its place in its list and the
/// allocation of its body, counted so that many empty effects still count.
const EFFECT_OVERHEAD_BYTES: usize = 64;

/// The longest timer name: a name outlives its call (an object keeps up to
/// `OBJECT_TIMERS_MAX` of them outside the VM), so it is a label, not data.
const TIMER_NAME_BYTES_MAX: usize = 256;

/// What a call asked for, held until it returns.
#[derive(Default)]
pub(super) struct Effects {
    /// `(player id, route id, body)`.
    pub pushes: Vec<(u64, u32, Vec<u8>)>,
    /// `((type id, object id, op), body)`.
    pub sends: Vec<((u32, u64, u32), Vec<u8>)>,
    /// `(milliseconds, name)`.
    pub timers: Vec<(u64, String)>,
    /// The bytes all of them hold, as counted against the memory bound.
    bytes: usize,
}

impl Effects {
    /// Counts an effect of `bytes` (its body or name) against the memory
    /// bound, beside what the VM holds now; an error for the script when
    /// it would pass it. As for the VM's own allocations, garbage does not
    /// count: near the bound, a full collection runs before the refusal.
    fn count(&mut self, lua: &Lua, bounds: &Bounds, bytes: usize) -> mlua::Result<()> {
        let held = self.bytes + bytes + EFFECT_OVERHEAD_BYTES;
        let passes = |lua: &Lua| lua.used_memory().saturating_add(held) > bounds.memory_max;
        if passes(lua) && (lua.gc_collect().is_err() || passes(lua)) {
            return Err(mlua::Error::runtime(format!(
                "what this call asks ctx for would pass scripts.memory_max_bytes ({}) with \
                 the scripts' own memory",
                bounds.memory_max
            )));
        }
        self.bytes = held;
        // What the call holds outside the VM comes off what the VM may
        // allocate, so the two together stay under the bound (the VM's
        // own allocations are not counted here).
        lua.set_memory_limit(bounds.memory_max.saturating_sub(held).max(1))?;
        Ok(())
    }
}

/// The metatable of every `ctx`: its methods, each recording an effect
/// that is released only if the call succeeds.
pub(super) fn methods(
    lua: &Lua,
    effects: &Rc<RefCell<Effects>>,
    declarations: HashMap<&'static str, Arc<Declaration>>,
    bounds: Bounds,
) -> mlua::Result<Table> {
    let methods = lua.create_table()?;
    let recorded = effects.clone();
    // A push goes out only on a route a script declared for pushes: the
    // gateway would drop one on a request route, and would deliver one on
    // routerd's own (`sys.redirect`, `sys.kicked`) as if routerd sent it.
    let push_routes: HashSet<u32> = (declarations.values())
        .flat_map(|declaration| declaration.pushes.iter().map(|push| push.id))
        .collect();
    methods.raw_set(
        "push",
        lua.create_function(
            move |lua, (_, player, route, value): (Value, Value, u32, Value)| {
                let player = exact_id(player, "ctx:push")?;
                if !push_routes.contains(&route) {
                    return Err(mlua::Error::runtime(format!(
                        "ctx:push: route {route} is no push route a script declares (a file's \
                         pushes)"
                    )));
                }
                let body = encode_body(lua, value, &bounds, "ctx:push")?;
                let mut effects = recorded.borrow_mut();
                effects.count(lua, &bounds, body.len())?;
                effects.pushes.push((player, route, body));
                Ok(())
            },
        )?,
    )?;
    methods.raw_set("send", send(lua, effects.clone(), declarations, bounds)?)?;
    methods.raw_set("timer", timer(lua, effects.clone(), bounds)?)?;
    methods.raw_set(
        "now_ms",
        lua.create_function(|_, _: Value| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Ok(now.as_millis() as f64)
        })?,
    )?;
    methods.set_readonly(true);
    let meta = lua.create_table()?;
    meta.raw_set("__index", methods)?;
    meta.set_readonly(true);
    Ok(meta)
}

/// The largest id a Luau number holds exactly (2^53): `ctx.player` and
/// `ctx.key` are numbers up to it and decimal text past it.
pub(super) const EXACT_NUMBER_MAX: u64 = 1 << 53;

/// A player or object id a script passed: a whole number a double holds
/// exactly, or the decimal text `ctx.player` and `ctx.key` are past that.
fn exact_id(value: Value, method: &str) -> mlua::Result<u64> {
    let exact = match &value {
        Value::Integer(id) => u64::try_from(*id).ok(),
        Value::Number(id) if id.fract() == 0.0 && (0.0..=EXACT_NUMBER_MAX as f64).contains(id) => {
            Some(*id as u64)
        }
        Value::String(text) => text.to_str().ok().and_then(|text| text.parse().ok()),
        _ => None,
    };
    exact.ok_or_else(|| {
        mlua::Error::runtime(format!(
            "{method}: an id is a whole number up to 2^53 or its decimal text, not {}",
            value.type_name()
        ))
    })
}

/// `ctx:send(type_name, id, route_name, value)`.
fn send(
    lua: &Lua,
    recorded: Rc<RefCell<Effects>>,
    declarations: HashMap<&'static str, Arc<Declaration>>,
    bounds: Bounds,
) -> mlua::Result<Function> {
    lua.create_function(
        move |lua, (_, type_name, id, route, value): (Value, String, Value, String, Value)| {
            let id = exact_id(id, "ctx:send")?;
            let Some(declaration) = declarations.get(type_name.as_str()) else {
                return Err(mlua::Error::runtime(format!(
                    "ctx:send: no scripted type named {type_name}"
                )));
            };
            let Some(op) = declaration.route_named(&route).map(|route| route.id) else {
                return Err(mlua::Error::runtime(format!(
                    "ctx:send: {type_name} has no route {route}"
                )));
            };
            let body = encode_body(lua, value, &bounds, "ctx:send")?;
            let mut effects = recorded.borrow_mut();
            effects.count(lua, &bounds, body.len())?;
            effects.sends.push(((declaration.type_id, id, op), body));
            Ok(())
        },
    )
}

/// `ctx:timer(ms, name)`.
fn timer(lua: &Lua, recorded: Rc<RefCell<Effects>>, bounds: Bounds) -> mlua::Result<Function> {
    lua.create_function(move |lua, (_, ms, name): (Value, u64, String)| {
        if name.len() > TIMER_NAME_BYTES_MAX {
            return Err(mlua::Error::runtime(format!(
                "ctx:timer: a name longer than {TIMER_NAME_BYTES_MAX} bytes (keep data in \
                 state, not in the name)"
            )));
        }
        let mut effects = recorded.borrow_mut();
        effects.count(lua, &bounds, name.len())?;
        effects.timers.push((ms, name));
        Ok(())
    })
}

/// The body a push or a send carries, as `value::write_answer` makes it,
/// at most `gateway.body_max_bytes`; an error for the script naming
/// `method` otherwise.
fn encode_body(lua: &Lua, value: Value, bounds: &Bounds, method: &str) -> mlua::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut written = Ok(());
    // `value` runs where no memory bound holds (a growth of the stack it
    // walks on must not raise an error through it). What it takes of the
    // VM is a few slots a level of the value, and the body it writes
    // counts against the bound (`Effects::count`).
    let bound = lua.set_memory_limit(0)?;
    // SAFETY: the value is the one argument on the function's stack; the
    // function reads it and leaves the stack empty, and with no bound it
    // cannot raise.
    let read = unsafe {
        lua.exec_raw::<()>(value, |state| {
            written = value::write_answer(state, 1, &mut out, bounds.body_max);
            ffi::lua_settop(state, 0);
        })
    };
    lua.set_memory_limit(bound)?;
    read?;
    match written {
        Ok(()) => Ok(out),
        Err(Unwritten::Longer) => Err(mlua::Error::runtime(format!(
            "{method}: the value would be longer than gateway.body_max_bytes ({})",
            bounds.body_max
        ))),
        Err(Unwritten::Invalid(why)) => Err(mlua::Error::runtime(format!("{method}: {why}"))),
    }
}
