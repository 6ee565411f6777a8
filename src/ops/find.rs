//! A player's sessions on every member (`GET
//! /sessions?player=N&scope=cluster`): this node's listing, and each other
//! live member's `GET /sessions?player=N` asked on its admin endpoint at
//! once, as a cluster rebalance asks them. A member that does not answer
//! is listed with why, so one slow node never hides the others' sessions.

use std::time::Duration;

use serde_json::{json, Value};

use super::client;
use super::listing::{ListRefused, PageAsk, PAGE_LIMIT_MAX};
use super::Ops;

/// How long a member may take to list its sessions.
const FIND_TIMEOUT: Duration = Duration::from_secs(3);

impl Ops {
    /// Every member's sessions of `player_id`, this node's first, as JSON:
    /// `{"player_id", "nodes": [{"node_id", "sessions": [...]}, or
    /// {"node_id", "error", "reason"}]}`.
    pub async fn find_sessions(&self, player_id: u64) -> Result<Value, ListRefused> {
        let page = PageAsk {
            after: None,
            limit: PAGE_LIMIT_MAX,
        };
        let own = self.list_sessions(Some(player_id), page).await?;
        let peers: Vec<(u64, String)> = self
            .0
            .view
            .snapshot()
            .peers
            .values()
            .filter(|peer| peer.is_live() && !peer.admin.is_empty())
            .map(|peer| (peer.node.0, peer.admin.clone()))
            .collect();
        let asks: Vec<_> = peers
            .into_iter()
            .map(|(node, admin)| {
                let path = format!("/sessions?player={player_id}&limit={PAGE_LIMIT_MAX}");
                let ask = tokio::task::spawn_blocking(move || {
                    member_sessions(node, client::call(&admin, "GET", &path, None, FIND_TIMEOUT))
                });
                (node, ask)
            })
            .collect();
        let mut nodes = vec![node_sessions(own)];
        for (node, ask) in asks {
            nodes.push(ask.await.unwrap_or_else(|error| {
                json!({ "node_id": node, "error": "internal", "reason": error.to_string() })
            }));
        }
        Ok(json!({ "player_id": player_id, "nodes": nodes }))
    }
}

/// A node's part: its id and sessions.
fn node_sessions(listing: Value) -> Value {
    json!({ "node_id": listing["node_id"], "sessions": listing["sessions"] })
}

/// What a member answered, or why it did not.
fn member_sessions(node: u64, answer: Result<client::Answer, client::CallError>) -> Value {
    match answer {
        Ok(answer) if answer.status == 200 => match answer.json() {
            Some(listing) => node_sessions(listing),
            None => json!({ "node_id": node, "error": "bad_answer", "reason": answer.body }),
        },
        Ok(answer) => {
            let body = answer.json().unwrap_or_else(|| json!({}));
            json!({
                "node_id": node,
                "error": body["error"].as_str().unwrap_or("refused"),
                "reason": format!("{}: {}", answer.status, body["reason"].as_str().unwrap_or("")),
            })
        }
        Err(error) => {
            json!({ "node_id": node, "error": "unreachable", "reason": error.to_string() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_that_fails_is_listed_with_why() {
        let listed = member_sessions(
            2,
            Ok(client::Answer {
                status: 200,
                body: r#"{"node_id":2,"sessions":[{"session_id":5}],"total":9}"#.to_string(),
            }),
        );
        assert_eq!(
            listed,
            json!({ "node_id": 2, "sessions": [{ "session_id": 5 }] })
        );
        let busy = member_sessions(
            3,
            Ok(client::Answer {
                status: 503,
                body: r#"{"error":"busy","reason":"call again"}"#.to_string(),
            }),
        );
        assert_eq!(busy["error"], "busy");
        assert_eq!(busy["reason"], "503: call again");
        let gone = member_sessions(4, Err(client::CallError::Resolve("nowhere".to_string())));
        assert_eq!(gone["error"], "unreachable");
    }
}
