//! The `routerd` binary as an operator runs it: serve, health, metrics,
//! SIGTERM, check-config and token.

use std::net::SocketAddr;
use std::process::Command;

use support::cluster::http_get;
use support::ServeProcess;
use wire::client::{route, FrameKind};

mod support;

const ROUTERD: &str = env!("CARGO_BIN_EXE_routerd");

fn write_config(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("node.toml");
    let text = format!(
        "[node]\ndata_dir = \"{}\"\n[cores]\ncount = 1\nrecv_buffers = 64\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [cluster]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n{extra}",
        dir.join("data").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn serve_reports_healthy_and_stops_on_sigterm_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let node = ServeProcess::serve_file(&write_config(dir.path(), ""));
    let admin = node.admin;
    assert_eq!(http_get(admin, "/healthz"), (200, "ok".to_string()));
    let (status, metrics) = http_get(admin, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("routerd_gateway_sessions_accepted_total"),
        "{metrics}"
    );
    assert!(metrics.contains("routerd_router_objects"), "{metrics}");
    assert_eq!(http_get(admin, "/nope").0, 404);
    let status = node.stop();
    assert_eq!(status.code(), Some(0), "clean shutdown exits 0");
}

/// `routerd check-config --config path`, run to its end.
fn check_config(path: &std::path::Path) -> std::process::Output {
    Command::new(ROUTERD)
        .args(["check-config", "--config"])
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn check_config_names_a_misspelled_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[router]\nretry_max_tll = 4\n");
    let output = check_config(&config);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("retry_max_tll"), "{stderr}");
}

#[test]
fn check_config_names_a_renamed_key_and_a_key_of_another_backend() {
    let dir = tempfile::tempdir().unwrap();
    for (body, names) in [
        (
            "[gateway]\nmax_inflight = 4\n",
            ["gateway.max_inflight", "gateway.inflight_max"],
        ),
        (
            "[store]\nbackend = \"sqlite\"\nkeyspace = \"k\"\n",
            ["store.keyspace", "sqlite"],
        ),
    ] {
        let path = dir.path().join("renamed.toml");
        std::fs::write(&path, body).unwrap();
        let output = check_config(&path);
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        for name in names {
            assert!(stderr.contains(name), "{name}: {stderr}");
        }
    }
}

#[test]
fn check_config_refuses_rooms_larger_than_the_store_saves() {
    // 100,000 members of 41 bytes each: a full room's state is some 4 MB,
    // four times what a saved state may hold. Served, every join past the
    // bound would be acknowledged and never saved.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[services.room]\nmembers_max = 100000\n");
    let output = check_config(&config);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("room") && stderr.contains("store.state_max_bytes"),
        "{stderr}"
    );
    // A bound the store can hold passes.
    let config = write_config(dir.path(), "[services.room]\nmembers_max = 20000\n");
    let output = check_config(&config);
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn check_config_prints_the_effective_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let output = check_config(&config);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Defaults the file did not name are filled in.
    assert!(stdout.contains("forward_hops_max = 16"), "{stdout}");
    assert!(stdout.contains("backend = \"memory\""), "{stdout}");
}

#[test]
fn serve_help_names_every_signal_that_stops_it() {
    let output = Command::new(ROUTERD)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for signal in ["SIGINT", "SIGTERM", "SIGHUP"] {
        assert!(help.contains(signal), "{signal}: {help}");
    }
}

#[test]
fn check_config_refuses_what_serve_refuses() {
    let dir = tempfile::tempdir().unwrap();
    // A section for a type this node does not register: serve refuses it
    // at start, so check-config must too, with the same words.
    let config = write_config(dir.path(), "[services.rooms]\nmembers_max = 3\n");
    let checked = check_config(&config);
    assert!(!checked.status.success(), "{checked:?}");
    let check_error = String::from_utf8_lossy(&checked.stderr).to_string();
    assert!(check_error.contains("[services.rooms]"), "{check_error}");
    let served = Command::new(ROUTERD)
        .args(["serve", "--config"])
        .arg(&config)
        .env("ROUTERD_LOG", "error")
        .output()
        .unwrap();
    assert!(!served.status.success(), "{served:?}");
    let serve_error = String::from_utf8_lossy(&served.stderr);
    assert!(
        serve_error.contains(check_error.trim()),
        "serve: {serve_error}\ncheck-config: {check_error}"
    );
}

#[test]
fn check_config_without_a_file_prints_the_builtins_sections() {
    let output = Command::new(ROUTERD)
        .arg("check-config")
        .env_remove("ROUTERD_AUTH_SECRET")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for section in ["[services.player]", "[services.room]", "members_max = 4096"] {
        assert!(stdout.contains(section), "{section}:\n{stdout}");
    }
}

#[test]
fn the_serving_log_line_names_every_listener() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (
        dir.path().join("gateway.crt"),
        dir.path().join("gateway.key"),
    );
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let path = dir.path().join("node.toml");
    let text = format!(
        "[node]\ndata_dir = \"{}\"\n[cores]\ncount = 1\nrecv_buffers = 64\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\ntls_listen = \"127.0.0.1:0\"\n\
         tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\nwebsocket_listen = \"127.0.0.1:0\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[cluster]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"memory\"\n",
        dir.path().join("data").display(),
        cert.display(),
        key.display()
    );
    std::fs::write(&path, text).unwrap();
    let node = ServeProcess::serve_file(&path);
    let (tls, websocket) = (
        node.serving_address("tls")
            .expect("tls in the serving line"),
        node.serving_address("websocket")
            .expect("websocket in the serving line"),
    );
    assert_ne!(tls.port(), 0);
    assert_ne!(websocket.port(), 0);
    assert_ne!(tls, websocket);
    assert_eq!(node.stop().code(), Some(0));
}

#[test]
fn token_verifies_with_the_configured_secret() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[auth]\nsecret = \"s3cret\"\n");
    let output = Command::new(ROUTERD)
        .args(["token", "--player-id", "42", "--ttl-secs", "60", "--config"])
        .arg(&config)
        .env_remove("ROUTERD_AUTH_SECRET")
        .output()
        .unwrap();
    assert!(output.status.success());
    let token = String::from_utf8(output.stdout).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(
        wire::token::verify(b"s3cret", token.trim().as_bytes(), now),
        Ok(42)
    );
    assert!(wire::token::verify(b"other", token.trim().as_bytes(), now).is_err());
}

#[test]
fn a_taken_admin_port_fails_start_up_cleanly() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = in_process_config();
    config.admin.listen = taken.local_addr().unwrap();
    let error = match routerd::node::Node::start(config) {
        Ok(_) => panic!("the admin port is taken"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("admin"), "{error}");
}

/// One core on free loopback ports, with the memory store: a node started
/// in the test's own process.
fn in_process_config() -> routerd::config::Config {
    let mut config = routerd::config::Config::default();
    config.cores.count = 1;
    config.cores.recv_buffers = 64;
    config.gateway.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config.cluster.listen = "127.0.0.1:0".parse().unwrap();
    config.store.backend = routerd::config::StoreBackend::Memory;
    config
}

#[test]
fn a_node_restarted_at_once_after_a_kill_answers_every_connection() {
    // A killed node's listeners outlive it by milliseconds (its rings hold
    // them). Restarted at once on the same ports, the new node must wait
    // them out: not fail to bind its cluster port, and not share its
    // gateway port with a listener nobody accepts on (whose connections
    // the kernel resets).
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let text = std::fs::read_to_string(&config).unwrap();
    // The restarts must have the first start's ports, so they cannot ask
    // for port 0.
    let mut gateway = None;
    let serve = || {
        let mut command = std::process::Command::new(ROUTERD);
        command.args(["serve", "--config"]).arg(&config);
        ServeProcess::try_spawn(command)
    };
    let mut first = Some(support::on_free_ports(|| {
        let picked: SocketAddr = format!("127.0.0.1:{}", support::free_port())
            .parse()
            .unwrap();
        let text = text
            .replacen(
                "[gateway]\nlisten = \"127.0.0.1:0\"",
                &format!("[gateway]\nlisten = \"{picked}\""),
                1,
            )
            .replacen(
                "[cluster]\nlisten = \"127.0.0.1:0\"",
                &format!("[cluster]\nlisten = \"127.0.0.1:{}\"", support::free_port()),
                1,
            );
        std::fs::write(&config, text).unwrap();
        gateway = Some(picked);
        serve()
    }));
    let gateway = gateway.unwrap();
    for start in 1..=3 {
        let node = match first.take() {
            Some(node) => node,
            None => serve().unwrap_or_else(|why| panic!("restart {start}: {why}")),
        };
        for connection in 0..32 {
            let mut client = support::Client::connect(gateway);
            client.send(route::SYS_PING, 7, b"alive?");
            let reply = client.try_recv();
            assert!(
                matches!(&reply, Some(reply) if reply.kind == FrameKind::Response
                    && reply.seq == 7
                    && reply.body == b"alive?"),
                "start {start}, connection {connection}: {reply:?}"
            );
        }
        node.kill_9();
    }
}

#[test]
fn a_gateway_address_another_process_listens_on_fails_start_up_cleanly() {
    // SO_REUSEPORT would let the node join that listener's group and
    // silently take a share of its connections.
    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other.set_reuse_address(true).unwrap();
    other.set_reuse_port(true).unwrap();
    let address: SocketAddr = "127.0.0.1:0".parse().unwrap();
    other.bind(&address.into()).unwrap();
    other.listen(16).unwrap();
    let taken = other.local_addr().unwrap().as_socket().unwrap();
    let mut config = in_process_config();
    config.gateway.listen = taken;
    let error = match routerd::node::Node::start(config) {
        Ok(_) => panic!("another process listens on the gateway address"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("gateway"), "{error}");
    assert!(error.contains("still listens"), "{error}");
}
