//! Guild names: the index that makes them unique (one [`NameType`]
//! object per normalised name, which remembers the guild that claimed it)
//! and [`GuildSearch`], the stateless service that finds a guild by name.
//!
//! The search is a service rather than a route of the index so that the
//! normalising (and whatever a real game would add: spelling, filtering)
//! runs on whichever node the pick chooses, without owning anything; it
//! then hands the request to the one index object that can answer it.

use routerd::object::codec::{put_str, Reader};
use routerd::object::{
    stable_hash64, ClientRoute, Context, DecodeError, KeyFrom, Object, ObjectKey, ObjectType, Pick,
    Service, ServiceContext,
};

use crate::{route, NAME_TYPE_ID, SEARCH_TYPE_ID};

/// Bytes of a normalised guild name at most.
pub const NAME_LEN_MAX: usize = 32;

/// From a guild object: `u64 guild_id | name`. Claims the name for the
/// guild if nobody holds it; answers the `u64` guild that holds it.
pub const OP_CLAIM: u32 = 1000;
/// From the search service: `u64 node | name`. Answers `u64 guild_id` (0:
/// none) `| u64 node`.
pub const OP_FIND: u32 = 1001;

/// `encode` writes `u64 guild_id | str name`.
const STATE_VERSION: u16 = 1;

/// A name as the index keys it: trimmed, lower case, inner runs of spaces
/// made one; letters, digits, spaces, `-` and `_` only, 1 to
/// [`NAME_LEN_MAX`] bytes. `None` for a name that is not one.
pub fn normalise(name: &str) -> Option<String> {
    let words: Vec<String> = name.split_whitespace().map(str::to_lowercase).collect();
    let name = words.join(" ");
    let allowed = |c: char| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_');
    (!name.is_empty() && name.len() <= NAME_LEN_MAX && name.chars().all(allowed)).then_some(name)
}

/// The index object of a normalised name.
pub fn name_key(normalised: &str) -> ObjectKey {
    ObjectKey::new(NAME_TYPE_ID, 0, stable_hash64(normalised.as_bytes()))
}

/// The name index object type: which guild holds a normalised name.
pub struct NameType;

impl ObjectType for NameType {
    type Object = Name;

    fn type_id(&self) -> u32 {
        NAME_TYPE_ID
    }

    fn name(&self) -> &'static str {
        "guild_name"
    }

    /// None: only guild objects and the search service talk to it.
    fn routes(&self) -> Vec<ClientRoute> {
        Vec::new()
    }

    // `interval` (the default) is enough: a claim is answered before it is
    // durable, but the guild that claimed saves itself on write and claims
    // again (idempotently) if its own create is retried.

    fn create(&self, _key: ObjectKey) -> Name {
        Name::default()
    }

    fn decode(&self, _key: ObjectKey, version: u16, state: &[u8]) -> Result<Name, DecodeError> {
        let mut reader = Reader::new(state);
        let guild_id = reader.u64().ok_or(DecodeError)?;
        let name = reader.str(NAME_LEN_MAX).ok_or(DecodeError)?.to_string();
        if version != STATE_VERSION || !reader.is_empty() {
            return Err(DecodeError);
        }
        Ok(Name { guild_id, name })
    }
}

/// One name: the guild holding it (0: none) and the name itself, so that
/// two names with one hash never pass for each other.
#[derive(Debug, Default)]
pub struct Name {
    guild_id: u64,
    name: String,
}

impl Object for Name {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.guild_id.to_le_bytes());
        put_str(out, &self.name);
    }

    fn handle(&mut self, ctx: &mut Context<'_>) {
        let mut reader = Reader::new(ctx.body());
        let (Some(id), Ok(name)) = (reader.u64(), std::str::from_utf8(reader.rest())) else {
            return ctx.bad_request_because("body must be a u64 id then a UTF-8 name");
        };
        let name = name.to_string();
        match ctx.op() {
            OP_CLAIM => {
                if self.guild_id == 0 {
                    self.guild_id = id;
                    self.name = name;
                    ctx.mark_changed();
                    ctx.answer(Ok(id.to_le_bytes().to_vec()));
                } else if self.name == name {
                    ctx.answer(Ok(self.guild_id.to_le_bytes().to_vec()));
                } else {
                    // Another name with the same hash holds this object:
                    // answer a holder that is not the claimant.
                    ctx.answer(Ok(0u64.to_le_bytes().to_vec()));
                }
            }
            OP_FIND => {
                let found = if self.name == name { self.guild_id } else { 0 };
                let mut answer = found.to_le_bytes().to_vec();
                answer.extend_from_slice(&id.to_le_bytes());
                ctx.answer(Ok(answer));
            }
            op => ctx.bad_request_because(&format!("the name index has no op {op}")),
        }
    }
}

/// `guild.find`: any node that runs it normalises the name and passes the
/// request to the name's index object, which answers the client. Which
/// node runs a request is the weighted rendezvous pick of the request's
/// key (the hash of the name as sent) over the nodes that advertise the
/// service.
pub struct GuildSearch {
    /// This node, named in the answer so that a client (and the tests) can
    /// see where its search ran.
    pub node_id: u64,
    /// This node's share of the searches.
    pub weight: u32,
}

impl Service for GuildSearch {
    fn type_id(&self) -> u32 {
        SEARCH_TYPE_ID
    }

    fn name(&self) -> &'static str {
        "guild_search"
    }

    fn routes(&self) -> Vec<ClientRoute> {
        vec![ClientRoute::request(
            route::GUILD_FIND,
            "guild.find",
            KeyFrom::BodyHash,
        )]
    }

    fn pick(&self) -> Pick {
        Pick::Weighted
    }

    fn weight(&self) -> u32 {
        self.weight
    }

    fn handle(&self, ctx: &mut ServiceContext<'_>) {
        let Some(name) = std::str::from_utf8(ctx.body()).ok().and_then(normalise) else {
            return ctx.bad_request_because("the name is empty, too long or not UTF-8");
        };
        let mut find = self.node_id.to_le_bytes().to_vec();
        find.extend_from_slice(name.as_bytes());
        ctx.forward(name_key(&name), OP_FIND, find);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_or_refused() {
        assert_eq!(normalise("  Red   Dragons "), Some("red dragons".into()));
        assert_eq!(normalise("ice_wolves-2"), Some("ice_wolves-2".into()));
        assert_eq!(normalise("   "), None);
        assert_eq!(normalise("no;drop"), None);
        assert_eq!(normalise(&"x".repeat(NAME_LEN_MAX + 1)), None);
        assert_eq!(name_key("a b"), name_key(&normalise(" A  B").unwrap()));
    }
}
