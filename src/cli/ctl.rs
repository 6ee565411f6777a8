//! `routerd cluster status`, `routerd transfer` and `routerd drain`: the
//! admin endpoint's cluster operations from a terminal or a script, with
//! plain output and exit codes a script can act on.
//!
//! Exit codes: 0 done; 1 the admin endpoint could not be reached or
//! answered nonsense; 2 refused (the object, the target or the node is not
//! in a state that allows it; the reason is printed); 3 not finished in
//! time or the cluster is unavailable for it (try again); for a drain,
//! also a node that stopped with objects it did not move.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ops::client::{self, Answer};

/// How long one admin call may take.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(12);
/// How long a transfer call may take: past what the node asked takes when
/// it forwards the call to the owner and waits for its answer.
const TRANSFER_CALL_TIMEOUT: Duration = Duration::from_secs(25);

const _: () = assert!(
    TRANSFER_CALL_TIMEOUT.as_millis() > crate::ops::transfer::FORWARDING_ANSWER_MAX.as_millis()
);
/// How long `cluster status` waits for each peer's own count of objects.
pub(super) const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often `drain` looks at the drain's progress.
const DRAIN_POLL: Duration = Duration::from_millis(250);

/// How a command ended, as its exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Done = 0,
    Unreachable = 1,
    Refused = 2,
    Unavailable = 3,
}

/// A failed command: what to print and how to exit.
#[derive(Debug)]
pub struct Failed {
    pub exit: Exit,
    pub message: String,
}

pub(super) fn unreachable(message: impl Into<String>) -> Failed {
    Failed {
        exit: Exit::Unreachable,
        message: message.into(),
    }
}

/// `routerd cluster ...`
#[derive(Clone, Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Print the members table as the node at --admin sees it: id,
    /// incarnation, state, gateway, how long ago its heartbeat last moved,
    /// the link to it, and the objects it holds (asked of each member).
    Status {
        /// A node's admin endpoint, HOST:PORT.
        #[arg(long)]
        admin: String,
    },
}

/// `routerd transfer`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct TransferArgs {
    /// Any node's admin endpoint, HOST:PORT (the call reaches the owner).
    #[arg(long)]
    pub admin: String,
    /// The object's type: a name the node registered (`player`, `room`,
    /// `guild`...) or a numeric type id.
    #[arg(long = "type", default_value = "player")]
    pub kind: String,
    /// The object's id.
    #[arg(long)]
    pub id: u64,
    /// The node to move it to.
    #[arg(long)]
    pub to: u64,
    /// The admin token (`admin.token`); default: `ROUTERD_ADMIN_TOKEN`.
    #[arg(long)]
    pub token: Option<String>,
}

/// `routerd drain`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct DrainArgs {
    /// The admin endpoint of the node to drain, HOST:PORT.
    #[arg(long)]
    pub admin: String,
    /// Return once the drain started instead of following it to the
    /// node's exit.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to follow the drain before giving up (exit 3).
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
    /// The admin token (`admin.token`); default: `ROUTERD_ADMIN_TOKEN`.
    #[arg(long)]
    pub token: Option<String>,
}

/// The token a mutating call presents: `--token`, else
/// `ROUTERD_ADMIN_TOKEN`, else none (an endpoint without `admin.token`).
pub(super) fn token_of(given: &Option<String>) -> Option<String> {
    given
        .clone()
        .or_else(|| std::env::var(crate::config::ADMIN_TOKEN_ENV).ok())
        .filter(|token| !token.is_empty())
}

pub(super) fn call(
    admin: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Answer, Failed> {
    let answer = client::call(admin, method, path, token, timeout)
        .map_err(|error| unreachable(error.to_string()))?;
    refuse_unauthorized(answer, method, path)
}

/// `answer`, unless it is a 401: then what to print and exit 2.
fn refuse_unauthorized(answer: Answer, method: &str, path: &str) -> Result<Answer, Failed> {
    if answer.status == 401 {
        let reason = answer
            .json()
            .and_then(|body| body["reason"].as_str().map(str::to_string))
            .unwrap_or_else(|| answer.body.trim().to_string());
        return Err(Failed {
            exit: Exit::Refused,
            message: format!(
                "{method} {path}: unauthorized ({reason}); pass --token or set {}",
                crate::config::ADMIN_TOKEN_ENV
            ),
        });
    }
    Ok(answer)
}

pub(super) fn json_of(answer: &Answer, what: &str) -> Result<Value, Failed> {
    answer
        .json()
        .ok_or_else(|| unreachable(format!("{what}: {} {}", answer.status, answer.body.trim())))
}

/// The table `cluster status` prints.
pub fn cluster(command: &ClusterCommand) -> Result<(), Failed> {
    let ClusterCommand::Status { admin } = command;
    let answer = call(admin, "GET", "/cluster", None, CALL_TIMEOUT)?;
    if answer.status != 200 {
        return Err(unreachable(format!(
            "GET /cluster: {} {}",
            answer.status,
            answer.body.trim()
        )));
    }
    let view = json_of(&answer, "GET /cluster")?;
    print!("{}", render_status(&view, objects_of_peers(&view)));
    Ok(())
}

/// Each live peer's own count of the objects it holds (`None`: it did not
/// answer in time).
fn objects_of_peers(view: &Value) -> Vec<(u64, Option<i64>)> {
    let members = view["members"].as_array().cloned().unwrap_or_default();
    let asks: Vec<_> = members
        .into_iter()
        .filter(|member| member["link"] != "self")
        .filter(|member| {
            matches!(
                member["state"].as_str(),
                Some("up" | "joining" | "draining")
            )
        })
        .filter_map(|member| {
            let node = member["node_id"].as_u64()?;
            let admin = member["admin"].as_str()?.to_string();
            Some(std::thread::spawn(move || {
                let objects = client::call(&admin, "GET", "/cluster", None, PEER_TIMEOUT)
                    .ok()
                    .and_then(|answer| answer.json())
                    .and_then(|peer| peer["objects"].as_i64());
                (node, objects)
            }))
        })
        .collect();
    asks.into_iter().filter_map(|ask| ask.join().ok()).collect()
}

fn render_status(view: &Value, peer_objects: Vec<(u64, Option<i64>)>) -> String {
    let mut out = format!(
        "node {} (incarnation {}, {}{}), as it sees the cluster:\n",
        view["node_id"],
        view["incarnation"],
        view["state"].as_str().unwrap_or("?"),
        if view["fenced"] == true {
            ", FENCED"
        } else {
            ""
        }
    );
    let header = [
        "NODE",
        "INCARNATION",
        "STATE",
        "GATEWAY",
        "HEARTBEAT",
        "LINK",
        "OBJECTS",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for member in view["members"].as_array().into_iter().flatten() {
        let node = member["node_id"].as_u64().unwrap_or(0);
        let is_self = member["link"] == "self";
        let objects = if is_self {
            member["objects"].as_i64()
        } else {
            peer_objects
                .iter()
                .find(|(id, _)| *id == node)
                .and_then(|(_, objects)| *objects)
        };
        let heartbeat = match member["heartbeat_age_ms"].as_u64() {
            Some(age) => format!("{age} ms ago"),
            None => "-".to_string(),
        };
        let text = |value: &Value| value.as_str().unwrap_or("-").to_string();
        rows.push(vec![
            node.to_string(),
            member["incarnation"].to_string(),
            text(&member["state"]),
            text(&member["gateway"]),
            heartbeat,
            text(&member["link"]),
            objects.map_or("-".to_string(), |n| n.to_string()),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Moves one object; prints where it went.
pub fn transfer(args: &TransferArgs) -> Result<(), Failed> {
    let path = format!("/objects/{}/{}/transfer?to={}", args.kind, args.id, args.to);
    let started = Instant::now();
    let token = token_of(&args.token);
    let what = format!("{} {}", args.kind, args.id);
    let token = token.as_deref();
    let answer = client::call(&args.admin, "POST", &path, token, TRANSFER_CALL_TIMEOUT)
        .map_err(|error| unanswered_transfer(&what, args, &error))?;
    let answer = refuse_unauthorized(answer, "POST", &path)?;
    let body = json_of(&answer, "POST transfer")?;
    let elapsed = started.elapsed();
    match answer.status {
        200 if body["moved"] == false => {
            println!("{what} is on node {} already", body["owner"]);
            Ok(())
        }
        200 => {
            println!(
                "moved {what} to node {} (route version {}) in {} ms",
                body["owner"],
                body["route_version"],
                elapsed.as_millis()
            );
            Ok(())
        }
        status => Err(Failed {
            exit: if status == 503 {
                Exit::Unavailable
            } else {
                Exit::Refused
            },
            message: transfer_refusal(&what, &body),
        }),
    }
}

/// A transfer call that got no answer: after it was sent, the node may
/// be moving the object (exit 3, as `timed_out`); before, nothing started.
fn unanswered_transfer(what: &str, args: &TransferArgs, error: &client::CallError) -> Failed {
    if !error.may_have_arrived() {
        return unreachable(error.to_string());
    }
    Failed {
        exit: Exit::Unavailable,
        message: format!(
            "{what} may have moved, not confirmed: {error}; GET /objects/{}/{} on any node tells",
            args.kind, args.id
        ),
    }
}

/// What a transfer's answer other than 200 says to the operator. A
/// `timed_out` (no outcome in time, or a target that did not confirm) and
/// a `target_refused` (the record names the target) are not "not moved":
/// the object may have moved, or has, and its reason says how to tell.
fn transfer_refusal(what: &str, body: &serde_json::Value) -> String {
    let error = body["error"].as_str().unwrap_or("error");
    let reason = body["reason"].as_str().unwrap_or("no reason given");
    match error {
        "timed_out" | "target_refused" => {
            format!("{what} may have moved, not confirmed: {error} ({reason})")
        }
        _ => format!("{what} not moved: {error} ({reason})"),
    }
}

/// POSTs `path`, which starts an operation and answers 202 with its
/// first progress; any other answer is the refusal, "not `doing`: error
/// (reason)", exit 2 (3 for a 503: the node cannot now).
pub(super) fn start(
    admin: &str,
    path: &str,
    token: Option<&str>,
    doing: &str,
) -> Result<Value, Failed> {
    let answer = call(admin, "POST", path, token, CALL_TIMEOUT)?;
    let body = json_of(&answer, &format!("POST {path}"))?;
    if answer.status != 202 {
        return Err(Failed {
            exit: if answer.status == 503 {
                Exit::Unavailable
            } else {
                Exit::Refused
            },
            message: format!(
                "not {doing}: {} ({})",
                body["error"].as_str().unwrap_or("error"),
                body["reason"].as_str().unwrap_or("no reason given")
            ),
        });
    }
    Ok(body)
}

/// Starts a drain and, unless told not to, follows it until the node
/// stopped.
pub fn drain(args: &DrainArgs) -> Result<(), Failed> {
    let token = token_of(&args.token);
    let body = start(&args.admin, "/drain", token.as_deref(), "draining")?;
    println!("draining {}: {}", args.admin, progress_line(&body));
    if args.no_wait {
        return Ok(());
    }
    // Who else can tell, once the node is gone, whether it left: a node with
    // nothing to move may finish and exit before the first poll.
    let witnesses = client::call(&args.admin, "GET", "/cluster", None, PEER_TIMEOUT)
        .ok()
        .and_then(|answer| answer.json())
        .map(|cluster| witnesses(&cluster))
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut last = body;
    let mut last_line = String::new();
    loop {
        std::thread::sleep(DRAIN_POLL);
        let polled = client::call(&args.admin, "GET", "/drain", None, PEER_TIMEOUT)
            .ok()
            .and_then(|answer| answer.json());
        let Some(status) = polled else {
            // The endpoint went away with the process: how the drain ended
            // is in its last status once every core had finished (the
            // node waits for it to be read), or, failing that, the
            // membership table says `left`.
            if drain_finished(&last) {
                return drain_outcome(&last, true);
            }
            if left_per_witnesses(&witnesses) {
                return drain_outcome(&last, false);
            }
            return Err(unreachable(format!(
                "lost contact with {} before the drain finished (last: {})",
                args.admin,
                progress_line(&last)
            )));
        };
        let line = progress_line(&status);
        if line != last_line {
            println!("  {line}");
            last_line = line;
        }
        last = status;
        if Instant::now() >= deadline {
            return Err(Failed {
                exit: Exit::Unavailable,
                message: format!("still draining after {} s", args.timeout_secs),
            });
        }
    }
}

/// The node's id and the admin endpoints of the other members, from its
/// `GET /cluster`.
fn witnesses(cluster: &Value) -> (u64, Vec<String>) {
    let me = cluster["node_id"].as_u64().unwrap_or(0);
    let admins = cluster["members"]
        .as_array()
        .map(|members| {
            members
                .iter()
                .filter(|member| member["node_id"].as_u64() != Some(me))
                .filter_map(|member| member["admin"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (me, admins)
}

/// Whether any other member's view of the membership table has the node
/// `left` (written by the node itself as the drain's last step).
fn left_per_witnesses((me, admins): &(u64, Vec<String>)) -> bool {
    let deadline = Instant::now() + PEER_TIMEOUT * 2;
    while Instant::now() < deadline {
        for admin in admins {
            let view = client::call(admin, "GET", "/cluster", None, PEER_TIMEOUT)
                .ok()
                .and_then(|answer| answer.json());
            let left = view.as_ref().and_then(|view| {
                view["members"]
                    .as_array()?
                    .iter()
                    .find(|member| member["node_id"].as_u64() == Some(*me))
                    .map(|member| member["state"] == "left")
            });
            if left == Some(true) {
                return true;
            }
        }
        // A peer reads the table every heartbeat interval: ask again.
        std::thread::sleep(DRAIN_POLL);
    }
    false
}

/// How a drain ended, from its last status (`finished`: every core was
/// done, so the counts are final; otherwise the node was seen to leave
/// before they were read). Drained only when nothing was left behind:
/// objects the drain did not move (no other node took them, it gave up on
/// them, or it timed out) were saved and released as the node stopped,
/// and load wherever they are next used, but the drain did not do its
/// job: exit 3.
fn drain_outcome(last: &Value, finished: bool) -> Result<(), Failed> {
    let left = |key: &str| last[key].as_u64().unwrap_or(0);
    let incomplete = if finished {
        last["complete"] != true
    } else {
        left("objects") > 0
            || left("moving") > 0
            || left("given_up") > 0
            || last["no_target"] == true
            || last["timed_out"] == true
    };
    if !incomplete {
        println!("drained: the node left the cluster and stopped");
        return Ok(());
    }
    let mut why = Vec::new();
    if last["no_target"] == true {
        why.push("no other node takes objects".to_string());
    }
    if left("given_up") > 0 {
        why.push(format!(
            "{} given up after failed transfers",
            left("given_up")
        ));
    }
    if last["timed_out"] == true {
        why.push("cluster.drain_timeout_ms passed".to_string());
    }
    if !finished {
        why.push("its final count was not read".to_string());
    }
    Err(Failed {
        exit: Exit::Unavailable,
        message: format!(
            "the node stopped with objects not moved ({}; last: {}): they were saved and \
             released as it stopped, and load where they are next used",
            why.join(", "),
            progress_line(last)
        ),
    })
}

fn drain_finished(status: &Value) -> bool {
    status["cores"].as_u64().is_some_and(|cores| cores > 0)
        && status["cores_done"] == status["cores"]
}

fn progress_line(status: &Value) -> String {
    format!(
        "objects {} moving {} moved {} not moved {} sessions {} (cores done {}/{})",
        status["objects"],
        status["moving"],
        status["moved"],
        status["not_moved"],
        status["sessions"],
        status["cores_done"],
        status["cores"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_transfer_that_may_have_moved_is_not_said_not_moved() {
        let answer = |error: &str| json!({"error": error, "reason": "why"});
        assert_eq!(
            transfer_refusal("player 5", &answer("timed_out")),
            "player 5 may have moved, not confirmed: timed_out (why)"
        );
        assert_eq!(
            transfer_refusal("player 5", &answer("target_refused")),
            "player 5 may have moved, not confirmed: target_refused (why)"
        );
        assert_eq!(
            transfer_refusal("player 5", &answer("unknown_node")),
            "player 5 not moved: unknown_node (why)"
        );
    }

    /// The CLI's own call timing out after it was sent said "cannot
    /// reach" (exit 1) of a transfer the node may be making.
    #[test]
    fn a_transfer_call_sent_and_unanswered_may_have_moved() {
        let args = TransferArgs {
            admin: "127.0.0.1:9464".into(),
            kind: "player".into(),
            id: 5,
            to: 2,
            token: None,
        };
        let timeout = client::CallError::Timeout {
            address: args.admin.clone(),
            timeout: TRANSFER_CALL_TIMEOUT,
        };
        let failed = unanswered_transfer("player 5", &args, &timeout);
        assert_eq!(failed.exit, Exit::Unavailable);
        assert!(
            failed
                .message
                .starts_with("player 5 may have moved, not confirmed"),
            "{}",
            failed.message
        );
        assert!(
            failed.message.contains("GET /objects/player/5"),
            "{}",
            failed.message
        );
        let refused = client::CallError::Connect {
            address: args.admin.clone(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        assert_eq!(
            unanswered_transfer("player 5", &args, &refused).exit,
            Exit::Unreachable
        );
    }

    #[test]
    fn the_status_table_lines_up_and_says_what_it_does_not_know() {
        let view = json!({
            "node_id": 1, "incarnation": 2, "state": "up", "fenced": false,
            "members": [
                {"node_id": 1, "incarnation": 2, "state": "up", "gateway": "127.0.0.1:7400",
                 "admin": "127.0.0.1:9464", "link": "self", "objects": 12},
                {"node_id": 2, "incarnation": 1, "state": "up", "gateway": "127.0.0.1:7401",
                 "admin": "127.0.0.1:9465", "link": "up", "heartbeat_age_ms": 120},
                {"node_id": 3, "incarnation": 4, "state": "down", "gateway": "127.0.0.1:7402",
                 "admin": "127.0.0.1:9466", "link": "connecting", "heartbeat_age_ms": 9000}
            ]
        });
        let table = render_status(&view, vec![(2, Some(8))]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "node 1 (incarnation 2, up), as it sees the cluster:"
        );
        assert_eq!(
            lines[1],
            "NODE  INCARNATION  STATE  GATEWAY         HEARTBEAT    LINK        OBJECTS"
        );
        assert_eq!(
            lines[2],
            "1     2            up     127.0.0.1:7400  -            self        12"
        );
        assert_eq!(
            lines[3],
            "2     1            up     127.0.0.1:7401  120 ms ago   up          8"
        );
        assert_eq!(
            lines[4],
            "3     4            down   127.0.0.1:7402  9000 ms ago  connecting  -"
        );
    }

    /// A drain that ended with objects left (no other node to take them,
    /// or its timeout) was reported "drained" with exit 0, as the node
    /// stops either way: only one that left nothing behind is.
    #[test]
    fn a_drain_that_left_objects_is_not_said_drained() {
        let done = |extra: Value| {
            let mut status = json!({
                "cores": 2, "cores_done": 2, "objects": 0, "moving": 0, "given_up": 0,
                "no_target": false, "timed_out": false, "complete": true,
            });
            for (key, value) in extra.as_object().unwrap() {
                status[key] = value.clone();
            }
            status
        };
        assert!(drain_outcome(&done(json!({})), true).is_ok());
        // Nowhere to send objects, but none to send: nothing left behind.
        assert!(drain_outcome(&done(json!({"no_target": true})), true).is_ok());
        for left in [
            json!({"objects": 4, "no_target": true, "complete": false}),
            json!({"objects": 2, "timed_out": true, "complete": false}),
            json!({"moving": 1, "timed_out": true, "complete": false}),
            json!({"objects": 1, "given_up": 1, "complete": false}),
        ] {
            let failed = drain_outcome(&done(left.clone()), true).unwrap_err();
            assert_eq!(failed.exit, Exit::Unavailable, "{left}");
            assert!(
                failed.message.contains("objects not moved"),
                "{}",
                failed.message
            );
        }
        let failed = drain_outcome(&done(json!({"no_target": true, "objects": 3})), false);
        assert!(failed
            .unwrap_err()
            .message
            .contains("no other node takes objects"));
        // Seen to leave with nothing counted as left: drained.
        let started = json!({"cores": 2, "cores_done": 0, "objects": 0, "moving": 0});
        assert!(drain_outcome(&started, false).is_ok());
    }

    #[test]
    fn a_drain_is_finished_when_every_core_is() {
        assert!(drain_finished(&json!({"cores": 2, "cores_done": 2})));
        assert!(!drain_finished(&json!({"cores": 2, "cores_done": 1})));
        assert!(!drain_finished(&json!({})));
    }
}
