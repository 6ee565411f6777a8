//! Conditional (CAS) writes per second on the SQLite and PostgreSQL
//! stores, with 1, 16 and 256 concurrent writers, group commit on versus
//! one request per transaction (SQLite) or per round trip (PostgreSQL),
//! measured in the same run and printed as ratios.
//!
//! Writers are tasks on one glommio executor, as on a routerd core: each
//! owns one key and advances it by CAS (`CasEquals(v)` -> `Applied(v+1)`),
//! awaiting each answer before its next write.
//!
//! `cargo bench -p bench --bench store`; `ROUTERD_BENCH_STORE_SECS` sets
//! the measured seconds per case (default 1), `ROUTERD_BENCH_STORE_SYNC`
//! = `normal` measures SQLite's `synchronous = NORMAL` instead of FULL,
//! `ROUTERD_BENCH_STORE` = `sqlite` or `postgres` runs one backend only.
//! PostgreSQL runs on `ROUTERD_POSTGRES_URL` when set, else on a throwaway
//! server of its own; `synchronous_commit` is on either way (the store sets
//! it on every connection). `ROUTERD_BENCH_PG_POOL` sets `store.pool_size`.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};
use routerd::config::{SqliteSynchronous, StoreBackend, StoreConfig};
use routerd::store::{
    open_postgres, open_sqlite, CasVersion, GroupCommit, Store, WriteCondition, WriteOutcome,
};
use routerd::testing::heartbeat_lane::route_write;
use routerd::testing::postgres_server::PgServer;
use wire::ObjectKey;

const WRITER_COUNTS: [usize; 3] = [1, 16, 256];
/// A short warm-up before each measurement fills caches and the WAL.
const WARMUP: Duration = Duration::from_millis(200);

/// Runs `writers` CAS loops for `warmup + measure` on keys `(1, zone,
/// id_base + writer)`, which must not exist yet; returns writes per second
/// during `measure`.
fn measure(store: &Store, writers: usize, measure: Duration, zone: u32, id_base: u64) -> f64 {
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
                let key = ObjectKey::new(1, zone, id_base + writer as u64);
                glommio::spawn_local(async move {
                    let mut cas = match store
                        .write(route_write(key, WriteCondition::Absent, 0))
                        .await
                    {
                        Ok(WriteOutcome::Applied(version)) => version,
                        other => panic!("initial insert gave {other:?}"),
                    };
                    let mut round = 1;
                    while !stop.get() {
                        let condition = WriteCondition::CasEquals(cas);
                        match store.write(route_write(key, condition, round)).await {
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
    let only = std::env::var("ROUTERD_BENCH_STORE").unwrap_or_default();
    if only.is_empty() || only == "sqlite" {
        sqlite(secs);
    }
    if only.is_empty() || only == "postgres" {
        postgres(secs);
    }
}

fn print_row(writers: usize, rates: [f64; 2]) {
    println!(
        "{writers:>8} {:>16.0} {:>16.0} {:>7.1}x",
        rates[0],
        rates[1],
        rates[0] / rates[1].max(f64::MIN_POSITIVE)
    );
}

fn sqlite(secs: f64) {
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
            rates[slot] = measure(&store, writers, Duration::from_secs_f64(secs), 0, 0);
        }
        print_row(writers, rates);
    }
}

fn postgres(secs: f64) {
    let (url, _server) = match std::env::var("ROUTERD_POSTGRES_URL") {
        Ok(url) => (url, None),
        Err(_) => match PgServer::start() {
            Ok(server) => {
                server
                    .psql("postgres", "CREATE DATABASE routerd_bench")
                    .expect("create the bench database");
                (server.url("routerd_bench"), Some(server))
            }
            Err(error) => {
                println!("store bench: PostgreSQL skipped: {error}");
                return;
            }
        },
    };
    let pool_size = std::env::var("ROUTERD_BENCH_PG_POOL")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(StoreConfig::default().pool_size);
    let config = StoreConfig {
        backend: StoreBackend::Postgres,
        url,
        pool_size,
        request_timeout_ms: 120_000,
        ..StoreConfig::default()
    };
    println!(
        "store bench: PostgreSQL CAS writes/s, synchronous_commit = on, {secs} s per case, \
         batch_max = {}, pool_size = {pool_size}",
        config.batch_max
    );
    println!(
        "{:>8} {:>16} {:>16} {:>8}",
        "writers", "batched", "1 per trip", "ratio"
    );
    // A persistent database keeps earlier runs' keys: start past them.
    let id_base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as u64)
        .unwrap_or(0)
        << 10;
    let mut zone = 0;
    for writers in WRITER_COUNTS {
        let mut rates = [0.0f64; 2];
        for (slot, group_commit) in [GroupCommit::On, GroupCommit::Off].into_iter().enumerate() {
            let store = open_postgres(&config, group_commit).expect("open postgres store");
            zone += 1;
            rates[slot] = measure(
                &store,
                writers,
                Duration::from_secs_f64(secs),
                zone,
                id_base,
            );
        }
        print_row(writers, rates);
    }
}
