//! Secrets as an operator meets them: `check-config` never prints one, and
//! a node that other machines can reach refuses the development secret,
//! naming the key to set.

use std::process::{Command, Output};
use std::time::Duration;

use routerd::config::{Config, StoreBackend, DEVELOPMENT_SECRET, MASK};

const ROUTERD: &str = env!("CARGO_BIN_EXE_routerd");

/// Runs `routerd <args> --config <file with body>` with
/// `ROUTERD_AUTH_SECRET` set to `env_secret` (or unset) and waits for it.
fn run(args: &[&str], body: &str, env_secret: Option<&str>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    let body = format!(
        "[node]\ndata_dir = {:?}\n[cores]\ncount = 1\nrecv_buffers = 64\n\
         [store]\nbackend = \"memory\"\n{body}",
        dir.path().join("data").display().to_string()
    );
    std::fs::write(&path, body).unwrap();
    let mut command = Command::new(ROUTERD);
    command.args(args).arg("--config").arg(&path);
    match env_secret {
        Some(secret) => command.env("ROUTERD_AUTH_SECRET", secret),
        None => command.env_remove("ROUTERD_AUTH_SECRET"),
    };
    command.output().unwrap()
}

#[test]
fn check_config_masks_the_secret_from_the_file_and_from_the_environment() {
    let from_file = "file-secret-4f1d9c";
    let output = run(
        &["check-config"],
        &format!("[auth]\nsecret = \"{from_file}\"\n"),
        None,
    );
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains(from_file), "{stdout}");
    assert!(stdout.contains(&format!("secret = \"{MASK}\"")), "{stdout}");

    let from_env = "env-secret-77ab03";
    let output = run(&["check-config"], "", Some(from_env));
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains(from_env), "{stdout}");
    assert!(!stdout.contains(DEVELOPMENT_SECRET), "{stdout}");
}

#[test]
fn check_config_output_read_back_refuses_the_mask() {
    let output = run(&["check-config"], "", Some("env-secret"));
    let printed = String::from_utf8(output.stdout).unwrap();
    let config = Config::from_toml(&printed).unwrap();
    let error = config.validate().unwrap_err().to_string();
    assert!(error.contains("auth.secret"), "{error}");
}

#[test]
fn serve_refuses_the_development_secret_on_a_reachable_address() {
    for (listeners, key) in [
        (
            "[gateway]\nlisten = \"0.0.0.0:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
            "gateway.listen",
        ),
        (
            "[gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"0.0.0.0:0\"\n",
            "admin.listen",
        ),
    ] {
        let output = run(&["serve"], listeners, None);
        assert!(!output.status.success(), "{key}: the node must not start");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("auth.secret"), "{stderr}");
        assert!(stderr.contains("ROUTERD_AUTH_SECRET"), "{stderr}");
        assert!(stderr.contains(key), "{stderr}");
    }
}

fn public_config() -> Config {
    let mut config = Config::default();
    config.cores.count = 1;
    config.cores.recv_buffers = 64;
    config.cores.shutdown_deadline_ms = 1000;
    config.gateway.listen = "0.0.0.0:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config.cluster.listen = "127.0.0.1:0".parse().unwrap();
    config.store.backend = StoreBackend::Memory;
    config
}

#[test]
fn a_node_built_in_code_refuses_too_and_starts_with_its_own_secret() {
    let error = match routerd::node::Node::start(public_config()) {
        Ok(_) => panic!("the development secret on 0.0.0.0 must be refused"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("auth.secret"), "{error}");

    let mut config = public_config();
    config.auth.secret = "an operator's own secret".into();
    let node = routerd::node::Node::start(config).expect("starts with its own secret");
    node.shutdown_handle().trigger();
    let stopped = std::thread::spawn(move || node.wait());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !stopped.is_finished() {
        assert!(std::time::Instant::now() < deadline, "node did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    stopped.join().unwrap().unwrap();
}
