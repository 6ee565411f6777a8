//! One sandboxed Luau VM per core and library: the scripts of one
//! generation loaded into it, the per-call budget (its interrupt is
//! `budget.rs`'s), the memory bound, and the one `ctx` a handler gets (its
//! methods are `ctx.rs`'s).
//!
//! The sandbox: only the `table`, `string`, `utf8`, `bit32`, `math` and
//! `buffer` libraries; no `io`, `os`, `debug`, `require`, `loadstring` /
//! `load` (so no bytecode), `getfenv` / `setfenv` or `collectgarbage`;
//! globals read-only (Luau's sandbox), and each file in an environment of
//! its own, so files share nothing. A script cannot load a chunk at all;
//! a file's text is compiled once per load or reload ([`compile`], on the
//! thread doing it) and each core's VM loads that bytecode, the
//! compiler's own output and nothing else. `ctx`'s
//! methods are read-only too: a script that could replace `ctx.push` would
//! see what every other object of the core pushes.
//!
//! Loading goes through mlua; a call does not. What a call touches (each
//! type's functions, `ctx`) is held in the VM's kit, a table pinned at the
//! bottom of its main thread's stack, and the call works on that stack
//! itself (`call`, `value`), because an mlua handle per value was most of
//! a small call's cost.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_int;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mlua::ffi::{self, lua_State};
use mlua::{ChunkMode, Compiler, Function, IntoLua, Lua, LuaOptions, StdLib, Table, Value};

use super::budget::{arm, disarm, interrupt};
use super::ctx::{self, Effects};
use super::declare::{declare, Declaration};
use super::{Bounds, ScriptError, ScriptFile};

/// Time a file's top level may run when it is checked (at the start, at
/// a reload): each core runs it again at its next call, pausing its
/// sessions that long, so it is kept short.
pub const CHECK_LOAD_BUDGET: Duration = Duration::from_millis(100);

/// Time a file's top level may run when a core loads it: ten times the
/// check's, so a file that passed is not refused by a busy core (which
/// would fail that core's calls of every type).
const CORE_LOAD_BUDGET: Duration = Duration::from_secs(1);

/// Globals Luau (or mlua) defines that a script must not reach: loading
/// code, the environment, the collector, files, `print` (a blocking write
/// to the node's stdout, which no budget stops) and `newproxy` (a userdata
/// whose metatable the script writes, so its `__tostring` or `__gc` would
/// run where the node reads it, outside any call's bounds).
const REMOVED_GLOBALS: [&str; 11] = [
    "print",
    "newproxy",
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

/// A value the VM holds for as long as it lives: its place in the kit.
///
/// The kit is one table at the bottom of the main thread's stack, its
/// values in its array part, so fetching one is an index into an array.
/// Luau's registry would do, but mlua keeps its own values there too and
/// references land in its hash part: a small call's lookups there cost
/// it 3% more (530 ns a `counter.add` call, 512 ns with the kit).
#[derive(Clone, Copy)]
pub(super) struct Ref(c_int);

/// The kit's place on the main thread's stack: the first slot, pushed
/// before anything else and never popped (every use of that stack leaves
/// it as it found it).
const KIT: c_int = 1;

/// One type's functions in one VM.
pub(super) struct Loaded {
    pub declaration: Arc<Declaration>,
    pub init: Ref,
    pub migrate: Option<Ref>,
    pub on_timer: Option<Ref>,
    handlers: Ref,
    /// Each route's id and name, the name as a Lua string made once, so a
    /// call finds its handler without hashing the name again. A type has
    /// a few routes: a list is quicker to search than a map.
    route_names: Vec<(u32, Ref)>,
}

/// Which state of which object a table is: the object's number, unique in
/// the process, and how many calls' results it has kept. A VM keeps the
/// state table the last call left ([`Vm::keep_state`]) and gives it to
/// the next call only if that call's object is at the same mark, so a
/// result the object did not keep (refused after the call) is never
/// taken for its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StateMark {
    object: u64,
    commits: u64,
}

impl StateMark {
    /// A new object's mark.
    pub fn new() -> StateMark {
        static OBJECTS: AtomicU64 = AtomicU64::new(1);
        StateMark {
            object: OBJECTS.fetch_add(1, Ordering::Relaxed),
            commits: 0,
        }
    }

    /// The mark of the object once it keeps one more call's result.
    pub fn next(self) -> StateMark {
        StateMark {
            commits: self.commits + 1,
            ..self
        }
    }
}

/// How a call failed.
pub(super) enum Failed {
    /// It ran past its budget (these words).
    Overran(String),
    /// It raised an error: the error value is on top of the stack.
    Raised,
}

/// One core's VM for one generation of a library.
pub(super) struct Vm {
    lua: Lua,
    /// The VM's main thread, where every call runs. Valid as long as `lua`.
    state: *mut lua_State,
    pub generation: u64,
    /// The types loaded (a few: searched in order).
    types: Vec<Loaded>,
    bounds: Bounds,
    /// What the running call asked for; taken after it.
    pub effects: Rc<RefCell<Effects>>,
    /// The one `ctx` of this VM, read-only to scripts, its methods in its
    /// metatable; its fields are set for each call (`push_ctx`).
    ctx: Ref,
    /// The session's player and the object's id `ctx` holds now: a run of
    /// calls to one object sets them once.
    ctx_holds: Cell<Option<(Option<u64>, u64)>>,
    /// The names of `ctx`'s fields, made once (naming a field by its text
    /// would hash and look the text up at each call).
    player_name: Ref,
    key_name: Ref,
    /// Whether the last `pcall` failed on the memory bound.
    out_of_memory: Cell<bool>,
    /// The kit's slot of the state table the last call left, and the
    /// state it is (`keep_state`): `false` in the slot when none.
    kept_state: Ref,
    kept_mark: Cell<Option<StateMark>>,
}

impl Vm {
    /// A VM with every file of a generation loaded, or the first file that
    /// does not load.
    pub fn new(files: &[ScriptFile], generation: u64, bounds: Bounds) -> Result<Vm, ScriptError> {
        let setup = |error: mlua::Error| ScriptError::at("(vm)", 1, error.to_string());
        let lua = sandboxed().map_err(setup)?;
        let mut state = std::ptr::null_mut();
        // SAFETY: the function only reads the state's address and installs
        // the interrupt; it leaves the stack empty.
        unsafe {
            lua.exec_raw::<()>((), |main| {
                state = main;
                (*ffi::lua_callbacks(main)).interrupt = Some(interrupt);
            })
        }
        .map_err(setup)?;
        // SAFETY: nothing runs on the fresh VM's stack; no bound holds.
        unsafe {
            if ffi::lua_gettop(state) != KIT - 1 || ffi::lua_checkstack(state, 1) == 0 {
                return Err(ScriptError::at(
                    "(vm)",
                    1,
                    "no room for the kit".to_string(),
                ));
            }
            ffi::lua_createtable(state, 0, 0);
        }
        let effects = Rc::new(RefCell::new(Effects::default()));
        let declarations: HashMap<&'static str, Arc<Declaration>> = files
            .iter()
            .map(|file| (file.declaration.name, file.declaration.clone()))
            .collect();
        let ctx_meta = ctx::methods(&lua, &effects, declarations, bounds).map_err(setup)?;
        let ctx = lua.create_table_with_capacity(0, 2).map_err(setup)?;
        ctx.set_metatable(Some(ctx_meta)).map_err(setup)?;
        ctx.set_readonly(true);
        let ctx = hold(&lua, state, ctx).map_err(setup)?;
        let player_name = lua.create_string("player").map_err(setup)?;
        let player_name = hold(&lua, state, player_name).map_err(setup)?;
        let key_name = lua.create_string("key").map_err(setup)?;
        let key_name = hold(&lua, state, key_name).map_err(setup)?;
        let kept_state = hold(&lua, state, false).map_err(setup)?;
        let mut vm = Vm {
            lua,
            state,
            generation,
            types: Vec::new(),
            bounds,
            effects,
            ctx,
            ctx_holds: Cell::new(None),
            player_name,
            key_name,
            out_of_memory: Cell::new(false),
            kept_state,
            kept_mark: Cell::new(None),
        };
        for file in files {
            let loaded = vm.load_type(file)?;
            vm.types.push(loaded);
        }
        Ok(vm)
    }

    /// Loads `file` and takes its functions.
    fn load_type(&self, file: &ScriptFile) -> Result<Loaded, ScriptError> {
        let (table, declaration) =
            self.load(&file.name, &file.source, &file.bytecode, CORE_LOAD_BUDGET)?;
        debug_assert_eq!(declaration.type_id, file.declaration.type_id);
        let lua_error = |error: mlua::Error| ScriptError::at(&file.name, 1, error.to_string());
        let function = |name: &str| -> Result<Option<Ref>, ScriptError> {
            match table.raw_get::<Option<Function>>(name).ok().flatten() {
                Some(function) => self.hold(function).map(Some).map_err(lua_error),
                None => Ok(None),
            }
        };
        let mut route_names = Vec::new();
        for route in &file.declaration.routes {
            let name = self.lua.create_string(route.name).map_err(lua_error)?;
            route_names.push((route.id, self.hold(name).map_err(lua_error)?));
        }
        let handlers = table.raw_get::<Table>("handlers").map_err(lua_error)?;
        Ok(Loaded {
            declaration: file.declaration.clone(),
            init: function("init")?.ok_or_else(|| ScriptError::at(&file.name, 1, "no init"))?,
            migrate: function("migrate")?,
            on_timer: function("on_timer")?,
            handlers: self.hold(handlers).map_err(lua_error)?,
            route_names,
        })
    }

    /// Runs `bytecode`, [`compile`]d from `source` (file `name`), in an
    /// environment of its own, its top level for at most `budget`; its
    /// table and what it declares.
    pub fn load(
        &self,
        name: &str,
        source: &str,
        bytecode: &[u8],
        budget: Duration,
    ) -> Result<(Table, Declaration), ScriptError> {
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
            .load(bytecode)
            .set_name(format!("={name}"))
            .set_mode(ChunkMode::Binary)
            .set_environment(env);
        arm(budget);
        self.set_memory_limit(self.bounds.memory_max);
        let returned = chunk.call::<Value>(());
        self.set_memory_limit(0);
        let overran = disarm();
        if overran {
            return Err(ScriptError::at(
                name,
                1,
                format!("its top level ran past {} ms", budget.as_millis()),
            ));
        }
        if let Err(mlua::Error::MemoryError(_)) = returned {
            return Err(ScriptError::at(
                name,
                1,
                format!(
                    "its top level passed scripts.memory_max_bytes ({} bytes)",
                    self.bounds.memory_max
                ),
            ));
        }
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

    /// What a call may take and leave.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// The functions of the type `type_id`.
    pub fn loaded(&self, type_id: u32) -> Option<&Loaded> {
        self.types
            .iter()
            .find(|loaded| loaded.declaration.type_id == type_id)
    }

    /// The VM's main thread, for a call to work on its stack, which it must
    /// leave as it found it ([`StackTop`]).
    ///
    /// The memory bound holds only while a script's code runs (a file's
    /// top level in [`Vm::load`], a function in [`Vm::pcall`]): past it an
    /// allocation raises an error, which outside a protected call would
    /// abort the process. What the router builds for a call (the state, the
    /// request, `ctx`) is sized by what the node already holds and took
    /// in, so only the script's own code needs the bound.
    pub fn state(&self) -> *mut lua_State {
        self.state
    }

    /// Holds `value` in the kit.
    fn hold(&self, value: impl IntoLua) -> mlua::Result<Ref> {
        hold(&self.lua, self.state, value)
    }

    /// Pushes a value of the kit.
    ///
    /// # Safety
    /// Room for one value on the stack.
    pub unsafe fn push(&self, held: Ref) {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            ffi::lua_rawgeti(self.state, KIT, ffi::lua_Integer::from(held.0));
        }
    }

    /// Pushes the function `handlers[name]` of a type for the route
    /// `route_id`; `false` (and nothing pushed) when it is not a function.
    ///
    /// # Safety
    /// Room for two values on the stack.
    pub unsafe fn push_handler(&self, loaded: &Loaded, route_id: u32) -> bool {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            let Some((_, name)) = loaded.route_names.iter().find(|(id, _)| *id == route_id) else {
                return false;
            };
            self.push(loaded.handlers);
            self.push(*name);
            ffi::lua_rawget(self.state, -2);
            ffi::lua_remove(self.state, -2);
            if ffi::lua_type(self.state, -1) != ffi::LUA_TFUNCTION {
                ffi::lua_pop(self.state, 1);
                return false;
            }
            true
        }
    }

    /// Pushes the `ctx` of the call about to run: `ctx.player` (nil without
    /// a session) and `ctx.key`, its methods in the metatable. One table a
    /// VM, read-only to scripts (a write, another metatable or a freeze
    /// fails the call that tries it), so only the two fields change, and
    /// only when the call is for another object or player than the last.
    ///
    /// # Safety
    /// Room for three values on the stack; no script code running.
    pub unsafe fn push_ctx(&self, player: Option<u64>, key: u64) {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            let state = self.state;
            self.push(self.ctx);
            if self.ctx_holds.get() == Some((player, key)) {
                return;
            }
            ffi::lua_setreadonly(state, -1, 0);
            self.push(self.player_name);
            match player {
                Some(player) => push_id(state, player),
                None => ffi::lua_pushnil(state),
            }
            ffi::lua_rawset(state, -3);
            self.push(self.key_name);
            push_id(state, key);
            ffi::lua_rawset(state, -3);
            ffi::lua_setreadonly(state, -1, 1);
            self.ctx_holds.set(Some((player, key)));
        }
    }

    /// Pushes the table kept for the state `mark` names, writable again,
    /// and forgets it (the call about to change it may fail); `false`, and
    /// nothing pushed, when the table kept is no state of that mark.
    ///
    /// # Safety
    /// Room for one value on the stack; no script code running.
    pub unsafe fn take_state(&self, mark: StateMark) -> bool {
        if self.kept_mark.get() != Some(mark) {
            return false;
        }
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe { self.unkeep() };
        true
    }

    /// Keeps the table at `index`, the state `mark` names, for that
    /// object's next call, which then need not decode its JSON again
    /// (`value::write_state` said the JSON decodes back to an equal
    /// table). Read-only while kept: a script that held on to the table
    /// cannot change it from another object's call. The table kept before
    /// is released.
    ///
    /// # Safety
    /// A table at `index`, room for one value on the stack; no script
    /// code running.
    pub unsafe fn keep_state(&self, index: c_int, mark: StateMark) {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            let state = self.state;
            let index = ffi::lua_absindex(state, index);
            self.release_state();
            ffi::lua_setreadonly(state, index, 1);
            ffi::lua_pushvalue(state, index);
            ffi::lua_rawseti(state, KIT, self.kept_state.0.into());
            self.kept_mark.set(Some(mark));
        }
    }

    /// Releases the table kept, writable again: it is nobody's state now
    /// (a script may still hold it, as it may any table a call had).
    ///
    /// # Safety
    /// Room for one value on the stack; no script code running.
    unsafe fn release_state(&self) {
        if self.kept_mark.get().is_none() {
            return;
        }
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            self.unkeep();
            ffi::lua_pop(self.state, 1);
        }
    }

    /// Pushes the table kept, writable again, and empties its slot.
    ///
    /// # Safety
    /// A table kept; room for one value on the stack; no script code
    /// running.
    unsafe fn unkeep(&self) {
        self.kept_mark.set(None);
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            self.push(self.kept_state);
            ffi::lua_setreadonly(self.state, -1, 0);
            ffi::lua_pushboolean(self.state, 0);
            ffi::lua_rawseti(self.state, KIT, self.kept_state.0.into());
        }
    }

    /// Calls the function below its `nargs` arguments on the stack under
    /// the call budget and the memory bound, leaving its first result
    /// (`Ok`) or its error value ([`Failed::Raised`]) in their place.
    ///
    /// # Safety
    /// The function and its arguments are on top of the stack; no script
    /// code running (the bound is set for this call alone).
    pub unsafe fn pcall(&self, nargs: c_int) -> Result<(), Failed> {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            arm(self.bounds.call_budget);
            self.set_memory_limit(self.bounds.memory_max);
            let status = ffi::lua_pcall(self.state, nargs, 1, 0);
            self.set_memory_limit(0);
            self.out_of_memory.set(status == ffi::LUA_ERRMEM);
            if disarm() {
                let budget = self.bounds.call_budget.as_micros();
                return Err(Failed::Overran(format!(
                    "the call ran past its budget of {budget} us"
                )));
            }
            if status == ffi::LUA_OK {
                Ok(())
            } else {
                Err(Failed::Raised)
            }
        }
    }

    /// The value on top of the stack as mlua sees it (an error raised by
    /// Rust, such as a `ctx` method's, is a value only mlua can read);
    /// pops it.
    ///
    /// # Safety
    /// A value on top of the stack.
    pub unsafe fn pop_value(&self) -> Value {
        // SAFETY: this function's own contract (its `# Safety`).
        unsafe {
            let held = ffi::lua_ref(self.state, -1);
            ffi::lua_pop(self.state, 1);
            let value = self.lua.exec_raw::<Value>((), |state| {
                ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, ffi::lua_Integer::from(held));
            });
            ffi::lua_unref(self.state, held);
            value.unwrap_or_else(|error| Value::Error(Box::new(error)))
        }
    }

    /// Whether the last call failed on the memory bound; asking clears it.
    pub fn took_out_of_memory(&self) -> bool {
        self.out_of_memory.replace(false)
    }

    /// Collects all the VM's garbage now, the state table kept too. Luau
    /// collects none when an allocation fails on the bound, so a call
    /// refused so may have failed on garbage alone.
    pub fn collect_garbage(&self) {
        // SAFETY: the state lives as long as `self`; no script code runs
        // (no bound holds), so collecting cannot raise; the stack has room
        // for the one value `release_state` pushes (a call's stack was put
        // back by then).
        unsafe {
            if ffi::lua_checkstack(self.state, 1) != 0 {
                self.release_state();
            }
            ffi::lua_gc(self.state, ffi::LUA_GCCOLLECT, 0);
        }
    }

    fn set_memory_limit(&self, bytes: usize) {
        self.lua
            .set_memory_limit(bytes)
            .expect("a VM built by `sandboxed` has memory control");
    }
}

/// Puts the stack's top back where it was when dropped.
pub(super) struct StackTop {
    state: *mut lua_State,
    top: c_int,
}

impl StackTop {
    /// Keeps the top of `vm`'s stack, with room for `slots` more values.
    pub fn keep(vm: &Vm, slots: c_int) -> Option<StackTop> {
        let state = vm.state;
        // SAFETY: the state lives as long as `vm`.
        unsafe {
            let top = ffi::lua_gettop(state);
            (ffi::lua_checkstack(state, slots) != 0).then_some(StackTop { state, top })
        }
    }
}

impl Drop for StackTop {
    fn drop(&mut self) {
        // SAFETY: made by `keep` on a live state; lowering the top cannot fail.
        unsafe { ffi::lua_settop(self.state, self.top) }
    }
}

/// Holds `value` in the kit of the VM whose main thread is `state`: in
/// the registry for a moment (mlua reaches no other table), then at the
/// end of the kit's array.
fn hold(lua: &Lua, state: *mut lua_State, value: impl IntoLua) -> mlua::Result<Ref> {
    let mut held = 0;
    // SAFETY: the value is the one argument on the function's stack; the
    // function takes a reference to it and leaves the stack empty.
    unsafe {
        lua.exec_raw::<()>(value, |state| {
            held = ffi::lua_ref(state, -1);
            ffi::lua_settop(state, 0);
        })
    }?;
    // SAFETY: `state` is the VM's main thread, idle, the kit at `KIT`; no
    // bound holds, so the kit's growth cannot raise.
    unsafe {
        // Every value held is other than nil: the kit has no holes.
        let at = c_int::try_from(ffi::lua_objlen(state, KIT) + 1);
        let (Ok(at), true) = (at, ffi::lua_checkstack(state, 1) != 0) else {
            ffi::lua_unref(state, held);
            return Err(mlua::Error::StackError);
        };
        ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, ffi::lua_Integer::from(held));
        ffi::lua_unref(state, held);
        ffi::lua_rawseti(state, KIT, at.into());
        Ok(Ref(at))
    }
}

/// Pushes id `id` as a number when a double holds it exactly, else as its
/// decimal text: rounded, two players past 2^53 were one `ctx.player`.
///
/// # Safety
/// Room for one value on `state`'s stack; no memory bound holds.
unsafe fn push_id(state: *mut lua_State, id: u64) {
    // SAFETY: this function's own contract (its `# Safety`).
    unsafe {
        if id <= super::ctx::EXACT_NUMBER_MAX {
            ffi::lua_pushnumber(state, id as f64);
        } else {
            let text = id.to_string();
            ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
        }
    }
}

/// `source` (file `name`) compiled, with the options a text chunk loads
/// with: the work of a load that does not depend on the VM, done once
/// for every core (a 4 MiB file takes a few hundred milliseconds, a
/// pause no core should take at its next call after a reload).
pub fn compile(name: &str, source: &str) -> Result<Vec<u8>, ScriptError> {
    Compiler::new()
        .compile(source)
        .map_err(|error| match &error {
            // The compiler's words start at the line (`5: Expected ...`).
            mlua::Error::SyntaxError { message, .. } => ScriptError::at_luau_line(name, message)
                .unwrap_or_else(|| ScriptError::from_lua(name, &error)),
            _ => ScriptError::from_lua(name, &error),
        })
}

fn sandboxed() -> mlua::Result<Lua> {
    let libs = StdLib::TABLE | StdLib::STRING | StdLib::UTF8 | StdLib::BIT | StdLib::MATH;
    let lua = Lua::new_with(libs | StdLib::BUFFER, LuaOptions::default())?;
    let globals = lua.globals();
    for name in REMOVED_GLOBALS {
        globals.raw_set(name, Value::Nil)?;
    }
    super::builtins::install(&lua)?;
    lua.sandbox(true)?;
    // Unbounded at rest: the bound is set around a script's own code.
    lua.set_memory_limit(0)?;
    Ok(lua)
}
