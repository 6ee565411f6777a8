//! `routerd scripts reload --admin ADDR`: every node of the cluster loads
//! every file of its `[scripts] dir` again (`POST /scripts/reload` on any
//! node, which asks the others). Prints each node's files: reloaded, unchanged, or
//! kept at the loaded version and why. Exit 0 when every node took every
//! file, 1 admin unreachable, 2 a file was refused somewhere.

use std::time::Duration;

use serde_json::Value;

use super::ctl::{call, token_of, Exit, Failed};

/// A reload compiles every file on every node, and the node asked waits
/// for the others.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// `routerd scripts ...`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum ScriptsCommand {
    /// Reload every node's scripts; a file that fails keeps its loaded
    /// version (exit 2, saying why).
    Reload(ReloadArgs),
}

/// `routerd scripts reload`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ReloadArgs {
    /// Any node's admin endpoint, HOST:PORT: every up member reloads.
    #[arg(long)]
    pub admin: String,
    /// The admin token (`admin.token`); default: `ROUTERD_ADMIN_TOKEN`.
    #[arg(long)]
    pub token: Option<String>,
}

/// Runs a `routerd scripts` command.
pub fn run(command: &ScriptsCommand) -> Result<(), Failed> {
    let ScriptsCommand::Reload(args) = command;
    let token = token_of(&args.token);
    let answer = call(
        &args.admin,
        "POST",
        "/scripts/reload",
        token.as_deref(),
        RELOAD_TIMEOUT,
    )?;
    let Some(body) = answer.json().filter(|_| matches!(answer.status, 200 | 422)) else {
        return Err(Failed {
            exit: Exit::Refused,
            message: format!("reload refused ({}): {}", answer.status, answer.body.trim()),
        });
    };
    for node in body["nodes"].as_array().into_iter().flatten() {
        print_node(node);
    }
    if answer.status == 200 {
        return Ok(());
    }
    Err(Failed {
        exit: Exit::Refused,
        message: "a script failed to load on some node; it keeps its loaded version".to_string(),
    })
}

fn print_node(node: &Value) {
    let id = node["node_id"].as_u64().unwrap_or(0);
    if let Some(error) = node["error"].as_str() {
        let reason = node["reason"].as_str().unwrap_or_default();
        println!("node {id}: {error} {reason}");
        return;
    }
    println!("node {id}: generation {}", node["generation"]);
    for file in node["files"].as_array().into_iter().flatten() {
        let name = file["file"].as_str().unwrap_or("?");
        let status = file["status"].as_str().unwrap_or("?");
        match file["reason"].as_str() {
            Some(reason) => println!("  {name}: {status}: {reason}"),
            None => println!("  {name}: {status} (version {})", file["version"]),
        }
    }
}
