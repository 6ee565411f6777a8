//! Catalog lookup cost: the per-core snapshot view against the linear scan
//! (the catalog design's fallback path, docs/origins.md) and an
//! `RwLock<HashMap>`, plus the rebuild cost, at 50 and 500 remote actors with
//! 20 msgIds each.
//!
//! Run: `cargo bench -p bench --bench catalog`. Before criterion runs, a
//! manual timing loop measures every variant in the same process and prints
//! the ratios ("view vs linear scan: NNx"); a counting global allocator shows
//! (and asserts) that view lookups allocate nothing.

use std::hint::black_box;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use routerd::catalog::{
    lookup_linear_scan, ActorConfig, ActorEvents, Catalog, CoreCatalog, Snapshot,
};

#[global_allocator]
static GLOBAL: bench::CountingAlloc = bench::CountingAlloc;

const MSG_IDS_PER_ACTOR: usize = 20;
/// Actors per actor type: each msgId has this many candidates at any size.
const ACTORS_PER_TYPE: usize = 10;
const NODES: u64 = 10;

/// The same remote actors in every form the variants need.
struct Fixture {
    label: String,
    configs: Vec<ActorConfig>,
    msg_ids: Vec<u32>,
    catalog: Arc<Catalog>,
    rwlock: RwLock<hashbrown::HashMap<u32, Vec<ActorConfig>, ahash::RandomState>>,
}

/// `actors` actors on 10 nodes; actor `i` has type `i % (actors / 10)` and
/// supports that type's 20 msgIds, so each msgId has 10 candidates.
fn fixture(actors: usize) -> Fixture {
    let types = actors / ACTORS_PER_TYPE;
    let configs: Vec<ActorConfig> = (0..actors)
        .map(|i| {
            let actor_type = (i % types) as u32;
            let first = actor_type * MSG_IDS_PER_ACTOR as u32;
            ActorConfig {
                actor_id: i as u64,
                node_id: i as u64 % NODES,
                actor_type,
                shard: 0,
                supported_msg_ids: (first..first + MSG_IDS_PER_ACTOR as u32).collect(),
                weight: 1,
                address: format!("10.0.0.{}:7000", i as u64 % NODES).into(),
            }
        })
        .collect();
    let catalog = Arc::new(Catalog::new());
    for node in 0..NODES {
        let mine = configs
            .iter()
            .filter(|c| c.node_id == node)
            .cloned()
            .collect();
        catalog.node_up(node, mine).expect("fixture within limits");
    }
    let mut map = hashbrown::HashMap::with_hasher(ahash::RandomState::new());
    for config in &configs {
        for &msg_id in config.supported_msg_ids.iter() {
            map.entry(msg_id)
                .or_insert_with(Vec::new)
                .push(config.clone());
        }
    }
    Fixture {
        label: format!("{actors}x{MSG_IDS_PER_ACTOR}"),
        msg_ids: lookup_sequence((types * MSG_IDS_PER_ACTOR) as u32),
        configs,
        catalog,
        rwlock: RwLock::new(map),
    }
}

/// Every msgId in `0..distinct`, repeated up to a power-of-two length, so a
/// loop picks the next one with a mask: a `%` by a run-time length costs a
/// division, as much as the view lookup itself, and would blur the ratios.
fn lookup_sequence(distinct: u32) -> Vec<u32> {
    let len = (distinct as usize).next_power_of_two();
    (0..distinct).cycle().take(len).collect()
}

fn view_lookup(core: &mut CoreCatalog, msg_id: u32) -> usize {
    core.lookup_other_actor_configs_by_msg_id_view(msg_id).len()
}

fn linear_lookup<'a>(
    msg_id: u32,
    configs: &'a [ActorConfig],
    buf: &mut Vec<&'a ActorConfig>,
) -> usize {
    lookup_linear_scan(msg_id, configs, buf);
    buf.len()
}

fn rwlock_lookup(
    map: &RwLock<hashbrown::HashMap<u32, Vec<ActorConfig>, ahash::RandomState>>,
    msg_id: u32,
) -> usize {
    let guard = map
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard.get(&msg_id).map_or(0, Vec::len)
}

/// Nanoseconds per call of `op(i)`, timed over enough calls to fill ~150 ms.
fn ns_per_op(mut op: impl FnMut(usize) -> usize) -> f64 {
    let mut iterations = 1_000usize;
    loop {
        let start = Instant::now();
        let mut sink = 0usize;
        for i in 0..iterations {
            sink = sink.wrapping_add(op(i));
        }
        black_box(sink);
        let elapsed = start.elapsed();
        if elapsed >= Duration::from_millis(150) {
            return elapsed.as_nanos() as f64 / iterations as f64;
        }
        iterations *= 4;
    }
}

/// Allocations made by `calls` calls of `op(i)`.
fn allocations(calls: usize, mut op: impl FnMut(usize) -> usize) -> u64 {
    let before = bench::allocations();
    let mut sink = 0usize;
    for i in 0..calls {
        sink = sink.wrapping_add(op(i));
    }
    black_box(sink);
    bench::allocations() - before
}

fn manual_report(fixture: &Fixture) {
    let Fixture {
        label,
        configs,
        msg_ids,
        catalog,
        rwlock,
    } = fixture;
    let mask = msg_ids.len() - 1;
    let msg = |i: usize| msg_ids[i & mask];
    let mut core = CoreCatalog::new(catalog.clone());
    let mut buf = Vec::with_capacity(configs.len());
    // Warm: the first view lookup builds the snapshot for this version.
    assert_eq!(view_lookup(&mut core, msg(0)), ACTORS_PER_TYPE);
    assert_eq!(linear_lookup(msg(0), configs, &mut buf), ACTORS_PER_TYPE);
    assert_eq!(rwlock_lookup(rwlock, msg(0)), ACTORS_PER_TYPE);

    let view_allocs = allocations(1_000_000, |i| view_lookup(&mut core, msg(i)));
    let scan_allocs = allocations(10_000, |i| linear_lookup(msg(i), configs, &mut buf));
    let rwlock_allocs = allocations(1_000_000, |i| rwlock_lookup(rwlock, msg(i)));
    println!(
        "catalog {label}: allocations: view {view_allocs} per 1M lookups, \
         linear scan (warm buffer) {scan_allocs} per 10k, rwlock {rwlock_allocs} per 1M"
    );
    assert_eq!(view_allocs, 0, "the view lookup must not allocate");

    let view_ns = ns_per_op(|i| view_lookup(&mut core, msg(i)));
    let scan_ns = ns_per_op(|i| linear_lookup(msg(i), configs, &mut buf));
    let rwlock_ns = ns_per_op(|i| rwlock_lookup(rwlock, msg(i)));
    let rebuild_ns = ns_per_op(|_| Snapshot::build(1, configs).msg_id_count());
    println!(
        "catalog {label}: view {view_ns:.2} ns, linear scan {scan_ns:.1} ns, \
         rwlock {rwlock_ns:.2} ns, rebuild {:.1} us",
        rebuild_ns / 1000.0
    );
    println!(
        "catalog {label}: view vs linear scan: {:.0}x",
        scan_ns / view_ns
    );
    println!(
        "catalog {label}: view vs rwlock hashmap: {:.1}x",
        rwlock_ns / view_ns
    );
    println!(
        "catalog {label}: rebuild costs {:.0} view lookups",
        rebuild_ns / view_ns
    );
}

fn criterion_benches(c: &mut Criterion, fixtures: &[Fixture]) {
    let mut lookups = c.benchmark_group("catalog_lookup");
    for fixture in fixtures {
        let msg_ids = &fixture.msg_ids;
        let mask = msg_ids.len() - 1;
        let mut core = CoreCatalog::new(fixture.catalog.clone());
        let mut i = 0usize;
        lookups.bench_function(BenchmarkId::new("view", &fixture.label), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                view_lookup(&mut core, msg_ids[i & mask])
            })
        });
        let mut buf = Vec::with_capacity(fixture.configs.len());
        lookups.bench_function(BenchmarkId::new("linear_scan", &fixture.label), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                linear_lookup(msg_ids[i & mask], &fixture.configs, &mut buf)
            })
        });
        lookups.bench_function(BenchmarkId::new("rwlock_hashmap", &fixture.label), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                rwlock_lookup(&fixture.rwlock, msg_ids[i & mask])
            })
        });
    }
    lookups.finish();
    let mut rebuilds = c.benchmark_group("catalog_rebuild");
    for fixture in fixtures {
        rebuilds.bench_function(BenchmarkId::new("snapshot_build", &fixture.label), |b| {
            b.iter(|| Snapshot::build(1, &fixture.configs).msg_id_count())
        });
    }
    rebuilds.finish();
}

fn main() {
    let fixtures = [fixture(50), fixture(500)];
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then only criterion's quick one-pass test mode runs.
    if std::env::args().any(|arg| arg == "--bench") {
        for fixture in &fixtures {
            manual_report(fixture);
        }
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
        .configure_from_args();
    criterion_benches(&mut criterion, &fixtures);
    criterion.final_summary();
}
