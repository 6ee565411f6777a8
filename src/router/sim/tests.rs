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
}

/// The 500 seeds, and proof that they exercised the faults and the room
/// invariants (a check that never has a case to look at proves nothing).
#[test]
fn five_hundred_seeds_with_faults() {
    let total = run_seeds(0..500, &SimConfig::default());
    eprintln!("{total:?}");
    assert!(total.acked * 2 > total.requests, "{total:?}");
    assert!(total.crashes > 100, "{total:?}");
    assert!(total.transfers > 500, "{total:?}");
    assert!(total.store_faults > 1_000, "{total:?}");
    assert!(total.dropped_messages > 100, "{total:?}");
    assert!(total.rooms.says_ok > 1_500, "{total:?}");
    assert!(total.rooms.pushes > 3_000, "{total:?}");
    assert!(total.rooms.certain_non_members > 400, "{total:?}");
    assert!(total.flushes > 5_000, "{total:?}");
}

#[test]
fn fault_free_runs_acknowledge_everything() {
    let config = SimConfig {
        faults: false,
        ..SimConfig::default()
    };
    run_seeds(1_000..1_050, &config);
}

#[test]
fn a_seed_replays_exactly() {
    let config = SimConfig::default();
    let first = run(7, &config).map(|r| (r.requests, r.acked, r.crashes, r.transfers));
    let second = run(7, &config).map(|r| (r.requests, r.acked, r.crashes, r.transfers));
    assert_eq!(first, second);
}

#[test]
#[ignore = "long: ROUTERD_SIM_SEEDS=N cargo test -p routerd --lib many_seeds -- --ignored"]
fn many_seeds() {
    let count = std::env::var("ROUTERD_SIM_SEEDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000u64);
    run_seeds(10_000..10_000 + count, &SimConfig::default());
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
