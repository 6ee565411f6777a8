//! The endpoints the console needs beyond health, metrics and cluster:
//! listings with paging (`GET /objects/{type}`, `GET /sessions`), the
//! config with its secrets masked (`GET /config`), and the log filter
//! (`GET` and `PUT /log-level`).

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::forward::{no_cluster, refused};
use super::log_level::{self, SetRefused};
use super::routes::{json_response, Body};
use super::AdminState;
use crate::ops::listing::{ListRefused, PageAsk};

/// The type id `kind` names: a registered object type's name (`player`,
/// `room`, a user type) or a type id.
pub(super) fn type_id_of(state: &AdminState, kind: &str) -> Option<u32> {
    state
        .metrics
        .types
        .iter()
        .find(|(_, name)| *name == kind)
        .map(|(type_id, _)| *type_id)
        .or_else(|| kind.parse().ok())
}

pub(super) fn list_refused(refusal: ListRefused) -> Response<Body> {
    match refusal {
        ListRefused::Busy => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "other listings run, or a core did not take or answer this one in time; call again",
        ),
        ListRefused::Stopped => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            "this node is stopping",
        ),
    }
}

/// `GET /objects/{type}?after=ID&limit=N`: a page of the objects of a type
/// this node holds (writable objects and route caches), by id.
pub(super) async fn list_objects(
    state: &AdminState,
    kind: &str,
    query: Option<&str>,
) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let Some(type_id) = type_id_of(state, kind) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the type must be a registered type's name or a type id",
        );
    };
    let page = match PageAsk::parse(query, |_, _| Ok(false)) {
        Ok(page) => page,
        Err(reason) => return refused(StatusCode::BAD_REQUEST, "bad_request", &reason),
    };
    match ops.list_objects(type_id, page).await {
        Ok(mut listing) => {
            listing["type"] = Value::from(kind);
            json_response(listing)
        }
        Err(refusal) => list_refused(refusal),
    }
}

/// `GET /sessions?player=ID&after=ID&limit=N`: each core's session count
/// and a page of this node's sessions (of one player, if given). With
/// `scope=cluster` and a player: that player's sessions on every member.
pub(super) async fn list_sessions(state: &AdminState, query: Option<&str>) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let (mut player, mut cluster) = (None, false);
    let page = PageAsk::parse(query, |key, value| match (key, value.parse::<u64>()) {
        ("player", Ok(id)) if id != 0 => {
            player = Some(id);
            Ok(true)
        }
        ("player", _) => Err("player must be a player id (a positive number)".to_string()),
        ("scope", _) if value == "node" || value == "cluster" => {
            cluster = value == "cluster";
            Ok(true)
        }
        ("scope", _) => Err("scope is node (the default) or cluster".to_string()),
        _ => Ok(false),
    });
    let page = match page {
        Ok(page) => page,
        Err(reason) => return refused(StatusCode::BAD_REQUEST, "bad_request", &reason),
    };
    if cluster {
        let Some(player) = player else {
            let reason = "scope=cluster searches by player: give player=N";
            return refused(StatusCode::BAD_REQUEST, "bad_request", reason);
        };
        return match ops.find_sessions(player).await {
            Ok(found) => json_response(found),
            Err(refusal) => list_refused(refusal),
        };
    }
    match ops.list_sessions(player, page).await {
        Ok(listing) => json_response(listing),
        Err(refusal) => list_refused(refusal),
    }
}

/// `GET /config`: the node's config as JSON, every secret masked (a
/// `Secret` serializes as the mask) and the password of a store URL too.
pub(super) async fn config(state: &AdminState) -> Response<Body> {
    let Some(config) = &state.config else {
        return refused(
            StatusCode::NOT_FOUND,
            "no_config",
            "this node was given no config",
        );
    };
    // Secrets, and `store.url`'s password, serialize masked.
    let value = match serde_json::to_value(&**config) {
        Ok(value) => value,
        Err(error) => {
            return refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                &format!("the config does not serialize: {error}"),
            )
        }
    };
    json_response(value)
}

/// `GET /log-level`: the log filter in force.
pub(super) async fn log_level_get() -> Response<Body> {
    match log_level::current() {
        Some(filter) => json_response(json!({ "filter": filter })),
        None => not_managed(),
    }
}

fn not_managed() -> Response<Body> {
    refused(
        StatusCode::NOT_FOUND,
        "not_managed",
        "this process's logging was not installed by routerd",
    )
}

/// `PUT /log-level` (or POST) with the filter as the body, in
/// `ROUTERD_LOG`'s syntax (`debug`, `info,routerd::cluster=trace`).
pub(super) async fn log_level_set(body: &Bytes) -> Response<Body> {
    let Ok(filter) = std::str::from_utf8(body) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the filter must be UTF-8",
        );
    };
    match log_level::set(filter) {
        Ok(()) => json_response(json!({ "filter": filter.trim() })),
        Err(SetRefused::NotManaged) => not_managed(),
        Err(SetRefused::Invalid(reason)) => refused(StatusCode::BAD_REQUEST, "bad_filter", &reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_out_of_bounds_or_malformed_is_refused() {
        let long = "a".repeat(log_level::FILTER_BYTES_MAX + 1);
        assert!(matches!(log_level::set(&long), Err(SetRefused::Invalid(_))));
        assert!(matches!(log_level::set("  "), Err(SetRefused::Invalid(_))));
        assert!(matches!(
            log_level::set("routerd=notalevel"),
            Err(SetRefused::Invalid(_))
        ));
    }

    #[test]
    fn a_field_value_is_matched_as_written_not_compiled_as_a_regex() {
        // As a regex, `a(a|b){n}` builds a DFA of 2^n states, with no
        // bound: about a hundred bytes of filter held the admin thread
        // for seconds and took gigabytes (and more froze it for good).
        let filter = format!("routerd[{{f=a{}}}]=info", "(a|b)".repeat(22));
        let started = std::time::Instant::now();
        let parsed = log_level::set(&filter);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        // Parsed, then refused only because this test process's
        // subscriber is not the node's.
        assert_eq!(parsed, Err(SetRefused::NotManaged));
    }
}
