//! Object keys and the key-to-core partition.

use crate::hash::{reduce, stable_hash64};

/// The identity of a routed object: its type, its zone and its id within
/// both. Every router object, cache and store record is keyed by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The object type, as the node's registry numbers it (player, room, a
    /// user type); every node of a cluster registers the same numbers.
    pub type_id: u32,
    /// A partition of ids the application chooses (a world or shard of the
    /// game); 0 where it has none.
    pub zone_id: u32,
    /// The object's id within its type and zone (a player id, a room id).
    pub object_id: u64,
}

/// One 128-bit write rather than the derive's three: every routed request
/// looks its key up in a hash map, and with ahash (the maps' hasher) each
/// write is a multiply-and-fold of its own.
impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let type_and_zone = (u64::from(self.type_id) << 32) | u64::from(self.zone_id);
        state.write_u128((u128::from(type_and_zone) << 64) | u128::from(self.object_id));
    }
}

impl ObjectKey {
    /// Bytes of [`Self::to_le_bytes`].
    pub const ENCODED_LEN: usize = 16;

    /// The key of `object_id` of type `type_id` in zone `zone_id`.
    pub const fn new(type_id: u32, zone_id: u32, object_id: u64) -> Self {
        Self {
            type_id,
            zone_id,
            object_id,
        }
    }

    /// The key's canonical bytes: `type_id`, `zone_id`, `object_id`, each
    /// little-endian. This is what `shard_of` hashes, so it is part of the
    /// cluster's compatibility contract.
    pub fn to_le_bytes(self) -> [u8; Self::ENCODED_LEN] {
        let mut bytes = [0u8; Self::ENCODED_LEN];
        bytes[0..4].copy_from_slice(&self.type_id.to_le_bytes());
        bytes[4..8].copy_from_slice(&self.zone_id.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.object_id.to_le_bytes());
        bytes
    }

    /// The key's stable 64-bit hash (XXH64, seed 0, over `to_le_bytes`).
    pub fn stable_hash(self) -> u64 {
        stable_hash64(&self.to_le_bytes())
    }
}

/// The core, in `0..cores`, that owns `key`.
///
/// Defined as `reduce(xxh64(key.to_le_bytes(), seed 0), cores)`, where
/// `reduce(h, n) = (h * n) >> 64` over 128-bit integers. The definition is
/// fixed: changing it would make two nodes of one cluster disagree about
/// which core owns an object. `cores` must be at least 1.
pub fn shard_of(key: ObjectKey, cores: u32) -> u32 {
    assert!(cores > 0, "shard_of needs at least one core");
    if cores == 1 {
        return 0; // what `reduce` gives for any hash, without hashing
    }
    reduce(key.stable_hash(), cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_differ_in_any_field_hash_apart() {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        let keys = [
            ObjectKey::new(1, 2, 3),
            ObjectKey::new(2, 1, 3),
            ObjectKey::new(1, 3, 2),
            ObjectKey::new(3, 2, 1),
            ObjectKey::new(1, 2, 3 | 1 << 32),
            ObjectKey::new(1, 2 | 1 << 16, 3),
        ];
        let hashes: std::collections::HashSet<u64> =
            keys.iter().map(|key| state.hash_one(key)).collect();
        assert_eq!(hashes.len(), keys.len());
        assert_eq!(
            state.hash_one(keys[0]),
            state.hash_one(ObjectKey::new(1, 2, 3))
        );
    }

    #[test]
    fn shard_of_is_pinned() {
        // These outputs are part of the cluster contract, computed with the
        // reference XXH64: if this test fails, nodes of different versions
        // would disagree on object placement.
        let cases = [
            (
                ObjectKey::new(1, 0, 1),
                0xED7A_EAD4_B89A_B6FC,
                [0, 1, 2, 3, 7],
            ),
            (
                ObjectKey::new(1, 0, 2),
                0x4B18_0FEC_3EF3_D4AC,
                [0, 0, 0, 1, 2],
            ),
            (
                ObjectKey::new(2, 7, 123_456_789),
                0x502F_0038_8554_82A0,
                [0, 0, 0, 1, 2],
            ),
            (
                ObjectKey::new(10, 1, u64::MAX),
                0x810B_EFFB_3CB8_F0BB,
                [0, 1, 1, 2, 4],
            ),
        ];
        for (key, hash, shards) in cases {
            assert_eq!(key.stable_hash(), hash, "{key:?}");
            for (cores, shard) in [1u32, 2, 3, 4, 8].into_iter().zip(shards) {
                assert_eq!(shard_of(key, cores), shard, "{key:?} over {cores} cores");
            }
        }
    }

    #[test]
    fn shard_of_spreads_keys_over_cores() {
        let cores = 8u32;
        let mut counts = [0u32; 8];
        for object_id in 0..8000u64 {
            counts[shard_of(ObjectKey::new(1, 0, object_id), cores) as usize] += 1;
        }
        for count in counts {
            assert!((800..1200).contains(&count), "uneven spread: {counts:?}");
        }
    }
}
