//! The documents against the binary, so they cannot drift apart: every
//! config key the README and docs/ name exists, every config file under
//! tuning/ loads, every document a file cites is in the repository, and
//! every `routerd` command the README shows names a real subcommand and
//! real flags.

use std::path::{Path, PathBuf};
use std::process::Command;

use routerd::config::Config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The documents a user reads for keys and commands.
const DOCS: [&str; 6] = [
    "README.md",
    "docs/protocol.md",
    "docs/cluster.md",
    "docs/architecture.md",
    "docs/capacity.md",
    "examples/guild/README.md",
];

/// The config's top-level sections: a backticked `section.key` in a
/// document is a key of the config.
const SECTIONS: [&str; 9] = [
    "node", "cores", "gateway", "admin", "auth", "store", "cluster", "router", "services",
];

/// Route names that look like `section.key`.
const ROUTE_NAMES: [&str; 1] = ["auth.login"];

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

#[test]
fn every_config_key_the_docs_name_exists() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in DOCS {
        for token in backticked(&read(doc)) {
            let Some((path, key)) = config_key(token) else {
                continue;
            };
            // `[services]` takes a section for any registered type, so only
            // the built-ins' keys are the binary's to check.
            // A route's name (`auth.login`) is no key of the `[auth]` section.
            if ROUTE_NAMES.contains(&token) {
                continue;
            }
            if path == ["services"] {
                if !["player", "room"].contains(&key) {
                    missing.push(format!("{doc}: `{token}` (services has player and room)"));
                }
                continue;
            }
            if path[0] == "services" && !matches!(path.get(1), Some(&"player" | &"room")) {
                continue;
            }
            checked += 1;
            if !key_exists(&path, key) {
                missing.push(format!("{doc}: `{token}`"));
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
    // The check itself can fail: the key the issue found is refused.
    assert!(!key_exists(&["gateway"], "max_body"));
    assert!(key_exists(&["gateway"], "body_max_bytes"));
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

/// The `.md` file names `text` cites.
fn cited_documents(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .filter(|word| word.ends_with(".md") && word.len() > 3)
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
    for file in files {
        let cites = file.extension().is_some_and(|ext| {
            ["rs", "md", "sh", "toml", "yml", "json"].contains(&&*ext.to_string_lossy())
        });
        let Some(text) = cites.then(|| std::fs::read_to_string(&file).ok()).flatten() else {
            continue;
        };
        let dir = file.parent().unwrap();
        for cited in cited_documents(&text) {
            citations += 1;
            let found = [
                root.join(cited),
                dir.join(cited),
                root.join("docs").join(cited),
            ]
            .iter()
            .any(|path| path.is_file());
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
