//! What membership costs the store, and how fast it finds a stopped node:
//! a simulation that drives the real membership state machines
//! (`routerd::cluster::membership::Membership`, default timers) against the
//! in-memory membership table (`routerd::store::MemberTable`), which counts
//! every row it returns and writes (the table version row included).
//!
//! For each cluster size: the nodes start, spread over one heartbeat
//! interval, and go `up`; once every node has listed every other, the
//! steady state runs for `STEADY_SECONDS` and its row reads and writes per
//! second are printed; then `DETECTIONS` nodes are stopped one after the
//! other (a crash: no more ticks), each at a random point of its heartbeat
//! cycle, and the time from the stop until another node's declaration of
//! it applied is printed (min, mean, max), with the rows every node listed
//! because of that one change. Time is simulated (every store operation
//! answers at once), so the figures count work and are the same on a
//! loaded machine; only the run time is not.
//!
//! Run: `cargo run --release -p bench --bin membership_cost -- [SIZES]
//! [STEADY_SECONDS] [DETECTIONS]`, e.g. `-- 10,100,1000 30 5` (the
//! default).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use routerd::cluster::membership::{Action, Advertisement, Event, Membership, WATCHED_PER_NODE};
use routerd::config::ClusterConfig;
use routerd::store::{MemberState, MemberTable, NodeId, RowCounts};

/// One simulated cluster: the machines, the table, and each node's next
/// tick on one clock.
struct Cluster {
    config: ClusterConfig,
    table: MemberTable,
    nodes: BTreeMap<u64, Membership>,
    ticks: BinaryHeap<Reverse<(u64, u64)>>,
    now_ms: u64,
    /// Rows returned to listings (the rest of the reads are polls).
    listed_rows: u64,
    /// Deterministic draws (xorshift64).
    seed: u64,
}

impl Cluster {
    fn new(size: u64) -> Cluster {
        let config = ClusterConfig::default();
        let mut cluster = Cluster {
            config,
            table: MemberTable::default(),
            nodes: BTreeMap::new(),
            ticks: BinaryHeap::new(),
            now_ms: 0,
            listed_rows: 0,
            seed: 0x9E37_79B9_7F4A_7C15 ^ size,
        };
        let interval_ms = cluster.config.heartbeat_interval_ms;
        for id in 1..=size {
            let start_ms = cluster.draw(interval_ms);
            let membership = Membership::new(NodeId(id), &cluster.config, advertisement(id));
            cluster.nodes.insert(id, membership);
            cluster.ticks.push(Reverse((start_ms, id)));
        }
        cluster
    }

    fn draw(&mut self, below: u64) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed % below.max(1)
    }

    /// Runs every tick due up to `until_ms`; returns the node ids declared
    /// down meanwhile, with when.
    fn run_until(&mut self, until_ms: u64) -> Vec<(u64, u64)> {
        let mut declared = Vec::new();
        while let Some(Reverse((at_ms, id))) = self.ticks.peek().copied() {
            if at_ms > until_ms {
                break;
            }
            self.ticks.pop();
            self.now_ms = at_ms;
            let Some(mut membership) = self.nodes.remove(&id) else {
                // Stopped: no more ticks.
                continue;
            };
            for event in self.tick(&mut membership) {
                if let Event::Member { row } = event {
                    if row.state == MemberState::Down {
                        declared.push((row.node_id.0, at_ms));
                    }
                }
            }
            let next_ms = at_ms + membership.tick_ms();
            self.nodes.insert(id, membership);
            self.ticks.push(Reverse((next_ms, id)));
        }
        self.now_ms = until_ms;
        declared
    }

    /// One tick of one node, its store operations answered at once.
    fn tick(&mut self, m: &mut Membership) -> Vec<Event> {
        let now = self.now_ms;
        m.on_tick(now);
        let mut events = Vec::new();
        loop {
            let actions = m.take_actions();
            events.extend(m.take_events());
            if actions.is_empty() {
                return events;
            }
            for action in actions {
                match action {
                    Action::Poll { nodes } => m.on_polled(now, self.table.poll(&nodes)),
                    Action::List { since, after } => {
                        let page = self.table.list_page(since, after);
                        self.listed_rows += (page.rows.len() + page.deleted.len()) as u64;
                        m.on_listed(now, page)
                    }
                    Action::Write { tag, write } => {
                        let outcome = self.table.write(&write);
                        m.on_written(now, tag, &write, Ok(outcome))
                    }
                    Action::Delete { node, version } => {
                        let outcome = self.table.delete(node, version);
                        m.on_deleted(now, node, Ok(outcome))
                    }
                }
            }
        }
    }

    /// Whether every running node lists every other running node.
    fn settled(&self) -> bool {
        let running = self.nodes.len();
        self.nodes.values().all(|m| {
            m.has_listed() && m.members().filter(|row| !row.state.is_ended()).count() + 1 == running
        })
    }
}

/// What a node of `cores` cores advertises: realistic row sizes.
fn advertisement(id: u64) -> Advertisement {
    Advertisement {
        gateway: format!("10.0.{}.{}:7400", id / 250, id % 250),
        admin: format!("10.0.{}.{}:9400", id / 250, id % 250),
        cluster: (0..4)
            .map(|core| format!("10.0.{}.{}:{}", id / 250, id % 250, 7600 + core))
            .collect(),
        core_count: 4,
        actors: Vec::new(),
    }
}

struct Figures {
    size: u64,
    reads_per_sec: f64,
    writes_per_sec: f64,
    detections_ms: Vec<u64>,
    listed_per_change: f64,
    run_seconds: f64,
}

fn measure(size: u64, steady_seconds: u64, detections: usize) -> Figures {
    let started = std::time::Instant::now();
    let mut cluster = Cluster::new(size);
    let interval_ms = cluster.config.heartbeat_interval_ms;
    cluster.run_until(interval_ms + 1);
    for m in cluster.nodes.values_mut() {
        m.set_state(interval_ms + 1, MemberState::Up);
    }
    let mut settle_ms = interval_ms + 1;
    while !cluster.settled() {
        settle_ms += interval_ms;
        cluster.run_until(settle_ms);
        assert!(settle_ms < 120_000, "{size} nodes did not settle");
    }
    // Past every join's listing: from here on nothing changes.
    cluster.run_until(settle_ms + 2 * interval_ms);
    let before: RowCounts = cluster.table.counts();
    let from_ms = cluster.now_ms;
    cluster.run_until(from_ms + steady_seconds * 1000);
    let after = cluster.table.counts();
    let seconds = steady_seconds as f64;
    let reads_per_sec = (after.rows_read - before.rows_read) as f64 / seconds;
    let writes_per_sec = (after.rows_written - before.rows_written) as f64 / seconds;
    let down_after_ms = cluster.config.down_after_ms;
    let mut detections_ms = Vec::new();
    let mut listed = Vec::new();
    for round in 0..detections {
        // Victims spread over the ids; each stops at a random point of its
        // own heartbeat cycle.
        let victim = 1 + (round as u64 * size / detections.max(1) as u64 + size / 7) % size;
        let offset = cluster.draw(interval_ms);
        let stop_ms = cluster.now_ms + offset;
        cluster.run_until(stop_ms);
        cluster.nodes.remove(&victim);
        let listed_before = cluster.listed_rows;
        let mut declared_at = None;
        let mut until = stop_ms;
        while declared_at.is_none() && until < stop_ms + 4 * down_after_ms {
            until += 50;
            declared_at = cluster
                .run_until(until)
                .into_iter()
                .find(|(node, _)| *node == victim)
                .map(|(_, at)| at);
        }
        let Some(at) = declared_at else {
            panic!("node {victim} of {size} was never declared down");
        };
        detections_ms.push(at - stop_ms);
        // Let every node list the declaration, then count what they read.
        cluster.run_until(at + 2 * interval_ms);
        listed.push(cluster.listed_rows - listed_before);
    }
    let listed_per_change = listed.iter().sum::<u64>() as f64 / listed.len().max(1) as f64;
    Figures {
        size,
        reads_per_sec,
        writes_per_sec,
        detections_ms,
        listed_per_change,
        run_seconds: started.elapsed().as_secs_f64(),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let sizes: Vec<u64> = args
        .next()
        .unwrap_or_else(|| "10,100,1000".to_string())
        .split(',')
        .map(|size| size.trim().parse().expect("a cluster size"))
        .collect();
    let steady_seconds: u64 = args.next().map_or(30, |s| s.parse().expect("seconds"));
    let detections: usize = args.next().map_or(5, |s| s.parse().expect("detections"));
    let config = ClusterConfig::default();
    println!(
        "membership cost: the real membership machines against the in-memory table, simulated \
         time; heartbeat_interval_ms {} (a poll every {} ms), fence_after_ms {}, down_after_ms \
         {}, {} watched peers a node; steady state over {} s, {} stopped nodes a size",
        config.heartbeat_interval_ms,
        config.heartbeat_interval_ms / 2,
        config.fence_after_ms,
        config.down_after_ms,
        WATCHED_PER_NODE,
        steady_seconds,
        detections
    );
    println!(
        "{:>6} {:>13} {:>13} {:>15} {:>24} {:>17} {:>28}",
        "nodes",
        "row reads/s",
        "row writes/s",
        "reads/s a node",
        "listing all (before) /s",
        "rows listed/chg",
        "detection ms min/mean/max"
    );
    for size in sizes {
        let figures = measure(size, steady_seconds, detections);
        let mean = figures.detections_ms.iter().sum::<u64>() as f64
            / figures.detections_ms.len().max(1) as f64;
        // The previous design listed every row every half interval.
        let listing_all = 1000.0 / (config.heartbeat_interval_ms / 2) as f64
            * (figures.size * figures.size) as f64;
        println!(
            "{:>6} {:>13.0} {:>13.0} {:>15.1} {:>24.0} {:>17.0} {:>10}/{:>8.0}/{:>8}",
            figures.size,
            figures.reads_per_sec,
            figures.writes_per_sec,
            figures.reads_per_sec / figures.size as f64,
            listing_all,
            figures.listed_per_change,
            figures.detections_ms.iter().min().copied().unwrap_or(0),
            mean,
            figures.detections_ms.iter().max().copied().unwrap_or(0),
        );
        eprintln!(
            "  ({} nodes simulated in {:.1} s)",
            figures.size, figures.run_seconds
        );
    }
}
