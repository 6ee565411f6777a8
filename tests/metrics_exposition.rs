//! `/metrics` as Prometheus reads it: a scrape of a serving node parses
//! under a strict text-format parser (every family with HELP and TYPE,
//! histogram buckets cumulative with `+Inf` = count), keeps every name
//! docs/protocol.md lists, shows request and store latencies, and rendering it
//! allocates nothing beyond its output buffer.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use routerd::config::StoreBackend;
use routerd::store::{open_sqlite, GroupCommit};
use support::prometheus::{self, Exposition};
use support::{config, TestNode};
use wire::client::{route, FrameKind};

/// Counts the allocations of the thread that armed it.
struct CountingAllocator;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn count_one() {
    if ARMED.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged; counting touches only an atomic and a const-init
// thread local without a destructor, neither of which allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as received; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Every name docs/protocol.md's admin section lists.
const PROTOCOL_NAMES: [&str; 33] = [
    "routerd_gateway_sessions_accepted_total",
    "routerd_gateway_sessions_active",
    "routerd_gateway_ingress_rejected_total",
    "routerd_gateway_egress_rejected_total",
    "routerd_gateway_binds_total",
    "routerd_gateway_binds_epoch_expired_total",
    "routerd_gateway_kicks_total",
    "routerd_router_objects",
    "routerd_router_caches",
    "routerd_router_saves_total",
    "routerd_router_cas_conflicts_total",
    "routerd_router_forwards_total",
    "routerd_router_transfers_total",
    "routerd_build_info",
    "routerd_gateway_requests_total",
    "routerd_gateway_request_duration_seconds",
    "routerd_store_errors_total",
    "routerd_router_objects_by_type",
    "routerd_core_sessions",
    "routerd_core_objects",
    "routerd_core_pending_requests",
    "routerd_core_ring_ops_in_flight",
    "routerd_core_link_queued_frames",
    "routerd_cluster_peer_heartbeat_age_seconds",
    "routerd_cluster_peer_link_up",
    "routerd_cluster_peer_up",
    "routerd_cluster_fenced",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_cpu_seconds_total",
    "process_start_time_seconds",
];

fn scrape(node: &TestNode) -> Exposition {
    let response = node.metrics();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    prometheus::parse(body).unwrap_or_else(|error| panic!("{error}\n{body}"))
}

/// Scrapes until `name{labels}` reaches `at_least` (cores publish their
/// counts a moment after the client sees its answer).
fn wait_for(node: &TestNode, name: &str, labels: &[(&str, &str)], at_least: f64) -> Exposition {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let exposition = scrape(node);
        let value = exposition.value(name, labels).unwrap_or(0.0);
        if value >= at_least {
            return exposition;
        }
        assert!(Instant::now() < deadline, "{name}{labels:?} = {value}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_scrape_of_a_serving_node_is_strict_prometheus_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config();
    config.store.backend = StoreBackend::Sqlite;
    config.node.data_dir = dir.path().to_path_buf();
    let node = TestNode::start(config);
    let mut client = node.connect();
    client.login(42, 1);
    let incrs = 20;
    for seq in 0..incrs {
        let reply = client.call(route::PLAYER_INCR, 10 + seq, &1i64.to_le_bytes());
        assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
    }
    assert_eq!(
        client.call(route::SYS_PING, 99, b"x").kind,
        FrameKind::Response
    );
    let unknown = client.call(77, 100, &[]);
    assert_eq!(unknown.kind, FrameKind::Error);

    let incr = [("route", "player.incr")];
    let exposition = wait_for(
        &node,
        "routerd_gateway_request_duration_seconds_count",
        &incr,
        f64::from(incrs),
    );
    for name in PROTOCOL_NAMES {
        assert!(exposition.families.contains_key(name), "{name} is missing");
    }
    for (name, family) in &exposition.families {
        assert!(
            name.starts_with("routerd_") || name.starts_with("process_"),
            "{name}"
        );
        assert!(!family.help.trim().is_empty(), "{name}");
    }
    let family = &exposition.families["routerd_gateway_request_duration_seconds"];
    assert_eq!(family.kind, "histogram");
    // Every request of the session was answered, so each route's count is
    // what was sent; the unknown route never became a request.
    let count = |labels: &[(&str, &str)]| {
        exposition
            .value("routerd_gateway_request_duration_seconds_count", labels)
            .unwrap()
    };
    assert_eq!(count(&incr), f64::from(incrs));
    assert_eq!(count(&[("route", "sys.ping")]), 1.0);
    assert_eq!(count(&[("route", "auth.login")]), 1.0);
    assert_eq!(
        exposition.value(
            "routerd_gateway_ingress_rejected_total",
            &[("reason", "unknown_route")]
        ),
        Some(1.0)
    );
    // The incr path loaded and claimed the player through the store.
    for op in ["load", "write"] {
        let ops = exposition
            .value(
                "routerd_store_operation_duration_seconds_count",
                &[("op", op)],
            )
            .unwrap();
        assert!(ops >= 1.0, "store {op}: {ops}");
    }
    assert!(exposition.families["routerd_store_queue_depth"].kind == "gauge");
    // Answers by route and code: every request above was answered OK, and
    // the codes nothing answered are there at zero, so a rate starts now.
    let answers = |route: &str, code: &str| {
        exposition
            .value(
                "routerd_gateway_requests_total",
                &[("route", route), ("code", code)],
            )
            .unwrap_or_else(|| panic!("no requests_total for {route} {code}"))
    };
    assert_eq!(answers("player.incr", "OK"), f64::from(incrs));
    assert_eq!(answers("player.incr", "TIMEOUT"), 0.0);
    assert_eq!(answers("sys.ping", "OK"), 1.0);
    assert_eq!(answers("auth.login", "OK"), 1.0);
    assert_eq!(answers("auth.login", "OTHER"), 0.0);
    assert_eq!(
        exposition.families["routerd_gateway_requests_total"].kind,
        "counter"
    );
    // The latency buckets run from 1 us to 10 s; the incrs of a node in
    // this process took well under 10 ms, so some bucket below it holds
    // them all.
    let buckets: Vec<&str> = exposition.families["routerd_gateway_request_duration_seconds"]
        .samples
        .iter()
        .filter(|sample| sample.labels.get("route").map(String::as_str) == Some("player.incr"))
        .filter_map(|sample| sample.labels.get("le").map(String::as_str))
        .collect();
    assert_eq!(buckets.first(), Some(&"0.000001"));
    assert_eq!(buckets.len(), 41, "{buckets:?}");
    assert_eq!(buckets[buckets.len() - 2], "10");
    // The process, from /proc.
    for (name, kind) in [
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(exposition.families[name].kind, kind, "{name}");
        assert!(exposition.value(name, &[]).unwrap() > 0.0, "{name}");
    }
    assert!(
        exposition
            .value("routerd_router_requests_total", &[])
            .unwrap()
            >= f64::from(incrs)
    );
    assert_eq!(
        exposition.value(
            "routerd_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
}

#[test]
fn a_serving_node_exports_the_runtime_counters_and_its_registered_files_mode() {
    let node = TestNode::start(config());
    let mut client = node.connect();
    client.login(7, 1);
    assert_eq!(
        client.call(route::SYS_PING, 2, b"x").kind,
        FrameKind::Response
    );
    // Each core copies the runtime's counters a moment after it starts;
    // its buffer ring is never empty.
    let exposition = wait_for(&node, "routerd_runtime_recv_buffers", &[], 1.0);
    for (name, kind) in [
        ("routerd_runtime_recv_buffer_waits_total", "counter"),
        ("routerd_runtime_recv_buffer_spilled_total", "counter"),
        ("routerd_runtime_recv_buffer_held_max_total", "counter"),
        ("routerd_runtime_recv_buffers_lent", "gauge"),
        ("routerd_runtime_recv_buffers", "gauge"),
        ("routerd_runtime_ops_in_flight", "gauge"),
        ("routerd_runtime_registered_files_in_use", "gauge"),
        ("routerd_runtime_registered_files_mode", "gauge"),
    ] {
        let family = exposition
            .families
            .get(name)
            .unwrap_or_else(|| panic!("{name} is missing"));
        assert_eq!(family.kind, kind, "{name}");
    }
    // A served connection keeps a receive armed on its core's ring.
    assert!(
        exposition
            .value("routerd_runtime_ops_in_flight", &[])
            .unwrap()
            >= 1.0
    );
    // Exactly one mode is the node's, and it is the one the probe chose.
    let modes = ["registered", "descriptors_only", "unprobed"];
    let on: Vec<&str> = modes
        .into_iter()
        .filter(|mode| {
            exposition.value("routerd_runtime_registered_files_mode", &[("mode", mode)])
                == Some(1.0)
        })
        .collect();
    assert_eq!(on, [shards::registered_files_mode().name()]);
    for mode in modes.into_iter().filter(|mode| *mode != on[0]) {
        assert_eq!(
            exposition.value("routerd_runtime_registered_files_mode", &[("mode", mode)]),
            Some(0.0),
            "{mode}"
        );
    }
    // With the file table in use, the client's socket holds an index
    // (once its core has copied its counters again).
    if on[0] == "registered" {
        wait_for(&node, "routerd_runtime_registered_files_in_use", &[], 1.0);
    }
}

#[test]
fn objects_by_type_and_per_core_gauges_follow_what_the_node_holds() {
    let mut config = config();
    config.cores.count = 2;
    let node = TestNode::start(config);
    let mut clients: Vec<_> = (0..4u64)
        .map(|player| {
            let mut client = node.connect();
            client.login(100 + player, 1);
            let reply = client.call(route::PLAYER_INCR, 2, &1i64.to_le_bytes());
            assert_eq!(reply.kind, FrameKind::Response, "{reply:?}");
            client
        })
        .collect();
    // The router mirrors its gauges on a period.
    let exposition = wait_for(
        &node,
        "routerd_router_objects_by_type",
        &[("type", "player")],
        4.0,
    );
    assert_eq!(
        exposition.value("routerd_router_objects_by_type", &[("type", "room")]),
        Some(0.0)
    );
    let per_core = |name: &str| -> Vec<f64> {
        (0..2)
            .map(|core| {
                let core = core.to_string();
                exposition
                    .value(name, &[("core", core.as_str())])
                    .unwrap_or_else(|| panic!("{name} core {core}"))
            })
            .collect()
    };
    // Each core's share sums to the node's total.
    let objects = per_core("routerd_core_objects");
    assert_eq!(
        objects.iter().sum::<f64>(),
        exposition.value("routerd_router_objects", &[]).unwrap()
    );
    assert!(objects.iter().sum::<f64>() >= 4.0, "{objects:?}");
    let sessions = per_core("routerd_core_sessions");
    assert_eq!(sessions.iter().sum::<f64>(), 4.0, "{sessions:?}");
    assert_eq!(
        exposition.value("routerd_gateway_sessions_active", &[]),
        Some(4.0)
    );
    for name in [
        "routerd_core_pending_requests",
        "routerd_core_ring_ops_in_flight",
    ] {
        assert_eq!(per_core(name).len(), 2, "{name}");
    }
    assert_eq!(
        exposition.value("routerd_core_objects", &[("core", "2")]),
        None
    );
    clients.clear();
}

#[test]
fn the_parser_refuses_what_prometheus_would_misread() {
    let bad = [
        // no HELP
        "# TYPE a counter\na 1\n",
        // no TYPE
        "# HELP a x\na 1\n",
        // a sample of no family
        "# HELP a x\n# TYPE a counter\nb 1\n",
        // buckets not cumulative
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n\
         h_sum 1\nh_count 1\n",
        // +Inf differs from count
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n\
         h_sum 1\nh_count 3\n",
        // a split family
        "# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\na 1\nb 1\na{l=\"v\"} 2\n",
    ];
    for text in bad {
        assert!(prometheus::parse(text).is_err(), "{text}");
    }
    let good = "# HELP h x\n# TYPE h histogram\nh_bucket{r=\"a\",le=\"1\"} 1\n\
                h_bucket{r=\"a\",le=\"+Inf\"} 2\nh_sum{r=\"a\"} 3.5\nh_count{r=\"a\"} 2\n";
    prometheus::parse(good).unwrap();
}

#[test]
fn rendering_allocates_only_the_output_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    let store = open_sqlite(
        &dir.path().join("routerd.db"),
        &config.store,
        GroupCommit::On,
    )
    .unwrap();
    let mut metrics = routerd::testing::node_metrics(4);
    metrics.store = Some(std::sync::Arc::new(store.probe()));
    for (index, core) in metrics.cores.iter().enumerate() {
        core.gateway.sessions_accepted.add(index as u64);
        core.requests.record(3, Duration::from_micros(300));
    }
    let mut out = String::with_capacity(256 * 1024);
    ARMED.with(|armed| armed.set(true));
    metrics.render_into(&mut out);
    ARMED.with(|armed| armed.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
    prometheus::parse(&out).unwrap();
    // The counter sees allocations: an empty buffer must grow.
    let mut small = String::new();
    ARMED.with(|armed| armed.set(true));
    metrics.render_into(&mut small);
    ARMED.with(|armed| armed.set(false));
    assert!(ALLOCATIONS.load(Ordering::Relaxed) > 0);
    // The same scrape, but for the process's figures, which move between
    // two readings of /proc (CPU seconds, resident memory).
    let steady = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| !line.contains("process_"))
            .map(str::to_string)
            .collect()
    };
    assert!(steady(&small) == steady(&out), "the two renders differ");
    assert!(out.contains("\nprocess_open_fds "), "no process metrics");
    drop(store);
}
