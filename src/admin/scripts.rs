//! `GET /scripts` (the scripted types and routes this node serves) and
//! `POST /scripts/reload`: every file of `[scripts] dir` loaded again on
//! this node and, unless `?scope=node`, on every other up member (as
//! `POST /rebalance` fans out). Behind the admin token like every
//! mutating call. 200 when every node took every file; 422 when a file
//! failed somewhere (that node kept its loaded version, and says why).

use std::time::Duration;

use hyper::{Response, StatusCode};
use serde_json::json;

use super::forward::{node_only, refused};
use super::routes::{json_status, Body};
use super::AdminState;

/// How long each other member may take to reload its files.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(5);

/// `GET /scripts`.
pub(super) async fn list(state: &AdminState) -> Response<Body> {
    match &state.scripts {
        Some(library) => json_status(StatusCode::OK, library.describe()),
        None => no_scripts(),
    }
}

/// `POST /scripts/reload[?scope=node]`.
pub(super) async fn reload(state: &AdminState, query: Option<&str>) -> Response<Body> {
    let node_only = match node_only(query) {
        Ok(node_only) => node_only,
        Err(refusal) => return *refusal,
    };
    let Some(library) = state.scripts.clone() else {
        return no_scripts();
    };
    let node_id = state.config.as_ref().map_or(0, |config| config.node.id);
    let reloaded = tokio::task::spawn_blocking(move || library.reload()).await;
    let (mut own, ok) = match reloaded {
        Ok(Ok(answer)) => (answer, true),
        Ok(Err(answer)) => (answer, false),
        Err(_) => (
            json!({ "ok": false, "error": "the reload panicked" }),
            false,
        ),
    };
    own["node_id"] = json!(node_id);
    if node_only {
        return json_status(status_of(ok), own);
    }
    let mut every_ok = ok;
    let mut nodes = vec![own];
    if let Some(ops) = &state.ops {
        for answer in ops
            .ask_every_peer("POST", "/scripts/reload?scope=node", RELOAD_TIMEOUT)
            .await
        {
            every_ok &= answer["status"] == 200;
            nodes.push(answer);
        }
    }
    nodes.sort_by_key(|node| node["node_id"].as_u64());
    json_status(
        status_of(every_ok),
        json!({ "ok": every_ok, "nodes": nodes }),
    )
}

fn status_of(ok: bool) -> StatusCode {
    if ok {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    }
}

fn no_scripts() -> Response<Body> {
    refused(
        StatusCode::NOT_FOUND,
        "no_scripts",
        "this node loads no scripts ([scripts] dir is unset)",
    )
}
