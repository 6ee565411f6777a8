//! Guilds on routerd: an example of your own object types, to copy.
//!
//! - [`GuildType`]: one object per guild (create, join, leave, chat pushed
//!   to the members, a counter), keyed by the guild id in the body.
//! - [`NameType`]: one object per normalised guild name, the index that
//!   makes names unique; a guild claims its name with a call whose answer
//!   comes back as an event.
//! - [`GuildSearch`]: a stateless service, run by every node that
//!   registers it, that normalises a name and passes the request on to the
//!   name's index object.
//!
//! [`node`] registers all three on a `routerd::NodeBuilder`; `main.rs`
//! serves it. The wire formats of the routes are in `README.md`.

mod guild;
mod names;

use routerd::config::Config;
use routerd::NodeBuilder;

pub use guild::{refusal, GuildType, GUILD_MEMBERS_MAX};
pub use names::{normalise, GuildSearch, NameType, NAME_LEN_MAX};

/// Type ids: stable (they are in the store), 100 or more (routerd keeps
/// those below for its own types).
pub const GUILD_TYPE_ID: u32 = 100;
/// The name index's type id.
pub const NAME_TYPE_ID: u32 = 101;
/// The name search service's type id.
pub const SEARCH_TYPE_ID: u32 = 102;

/// Client route ids: 200 or more (routerd's own are below).
pub mod route {
    /// `u64 guild_id | name`: answers empty; refused with one of
    /// [`crate::refusal`]'s codes when the name is bad, the guild exists or
    /// the name is taken.
    pub const GUILD_CREATE: u32 = 300;
    /// `u64 guild_id`: answers `u32 members`.
    pub const GUILD_JOIN: u32 = 301;
    /// `u64 guild_id`: answers `u32 members`.
    pub const GUILD_LEAVE: u32 = 302;
    /// `u64 guild_id | text`: pushes GUILD_MESSAGE to every member, answers
    /// `u32 pushed`.
    pub const GUILD_SAY: u32 = 303;
    /// `u64 guild_id | i64 delta`: answers the new `i64 counter`.
    pub const GUILD_INCR: u32 = 304;
    /// `name` (the search service): answers `u64 guild_id` (0: no guild of
    /// that name) `| u64 node` (the node that ran the search).
    pub const GUILD_FIND: u32 = 305;
    /// Push: `u64 guild_id | u64 from_player | text`.
    pub const GUILD_MESSAGE: u32 = 350;
}

/// `[services.guild_search]` in a routerd config file: the name search's
/// settings on this node (`guild-node --search-weight` overrides).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// This node's share of the name search (`Pick::Weighted`).
    pub weight: u32,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig { weight: 1 }
    }
}

/// A node serving routerd's built-in types, the guild types, and the name
/// search with `search_weight` (`None`: this node does not run it, but
/// its clients may still search, on the nodes that do).
pub fn node(config: Config, search_weight: Option<u32>) -> NodeBuilder {
    let node_id = config.node.id;
    let builder = NodeBuilder::new(config)
        .object_type(GuildType)
        .object_type(NameType);
    match search_weight {
        Some(weight) => builder.service(GuildSearch { node_id, weight }),
        None => builder.remote_service(GuildSearch { node_id, weight: 0 }),
    }
}
