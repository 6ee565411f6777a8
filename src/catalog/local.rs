//! Local routes (`msgRouteTable` in docs/origins.md): this node's own actors by
//! msgId, updated incrementally and copy-on-write when an actor registers.
//!
//! Unlike the remote snapshot, an update here knows exactly which msgIds it
//! touches, so it copies the table's spine (one `Arc` clone per msgId) and
//! rebuilds only the touched lists, then publishes the new table at once.
//! Readers use the same scheme as the remote snapshot: each core keeps an
//! `Arc` of the table and compares one atomic version load with it per lookup
//! (see `CoreCatalog`); only a core that sees a new version takes the publish
//! lock, once, to clone the new `Arc`. std has no atomic `Arc` swap, and this
//! keeps the hot path free of locks and read-modify-write atomics without one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::actor::{validate_actor, ActorConfig, AdvertiseError, ACTORS_PER_NODE_MAX};
use super::lock;

type Routes = hashbrown::HashMap<u32, Arc<[ActorConfig]>, ahash::RandomState>;
type Actors = hashbrown::HashMap<u64, ActorConfig, ahash::RandomState>;

/// One published version of the local routes. Immutable once published.
#[derive(Debug, Default)]
pub(crate) struct LocalTable {
    version: u64,
    routes: Routes,
}

impl LocalTable {
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Local actors for `msg_id`, sorted by actor id; empty if none.
    pub(crate) fn routes(&self, msg_id: u32) -> &[ActorConfig] {
        match self.routes.get(&msg_id) {
            Some(list) => list,
            None => &[],
        }
    }
}

/// The writer side: registrations are serialised by the publish lock.
#[derive(Debug, Default)]
pub(crate) struct LocalRoutes {
    version: AtomicU64,
    msg_route_table: Mutex<Writer>,
}

/// What the publish lock guards: the published table, and the registered
/// actors by id, which only writers read, so it is updated in place rather
/// than copied with each table.
#[derive(Debug, Default)]
struct Writer {
    published: Arc<LocalTable>,
    actors: Actors,
}

impl LocalRoutes {
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub(crate) fn current(&self) -> Arc<LocalTable> {
        lock(&self.msg_route_table).published.clone()
    }

    /// Adds `actor` under each of its msgIds, replacing an earlier
    /// registration with the same actor id.
    pub(crate) fn register_routes(&self, actor: ActorConfig) -> Result<(), AdvertiseError> {
        validate_actor(&actor)?;
        let mut writer = lock(&self.msg_route_table);
        let replacing = writer.actors.contains_key(&actor.actor_id);
        if !replacing && writer.actors.len() >= ACTORS_PER_NODE_MAX {
            return Err(AdvertiseError::TooManyActors {
                count: writer.actors.len() + 1,
            });
        }
        let mut routes = writer.published.routes.clone();
        if let Some(previous) = writer.actors.remove(&actor.actor_id) {
            remove_from_lists(&mut routes, &previous);
        }
        for &msg_id in actor.supported_msg_ids.iter() {
            let list = routes.get(&msg_id).map_or(&[][..], |list| &**list);
            if list.iter().any(|a| a.actor_id == actor.actor_id) {
                continue; // The actor listed this msgId twice.
            }
            let at = list.partition_point(|a| a.stable_order_key() < actor.stable_order_key());
            let mut next = Vec::with_capacity(list.len() + 1);
            next.extend_from_slice(&list[..at]);
            next.push(actor.clone());
            next.extend_from_slice(&list[at..]);
            routes.insert(msg_id, next.into());
        }
        writer.actors.insert(actor.actor_id, actor);
        self.publish(&mut writer, routes);
        Ok(())
    }

    /// Removes the actor with `actor_id`; returns whether it was registered.
    pub(crate) fn unregister_routes(&self, actor_id: u64) -> bool {
        let mut writer = lock(&self.msg_route_table);
        let Some(previous) = writer.actors.remove(&actor_id) else {
            return false;
        };
        let mut routes = writer.published.routes.clone();
        remove_from_lists(&mut routes, &previous);
        self.publish(&mut writer, routes);
        true
    }

    fn publish(&self, writer: &mut Writer, routes: Routes) {
        let version = writer.published.version + 1;
        writer.published = Arc::new(LocalTable { version, routes });
        // Stored after the table, under the lock: a reader that sees this
        // version and then takes the lock finds a table at least this new.
        self.version.store(version, Ordering::Release);
    }
}

fn remove_from_lists(routes: &mut Routes, actor: &ActorConfig) {
    for &msg_id in actor.supported_msg_ids.iter() {
        let Some(list) = routes.get(&msg_id) else {
            continue; // Already handled: the actor listed this msgId twice.
        };
        let next: Vec<ActorConfig> = list
            .iter()
            .filter(|a| a.actor_id != actor.actor_id)
            .cloned()
            .collect();
        if next.is_empty() {
            routes.remove(&msg_id);
        } else {
            routes.insert(msg_id, next.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::actor::testing::actor;

    fn ids(list: &[ActorConfig]) -> Vec<u64> {
        list.iter().map(|a| a.actor_id).collect()
    }

    #[test]
    fn register_is_incremental_and_copy_on_write() {
        let local = LocalRoutes::default();
        local.register_routes(actor(0, 5, &[1, 2])).unwrap();
        let before = local.current();
        local.register_routes(actor(0, 3, &[2, 3])).unwrap();
        let after = local.current();
        // The old table is untouched: readers holding it see a consistent view.
        assert_eq!(ids(before.routes(2)), vec![5]);
        assert_eq!(before.version(), 1);
        assert_eq!(after.version(), 2);
        assert_eq!(local.version(), 2);
        assert_eq!(ids(after.routes(1)), vec![5]);
        assert_eq!(ids(after.routes(2)), vec![3, 5]);
        assert_eq!(ids(after.routes(3)), vec![3]);
        // msgId 1 was not touched: the new table shares the very same list.
        assert!(std::ptr::eq(before.routes(1), after.routes(1)));
        assert!(!std::ptr::eq(before.routes(2), after.routes(2)));
    }

    #[test]
    fn re_registering_replaces_and_unregister_removes() {
        let local = LocalRoutes::default();
        local.register_routes(actor(0, 5, &[1, 2, 2])).unwrap();
        assert_eq!(ids(local.current().routes(2)), vec![5]);
        local.register_routes(actor(0, 5, &[3])).unwrap();
        let table = local.current();
        assert!(table.routes(1).is_empty());
        assert!(table.routes(2).is_empty());
        assert_eq!(ids(table.routes(3)), vec![5]);
        assert!(local.unregister_routes(5));
        assert!(!local.unregister_routes(5));
        assert!(local.current().routes(3).is_empty());
        assert_eq!(local.version(), 3);
    }

    #[test]
    fn register_refuses_past_the_actor_limit() {
        let local = LocalRoutes::default();
        for id in 0..ACTORS_PER_NODE_MAX as u64 {
            local
                .register_routes(actor(0, id, &[(id % 64) as u32]))
                .unwrap();
        }
        let version = local.version();
        assert_eq!(
            local.register_routes(actor(0, u64::MAX, &[1])),
            Err(AdvertiseError::TooManyActors {
                count: ACTORS_PER_NODE_MAX + 1
            })
        );
        assert_eq!(local.version(), version);
        // Replacing an existing actor at the limit is still allowed.
        local.register_routes(actor(0, 0, &[100])).unwrap();
        assert_eq!(
            local.current().routes(0).len(),
            ACTORS_PER_NODE_MAX / 64 - 1
        );
        assert_eq!(ids(local.current().routes(100)), vec![0]);
    }
}
