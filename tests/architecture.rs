//! The layering docs/architecture.md draws, held to the code: every
//! `crate::` import of a shipped file names a module its layer may import,
//! no top-level modules import each other through a circle of any length,
//! and no shipped file is over `SHIPPED_FILE_LINES_MAX` lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each may import, besides the ground floor
/// (`clock`, `route`, `config`, `metrics`, `in_place`, `page`, `ids`,
/// `gateway_addresses`, `answer_gate`), as the table of docs/architecture.md says. `None`: anything (assembly, test
/// machinery).
fn allowed(module: &str) -> Option<&'static [&'static str]> {
    Some(match module {
        "clock" | "route" | "config" | "in_place" | "page" | "ids" | "gateway_addresses"
        | "answer_gate" => &[],
        "metrics" => &["route"],
        "store" => &["config", "metrics"],
        "catalog" => &[],
        "router" => &["store", "metrics", "clock", "route", "config", "in_place"],
        "gateway" => &["route", "metrics", "config"],
        "cluster" => &["router", "catalog", "store", "clock", "metrics", "config"],
        "object" => &["router", "catalog", "route", "config", "in_place"],
        "builtins" => &["object", "catalog", "route", "config"],
        "scripts" => &["object", "route", "config"],
        "ops" => &["router", "gateway", "cluster", "store", "config"],
        "admin" => &[
            "ops", "cluster", "builtins", "scripts", "metrics", "store", "clock",
        ],
        "cli" => &["ops", "builtins", "config"],
        "node" | "builder" | "testing" | "sim" | "lib" | "main" => return None,
        other => panic!("module {other} is not in docs/architecture.md's table"),
    })
}

const GROUND_FLOOR: [&str; 9] = [
    "answer_gate",
    "clock",
    "route",
    "config",
    "metrics",
    "in_place",
    "page",
    "ids",
    "gateway_addresses",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// Whether a file under `src/` holds only tests (`*_tests.rs`,
/// `tests*.rs`, or anything in a `tests` folder): it is not shipped.
fn is_test_file(relative: &Path) -> bool {
    relative
        .iter()
        .any(|part| part.to_string_lossy().contains("tests"))
}

/// The code of a shipped file: without its unit tests and comments.
fn shipped_code(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::name` paths in `code`.
fn imported(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `crate::VERSION` and the like are the crate root's own items.
        if name.starts_with(|c: char| c.is_ascii_lowercase()) {
            names.insert(name);
        }
    }
    names
}

fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        if is_test_file(relative) {
            continue;
        }
        let first = relative.iter().next().unwrap().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let targets = graph.entry(module.clone()).or_default();
        for name in imported(&shipped_code(&text)) {
            if name != module {
                targets.insert(name);
            }
        }
    }
    graph
}

#[test]
fn every_import_names_a_module_its_layer_may_import() {
    let graph = import_graph();
    assert!(graph.contains_key("router") && graph.contains_key("gateway"));
    let mut wrong = Vec::new();
    for (module, targets) in &graph {
        let Some(allowed) = allowed(module) else {
            continue;
        };
        for target in targets {
            let ground =
                GROUND_FLOOR.contains(&target.as_str()) && !GROUND_FLOOR.contains(&module.as_str());
            if !ground && !allowed.contains(&target.as_str()) {
                wrong.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers: {wrong:?}");
}

#[test]
fn no_two_modules_import_each_other() {
    let graph = import_graph();
    let mut circles = Vec::new();
    for (module, targets) in &graph {
        for target in targets {
            let back = graph.get(target).is_some_and(|t| t.contains(module));
            if back && module < target {
                circles.push(format!("{module} <-> {target}"));
            }
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:?}");
}

/// The router's own modules (a file or a folder under `src/router/`, its
/// `mod.rs` aside: the folder's door re-exports them all) that `code` in a
/// file `depth` folders below `src/router/` imports, by `super::` or
/// `crate::router::` paths.
fn router_imports(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let prefixes = ["crate::router::".to_string(), "super::".repeat(depth + 1)];
    for prefix in &prefixes {
        let mut rest = code;
        while let Some(at) = rest.find(prefix.as_str()) {
            // `super::super::x` also holds `super::x`: only whole prefixes.
            let before = &code[..code.len() - rest.len() + at];
            rest = &rest[at + prefix.len()..];
            if prefix.starts_with("super") && before.ends_with("super::") {
                continue;
            }
            if rest.starts_with("super::") {
                continue;
            }
            let group = match rest.strip_prefix('{') {
                Some(inner) => &inner[..inner.find('}').unwrap_or(inner.len())],
                None => rest,
            };
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with(|c: char| c.is_ascii_lowercase()) && name != "self" {
                    names.insert(name);
                }
                if rest.starts_with(|c: char| c != '{') {
                    break;
                }
            }
        }
    }
    names
}

/// The steps `code` names through a `steps::` path (`steps::save`, or
/// `steps::{claim, pull, Next}`).
fn steps_named(code: &str, step_names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("steps::") {
        let rest = &code[at + "steps::".len()..];
        let group = match rest.strip_prefix('{') {
            Some(inner) => &inner[..inner.find('}').unwrap_or(inner.len())],
            None => rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or(""),
        };
        for item in group.split(',') {
            let name = item.trim().split("::").next().unwrap_or("").trim();
            if step_names.contains(name) {
                named.insert(name.to_string());
            }
        }
    }
    named
}

/// The import graph of `src/router/`'s modules (a folder is one module),
/// and, for the files of `src/router/steps/`, what each imports of the
/// others.
fn router_graph() -> (
    BTreeMap<String, BTreeSet<String>>,
    BTreeMap<String, BTreeSet<String>>,
) {
    let router = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/router");
    let mut files = Vec::new();
    rust_files(&router, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut steps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let step_names: BTreeSet<String> = std::fs::read_dir(router.join("steps"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap() != "mod.rs")
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for file in files {
        let relative = file.strip_prefix(&router).unwrap();
        let file_name = relative.file_name().unwrap().to_string_lossy().into_owned();
        if file_name.contains("tests") {
            continue;
        }
        let parts: Vec<String> = relative
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        let module = parts[0].trim_end_matches(".rs").to_string();
        if module == "mod" {
            continue;
        }
        // A folder's `mod.rs` sits at its folder's depth.
        let depth = parts.len() - if file_name == "mod.rs" { 2 } else { 1 };
        let code = shipped_code(&std::fs::read_to_string(&file).unwrap());
        let targets = graph.entry(module.clone()).or_default();
        for name in router_imports(&code, depth) {
            if name != module {
                targets.insert(name);
            }
        }
        if module == "steps" && file_name != "mod.rs" {
            let own = file_name.trim_end_matches(".rs").to_string();
            // A sibling step is `super::name` from here, or a path through
            // `steps::`.
            let mut siblings = BTreeSet::new();
            for name in router_imports(&code, 0) {
                if step_names.contains(&name) && name != own {
                    siblings.insert(name);
                }
            }
            siblings.extend(steps_named(&code, &step_names));
            siblings.remove(&own);
            steps.insert(own, siblings);
        } else if module != "core" && module != "events" {
            let ran = steps_named(&code, &step_names);
            if !ran.is_empty() {
                steps.insert(format!("{module} (not a step)"), ran);
            }
        }
    }
    (graph, steps)
}

/// No step file names another, and no router module but the dispatcher
/// (`core.rs`) and the events that enter steps (`events/`) names a step.
#[test]
fn no_router_step_imports_another_step() {
    let (_, steps) = router_graph();
    for step in ["route", "pull", "claim", "save", "transfer", "release"] {
        assert!(steps.contains_key(step), "no step file {step}.rs");
    }
    let wrong: Vec<String> = steps
        .iter()
        .flat_map(|(step, others)| others.iter().map(move |other| format!("{step} -> {other}")))
        .collect();
    assert!(
        wrong.is_empty(),
        "steps named outside the dispatcher and the events (only core.rs chains them): {wrong:?}"
    );
}

/// The router core's event handlers (`on_*`, and the operator's and the
/// membership's calls) live in `events/`, one file per family, and those
/// files do not call one another's handlers through imports: `core.rs`
/// holds the core and the dispatcher alone.
#[test]
fn router_events_live_in_their_family_files() {
    let router = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/router");
    let core = shipped_code(&std::fs::read_to_string(router.join("core.rs")).unwrap());
    let handlers_in_core: Vec<&str> = core
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("pub fn on_") || line.starts_with("pub(crate) fn on_"))
        .collect();
    assert!(
        handlers_in_core.is_empty(),
        "event handlers in core.rs (they go in events/): {handlers_in_core:?}"
    );
    let families = [
        ("requests", "fn on_request("),
        ("node_messages", "fn on_node_message("),
        ("store_replies", "fn on_store_reply("),
        ("membership", "fn fence("),
        ("timers", "fn on_timer("),
        ("admin", "fn transfer("),
    ];
    for (family, handler) in families {
        let path = router.join("events").join(format!("{family}.rs"));
        let code = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("no event family file events/{family}.rs"));
        assert!(
            code.contains(handler),
            "events/{family}.rs has no `{handler}`"
        );
        for (other, _) in families {
            assert!(
                !code.contains(&format!("{other}::")),
                "events/{family}.rs names events/{other}.rs"
            );
        }
    }
}

#[test]
fn the_router_modules_form_no_circle() {
    let (graph, _) = router_graph();
    assert!(graph["core"].contains("steps") && graph["steps"].contains("entry"));
    // A depth-first walk: a module met again on the path is a circle.
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_string());
            return Some(circle);
        }
        if !done.insert(module.to_string()) {
            return None;
        }
        path.push(module.to_string());
        for target in graph.get(module).into_iter().flatten() {
            if let Some(circle) = walk(graph, target, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(circle) = walk(&graph, module, &mut Vec::new(), &mut done) {
            panic!("router modules import in a circle: {}", circle.join(" -> "));
        }
    }
}

/// A path of imports from `module` back to `start`, if there is one, found
/// depth first; `path` holds the modules walked so far.
fn circle_back<'g>(
    graph: &'g BTreeMap<String, BTreeSet<String>>,
    start: &str,
    module: &'g str,
    path: &mut Vec<&'g str>,
    seen: &mut BTreeSet<&'g str>,
) -> bool {
    let Some(targets) = graph.get(module) else {
        return false;
    };
    for target in targets {
        if target == start {
            return true;
        }
        if seen.insert(target.as_str()) {
            path.push(target.as_str());
            if circle_back(graph, start, target, path, seen) {
                return true;
            }
            path.pop();
        }
    }
    false
}

/// Circles through three folders or more, which the pairwise check above
/// cannot see (`a -> b -> c -> a`).
#[test]
fn no_circle_of_imports_between_folders() {
    let graph = import_graph();
    let mut circles = Vec::new();
    for module in graph.keys() {
        let mut path = vec![module.as_str()];
        let mut seen = BTreeSet::new();
        if circle_back(&graph, module, module, &mut path, &mut seen) {
            path.push(module.as_str());
            circles.push(path.join(" -> "));
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:?}");
}

/// The longest a shipped file under `src/` may be: past it a file holds
/// more than one idea and is split.
const SHIPPED_FILE_LINES_MAX: usize = 700;

#[test]
fn no_shipped_file_is_over_the_line_bound() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut oversized = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        if is_test_file(relative) {
            continue;
        }
        let name = relative.to_string_lossy().replace('\\', "/");
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        if lines > SHIPPED_FILE_LINES_MAX {
            oversized.push(format!("{name}: {lines} lines"));
        }
    }
    assert!(
        oversized.is_empty(),
        "files over {SHIPPED_FILE_LINES_MAX} lines: {oversized:?}"
    );
}

/// The longest a shipped function may be, in lines of code (comments
/// left out): past it a function does more than one thing, and is split
/// into named phases.
const SHIPPED_FN_LINES_MAX: usize = 70;

/// The shipped functions over `SHIPPED_FN_LINES_MAX` today, as
/// `path::name`: each one is split when its file is next changed, and
/// taken off this list; the test fails on one not listed, and on a
/// listed one that is no longer long (so the list only shrinks).
const LONG_FNS_ALLOWED: &[&str] = &[];

/// The crates' shipped source folders (their `src/`).
const SHIPPED_SOURCES: [&str; 4] = ["src", "shards/src", "wire/src", "loadgen/src"];

/// Each function in `code` (a shipped file's code, comments out): its
/// name and how many lines it spans, signature to closing brace.
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        // A test (`#[test]` among the attributes above it) is not shipped.
        let attributes = lines[..at]
            .iter()
            .rev()
            .take_while(|line| line.trim_start().starts_with("#["));
        if attributes.into_iter().any(|line| line.trim() == "#[test]") {
            continue;
        }
        if let Some(end) = body_end(&lines[at..]) {
            found.push((name, end + 1));
        }
    }
    found
}

/// The name of the function a line declares, if it declares one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    loop {
        let word = words.next()?;
        match word {
            "pub" | "async" | "const" | "unsafe" | "extern" | "\"C\"" | "default" => {}
            _ if word.starts_with("pub(") => {}
            "fn" => {
                let rest = words.next()?;
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                return (!name.is_empty()).then_some(name);
            }
            _ => return None,
        }
    }
}

/// The index (from the signature's line) of the line closing the body
/// that follows; `None` for a declaration without one (`fn f();`).
fn body_end(lines: &[&str]) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    for (index, line) in lines.iter().enumerate() {
        let mut chars = line.chars().peekable();
        let mut in_string = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' if in_string => {
                    chars.next();
                }
                '"' => in_string = !in_string,
                _ if in_string => {}
                '/' if chars.peek() == Some(&'/') => break,
                '\'' => {
                    // A char literal ('{', '\n'); a lifetime has no
                    // closing quote right after.
                    let rest: String = chars.clone().take(3).collect();
                    if rest.starts_with('\\') {
                        chars.nth(2);
                    } else if rest.chars().nth(1) == Some('\'') {
                        chars.nth(1);
                    }
                }
                ';' if !opened && depth == 0 => return None,
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if opened && depth == 0 {
                        return Some(index);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

#[test]
fn no_shipped_function_is_over_the_line_bound() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = BTreeMap::new();
    for source in SHIPPED_SOURCES {
        let dir = root.join(source);
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for file in files {
            let relative = file.strip_prefix(&dir).unwrap();
            if is_test_file(relative) {
                continue;
            }
            let path = format!("{source}/{}", relative.to_string_lossy().replace('\\', "/"));
            let code = shipped_code(&std::fs::read_to_string(&file).unwrap());
            for (name, lines) in function_lengths(&code) {
                if lines > SHIPPED_FN_LINES_MAX {
                    long.insert(format!("{path}::{name}"), lines);
                }
            }
        }
    }
    let unlisted: Vec<String> = long
        .iter()
        .filter(|(name, _)| !LONG_FNS_ALLOWED.contains(&name.as_str()))
        .map(|(name, lines)| format!("{name}: {lines} lines"))
        .collect();
    let no_longer: Vec<&str> = LONG_FNS_ALLOWED
        .iter()
        .copied()
        .filter(|name| !long.contains_key(*name))
        .collect();
    assert!(
        unlisted.is_empty(),
        "{} functions over {SHIPPED_FN_LINES_MAX} lines: split them into named phases: \
         {unlisted:#?}",
        unlisted.len()
    );
    assert!(
        no_longer.is_empty(),
        "no longer over {SHIPPED_FN_LINES_MAX} lines: take them off LONG_FNS_ALLOWED: \
         {no_longer:?}"
    );
}

#[test]
fn the_function_length_count_sees_bodies_and_skips_declarations() {
    let code = "pub(crate) async fn a(x: u8) -> u8 {\n    let c = '{';\n    let s = \"}\";\n    \
                x\n}\nfn b();\nfn c<'a>(s: &'a str) {\n    if true {\n    }\n}\n";
    assert_eq!(
        function_lengths(code),
        [("a".to_string(), 5), ("c".to_string(), 4)]
    );
}

/// What `store` shows without the `testing` feature: the `Backend` trait
/// and the `Store` handle over it, the records a backend keeps (route
/// records, member rows, their versions and limits), the errors, and each
/// backend's opener. The in-memory tables, fault injection and the
/// membership lanes are public under `testing` only.
const STORE_FACE: &[&str] = &[
    "record",
    "POSTGRES_POOL_SIZE_MAX",
    "Backend",
    "BackendProbe",
    "Store",
    "StoreFuture",
    "BackendError",
    "LoadError",
    "MembershipError",
    "OpenError",
    "WriteError",
    "StoreHealth",
    "AdvertisedActor",
    "MemberCondition",
    "MemberOutcome",
    "MemberPage",
    "MemberPoll",
    "MemberRow",
    "MemberState",
    "MemberTimers",
    "MemberVersion",
    "MemberWrite",
    "TableVersion",
    "MEMBERS_PAGE_MAX",
    "MEMBER_ROW_BYTES_MAX",
    "POLL_ROWS_MAX",
    "open_postgres",
    "BATCH_BYTES_MAX",
    "POSTGRES_SCHEMA_VERSION",
    "CasVersion",
    "NodeId",
    "RecordWrite",
    "RouteRecord",
    "RouteVersion",
    "WriteCondition",
    "WriteOutcome",
    "open_scylla",
    "INTEGRITY_CHECK_MS_MAX",
    "open_sqlite",
    "GroupCommit",
    "SCHEMA_VERSION",
];

/// The names `code` (a module's `mod.rs`) makes `pub` (`pub mod`, `pub
/// use`) in a build without the `testing` feature: an item whose
/// attributes name `feature = "testing"` (and not its negation) is left
/// out, and so is anything `pub(crate)`.
fn public_without_testing(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut testing_only = false;
    let mut statement = String::new();
    for line in code.lines().map(str::trim) {
        if statement.is_empty() {
            if line.starts_with("#[") {
                testing_only |= line.contains("feature = \"testing\"")
                    && !line.contains("not(feature = \"testing\")");
                continue;
            }
            if !(line.starts_with("pub use ") || line.starts_with("pub mod ")) {
                if !line.starts_with("//") {
                    testing_only = false;
                }
                continue;
            }
        }
        statement.push_str(line);
        statement.push(' ');
        if !line.ends_with(';') {
            continue;
        }
        if !testing_only {
            let body = statement
                .trim_start_matches("pub mod ")
                .trim_start_matches("pub use ")
                .trim_end()
                .trim_end_matches(';');
            let items = match body.find('{') {
                Some(at) => body[at + 1..].trim_end_matches('}').to_string(),
                None => body.to_string(),
            };
            for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let name = item.rsplit(" as ").next().unwrap();
                names.insert(name.rsplit("::").next().unwrap().to_string());
            }
        }
        statement.clear();
        testing_only = false;
    }
    names
}

#[test]
fn the_store_shows_its_backend_trait_and_records_and_the_rest_only_to_tests() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/mod.rs");
    let public = public_without_testing(&std::fs::read_to_string(path).unwrap());
    let face: BTreeSet<String> = STORE_FACE.iter().map(|name| name.to_string()).collect();
    let beyond: Vec<&String> = public.difference(&face).collect();
    let missing: Vec<&String> = face.difference(&public).collect();
    assert!(
        beyond.is_empty(),
        "public in store without the testing feature, beyond its face (gate it behind \
         `testing`, or add it to STORE_FACE if it belongs to the backend trait or the \
         records): {beyond:?}"
    );
    assert!(
        missing.is_empty(),
        "in STORE_FACE but not public: {missing:?}"
    );
}

#[test]
fn the_store_face_count_skips_what_only_tests_see() {
    let code = "pub mod record;\n#[cfg(feature = \"testing\")]\npub mod health;\n\
                #[cfg(not(feature = \"testing\"))]\nmod health;\n#[cfg(feature = \"postgres\")]\n\
                pub use postgres::{\n    open_postgres, BATCH_BYTES_MAX,\n};\n\
                #[cfg(all(feature = \"postgres\", feature = \"testing\"))]\npub use postgres::lanes;\n\
                pub(crate) use crate::x::Y;\npub use a::b::C as D;\n";
    let names: Vec<String> = public_without_testing(code).into_iter().collect();
    assert_eq!(names, ["BATCH_BYTES_MAX", "D", "open_postgres", "record"]);
}
