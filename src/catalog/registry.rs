//! The node-wide catalog (`Group` in docs/origins.md): the remote actor
//! registry fed by membership events, its version, the lazily rebuilt
//! snapshot, and this node's local routes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::actor::{validate_actors, ActorConfig, AdvertiseError, NODES_MAX, REGISTRY_ACTORS_MAX};
use super::local::{LocalRoutes, LocalTable};
use super::lock;
use super::snapshot::Snapshot;

/// The one interface membership feeds remote actors through. Each event only
/// stores the configs and bumps the version; nothing is rebuilt here
/// (`watchActor` in docs/origins.md). Each returns whether the registry
/// changed: an event that repeats what is stored (a periodic
/// re-advertisement) leaves the version alone, so it costs no rebuild.
pub trait ActorEvents {
    /// A node joined with these actors (replacing whatever it had before).
    fn node_up(&self, node_id: u64, actors: Vec<ActorConfig>) -> Result<bool, AdvertiseError>;
    /// A node left; its actors stop being candidates.
    fn node_down(&self, node_id: u64) -> bool;
    /// A known node changed its advertisement. Refused for a node that is not
    /// up, so a late advertisement cannot bring a departed node back.
    fn advertise(&self, node_id: u64, actors: Vec<ActorConfig>) -> Result<bool, AdvertiseError>;
}

/// Shared by every core of a node (`Arc<Catalog>`); each core reads through
/// its own [`crate::catalog::CoreCatalog`].
#[derive(Debug)]
pub struct Catalog {
    /// node id -> its actors sorted by actor id. Shared slices, so a rebuild
    /// copies the map's spine under the lock and builds outside it.
    other_actors: Mutex<BTreeMap<u64, Arc<[ActorConfig]>>>,
    /// Bumped, under the `other_actors` lock, by every change to it.
    other_actors_version: AtomicU64,
    /// The latest snapshot. Its lock is also the rebuild lock (`otherRouteMu`
    /// in docs/origins.md): cores that notice one new version build it once.
    other_route_snapshot: Mutex<Arc<Snapshot>>,
    rebuild_count: AtomicU64,
    msg_route_table: LocalRoutes,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::new()
    }
}

impl Catalog {
    pub fn new() -> Self {
        Catalog {
            other_actors: Mutex::new(BTreeMap::new()),
            other_actors_version: AtomicU64::new(0),
            other_route_snapshot: Mutex::new(Arc::new(Snapshot::build(0, []))),
            rebuild_count: AtomicU64::new(0),
            msg_route_table: LocalRoutes::default(),
        }
    }

    /// The remote registry's version; a snapshot with another version is
    /// stale. Acquire pairs with the Release bump in the event methods.
    #[inline]
    pub fn other_actors_version(&self) -> u64 {
        self.other_actors_version.load(Ordering::Acquire)
    }

    /// How many snapshots have been built since start (for tests and metrics).
    pub fn rebuild_count(&self) -> u64 {
        self.rebuild_count.load(Ordering::Relaxed)
    }

    /// Returns a snapshot for the current version, building it if no one has
    /// yet, double-checked (`rebuildSnapshot` in docs/origins.md). The first
    /// check is the caller's lock-free version compare; this is the second,
    /// under the rebuild lock, so racing cores build once.
    pub fn rebuild_snapshot(&self) -> Arc<Snapshot> {
        let mut published = lock(&self.other_route_snapshot);
        let current = self.other_actors_version();
        assert!(
            published.version() <= current,
            "snapshot newer than registry"
        );
        if published.version() == current {
            return published.clone();
        }
        let (version, nodes) = {
            let registry = lock(&self.other_actors);
            // Read under the registry lock, so it names exactly these contents
            // (it may be newer than `current`, never older).
            let version = self.other_actors_version();
            (version, registry.values().cloned().collect::<Vec<_>>())
        };
        assert!(version >= current, "registry version went down");
        let snapshot = Arc::new(Snapshot::build(
            version,
            nodes.iter().flat_map(|actors| actors.iter()),
        ));
        *published = snapshot.clone();
        self.rebuild_count.fetch_add(1, Ordering::Relaxed);
        snapshot
    }

    /// Registers a local actor under each of its msgIds (`RegisterRoutes` in
    /// docs/origins.md), replacing an earlier registration with its id. Cores
    /// see it at their next local lookup.
    pub fn register_routes(&self, actor: ActorConfig) -> Result<(), AdvertiseError> {
        self.msg_route_table.register_routes(actor)
    }

    /// Removes a local actor; returns whether it was registered.
    pub fn unregister_routes(&self, actor_id: u64) -> bool {
        self.msg_route_table.unregister_routes(actor_id)
    }

    pub(crate) fn local_version(&self) -> u64 {
        self.msg_route_table.version()
    }

    pub(crate) fn local_table(&self) -> Arc<LocalTable> {
        self.msg_route_table.current()
    }

    /// Stores `actors` for `node_id` if they differ from what is stored.
    /// `must_exist` distinguishes `advertise` from `node_up`.
    fn store(
        &self,
        node_id: u64,
        actors: Vec<ActorConfig>,
        must_exist: bool,
    ) -> Result<bool, AdvertiseError> {
        let actors = validate_actors(node_id, actors)?;
        let mut registry = lock(&self.other_actors);
        let previous = registry.get(&node_id);
        match previous {
            None if must_exist => return Err(AdvertiseError::UnknownNode { node_id }),
            None if registry.len() >= NODES_MAX => return Err(AdvertiseError::TooManyNodes),
            Some(stored) if **stored == *actors => return Ok(false),
            _ => {}
        }
        let others: usize = registry
            .iter()
            .filter(|(id, _)| **id != node_id)
            .map(|(_, list)| list.len())
            .sum();
        if others + actors.len() > REGISTRY_ACTORS_MAX {
            return Err(AdvertiseError::RegistryFull {
                count: others + actors.len(),
            });
        }
        registry.insert(node_id, actors.into());
        self.other_actors_version.fetch_add(1, Ordering::Release);
        Ok(true)
    }
}

impl ActorEvents for Catalog {
    fn node_up(&self, node_id: u64, actors: Vec<ActorConfig>) -> Result<bool, AdvertiseError> {
        self.store(node_id, actors, false)
    }

    fn node_down(&self, node_id: u64) -> bool {
        let mut registry = lock(&self.other_actors);
        if registry.remove(&node_id).is_none() {
            return false;
        }
        self.other_actors_version.fetch_add(1, Ordering::Release);
        true
    }

    fn advertise(&self, node_id: u64, actors: Vec<ActorConfig>) -> Result<bool, AdvertiseError> {
        self.store(node_id, actors, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::actor::testing::actor;

    #[test]
    fn events_only_bump_the_version() {
        let catalog = Catalog::new();
        assert_eq!(catalog.other_actors_version(), 0);
        assert!(catalog.node_up(1, vec![actor(1, 1, &[10])]).unwrap());
        assert!(catalog.node_up(2, vec![actor(2, 1, &[10])]).unwrap());
        assert_eq!(catalog.other_actors_version(), 2);
        // Nothing was built on the event path.
        assert_eq!(catalog.rebuild_count(), 0);
        let snap = catalog.rebuild_snapshot();
        assert_eq!(snap.version(), 2);
        assert_eq!(snap.candidates(10).len(), 2);
        assert_eq!(catalog.rebuild_count(), 1);
        // Up to date: the second check returns the same snapshot.
        assert!(Arc::ptr_eq(&snap, &catalog.rebuild_snapshot()));
        assert_eq!(catalog.rebuild_count(), 1);
    }

    #[test]
    fn unchanged_advertisement_keeps_the_version() {
        let catalog = Catalog::new();
        catalog
            .node_up(1, vec![actor(1, 2, &[10]), actor(1, 1, &[11])])
            .unwrap();
        // Same actors in another order: no change, no version bump.
        assert!(!catalog
            .advertise(1, vec![actor(1, 1, &[11]), actor(1, 2, &[10])])
            .unwrap());
        assert!(!catalog
            .node_up(1, vec![actor(1, 2, &[10]), actor(1, 1, &[11])])
            .unwrap());
        assert_eq!(catalog.other_actors_version(), 1);
        assert!(catalog.advertise(1, vec![actor(1, 1, &[12])]).unwrap());
        assert_eq!(catalog.other_actors_version(), 2);
        let snap = catalog.rebuild_snapshot();
        assert!(snap.candidates(10).is_empty());
        assert_eq!(snap.candidates(12).len(), 1);
    }

    #[test]
    fn node_down_and_advertise_for_unknown_node() {
        let catalog = Catalog::new();
        assert!(!catalog.node_down(3));
        assert_eq!(
            catalog.advertise(3, vec![actor(3, 1, &[1])]),
            Err(AdvertiseError::UnknownNode { node_id: 3 })
        );
        assert_eq!(catalog.other_actors_version(), 0);
        catalog.node_up(3, vec![actor(3, 1, &[1])]).unwrap();
        assert!(catalog.node_down(3));
        assert_eq!(catalog.other_actors_version(), 2);
        assert!(catalog.rebuild_snapshot().candidates(1).is_empty());
        // A refused event stores nothing.
        assert!(catalog.node_up(4, vec![actor(5, 1, &[1])]).is_err());
        assert_eq!(catalog.other_actors_version(), 2);
    }

    #[test]
    fn registry_bounds_nodes_and_total_actors() {
        let catalog = Catalog::new();
        for node in 0..NODES_MAX as u64 {
            catalog.node_up(node, Vec::new()).unwrap();
        }
        assert_eq!(
            catalog.node_up(NODES_MAX as u64, Vec::new()),
            Err(AdvertiseError::TooManyNodes)
        );
        // Known nodes can still change.
        let per_node = REGISTRY_ACTORS_MAX / 2;
        let fill = |node: u64| (0..per_node as u64).map(|a| actor(node, a, &[1])).collect();
        catalog.node_up(0, fill(0)).unwrap();
        catalog.advertise(1, fill(1)).unwrap();
        assert_eq!(
            catalog.advertise(2, vec![actor(2, 1, &[1])]),
            Err(AdvertiseError::RegistryFull {
                count: REGISTRY_ACTORS_MAX + 1
            })
        );
        // Replacing a node's own actors counts them once.
        catalog
            .advertise(1, fill(1)[..per_node - 1].to_vec())
            .unwrap();
        catalog.advertise(2, vec![actor(2, 1, &[1])]).unwrap();
    }
}
