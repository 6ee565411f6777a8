//! A browser nobody here wrote: headless Chromium (Debian's, driven by
//! playwright-core) loads tests/browser/wss_session.html, which logs two
//! sessions in over `wss://` to a `websocket_tls` listener with a
//! self-signed certificate made at test time, increments, and receives a
//! room push.

#[path = "support/edge.rs"]
mod edge;
mod support;

use std::path::PathBuf;
use std::process::Command;

use edge::make_cert;
use support::{config, token, TestNode};

/// Chromium and the playwright-core modules, or `None` to skip (outside
/// CI); fails in CI, where .ci/run installs both.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = std::env::var_os("ROUTERD_CHROMIUM").map(PathBuf::from);
    let modules = std::env::var_os("ROUTERD_BROWSER_MODULES").map(PathBuf::from);
    match (chromium, modules) {
        (Some(chromium), Some(modules)) if chromium.exists() && modules.exists() => {
            Some((chromium, modules))
        }
        _ if std::env::var_os("CI").is_some() => {
            panic!("ROUTERD_CHROMIUM and ROUTERD_BROWSER_MODULES must name Chromium and tests/browser/node_modules (.ci/run installs them)")
        }
        _ => {
            eprintln!("skipped: ROUTERD_CHROMIUM or ROUTERD_BROWSER_MODULES is not set");
            None
        }
    }
}

#[test]
fn chromium_logs_in_over_wss_increments_and_receives_a_room_push() {
    let Some((chromium, modules)) = browser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "gateway");
    let mut config = config();
    config.gateway.websocket_listen = Some("127.0.0.1:0".parse().unwrap());
    config.gateway.websocket_tls = true;
    config.gateway.tls_cert_file = Some(cert.cert_file.clone());
    config.gateway.tls_key_file = Some(cert.key_file.clone());
    let node = TestNode::start(config);
    let url = format!("wss://localhost:{}/", node.websocket().port());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/wss_session.mjs");
    let output = Command::new("node")
        .arg(script)
        .args([&url, &token(93, 3600), &token(94, 3600), "9300"])
        .env("ROUTERD_CHROMIUM", chromium)
        .env("ROUTERD_BROWSER_MODULES", modules)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success()
            && stdout.contains("\"incr\":[3,7]")
            && stdout.contains("\"push\":\"hello from chromium\""),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    node.wait_metric("routerd_gateway_websocket_upgrades_total", 2);
}
