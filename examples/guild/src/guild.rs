//! The guild object: its name and creator, its members (each with the
//! session it last used with the guild, where its pushes go), and a
//! counter. Persisted on every write, so an answer is only sent once what
//! it reports is durable.

use routerd::object::codec::{put_client, put_str, Reader, CLIENT_LEN_MAX};
use routerd::object::{
    ClientRef, ClientRoute, Context, DecodeError, Deferred, ErrorCode, KeyFrom, Object, ObjectKey,
    ObjectType, Outcome, Persist, Refusal,
};

use crate::names::{self, name_key};
use crate::{route, GUILD_TYPE_ID, NAME_LEN_MAX};

/// Members one guild may have: bounds its state and each chat fan-out.
pub const GUILD_MEMBERS_MAX: usize = 512;

/// `guild.create`'s refusals, each its own application code so a client
/// can tell them apart (docs/protocol.md, section 4; the README lists them).
pub mod refusal {
    use routerd::object::AppCode;

    /// The name is empty after normalising, longer than `NAME_LEN_MAX`, or
    /// not UTF-8, or the request came from no session.
    pub const BAD_NAME: AppCode = AppCode::nth(1);
    /// This guild id was created already (or its creation is under way).
    pub const GUILD_EXISTS: AppCode = AppCode::nth(2);
    /// Another guild holds the name.
    pub const NAME_TAKEN: AppCode = AppCode::nth(3);
}

/// The tag of the name claim `guild.create` calls the name index with.
const CLAIM_TAG: u64 = 1;

/// The reasons of refusals the protocol's codes already name: clients
/// branch on BAD_REQUEST, people read these.
const NOT_A_MEMBER: &str = "not a member of this guild";
const NOT_LOGGED_IN: &str = "a guild's members are logged-in players";

/// `encode` writes `str name | u64 creator | i64 counter | u32 n | n x
/// (u64 player | client)`.
const STATE_VERSION: u16 = 1;

/// The guild object type: members, chat and a counter.
pub struct GuildType;

impl ObjectType for GuildType {
    type Object = Guild;

    fn type_id(&self) -> u32 {
        GUILD_TYPE_ID
    }

    fn name(&self) -> &'static str {
        "guild"
    }

    /// Every route names its guild in the body's first eight bytes.
    fn routes(&self) -> Vec<ClientRoute> {
        let by_id = |id, name| ClientRoute::request(id, name, KeyFrom::BodyU64);
        vec![
            by_id(route::GUILD_CREATE, "guild.create"),
            by_id(route::GUILD_JOIN, "guild.join"),
            by_id(route::GUILD_LEAVE, "guild.leave"),
            by_id(route::GUILD_SAY, "guild.say"),
            by_id(route::GUILD_INCR, "guild.incr"),
            ClientRoute::push(route::GUILD_MESSAGE, "guild.message"),
        ]
    }

    fn persist(&self) -> Persist {
        Persist::OnWrite
    }

    /// The name, the creator, the counter, and at most `GUILD_MEMBERS_MAX`
    /// members with their sessions: the node checks it fits in what the
    /// store saves.
    fn state_len_max(&self) -> Option<usize> {
        Some(4 + NAME_LEN_MAX + 8 + 8 + 4 + GUILD_MEMBERS_MAX * (8 + CLIENT_LEN_MAX))
    }

    fn state_version(&self) -> u16 {
        STATE_VERSION
    }

    /// A guild id nobody created yet: an empty guild that only
    /// `guild.create` fills (and that is not saved until then).
    fn create(&self, _key: ObjectKey) -> Guild {
        Guild::default()
    }

    fn decode(&self, _key: ObjectKey, version: u16, state: &[u8]) -> Result<Guild, DecodeError> {
        if version != STATE_VERSION {
            return Err(DecodeError);
        }
        Guild::decode(state).ok_or(DecodeError)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    player_id: u64,
    /// The session the member last used with this guild.
    client: Option<ClientRef>,
}

#[derive(Debug, Default)]
pub struct Guild {
    /// Empty until created.
    name: String,
    creator: u64,
    counter: i64,
    members: Vec<Member>,
    /// A `guild.create` waiting for its name claim: in memory only. If the
    /// object is dropped first, the client's gateway answers TIMEOUT and a
    /// retry finds the name already claimed for this guild.
    creating: Option<Creating>,
}

#[derive(Debug)]
struct Creating {
    answer: Deferred,
    name: String,
    creator: Member,
}

impl Guild {
    fn decode(bytes: &[u8]) -> Option<Guild> {
        let mut reader = Reader::new(bytes);
        let name = reader.str(NAME_LEN_MAX)?.to_string();
        let creator = reader.u64()?;
        let counter = reader.i64()?;
        let count = reader.u32()? as usize;
        if count > GUILD_MEMBERS_MAX {
            return None;
        }
        let members = (0..count)
            .map(|_| {
                Some(Member {
                    player_id: reader.u64()?,
                    client: reader.client()?,
                })
            })
            .collect::<Option<Vec<Member>>>()?;
        reader.is_empty().then_some(Guild {
            name,
            creator,
            counter,
            members,
            creating: None,
        })
    }

    fn created(&self) -> bool {
        !self.name.is_empty()
    }

    /// The sender as a member: its player id and its session now.
    fn sender(ctx: &Context<'_>) -> Option<Member> {
        let client = ctx.client()?;
        Some(Member {
            player_id: client.player_id,
            client: Some(client),
        })
    }

    fn create_guild(&mut self, ctx: &mut Context<'_>) {
        let guild_id = ctx.key().object_id;
        let name = std::str::from_utf8(&ctx.body()[8..])
            .ok()
            .and_then(names::normalise);
        let (Some(name), Some(creator)) = (name, Guild::sender(ctx)) else {
            return ctx.refuse(
                refusal::BAD_NAME,
                "the guild name is empty, too long or not UTF-8",
            );
        };
        if self.created() || self.creating.is_some() {
            return ctx.refuse(refusal::GUILD_EXISTS, "this guild id is taken");
        }
        // The name index answers which guild holds the name; this request
        // is answered when that answer comes back (`on_answer`).
        let mut claim = guild_id.to_le_bytes().to_vec();
        claim.extend_from_slice(name.as_bytes());
        ctx.call(name_key(&name), names::OP_CLAIM, claim, CLAIM_TAG);
        let Some(answer) = ctx.defer() else { return };
        self.creating = Some(Creating {
            answer,
            name,
            creator,
        });
    }

    /// The sender's index among the members, its session refreshed.
    fn member_index(&mut self, ctx: &Context<'_>) -> Option<usize> {
        let sender = Guild::sender(ctx)?;
        let index = self
            .members
            .iter()
            .position(|member| member.player_id == sender.player_id)?;
        self.members[index].client = sender.client;
        Some(index)
    }

    fn join(&mut self, ctx: &mut Context<'_>) {
        let Some(sender) = Guild::sender(ctx) else {
            return ctx.bad_request_because(NOT_LOGGED_IN);
        };
        if self.member_index(ctx).is_none() {
            if self.members.len() >= GUILD_MEMBERS_MAX {
                let reason = format!("the guild is full: {GUILD_MEMBERS_MAX} members");
                return ctx.fail_because(ErrorCode::Overloaded, &reason);
            }
            self.members.push(sender);
        }
        ctx.mark_changed();
        ctx.answer(Ok((self.members.len() as u32).to_le_bytes().to_vec()));
    }

    fn leave(&mut self, ctx: &mut Context<'_>) {
        let Some(index) = self.member_index(ctx) else {
            return ctx.bad_request_because(NOT_A_MEMBER);
        };
        self.members.remove(index);
        ctx.mark_changed();
        ctx.answer(Ok((self.members.len() as u32).to_le_bytes().to_vec()));
    }

    fn say(&mut self, ctx: &mut Context<'_>) {
        let Some(index) = self.member_index(ctx) else {
            return ctx.bad_request_because(NOT_A_MEMBER);
        };
        let mut message = ctx.key().object_id.to_le_bytes().to_vec();
        message.extend_from_slice(&self.members[index].player_id.to_le_bytes());
        message.extend_from_slice(&ctx.body()[8..]);
        let mut pushed = 0u32;
        for client in self.members.iter().filter_map(|member| member.client) {
            ctx.push(client, route::GUILD_MESSAGE, message.clone());
            pushed += 1;
        }
        // A refreshed session is worth keeping, not worth a save of its own.
        ctx.answer(Ok(pushed.to_le_bytes().to_vec()));
    }

    fn incr(&mut self, ctx: &mut Context<'_>) {
        let Some(delta) = Reader::new(&ctx.body()[8..]).i64() else {
            let reason = format!("body must be 16 bytes, got {}", ctx.body().len());
            return ctx.bad_request_because(&reason);
        };
        if self.member_index(ctx).is_none() {
            return ctx.bad_request_because(NOT_A_MEMBER);
        }
        let Some(counter) = self.counter.checked_add(delta) else {
            return ctx.bad_request_because("the guild's counter would overflow");
        };
        self.counter = counter;
        ctx.mark_changed();
        ctx.answer(Ok(counter.to_le_bytes().to_vec()));
    }
}

impl Object for Guild {
    fn encode(&self, out: &mut Vec<u8>) {
        put_str(out, &self.name);
        out.extend_from_slice(&self.creator.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        for member in &self.members {
            out.extend_from_slice(&member.player_id.to_le_bytes());
            put_client(out, member.client);
        }
    }

    fn handle(&mut self, ctx: &mut Context<'_>) {
        // Every route's body starts with the guild id (the router already
        // took the key from it, so it is there).
        if ctx.body().len() < 8 {
            let reason = format!(
                "body must start with the u64 guild id, got {} bytes",
                ctx.body().len()
            );
            return ctx.bad_request_because(&reason);
        }
        match ctx.op() {
            route::GUILD_CREATE => self.create_guild(ctx),
            _ if !self.created() => ctx.bad_request_because("no such guild"),
            route::GUILD_JOIN => self.join(ctx),
            route::GUILD_LEAVE => self.leave(ctx),
            route::GUILD_SAY => self.say(ctx),
            route::GUILD_INCR => self.incr(ctx),
            op => ctx.bad_request_because(&format!("the guild has no route {op}")),
        }
    }

    /// The name index's answer to the claim: the guild that holds the name.
    fn on_answer(&mut self, ctx: &mut Context<'_>, tag: u64, outcome: Outcome) {
        let Some(creating) = self.creating.take().filter(|_| tag == CLAIM_TAG) else {
            return;
        };
        let holder = outcome.map(|body| Reader::new(&body).u64());
        let result = match holder {
            Ok(Some(holder)) if holder == ctx.key().object_id => {
                self.name = creating.name;
                self.creator = creating.creator.player_id;
                self.members = vec![creating.creator];
                ctx.mark_changed();
                Ok(Vec::new())
            }
            Ok(_) => Err(Refusal::app(
                refusal::NAME_TAKEN,
                "another guild holds this name",
            )),
            Err(code) => Err(code),
        };
        ctx.answer_deferred(creating.answer, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_and_junk_is_refused() {
        let guild = Guild {
            name: "red dragons".into(),
            creator: 4,
            counter: -3,
            members: vec![
                Member {
                    player_id: 4,
                    client: None,
                },
                Member {
                    player_id: 5,
                    client: None,
                },
            ],
            creating: None,
        };
        let mut bytes = Vec::new();
        guild.encode(&mut bytes);
        let back = Guild::decode(&bytes).expect("decodes");
        assert_eq!(
            (back.name.as_str(), back.creator, back.counter),
            ("red dragons", 4, -3)
        );
        assert_eq!(back.members, guild.members);
        assert!(Guild::decode(&bytes[..bytes.len() - 1]).is_none());
        bytes.push(0);
        assert!(Guild::decode(&bytes).is_none(), "trailing bytes");
    }

    #[test]
    fn a_full_guild_is_as_large_as_its_type_says() {
        let member = Member {
            player_id: 4,
            client: Some(ClientRef {
                gateway_node: routerd::ids::NodeId(1),
                session_id: 2,
                session_epoch: 3,
                player_id: 4,
            }),
        };
        let guild = Guild {
            name: "x".repeat(NAME_LEN_MAX),
            creator: 4,
            counter: 0,
            members: vec![member; GUILD_MEMBERS_MAX],
            creating: None,
        };
        let mut bytes = Vec::new();
        guild.encode(&mut bytes);
        assert_eq!(Some(bytes.len()), GuildType.state_len_max());
    }
}
