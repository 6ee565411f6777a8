//! Conditional (CAS) writes per second on the SQLite store, with 1, 16 and
//! 256 concurrent writers, group commit on versus one transaction per
//! write, measured in the same run and printed as ratios.
//!
//! Writers are tasks on one glommio executor, as on a routerd core: each
//! owns one key and advances it by CAS (`CasEquals(v)` -> `Applied(v+1)`),
//! awaiting each answer before its next write.
//!
//! `cargo bench -p bench --bench store`; `ROUTERD_BENCH_STORE_SECS` sets
//! the measured seconds per case (default 1), `ROUTERD_BENCH_STORE_SYNC`
//! = `normal` measures `synchronous = NORMAL` instead of FULL.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};
use routerd::config::{SqliteSynchronous, StoreConfig};
use routerd::store::{
    open_sqlite, CasVersion, GroupCommit, NodeId, RecordWrite, RouteVersion, Store, WriteCondition,
    WriteOutcome,
};
use wire::ObjectKey;

const WRITER_COUNTS: [usize; 3] = [1, 16, 256];
/// A short warm-up before each measurement fills caches and the WAL.
const WARMUP: Duration = Duration::from_millis(200);

fn write(writer: usize, condition: WriteCondition, round: u64) -> RecordWrite {
    RecordWrite {
        key: ObjectKey::new(1, 0, writer as u64),
        condition,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(round),
        save_timepoint_ms: round,
        state: vec![7; 64],
    }
}

/// Runs `writers` CAS loops for `warmup + measure`; returns writes per
/// second during `measure`.
fn measure(store: &Store, writers: usize, measure: Duration) -> f64 {
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(512 << 10)
        .make()
        .expect("glommio executor");
    executor.run(async {
        let counted = Rc::new(Cell::new(0u64));
        let counting = Rc::new(Cell::new(false));
        let stop = Rc::new(Cell::new(false));
        let tasks: Vec<_> = (0..writers)
            .map(|writer| {
                let store = store.clone();
                let (counted, counting, stop) = (counted.clone(), counting.clone(), stop.clone());
                glommio::spawn_local(async move {
                    // Each case starts from a fresh file, so the key is new.
                    let mut cas = match store.write(write(writer, WriteCondition::Absent, 0)).await
                    {
                        Ok(WriteOutcome::Applied(version)) => version,
                        other => panic!("initial insert gave {other:?}"),
                    };
                    let mut round = 1;
                    while !stop.get() {
                        let condition = WriteCondition::CasEquals(cas);
                        match store.write(write(writer, condition, round)).await {
                            Ok(WriteOutcome::Applied(version)) => {
                                assert_eq!(version, CasVersion(cas.0 + 1));
                                cas = version;
                            }
                            other => panic!("CAS write gave {other:?}"),
                        }
                        round += 1;
                        if counting.get() {
                            counted.set(counted.get() + 1);
                        }
                    }
                })
            })
            .collect();
        glommio::timer::sleep(WARMUP).await;
        counting.set(true);
        let started = Instant::now();
        glommio::timer::sleep(measure).await;
        counting.set(false);
        let elapsed = started.elapsed();
        stop.set(true);
        for task in tasks {
            task.await;
        }
        counted.get() as f64 / elapsed.as_secs_f64()
    })
}

fn main() {
    // `cargo bench` passes `--bench`; accept and ignore harness flags.
    let secs: f64 = std::env::var("ROUTERD_BENCH_STORE_SECS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1.0);
    let synchronous = match std::env::var("ROUTERD_BENCH_STORE_SYNC").as_deref() {
        Ok("normal") => SqliteSynchronous::Normal,
        _ => SqliteSynchronous::Full,
    };
    // One transaction per write with 256 writers queues each write behind
    // 255 fsyncs: a long timeout keeps the baseline measuring throughput
    // instead of expiring requests.
    let config = StoreConfig {
        synchronous,
        request_timeout_ms: 120_000,
        ..StoreConfig::default()
    };
    println!(
        "store bench: SQLite CAS writes/s, synchronous = {synchronous:?}, {secs} s per case, \
         batch_max = {}",
        config.batch_max
    );
    println!(
        "{:>8} {:>16} {:>16} {:>8}",
        "writers", "group on", "group off", "ratio"
    );
    for writers in WRITER_COUNTS {
        let mut rates = [0.0f64; 2];
        for (slot, group_commit) in [GroupCommit::On, GroupCommit::Off].into_iter().enumerate() {
            let dir = tempfile::tempdir().expect("temp dir");
            let store = open_sqlite(&dir.path().join("bench.db"), &config, group_commit)
                .expect("open store");
            rates[slot] = measure(&store, writers, Duration::from_secs_f64(secs));
        }
        println!(
            "{writers:>8} {:>16.0} {:>16.0} {:>7.1}x",
            rates[0],
            rates[1],
            rates[0] / rates[1].max(f64::MIN_POSITIVE)
        );
    }
}
