//! The msgId -> candidate actors table (`otherRouteTableSnapshot` in
//! docs/origins.md) and the linear scan it replaces (the catalog design's
//! fallback path).

use super::actor::ActorConfig;

/// Candidate lists by msgId. ahash is fine here (unlike for picks): the map is
/// private to this process and its iteration order is never observed.
type Table = hashbrown::HashMap<u32, Box<[ActorConfig]>, ahash::RandomState>;

/// An immutable msgId -> candidates table built for one registry version.
///
/// Every candidate list is sorted by [`ActorConfig::stable_order_key`] and
/// holds each actor once, so every node with the same membership sees the
/// same list and a pick by index names the same actor.
#[derive(Debug)]
pub struct Snapshot {
    version: u64,
    table: Table,
}

impl Snapshot {
    /// Builds the table from every remote actor (any order). This is a
    /// full rebuild: O(actors x msgIds), paid once per version.
    pub fn build<'a>(version: u64, actors: impl IntoIterator<Item = &'a ActorConfig>) -> Self {
        let mut lists: Lists = Lists::default();
        for actor in actors {
            for &msg_id in actor.supported_msg_ids.iter() {
                lists.entry(msg_id).or_default().push(actor.clone());
            }
        }
        // Box<[T]> is built from a Vec after sorting; the intermediate map of
        // Vecs would keep spare capacity for the snapshot's whole life.
        let table = table_from_lists(lists);
        Snapshot { version, table }
    }

    /// The registry version this table was built from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The candidates for `msg_id`, empty if none: one map probe, no
    /// allocation.
    pub fn candidates(&self, msg_id: u32) -> &[ActorConfig] {
        match self.table.get(&msg_id) {
            Some(list) => list,
            None => &[],
        }
    }

    /// How many distinct msgIds have at least one candidate.
    pub fn msg_id_count(&self) -> usize {
        self.table.len()
    }
}

type Lists = hashbrown::HashMap<u32, Vec<ActorConfig>, ahash::RandomState>;

fn table_from_lists(lists: Lists) -> Table {
    let mut table = Table::with_capacity_and_hasher(lists.len(), ahash::RandomState::new());
    for (msg_id, mut list) in lists {
        list.sort_unstable_by_key(ActorConfig::stable_order_key);
        // An actor that lists a msgId twice is still one candidate.
        list.dedup_by_key(|actor| actor.stable_order_key());
        table.insert(msg_id, list.into_boxed_slice());
    }
    table
}

/// The lookup when no fast table is available (the catalog design's fallback
/// path, docs/origins.md): scan every config's `supported_msg_ids` for
/// `msg_id` and collect the matches into `remote_candidates_buf`, which the
/// caller reuses between calls (the design's `remoteCandidatesBuf`), so that
/// a warm buffer does not allocate.
///
/// The buffer holds references: the design's Go appends copies of
/// `ActorConfig` structs, which copy only slice and string headers, and a
/// reference is the allocation-free Rust equivalent. Matches come out in
/// `configs` order; an actor that lists `msg_id` twice appears twice, as in
/// the design.
pub fn lookup_linear_scan<'a>(
    msg_id: u32,
    configs: &'a [ActorConfig],
    remote_candidates_buf: &mut Vec<&'a ActorConfig>,
) {
    remote_candidates_buf.clear();
    for cfg in configs {
        for &id in cfg.supported_msg_ids.iter() {
            if id == msg_id {
                remote_candidates_buf.push(cfg);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::actor::testing::actor;

    fn ids(list: &[ActorConfig]) -> Vec<(u64, u64)> {
        list.iter().map(ActorConfig::stable_order_key).collect()
    }

    #[test]
    fn build_indexes_sorts_and_dedups() {
        let actors = vec![
            actor(3, 1, &[10, 20]),
            actor(1, 9, &[10]),
            actor(1, 2, &[10, 10, 30]),
            actor(2, 5, &[20]),
        ];
        let snap = Snapshot::build(7, &actors);
        assert_eq!(snap.version(), 7);
        assert_eq!(snap.msg_id_count(), 3);
        assert_eq!(ids(snap.candidates(10)), vec![(1, 2), (1, 9), (3, 1)]);
        assert_eq!(ids(snap.candidates(20)), vec![(2, 5), (3, 1)]);
        assert_eq!(ids(snap.candidates(30)), vec![(1, 2)]);
        assert!(snap.candidates(40).is_empty());
    }

    #[test]
    fn build_order_does_not_depend_on_input_order() {
        let mut actors: Vec<ActorConfig> = (0..40)
            .map(|i| actor(i % 7, i, &[1, 2, (i % 5) as u32]))
            .collect();
        let forward = Snapshot::build(1, &actors);
        actors.reverse();
        let backward = Snapshot::build(1, &actors);
        for msg_id in 0..6 {
            assert_eq!(forward.candidates(msg_id), backward.candidates(msg_id));
        }
    }

    #[test]
    fn linear_scan_agrees_with_the_snapshot() {
        let actors: Vec<ActorConfig> = (0..50)
            .map(|i| actor(i % 4, i, &[(i % 3) as u32, 100 + (i % 10) as u32]))
            .collect();
        let snap = Snapshot::build(1, &actors);
        let mut buf = Vec::new();
        for msg_id in [0, 1, 2, 100, 105, 109, 999] {
            lookup_linear_scan(msg_id, &actors, &mut buf);
            let mut scanned: Vec<ActorConfig> = buf.iter().map(|a| (*a).clone()).collect();
            scanned.sort_unstable_by_key(ActorConfig::stable_order_key);
            assert_eq!(scanned.as_slice(), snap.candidates(msg_id), "msg {msg_id}");
        }
        // The buffer is reused: a miss leaves it empty, not stale.
        lookup_linear_scan(999, &actors, &mut buf);
        assert!(buf.is_empty());
    }
}
