//! The state viewer of `GET /objects/{type}/{id}`: a built-in object's
//! saved state decoded (the player's counter, session and rooms, a room's
//! members); another type's through its `Object::debug_view` when it gives
//! one (JSON when the view parses as JSON, words otherwise), and as its
//! version and first bytes in hex always.

use serde_json::{json, Value};
use wire::ObjectKey;

use crate::builtins::{decode_saved, saved_version, SavedSession, SavedState};

/// Bytes of a state the viewer shows in hex when it cannot decode it.
const HEX_SHOWN_MAX: usize = 256;

fn session(client: Option<SavedSession>) -> Value {
    match client {
        None => Value::Null,
        Some(client) => json!({
            "gateway_node": client.gateway_node,
            "session_id": client.session_id,
            "session_epoch": client.session_epoch,
        }),
    }
}

/// The view of a user type's saved state, for `GET /objects/{type}/{id}`:
/// the type's `Object::debug_view` of the object decoded from it.
pub type DebugView = std::sync::Arc<dyn Fn(ObjectKey, &[u8]) -> Option<String> + Send + Sync>;

/// The JSON of the state `saved` of the object `key`.
pub(super) fn state_json(key: ObjectKey, saved: &[u8], debug: Option<&DebugView>) -> Value {
    let type_id = key.type_id;
    if saved.is_empty() {
        return json!({ "saved": false });
    }
    let version = saved_version(saved);
    match decode_saved(type_id, saved) {
        Some(SavedState::Player {
            counter,
            session: bound,
            rooms,
        }) => json!({
            "saved": true,
            "version": version,
            "counter": counter,
            "session": session(bound),
            "rooms": rooms,
        }),
        Some(SavedState::Room { members }) => json!({
            "saved": true,
            "version": version,
            "members": members
                .into_iter()
                .map(|(player_id, bound)| json!({
                    "player_id": player_id,
                    "online": bound.is_some(),
                    "session": session(bound),
                }))
                .collect::<Vec<_>>(),
        }),
        None => {
            let shown = &saved[..saved.len().min(HEX_SHOWN_MAX)];
            let hex: String = shown.iter().map(|byte| format!("{byte:02x}")).collect();
            let mut shown = json!({
                "saved": true,
                "version": version,
                "hex": hex,
                "hex_cut": saved.len() > HEX_SHOWN_MAX,
            });
            if let Some(view) = debug.and_then(|debug| debug(key, saved)) {
                shown["debug"] = serde_json::from_str(&view).unwrap_or(Value::String(view));
            }
            shown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_types_view_is_json_when_it_parses_and_words_otherwise() {
        let view: DebugView = std::sync::Arc::new(|key: ObjectKey, _: &[u8]| match key.object_id {
            1 => Some("{\"members\": 3}".to_string()),
            2 => Some("three members".to_string()),
            _ => None,
        });
        let saved = [1, 0, 0xab];
        let shown = |id| state_json(ObjectKey::new(150, 0, id), &saved, Some(&view));
        assert_eq!(shown(1)["debug"], json!({ "members": 3 }));
        assert_eq!(shown(2)["debug"], "three members");
        assert_eq!(shown(2)["hex"], "0100ab");
        assert!(shown(3).get("debug").is_none());
        assert!(state_json(ObjectKey::new(150, 0, 1), &saved, None)
            .get("debug")
            .is_none());
    }
}
