//! Families whose label values are known only at run time: objects by
//! type (the node's registered types), gauges per core (`core` label, so a
//! hot core shows), and each peer's heartbeat age and link state (the
//! peers of the membership table).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};

use super::family::{write_family_head, Family, Kind, LabelValue};
use super::{CoreMetrics, Gauge};

/// Object types one core counts its writable objects of, by type. A node
/// registers a handful; the objects of types past it are still in
/// `routerd_router_objects`, only not by type.
pub const OBJECT_TYPES_COUNTED_MAX: usize = 32;

/// One core's writable objects by type: slot `i` holds a type id (0: an
/// empty slot; type 0 is no type's, the registry refuses it) and its count.
/// Written by the core's router driver with its other gauges.
#[derive(Debug, Default)]
pub struct ObjectsByType {
    slots: [(AtomicU32, Gauge); OBJECT_TYPES_COUNTED_MAX],
}

impl ObjectsByType {
    /// Sets the counts from `counts` (type id, objects), in slot order;
    /// returns how many types did not fit. Slots past the last are
    /// emptied, so a type whose manager went away stops being counted.
    pub fn set(&self, counts: impl Iterator<Item = (u32, usize)>) -> usize {
        let mut used = 0;
        let mut unfit = 0;
        for (type_id, objects) in counts {
            let Some((slot_type, gauge)) = self.slots.get(used) else {
                unfit += 1;
                continue;
            };
            slot_type.store(type_id, Ordering::Relaxed);
            gauge.set(i64::try_from(objects).unwrap_or(i64::MAX));
            used += 1;
        }
        for (slot_type, gauge) in &self.slots[used..] {
            slot_type.store(0, Ordering::Relaxed);
            gauge.set(0);
        }
        unfit
    }

    /// The objects of `type_id` this core holds.
    pub fn get(&self, type_id: u32) -> i64 {
        self.slots
            .iter()
            .filter(|(slot_type, _)| type_id != 0 && slot_type.load(Ordering::Relaxed) == type_id)
            .map(|(_, gauge)| gauge.get())
            .sum()
    }
}

const OBJECTS_BY_TYPE: &str = "routerd_router_objects_by_type";

/// `routerd_router_objects_by_type{type}`: every registered object type of
/// `types` (type id, name), zero included, summed over `cores`.
pub(super) fn write_objects_by_type<'c>(
    out: &mut String,
    types: &[(u32, &'static str)],
    cores: impl Iterator<Item = &'c CoreMetrics> + Clone,
) {
    let family = Family::<()> {
        name: OBJECTS_BY_TYPE,
        help: "Writable objects held, by object type.",
        kind: Kind::Gauge,
        label: None,
        series: &[],
    };
    write_family_head(out, &family);
    for &(type_id, name) in types {
        let objects: i64 = cores
            .clone()
            .map(|core| core.objects_by_type.get(type_id))
            .sum();
        // Writing into a String cannot fail.
        let _ = writeln!(
            out,
            "{OBJECTS_BY_TYPE}{{type=\"{}\"}} {objects}",
            LabelValue(name)
        );
    }
}

/// One per-core family: its name, help and how to read a core's value.
struct PerCore {
    name: &'static str,
    help: &'static str,
    read: fn(&CoreMetrics) -> i64,
}

const PER_CORE: &[PerCore] = &[
    PerCore {
        name: "routerd_core_sessions",
        help: "Client sessions open on the core.",
        read: |core| core.gateway.sessions_active.get(),
    },
    PerCore {
        name: "routerd_core_objects",
        help: "Writable objects the core holds.",
        read: |core| core.router.objects.get(),
    },
    PerCore {
        name: "routerd_core_pending_requests",
        help: "Requests queued on the core behind objects that are loading, saving or moving.",
        read: |core| core.router.pending.get(),
    },
    PerCore {
        name: "routerd_core_ring_ops_in_flight",
        help: "The core's ring operations submitted and not yet completed.",
        read: |core| core.runtime.ops_in_flight.get(),
    },
];

/// The gauges of [`PER_CORE`], one series per core (`core` label).
pub(super) fn write_per_core<'c>(
    out: &mut String,
    cores: impl Iterator<Item = &'c CoreMetrics> + Clone,
) {
    for family in PER_CORE {
        let head = Family::<()> {
            name: family.name,
            help: family.help,
            kind: Kind::Gauge,
            label: None,
            series: &[],
        };
        write_family_head(out, &head);
        for (index, core) in cores.clone().enumerate() {
            let _ = writeln!(
                out,
                "{}{{core=\"{index}\"}} {}",
                family.name,
                (family.read)(core)
            );
        }
    }
}

/// What the scrape says of one peer, read from the node's cluster view by
/// the admin endpoint (metrics import nothing of the cluster).
#[derive(Clone, Copy, Debug)]
pub struct PeerGauges {
    pub node_id: u64,
    /// Since this node last saw the peer's heartbeat move; `None` before
    /// it saw one.
    pub heartbeat_age_ms: Option<u64>,
    /// Every link this node's cores have to the peer is up (and at least
    /// one exists).
    pub link_up: bool,
    /// The peer is `joining` or `up` in the membership table.
    pub live: bool,
}

/// Link frames one core has queued for other nodes (the cluster view's
/// links of that core), summed by the caller.
#[derive(Clone, Copy, Debug)]
pub struct CoreLinkQueue {
    pub core: usize,
    pub queued: usize,
}

/// `routerd_cluster_peer_heartbeat_age_seconds{node}`,
/// `routerd_cluster_peer_link_up{node}`, `routerd_cluster_peer_up{node}`
/// and `routerd_core_link_queued_frames{core}`.
pub fn write_peers(out: &mut String, peers: &[PeerGauges], queues: &[CoreLinkQueue]) {
    let head = |out: &mut String, name: &'static str, help: &'static str| {
        let family = Family::<()> {
            name,
            help,
            kind: Kind::Gauge,
            label: None,
            series: &[],
        };
        write_family_head(out, &family);
    };
    head(
        out,
        "routerd_cluster_peer_heartbeat_age_seconds",
        "Seconds since this node last saw the peer's heartbeat advance (absent before the first).",
    );
    for peer in peers {
        if let Some(age) = peer.heartbeat_age_ms {
            let _ = writeln!(
                out,
                "routerd_cluster_peer_heartbeat_age_seconds{{node=\"{}\"}} {}",
                peer.node_id,
                age as f64 / 1e3
            );
        }
    }
    head(
        out,
        "routerd_cluster_peer_link_up",
        "1 while every link of this node's cores to the peer is up, 0 otherwise.",
    );
    for peer in peers {
        let _ = writeln!(
            out,
            "routerd_cluster_peer_link_up{{node=\"{}\"}} {}",
            peer.node_id,
            u8::from(peer.link_up)
        );
    }
    head(
        out,
        "routerd_cluster_peer_up",
        "1 while the peer is joining or up in the membership table, 0 when draining, left or down.",
    );
    for peer in peers {
        let _ = writeln!(
            out,
            "routerd_cluster_peer_up{{node=\"{}\"}} {}",
            peer.node_id,
            u8::from(peer.live)
        );
    }
    head(
        out,
        "routerd_core_link_queued_frames",
        "Frames the core's links to other nodes hold, not yet sent.",
    );
    for queue in queues {
        let _ = writeln!(
            out,
            "routerd_core_link_queued_frames{{core=\"{}\"}} {}",
            queue.core, queue.queued
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_by_type_are_bounded_and_empty_slots_cleared() {
        let counts = ObjectsByType::default();
        assert_eq!(counts.set([(1, 5), (7, 2)].into_iter()), 0);
        assert_eq!(counts.get(1), 5);
        assert_eq!(counts.get(7), 2);
        assert_eq!(counts.get(0), 0);
        // Type 7 went away: its slot is emptied.
        assert_eq!(counts.set([(1, 4)].into_iter()), 0);
        assert_eq!(counts.get(7), 0);
        assert_eq!(counts.get(1), 4);
        // Past the bound: reported, not written over another type.
        let many = (1..=OBJECT_TYPES_COUNTED_MAX as u32 + 3).map(|id| (id, 1));
        assert_eq!(counts.set(many), 3);
        assert_eq!(counts.get(OBJECT_TYPES_COUNTED_MAX as u32), 1);
        assert_eq!(counts.get(OBJECT_TYPES_COUNTED_MAX as u32 + 1), 0);
    }
}
