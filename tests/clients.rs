//! The client libraries of `clients/` against this build's `routerd`: the
//! Python package's unittest suite and the TypeScript package's node:test
//! suite, with the demo chat page in Chromium (each starts its own nodes
//! with the binary it is given, and scripted servers for what a node does not
//! do on demand), so the
//! README's `cargo test --workspace` runs them. Each needs its runtime: in
//! CI a missing one fails, elsewhere the test says why it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// One suite at a time: each starts its own nodes and runs them against a
/// client under test, and two at once on a small machine (CI's two cores)
/// starve each other's nodes and timers into spurious failovers and timeouts.
static ONE_SUITE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    // A suite that failed poisons the lock; the next still runs.
    ONE_SUITE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Fails in CI, skips (with the reason) elsewhere.
fn missing(what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} (CI installs it with .ci/test_deps.sh)");
    }
    println!("skipped: {what}");
}

fn works(program: &Path, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Runs `command` in `dir` with the binary's path; asserts it passed,
/// showing its output either way.
fn run_suite(mut command: Command, dir: &Path, what: &str) {
    // A certificate for the suites' TLS listeners, made here: no private
    // key lives in the repository.
    let certs = tempfile::tempdir().unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("test certificate");
    let cert_file = certs.path().join("gateway.crt");
    let key_file = certs.path().join("gateway.key");
    std::fs::write(&cert_file, certified.cert.pem()).unwrap();
    std::fs::write(&key_file, certified.signing_key.serialize_pem()).unwrap();
    let out = command
        .current_dir(dir)
        .env("ROUTERD_TEST_CERT_FILE", &cert_file)
        .env("ROUTERD_TEST_KEY_FILE", &key_file)
        .env("ROUTERD_BIN", env!("CARGO_BIN_EXE_routerd"))
        .env("ROUTERD_PROTOCOL_DOC", root().join("docs/protocol.md"))
        .output()
        .unwrap_or_else(|error| panic!("{what} did not start: {error}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{what} failed:\n{text}");
}

#[test]
fn python_client_suite() {
    let _alone = alone();
    let python = std::env::var_os("ROUTERD_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    if !works(&python, "--version") {
        return missing(&format!("no Python at {}", python.display()));
    }
    let dir = root().join("clients/python");
    let mut command = Command::new(&python);
    command
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "tests"])
        .env(
            "PYTHONPATH",
            format!("{}:{}", dir.display(), dir.join("tests").display()),
        )
        // asyncio's debug mode off (the suites' AsyncTestCase turns off the
        // one IsolatedAsyncioTestCase turns on: tests/case.py).
        .env("PYTHONASYNCIODEBUG", "0")
        .env("PYTHONWARNINGS", "ignore::ResourceWarning");
    run_suite(command, &dir, "the Python client's tests");
}

#[test]
fn typescript_client_suite() {
    let _alone = alone();
    let node = PathBuf::from("node");
    if !works(&node, "--version") {
        return missing("no Node.js (node)");
    }
    let dir = root().join("clients/typescript");
    let tsc = dir.join("node_modules/.bin/tsc");
    if !tsc.exists() {
        return missing("clients/typescript/node_modules is not installed (npm ci)");
    }
    // Compiled here, so the suite always tests the sources as they are.
    let built = Command::new(&tsc)
        .args(["-p", "."])
        .current_dir(&dir)
        .output()
        .expect("tsc runs");
    assert!(
        built.status.success(),
        "tsc failed:\n{}",
        String::from_utf8_lossy(&built.stdout)
    );
    let mut command = Command::new(&node);
    command.args([
        "--experimental-websocket",
        "--test",
        "dist/test/codec.test.js",
        "dist/test/live.test.js",
        "dist/test/fake.test.js",
        "dist/test/exactly_once.test.js",
        "dist/test/scripts.test.js",
        "dist/test/browser.test.js",
    ]);
    run_suite(command, &dir, "the TypeScript client's tests");
}
