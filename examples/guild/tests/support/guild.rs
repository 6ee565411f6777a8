//! The guild routes' bodies, as a client writes and reads them.

use guild::route;
use wire::client::{ErrorCode, FrameKind};

use super::{Client, Reply};

pub fn with_id(guild_id: u64, rest: &[u8]) -> Vec<u8> {
    let mut body = guild_id.to_le_bytes().to_vec();
    body.extend_from_slice(rest);
    body
}

pub fn u32_of(body: &[u8]) -> u32 {
    u32::from_le_bytes(body.try_into().expect("a u32 body"))
}

pub fn create(client: &mut Client, guild_id: u64, name: &str) -> Reply {
    client.call(route::GUILD_CREATE, &with_id(guild_id, name.as_bytes()))
}

/// Answers the member count.
pub fn join(client: &mut Client, guild_id: u64) -> u32 {
    u32_of(&client.call(route::GUILD_JOIN, &with_id(guild_id, &[])).ok())
}

pub fn leave(client: &mut Client, guild_id: u64) -> u32 {
    u32_of(
        &client
            .call(route::GUILD_LEAVE, &with_id(guild_id, &[]))
            .ok(),
    )
}

pub fn say(client: &mut Client, guild_id: u64, text: &str) -> Reply {
    client.call(route::GUILD_SAY, &with_id(guild_id, text.as_bytes()))
}

pub fn incr(client: &mut Client, guild_id: u64, delta: i64) -> i64 {
    let body = client
        .call(route::GUILD_INCR, &with_id(guild_id, &delta.to_le_bytes()))
        .ok();
    i64::from_le_bytes(body.try_into().expect("an i64 body"))
}

/// `guild.find`: the guild id (0: none) and the node that ran the search.
pub fn find(client: &mut Client, name: &str) -> (u64, u64) {
    let body = client.call(route::GUILD_FIND, name.as_bytes()).ok();
    let (guild_id, node) = body.split_at(8);
    (
        u64::from_le_bytes(guild_id.try_into().unwrap()),
        u64::from_le_bytes(node.try_into().unwrap()),
    )
}

/// A BAD_REQUEST that says why: `reason`.
pub fn assert_bad_request(reply: Reply, reason: &str) {
    assert_eq!(reply.kind, FrameKind::Error, "{reply:?}");
    assert_eq!(
        wire::client::decode_error_body(&reply.body),
        Some((ErrorCode::BadRequest as u16, reason)),
        "{reply:?}"
    );
}

/// An ERROR with the application code `code` and the reason `reason`.
pub fn assert_refused(reply: Reply, code: routerd::object::AppCode, reason: &str) {
    assert_eq!(reply.kind, FrameKind::Error, "{reply:?}");
    assert_eq!(
        wire::client::decode_error_body(&reply.body),
        Some((code.get(), reason)),
        "{reply:?}"
    );
    assert_eq!(ErrorCode::from_u16(code.get()), None, "not a protocol code");
}

/// A `guild.message` push: (guild, from, text).
pub fn message(push: Reply) -> (u64, u64, String) {
    assert_eq!(push.route_id, route::GUILD_MESSAGE, "{push:?}");
    let guild_id = u64::from_le_bytes(push.body[..8].try_into().unwrap());
    let from = u64::from_le_bytes(push.body[8..16].try_into().unwrap());
    let text = String::from_utf8(push.body[16..].to_vec()).unwrap();
    (guild_id, from, text)
}
