//! Advertised addresses: a node listening on `0.0.0.0` advertises
//! `gateway.advertise` and `admin.advertise` in its membership row, so
//! `/cluster` and `sys.redirect` name where it is reached; beside other
//! members, a node that would advertise an unspecified address refuses to
//! start, naming the key.

mod support;

use std::time::Duration;

use support::cluster::{eventually, get_json, http_post, wait_members_up, LocalCluster};
use support::{ServeProcess, SECRET};
use wire::client::{route, FrameKind};

/// Starts node `id` with its own `[gateway]` and `[admin]` sections.
fn start_with(cluster: &LocalCluster, id: u64, listeners: &str) -> ServeProcess {
    let dir = cluster.dir().join(format!("node-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    let body = format!(
        "{}\n{listeners}[auth]\nsecret = \"{SECRET}\"\n",
        cluster.body(id, "the test cluster's secret")
    );
    std::fs::write(&path, body).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"));
    command.args(["serve", "--config"]).arg(&path);
    ServeProcess::spawn(command)
}

#[test]
fn a_node_on_0_0_0_0_is_advertised_and_redirected_to_at_its_advertised_address() {
    let mut cluster = LocalCluster::new();
    cluster.cluster_extra = "redirect_grace_ms = 2000\n".into();
    let draining = cluster.start(1);
    // Any address of the loopback net reaches a listener on 0.0.0.0:
    // 127.0.0.2 stands for the address other machines would use.
    let public = start_with(
        &cluster,
        2,
        "[gateway]\nlisten = \"0.0.0.0:0\"\nadvertise = \"127.0.0.2:0\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\nadvertise = \"127.0.0.2:0\"\n",
    );
    wait_members_up(&draining, &[2]);
    let port = public.gateway.port();
    let advertised = format!("127.0.0.2:{port}");
    let view = get_json(draining.admin, "/cluster");
    let member = view["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|member| member["node_id"] == 2)
        .unwrap()
        .clone();
    assert_eq!(member["gateway"], advertised.as_str(), "{member}");
    assert_eq!(member["gateways"]["tcp"], advertised.as_str(), "{member}");
    assert_eq!(
        member["admin"],
        format!("127.0.0.2:{}", public.admin.port()).as_str(),
        "{member}"
    );
    let own = get_json(public.admin, "/cluster");
    let me = own["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|member| member["link"] == "self")
        .unwrap()
        .clone();
    assert_eq!(me["node_id"], 2, "{me}");
    assert_eq!(me["gateway"], advertised.as_str(), "{me}");

    // A session on node 1 is told to move to node 2's advertised address
    // when node 1 drains, and that address serves it.
    let mut client = draining.connect();
    client.login(11, 1);
    let (status, body) = http_post(draining.admin, "/drain");
    assert_eq!(status, 202, "{body}");
    let push = client.recv();
    assert_eq!(
        (push.kind, push.route_id),
        (FrameKind::Push, route::SYS_REDIRECT),
        "{push:?}"
    );
    let target = std::str::from_utf8(&push.body[4..]).unwrap();
    assert_eq!(target, advertised);
    let (mut moved, _) =
        support::cluster::login_eventually(target.parse().unwrap(), 11, Duration::from_secs(10));
    let reply = moved.call(route::PLAYER_GET, 2, b"");
    assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
}

#[test]
fn beside_other_members_an_unspecified_advertised_address_refuses_to_start() {
    let cluster = LocalCluster::new();
    let first = cluster.start(1);
    let dir = cluster.dir().join("unreachable");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    let body = format!(
        "{}\n[gateway]\nlisten = \"0.0.0.0:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [auth]\nsecret = \"{SECRET}\"\n",
        cluster.body(2, "the test cluster's secret")
    );
    std::fs::write(&path, body).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success(), "node 2 must not start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("gateway.advertise"), "{stderr}");
    // It took itself out again: node 1 sees it `left` (a declaration
    // would say `down`), once it listed that change (one poll and one
    // listing after the write, a moment longer on a loaded machine), and
    // serves on without it.
    let state_of_2 = || {
        let view = get_json(first.admin, "/cluster");
        view["members"]
            .as_array()?
            .iter()
            .find(|member| member["node_id"] == 2)
            .map(|member| member["state"].clone())
    };
    assert_ne!(state_of_2(), Some(serde_json::json!("up")));
    eventually(Duration::from_secs(2), "node 1 sees node 2 left", || {
        (state_of_2()? == "left").then_some(())
    });
    let mut client = first.connect();
    client.login(3, 1);
}

/// Runs `routerd serve` on `body` and waits for it to exit (a refused
/// start); one still running after a while started, and is stopped.
fn refused_start(dir: &std::path::Path, body: &str) -> String {
    let path = dir.join("node.toml");
    std::fs::write(&path, body).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_routerd"))
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!("started: {}", String::from_utf8_lossy(&output.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "must not start: {stderr}");
    stderr
}

/// A first node alone advertised `0.0.0.0` (nothing to refuse it beside),
/// and every node that joined later dialed that, reaching itself. Alone
/// too, a node that nodes of other machines may join refuses it; one
/// whose links listen on loopback, a single node's default, still starts.
#[test]
fn alone_a_node_others_may_join_refuses_an_unspecified_address() {
    let cluster = LocalCluster::new();
    let dir = cluster.dir().join("alone");
    std::fs::create_dir_all(&dir).unwrap();
    let secret = "the test cluster's secret";
    let listeners = "[gateway]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n";
    let stderr = refused_start(
        &dir,
        &format!(
            "{}\n{listeners}[auth]\nsecret = \"{SECRET}\"\n",
            cluster.body_on(1, secret, "0.0.0.0")
        ),
    );
    assert!(
        stderr.contains("cluster.advertise would advertise 0.0.0.0:"),
        "{stderr}"
    );
    let mut links_elsewhere = LocalCluster::new();
    links_elsewhere.cluster_extra = "advertise = \"192.0.2.1:0\"\n".into();
    let stderr = refused_start(
        &dir,
        &format!(
            "{}\n[gateway]\nlisten = \"0.0.0.0:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [auth]\nsecret = \"{SECRET}\"\n",
            links_elsewhere.body_on(1, secret, "0.0.0.0")
        ),
    );
    assert!(
        stderr.contains("gateway.advertise would advertise 0.0.0.0:"),
        "{stderr}"
    );

    // Links on loopback: alone on 0.0.0.0 is a single node, and starts.
    let single = start_with(
        &cluster,
        1,
        "[gateway]\nlisten = \"0.0.0.0:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
    );
    let mut client = single.connect();
    client.login(3, 1);
}
