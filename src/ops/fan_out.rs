//! Asking every other up member's admin endpoint the same call, with this
//! node's admin token: how a cluster-wide admin call (a script reload, a
//! rebalance) reaches every node.

use std::time::Duration;

use serde_json::{json, Value};

use super::{client, Ops};
use crate::store::MemberState;

impl Ops {
    /// `method path` on every other up member, in parallel, each given
    /// `timeout` to answer; each answer's JSON with its `node_id` and HTTP
    /// `status` added (or the error that kept it from answering), by node
    /// id.
    pub async fn ask_every_peer(
        &self,
        method: &'static str,
        path: &'static str,
        timeout: Duration,
    ) -> Vec<Value> {
        let token = self
            .0
            .token
            .as_ref()
            .map(|token| token.expose().to_string());
        let peers: Vec<(u64, String)> = self
            .0
            .view
            .snapshot()
            .peers
            .values()
            .filter(|peer| peer.state == MemberState::Up)
            .map(|peer| (peer.node.0, peer.admin.clone()))
            .collect();
        let asks: Vec<_> = peers
            .into_iter()
            .map(|(node, admin)| {
                let token = token.clone();
                tokio::task::spawn_blocking(move || {
                    match client::call(&admin, method, path, token.as_deref(), timeout) {
                        Ok(answer) => {
                            let mut body = answer.json().unwrap_or_else(|| json!({}));
                            if !body.is_object() {
                                body = json!({ "answer": body });
                            }
                            body["node_id"] = json!(node);
                            body["status"] = json!(answer.status);
                            body
                        }
                        Err(error) => json!({
                            "node_id": node,
                            "error": "unreachable",
                            "reason": error.to_string(),
                        }),
                    }
                })
            })
            .collect();
        let mut answers = Vec::new();
        for ask in asks {
            if let Ok(answer) = ask.await {
                answers.push(answer);
            }
        }
        answers.sort_by_key(|answer| answer["node_id"].as_u64());
        answers
    }
}
