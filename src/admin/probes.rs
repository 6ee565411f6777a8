//! `GET /livez` and `GET /readyz`, the probes an orchestrator asks:
//! is the process alive (restart it if not), and should clients be sent
//! to it (take it out of the balancer if not). `/healthz` keeps its older
//! meaning beside them.

use hyper::{Response, StatusCode};
use serde_json::json;
use wire::ObjectKey;

use super::routes::{json_status, Body};
use super::AdminState;
use crate::clock;
use crate::ops::Phase;

/// `200` whenever the process answers at all, draining included: a
/// draining node is doing its job, and restarting it would lose what it
/// has not moved yet. The phase is in the body for people.
pub(super) async fn livez(state: &AdminState) -> Response<Body> {
    json_status(
        StatusCode::OK,
        json!({ "live": true, "phase": phase_word(state.phase.get()) }),
    )
}

/// `200` while the node serves; `503` with the reason while it starts,
/// drains or stops, while it is fenced (its lease ran out or it was
/// declared down: it serves nothing until it rejoins), and while its
/// store keeps failing.
pub(super) async fn readyz(state: &AdminState) -> Response<Body> {
    let not_ready = |reason: String| {
        json_status(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "ready": false, "reason": reason }),
        )
    };
    let phase = state.phase.get();
    if phase != Phase::Serving {
        return not_ready(phase_word(phase).to_string());
    }
    if let Some(view) = &state.cluster {
        let me = view.snapshot().me;
        if me.fenced || clock::now_ms() >= me.lease_until_ms {
            return not_ready("fenced".to_string());
        }
    }
    if let Some(cause) = store_failing(state).await {
        return not_ready(format!("store: {cause}"));
    }
    json_status(StatusCode::OK, json!({ "ready": true }))
}

/// The phase as the probes' bodies name it.
fn phase_word(phase: Phase) -> &'static str {
    match phase {
        Phase::Serving => "serving",
        other => other.name(),
    }
}

/// Why the store fails, if it does. The failing mark clears only when an
/// operation succeeds, and an idle node makes none: one load is tried
/// first, so a store that answers again is reported healthy at once. A
/// missing record is an answer.
pub(super) async fn store_failing(state: &AdminState) -> Option<String> {
    let store = state.store.as_ref()?;
    if store.failing().is_some() {
        let probe = store.load(STORE_PROBE_KEY);
        drop(tokio::time::timeout(STORE_PROBE_TIMEOUT, probe).await);
    }
    store.failing().map(|cause| cause.to_string())
}

/// The record the probes load to see whether a failing store answers
/// again: type 0 is no service's, so the load reads, finds nothing and
/// changes nothing.
pub(super) const STORE_PROBE_KEY: ObjectKey = ObjectKey {
    type_id: 0,
    zone_id: 0,
    object_id: 0,
};

/// How long a probe waits for that load: a load balancer's check should
/// not hang on a store that does not answer.
const STORE_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);
