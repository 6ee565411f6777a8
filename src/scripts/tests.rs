//! Scripted types below the router: loading and its refusals, the
//! transaction of one call, the sandbox and its bounds, migration and
//! reload. The whole path through real nodes is in tests/scripts_cluster.rs.

use std::path::Path;
use std::sync::Arc;

use super::call::{self, Before, Invocation, Ran};
use super::vm::StateMark;
use super::Library;
use crate::config::{Config, ScriptsConfig};
use crate::object::{ErrorCode, Refusal};

pub(super) const COUNTER: &str = include_str!("../../examples/scripts/counter.luau");
const INVENTORY: &str = include_str!("../../examples/scripts/inventory.luau");
/// The body of `counter.raw`'s handler in COUNTER: the tests that give the
/// counter a handler of their own replace this.
pub(super) const RAW_HANDLER_BODY: &str =
    "state.last = req\n      return \"got \" .. #req .. \" bytes\"";

/// COUNTER with a push route (2010), for the handlers that push.
fn counter_with_push() -> String {
    COUNTER.replacen(
        "  routes = {",
        "  pushes = { { id = 2010, name = \"counter.changed\" } },\n  routes = {",
        1,
    )
}

pub(super) fn library_of(
    dir: &Path,
    files: &[(&str, &str)],
    budget_us: u64,
) -> Result<Arc<Library>, String> {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let config = Config {
        scripts: ScriptsConfig {
            dir: Some(dir.to_path_buf()),
            call_budget_us: budget_us,
            memory_max_bytes: 8 << 20,
        },
        ..Config::default()
    };
    Library::load(&config)
        .map(|library| library.unwrap())
        .map_err(|error| error.to_string())
}

/// An object of one type, called as the router would call it.
pub(super) struct Probe {
    library: Arc<Library>,
    type_id: u32,
    pub object_id: u64,
    player: Option<u64>,
    pub version: u32,
    pub state: Option<Vec<u8>>,
    mark: StateMark,
}

impl Probe {
    pub fn new(library: &Arc<Library>, type_id: u32) -> Probe {
        Probe {
            library: library.clone(),
            type_id,
            object_id: 7,
            player: Some(7),
            version: 0,
            state: None,
            mark: StateMark::new(),
        }
    }

    pub fn call(&mut self, op: u32, body: &str) -> Result<Ran, Refusal> {
        let ran = self.run(op, body);
        if let Ok(ran) = &ran {
            self.version = ran.version;
            self.mark = self.mark.next();
            if let Some(state) = &ran.changed {
                self.state = Some(state.clone());
            }
        }
        ran
    }

    /// A call whose result the object does not keep, as when the router
    /// refuses it after it ran (too many timers).
    pub fn run(&self, op: u32, body: &str) -> Result<Ran, Refusal> {
        let before = Before {
            type_id: self.type_id,
            object_id: self.object_id,
            version: self.version,
            state: self.state.as_deref(),
            mark: self.mark,
            player: self.player,
        };
        let invocation = Invocation::Request {
            op,
            body: body.as_bytes(),
        };
        self.library
            .with_vm(|vm| call::run(vm, &before, &invocation))
            .unwrap()
    }

    pub fn answer(&mut self, op: u32, body: &str) -> String {
        String::from_utf8(self.call(op, body).unwrap().answer).unwrap()
    }

    pub fn state(&self) -> serde_json::Value {
        serde_json::from_slice(self.state.as_deref().unwrap_or(b"null")).unwrap()
    }
}

pub(super) fn refusal_of(result: Result<Ran, Refusal>) -> (ErrorCode, String) {
    match result.err().expect("a refusal") {
        Refusal::Explained { code, reason } => (code, reason.to_string()),
        other => panic!("not an explained refusal: {other:?}"),
    }
}

#[test]
fn a_counter_adds_reads_and_keeps_its_state_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("counter.luau", COUNTER)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    assert_eq!(counter.answer(2001, r#"{"by": 2}"#), r#"{"n":7}"#);
    let get = counter.call(2002, r#"{"id": 7}"#).unwrap();
    assert_eq!(get.answer, br#"{"n":7}"#);
    assert!(get.changed.is_none(), "a read changes nothing: no save");
    assert_eq!(counter.answer(2003, "\u{1}\u{2}"), "got 2 bytes");
    assert_eq!(counter.state()["n"], 7);
    assert_eq!(counter.version, 1);
}

#[test]
fn an_error_or_an_overrun_leaves_the_state_and_lets_nothing_out() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with_push().replace(
        "return { n = state.n }\n    end,\n    [\"counter.get\"]",
        "ctx:push(7, 2010, \"hi\")\n      if req.spin then while true do end end\n      \
         if req.escape then while true do pcall(function() while true do end end) end end\n      \
         return { n = state.n }\n    end,\n    [\"counter.get\"]",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 20_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    let ran = counter.call(2001, r#"{"by": 5}"#).unwrap();
    assert_eq!(ran.effects.pushes.len(), 1);
    let before = counter.state.clone();

    let (code, reason) = refusal_of(counter.call(2001, r#"{"by": 2000000}"#));
    assert_eq!(
        (code, reason.as_str()),
        (ErrorCode::BadRequest, "counter would pass 1000000")
    );
    assert_eq!(counter.state, before);

    let (code, reason) = refusal_of(counter.call(
        2001,
        r#"{"by": 1}"#.replace('}', r#","spin":true}"#).as_str(),
    ));
    assert_eq!(code, ErrorCode::Internal);
    assert!(reason.contains("budget of 20000 us"), "{reason}");
    assert_eq!(counter.state, before, "the +1 before the loop is dropped");

    let (code, reason) = refusal_of(counter.call(2001, r#"{"by": 1, "escape": true}"#));
    assert_eq!(code, ErrorCode::Internal);
    assert!(
        reason.contains("budget"),
        "a pcall cannot swallow the overrun: {reason}"
    );

    let (code, reason) = refusal_of(counter.call(2001, r#"{"by": "x"}"#));
    assert_eq!(code, ErrorCode::BadRequest, "{reason}");
    // And the object goes on serving.
    assert_eq!(counter.answer(2001, r#"{"by": 1}"#), r#"{"n":6}"#);
}

#[test]
fn a_plain_error_is_internal_with_the_scripts_words() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER.replace(
        "state.n += req.by",
        "state.n += req.by\n      if req.by == 3 then error(\"three is bad\") end",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    let (code, reason) = refusal_of(counter.call(2001, r#"{"by": 3}"#));
    assert_eq!(code, ErrorCode::Internal);
    assert!(
        reason.contains("counter.luau:") && reason.contains("three is bad"),
        "{reason}"
    );
    assert_eq!(counter.state, None, "nothing was created");
}

#[test]
fn the_sandbox_has_no_io_os_require_load_or_debug_and_bounds_memory() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER.replace(
        "return { n = state.n }\n    end,\n    [\"counter.raw\"]",
        "local out = {}\n      for _, name in ipairs({\"io\", \"os\", \"require\", \"loadstring\", \"load\", \"debug\", \"getfenv\", \"collectgarbage\", \"print\", \"newproxy\"}) do\n        \
         if _G[name] ~= nil then table.insert(out, name) end\n      end\n      \
         if req.big then local s = string.rep(\"x\", 1024) for i = 1, 20 do s = s .. s end end\n      \
         return out\n    end,\n    [\"counter.raw\"]",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 1_000_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(
        counter.answer(2002, r#"{"id": 7}"#),
        "{}",
        "every one of them is absent"
    );
    let (code, reason) = refusal_of(counter.call(2002, r#"{"id": 7, "big": true}"#));
    assert_eq!(code, ErrorCode::Internal);
    assert!(reason.contains("memory"), "{reason}");
    assert_eq!(
        counter.answer(2002, r#"{"id": 7}"#),
        "{}",
        "serving after the refusal"
    );
}

#[test]
fn bad_files_stop_the_load_naming_file_line_and_cause() {
    let cases = [
        (
            "return {\n  type_id = 200,\n  name = \"x\" +\n}\n",
            "x.luau:4: Expected",
        ),
        (
            &*COUNTER.replace("type_id = 200", "type_id = 5"),
            "x.luau:5: type_id must be between 100",
        ),
        (
            &*COUNTER.replace("version = 1,", "version = 0,"),
            "x.luau:7: version must be 1 or more",
        ),
        (
            &*COUNTER.replace(
                "[\"counter.get\"] = function",
                "[\"counter.gte\"] = function",
            ),
            "x.luau:12: route counter.get: no function in handlers for it",
        ),
        (
            &*COUNTER.replace("key = \"field:id\"", "key = \"body\""),
            "x.luau:12: route counter.get: key is",
        ),
        (
            &*counter_with_push().replace("id = 2010", "id = 2001"),
            "x.luau:11: push counter.changed: its id or name is declared twice",
        ),
        (
            &*COUNTER.replace(
                "\"counter.raw\", key",
                &format!("\"{}\", key", "r".repeat(65)),
            ),
            "x.luau:13: routes[3]: name must be 1 to 64 bytes",
        ),
        ("local t = {}\nt.x = nil + 1\nreturn t\n", "x.luau:2:"),
        ("return 5\n", "x.luau:1: the file must return a table"),
        (
            "while true do end\nreturn {}\n",
            "x.luau:1: its top level ran past 100 ms",
        ),
    ];
    for (text, wanted) in cases {
        let dir = tempfile::tempdir().unwrap();
        let error = library_of(dir.path(), &[("x.luau", text)], 10_000)
            .err()
            .expect("refused");
        let shown = dir.path().join(wanted).display().to_string();
        assert!(
            error.starts_with(&shown),
            "{error} should start with {shown}"
        );
        assert_eq!(error.lines().count(), 1, "{error}");
    }
    let dir = tempfile::tempdir().unwrap();
    let long = format!("{COUNTER}\n--{}\n", "x".repeat(4 << 20));
    let error = library_of(dir.path(), &[("long.luau", &long)], 10_000)
        .err()
        .expect("refused");
    assert!(
        error.contains("long.luau:0: the file is longer than"),
        "{error}"
    );
    let dir = tempfile::tempdir().unwrap();
    let error = library_of(
        dir.path(),
        &[("a.luau", COUNTER), ("b.luau", COUNTER)],
        10_000,
    )
    .err()
    .expect("a clash");
    assert!(
        error.contains("b.luau:5: its type_id or name is a.luau's too"),
        "{error}"
    );
}

#[test]
fn a_newer_version_migrates_an_older_state_in_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("inventory.luau", INVENTORY)], 10_000).unwrap();
    let mut inventory = Probe::new(&library, 201);
    inventory.version = 1;
    inventory.state = Some(br#"{"items":["sword","apple","apple"]}"#.to_vec());
    let list: serde_json::Value = serde_json::from_str(&inventory.answer(2102, "{}")).unwrap();
    assert_eq!(list["items"]["apple"], 2);
    assert_eq!(inventory.version, 2);
    assert_eq!(
        inventory.state()["items"]["sword"],
        1,
        "the migrated state is the one kept"
    );
    // A state newer than the script is refused, and kept: UNAVAILABLE,
    // which says the call did not run (a keyed retry runs again).
    inventory.version = 3;
    let (code, _) = refusal_of(inventory.call(2102, "{}"));
    assert_eq!(code, ErrorCode::Unavailable);
}

#[test]
fn a_reload_changes_behaviour_keeps_shape_and_keeps_the_old_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("counter.luau", COUNTER)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    let path = dir.path().join("counter.luau");
    std::fs::write(
        &path,
        COUNTER.replace("state.n += req.by", "state.n += req.by * 10"),
    )
    .unwrap();
    let answer = library.reload().unwrap();
    assert_eq!(answer["files"][0]["status"], "reloaded");
    assert_eq!(
        counter.answer(2001, r#"{"by": 1}"#),
        r#"{"n":15}"#,
        "new code, old state"
    );

    std::fs::write(&path, "return {").unwrap();
    let refused = library.reload().unwrap_err();
    assert_eq!(refused["files"][0]["status"], "kept");
    assert!(refused["files"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("counter.luau:1"));
    assert_eq!(
        counter.answer(2001, r#"{"by": 1}"#),
        r#"{"n":25}"#,
        "the loaded version serves"
    );

    std::fs::write(&path, COUNTER.replace("id = 2001", "id = 2011")).unwrap();
    let refused = library.reload().unwrap_err();
    assert!(refused["files"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("routes cannot change"));
    std::fs::write(&path, COUNTER.replace("type_id = 200", "type_id = 210")).unwrap();
    let refused = library.reload().unwrap_err();
    assert!(refused["files"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("type_id and name"));
    std::fs::write(&path, COUNTER).unwrap();
    std::fs::write(dir.path().join("new.luau"), INVENTORY).unwrap();
    let refused = library.reload().unwrap_err();
    assert_eq!(refused["files"][0]["status"], "reloaded", "{refused}");
    assert_eq!(refused["files"][1]["file"], "new.luau");
    assert_eq!(
        refused["files"][1]["status"], "refused",
        "a new type needs a restart"
    );
}

#[test]
fn a_saved_state_is_shown_to_operators_as_its_json() {
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("counter.luau", COUNTER)], 10_000).unwrap();
    let mut registry = crate::object::Registry::default();
    library.register(&mut registry).unwrap();
    let mut counter = Probe::new(&library, 200);
    counter.answer(2001, r#"{"by": 5}"#);
    // As the store keeps it: the object API's version 1, the script's
    // version, the JSON.
    let mut saved = vec![1, 0];
    saved.extend_from_slice(&counter.version.to_le_bytes());
    saved.extend_from_slice(counter.state.as_deref().unwrap());
    let key = crate::object::ObjectKey::new(200, 0, 7);
    let view = registry.debug_view(key, &saved).expect("a view");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&view).unwrap(),
        serde_json::json!({ "n": 5 })
    );
    // An object whose init has not run: null.
    let unset = [&[1, 0][..], &1u32.to_le_bytes(), b"null"].concat();
    assert_eq!(registry.debug_view(key, &unset).as_deref(), Some("null"));
}

#[test]
fn ctx_is_read_only_and_each_call_sees_its_own_fields() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER.replace(
        RAW_HANDLER_BODY,
        "local seen = { player = ctx.player, key = ctx.key, left = ctx.left, push = type(ctx.push) }\n      \
         if req == \"write\" then ctx.left = \"behind\" end\n      \
         if req == \"raw\" then rawset(ctx, \"player\", 1) end\n      \
         if req == \"meta\" then setmetatable(ctx, nil) end\n      \
         if req == \"freeze\" then table.freeze(ctx) end\n      \
         return seen",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut alice = Probe::new(&library, 200);
    let mut message = Probe::new(&library, 200);
    message.object_id = 8;
    message.player = None;
    let alice_sees = r#"{"key":7,"player":7,"push":"function"}"#;
    assert_eq!(alice.answer(2003, "x"), alice_sees);
    assert_eq!(
        message.answer(2003, "x"),
        r#"{"key":8,"push":"function"}"#,
        "no player without a session"
    );
    for change in ["write", "raw", "meta", "freeze"] {
        let (code, reason) = refusal_of(alice.call(2003, change));
        assert_eq!(code, ErrorCode::Internal, "{change}: {reason}");
        assert!(
            reason.contains("readonly") || reason.contains("frozen"),
            "{change}: {reason}"
        );
        assert_eq!(alice.answer(2003, "x"), alice_sees, "after {change}");
        assert_eq!(message.answer(2003, "x"), r#"{"key":8,"push":"function"}"#);
    }
}

/// A file's own top-level locals live in its core's VM: every object of
/// the type on that core sees the same ones, they are not part of any
/// object's state, and a reload starts them afresh (docs/scripts.md says
/// so, and to keep an object's data in `state`).
#[test]
fn a_files_top_level_locals_are_the_cores_not_an_objects() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "local calls = 0\n{}",
        COUNTER.replace(RAW_HANDLER_BODY, "calls += 1\n      return calls",)
    );
    assert!(script.contains("return calls"));
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut first = Probe::new(&library, 200);
    let mut second = Probe::new(&library, 200);
    second.object_id = 8;
    assert_eq!(first.answer(2003, "x"), "1");
    assert_eq!(
        second.answer(2003, "x"),
        "2",
        "shared by the core's objects"
    );
    assert_eq!(first.answer(2003, "x"), "3");
    assert_eq!(
        first.state(),
        serde_json::json!({"n": 0}),
        "not in the state"
    );
    // A reload that changes no file takes nothing: same generation, and
    // the locals stay.
    let generation = library.describe()["generation"].clone();
    let answer = library.reload().unwrap();
    assert_eq!(answer["files"][0]["status"], "unchanged", "{answer}");
    assert_eq!(answer["generation"], generation);
    assert_eq!(
        first.answer(2003, "x"),
        "4",
        "an unchanged reload leaves them"
    );
    let changed = format!("{script}-- changed\n");
    std::fs::write(dir.path().join("counter.luau"), changed).unwrap();
    library.reload().unwrap();
    assert_eq!(first.answer(2003, "x"), "1", "a reload starts them afresh");
}

#[test]
fn values_cross_into_json_and_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER.replace(
        "return { n = state.n }\n    end,\n    [\"counter.raw\"]",
        "if req.echo then return req end\n      \
         return { b = 1.5, a = { 1, 2, 3 }, [3] = true, c = {}, d = { [1] = \"x\", [3] = \"z\" },\n        \
           e = 2 ^ 53, f = -7, [2.5] = 0.1, [\"2.5\"] = \"later or earlier\", g = { { h = \"\\n\" } } }\n    end,\n    [\"counter.raw\"]",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    let answer = counter.answer(2002, r#"{"id": 7}"#);
    // 2.5 and "2.5" are one field: either value, whichever the walk met last.
    let (head, tail) = answer.split_once(r#","3":true,"#).expect(&answer);
    assert!(
        head == r#"{"2.5":"later or earlier""# || head == r#"{"2.5":0.1"#,
        "{answer}"
    );
    assert_eq!(
        tail,
        r#""a":[1,2,3],"b":1.5,"c":{},"d":{"1":"x","3":"z"},"e":9007199254740992,"f":-7,"g":[{"h":"\n"}]}"#
    );
    let body = r#"{"id":7,"echo":true,"list":[1,null,3.25,"s"],"deep":{"x":{"y":-1e300}},"big":18446744073709551615}"#;
    assert_eq!(
        counter.answer(2002, body),
        r#"{"big":1.8446744073709552e+19,"deep":{"x":{"y":-1e+300}},"echo":true,"id":7,"list":{"1":1,"3":3.25,"4":"s"}}"#
    );
}

#[test]
fn a_global_a_file_defines_wins_over_the_builtin_of_that_name() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER
        .replacen(
            "return {",
            "function tostring(x) return \"mine\" end\nreturn {",
            1,
        )
        .replace(
            "[\"counter.get\"] = function(ctx, state, req)\n      return { n = state.n }",
            "[\"counter.get\"] = function(ctx, state, req)\n      \
             return { n = state.n, t = tostring(5), u = type(5) }",
        );
    assert!(script.contains("u = type(5)"));
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(
        counter.answer(2002, r#"{"id": 7}"#),
        r#"{"n":0,"t":"mine","u":"number"}"#
    );
}

/// `ctx`'s methods are shared by every object of the core, of every type:
/// a script that could replace one would see what other objects push.
#[test]
fn a_script_cannot_replace_ctxs_methods() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with_push().replace(
        RAW_HANDLER_BODY,
        "if req == \"replace\" then getmetatable(ctx).__index.push = function() end end\n      \
         if req == \"swap\" then getmetatable(ctx).__index = {} end\n      \
         ctx:push(ctx.player, 2010, req)\n      \
         return \"pushed\"",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut alice = Probe::new(&library, 200);
    for attempt in ["replace", "swap"] {
        let (code, reason) = refusal_of(alice.call(2003, attempt));
        assert_eq!(code, ErrorCode::Internal, "{attempt}");
        assert!(reason.contains("readonly"), "{attempt}: {reason}");
    }
    let ran = alice.call(2003, "x").unwrap();
    assert_eq!(ran.effects.pushes, vec![(7, 2010, b"x".to_vec())]);
}

/// `ctx:push` takes only a route a script declares in `pushes`: the
/// gateway drops a push on a request route, and would deliver one on
/// routerd's own routes (`sys.redirect`, `sys.kicked`) in its name.
#[test]
fn a_push_goes_only_on_a_declared_push_route() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with_push().replace(
        RAW_HANDLER_BODY,
        "ctx:push(ctx.player, tonumber(req), \"x\")\n      return \"pushed\"",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut alice = Probe::new(&library, 200);
    let ran = alice.call(2003, "2010").unwrap();
    assert_eq!(ran.effects.pushes, vec![(7, 2010, b"x".to_vec())]);
    for route in ["102", "101", "2003"] {
        let (code, reason) = refusal_of(alice.call(2003, route));
        assert_eq!(code, ErrorCode::Internal, "{route}");
        assert!(reason.contains("no push route"), "{route}: {reason}");
    }
}

/// Ids past 2^53 reach a script exactly, as decimal text: as numbers,
/// players 2^53 and 2^53 + 1 were one `ctx.player`, and a push to the
/// second's `ctx.player` went to the first.
#[test]
fn ids_past_what_a_number_holds_reach_a_script_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with_push().replace(
        RAW_HANDLER_BODY,
        "ctx:push(ctx.player, 2010, \"x\")\n      \
         return type(ctx.player) .. \" \" .. tostring(ctx.player)",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let far = (1u64 << 53) + 1;
    let mut probe = Probe::new(&library, 200);
    probe.player = Some(far);
    let ran = probe.call(2003, "").unwrap();
    assert_eq!(ran.answer, format!("string {far}").into_bytes());
    assert_eq!(ran.effects.pushes, vec![(far, 2010, b"x".to_vec())]);
    probe.player = Some(7);
    assert_eq!(probe.answer(2003, ""), "number 7");
}

/// The memory bound is on what the scripts hold, not on garbage Luau has
/// not collected yet: Luau collects nothing when an allocation fails, so
/// a core holding more than half its bound would refuse calls whose
/// garbage the next collection would have freed.
#[test]
fn garbage_not_yet_collected_does_not_count_against_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "local held = {{}}\n{}",
        COUNTER.replace(
            RAW_HANDLER_BODY,
            "if req == \"hold\" then\n        \
             for i = 1, 5 do held[i] = string.rep(tostring(i), 1024 * 1024) end\n        \
             return \"held\"\n      end\n      \
             local garbage = string.rep(\"g\", 256 * 1024) .. tostring(#held)\n      \
             return #garbage",
        )
    );
    assert!(script.contains("garbage"));
    // library_of bounds each core's scripts at 8 MiB; 5 MiB stay held.
    let library = library_of(dir.path(), &[("counter.luau", &script)], 1_000_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2003, "hold"), "held");
    for call in 0..64 {
        let answer = counter.call(2003, "x").map(|ran| ran.answer);
        assert_eq!(answer, Ok(b"262145".to_vec()), "call {call}");
    }
}

/// What a call asks `ctx` for is held outside the VM until the call
/// returns, so it counts against the memory bound beside the VM's own: a
/// loop of pushes or sends, each within the body bound, would otherwise
/// hold any amount of the node's memory (here 64 MiB against a bound of
/// 8 MiB) and hand it all on.
#[test]
fn what_a_call_asks_for_counts_against_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let script = "local held = {}\n".to_string() + &counter_with_push().replace(
        RAW_HANDLER_BODY,
        "state.last = req\n      \
         local chunk = string.rep(\"x\", 32 * 1024)\n      \
         if req == \"hold\" then for i = 1, 4 do held[i] = string.rep(tostring(i), 1024 * 1024) end end\n      \
         if req == \"garbage\" then local dropped = string.rep(\"g\", 2 * 1024 * 1024) end\n      \
         local count = if req == \"many\" then 2048 elseif req == \"garbage\" then 96 else 8\n      \
         for i = 1, count do\n        \
           if i % 2 == 0 then ctx:push(7, 2010, chunk) else ctx:send(\"counter\", i, \"counter.raw\", chunk) end\n      \
         end\n      \
         return count",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 5_000_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    let ran = counter.call(2003, "few").unwrap();
    assert_eq!((ran.effects.pushes.len(), ran.effects.sends.len()), (4, 4));
    let before = counter.state.clone();
    let (code, reason) = refusal_of(counter.call(2003, "many"));
    assert_eq!(code, ErrorCode::Internal);
    assert!(reason.contains("scripts.memory_max_bytes"), "{reason}");
    assert_eq!(counter.state, before, "the refused call changed nothing");
    // 4 MiB held, 2 MiB of garbage and 3 MiB of effects: garbage does not
    // count against the bound (Luau's own pace or the effects' full
    // collection frees it).
    counter.call(2003, "hold").unwrap();
    let ran = counter.call(2003, "garbage").unwrap();
    assert_eq!(ran.effects.pushes.len() + ran.effects.sends.len(), 96);
}

/// What a call asks ctx for and what its VM holds share one bound: after
/// 6 MiB of sends, 4 MiB more inside the VM passes the 8 MiB bound. Before,
/// the VM's own limit stayed at the whole bound, so a call could hold
/// twice it.
#[test]
fn the_vm_may_allocate_only_what_the_calls_effects_leave_of_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER.replace(
        RAW_HANDLER_BODY,
        "local chunk = string.rep(\"x\", 32 * 1024)\n      \
         for i = 1, 192 do ctx:send(\"counter\", i, \"counter.raw\", chunk) end\n      \
         if req == \"grow\" then local big = string.rep(\"y\", 4 * 1024 * 1024) return #big end\n      \
         return 0",
    );
    let library = library_of(dir.path(), &[("counter.luau", &script)], 5_000_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.call(2003, "stay").unwrap().effects.sends.len(), 192);
    let (code, reason) = refusal_of(counter.call(2003, "grow"));
    assert_eq!(code, ErrorCode::Internal);
    assert!(reason.contains("memory"), "{reason}");
    assert_eq!(counter.call(2003, "stay").unwrap().effects.sends.len(), 192);
}

/// A table may hold one table many times over: its JSON then repeats it,
/// and a few lines of script describe more text than any node holds. The
/// answer, a push and the state are each written only up to the most a
/// client is sent (`gateway.body_max_bytes`) or the store keeps
/// (`store.state_max_bytes`), and a call past it is refused.
#[test]
fn a_value_whose_json_would_pass_its_bound_is_refused_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let script = counter_with_push().replace(
        RAW_HANDLER_BODY,
        "local twice = { string.rep(\"x\", 1024) }\n      \
         for _ = 1, 40 do twice = { twice, twice } end\n      \
         if req == \"answer\" then return twice end\n      \
         if req == \"push\" then ctx:push(7, 2010, twice) return \"pushed\" end\n      \
         if req == \"state\" then state.twice = twice return \"kept\" end\n      \
         return \"none\"",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 1_000_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2003, "x"), "none");
    let before = counter.state.clone();
    for (asked, bound) in [
        ("answer", "gateway.body_max_bytes"),
        ("push", "gateway.body_max_bytes"),
        ("state", "store.state_max_bytes"),
    ] {
        let started = std::time::Instant::now();
        let (code, reason) = refusal_of(counter.call(2003, asked));
        assert_eq!(code, ErrorCode::Internal, "{asked}");
        assert!(reason.contains(bound), "{asked}: {reason}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{asked}"
        );
        assert_eq!(counter.state, before, "{asked}");
    }
}

/// A timer's name waits outside the VM until the timer fires, up to 64 of
/// them an object: it is a label, bounded, so pending timers cannot hold
/// what the memory bound keeps from the VM.
#[test]
fn a_timer_name_is_a_label_of_at_most_256_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let script = COUNTER.replace(
        RAW_HANDLER_BODY,
        "ctx:timer(1000, string.rep(\"t\", tonumber(req)))\n      return \"set\"",
    );
    assert_ne!(script, COUNTER);
    let library = library_of(dir.path(), &[("counter.luau", &script)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    let ran = counter.call(2003, "256").unwrap();
    assert_eq!(ran.effects.timers, vec![(1000, "t".repeat(256))]);
    let (code, reason) = refusal_of(counter.call(2003, "257"));
    assert_eq!(code, ErrorCode::Internal);
    assert!(reason.contains("longer than 256 bytes"), "{reason}");
}

#[test]
fn a_reload_compiles_once_so_a_cores_next_call_does_not_pause_for_it() {
    // A large file (2 MiB of functions before the counter): its compile
    // is the reload's cost, paid on the reloading thread. A core's first
    // call after the reload loads the compiled code and runs the top
    // level; compiling there again took as long as the reload.
    let mut text = "local M = {}\n".to_string();
    let body = "  for k = 1, a do t[k] = b * k + 1 end\n".repeat(100);
    for i in 0.. {
        if text.len() >= 2 << 20 {
            break;
        }
        text.push_str(&format!(
            "M.f{i} = function(a, b)\n  local t = {{}}\n{body}  return t\nend\n"
        ));
    }
    text.push_str(COUNTER);
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("counter.luau", &text)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    let changed = text.replace("state.n += req.by", "state.n += req.by * 10");
    std::fs::write(dir.path().join("counter.luau"), changed).unwrap();
    let started = std::time::Instant::now();
    library.reload().unwrap();
    let reload = started.elapsed();
    let started = std::time::Instant::now();
    assert_eq!(counter.answer(2001, r#"{"by": 1}"#), r#"{"n":15}"#);
    let first_call = started.elapsed();
    assert!(
        first_call * 4 < reload,
        "the first call after the reload took {first_call:?}, the reload {reload:?}"
    );
}

#[test]
fn files_that_load_alone_but_not_together_are_refused_at_the_load_and_the_reload() {
    // Each file keeps 5 MiB in a top-level local, under the 8 MiB bound
    // alone; a core's VM holds every file, so it could not load both and
    // every call of every scripted type on it would fail.
    let big = |text: &str| format!("local kept = string.rep(\"x\", 5 * 1024 * 1024)\n{text}");
    let other = COUNTER
        .replace("type_id = 200", "type_id = 201")
        .replace("name = \"counter\"", "name = \"other\"")
        .replace("2001", "2101")
        .replace("2002", "2102")
        .replace("2003", "2103");
    let dir = tempfile::tempdir().unwrap();
    let error = library_of(
        dir.path(),
        &[("a.luau", &big(COUNTER)), ("b.luau", &big(&other))],
        10_000,
    )
    .err()
    .expect("refused");
    assert!(error.contains("b.luau:"), "{error}");
    assert!(error.contains("after the files before it"), "{error}");
    assert!(error.contains("scripts.memory_max_bytes"), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");

    // Loaded small, then reloaded big: the old generation stays and serves.
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(
        dir.path(),
        &[("a.luau", COUNTER), ("b.luau", &other)],
        10_000,
    )
    .unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    std::fs::write(dir.path().join("a.luau"), big(COUNTER)).unwrap();
    std::fs::write(dir.path().join("b.luau"), big(&other)).unwrap();
    let refused = library.reload().unwrap_err();
    assert_eq!(refused["generation"], 1, "{refused}");
    for file in refused["files"].as_array().unwrap() {
        assert_eq!(file["status"], "kept", "{refused}");
    }
    assert!(refused["files"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("after the files before it"));
    assert_eq!(counter.answer(2001, r#"{"by": 1}"#), r#"{"n":6}"#);
}

#[test]
fn a_core_that_cannot_build_its_vm_answers_why_and_tries_again_later_not_at_each_call() {
    let dir = tempfile::tempdir().unwrap();
    let library = library_of(dir.path(), &[("counter.luau", COUNTER)], 10_000).unwrap();
    let mut counter = Probe::new(&library, 200);
    assert_eq!(counter.answer(2001, r#"{"by": 5}"#), r#"{"n":5}"#);
    // A generation this core cannot load (its compiled code broken here;
    // a busy core past a top level's budget is the real case, which the
    // load's check makes rare).
    let old = library.generation();
    let mut files = old.files.clone();
    files[0].bytecode = Arc::from(&b"\0:1: broken on purpose"[..]);
    let number = old.number + 1;
    *library.current.write().unwrap() = Arc::new(super::Generation { number, files });
    library
        .current_number
        .store(number, std::sync::atomic::Ordering::Release);
    let first = library.with_vm(|_| ()).unwrap_err();
    assert!(first.contains("broken on purpose"), "{first}");
    assert!(!first.contains("tries again"), "built and failed: {first}");
    let again = library.with_vm(|_| ()).unwrap_err();
    assert!(again.contains("broken on purpose"), "{again}");
    assert!(
        again.contains("tries again 5 s after"),
        "not built: {again}"
    );

    // A reload that changes a file is a new generation: built at once.
    let changed = format!("{COUNTER}-- changed\n");
    std::fs::write(dir.path().join("counter.luau"), changed).unwrap();
    library.reload().unwrap();
    assert_eq!(counter.answer(2001, r#"{"by": 1}"#), r#"{"n":6}"#);
}

#[test]
fn a_file_is_compiled_with_the_options_a_text_load_uses() {
    // Cores load what `compile` made; a text load, as cores did before,
    // compiles with Luau's defaults (no options). Other options (another
    // debug or optimization level) change the bytecode, and may change
    // what a call runs and what it costs.
    let ours = super::vm::compile("counter.luau", COUNTER).unwrap();
    let mut size = 0usize;
    // SAFETY: Luau reads `size` bytes of the source and returns a buffer
    // of `size` bytes it allocated with malloc, copied and then freed here.
    let defaults = unsafe {
        let data = mlua::ffi::luau_compile_(
            COUNTER.as_ptr().cast(),
            COUNTER.len(),
            std::ptr::null_mut(),
            &mut size,
        );
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), size).to_vec();
        libc::free(data.cast());
        bytes
    };
    assert_eq!(ours, defaults);
}
