//! The heartbeat-lane load, shared by the test that bounds it
//! (`tests/store_heartbeat_lane.rs`) and the benchmark that compares lane
//! layouts (`bench/src/bin/heartbeat_lane.rs`): [`WRITERS`] CAS writers
//! keep a store's object lane saturated while a heartbeat loop measures
//! membership writes, optionally with another session locking every
//! writer's row a third into the run.
//!
//! Writers are tasks on one tokio thread, as the tasks of a core: each owns
//! one key and advances it by CAS, awaiting each answer before its next
//! write. The heartbeat loop runs on the calling thread: a CAS on its member
//! row's version every [`Load::heartbeat_every`], the membership agent's
//! operation, only more often, for more samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use wire::ObjectKey;

use crate::ids::{NodeId, RouteVersion};
use crate::store::{
    MemberCondition, MemberOutcome, MemberRow, MemberState, MemberVersion, MemberWrite,
    RecordWrite, Store, WriteCondition, WriteOutcome,
};

/// Concurrent object writers: the load of a busy node's cores.
pub const WRITERS: usize = 256;

/// Runs one SQL text against the store's PostgreSQL database.
pub type Psql<'a> = &'a (dyn Fn(&str) -> Result<(), String> + Sync);

/// One run's shape.
pub struct Load<'a> {
    /// The zone of the writers' keys; the heartbeat row is node
    /// `1000 + zone`. Runs on one store use distinct zones, so each writes
    /// rows of its own.
    pub zone: u32,
    /// Writing before the heartbeats start, for the object queue to fill.
    pub warmup: Duration,
    /// How long heartbeats are measured (and object writes counted).
    pub measure: Duration,
    /// Between the end of one heartbeat and the next.
    pub heartbeat_every: Duration,
    /// A latency spike on the object rows: `psql` locks every writer's row
    /// for `spike_hold` a third into the measured time, as a stalled
    /// transaction of another node would (PostgreSQL only).
    pub spike: Option<(Psql<'a>, Duration)>,
}

/// What one run measured.
pub struct Measured {
    /// Every heartbeat's write latency, sorted, failed ones included.
    pub heartbeats: Vec<Duration>,
    /// Heartbeats answered other than applied (the loop read its row back
    /// and went on).
    pub heartbeats_failed: u64,
    /// Object writes completed while heartbeats were measured.
    pub object_writes: u64,
    /// Object writes not applied (the writer reloaded its key and went on).
    pub object_writes_failed: u64,
    /// `object_writes` per second of the measured time.
    pub object_writes_per_sec: f64,
    /// The deepest the store's object queue was at a heartbeat's start: a
    /// saturated lane, not an idle one.
    pub queue_depth_max: usize,
    /// Why the spike's SQL failed, if it did.
    pub spike_error: Option<String>,
}

impl Measured {
    /// The heartbeat latency at `fraction` (0.5 the median, 1.0 the
    /// longest), nearest rank.
    ///
    /// # Panics
    /// If nothing was measured.
    pub fn percentile(&self, fraction: f64) -> Duration {
        let sorted = &self.heartbeats;
        assert!(!sorted.is_empty(), "no heartbeat was measured");
        let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }
}

/// Runs `load` on `store` and returns what it measured.
pub fn measure(store: &Store, load: &Load<'_>) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writes_failed = Arc::new(AtomicU64::new(0));
    let writers = {
        let (store, stop, counting) = (store.clone(), stop.clone(), counting.clone());
        let (writes, writes_failed) = (writes.clone(), writes_failed.clone());
        let zone = load.zone;
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async move {
                let tasks: Vec<_> = (0..WRITERS as u64)
                    .map(|writer| {
                        let key = ObjectKey::new(1, zone, writer);
                        tokio::spawn(write_loop(
                            store.clone(),
                            key,
                            stop.clone(),
                            counting.clone(),
                            writes.clone(),
                            writes_failed.clone(),
                        ))
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("writer task");
                }
            });
        })
    };
    std::thread::sleep(load.warmup);
    let (beats, elapsed, spike_error) = std::thread::scope(|scope| {
        let spiker = load.spike.map(|(psql, hold)| {
            let at = load.measure / 3;
            let sql = spike_sql(load.zone, hold);
            scope.spawn(move || {
                std::thread::sleep(at);
                psql(&sql).err()
            })
        });
        counting.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let beats = heartbeat_loop(store, load);
        let elapsed = started.elapsed();
        counting.store(false, Ordering::Relaxed);
        let spike_error = spiker.and_then(|spiker| spiker.join().expect("spike thread"));
        (beats, elapsed, spike_error)
    });
    stop.store(true, Ordering::Relaxed);
    writers.join().expect("writers");
    let object_writes = writes.load(Ordering::Relaxed);
    Measured {
        heartbeats: beats.latencies,
        heartbeats_failed: beats.failed,
        object_writes,
        object_writes_failed: writes_failed.load(Ordering::Relaxed),
        object_writes_per_sec: object_writes as f64 / elapsed.as_secs_f64(),
        queue_depth_max: beats.queue_depth_max,
        spike_error,
    }
}

/// One writer: a CAS loop on `key` until `stop`.
async fn write_loop(
    store: Store,
    key: ObjectKey,
    stop: Arc<AtomicBool>,
    counting: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    writes_failed: Arc<AtomicU64>,
) {
    let first = route_write(key, WriteCondition::Absent, 0);
    let Ok(WriteOutcome::Applied(mut cas)) = store.write(first).await else {
        panic!("the first write of {key:?} was not applied");
    };
    let mut round = 1;
    while !stop.load(Ordering::Relaxed) {
        let write = route_write(key, WriteCondition::CasEquals(cas), round);
        match store.write(write).await {
            Ok(WriteOutcome::Applied(version)) => cas = version,
            // Timed out behind the spike, say: the record tells where the
            // key stands.
            _ => {
                writes_failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(Some(record)) = store.load(key).await {
                    cas = record.cas_version;
                }
            }
        }
        if counting.load(Ordering::Relaxed) {
            writes.fetch_add(1, Ordering::Relaxed);
        }
        round += 1;
    }
}

/// What the heartbeat loop saw.
struct Beats {
    /// Sorted.
    latencies: Vec<Duration>,
    failed: u64,
    queue_depth_max: usize,
}

fn heartbeat_loop(store: &Store, load: &Load<'_>) -> Beats {
    let probe = store.probe();
    let node = 1000 + u64::from(load.zone);
    let first = member(node, 0, MemberCondition::Absent);
    let mut version = match block_on(store.write_member(first)) {
        Ok(MemberOutcome::Applied(version)) => version,
        other => panic!("the first member write gave {other:?}"),
    };
    let (mut latencies, mut failed, mut queue_depth_max) = (Vec::new(), 0, 0);
    let started = Instant::now();
    let mut beat = 1;
    while started.elapsed() < load.measure {
        queue_depth_max = queue_depth_max.max(probe.queue_depth());
        let sent = Instant::now();
        let condition = MemberCondition::VersionEquals(version);
        match block_on(store.write_member(member(node, beat, condition))) {
            Ok(MemberOutcome::Applied(next)) => version = next,
            // A timed-out heartbeat: its row may have moved; read it back
            // so the loop goes on, and count it.
            _ => {
                failed += 1;
                let rows = block_on(store.poll_members(vec![NodeId(node)]))
                    .map(|poll| poll.rows)
                    .unwrap_or_default();
                if let Some(row) = rows.iter().find(|row| row.node_id == NodeId(node)) {
                    version = row.version;
                }
            }
        }
        latencies.push(sent.elapsed());
        beat += 1;
        std::thread::sleep(load.heartbeat_every);
    }
    latencies.sort();
    Beats {
        latencies,
        failed,
        queue_depth_max,
    }
}

/// Locks every row of `zone` for `hold`, in the store's lock order (by
/// key), so that the spike waits for a batch or a batch for it, never both.
fn spike_sql(zone: u32, hold: Duration) -> String {
    format!(
        "BEGIN; SELECT count(*) FROM (SELECT 1 FROM routerd_routes WHERE zone_id = {zone} \
         ORDER BY type_id, zone_id, object_id FOR UPDATE) AS locked; \
         SELECT pg_sleep({}); COMMIT;",
        hold.as_secs_f64()
    )
}

/// A route write of round `round` for `key`, as node 1 writes it (a
/// 64-byte state): what the heartbeat-lane load and the store benchmark
/// advance by CAS.
pub fn route_write(key: ObjectKey, condition: WriteCondition, round: u64) -> RecordWrite {
    RecordWrite {
        key,
        condition,
        owner_node: NodeId(1),
        owner_incarnation: 1,
        route_version: RouteVersion(round),
        save_timepoint_ms: round,
        state: vec![7; 64],
    }
}

fn member(node: u64, heartbeat: u64, condition: MemberCondition) -> MemberWrite {
    MemberWrite {
        condition,
        row: MemberRow {
            node_id: NodeId(node),
            incarnation: 1,
            state: MemberState::Up,
            heartbeat,
            gateway: "127.0.0.1:1".to_string(),
            admin: "127.0.0.1:2".to_string(),
            cluster: Vec::new(),
            core_count: 1,
            actors: Vec::new(),
            timers: None,
            version: MemberVersion(0),
        },
    }
}
