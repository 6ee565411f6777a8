//! One sandboxed Luau VM per core and library: the scripts of one
//! generation loaded into it, the per-call budget (an interrupt), the
//! memory bound, and the `ctx` methods a handler calls.
//!
//! The sandbox: only the `table`, `string`, `utf8`, `bit32`, `math` and
//! `buffer` libraries; no `io`, `os`, `debug`, `require`, `loadstring` /
//! `load` (so no bytecode), `getfenv` / `setfenv` or `collectgarbage`;
//! globals read-only (Luau's sandbox), and each file in an environment of
//! its own, so files share nothing. Chunks load as text only.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{ChunkMode, Function, IntoLuaMulti, Lua, LuaOptions, StdLib, Table, Value, VmState};

use super::declare::{declare, Declaration};
use super::{value, Effects, ScriptError, ScriptFile};

/// Time a file's top level may run while it loads.
const LOAD_BUDGET: Duration = Duration::from_secs(1);

/// Globals Luau (or mlua) defines that a script must not reach.
const REMOVED_GLOBALS: [&str; 9] = [
    "require",
    "loadstring",
    "load",
    "getfenv",
    "setfenv",
    "collectgarbage",
    "gcinfo",
    "dofile",
    "loadfile",
];

/// The budget of the call running now.
#[derive(Default)]
struct Budget {
    deadline: Cell<Option<Instant>>,
    /// Sticky once past the deadline: every later interrupt fails again,
    /// so a script's own `pcall` cannot swallow the overrun and go on.
    exceeded: Cell<bool>,
}

/// One type's functions in one VM.
pub(super) struct Loaded {
    pub declaration: Arc<Declaration>,
    pub init: Function,
    pub migrate: Option<Function>,
    pub on_timer: Option<Function>,
    pub handlers: Table,
    /// Each route's name, by route id, as a Lua string made once, so a
    /// call finds its handler without hashing the name again.
    route_names: HashMap<u32, mlua::String>,
}

/// One core's VM for one generation of a library.
pub(super) struct Vm {
    pub lua: Lua,
    pub generation: u64,
    pub types: HashMap<u32, Loaded>,
    budget: Rc<Budget>,
    call_budget: Duration,
    /// What the running call asked for; taken after it.
    pub effects: Rc<RefCell<Effects>>,
    /// The metatable of every `ctx` (its methods).
    ctx_meta: Table,
    /// The one `ctx` of this VM, filled again for each call (`Vm::ctx`).
    ctx: Table,
    /// The names of `ctx`'s fields, made once.
    player_name: mlua::String,
    key_name: mlua::String,
    pcall: Function,
    memory_max: usize,
}

impl Vm {
    /// A VM with every file of a generation loaded, or the first file that
    /// does not load.
    pub fn new(
        files: &[ScriptFile],
        generation: u64,
        call_budget: Duration,
        memory_max: usize,
    ) -> Result<Vm, ScriptError> {
        let setup = |error: mlua::Error| ScriptError::at("(vm)", 1, error.to_string());
        let lua = sandboxed(memory_max).map_err(setup)?;
        let budget = Rc::new(Budget::default());
        let watched = budget.clone();
        lua.set_interrupt(move |_| {
            let Some(deadline) = watched.deadline.get() else {
                return Ok(VmState::Continue);
            };
            if watched.exceeded.get() || Instant::now() >= deadline {
                watched.exceeded.set(true);
                return Err(mlua::Error::runtime("the call ran past its budget"));
            }
            Ok(VmState::Continue)
        });
        let effects = Rc::new(RefCell::new(Effects::default()));
        let declarations: HashMap<&'static str, Arc<Declaration>> = files
            .iter()
            .map(|file| (file.declaration.name, file.declaration.clone()))
            .collect();
        let ctx_meta = ctx_methods(&lua, &effects, declarations).map_err(setup)?;
        let pcall = lua.globals().get::<Function>("pcall").map_err(setup)?;
        let ctx = lua.create_table_with_capacity(0, 2).map_err(setup)?;
        let player_name = lua.create_string("player").map_err(setup)?;
        let key_name = lua.create_string("key").map_err(setup)?;
        let mut vm = Vm {
            lua,
            generation,
            types: HashMap::new(),
            budget,
            call_budget,
            effects,
            ctx_meta,
            ctx,
            player_name,
            key_name,
            pcall,
            memory_max,
        };
        for file in files {
            let loaded = vm.load_type(file)?;
            vm.types.insert(loaded.declaration.type_id, loaded);
        }
        Ok(vm)
    }

    /// Loads `file` and takes its functions.
    fn load_type(&self, file: &ScriptFile) -> Result<Loaded, ScriptError> {
        let (table, declaration) = self.load(&file.name, &file.source)?;
        debug_assert_eq!(declaration.type_id, file.declaration.type_id);
        let lua_error = |error: mlua::Error| ScriptError::at(&file.name, 1, error.to_string());
        let function = |name: &str| table.raw_get::<Option<Function>>(name).ok().flatten();
        let mut route_names = HashMap::new();
        for route in &file.declaration.routes {
            let name = self.lua.create_string(route.name).map_err(lua_error)?;
            route_names.insert(route.id, name);
        }
        Ok(Loaded {
            declaration: file.declaration.clone(),
            init: function("init").ok_or_else(|| ScriptError::at(&file.name, 1, "no init"))?,
            migrate: function("migrate"),
            on_timer: function("on_timer"),
            handlers: table.raw_get::<Table>("handlers").map_err(lua_error)?,
            route_names,
        })
    }

    /// Compiles and runs `source` (file `name`) in an environment of its
    /// own; its table and what it declares.
    pub fn load(&self, name: &str, source: &str) -> Result<(Table, Declaration), ScriptError> {
        let lua_error = |error: mlua::Error| ScriptError::from_lua(name, &error);
        let env = self.lua.create_table().map_err(lua_error)?;
        let meta = self.lua.create_table().map_err(lua_error)?;
        meta.raw_set("__index", self.lua.globals())
            .map_err(lua_error)?;
        env.set_metatable(Some(meta)).map_err(lua_error)?;
        // Luau's own per-script environment (`luaL_sandboxthread`): a table
        // over the read-only globals, marked safe, so a builtin the file
        // names (`type`, `math.floor`) is bound when it loads and called
        // on the fast path, not looked up through `__index` at each use.
        // A global the file assigns is never bound so (the compiler sees
        // the write), and nothing else reaches this table.
        env.set_safeenv(true);
        let chunk = self
            .lua
            .load(source)
            .set_name(format!("={name}"))
            .set_mode(ChunkMode::Text)
            .set_environment(env);
        self.arm(LOAD_BUDGET);
        let returned = chunk.call::<Value>(());
        self.disarm();
        let Value::Table(table) = returned.map_err(lua_error)? else {
            return Err(ScriptError::at(
                name,
                super::declare::line_of(source, "return"),
                "the file must return a table".to_string(),
            ));
        };
        let declaration = declare(name, source, &table)?;
        Ok((table, declaration))
    }

    /// Calls `function` with `args` under the call budget, through `pcall`
    /// so an `error{...}` table comes back as it was raised. `Ok` holds
    /// what it returned first; `Err` the error value (or the budget's
    /// words). The arguments go onto Lua's stack and the result comes off
    /// it as they are, with no list in between.
    pub fn call(&self, function: &Function, args: impl IntoLuaMulti) -> Result<Value, Value> {
        self.arm(self.call_budget);
        let result = self.pcall.call::<(bool, Value)>((function, args));
        let exceeded = self.budget.exceeded.get();
        self.disarm();
        let (ok, first) = match result {
            Ok(returned) => returned,
            Err(error) => return Err(self.message(&error.to_string())),
        };
        if exceeded {
            let budget = self.call_budget.as_micros();
            return Err(self.message(&format!("the call ran past its budget of {budget} us")));
        }
        if ok {
            Ok(first)
        } else {
            Err(first)
        }
    }

    /// The JSON text `bytes` as a Lua value in this VM.
    pub fn decode(&self, bytes: &[u8]) -> Result<Value, serde_json::Error> {
        self.unbounded(|| value::decode(&self.lua, bytes))
    }

    /// `bytes` as a Lua string in this VM.
    pub fn string(&self, bytes: &[u8]) -> mlua::Result<Value> {
        self.unbounded(|| self.lua.create_string(bytes).map(Value::String))
    }

    /// The function `handlers[name]` of a type for the route `route_id`,
    /// or `None`.
    pub fn handler(&self, loaded: &Loaded, route_id: u32) -> mlua::Result<Option<Function>> {
        let Some(name) = loaded.route_names.get(&route_id) else {
            return Ok(None);
        };
        loaded.handlers.raw_get::<Option<Function>>(name)
    }

    /// The `ctx` of the call about to run: `ctx.player` (nil without a
    /// session) and `ctx.key`, its methods in the metatable. One table a
    /// VM, emptied and filled again for each call, so nothing a call wrote
    /// into it (a field, another metatable, a freeze) reaches the next.
    pub fn ctx(&self, player: Option<u64>, key: u64) -> mlua::Result<Table> {
        self.unbounded(|| {
            self.ctx.set_readonly(false);
            self.ctx.clear()?;
            if let Some(player) = player {
                self.ctx.raw_set(&self.player_name, player as f64)?;
            }
            self.ctx.raw_set(&self.key_name, key as f64)?;
            self.ctx.set_metatable(Some(self.ctx_meta.clone()))?;
            Ok(self.ctx.clone())
        })
    }

    /// Runs `f` with the memory bound lifted. While a bound is set, mlua
    /// makes every table, field and string through a protected call of its
    /// own (a `pcall` and two new C closures each), which was most of a
    /// small call's cost. What the router builds for a call (the state, the
    /// request, `ctx`) is sized by what the node already holds and took in,
    /// so only the script's own code needs the bound.
    fn unbounded<R>(&self, f: impl FnOnce() -> R) -> R {
        /// Sets the bound back when dropped, so a panic in `f` cannot
        /// leave the VM without it.
        struct Restore<'a>(&'a Vm);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.set_memory_limit(self.0.memory_max);
            }
        }
        self.set_memory_limit(0);
        let _restore = Restore(self);
        f()
    }

    fn set_memory_limit(&self, bytes: usize) {
        self.lua
            .set_memory_limit(bytes)
            .expect("a VM built by `sandboxed` has memory control");
    }

    fn message(&self, text: &str) -> Value {
        self.lua
            .create_string(text)
            .map_or(Value::Nil, Value::String)
    }

    fn arm(&self, budget: Duration) {
        self.budget.exceeded.set(false);
        self.budget.deadline.set(Some(Instant::now() + budget));
    }

    fn disarm(&self) {
        self.budget.deadline.set(None);
        self.budget.exceeded.set(false);
    }
}

fn sandboxed(memory_max: usize) -> mlua::Result<Lua> {
    let libs = StdLib::TABLE | StdLib::STRING | StdLib::UTF8 | StdLib::BIT | StdLib::MATH;
    let lua = Lua::new_with(libs | StdLib::BUFFER, LuaOptions::default())?;
    let globals = lua.globals();
    for name in REMOVED_GLOBALS {
        globals.raw_set(name, Value::Nil)?;
    }
    lua.sandbox(true)?;
    lua.set_memory_limit(memory_max)?;
    Ok(lua)
}

/// The methods of `ctx`: each records an effect, released only if the call
/// succeeds.
fn ctx_methods(
    lua: &Lua,
    effects: &Rc<RefCell<Effects>>,
    declarations: HashMap<&'static str, Arc<Declaration>>,
) -> mlua::Result<Table> {
    let methods = lua.create_table()?;
    let recorded = effects.clone();
    methods.raw_set(
        "push",
        lua.create_function(
            move |_, (_, player, route, value): (Value, u64, u32, Value)| {
                let body = super::encode_value(&value).map_err(mlua::Error::runtime)?;
                recorded.borrow_mut().pushes.push((player, route, body));
                Ok(())
            },
        )?,
    )?;
    let recorded = effects.clone();
    methods.raw_set(
        "send",
        lua.create_function(
            move |_, (_, type_name, id, route, value): (Value, String, u64, String, Value)| {
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
                let body = super::encode_value(&value).map_err(mlua::Error::runtime)?;
                let to = (declaration.type_id, id, op);
                recorded.borrow_mut().sends.push((to, body));
                Ok(())
            },
        )?,
    )?;
    let recorded = effects.clone();
    methods.raw_set(
        "timer",
        lua.create_function(move |_, (_, ms, name): (Value, u64, String)| {
            recorded.borrow_mut().timers.push((ms, name));
            Ok(())
        })?,
    )?;
    methods.raw_set(
        "now_ms",
        lua.create_function(|_, _: Value| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Ok(now.as_millis() as f64)
        })?,
    )?;
    let meta = lua.create_table()?;
    meta.raw_set("__index", methods)?;
    Ok(meta)
}
