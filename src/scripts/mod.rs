//! Scripted object types: every `*.luau` file of `[scripts] dir` is one
//! object type, written in Luau and served through the public object API
//! (`crate::object`) like the built-in player and room, so it gets their
//! guarantees: one owner, requests in order, `on_write` durability,
//! transfer, failover, rebalance, request keys.
//!
//! A file returns a table that declares the type (`type_id`, `name`,
//! `version`, `persist`, `create`, `routes`) and its functions (`init`,
//! `handlers`, optional `migrate` and `on_timer`); docs/scripts.md is the
//! contract. Each core runs its own sandboxed VM (`vm`), built from the
//! library's current generation; a reload makes a new generation, which
//! each core picks up at its next call.
//!
//! **State** is JSON (`value`): an object holds its state as JSON bytes
//! between calls and the store keeps `u32 version (LE) | JSON`. A call
//! gets the state as a table (decoded, or the one the object's last call
//! left), runs the handler, and keeps the table it left only if the
//! handler returned: an error or a budget overrun leaves the state exactly
//! as it was, and nothing the call asked for (pushes, sends, timers)
//! leaves (`call`).

mod budget;
mod builtins;
mod call;
mod ctx;
mod declare;
mod flat;
mod object;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
mod value;
mod vm;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

use self::ctx::Effects;
pub use self::declare::{Codec, Declaration, ScriptRoute};
use self::object::ScriptedType;
use self::vm::Vm;
use crate::config::Config;
use crate::object::{Registry, RegistryError};

/// A script that cannot be served: `file:line: cause`, one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {cause}")]
pub struct ScriptError {
    pub file: String,
    pub line: u32,
    pub cause: String,
}

impl ScriptError {
    fn at(file: &str, line: u32, cause: impl Into<String>) -> ScriptError {
        ScriptError {
            file: file.to_string(),
            line,
            cause: cause.into(),
        }
    }

    /// Luau's own words (`counter.luau:3: Expected ...`) as file, line and
    /// cause, first line only.
    fn from_lua(file: &str, error: &mlua::Error) -> ScriptError {
        let text = match error {
            mlua::Error::SyntaxError { message, .. } => message.clone(),
            mlua::Error::RuntimeError(message) => message.clone(),
            other => other.to_string(),
        };
        let first = text.lines().next().unwrap_or_default();
        first
            .strip_prefix(&format!("{file}:"))
            .and_then(|rest| ScriptError::at_luau_line(file, rest))
            .unwrap_or_else(|| ScriptError::at(file, 1, first))
    }

    /// Luau's words after the file's name (`3: Expected ...`) as a line
    /// and cause of `file`, first line only; `None` when they start with
    /// no line.
    fn at_luau_line(file: &str, words: &str) -> Option<ScriptError> {
        let first = words.lines().next()?;
        let (line, cause) = first.split_once(':')?;
        let line = line.trim().parse().ok()?;
        Some(ScriptError::at(file, line, cause.trim()))
    }
}

/// One file of a generation: its text, the text compiled, and what it
/// declares.
#[derive(Clone)]
struct ScriptFile {
    name: String,
    source: Arc<str>,
    bytecode: Arc<[u8]>,
    declaration: Arc<Declaration>,
}

/// The files one reload (or the start) loaded.
struct Generation {
    number: u64,
    files: Vec<ScriptFile>,
}

/// What one call may take, and how much it may leave.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    /// `scripts.call_budget_us`.
    call_budget: Duration,
    /// `scripts.memory_max_bytes`: the VM's memory, and beside it what a
    /// running call asked `ctx` for (held outside the VM until it returns).
    memory_max: usize,
    /// An answer's, a push's or a send's body: `gateway.body_max_bytes`, as
    /// no client is sent a longer one.
    body_max: usize,
    /// The state's JSON: `store.state_max_bytes`, less what is written
    /// before it (the object API's `u16` state version and the script's
    /// `u32` version), as the store keeps no longer state.
    state_max: usize,
}

impl Bounds {
    fn of(config: &Config) -> Bounds {
        let bytes = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
        Bounds {
            call_budget: Duration::from_micros(config.scripts.call_budget_us),
            memory_max: bytes(config.scripts.memory_max_bytes),
            body_max: bytes(u64::from(config.gateway.body_max_bytes)),
            state_max: config
                .store
                .state_max_bytes
                .saturating_sub(std::mem::size_of::<u16>() + object::STATE_HEADER_BYTES),
        }
    }
}

/// The longest script file: far past any hand-written type (the examples
/// are a few KiB).
const SOURCE_BYTES_MAX: u64 = 4 << 20;

/// Libraries in this process, so a thread's VMs are told apart.
static NEXT_LIBRARY: AtomicU64 = AtomicU64::new(1);

/// How long a core that could not build a generation's VM answers every
/// scripted call with that failure before it tries again. The check at
/// the load makes a failure here rare (a busy core past the top level's
/// budget), but a build can take a second, and trying again at every call
/// would spend the core on it.
const BUILD_RETRY_AFTER: Duration = Duration::from_secs(5);

thread_local! {
    /// This thread's VM of each library: `(library id, VM)`.
    static VMS: RefCell<Vec<(u64, Vm)>> = const { RefCell::new(Vec::new()) };
    /// This thread's last failed build of each library's VM.
    static FAILED_BUILDS: RefCell<Vec<FailedBuild>> = const { RefCell::new(Vec::new()) };
}

/// A VM that could not be built on this thread, and why.
struct FailedBuild {
    library: u64,
    generation: u64,
    at: Instant,
    reason: String,
}

/// The scripts of `[scripts] dir`, shared by every core of a node.
pub struct Library {
    id: u64,
    dir: PathBuf,
    bounds: Bounds,
    current: RwLock<Arc<Generation>>,
    /// `current`'s number, stored after it: a call reads this alone to
    /// know its core's VM is current, and the lock only when it is not.
    current_number: AtomicU64,
    /// One reload at a time.
    reloading: Mutex<()>,
}

impl Library {
    /// The scripts `config` names (`[scripts]`, bounded also by the
    /// gateway's and the store's sizes), loaded and checked; `None` when it
    /// names no directory.
    pub fn load(config: &Config) -> Result<Option<Arc<Library>>, ScriptError> {
        let Some(dir) = &config.scripts.dir else {
            return Ok(None);
        };
        Library::load_dir(dir, Bounds::of(config))
            .map(Some)
            .map_err(|mut error| {
                if error.file != dir.display().to_string() {
                    error.file = dir.join(&error.file).display().to_string();
                }
                error
            })
    }

    fn load_dir(dir: &Path, bounds: Bounds) -> Result<Arc<Library>, ScriptError> {
        let mut files: Vec<ScriptFile> = Vec::new();
        for (name, source) in read_dir(dir)? {
            let file = check(&name, source, bounds)?;
            if let Some(other) = files.iter().find(|other| {
                other.declaration.type_id == file.declaration.type_id
                    || other.declaration.name == file.declaration.name
            }) {
                return Err(ScriptError::at(
                    &name,
                    declare::line_of(&file.source, "type_id"),
                    format!("its type_id or name is {}'s too", other.name),
                ));
            }
            files.push(file);
        }
        loads_together(&files, bounds)?;
        Ok(Arc::new(Library {
            id: NEXT_LIBRARY.fetch_add(1, Ordering::Relaxed),
            dir: dir.to_path_buf(),
            bounds,
            current: RwLock::new(Arc::new(Generation { number: 1, files })),
            current_number: AtomicU64::new(1),
            reloading: Mutex::new(()),
        }))
    }

    /// Registers every scripted type with `registry`.
    pub fn register(self: &Arc<Self>, registry: &mut Registry) -> Result<(), RegistryError> {
        for file in &self.generation().files {
            registry.add_object_type(ScriptedType::new(self.clone(), file.declaration.clone()))?;
        }
        Ok(())
    }

    /// The types and routes served, for `/config` and the admin's listing.
    pub fn describe(&self) -> Json {
        let generation = self.generation();
        let types: Vec<Json> = generation.files.iter().map(describe_file).collect();
        json!({ "generation": generation.number, "types": types })
    }

    /// Loads every file of the directory again. A file that loads and keeps
    /// its shape (type id, name, routes, persist, create; a version not
    /// lower) replaces the old one; any other keeps the old version, and
    /// the answer says why. `Ok` when every file was taken.
    pub fn reload(&self) -> Result<Json, Json> {
        let _one = self
            .reloading
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let old = self.generation();
        let found = match read_dir(&self.dir) {
            Ok(found) => found,
            Err(error) => return Err(json!({ "ok": false, "error": error.to_string() })),
        };
        let mut files = old.files.clone();
        let mut report = Vec::new();
        let mut ok = true;
        let mut changed = false;
        for (name, source) in found {
            let Some(at) = files.iter().position(|file| file.name == name) else {
                ok = false;
                report.push(json!({ "file": name, "status": "refused",
                    "reason": "a new file is a new type: restart the nodes to serve it" }));
                continue;
            };
            if files[at].source == source {
                report.push(json!({ "file": name, "status": "unchanged",
                    "version": files[at].declaration.version }));
                continue;
            }
            let taken = check(&name, source, self.bounds)
                .map_err(|error| error.to_string())
                .and_then(
                    |file| match file.declaration.change_refused(&files[at].declaration) {
                        Some(reason) => Err(format!("{name}: {reason}")),
                        None => Ok(file),
                    },
                );
            match taken {
                Ok(file) => {
                    report.push(json!({ "file": name, "status": "reloaded",
                        "version": file.declaration.version }));
                    files[at] = file;
                    changed = true;
                }
                Err(reason) => {
                    ok = false;
                    report.push(json!({ "file": name, "status": "kept",
                        "version": files[at].declaration.version, "reason": reason }));
                }
            }
        }
        // Nothing to take: the generation stays, so no core runs its files'
        // top levels again (their locals, caches, survive a reload that
        // changed nothing, as a configuration tool may send after every
        // deploy).
        if !changed {
            let answer = json!({ "ok": ok, "generation": old.number, "files": report });
            return if ok { Ok(answer) } else { Err(answer) };
        }
        if let Err(error) = loads_together(&files, self.bounds) {
            return Err(refused_together(&old, report, &error));
        }
        let number = old.number + 1;
        *self
            .current
            .write()
            .unwrap_or_else(|poison| poison.into_inner()) = Arc::new(Generation { number, files });
        self.current_number.store(number, Ordering::Release);
        let answer = json!({ "ok": ok, "generation": number, "files": report });
        if ok {
            Ok(answer)
        } else {
            Err(answer)
        }
    }

    fn generation(&self) -> Arc<Generation> {
        self.current
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// Runs `f` with this thread's VM of the current generation, building
    /// it first when there is none or an older one. `Err` when the VM
    /// cannot be built (the reason, for the answer).
    fn with_vm<R>(&self, f: impl FnOnce(&Vm) -> R) -> Result<R, String> {
        let number = self.current_number.load(Ordering::Acquire);
        VMS.with(|vms| {
            let mut vms = vms.borrow_mut();
            let at = match vms.iter().position(|(id, _)| *id == self.id) {
                Some(at) if vms[at].1.generation == number => at,
                found => {
                    let generation = self.generation();
                    let vm = self.build(&generation)?;
                    match found {
                        Some(at) => {
                            vms[at].1 = vm;
                            at
                        }
                        None => {
                            vms.push((self.id, vm));
                            vms.len() - 1
                        }
                    }
                }
            };
            Ok(f(&vms[at].1))
        })
    }

    /// This thread's VM of `generation`, or why not: the last failure
    /// again, without a try, for `BUILD_RETRY_AFTER` after it.
    fn build(&self, generation: &Generation) -> Result<Vm, String> {
        let now = Instant::now();
        let refused = FAILED_BUILDS.with_borrow(|failed| {
            let build = failed.iter().find(|build| build.library == self.id)?;
            let since = now.saturating_duration_since(build.at);
            (build.generation == generation.number && since < BUILD_RETRY_AFTER).then(|| {
                format!(
                    "{} (this core's VM failed to build {} ms ago; it tries again {} s after)",
                    build.reason,
                    since.as_millis(),
                    BUILD_RETRY_AFTER.as_secs()
                )
            })
        });
        if let Some(reason) = refused {
            return Err(reason);
        }
        let built = Vm::new(&generation.files, generation.number, self.bounds);
        FAILED_BUILDS.with_borrow_mut(|failed| {
            failed.retain(|build| build.library != self.id);
            match built {
                Ok(vm) => Ok(vm),
                Err(error) => {
                    let reason = error.to_string();
                    failed.push(FailedBuild {
                        library: self.id,
                        generation: generation.number,
                        at: now,
                        reason: reason.clone(),
                    });
                    Err(reason)
                }
            }
        })
    }
}

fn describe_file(file: &ScriptFile) -> Json {
    let declaration = &file.declaration;
    let routes: Vec<Json> = declaration
        .routes
        .iter()
        .map(|route| {
            let key = match route.key {
                crate::route::KeyFrom::JsonField(field) => format!("field:{field}"),
                _ => "player".to_string(),
            };
            let codec = match route.codec {
                Codec::Json => "json",
                Codec::Raw => "raw",
            };
            json!({ "id": route.id, "name": route.name, "key": key, "codec": codec })
        })
        .collect();
    let pushes: Vec<Json> = (declaration.pushes.iter())
        .map(|push| json!({ "id": push.id, "name": push.name }))
        .collect();
    json!({
        "file": file.name,
        "type_id": declaration.type_id,
        "name": declaration.name,
        "version": declaration.version,
        "routes": routes,
        "pushes": pushes,
    })
}

/// The `*.luau` files of `dir`, by name.
fn read_dir(dir: &Path) -> Result<Vec<(String, Arc<str>)>, ScriptError> {
    let shown = dir.display().to_string();
    let entries =
        std::fs::read_dir(dir).map_err(|error| ScriptError::at(&shown, 0, error.to_string()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|error| ScriptError::at(&shown, 0, error.to_string()))?
            .path();
        if path.extension().is_none_or(|ext| ext != "luau") || !path.is_file() {
            continue;
        }
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let source = read_source(&path).map_err(|cause| ScriptError::at(&name, 0, cause))?;
        files.push((name, Arc::from(source)));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// The text of a script file, read only up to `SOURCE_BYTES_MAX`: a file
/// put in the directory by mistake (a log, a dump) is refused in a line
/// rather than read whole and handed to the compiler, whose memory and
/// time no bound covers.
fn read_source(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|error| error.to_string())?;
    let mut source = String::new();
    file.take(SOURCE_BYTES_MAX + 1)
        .read_to_string(&mut source)
        .map_err(|error| error.to_string())?;
    if source.len() as u64 > SOURCE_BYTES_MAX {
        return Err(format!(
            "the file is longer than {SOURCE_BYTES_MAX} bytes, the most a script may be"
        ));
    }
    Ok(source)
}

/// Loads `files` into one VM, as each core will: a file that loaded alone
/// may not load after the others (their top levels hold memory under one
/// bound), and a core that cannot build its VM fails every scripted call.
/// `Err` names the file that did not load, and why.
fn loads_together(files: &[ScriptFile], bounds: Bounds) -> Result<(), ScriptError> {
    Vm::new(files, 0, bounds).map(drop).map_err(|mut error| {
        error.cause = format!(
            "after the files before it, as each core loads them: {}",
            error.cause
        );
        error
    })
}

/// A reload's answer when its files did not load together: every file
/// keeps its old version (the generation stays), the one that failed says
/// why, and the others that would have been taken say which did.
fn refused_together(old: &Generation, report: Vec<Json>, error: &ScriptError) -> Json {
    let failed = &error.file;
    let files: Vec<Json> = report
        .into_iter()
        .map(|mut entry| {
            if entry["status"] != "reloaded" {
                return entry;
            }
            let name = entry["file"].as_str().unwrap_or_default().to_string();
            let version = old
                .files
                .iter()
                .find(|file| file.name == name)
                .map(|file| file.declaration.version);
            let reason = if &name == failed {
                error.to_string()
            } else {
                format!("{failed} did not load with it: {error}")
            };
            entry["status"] = json!("kept");
            entry["version"] = json!(version);
            entry["reason"] = json!(reason);
            entry
        })
        .collect();
    json!({ "ok": false, "generation": old.number, "files": files })
}

/// Loads one file in a VM of its own: what it declares, or why not.
fn check(name: &str, source: Arc<str>, bounds: Bounds) -> Result<ScriptFile, ScriptError> {
    let bytecode = vm::compile(name, &source)?;
    let vm = Vm::new(&[], 0, bounds)?;
    let (_, declaration) = vm.load(name, &source, &bytecode, vm::CHECK_LOAD_BUDGET)?;
    Ok(ScriptFile {
        name: name.to_string(),
        source,
        bytecode: Arc::from(bytecode),
        declaration: Arc::new(declaration),
    })
}
