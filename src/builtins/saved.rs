//! The built-in objects' saved states as an operator reads them (the
//! console's state viewer, `GET /objects/{type}/{id}`): decoded from the
//! bytes the store holds, with the layouts the types themselves write.

use super::{player, PLAYER_TYPE_ID, ROOM_TYPE_ID};
use crate::object::codec::Reader;
use crate::object::ClientRef;

/// The session an object recorded, as the viewer shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedSession {
    pub gateway_node: u64,
    pub session_id: u64,
    pub session_epoch: u32,
}

impl From<ClientRef> for SavedSession {
    fn from(client: ClientRef) -> SavedSession {
        SavedSession {
            gateway_node: client.gateway_node.0,
            session_id: client.session_id,
            session_epoch: client.session_epoch,
        }
    }
}

/// A built-in object's state as last saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SavedState {
    Player {
        counter: i64,
        /// The session bound when it was saved.
        session: Option<SavedSession>,
        rooms: Vec<u64>,
    },
    Room {
        /// Members and their session when it was saved (`None`: logged out).
        members: Vec<(u64, Option<SavedSession>)>,
    },
}

/// The type's version of a saved state, without the flag that says
/// remembered answers of request keys follow the object's bytes; `None`
/// for bytes too short to hold one.
pub fn saved_version(saved: &[u8]) -> Option<u16> {
    crate::object::request_keys::SavedState::split(saved)
        .map(|split| split.version)
        .or_else(|| {
            saved
                .first_chunk::<2>()
                .map(|version| u16::from_le_bytes(*version))
        })
}

/// The state `saved` (`u16 version | the type's bytes`, as the store
/// holds it, the memory of request keys after them when the version says
/// so) of a built-in type; `None` for another type, another version, or
/// bytes that do not decode.
pub fn decode_saved(type_id: u32, saved: &[u8]) -> Option<SavedState> {
    let split = crate::object::request_keys::SavedState::split(saved)?;
    if split.version != 1 {
        return None;
    }
    let bytes = split.object;
    match type_id {
        PLAYER_TYPE_ID => {
            let player = player::Player::decode_saved(bytes)?;
            Some(SavedState::Player {
                counter: player.counter,
                session: player.client.map(SavedSession::from),
                rooms: player.rooms,
            })
        }
        ROOM_TYPE_ID => {
            let mut reader = Reader::new(bytes);
            let count = reader.u32()? as usize;
            // Each member takes at least 9 bytes: a count past that is
            // garbage, not a reason to allocate.
            if count > bytes.len() / 9 {
                return None;
            }
            let members = (0..count)
                .map(|_| Some((reader.u64()?, reader.client()?.map(SavedSession::from))))
                .collect::<Option<Vec<_>>>()?;
            reader.is_empty().then_some(SavedState::Room { members })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::tests_fixtures::client;
    use crate::object::codec::put_client;

    #[test]
    fn a_player_that_remembers_request_keys_reads_back() {
        let mut object = 5i64.to_le_bytes().to_vec();
        put_client(&mut object, None);
        object.extend_from_slice(&0u32.to_le_bytes());
        // Version 1 flagged: the object's length, its bytes, then the
        // memory (no player's answers here).
        let mut saved = (1u16 | 0x8000).to_le_bytes().to_vec();
        saved.extend_from_slice(&(object.len() as u32).to_le_bytes());
        saved.extend_from_slice(&object);
        saved.extend_from_slice(&0x8000_0000u32.to_le_bytes());
        assert_eq!(
            decode_saved(PLAYER_TYPE_ID, &saved),
            Some(SavedState::Player {
                counter: 5,
                session: None,
                rooms: Vec::new(),
            })
        );
    }

    #[test]
    fn a_player_and_a_room_read_back_and_garbage_does_not() {
        let mut player = 1u16.to_le_bytes().to_vec();
        player.extend_from_slice(&5i64.to_le_bytes());
        put_client(&mut player, Some(client(9, 3)));
        player.extend_from_slice(&2u32.to_le_bytes());
        player.extend_from_slice(&7u64.to_le_bytes());
        player.extend_from_slice(&8u64.to_le_bytes());
        assert_eq!(
            decode_saved(PLAYER_TYPE_ID, &player),
            Some(SavedState::Player {
                counter: 5,
                session: Some(client(9, 3).into()),
                rooms: vec![7, 8],
            })
        );
        let mut room = 1u16.to_le_bytes().to_vec();
        room.extend_from_slice(&1u32.to_le_bytes());
        room.extend_from_slice(&9u64.to_le_bytes());
        put_client(&mut room, None);
        assert_eq!(
            decode_saved(ROOM_TYPE_ID, &room),
            Some(SavedState::Room {
                members: vec![(9, None)]
            })
        );
        assert_eq!(
            decode_saved(ROOM_TYPE_ID, &[1, 0, 0xFF, 0xFF, 0xFF, 0xFF]),
            None
        );
        assert_eq!(decode_saved(PLAYER_TYPE_ID, &player[..10]), None);
        assert_eq!(decode_saved(42, &player), None);
        assert_eq!(decode_saved(PLAYER_TYPE_ID, &[]), None);
    }
}
