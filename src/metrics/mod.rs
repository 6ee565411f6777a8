//! Counters, gauges and histograms, one set per core, summed over cores by
//! the admin endpoint. Each is written only by its own core, so an update
//! is a relaxed load and store (no locked instruction on the hot path), and
//! the admin thread's reads may lag by a few updates, never tear.
//!
//! Every metric is declared once, with its name, help and type, by
//! `metric_set!` or `counter_set!` (family.rs) in this folder: gateway.rs,
//! router.rs, runtime.rs, store.rs; the node-level ones (mesh, store queue, build) are
//! in this file. docs/protocol.md lists the names operators rely on; a test
//! keeps them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

mod admin;
mod by_type;
mod cluster;
mod family;
mod gateway;
mod histogram;
mod node;
mod process;
mod router;
mod runtime;
mod store;

pub use self::admin::AdminStats;
pub use self::by_type::{calls_by_type, quantile, TypeCalls, LATENCY_BUCKETS, SERVER_ERROR_CODES};
pub use self::cluster::ClusterStats;
use self::family::write_family_list;
pub(crate) use self::family::{counter_set, metric_label, metric_label_value, metric_set};
pub use self::family::{write_families, Families, Family, Kind, Metric, Series, Value};
pub use self::gateway::{answer_slot, GatewayStats, RequestCounts, RequestLatency, ANSWER_CODES};
pub use self::histogram::{Histogram, BUCKET_BOUNDS};
pub use self::node::{
    write_peers, CoreLinkQueue, ObjectsByType, PeerGauges, OBJECT_TYPES_COUNTED_MAX,
};
pub use self::router::{RouterCounterCells, RouterCounters, RouterStats};
pub use self::runtime::{RuntimeStats, RUNTIME_MIRROR_INTERVAL};
pub use self::store::{ErrorKind, ErrorOp, StoreProbe, StoreStats};
use crate::route::RouteTable;

/// A monotonic counter written by one core.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Copies a monotonic count kept elsewhere on the same core (a sans-IO
    /// state machine's own counter).
    pub fn mirror(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl Metric for Counter {
    const KIND: Kind = Kind::Counter;

    fn value(&self) -> Value<'_> {
        Value::Count(self.get())
    }
}

/// A gauge written by one core.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub fn add(&self, delta: i64) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Metric for Gauge {
    const KIND: Kind = Kind::Gauge;

    fn value(&self) -> Value<'_> {
        Value::Level(self.get())
    }
}

/// Everything one core reports.
#[derive(Debug, Default)]
pub struct CoreMetrics {
    pub gateway: GatewayStats,
    pub requests: RequestLatency,
    pub answers: RequestCounts,
    pub router: RouterStats,
    pub router_counters: RouterCounterCells,
    pub cluster: ClusterStats,
    pub runtime: RuntimeStats,
    pub objects_by_type: ObjectsByType,
}

/// The node's metrics: one [`CoreMetrics`] per core, the runtime's mesh
/// counters and the store's, and the routes the per-route histograms are
/// kept for.
#[derive(Clone, Debug)]
pub struct NodeMetrics {
    pub cores: Vec<Arc<CoreMetrics>>,
    pub mesh: Vec<Arc<shards::MeshStats>>,
    pub store: Option<Arc<dyn StoreProbe>>,
    pub routes: Arc<RouteTable>,
    /// The node's object types (type id, name), for the objects by type.
    pub types: Vec<(u32, &'static str)>,
    /// The admin endpoint's (its thread writes them).
    pub admin: Arc<AdminStats>,
}

/// The runtime's core-to-core channels (declared here: the counters live
/// in the `shards` crate).
const MESH_FAMILIES: &[Family<shards::MeshStats>] = &[
    Family {
        name: "routerd_mesh_sent_total",
        help: "Frames sent between cores.",
        kind: Kind::Counter,
        label: None,
        series: &[Series {
            label_value: None,
            read: |mesh| Value::Count(mesh.sent_total.load(Ordering::Relaxed)),
        }],
    },
    Family {
        name: "routerd_mesh_full_total",
        help: "Frames not sent because the channel to their core held cores.mesh_queue_max \
               frames.",
        kind: Kind::Counter,
        label: None,
        series: &[Series {
            label_value: None,
            read: |mesh| Value::Count(mesh.full_total.load(Ordering::Relaxed)),
        }],
    },
    Family {
        name: "routerd_mesh_closed_total",
        help: "Frames not sent because their core had stopped.",
        kind: Kind::Counter,
        label: None,
        series: &[Series {
            label_value: None,
            read: |mesh| Value::Count(mesh.closed_total.load(Ordering::Relaxed)),
        }],
    },
];

/// Read at scrape time from the store's queue itself.
const STORE_QUEUE_FAMILIES: &[Family<Arc<dyn StoreProbe>>] = &[Family {
    name: "routerd_store_queue_depth",
    help: "Store requests waiting for the store's thread (at most store.queue_max).",
    kind: Kind::Gauge,
    label: None,
    series: &[Series {
        label_value: None,
        read: |store| Value::Level(i64::try_from(store.queue_depth()).unwrap_or(i64::MAX)),
    }],
}];

const BUILD_FAMILIES: &[Family<()>] = &[Family {
    name: "routerd_build_info",
    help: "Always 1; the label says which routerd version runs (+pgo: a profile-guided build).",
    kind: Kind::Gauge,
    label: Some("version"),
    series: &[Series {
        label_value: Some(crate::VERSION),
        read: |_| Value::Level(1),
    }],
}];

impl NodeMetrics {
    /// The metrics of a node that serves `routes`.
    pub fn with_routes(core_count: usize, routes: Arc<RouteTable>) -> Self {
        Self {
            cores: (0..core_count).map(|_| Arc::default()).collect(),
            mesh: Vec::new(),
            store: None,
            routes,
            types: Vec::new(),
            admin: Arc::default(),
        }
    }

    /// The Prometheus text exposition of every metric, summed over cores.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(RENDER_CAPACITY);
        self.render_into(&mut out);
        out
    }

    /// [`Self::render`] into `out`; allocates only if `out` must grow.
    pub fn render_into(&self, out: &mut String) {
        let cores = self.cores.iter().map(|core| &**core);
        write_families(out, cores.clone().map(|core| &core.gateway));
        gateway::write_request_latency(out, &self.routes, cores.clone().map(|core| &core.requests));
        gateway::write_request_counts(out, &self.routes, cores.clone().map(|core| &core.answers));
        write_families(out, cores.clone().map(|core| &core.router));
        write_families(out, cores.clone().map(|core| &core.router_counters));
        node::write_objects_by_type(out, &self.types, cores.clone());
        node::write_per_core(out, cores.clone());
        write_families(out, cores.clone().map(|core| &core.cluster));
        write_families(out, cores.map(|core| &core.runtime));
        write_families(out, std::iter::once(&*self.admin));
        let store = self.store.iter();
        write_families(out, store.clone().map(|store| store.stats()));
        self::store::write_store_errors(out, store.clone());
        write_family_list(out, STORE_QUEUE_FAMILIES, store);
        write_family_list(out, MESH_FAMILIES, self.mesh.iter().map(|mesh| &**mesh));
        write_family_list(
            out,
            runtime::REGISTERED_FILES_FAMILIES,
            std::iter::once(&()),
        );
        write_family_list(out, BUILD_FAMILIES, std::iter::once(&()));
        process::write_process(out);
    }
}

/// A scrape of a node with the built-in routes is about 67 KB (41 buckets
/// per latency histogram, 11 answer codes per route); the buffer starts
/// above it so it rarely grows.
const RENDER_CAPACITY: usize = 128 * 1024;

#[cfg(test)]
mod tests;
