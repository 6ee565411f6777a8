//! The admin token and the probes: a mutating call without the token is
//! refused 401 (and counted) while reads stay open; `/readyz` says 503
//! while the node drains while `/livez` stays 200; a node whose admin
//! listens off loopback without a token refuses to start, naming the key.

mod support;

use std::net::SocketAddr;
use std::process::Command;

use routerd::config::Config;
use support::{config, TestNode};

const TOKEN: &str = "admin-test-token-5d1e";
const ROUTERD: &str = env!("CARGO_BIN_EXE_routerd");

/// `method path` with `authorization` (a whole header value) if given:
/// the status and the body.
fn call(admin: SocketAddr, method: &str, path: &str, authorization: Option<&str>) -> (u16, String) {
    let header = authorization.map(|value| format!("authorization: {value}"));
    let headers: Vec<&str> = header.iter().map(String::as_str).collect();
    let answer = support::http::request(admin, method, path, &headers, "");
    (answer.status, answer.body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|error| panic!("{error}: {body}"))
}

fn token_config() -> Config {
    let mut config = config();
    config.cores.count = 1;
    config.admin.token = Some(TOKEN.into());
    config
}

#[test]
fn mutating_calls_need_the_token_and_readyz_fails_while_draining_while_livez_stays_up() {
    let node = TestNode::start(token_config());
    let admin = node.admin();
    assert_eq!(call(admin, "GET", "/readyz", None).0, 200);
    assert_eq!(call(admin, "GET", "/livez", None).0, 200);
    let bearer = format!("Bearer {TOKEN}");
    let refused = [
        ("POST", "/drain", None),
        ("POST", "/drain", Some("Bearer not-the-token")),
        ("POST", "/drain", Some(TOKEN)),
        ("POST", "/objects/player/1/transfer?to=2", None),
        ("POST", "/sessions/1/kick?player=7", None),
        ("POST", "/rooms/5/message", None),
    ];
    for (method, path, authorization) in refused {
        let (status, body) = call(admin, method, path, authorization);
        assert_eq!(status, 401, "{method} {path} {authorization:?}: {body}");
        assert_eq!(json(&body)["error"], "unauthorized", "{body}");
    }
    assert_eq!(node.metric("routerd_admin_unauthorized_total"), 6);
    // Reads need nothing.
    assert_eq!(call(admin, "GET", "/drain", None).0, 200);
    assert_eq!(call(admin, "GET", "/cluster", None).0, 200);
    // With the token the call reaches its handler: no such object here.
    let (status, body) = call(
        admin,
        "POST",
        "/objects/player/1/transfer?to=2",
        Some(&bearer),
    );
    assert_ne!(status, 401, "{body}");
    let (status, body) = call(admin, "POST", "/sessions/1/kick?player=7", Some(&bearer));
    assert_eq!(status, 404, "no such session: {body}");

    // A session keeps the drain going through its redirect grace.
    let mut client = node.connect();
    client.login(7, 1);
    let (status, body) = call(admin, "POST", "/drain", Some(&bearer));
    assert_eq!(status, 202, "{body}");
    let (status, body) = call(admin, "GET", "/readyz", None);
    assert_eq!(status, 503, "{body}");
    assert_eq!(json(&body)["reason"], "draining", "{body}");
    let (status, body) = call(admin, "GET", "/livez", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["phase"], "draining", "{body}");
    assert_eq!(
        call(admin, "GET", "/healthz", None),
        (503, "draining".to_string())
    );
    assert_eq!(node.metric("routerd_admin_unauthorized_total"), 6);
}

/// RFC 7235 section 2.1: an authentication scheme's name is
/// case-insensitive, so `bearer` and `BEARER` are `Bearer`.
#[test]
fn the_bearer_scheme_is_accepted_in_any_case() {
    let node = TestNode::start(token_config());
    let admin = node.admin();
    for scheme in ["bearer", "BEARER", "bEaReR"] {
        let authorization = format!("{scheme} {TOKEN}");
        let (status, body) = call(
            admin,
            "POST",
            "/objects/player/1/transfer?to=2",
            Some(&authorization),
        );
        assert_ne!(status, 401, "{authorization}: {body}");
    }
    let (status, _) = call(admin, "POST", "/drain", Some("bearer not-the-token"));
    assert_eq!(status, 401);
    assert_eq!(node.metric("routerd_admin_unauthorized_total"), 1);
}

#[test]
fn the_cli_sends_the_token_from_its_flag_or_the_environment() {
    let node = TestNode::start(token_config());
    let admin = node.admin().to_string();
    let transfer = |token: Option<&str>, env: Option<&str>| {
        let mut command = Command::new(ROUTERD);
        command.args(["transfer", "--admin", &admin, "--id", "1", "--to", "2"]);
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        match env {
            Some(token) => command.env("ROUTERD_ADMIN_TOKEN", token),
            None => command.env_remove("ROUTERD_ADMIN_TOKEN"),
        };
        let output = command.output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = transfer(None, None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unauthorized"), "{stderr}");
    assert!(stderr.contains("ROUTERD_ADMIN_TOKEN"), "{stderr}");
    for (flag, env) in [(Some(TOKEN), None), (None, Some(TOKEN))] {
        let (_, stderr) = transfer(flag, env);
        // Refused for what the object is, not for who asked.
        assert!(!stderr.contains("unauthorized"), "{stderr}");
        assert!(stderr.contains("not moved"), "{stderr}");
    }
}

#[test]
fn an_admin_off_loopback_without_a_token_refuses_to_start_naming_the_key() {
    let mut public = config();
    public.cores.count = 1;
    public.admin.listen = "0.0.0.0:0".parse().unwrap();
    let error = match routerd::node::Node::start(public.clone()) {
        Ok(_) => panic!("an admin on 0.0.0.0 without a token must not start"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("admin.token"), "{error}");
    assert!(error.contains("ROUTERD_ADMIN_TOKEN"), "{error}");

    public.admin.token = Some(TOKEN.into());
    let node = TestNode::start(public);
    let port = node.admin().port();
    let loopback = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(call(loopback, "GET", "/readyz", None).0, 200);
    assert_eq!(call(loopback, "POST", "/drain", None).0, 401);

    // From a file, the environment's token counts.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    std::fs::write(
        &path,
        "[auth]\nsecret = \"own\"\n[admin]\nlisten = \"0.0.0.0:9464\"\n[store]\nbackend = \"memory\"\n",
    )
    .unwrap();
    let check = |env: Option<&str>| {
        let mut command = Command::new(ROUTERD);
        command.arg("check-config").arg("--config").arg(&path);
        match env {
            Some(token) => command.env("ROUTERD_ADMIN_TOKEN", token),
            None => command.env_remove("ROUTERD_ADMIN_TOKEN"),
        };
        command.output().unwrap()
    };
    let refused = check(None);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("admin.token"), "{stderr}");
    let accepted = check(Some(TOKEN));
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let printed = String::from_utf8_lossy(&accepted.stdout);
    assert!(
        !printed.contains(TOKEN),
        "check-config shows the token: {printed}"
    );
}
