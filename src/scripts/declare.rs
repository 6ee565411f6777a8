//! What a script declares: the table its file returns, read and checked
//! into a [`Declaration`]. Every refusal names the line of the field at
//! fault (found in the source, since a table's fields carry no lines).

use std::collections::BTreeSet;
use std::sync::Mutex;

use mlua::{Table, Value};

use super::ScriptError;
use crate::config::Persist;
use crate::route::KeyFrom;

/// The lowest type id a script may take (routerd's own are below).
pub const SCRIPT_TYPE_ID_MIN: u32 = 100;
/// The lowest route id a script may take (routerd's own are below).
pub const SCRIPT_ROUTE_ID_MIN: u32 = 200;
/// The highest route id a script may take (the router's ops start past).
pub const SCRIPT_ROUTE_ID_MAX: u32 = 65_535;

/// The longest name a route may have.
const ROUTE_NAME_BYTES_MAX: usize = 64;

/// How a route's request body reaches its handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// UTF-8 JSON, decoded to a Lua value (a body that is not JSON arrives
    /// as a string).
    Json,
    /// The bytes, as a Lua string.
    Raw,
}

/// One client route a script serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptRoute {
    pub id: u32,
    pub name: &'static str,
    pub key: KeyFrom,
    pub codec: Codec,
}

/// One server-to-client route a script's objects push on (`ctx:push`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushRoute {
    pub id: u32,
    pub name: &'static str,
}

/// The shape of one scripted type: everything but its functions. A reload
/// may change the functions and raise `version`, nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declaration {
    pub type_id: u32,
    pub name: &'static str,
    pub version: u32,
    pub persist: Persist,
    /// `create = "on_request"`: a request for an unowned object creates it.
    pub create_on_request: bool,
    pub routes: Vec<ScriptRoute>,
    /// The routes its objects may push on (the file's `pushes`).
    pub pushes: Vec<PushRoute>,
}

impl Declaration {
    /// The route `id` serves, if it is one of this type's.
    pub fn route(&self, id: u32) -> Option<&ScriptRoute> {
        self.routes.iter().find(|route| route.id == id)
    }

    /// The route named `name`, if it is one of this type's.
    pub fn route_named(&self, name: &str) -> Option<&ScriptRoute> {
        self.routes.iter().find(|route| route.name == name)
    }

    /// Why `self` (a reload) may not replace `old`, if it may not.
    pub fn change_refused(&self, old: &Declaration) -> Option<String> {
        if self.type_id != old.type_id || self.name != old.name {
            return Some(format!(
                "type_id and name cannot change by reload (they are {} and {})",
                old.type_id, old.name
            ));
        }
        if self.routes != old.routes || self.pushes != old.pushes {
            return Some("routes cannot change by reload; restart the nodes".to_string());
        }
        if self.persist != old.persist || self.create_on_request != old.create_on_request {
            return Some("persist and create cannot change by reload".to_string());
        }
        if self.version < old.version {
            return Some(format!(
                "version {} is below the loaded {}: states cannot go back",
                self.version, old.version
            ));
        }
        None
    }
}

/// Reads and checks the table `file` (text `source`) returned.
pub(super) fn declare(file: &str, source: &str, table: &Table) -> Result<Declaration, ScriptError> {
    let fail = |field: &str, cause: String| ScriptError::at(file, line_of(source, field), cause);
    let type_id = integer(table, "type_id").map_err(|cause| fail("type_id", cause))?;
    if type_id < u64::from(SCRIPT_TYPE_ID_MIN) || type_id > u64::from(u32::MAX) {
        return Err(fail(
            "type_id",
            format!(
                "type_id must be between {SCRIPT_TYPE_ID_MIN} and {}, got {type_id}",
                u32::MAX
            ),
        ));
    }
    let name = text(table, "name").map_err(|cause| fail("name", cause))?;
    if name.is_empty() || name.len() > 64 {
        return Err(fail("name", "name must be 1 to 64 bytes".to_string()));
    }
    let version = integer(table, "version").map_err(|cause| fail("version", cause))?;
    let version = u32::try_from(version)
        .ok()
        .filter(|version| *version > 0)
        .ok_or_else(|| {
            fail(
                "version",
                format!("version must be 1 or more, got {version}"),
            )
        })?;
    let persist = one_of(
        table,
        "persist",
        &[
            ("interval", Persist::Interval),
            ("on_write", Persist::OnWrite),
        ],
        Persist::Interval,
    )
    .map_err(|cause| fail("persist", cause))?;
    let create_on_request = one_of(
        table,
        "create",
        &[("on_request", true), ("never", false)],
        true,
    )
    .map_err(|cause| fail("create", cause))?;
    let handlers: Table = match table.raw_get::<Value>("handlers") {
        Ok(Value::Table(handlers)) => handlers,
        _ => return Err(fail("handlers", "handlers must be a table".to_string())),
    };
    if let Some(function) = misdeclared_function(table) {
        return Err(fail(function, format!("{function} must be a function")));
    }
    let routes = routes(file, source, table, &handlers)?;
    let pushes = pushes(file, source, table, &routes)?;
    Ok(Declaration {
        type_id: type_id as u32,
        name: leak(name),
        version,
        persist,
        create_on_request,
        routes,
        pushes,
    })
}

/// The first of the file's functions that is missing (`init`) or not a
/// function (`init`, `migrate`, `on_timer`), if one is.
fn misdeclared_function(table: &Table) -> Option<&'static str> {
    let is = |name: &str, optional: bool| match table.raw_get::<Value>(name) {
        Ok(Value::Function(_)) => true,
        Ok(Value::Nil) => optional,
        _ => false,
    };
    [("init", false), ("migrate", true), ("on_timer", true)]
        .into_iter()
        .find(|(name, optional)| !is(name, *optional))
        .map(|(name, _)| name)
}

/// The file's `pushes` (none when unset): the server-to-client routes its
/// objects may push on, each with an id and a name of the script range
/// that no route of the file takes.
fn pushes(
    file: &str,
    source: &str,
    table: &Table,
    routes: &[ScriptRoute],
) -> Result<Vec<PushRoute>, ScriptError> {
    let list = match table.raw_get::<Value>("pushes") {
        Ok(Value::Nil) => return Ok(Vec::new()),
        Ok(Value::Table(list)) => list,
        _ => {
            return Err(ScriptError::at(
                file,
                line_of(source, "pushes"),
                "pushes must be a list of tables".to_string(),
            ))
        }
    };
    let mut pushes: Vec<PushRoute> = Vec::new();
    for index in 1..=list.raw_len() {
        let at =
            |cause: String| ScriptError::at(file, line_of(source, "pushes") + index as u32, cause);
        let Ok(Value::Table(push)) = list.raw_get::<Value>(index) else {
            return Err(at(format!("pushes[{index}] must be a table")));
        };
        let name = route_name(&push).map_err(|cause| at(format!("pushes[{index}]: {cause}")))?;
        let id = route_id(&push).map_err(|cause| at(format!("push {name}: {cause}")))?;
        let taken = routes
            .iter()
            .any(|route| route.id == id || route.name == name)
            || pushes.iter().any(|push| push.id == id || push.name == name);
        if taken {
            return Err(at(format!("push {name}: its id or name is declared twice")));
        }
        pushes.push(PushRoute {
            id,
            name: leak(name),
        });
    }
    Ok(pushes)
}

/// A route's `id`, in the range scripts may take.
fn route_id(route: &Table) -> Result<u32, String> {
    let id = integer(route, "id")?;
    if id < u64::from(SCRIPT_ROUTE_ID_MIN) || id > u64::from(SCRIPT_ROUTE_ID_MAX) {
        return Err(format!(
            "id must be between {SCRIPT_ROUTE_ID_MIN} and {SCRIPT_ROUTE_ID_MAX}, got {id}"
        ));
    }
    Ok(id as u32)
}

/// A route's `name`: it names the route in metrics and logs, so it is
/// bounded like a type's.
fn route_name(route: &Table) -> Result<String, String> {
    let name = text(route, "name")?;
    if name.is_empty() || name.len() > ROUTE_NAME_BYTES_MAX {
        return Err(format!("name must be 1 to {ROUTE_NAME_BYTES_MAX} bytes"));
    }
    Ok(name)
}

fn routes(
    file: &str,
    source: &str,
    table: &Table,
    handlers: &Table,
) -> Result<Vec<ScriptRoute>, ScriptError> {
    let Ok(Value::Table(list)) = table.raw_get::<Value>("routes") else {
        return Err(ScriptError::at(
            file,
            line_of(source, "routes"),
            "routes must be a list of tables".to_string(),
        ));
    };
    let mut routes: Vec<ScriptRoute> = Vec::new();
    for index in 1..=list.raw_len() {
        let at =
            |cause: String| ScriptError::at(file, line_of(source, "routes") + index as u32, cause);
        let Ok(Value::Table(route)) = list.raw_get::<Value>(index) else {
            return Err(at(format!("routes[{index}] must be a table")));
        };
        let name = route_name(&route).map_err(|cause| at(format!("routes[{index}]: {cause}")))?;
        let at = |cause: String| {
            let line =
                quoted_line(source, &name).unwrap_or(line_of(source, "routes") + index as u32);
            ScriptError::at(file, line, format!("route {name}: {cause}"))
        };
        let id = route_id(&route).map_err(at)?;
        let (key, codec) = key_and_codec(&route).map_err(at)?;
        if matches!(key, KeyFrom::JsonField(_)) && codec == Codec::Raw {
            return Err(at("a field key needs codec \"json\"".to_string()));
        }
        if !matches!(
            handlers.raw_get::<Value>(name.as_str()),
            Ok(Value::Function(_))
        ) {
            return Err(at("no function in handlers for it".to_string()));
        }
        if routes
            .iter()
            .any(|other| other.id == id || other.name == name)
        {
            return Err(at("its id or name is declared twice".to_string()));
        }
        routes.push(ScriptRoute {
            id,
            name: leak(name),
            key,
            codec,
        });
    }
    if routes.is_empty() {
        return Err(ScriptError::at(
            file,
            line_of(source, "routes"),
            "routes must declare at least one route".to_string(),
        ));
    }
    Ok(routes)
}

/// A route's `key` and `codec`.
fn key_and_codec(route: &Table) -> Result<(KeyFrom, Codec), String> {
    let key = match text(route, "key")?.as_str() {
        "player" => KeyFrom::Session,
        field => match field.strip_prefix("field:") {
            Some(field) if !field.is_empty() => KeyFrom::JsonField(leak(field.to_string())),
            _ => {
                return Err(format!(
                    "key is \"player\" or \"field:NAME\", not \"{field}\""
                ))
            }
        },
    };
    let codec = one_of(
        route,
        "codec",
        &[("json", Codec::Json), ("raw", Codec::Raw)],
        Codec::Json,
    )?;
    Ok((key, codec))
}

/// The string field `field`: one of `choices`, or `default` when unset.
fn one_of<T: Copy>(
    table: &Table,
    field: &str,
    choices: &[(&str, T)],
    default: T,
) -> Result<T, String> {
    let Some(given) = optional_text(table, field)? else {
        return Ok(default);
    };
    let found = choices.iter().find(|(name, _)| *name == given);
    found.map(|(_, value)| *value).ok_or_else(|| {
        let names: Vec<String> = choices
            .iter()
            .map(|(name, _)| format!("\"{name}\""))
            .collect();
        format!("{field} is {}, not \"{given}\"", names.join(" or "))
    })
}

fn integer(table: &Table, field: &str) -> Result<u64, String> {
    match table.raw_get::<Value>(field) {
        Ok(Value::Integer(value)) if value >= 0 => Ok(value as u64),
        Ok(Value::Number(value)) if value >= 0.0 && value.fract() == 0.0 && value < 1.8e19 => {
            Ok(value as u64)
        }
        Ok(Value::Nil) => Err(format!("{field} is missing")),
        _ => Err(format!("{field} must be a whole number 0 or more")),
    }
}

fn text(table: &Table, field: &str) -> Result<String, String> {
    optional_text(table, field)?.ok_or_else(|| format!("{field} is missing"))
}

fn optional_text(table: &Table, field: &str) -> Result<Option<String>, String> {
    match table.raw_get::<Value>(field) {
        Ok(Value::String(value)) => Ok(Some(value.to_string_lossy())),
        Ok(Value::Nil) => Ok(None),
        _ => Err(format!("{field} must be a string")),
    }
}

/// Names and route names live as long as the node (routes name them in
/// metrics). Each distinct text is leaked once: a file is declared again
/// at every check, reload and core's VM, and a refused reload retries
/// every few seconds, so leaking at each declaration grew without end.
fn leak(text: String) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(name) = names.get(text.as_str()) {
        return name;
    }
    let name: &'static str = Box::leak(text.into_boxed_str());
    names.insert(name);
    name
}

/// The line (from 1) where `field = ...` is first set in `source`, or the
/// line of the `return` when no line sets it.
pub(super) fn line_of(source: &str, field: &str) -> u32 {
    let sets = |line: &str| {
        let line = line.trim_start();
        line.strip_prefix(field).is_some_and(|rest| {
            rest.trim_start().starts_with('=') && !rest.trim_start().starts_with("==")
        })
    };
    let found = source.lines().position(sets).or_else(|| {
        source
            .lines()
            .position(|line| line.trim_start().starts_with("return"))
    });
    found.map_or(1, |index| index as u32 + 1)
}

/// The first line that holds `"text"` (or `'text'`).
fn quoted_line(source: &str, text: &str) -> Option<u32> {
    let double = format!("\"{text}\"");
    let single = format!("'{text}'");
    source
        .lines()
        .position(|line| line.contains(&double) || line.contains(&single))
        .map(|index| index as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::leak;

    #[test]
    fn a_name_is_leaked_once_however_often_it_is_declared() {
        let first = leak("counter.once".to_string());
        let again = leak("counter.once".to_string());
        assert!(std::ptr::eq(first, again));
        assert!(!std::ptr::eq(first, leak("counter.other".to_string())));
    }
}
