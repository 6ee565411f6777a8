//! `POST /sessions/{id}/kick?player=N`: closes one session of this node
//! (the console's Kick button; `/nodes/{id}/sessions/...` reaches another
//! node's). `POST /rooms/{id}/message` (the body, UTF-8 text): a
//! `room.message` from player 0, the system, to every logged-in member of
//! the room, wherever it lives. `POST /sessions/{id}/push?player=N` (the
//! body, UTF-8 text): a `room.message` of room 0 from the system to that
//! session only. Token-protected like every mutating call.

use hyper::{Response, StatusCode};
use serde_json::json;

use super::forward::{no_cluster, refused};
use super::operator::list_refused;
use super::routes::{json_response, Body};
use super::AdminState;
use crate::builtins::room;
use crate::ops::SessionPush;

pub(super) async fn kick(state: &AdminState, session: &str, query: Option<&str>) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let Ok(session_id) = session.parse::<u64>() else {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the session id must be a number",
        );
    };
    let Some(player_id) = session_player(query) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the query takes player=N, the session's player (as the listing shows it)",
        );
    };
    match ops.kick_session(session_id, player_id).await {
        Ok(true) => json_response(json!({
            "kicked": true,
            "session_id": session_id,
            "player_id": player_id,
        })),
        Ok(false) => refused(
            StatusCode::NOT_FOUND,
            "no_such_session",
            "no session of that id and player on this node (closed already?)",
        ),
        Err(refusal) => list_refused(refusal),
    }
}

/// `player=N` of a query: the player a kick or a push expects the session
/// to be bound to.
fn session_player(query: Option<&str>) -> Option<u64> {
    query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("player="))
        .and_then(|value| value.parse::<u64>().ok())
        .filter(|player| *player != 0)
}

/// `POST /sessions/{id}/push?player=N` (the body, UTF-8 text): a
/// `room.message` of room 0 from player 0, the system, to that session
/// only.
pub(super) async fn push(
    state: &AdminState,
    session: &str,
    query: Option<&str>,
    text: &[u8],
) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let (Ok(session_id), Some(player_id)) = (session.parse::<u64>(), session_player(query)) else {
        let reason = "POST /sessions/{id}/push?player=N: the session's id and player as the listing shows them";
        return refused(StatusCode::BAD_REQUEST, "bad_request", reason);
    };
    if let Some(refusal) = text_refusal(text) {
        return refusal;
    }
    // room.message's body (docs/protocol.md): room id, sender, text; room
    // 0 and player 0 say it is the system's, to this session alone.
    let mut body = Vec::with_capacity(16 + text.len());
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(text);
    let pushed = ops
        .push_to_session(session_id, player_id, room::ROUTE_ROOM_MESSAGE, body)
        .await;
    match pushed {
        Ok(SessionPush::Queued) => json_response(json!({
            "pushed": true,
            "session_id": session_id,
            "player_id": player_id,
        })),
        Ok(SessionPush::NoSession) => refused(
            StatusCode::NOT_FOUND,
            "no_such_session",
            "no session of that id and player on this node (closed already?)",
        ),
        Ok(SessionPush::QueueFull) => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "queue_full",
            "the session's send queue is full: the client does not read",
        ),
        Err(refusal) => list_refused(refusal),
    }
}

/// Why `text` cannot be a message: 1 to `SAY_TEXT_MAX` bytes of UTF-8.
fn text_refusal(text: &[u8]) -> Option<Response<Body>> {
    if text.is_empty() || text.len() > room::SAY_TEXT_MAX || std::str::from_utf8(text).is_err() {
        let reason = format!(
            "the body is the message: 1 to {} bytes of UTF-8",
            room::SAY_TEXT_MAX
        );
        return Some(refused(StatusCode::BAD_REQUEST, "bad_request", &reason));
    }
    None
}

pub(super) async fn room_message(state: &AdminState, room_id: &str, text: &[u8]) -> Response<Body> {
    let Some(ops) = &state.ops else {
        return no_cluster();
    };
    let Ok(room_id) = room_id.parse::<u64>() else {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the room id must be a number",
        );
    };
    if let Some(refusal) = text_refusal(text) {
        return refusal;
    }
    let key = room::room_key(room_id);
    match ops
        .send_one_way(key, room::OP_SYSTEM_MESSAGE, text.to_vec())
        .await
    {
        // Accepted, not delivered: a room that does not exist takes none,
        // and members pushed to are not counted back.
        Ok(()) => {
            let mut response = json_response(json!({ "sent": true, "room_id": room_id }));
            *response.status_mut() = StatusCode::ACCEPTED;
            response
        }
        Err(refusal) => list_refused(refusal),
    }
}
