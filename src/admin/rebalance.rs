//! `POST /rebalance` and `GET /rebalance`: moving objects to their
//! rendezvous nodes (`crate::ops::rebalance`). The POST is behind the admin
//! token like every mutating call (`auth`), and answers at once (202): a
//! rebalance runs for as long as its objects take to move, at
//! `cluster.rebalance_concurrency` transfers at a time per node.

use hyper::{Response, StatusCode};

use super::forward::{no_cluster, node_only, refused};
use super::routes::{json_status, Body};
use super::AdminState;
use crate::ops::rebalance::RebalanceRefused;

/// `POST /rebalance`: this node and every other up member rebalance their
/// objects; `?scope=node`: this node only (what the node asked sends the
/// others). 202 with each node's status.
pub(super) async fn start(state: &AdminState, query: Option<&str>) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let node_only = match node_only(query) {
        Ok(node_only) => node_only,
        Err(refusal) => return *refusal,
    };
    let started = if node_only {
        ops.rebalance()
    } else {
        ops.rebalance_cluster().await
    };
    match started {
        Ok(status) => json_status(StatusCode::ACCEPTED, status),
        Err(RebalanceRefused::Starting) => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "the node does not serve yet",
        ),
        Err(RebalanceRefused::Draining) => refused(
            StatusCode::CONFLICT,
            "draining",
            "the node drains: its drain moves every object away",
        ),
        Err(RebalanceRefused::Stopping) => {
            refused(StatusCode::CONFLICT, "stopping", "the node is stopping")
        }
    }
}

/// `GET /rebalance`: this node's last rebalance.
pub(super) async fn status(state: &AdminState) -> Response<Body> {
    match &state.ops {
        Some(ops) => json_status(StatusCode::OK, ops.rebalance_status()),
        None => no_cluster(),
    }
}
