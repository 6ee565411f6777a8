//! `POST /objects/{type}/{id}/transfer?to=N`, on any node: the call reaches
//! the object's owner, whose core runs the router's `transfer` (the state
//! shipped, requests arriving meanwhile queued and passed on in order), and
//! is answered when the target confirmed or refused, or a deadline passed.
//!
//! A node that is not the owner forwards the call to the owner's admin
//! endpoint, at the address the owner advertises in the membership table.
//! HTTP rather than the cluster links because this is an operator's cold
//! path: the links carry the router's `NodeMessage`s, one flat definition
//! shared with the simulator and fuzzed, and a request/answer pair for
//! operators would add a second protocol to them for a call made a few
//! times a day. The price: the admin endpoints must reach each other
//! (`admin.listen` on an address the peers can dial); when they cannot, the
//! call says so (503 `owner_unreachable`) and can be made at the owner.
//! A forwarded call carries `forwarded=1` and is never forwarded again: an
//! owner that changed meanwhile is answered 409 `not_owner`.
//!
//! Time: the owner answers within `OWNER_ANSWER_MAX` (its record read and
//! `TRANSFER_WAIT`, cut there by its admin endpoint), and the node that
//! forwards waits longer than that (`FORWARD_TIMEOUT`), so the owner's
//! answer, whatever it is, comes back. A forward that got no answer after
//! its request went out may have started the transfer: it is answered 503
//! `timed_out` (may have moved), never as not moved.

use std::time::Duration;

use serde_json::json;
use wire::ObjectKey;

use super::{Ops, Unreached};
use crate::cluster::view::Snapshot;
use crate::ids::NodeId;
use crate::ops::client;
use crate::router::{TransferError, TransferOutcome};
use crate::store::RouteRecord;

/// How long the owner waits for a transfer to end before it answers 503
/// `timed_out` (the transfer may still complete). Below the admin
/// endpoint's handler timeout, so the answer is this JSON and not the
/// endpoint's own 503.
pub const TRANSFER_WAIT: Duration = Duration::from_secs(8);
/// The longest the owner takes to answer a transfer: its record read and
/// `TRANSFER_WAIT`, bounded by the admin endpoint's handler timeout (which
/// is this), past which the endpoint answers 503 `timed_out` itself.
pub const OWNER_ANSWER_MAX: Duration = Duration::from_secs(10);
/// How long a forwarded call may take: past the owner's own bound, with a
/// margin for the connection and the node's admin thread, so that the
/// owner's answer is what comes back.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(12);
/// The longest the node asked takes to answer a transfer it forwards: its
/// own record read (bounded as any handler's time) and the forward. Its
/// admin endpoint gives such a call this long.
pub const FORWARDING_ANSWER_MAX: Duration = Duration::from_secs(22);

const _: () = assert!(TRANSFER_WAIT.as_millis() < OWNER_ANSWER_MAX.as_millis());
const _: () = assert!(FORWARD_TIMEOUT.as_millis() > OWNER_ANSWER_MAX.as_millis());
const _: () = assert!(
    FORWARDING_ANSWER_MAX.as_millis() >= OWNER_ANSWER_MAX.as_millis() + FORWARD_TIMEOUT.as_millis()
);

/// An answer of an operation: the HTTP status and the JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct OpAnswer {
    pub status: u16,
    pub body: serde_json::Value,
}

impl OpAnswer {
    fn error(status: u16, error: &str, reason: impl Into<String>) -> OpAnswer {
        OpAnswer {
            status,
            body: json!({ "error": error, "reason": reason.into() }),
        }
    }
}

/// What the call names.
#[derive(Clone, Copy, Debug)]
pub struct TransferCall<'a> {
    pub key: ObjectKey,
    /// The type as the path spelled it (`player`, `room` or a number).
    pub kind: &'a str,
    pub target: NodeId,
    /// Forwarded by another node: never forward again.
    pub forwarded: bool,
}

impl Ops {
    /// Transfers the object of `call` to its target, wherever it lives.
    pub async fn transfer(&self, call: TransferCall<'_>) -> OpAnswer {
        let inner = &self.0;
        if call.target.is_none() {
            return OpAnswer::error(400, "bad_target", "node 0 owns nothing");
        }
        let record = match self.record_of(call.key).await {
            Ok(record) => record,
            Err(answer) => return answer,
        };
        let snapshot = inner.view.snapshot();
        let me = inner.view.me();
        let owner = record.owner_node;
        if owner.is_none() {
            return OpAnswer::error(
                409,
                "not_active",
                "no node holds the object: it is placed on its next use",
            );
        }
        if owner == call.target {
            return OpAnswer {
                status: 200,
                body: json!({
                    "owner": owner.0,
                    "route_version": record.route_version.0,
                    "moved": false,
                }),
            };
        }
        if owner == me {
            if record.owner_incarnation != snapshot.me.incarnation {
                return OpAnswer::error(
                    409,
                    "not_active",
                    "the record names an earlier start of this node: the object is loaded on \
                     its next use",
                );
            }
            return self.transfer_here(call).await;
        }
        self.forward_to_owner(call, &record, &snapshot).await
    }

    /// The object's record, or the answer to give when there is none or the
    /// store cannot say.
    async fn record_of(&self, key: ObjectKey) -> Result<RouteRecord, OpAnswer> {
        match self.0.store.load(key).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(OpAnswer::error(
                404,
                "no_such_object",
                "the store has no record of it",
            )),
            Err(error) => Err(OpAnswer::error(
                503,
                "store_unavailable",
                format!("the store: {error}"),
            )),
        }
    }

    /// Another node owns the object: the call goes to its admin endpoint,
    /// unless it was forwarded already or the owner is not live.
    async fn forward_to_owner(
        &self,
        call: TransferCall<'_>,
        record: &RouteRecord,
        snapshot: &Snapshot,
    ) -> OpAnswer {
        let owner = record.owner_node;
        if call.forwarded {
            return OpAnswer::error(
                409,
                "not_owner",
                format!("the object's owner is node {} now; call again", owner.0),
            );
        }
        let peer = snapshot
            .peers
            .get(&owner)
            .filter(|peer| peer.is_live() && peer.incarnation == record.owner_incarnation);
        let Some(peer) = peer else {
            return OpAnswer::error(
                503,
                "owner_unavailable",
                format!(
                    "the owner, node {}, is not live: the object is claimed by another node on \
                     its next use",
                    owner.0
                ),
            );
        };
        let token = self
            .0
            .token
            .as_ref()
            .map(|token| token.expose().to_string());
        forward(&peer.admin, token, owner, call, FORWARD_TIMEOUT).await
    }

    /// The owner's part: the core that holds the object runs the transfer.
    async fn transfer_here(&self, call: TransferCall<'_>) -> OpAnswer {
        let answer = match self.send_transfer(call.key, call.target) {
            Ok(answer) => answer,
            Err(Unreached::Busy) => {
                return OpAnswer::error(503, "busy", "too many operations queued; call again")
            }
            Err(Unreached::Stopped) => {
                return OpAnswer::error(503, "stopping", "this node is stopping")
            }
        };
        match tokio::time::timeout(TRANSFER_WAIT, answer).await {
            Err(_) => OpAnswer::error(
                503,
                "timed_out",
                format!(
                    "no outcome within {TRANSFER_WAIT:?}: the transfer may still complete; \
                     GET /objects/{}/{} tells",
                    call.kind, call.key.object_id
                ),
            ),
            Ok(Err(_)) => OpAnswer::error(503, "stopping", "this node is stopping"),
            Ok(Ok(Err(error))) => refused(error, call.target),
            Ok(Ok(Ok(done))) => {
                let owner = json!({
                    "owner": done.target.0,
                    "route_version": done.route_version.0,
                });
                let (status, error, reason) =
                    match done.outcome {
                        TransferOutcome::Confirmed | TransferOutcome::Written => {
                            let mut body = owner;
                            body["moved"] = json!(true);
                            return OpAnswer { status: 200, body };
                        }
                        TransferOutcome::Refused => (
                            409,
                            "target_refused",
                            "the record names the target, which refused to confirm: it loads the \
                         object from the store on its next request",
                        ),
                        TransferOutcome::NoAnswer => (
                            503,
                            "timed_out",
                            "the record names the target, which did not confirm within \
                         router.transfer_ack_timeout_ms: it loads the object from the store on \
                         its next request",
                        ),
                        TransferOutcome::NotMoved => return OpAnswer::error(
                            409,
                            "not_moved",
                            "the ownership write did not apply (the record changed meanwhile): \
                             the object did not move",
                        ),
                    };
                let mut body = owner;
                body["error"] = json!(error);
                body["reason"] = json!(reason);
                OpAnswer { status, body }
            }
        }
    }
}

/// The answer to a transfer the owner's router would not start.
fn refused(error: TransferError, target: NodeId) -> OpAnswer {
    match error {
        TransferError::UnknownNode => OpAnswer::error(
            404,
            "unknown_node",
            format!(
                "no member of the cluster is node {}: no membership row names it (never \
                 started, or its row was deleted after it left)",
                target.0
            ),
        ),
        TransferError::TargetUnavailable => OpAnswer::error(
            503,
            "target_unavailable",
            format!("node {} is a member but not live (down or left)", target.0),
        ),
        TransferError::TargetDraining => OpAnswer::error(
            409,
            "target_draining",
            format!("node {} drains: no object is placed on it", target.0),
        ),
        TransferError::InProgress => OpAnswer::error(
            409,
            "busy",
            "the object is moving already, or a transfer of it waits",
        ),
        TransferError::NotWritable => OpAnswer::error(
            409,
            "not_active",
            "this node owns the record but does not hold the object now: it is loaded on its \
             next use",
        ),
        TransferError::SameNode => OpAnswer::error(409, "same_node", "the object is there"),
        TransferError::ShuttingDown => OpAnswer::error(503, "stopping", "this node is stopping"),
        TransferError::Fenced => OpAnswer::error(
            503,
            "fenced",
            "this node lost its membership lease and serves nothing until it rejoins",
        ),
        TransferError::UnknownType => {
            OpAnswer::error(404, "no_such_type", "no object type has this id")
        }
    }
}

/// Passes the call to the owner's admin endpoint and its answer back,
/// with this node's admin token (the nodes of a cluster share one), within
/// `timeout`.
async fn forward(
    admin: &str,
    token: Option<String>,
    owner: NodeId,
    call: TransferCall<'_>,
    timeout: Duration,
) -> OpAnswer {
    if admin.is_empty() {
        return OpAnswer::error(
            503,
            "owner_unreachable",
            format!(
                "node {} advertises no admin address others can reach (none, or an unspecified \
                 one such as 0.0.0.0: set its admin.advertise)",
                owner.0
            ),
        );
    }
    let address = admin.to_string();
    let path = format!(
        "/objects/{}/{}/transfer?to={}&forwarded=1",
        call.kind, call.key.object_id, call.target.0
    );
    let called = tokio::task::spawn_blocking(move || {
        client::call(&address, "POST", &path, token.as_deref(), timeout)
    })
    .await;
    match called {
        Ok(Ok(answer)) => match answer.json() {
            Some(body) => OpAnswer {
                status: answer.status,
                body,
            },
            None => OpAnswer::error(
                502,
                "owner_unreachable",
                format!(
                    "node {} answered {} without JSON: {}",
                    owner.0,
                    answer.status,
                    answer.body.trim()
                ),
            ),
        },
        // Sent, and no answer: the owner may be moving the object.
        Ok(Err(error)) if error.may_have_arrived() => OpAnswer::error(
            503,
            "timed_out",
            format!(
                "node {} took the call but gave no answer ({error}): the transfer may have \
                 completed; GET /objects/{}/{} tells",
                owner.0, call.kind, call.key.object_id
            ),
        ),
        Ok(Err(error)) => OpAnswer::error(
            503,
            "owner_unreachable",
            format!(
                "cannot reach node {}'s admin endpoint ({error}); call the owner's admin directly",
                owner.0
            ),
        ),
        Err(_) => OpAnswer::error(503, "stopping", "this node is stopping"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> TransferCall<'static> {
        TransferCall {
            key: ObjectKey {
                type_id: 1,
                zone_id: 0,
                object_id: 7,
            },
            kind: "player",
            target: NodeId(2),
            forwarded: false,
        }
    }

    fn forward_to(admin: &str, timeout: Duration) -> OpAnswer {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(forward(admin, None, NodeId(3), call(), timeout))
    }

    /// A forward whose request went out and got no answer in time was
    /// answered `owner_unreachable`, which says the object did not move,
    /// while the owner may have moved it: it is `timed_out` (may have).
    #[test]
    fn a_forward_sent_and_unanswered_may_have_moved_the_object() {
        // Accepted by the kernel, never answered.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = silent.local_addr().unwrap().to_string();
        let answer = forward_to(&address, Duration::from_millis(200));
        assert_eq!(
            (answer.status, answer.body["error"].as_str()),
            (503, Some("timed_out")),
            "{}",
            answer.body
        );
        let reason = answer.body["reason"].as_str().unwrap();
        assert!(reason.contains("may have completed"), "{reason}");
        assert!(reason.contains("GET /objects/player/7"), "{reason}");
        // Never connected: nothing started, so not moved.
        drop(silent);
        let answer = forward_to(&address, Duration::from_millis(500));
        assert_eq!(
            (answer.status, answer.body["error"].as_str()),
            (503, Some("owner_unreachable")),
            "{}",
            answer.body
        );
    }
}
