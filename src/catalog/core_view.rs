//! One core's lock-free reader of the catalog.
//!
//! Each core owns a `CoreCatalog` (it is `Send`, not shared). A lookup does one
//! Acquire load of the node-wide version and compares it with the version of
//! the core's own `Arc<Snapshot>`; on a match it is one hash probe into that
//! snapshot: no lock, no read-modify-write atomic, no allocation. Only the
//! first lookup after a change goes to the `Catalog` (and, for one core per
//! version, rebuilds).

use std::sync::Arc;

use super::actor::ActorConfig;
use super::local::LocalTable;
use super::registry::Catalog;
use super::snapshot::Snapshot;

#[derive(Debug)]
pub struct CoreCatalog {
    catalog: Arc<Catalog>,
    snapshot: Arc<Snapshot>,
    local: Arc<LocalTable>,
}

impl CoreCatalog {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        let snapshot = catalog.rebuild_snapshot();
        let local = catalog.local_table();
        CoreCatalog {
            catalog,
            snapshot,
            local,
        }
    }

    /// Remote candidates for `msg_id`, sorted by `(node_id, actor_id)`: a
    /// borrowed view into this core's snapshot, valid until the next lookup,
    /// so not to be kept (`LookupOtherActorConfigsByMsgIDView` in
    /// docs/origins.md).
    #[inline]
    pub fn lookup_other_actor_configs_by_msg_id_view(&mut self, msg_id: u32) -> &[ActorConfig] {
        if self.catalog.other_actors_version() != self.snapshot.version() {
            self.refresh_snapshot();
        }
        self.snapshot.candidates(msg_id)
    }

    /// The same candidates as an owned copy the caller may modify
    /// (`LookupOtherActorConfigsByMsgID` in docs/origins.md). Allocates the
    /// `Vec`; the configs' shared fields are reference-counted, not copied.
    pub fn lookup_other_actor_configs_by_msg_id(&mut self, msg_id: u32) -> Vec<ActorConfig> {
        self.lookup_other_actor_configs_by_msg_id_view(msg_id)
            .to_vec()
    }

    /// This node's own actors registered for `msg_id`, sorted by actor id
    /// (the `msgRouteTable` lookup, docs/origins.md); same lock-free scheme.
    #[inline]
    pub fn lookup_local_routes(&mut self, msg_id: u32) -> &[ActorConfig] {
        if self.catalog.local_version() != self.local.version() {
            self.local = self.catalog.local_table();
        }
        self.local.routes(msg_id)
    }

    /// This node's own actors and the remote candidates for `msg_id`, both
    /// at once (a pick over a node's own and the others' actors reads both).
    #[inline]
    pub fn lookup_local_and_remote(&mut self, msg_id: u32) -> (&[ActorConfig], &[ActorConfig]) {
        if self.catalog.local_version() != self.local.version() {
            self.local = self.catalog.local_table();
        }
        if self.catalog.other_actors_version() != self.snapshot.version() {
            self.refresh_snapshot();
        }
        (self.local.routes(msg_id), self.snapshot.candidates(msg_id))
    }

    /// The version of the snapshot this core read last.
    pub fn snapshot_version(&self) -> u64 {
        self.snapshot.version()
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    #[cold]
    #[inline(never)]
    fn refresh_snapshot(&mut self) {
        let snapshot = self.catalog.rebuild_snapshot();
        // Versions only grow: a core never goes back to an older table.
        assert!(snapshot.version() >= self.snapshot.version());
        self.snapshot = snapshot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::actor::testing::actor;
    use crate::catalog::ActorEvents;
    use std::sync::Barrier;

    #[test]
    fn view_follows_the_version() {
        let catalog = Arc::new(Catalog::new());
        let mut core = CoreCatalog::new(catalog.clone());
        assert!(core
            .lookup_other_actor_configs_by_msg_id_view(10)
            .is_empty());
        catalog.node_up(2, vec![actor(2, 7, &[10])]).unwrap();
        catalog.node_up(1, vec![actor(1, 9, &[10, 11])]).unwrap();
        let view: Vec<(u64, u64)> = core
            .lookup_other_actor_configs_by_msg_id_view(10)
            .iter()
            .map(ActorConfig::stable_order_key)
            .collect();
        assert_eq!(view, vec![(1, 9), (2, 7)]);
        assert_eq!(core.snapshot_version(), 2);
        let mut owned = core.lookup_other_actor_configs_by_msg_id(10);
        owned.retain(|a| a.node_id != 1);
        // Modifying the copy leaves the view alone.
        assert_eq!(core.lookup_other_actor_configs_by_msg_id_view(10).len(), 2);
        catalog.node_down(1);
        assert_eq!(
            core.lookup_other_actor_configs_by_msg_id_view(10),
            &owned[..]
        );
        assert!(core
            .lookup_other_actor_configs_by_msg_id_view(11)
            .is_empty());
        assert_eq!(catalog.rebuild_count(), 2);
    }

    #[test]
    fn matching_version_never_rebuilds() {
        let catalog = Arc::new(Catalog::new());
        catalog.node_up(1, vec![actor(1, 1, &[1])]).unwrap();
        let mut core = CoreCatalog::new(catalog.clone());
        let built = catalog.rebuild_count();
        for _ in 0..1000 {
            assert_eq!(core.lookup_other_actor_configs_by_msg_id_view(1).len(), 1);
        }
        assert_eq!(catalog.rebuild_count(), built);
    }

    #[test]
    fn racing_cores_rebuild_once_per_version() {
        const THREADS: usize = 16;
        let catalog = Arc::new(Catalog::new());
        let mut cores: Vec<CoreCatalog> = (0..THREADS)
            .map(|_| CoreCatalog::new(catalog.clone()))
            .collect();
        for round in 1..=5u64 {
            let actors = (0..50).map(|a| actor(round, a, &[1, 2, 3])).collect();
            catalog.node_up(round, actors).unwrap();
            let before = catalog.rebuild_count();
            let barrier = Barrier::new(THREADS);
            std::thread::scope(|scope| {
                for core in cores.iter_mut() {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        let seen = core.lookup_other_actor_configs_by_msg_id_view(2).len();
                        assert_eq!(seen as u64, 50 * round);
                    });
                }
            });
            assert_eq!(catalog.rebuild_count(), before + 1, "round {round}");
            for core in &cores {
                assert_eq!(core.snapshot_version(), round);
            }
        }
    }

    #[test]
    fn readers_racing_writers_see_whole_versions() {
        const READERS: usize = 4;
        const WRITES: u64 = 200;
        let catalog = Arc::new(Catalog::new());
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..READERS {
                let mut core = CoreCatalog::new(catalog.clone());
                let done = &done;
                scope.spawn(move || {
                    let mut last_version = 0;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let view = core.lookup_other_actor_configs_by_msg_id_view(1);
                        // Every node advertises its generation's actors on
                        // msgId 1 as a whole: a view holds 0 or 3 per node,
                        // in stable order, never a torn mix.
                        let keys: Vec<(u64, u64)> =
                            view.iter().map(ActorConfig::stable_order_key).collect();
                        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
                        assert_eq!(keys.len() % 3, 0, "{keys:?}");
                        assert!(core.snapshot_version() >= last_version);
                        last_version = core.snapshot_version();
                    }
                });
            }
            for write in 1..=WRITES {
                let node = write % 3;
                let actors = (0..3).map(|a| actor(node, write * 10 + a, &[1])).collect();
                catalog.node_up(node, actors).unwrap();
                // Let readers interleave with the writes.
                std::thread::yield_now();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(catalog.other_actors_version(), WRITES);
        assert!(catalog.rebuild_count() <= WRITES);
    }

    #[test]
    fn local_routes_reach_every_core() {
        let catalog = Arc::new(Catalog::new());
        let mut core_a = CoreCatalog::new(catalog.clone());
        let mut core_b = CoreCatalog::new(catalog.clone());
        assert!(core_a.lookup_local_routes(5).is_empty());
        catalog.register_routes(actor(0, 3, &[5])).unwrap();
        assert_eq!(core_a.lookup_local_routes(5).len(), 1);
        assert_eq!(core_b.lookup_local_routes(5)[0].actor_id, 3);
        assert!(catalog.unregister_routes(3));
        assert!(core_a.lookup_local_routes(5).is_empty());
        // Remote and local are separate: no remote rebuild happened.
        assert_eq!(catalog.rebuild_count(), 0);
    }
}
