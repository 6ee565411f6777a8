//! What a node advertises about one actor, the limits on an advertisement,
//! and the errors that an advertisement outside those limits gets.

use std::sync::Arc;

/// Most nodes the remote registry holds. A membership source that offers
/// more gets [`AdvertiseError::TooManyNodes`].
pub const NODES_MAX: usize = 1024;
/// Most actors one node may advertise (remote registry) or register locally.
pub const ACTORS_PER_NODE_MAX: usize = 4096;
/// Most actors the remote registry holds over all nodes.
pub const REGISTRY_ACTORS_MAX: usize = 8192;
/// Most msgIds one actor may support. With [`REGISTRY_ACTORS_MAX`] this caps a
/// snapshot at 2 Mi candidate entries of 64 bytes each (see [`ActorConfig`]);
/// a deployment of 500 actors x 20 msgIds uses 10 000.
pub const MSG_IDS_PER_ACTOR_MAX: usize = 256;
/// Longest advertised address, in bytes.
pub const ADDRESS_LEN_MAX: usize = 256;

/// One actor as its node advertises it.
///
/// `supported_msg_ids` and `address` are shared (`Arc`) rather than owned
/// (`Vec`, `String`) on purpose: a snapshot stores one copy of the config per
/// msgId the actor supports, and the catalog design's Go (docs/origins.md)
/// copies those structs by value, which copies only slice and string headers.
/// With `Arc` fields a clone is two reference-count increments and never
/// allocates, and a snapshot's memory is O(entries) instead of O(entries x
/// msgIds per actor). Build one from owned values with `vec.into()` /
/// `string.into()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorConfig {
    pub actor_id: u64,
    pub node_id: u64,
    pub actor_type: u32,
    pub shard: u32,
    pub supported_msg_ids: Arc<[u32]>,
    /// Relative share of keys for [`crate::catalog::WeightedStrategy`]; 0
    /// means "pick only if every candidate has weight 0".
    pub weight: u32,
    pub address: Arc<str>,
}

impl ActorConfig {
    /// The order every node sorts candidate lists by, so that a pick by index
    /// means the same actor everywhere for the same membership.
    pub fn stable_order_key(&self) -> (u64, u64) {
        (self.node_id, self.actor_id)
    }

    /// Whether this actor lists `msg_id` (the catalog design's inner linear
    /// scan, docs/origins.md).
    pub fn supports(&self, msg_id: u32) -> bool {
        self.supported_msg_ids.contains(&msg_id)
    }
}

/// Why an advertisement (remote registry) or a local registration was refused.
/// Nothing is stored and the version does not move when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdvertiseError {
    #[error("registry already holds {NODES_MAX} nodes")]
    TooManyNodes,
    #[error("registry would hold {count} actors, more than {REGISTRY_ACTORS_MAX}")]
    RegistryFull { count: usize },
    #[error("node advertises {count} actors, more than {ACTORS_PER_NODE_MAX}")]
    TooManyActors { count: usize },
    #[error("actor {actor_id} supports {count} msgIds, more than {MSG_IDS_PER_ACTOR_MAX}")]
    TooManyMsgIds { actor_id: u64, count: usize },
    #[error("actor {actor_id} address is {len} bytes, more than {ADDRESS_LEN_MAX}")]
    AddressTooLong { actor_id: u64, len: usize },
    #[error("actor {actor_id} says node {actor_node}, event is for node {event_node}")]
    NodeMismatch {
        actor_id: u64,
        actor_node: u64,
        event_node: u64,
    },
    #[error("actor {actor_id} is advertised twice by one node")]
    DuplicateActor { actor_id: u64 },
    #[error("advertisement for node {node_id}, which is not up")]
    UnknownNode { node_id: u64 },
}

/// Checks one node's actor list against the limits and returns it sorted by
/// actor id, which is the form the registry stores and compares.
pub(crate) fn validate_actors(
    node_id: u64,
    mut actors: Vec<ActorConfig>,
) -> Result<Vec<ActorConfig>, AdvertiseError> {
    if actors.len() > ACTORS_PER_NODE_MAX {
        return Err(AdvertiseError::TooManyActors {
            count: actors.len(),
        });
    }
    for actor in &actors {
        validate_actor(actor)?;
        if actor.node_id != node_id {
            return Err(AdvertiseError::NodeMismatch {
                actor_id: actor.actor_id,
                actor_node: actor.node_id,
                event_node: node_id,
            });
        }
    }
    actors.sort_unstable_by_key(|actor| actor.actor_id);
    if let Some(pair) = actors.windows(2).find(|w| w[0].actor_id == w[1].actor_id) {
        return Err(AdvertiseError::DuplicateActor {
            actor_id: pair[0].actor_id,
        });
    }
    Ok(actors)
}

/// Checks the per-actor limits.
pub(crate) fn validate_actor(actor: &ActorConfig) -> Result<(), AdvertiseError> {
    if actor.supported_msg_ids.len() > MSG_IDS_PER_ACTOR_MAX {
        return Err(AdvertiseError::TooManyMsgIds {
            actor_id: actor.actor_id,
            count: actor.supported_msg_ids.len(),
        });
    }
    if actor.address.len() > ADDRESS_LEN_MAX {
        return Err(AdvertiseError::AddressTooLong {
            actor_id: actor.actor_id,
            len: actor.address.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    use super::ActorConfig;

    /// An actor for tests: weight 1, a made-up address.
    pub fn actor(node_id: u64, actor_id: u64, msg_ids: &[u32]) -> ActorConfig {
        ActorConfig {
            actor_id,
            node_id,
            actor_type: 1,
            shard: 0,
            supported_msg_ids: msg_ids.into(),
            weight: 1,
            address: format!("10.0.0.{node_id}:7000").into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::actor;
    use super::*;

    #[test]
    fn a_snapshot_entry_is_64_bytes() {
        // The memory bound quoted at MSG_IDS_PER_ACTOR_MAX relies on this.
        assert_eq!(std::mem::size_of::<ActorConfig>(), 64);
    }

    #[test]
    fn validation_sorts_by_actor_id() {
        let actors = vec![actor(1, 9, &[1]), actor(1, 3, &[1]), actor(1, 5, &[2])];
        let sorted = validate_actors(1, actors).unwrap();
        let ids: Vec<u64> = sorted.iter().map(|a| a.actor_id).collect();
        assert_eq!(ids, vec![3, 5, 9]);
    }

    #[test]
    fn validation_refuses_each_limit() {
        assert_eq!(
            validate_actors(2, vec![actor(1, 1, &[1])]),
            Err(AdvertiseError::NodeMismatch {
                actor_id: 1,
                actor_node: 1,
                event_node: 2
            })
        );
        assert_eq!(
            validate_actors(1, vec![actor(1, 4, &[1]), actor(1, 4, &[2])]),
            Err(AdvertiseError::DuplicateActor { actor_id: 4 })
        );
        let many_ids: Vec<u32> = (0..=MSG_IDS_PER_ACTOR_MAX as u32).collect();
        assert_eq!(
            validate_actors(1, vec![actor(1, 7, &many_ids)]),
            Err(AdvertiseError::TooManyMsgIds {
                actor_id: 7,
                count: MSG_IDS_PER_ACTOR_MAX + 1
            })
        );
        let mut long = actor(1, 8, &[1]);
        long.address = "x".repeat(ADDRESS_LEN_MAX + 1).into();
        assert!(matches!(
            validate_actors(1, vec![long]),
            Err(AdvertiseError::AddressTooLong { actor_id: 8, .. })
        ));
        let too_many: Vec<ActorConfig> = (0..=ACTORS_PER_NODE_MAX as u64)
            .map(|id| actor(1, id, &[1]))
            .collect();
        assert_eq!(
            validate_actors(1, too_many),
            Err(AdvertiseError::TooManyActors {
                count: ACTORS_PER_NODE_MAX + 1
            })
        );
        // At the limits exactly, everything is accepted.
        let at_limit: Vec<u32> = (0..MSG_IDS_PER_ACTOR_MAX as u32).collect();
        assert!(validate_actors(1, vec![actor(1, 1, &at_limit)]).is_ok());
    }
}
