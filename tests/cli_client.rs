//! `routerd client` driven through a pipe, as a script would, against a
//! real node: its output lines, its exit status, and pushes reaching a
//! second client process.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use support::{TestNode, SECRET};

/// How long one client process may run before the watchdog kills it.
const CHILD_LIMIT: Duration = Duration::from_secs(30);

/// `routerd client --addr <node> <args>`, with the node's secret in the
/// environment (as `ROUTERD_AUTH_SECRET`, which wins over any config).
fn client(node: &TestNode, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_routerd"));
    command
        .arg("client")
        .arg("--addr")
        .arg(node.gateway().to_string())
        .args(args)
        .env("ROUTERD_AUTH_SECRET", SECRET)
        .env("ROUTERD_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `command` with `script` as its whole stdin and returns its output.
fn run_script(mut command: Command, script: &str) -> Output {
    let mut child = command.spawn().expect("routerd client starts");
    let finished = support::watchdog(child.id(), CHILD_LIMIT);
    // A client that failed early has closed its stdin: the script is moot.
    let _ = child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(script.as_bytes());
    let output = child.wait_with_output().expect("client exits");
    finished.store(true, Ordering::Release);
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A client process that stays running: commands are written to it one at
/// a time and its output lines read as they come.
struct Interactive {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    finished: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Interactive {
    fn spawn(mut command: Command) -> Interactive {
        let mut child = command.spawn().expect("routerd client starts");
        let finished = support::watchdog(child.id(), CHILD_LIMIT);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Interactive {
            child,
            stdin,
            lines,
            finished,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("command written");
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(support::READ_TIMEOUT)
            .expect("an output line in time")
    }

    /// Closes stdin (the end of the script) and returns the exit status,
    /// the lines printed since the last `next_line`, and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<String>, String) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("client exits");
        self.finished.store(true, Ordering::Release);
        let rest = self.lines.iter().collect();
        let mut err = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        }
        (status, rest, err)
    }
}

#[test]
fn a_script_logs_in_increments_and_reads_back() {
    let node = TestNode::start(support::config());
    // The secret comes from --config here, not the environment.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("client.toml");
    std::fs::write(&config, format!("[auth]\nsecret = \"{SECRET}\"\n")).unwrap();
    let mut command = client(
        &node,
        &["--player-id", "42", "--config", config.to_str().unwrap()],
    );
    command.env_remove("ROUTERD_AUTH_SECRET");
    let output = run_script(
        command,
        "incr 5\nget\n\n# a comment\nincr -2\nping hi there\n",
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "OK login 42\nOK incr 5\nOK get 5\nOK incr 3\nOK ping hi there\n"
    );
    // A later session of the same player sees the counter.
    let output = run_script(client(&node, &["--player-id", "42"]), "get\nquit\nget\n");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "OK login 42\nOK get 3\n",
        "nothing after quit"
    );
}

#[test]
fn errors_print_their_code_name_and_reason() {
    let node = TestNode::start(support::config());
    // Logged out, only sys.ping works.
    let output = run_script(client(&node, &[]), "ping\nget\nfrobnicate\njoin 1\n");
    // The whole script ran, and its failures make the exit status.
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("1 command(s) not understood, 2 request(s) answered ERROR"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        stdout(&output),
        "OK ping\nERROR AUTH_REQUIRED: login first\nERROR AUTH_REQUIRED: login first\n"
    );
    assert!(
        stderr(&output).contains("unknown command \"frobnicate\""),
        "{}",
        stderr(&output)
    );
    // Overflow is BAD_REQUEST and leaves the counter as it was.
    let output = run_script(
        client(&node, &["--player-id", "7"]),
        "incr 9223372036854775807\nincr 1\nget\n",
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "one ERROR answer: {output:?}"
    );
    assert_eq!(
        stdout(&output),
        "OK login 7\nOK incr 9223372036854775807\nERROR BAD_REQUEST: counter would overflow\nOK get 9223372036854775807\n"
    );
    // Every refusal of the built-ins says why, with the code unchanged.
    let output = run_script(
        client(&node, &["--player-id", "7"]),
        "say 7 hello\nleave 9\nsay 9 hi\n",
    );
    assert_eq!(
        stdout(&output),
        "OK login 7\nERROR BAD_REQUEST: not a member of room 7\nOK leave room=9\nERROR BAD_REQUEST: not a member of room 9\n",
        "{}",
        stderr(&output)
    );
    // A token signed with another secret: AUTH_FAILED, and the client
    // stops with a failure instead of running the script logged out.
    let forged = wire::token::mint(b"not-the-secret", 7, support::unix_now() + 60);
    let output = run_script(client(&node, &["--token", &forged]), "get\n");
    assert!(!output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "ERROR AUTH_FAILED: token signature does not match\n"
    );
    assert!(
        stderr(&output).contains("login failed"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_login_refused_for_its_signature_names_the_secret_to_check() {
    let node = TestNode::start(support::config());
    // No --config and no ROUTERD_AUTH_SECRET: the development secret signs,
    // which the node (with the tests' secret) refuses.
    let mut command = client(&node, &["--player-id", "7"]);
    command.env_remove("ROUTERD_AUTH_SECRET");
    let output = run_script(command, "get\n");
    assert!(!output.status.success(), "{output:?}");
    assert_eq!(
        stdout(&output),
        "ERROR AUTH_FAILED: token signature does not match\n"
    );
    let stderr = stderr(&output);
    assert!(stderr.contains("the development secret"), "{stderr}");
    assert!(
        stderr.contains("auth.secret") && stderr.contains("ROUTERD_AUTH_SECRET"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_command_alone_fails_the_script() {
    let node = TestNode::start(support::config());
    let output = run_script(client(&node, &["--player-id", "3"]), "frobnicate\nget\n");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stdout(&output),
        "OK login 3\nOK get 0\n",
        "the script ran on"
    );
    assert!(
        stderr(&output).contains("1 command(s) not understood, 0 request(s) answered ERROR"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_room_push_reaches_a_second_client_process() {
    let node = TestNode::start(support::config());
    let mut listener = Interactive::spawn(client(&node, &["--player-id", "2"]));
    assert_eq!(listener.next_line(), "OK login 2");
    listener.send("join 7");
    assert_eq!(listener.next_line(), "OK join room=7 members=1");

    let token = support::token(1, 60);
    let output = run_script(
        client(&node, &["--token", &token]),
        "join 7\nsay 7 hello  there\nwait 300\n",
    );
    assert!(output.status.success(), "{output:?}");
    let lines = stdout(&output);
    let mut said: Vec<&str> = lines.lines().collect();
    // The sender hears itself; its PUSH and the answer to `say` may come in
    // either order, so compare them sorted.
    said.sort_unstable();
    assert_eq!(
        said,
        [
            "OK join room=7 members=2",
            "OK login 1",
            "OK say room=7 sent=2",
            "PUSH room.message room=7 from=1 hello  there",
        ]
    );
    assert_eq!(
        listener.next_line(),
        "PUSH room.message room=7 from=1 hello  there"
    );
    let (status, rest, err) = listener.finish();
    assert!(status.success(), "{status:?} {err}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn a_kicked_client_prints_the_push_and_exits_non_zero() {
    let node = TestNode::start(support::config());
    let old = Interactive::spawn(client(&node, &["--player-id", "3"]));
    assert_eq!(old.next_line(), "OK login 3");
    let output = run_script(client(&node, &["--player-id", "3"]), "get\n");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(old.next_line(), "PUSH sys.kicked logged in elsewhere");
    let (status, rest, err) = old.finish();
    assert!(!status.success(), "{status:?}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        err.contains("closed the connection after sys.kicked"),
        "{err}"
    );
}

#[test]
fn a_refused_connection_exits_non_zero() {
    let (_held, port) = support::refusing_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_routerd"));
    command
        .args(["client", "--addr", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = run_script(command, "get\n");
    assert!(!output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "");
    assert!(
        stderr(&output).contains("cannot connect to 127.0.0.1:"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn keepalives_hold_an_idle_session_open_and_a_server_close_exits_non_zero() {
    let mut config = support::config();
    config.gateway.idle_timeout_ms = 1000;
    let node = TestNode::start(config);
    // Silent for over two idle timeouts: the client's own pings (a fifth of
    // the idle timeout apart, leaving room for a slow machine) keep the
    // session, and they print nothing.
    let output = run_script(
        client(&node, &["--player-id", "5", "--keepalive-ms", "200"]),
        "wait 2500\nping still here\n",
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "OK login 5\nOK ping still here\n");
    // Without them the server closes the idle session, and the client says
    // so and fails.
    let output = run_script(
        client(&node, &["--player-id", "5", "--keepalive-ms", "0"]),
        "wait 2500\nping too late\n",
    );
    assert!(!output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "OK login 5\n");
    assert!(
        stderr(&output).contains("the server closed the connection"),
        "{}",
        stderr(&output)
    );
}
