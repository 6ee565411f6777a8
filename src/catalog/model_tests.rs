//! Random membership events checked against a simple model: after every
//! event, each core's view equals a linear scan of the model's actors in the
//! stable order, and the version moved exactly when the model changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::actor::testing::actor;
use super::{lookup_linear_scan, ActorConfig, ActorEvents, Catalog, CoreCatalog};

const NODES: u64 = 4;
const MSG_IDS: u32 = 6;

#[derive(Debug, Clone)]
enum Event {
    Up(u64, Vec<(u64, Vec<u32>)>),
    Down(u64),
    Advertise(u64, Vec<(u64, Vec<u32>)>),
}

fn actors_strategy() -> impl Strategy<Value = Vec<(u64, Vec<u32>)>> {
    // Actor ids are unique per node (a set), msgIds may repeat in an actor.
    prop::collection::btree_map(0u64..6, prop::collection::vec(0..MSG_IDS, 0..4), 0..4)
        .prop_map(|map| map.into_iter().collect())
}

fn event_strategy() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0..NODES, actors_strategy()).prop_map(|(n, a)| Event::Up(n, a)),
        (0..NODES).prop_map(Event::Down),
        (0..NODES, actors_strategy()).prop_map(|(n, a)| Event::Advertise(n, a)),
    ]
}

fn configs(node: u64, actors: &[(u64, Vec<u32>)]) -> Vec<ActorConfig> {
    actors
        .iter()
        .map(|(id, msg_ids)| actor(node, *id, msg_ids))
        .collect()
}

proptest! {
    #[test]
    fn views_match_a_linear_scan_of_the_model(
        events in prop::collection::vec(event_strategy(), 1..40),
        lookups_between in 0usize..3,
    ) {
        let catalog = Arc::new(Catalog::new());
        let mut cores = [CoreCatalog::new(catalog.clone()), CoreCatalog::new(catalog.clone())];
        let mut model: BTreeMap<u64, Vec<ActorConfig>> = BTreeMap::new();
        for event in events {
            let before = model.clone();
            let version = catalog.other_actors_version();
            match event {
                Event::Up(node, actors) => {
                    let mut list = configs(node, &actors);
                    list.sort_unstable_by_key(|a| a.actor_id);
                    catalog.node_up(node, configs(node, &actors)).unwrap();
                    model.insert(node, list);
                }
                Event::Down(node) => {
                    catalog.node_down(node);
                    model.remove(&node);
                }
                Event::Advertise(node, actors) => {
                    let result = catalog.advertise(node, configs(node, &actors));
                    match model.get_mut(&node) {
                        Some(stored) => {
                            result.unwrap();
                            *stored = configs(node, &actors);
                            stored.sort_unstable_by_key(|a| a.actor_id);
                        }
                        None => prop_assert!(result.is_err()),
                    }
                }
            }
            let changed = before != model;
            prop_assert_eq!(catalog.other_actors_version() != version, changed);
            // Cores look up at different moments: some skip a version.
            for core in cores.iter_mut().take(lookups_between.max(1)) {
                let all: Vec<ActorConfig> = model.values().flatten().cloned().collect();
                let mut buf = Vec::new();
                for msg_id in 0..=MSG_IDS {
                    lookup_linear_scan(msg_id, &all, &mut buf);
                    let mut expected: Vec<ActorConfig> = buf.iter().map(|a| (*a).clone()).collect();
                    expected.dedup_by_key(|a| a.stable_order_key());
                    prop_assert_eq!(core.lookup_other_actor_configs_by_msg_id_view(msg_id), &expected[..]);
                }
                prop_assert_eq!(core.snapshot_version(), catalog.other_actors_version());
            }
        }
        // At most one build per version, however many cores looked.
        prop_assert!(catalog.rebuild_count() <= catalog.other_actors_version());
    }
}
