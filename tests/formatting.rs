//! `cargo fmt --check` (what CI runs) sees every Rust file of the
//! workspace. rustfmt follows a crate's `mod` declarations from its roots,
//! so a module declared where it cannot look (inside a macro call, as the
//! internal modules once were) or a file no `mod` names is never checked.
//! These tests misformat a copy of every file and ask `cargo fmt` which it
//! would change: each one must be named.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's folders holding Rust source, each walked whole.
const SOURCE_FOLDERS: [&str; 7] = [
    "src", "shards", "wire", "loadgen", "bench", "tests", "examples",
];

/// Folders that are not the workspace's crates: the fuzz crate is outside
/// the workspace (its own `cargo fuzz` build) and is checked file by file
/// with rustfmt below; `target` folders hold generated code.
fn skipped(relative: &Path) -> bool {
    relative.starts_with("wire/fuzz")
        || relative
            .iter()
            .any(|part| part == "target" || part == "node_modules")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let relative = path.strip_prefix(root).unwrap().to_path_buf();
        if skipped(&relative) {
            continue;
        }
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(relative);
        }
    }
}

fn workspace_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = Vec::new();
    for folder in SOURCE_FOLDERS {
        rust_files(&root, &root.join(folder), &mut files);
    }
    files.sort();
    files
}

/// Copies what `cargo fmt` reads (the manifests and the source folders)
/// into a fresh folder.
fn copy_workspace(to: &Path) {
    let root = root();
    for manifest in ["Cargo.toml", "Cargo.lock"] {
        std::fs::copy(root.join(manifest), to.join(manifest)).unwrap();
    }
    fn copy_dir(from: &Path, to: &Path, root: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap();
            if relative
                .iter()
                .any(|part| part == "target" || part == "node_modules")
            {
                continue;
            }
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy_dir(&path, &target, root);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    for folder in SOURCE_FOLDERS {
        copy_dir(&root.join(folder), &to.join(folder), &root);
    }
}

/// The files `cargo fmt --all --check` in `dir` says it would change.
fn files_with_diff(dir: &Path) -> BTreeSet<PathBuf> {
    let output = Command::new("cargo")
        .args(["fmt", "--all", "--check", "--", "--files-with-diff"])
        .current_dir(dir)
        .output()
        .expect("cargo fmt runs (rustup component add rustfmt)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let path = Path::new(line.trim());
            path.strip_prefix(dir).unwrap_or(path).to_path_buf()
        })
        .collect()
}

/// A scratch folder under the build's target directory, made empty.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_workspace_is_formatted() {
    let changed = files_with_diff(&root());
    assert!(
        changed.is_empty(),
        "cargo fmt would change these files: {changed:?}"
    );
}

/// Every `.rs` file of every crate, misformatted in a copy, makes `cargo
/// fmt --check` fail naming it: none is out of rustfmt's sight.
#[test]
fn cargo_fmt_sees_every_file() {
    let copy = scratch("formatting-every-file");
    copy_workspace(&copy);
    let files = workspace_files();
    assert!(files.len() > 200, "only {} Rust files found", files.len());
    for file in &files {
        let path = copy.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        // A misformatted item rustfmt always rewrites; at the end of the
        // file it is legal in any module (a file of `#[cfg(test)]` tests,
        // a `mod.rs`, a binary's root).
        text.push_str("\nfn   formatting_probe ( ) { }\n");
        std::fs::write(&path, text).unwrap();
    }
    let seen = files_with_diff(&copy);
    let unseen: Vec<&PathBuf> = files.iter().filter(|file| !seen.contains(*file)).collect();
    assert!(
        unseen.is_empty(),
        "cargo fmt --check does not see these files (declared inside a macro, or named by no `mod`): {unseen:?}"
    );
    // Each crate of the workspace was reached, not just the root one.
    for crate_dir in ["src/", "shards/", "wire/", "loadgen/", "bench/"] {
        assert!(
            seen.iter().any(|file| file.starts_with(crate_dir)),
            "no misformatted file under {crate_dir} was found"
        );
    }
    let _ = std::fs::remove_dir_all(&copy);
}

/// The fuzz crate is outside the workspace: its files are checked by
/// rustfmt directly.
#[test]
fn the_fuzz_targets_are_formatted() {
    let dir = root().join("wire/fuzz/fuzz_targets");
    let mut files = Vec::new();
    rust_files(&dir, &dir, &mut files);
    assert!(!files.is_empty());
    let output = Command::new("rustfmt")
        .args(["--edition", "2021", "--check"])
        .args(files.iter().map(|file| dir.join(file)))
        .output()
        .expect("rustfmt runs");
    assert!(
        output.status.success(),
        "rustfmt would change the fuzz targets:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
}
