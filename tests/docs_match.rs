//! The documents against the binary, so they cannot drift apart: every
//! config key the READMEs (the root one, the clients', the guild
//! example's), docs/ and every `--help` text name exists, no document uses
//! a key's old name, every config file under tuning/ loads, every document
//! and source file a file cites is in the repository, and every `routerd` command the
//! README shows names a real subcommand and real flags.

use std::path::{Path, PathBuf};
use std::process::Command;

use routerd::config::Config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The documents a user reads for keys and commands: the READMEs and
/// every page of docs/.
fn docs() -> Vec<String> {
    let mut docs = vec![
        "README.md".to_string(),
        "examples/guild/README.md".to_string(),
        "examples/scripts/README.md".to_string(),
    ];
    for dir in ["docs", "clients"] {
        let mut files = Vec::new();
        collect(&Path::new(ROOT).join(dir), &mut files);
        for file in files {
            let relative = file.strip_prefix(ROOT).unwrap().display().to_string();
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            let wanted = match dir {
                "docs" => name.ends_with(".md"),
                _ => name == "README.md",
            };
            if wanted {
                docs.push(relative);
            }
        }
    }
    docs.sort();
    docs
}

/// The config's top-level sections: a backticked `section.key` in a
/// document is a key of the config.
const SECTIONS: [&str; 10] = [
    "node", "cores", "gateway", "admin", "auth", "store", "cluster", "router", "services",
    "scripts",
];

/// Route names that look like `section.key`.
const ROUTE_NAMES: [&str; 2] = ["auth.login", "auth.resume"];

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path))
        .unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// Every `text` between backticks in `doc`.
fn backticked(doc: &str) -> Vec<&str> {
    doc.split('`').skip(1).step_by(2).collect()
}

/// `section.key` (or `services.room.key`) when `token` has that shape.
fn config_key(token: &str) -> Option<(Vec<&str>, &str)> {
    let token = token.split(['=', ' ']).next()?;
    let mut parts: Vec<&str> = token.split('.').collect();
    if parts.len() < 2 || !SECTIONS.contains(&parts[0]) {
        return None;
    }
    let shaped = parts.iter().all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    });
    if !shaped {
        return None;
    }
    let key = parts.pop()?;
    Some((parts, key))
}

/// Whether the config has `key` in the table `path`: a file that sets it
/// fails, if at all, for its value, never as an unknown field.
fn key_exists(path: &[&str], key: &str) -> bool {
    let text = format!("[{}]\n{key} = 0\n", path.join("."));
    match Config::from_toml(&text) {
        Ok(_) => true,
        // An old name the config still recognises, to say what it became,
        // is not a key either.
        Err(error) => !error.contains("unknown field") && !error.contains("was renamed to"),
    }
}

/// Checks `token` if it has the shape of a config key; pushes it to
/// `missing` (as `where`) when no config has it. Returns whether it was
/// checked.
fn check_key(token: &str, place: &str, missing: &mut Vec<String>) -> bool {
    let Some((path, key)) = config_key(token) else {
        return false;
    };
    // A route's name (`auth.login`) is no key of the `[auth]` section.
    if ROUTE_NAMES.contains(&token) {
        return false;
    }
    // `[services]` takes a section for any registered type, so only the
    // built-ins' keys are the binary's to check.
    if path == ["services"] {
        if !["player", "room"].contains(&key) {
            missing.push(format!("{place}: `{token}` (services has player and room)"));
        }
        return true;
    }
    if path[0] == "services" && !matches!(path.get(1), Some(&"player" | &"room")) {
        return false;
    }
    if !key_exists(&path, key) {
        missing.push(format!("{place}: `{token}`"));
    }
    true
}

/// The old name of a renamed key, alone (`max_body`): the config refuses
/// it in some section, naming the new one.
fn renamed_key(token: &str) -> Option<&'static str> {
    let shaped = !token.is_empty()
        && token
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !shaped {
        return None;
    }
    SECTIONS.into_iter().find(|section| {
        let text = format!("[{section}]\n{token} = 0\n");
        Config::from_toml(&text).is_err_and(|error| error.contains("was renamed to"))
    })
}

#[test]
fn every_config_key_the_docs_name_exists() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in docs() {
        let text = read(&doc);
        for token in backticked(&text) {
            if check_key(token, &doc, &mut missing) {
                checked += 1;
            }
            // routerd's own pages call a limit by its key's name; a client
            // library's option may keep its own (`max_body`).
            if !doc.starts_with("clients/") {
                if let Some(section) = renamed_key(token) {
                    missing.push(format!("{doc}: `{token}` (renamed in [{section}])"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys no config has:\n{}",
        missing.join("\n")
    );
    assert!(
        checked > 40,
        "only {checked} keys found: is the scan broken?"
    );
    // The check itself can fail: the keys the issue found are refused.
    assert!(!key_exists(&["gateway"], "max_body"));
    assert!(!key_exists(&["gateway"], "max_inflight"));
    assert!(key_exists(&["gateway"], "body_max_bytes"));
    assert_eq!(renamed_key("max_body"), Some("gateway"));
    assert_eq!(renamed_key("body_max_bytes"), None);
    let clients: Vec<String> = docs()
        .into_iter()
        .filter(|doc| doc.starts_with("clients/"))
        .collect();
    assert!(clients.len() >= 2, "the clients' READMEs: {clients:?}");
}

/// Every `--help` text of the binary: the top one, each subcommand's and
/// each `cluster` subcommand's.
fn help_texts() -> Vec<(String, String)> {
    let subcommands = |text: &str| -> Vec<String> {
        text.split("Commands:")
            .nth(1)
            .unwrap_or_default()
            .split("Options:")
            .next()
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|word| *word != "help")
            .map(str::to_string)
            .collect()
    };
    let top = help(&[]);
    let mut texts = vec![("routerd --help".to_string(), top.clone())];
    for sub in subcommands(&top) {
        let text = help(&[&sub]);
        for nested in subcommands(&text) {
            let nested_text = help(&[&sub, &nested]);
            texts.push((format!("routerd {sub} {nested} --help"), nested_text));
        }
        texts.push((format!("routerd {sub} --help"), text));
    }
    texts
}

#[test]
fn every_config_key_a_help_text_names_exists() {
    let mut checked = 0;
    let mut missing = Vec::new();
    let texts = help_texts();
    for (command, text) in &texts {
        let words = text.split(|c: char| c.is_whitespace() || "`()[],;:'\"".contains(c));
        for word in words {
            let word = word.trim_end_matches('.');
            if check_key(word, command, &mut missing) {
                checked += 1;
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys no config has:\n{}",
        missing.join("\n")
    );
    assert!(texts.len() >= 10, "{} help texts", texts.len());
    assert!(
        checked >= 5,
        "only {checked} keys found: is the scan broken?"
    );
}

#[test]
fn every_config_file_under_tuning_loads() {
    let mut files = Vec::new();
    collect(&Path::new(ROOT).join("tuning"), &mut files);
    let files: Vec<PathBuf> = files
        .into_iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    assert!(files.len() >= 5, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let config = Config::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        config
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Every file under `dir`, skipping build output and installed packages.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The files `text` cites: every `.md` name and, in a document
/// (`sources`), every path (a name with a `/`) of a source, script or
/// config file.
fn cited_documents(text: &str, sources: bool) -> Vec<&str> {
    const SOURCES: [&str; 7] = [".rs", ".sh", ".toml", ".py", ".ts", ".lua", ".luau"];
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| {
            (word.ends_with(".md") && word.len() > 3)
                || (sources && word.contains('/') && SOURCES.iter().any(|ext| word.ends_with(ext)))
        })
        .filter(|word| !word.contains("//") && !word.starts_with('/'))
        .map(|word| word.trim_start_matches("./"))
        .collect()
}

#[test]
fn every_document_a_file_cites_is_in_the_repository() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    collect(root, &mut files);
    let mut missing = Vec::new();
    let mut citations = 0;
    let names: Vec<String> = files
        .iter()
        .map(|file| file.to_string_lossy().into_owned())
        .collect();
    for file in files {
        let cites = file.extension().is_some_and(|ext| {
            ["rs", "md", "sh", "toml", "yml", "json"].contains(&&*ext.to_string_lossy())
        });
        let Some(text) = cites.then(|| std::fs::read_to_string(&file).ok()).flatten() else {
            continue;
        };
        let dir = file.parent().unwrap();
        let document = file.extension().is_some_and(|ext| ext == "md");
        for cited in cited_documents(&text, document) {
            citations += 1;
            // From the citing file's folder or any folder above it, or the
            // end of some file's path (a document names `steps/route.rs`
            // under a heading about the router, `docs/` pages cite each
            // other by name).
            let suffix = format!("/{cited}");
            let found = dir.ancestors().any(|base| base.join(cited).is_file())
                || names.iter().any(|name| name.ends_with(&suffix));
            if !found {
                let shown = file.strip_prefix(root).unwrap().display().to_string();
                missing.push(format!("{shown} cites {cited}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documents not in the repository:\n{}",
        missing.join("\n")
    );
    assert!(
        citations > 50,
        "only {citations} citations: is the scan broken?"
    );
}

/// The `routerd` invocations in the README's shell blocks: the words after
/// the binary, up to a comment or a shell operator.
fn readme_commands() -> Vec<Vec<String>> {
    let readme = read("README.md");
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = line.split(" #").next().unwrap_or_default();
        for piece in line.split(['|', ';', '&', '(', ')']) {
            let words: Vec<&str> = piece.split_whitespace().collect();
            // The binary itself, not `-p routerd` or `BASE=.../routerd`.
            let start = words.iter().enumerate().position(|(at, word)| {
                let binary = (*word == "routerd" || word.ends_with("/routerd"))
                    && !word.contains('=')
                    && (at == 0 || words[at - 1] != "-p");
                binary || *word == "--"
            });
            let Some(start) = start else { continue };
            // `cargo run --release -- serve`: the words after `--` only
            // when cargo runs routerd.
            if words[start] == "--" && !piece.contains("cargo run") {
                continue;
            }
            let rest: Vec<String> = words[start + 1..]
                .iter()
                .map(|word| word.to_string())
                .collect();
            if !rest.is_empty() {
                commands.push(rest);
            }
        }
    }
    commands
}

fn help(path: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_routerd"))
        .args(path)
        .arg("--help")
        .output()
        .expect("routerd runs");
    assert!(
        output.status.success(),
        "routerd {path:?} --help: {output:?}"
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn readme_commands_name_real_subcommands_and_flags() {
    let commands = readme_commands();
    assert!(commands.len() >= 10, "{commands:?}");
    let top = help(&[]);
    for words in &commands {
        let sub = words[0].as_str();
        if sub.starts_with('-') {
            // `routerd --version`.
            assert!(top.contains(sub) || sub == "--version", "{words:?}");
            continue;
        }
        assert!(
            top.lines()
                .any(|line| line.trim_start().starts_with(&format!("{sub} "))),
            "README runs `routerd {sub}`, which is no subcommand:\n{top}"
        );
        let mut path = vec![sub];
        if sub == "cluster" {
            path.push(words[1].as_str());
        }
        let text = help(&path);
        for flag in words.iter().filter(|word| word.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            assert!(
                text.contains(&format!("{flag} ")) || text.contains(&format!("{flag}\n")),
                "README runs `routerd {}` with {flag}, which it does not take:\n{text}",
                words.join(" ")
            );
        }
    }
}

#[test]
fn every_flag_of_every_command_says_what_it_is() {
    let mut bare = Vec::new();
    for (command, text) in help_texts() {
        let options = text.split("Options:").nth(1).unwrap_or_default();
        let lines: Vec<&str> = options.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if !trimmed.starts_with('-') {
                continue;
            }
            // `  --flag <VALUE>  what it is`, or the text on the next line,
            // indented further.
            let described = trimmed.split("  ").filter(|part| !part.is_empty()).count() > 1
                || lines.get(at + 1).is_some_and(|next| {
                    let next_indent = next.len() - next.trim_start().len();
                    let indent = line.len() - trimmed.len();
                    !next.trim().is_empty()
                        && next_indent > indent
                        && !next.trim_start().starts_with('-')
                });
            if !described {
                bare.push(format!("{command}: {}", trimmed.trim_end()));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "flags without a help text:\n{}",
        bare.join("\n")
    );
}
