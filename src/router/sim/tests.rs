//! Seeds of the simulator. `cargo test` runs 500; set `ROUTERD_SIM_SEEDS`
//! (and run the ignored test) for many more. A failure prints its seed, and
//! `run(seed, &SimConfig::default())` replays it exactly.

use super::{run, SimConfig};

fn run_seeds(seeds: std::ops::Range<u64>, config: &SimConfig) {
    let mut failures = Vec::new();
    for seed in seeds {
        if let Err(error) = run(seed, config) {
            failures.push(error);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing seeds:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn five_hundred_seeds_with_faults() {
    run_seeds(0..500, &SimConfig::default());
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

#[test]
fn faults_are_exercised() {
    let config = SimConfig::default();
    let mut total = super::SimReport::default();
    for seed in 0..50 {
        let report = run(seed, &config).expect("seed passes");
        total.requests += report.requests;
        total.acked += report.acked;
        total.crashes += report.crashes;
        total.transfers += report.transfers;
        total.store_faults += report.store_faults;
        total.dropped_messages += report.dropped_messages;
    }
    assert!(total.acked * 2 > total.requests, "{total:?}");
    assert!(total.crashes > 10, "{total:?}");
    assert!(total.transfers > 50, "{total:?}");
    assert!(total.store_faults > 100, "{total:?}");
    assert!(total.dropped_messages > 10, "{total:?}");
    eprintln!("{total:?}");
}
