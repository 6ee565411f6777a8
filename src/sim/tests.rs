//! Seeds of the simulator. `cargo test` runs 500; set `ROUTERD_SIM_SEEDS`
//! (and run the ignored test) for many more. A failure prints its seed, and
//! `run(seed, &SimConfig::default())` replays it exactly.

use super::{run, SimConfig, SimReport};

fn run_seeds(seeds: std::ops::Range<u64>, config: &SimConfig) -> SimReport {
    let mut failures = Vec::new();
    let mut total = SimReport::default();
    for seed in seeds {
        match run(seed, config) {
            Ok(report) => add(&mut total, &report),
            Err(error) => failures.push(error),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing seeds:\n{}",
        failures.len(),
        failures.join("\n")
    );
    total
}

fn add(total: &mut SimReport, report: &SimReport) {
    total.requests += report.requests;
    total.acked += report.acked;
    total.crashes += report.crashes;
    total.transfers += report.transfers;
    total.store_faults += report.store_faults;
    total.dropped_messages += report.dropped_messages;
    total.events += report.events;
    total.flushes += report.flushes;
    total.rooms.says_ok += report.rooms.says_ok;
    total.rooms.pushes += report.rooms.pushes;
    total.rooms.certain_non_members += report.rooms.certain_non_members;
    total.pauses += report.pauses;
    total.long_pauses += report.long_pauses;
    total.longer_leases += report.longer_leases;
    total.held_events += report.held_events;
    total.declarations += report.declarations;
    total.deletions += report.deletions;
    total.fences += report.fences;
    total.rejoins += report.rejoins;
    total.lapses += report.lapses;
    total.refused_starts += report.refused_starts;
    total.send_failures += report.send_failures;
    total.store_cuts += report.store_cuts;
    total.store_stalls += report.store_stalls;
    total.outside_writes += report.outside_writes;
    total.cas_conflicts += report.cas_conflicts;
    total.dead_owner_claims += report.dead_owner_claims;
    total.writes_checked += report.writes_checked;
    total.reads_checked += report.reads_checked;
}

/// The 500 seeds, and proof that they exercised every fault and every
/// check (a check that never has a case to look at proves nothing).
#[test]
fn five_hundred_seeds_with_faults() {
    let total = run_seeds(0..500, &SimConfig::default());
    eprintln!("{total:?}");
    // Most requests are acknowledged (49 % with these seeds): those a
    // refusing link met are answered UNAVAILABLE rather than sent to the
    // same node again, which looped on store reads until the link took them
    // (50 % acknowledged, three times the dropped messages).
    assert!(total.acked * 5 > total.requests * 2, "{total:?}");
    assert!(total.crashes > 100, "{total:?}");
    assert!(total.transfers > 500, "{total:?}");
    assert!(total.store_faults > 1_000, "{total:?}");
    assert!(total.dropped_messages > 100, "{total:?}");
    assert!(total.rooms.says_ok > 1_500, "{total:?}");
    assert!(total.rooms.pushes > 3_000, "{total:?}");
    assert!(total.rooms.certain_non_members > 400, "{total:?}");
    assert!(total.flushes > 5_000, "{total:?}");
    // The cluster's faults: pauses (many past down_after_ms and the lock),
    // with events held for the frozen process; members declared down,
    // fenced and rejoined inside the fault phase; links refusing sends;
    // nodes cut off from the store; outside writers making saves conflict.
    assert!(total.pauses > 500, "{total:?}");
    assert!(total.long_pauses > 200, "{total:?}");
    assert!(total.longer_leases > 200, "{total:?}");
    assert!(total.held_events > 5_000, "{total:?}");
    assert!(total.declarations > 500, "{total:?}");
    // Rows of nodes that stopped cleanly deleted after the (short)
    // retention, so later starts of those ids meet their tombstones.
    assert!(total.deletions > 20, "{total:?}");
    // About 480 a run of 500 (38,234 in seeds 10,000 to 50,000).
    assert!(total.fences > 400, "{total:?}");
    // (A store cut no longer ends in declarations: watchers count only
    // answered polls, so fewer fences lead to rejoins than before; nor do
    // the pauses a longer lease outlasts.)
    assert!(total.rejoins > 200, "{total:?}");
    assert!(total.send_failures > 5_000, "{total:?}");
    assert!(total.store_cuts > 200, "{total:?}");
    assert!(total.store_stalls > 200, "{total:?}");
    assert!(total.outside_writes > 300, "{total:?}");
    assert!(total.cas_conflicts > 500, "{total:?}");
    assert!(total.dead_owner_claims > 1_000, "{total:?}");
    assert!(total.writes_checked > 10_000, "{total:?}");
    assert!(total.reads_checked > 10_000, "{total:?}");
}

#[test]
fn fault_free_runs_acknowledge_everything() {
    let config = SimConfig {
        faults: false,
        ..SimConfig::default()
    };
    let total = run_seeds(1_000..1_050, &config);
    assert_eq!(total.fences, 0, "{total:?}");
    assert_eq!(total.declarations, 0, "{total:?}");
}

#[test]
fn a_seed_replays_exactly() {
    let config = SimConfig::default();
    let first = run(7, &config).map(|report| format!("{report:?}"));
    let second = run(7, &config).map(|report| format!("{report:?}"));
    assert_eq!(first, second);
}

#[test]
fn the_simulated_timers_keep_the_cluster_timing_rule() {
    let config = SimConfig::default();
    config.cluster.check_timing().expect("timing rule");
    // The fault phase outlasts the lock, and pauses reach past both it
    // and down_after_ms (clients.rs picks them up to lock + 2 x down).
    assert!(config.fault_phase_ms.0 > config.router.object_free_timeout_ms);
    assert!(config.router.object_free_timeout_ms > config.cluster.down_after_ms);
}

#[test]
#[ignore = "long: ROUTERD_SIM_SEEDS=N cargo test -p routerd --lib many_seeds -- --ignored"]
fn many_seeds() {
    let count = std::env::var("ROUTERD_SIM_SEEDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000u64);
    let total = run_seeds(10_000..10_000 + count, &SimConfig::default());
    eprintln!("{total:?}");
}

#[test]
#[ignore = "debugging aid: ROUTERD_SIM_SEED=N"]
fn one_seed() {
    let seed = std::env::var("ROUTERD_SIM_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if let Err(error) = run(seed, &SimConfig::default()) {
        panic!("{error}");
    }
}
