//! `routerd rebalance --admin ADDR`: every up node moves its objects whose
//! rendezvous node is another (`POST /rebalance`), and the command follows
//! each node's rebalance (`GET /nodes/{id}/rebalance`, through the same
//! admin endpoint) until all are done, then prints what moved.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::ctl::{start, token_of, Exit, Failed, PEER_TIMEOUT};
use crate::ops::client;

/// How often the rebalances' progress is looked at.
const POLL: Duration = Duration::from_millis(250);

/// `routerd rebalance`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct RebalanceArgs {
    /// Any node's admin endpoint, HOST:PORT: every up member rebalances.
    #[arg(long)]
    pub admin: String,
    /// Return once every node started instead of following them to the
    /// end.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to follow the rebalances before giving up (exit 3).
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// The admin token (`admin.token`); default: `ROUTERD_ADMIN_TOKEN`.
    #[arg(long)]
    pub token: Option<String>,
}

/// Starts a rebalance of the cluster and, unless told not to, follows it.
pub fn run(args: &RebalanceArgs) -> Result<(), Failed> {
    let token = token_of(&args.token);
    let body = start(&args.admin, "/rebalance", token.as_deref(), "rebalancing")?;
    let nodes: Vec<Value> = body["nodes"].as_array().cloned().unwrap_or_default();
    let mut asked = Vec::new();
    let mut not_started = Vec::new();
    for node in &nodes {
        let id = node["node_id"].as_u64().unwrap_or(0);
        if node.get("running").is_some() {
            println!("node {id}: rebalancing, {}", progress_line(node));
            asked.push(id);
        } else {
            let why = format!(
                "node {id}: not started: {} ({})",
                node["error"].as_str().unwrap_or("error"),
                node["reason"].as_str().unwrap_or("no reason given")
            );
            println!("{why}");
            not_started.push(why);
        }
    }
    if args.no_wait {
        return finish(&not_started, 0);
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut last: Vec<(u64, Value)> = Vec::new();
    loop {
        let statuses: Vec<(u64, Value)> = asked
            .iter()
            .map(|id| {
                let path = format!("/nodes/{id}/rebalance");
                let status = client::call(&args.admin, "GET", &path, None, PEER_TIMEOUT)
                    .ok()
                    .and_then(|answer| answer.json())
                    .unwrap_or(Value::Null);
                (*id, status)
            })
            .collect();
        let done = statuses
            .iter()
            .all(|(_, status)| status["running"] == false);
        if statuses != last {
            for (id, status) in &statuses {
                if !status.is_null() {
                    println!("  node {id}: {}", progress_line(status));
                }
            }
            last = statuses.clone();
        }
        if done {
            let failed: u64 = statuses
                .iter()
                .map(|(_, status)| status["failed"].as_u64().unwrap_or(0))
                .sum();
            for (id, status) in &statuses {
                println!("node {id}: {}", summary_line(status));
            }
            return finish(&not_started, failed);
        }
        if Instant::now() >= deadline {
            return Err(Failed {
                exit: Exit::Unavailable,
                message: format!("still rebalancing after {} s", args.timeout_secs),
            });
        }
        std::thread::sleep(POLL);
    }
}

fn finish(not_started: &[String], failed: u64) -> Result<(), Failed> {
    if !not_started.is_empty() {
        return Err(Failed {
            exit: Exit::Unavailable,
            message: format!("some nodes did not rebalance: {}", not_started.join("; ")),
        });
    }
    if failed > 0 {
        return Err(Failed {
            exit: Exit::Unavailable,
            message: format!("{failed} objects did not move (they stay where they are); run again"),
        });
    }
    Ok(())
}

fn progress_line(status: &Value) -> String {
    format!(
        "planned {} moved {} failed {} moving {}",
        status["planned"], status["moved"], status["failed"], status["moving"]
    )
}

/// `moved 100 (to node 2: 100) failed 0 in 812 ms`.
fn summary_line(status: &Value) -> String {
    let targets: Vec<String> = status["moved_to"]
        .as_object()
        .map(|moved_to| {
            moved_to
                .iter()
                .map(|(node, count)| format!("to node {node}: {count}"))
                .collect()
        })
        .unwrap_or_default();
    let mut line = format!("moved {}", status["moved"]);
    if !targets.is_empty() {
        line.push_str(&format!(" ({})", targets.join(", ")));
    }
    line.push_str(&format!(
        " failed {} in {} ms",
        status["failed"], status["elapsed_ms"]
    ));
    if let Some(failures) = status["failures"].as_object().filter(|f| !f.is_empty()) {
        let reasons: Vec<String> = failures
            .iter()
            .map(|(why, count)| format!("{why}: {count}"))
            .collect();
        line.push_str(&format!(" [{}]", reasons.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_summary_says_where_objects_went_and_why_others_did_not() {
        let status = json!({
            "moved": 3, "failed": 1, "elapsed_ms": 40,
            "moved_to": {"2": 2, "3": 1}, "failures": {"timed_out": 1}
        });
        assert_eq!(
            summary_line(&status),
            "moved 3 (to node 2: 2, to node 3: 1) failed 1 in 40 ms [timed_out: 1]"
        );
        assert!(finish(&[], 0).is_ok());
        assert_eq!(finish(&[], 1).unwrap_err().exit, Exit::Unavailable);
    }
}
