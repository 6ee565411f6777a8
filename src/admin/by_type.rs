//! `GET /calls-by-type`: calls, errors and p99 by object type, this node's
//! per-route answers and latency added up over the routes of each type
//! (`metrics::calls_by_type`), for the console's table of types beside its
//! table of routes. Each type's latency buckets come along, cumulative, so
//! a reader can take a window's p99 from two readings, or a cluster's
//! from the nodes' buckets added up.

use hyper::Response;
use serde_json::{json, Value};

use super::routes::{json_response, Body};
use super::AdminState;
use crate::metrics::{calls_by_type, TypeCalls, ANSWER_CODES, BUCKET_BOUNDS};

pub(super) async fn get(state: &AdminState) -> Response<Body> {
    json_response(answer(state))
}

fn answer(state: &AdminState) -> Value {
    let metrics = &state.metrics;
    let cores = metrics
        .cores
        .iter()
        .map(|core| (&core.answers, &core.requests));
    let rows = calls_by_type(&metrics.routes, &metrics.types, cores);
    let le: Vec<&str> = BUCKET_BOUNDS
        .iter()
        .map(|(_, le)| *le)
        .chain(["+Inf"])
        .collect();
    json!({
        "node_id": state.cluster.as_ref().map(|view| view.me().0),
        "le": le,
        "types": rows.iter().map(row_json).collect::<Vec<_>>(),
    })
}

fn row_json(row: &TypeCalls) -> Value {
    let calls = row.calls();
    let codes: serde_json::Map<String, Value> = ANSWER_CODES
        .iter()
        .zip(row.answers)
        .filter(|(_, count)| *count > 0)
        .map(|(code, count)| (code.to_string(), json!(count)))
        .collect();
    json!({
        "type": row.name,
        "type_id": row.type_id,
        "kind": if row.service { "service" } else { "object" },
        "routes": row.routes,
        "calls": calls,
        "ok": row.answers[0],
        "errors": row.errors(),
        "refused": row.refused(),
        "error_ratio": (calls > 0).then(|| row.errors() as f64 / calls as f64),
        "codes": codes,
        "p99_ms": row.latency_quantile(0.99).map(|seconds| seconds * 1e3),
        "latency": row.cumulative_latency().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::metrics::answer_slot;

    #[test]
    fn each_type_shows_its_calls_errors_and_p99() {
        let metrics = Arc::new(crate::testing::node_metrics(1));
        let incr = metrics
            .routes
            .lookup_indexed(wire::client::route::PLAYER_INCR)
            .unwrap()
            .0;
        let core = &metrics.cores[0];
        for _ in 0..3 {
            core.answers.count(incr, answer_slot(None));
            core.requests.record(incr, Duration::from_micros(40));
        }
        core.answers.count(incr, answer_slot(Some(9)));
        let state = AdminState::bare(metrics);
        let shown = answer(&state);
        assert_eq!(
            shown["le"].as_array().unwrap().len(),
            BUCKET_BOUNDS.len() + 1
        );
        let player = &shown["types"][0];
        assert_eq!(player["type"], "player");
        assert_eq!(player["kind"], "object");
        assert_eq!(
            (
                &player["calls"],
                &player["ok"],
                &player["errors"],
                &player["refused"]
            ),
            (&json!(4), &json!(3), &json!(1), &json!(0))
        );
        assert_eq!(player["codes"], json!({ "OK": 3, "INTERNAL": 1 }));
        assert_eq!(player["error_ratio"], 0.25);
        let p99 = player["p99_ms"].as_f64().unwrap();
        assert!(p99 > 0.03 && p99 <= 0.04, "{p99}");
        assert_eq!(
            player["latency"].as_array().unwrap().last(),
            Some(&json!(3))
        );
        let room = &shown["types"][1];
        assert_eq!((&room["calls"], &room["p99_ms"]), (&json!(0), &Value::Null));
        assert_eq!(room["error_ratio"], Value::Null);
    }
}
