//! Each core follows the [`ClusterView`] into its own router and links:
//! another member's new incarnation or state reaches the router (which
//! decides what becomes claimable) and closes the links of an incarnation
//! that ended; this node's lease, fence and rejoin reach the router in
//! that order. Fencing is membership's one decision for the whole node: a
//! core never fences on its own (a lapsed lease only pauses it until the
//! next heartbeat), and a rejoin fences first, whatever was seen before,
//! so a core that missed the fence still sets aside what the old
//! incarnation held. Each core reports what its router really does, for
//! `/cluster`.

use std::sync::Arc;
use std::time::Duration;

use super::incoming::Incoming;
use super::outgoing::CoreLinks;
use super::view::{ClusterView, Snapshot, Standing};
use crate::router::driver::RouterDriver;

/// How often a core reports its links and standing for `/cluster` when
/// nothing changes.
const REPORT_INTERVAL: Duration = Duration::from_millis(250);

pub struct Follower {
    pub core: usize,
    pub view: Arc<ClusterView>,
    pub links: CoreLinks,
    pub incoming: Incoming,
    pub router: RouterDriver,
}

impl Follower {
    /// Follows the view until the core stops.
    pub async fn run(self) {
        let mut seen = self.view.snapshot();
        // The first look is a change from what the router was built
        // with: its boot incarnation, no lease, no peers. So a rejoin that
        // happened before this core's follower ran (the process paused
        // between its cores' starts) reaches the router too, which would
        // otherwise serve under the incarnation that ended.
        let built = self.router.standing();
        let boot = Snapshot {
            version: 0,
            me: Standing {
                incarnation: built.incarnation,
                lease_until_ms: 0,
                fenced: false,
                state: seen.me.state,
            },
            peers: Default::default(),
        };
        self.apply(&boot, &seen);
        loop {
            futures_lite::future::or(self.view.changed(seen.version), async {
                shards::sleep(REPORT_INTERVAL).await;
            })
            .await;
            if self.view.version() != seen.version {
                let now = self.view.snapshot();
                self.apply(&seen, &now);
                seen = now;
            }
            self.view.report_links(self.core, self.links.statuses());
            self.view.report_core(self.core, self.router.standing());
        }
    }

    fn apply(&self, seen: &Snapshot, now: &Snapshot) {
        let (before, me) = (seen.me, now.me);
        if me.incarnation != before.incarnation {
            self.router.fence();
            self.router.rejoin(me.incarnation, me.lease_until_ms);
            // Links announce the incarnation in their handshake: open
            // them again as the new one.
            self.links.close_node(None);
            self.incoming.close_all();
            if me.fenced {
                // The new incarnation was fenced too before this core saw
                // it (both changes in one look).
                self.router.fence();
            }
        } else if me.fenced && !before.fenced {
            self.router.fence();
        } else if me.lease_until_ms > before.lease_until_ms && !me.fenced {
            self.router.extend_lease(me.lease_until_ms);
        } else if me.lease_until_ms < before.lease_until_ms {
            // Membership cut the lease short (time jumped).
            self.router.end_lease(me.lease_until_ms);
        }
        for (node, peer) in now.peers.iter() {
            let old = seen.peers.get(node);
            if old == Some(peer) {
                continue;
            }
            let replaced = old.is_some_and(|old| old.incarnation != peer.incarnation);
            if old.is_none_or(|old| old.incarnation != peer.incarnation || old.state != peer.state)
            {
                self.router
                    .on_member(peer.node, peer.incarnation, peer.state);
            }
            if replaced || !peer.is_live() {
                self.links.close_node(Some(*node));
                let live = peer.is_live().then_some(peer.incarnation);
                self.incoming.close_older(*node, live);
            }
        }
    }
}
