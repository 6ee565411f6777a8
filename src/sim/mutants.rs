//! The mutation harness: known bugs put into the router one at a time
//! (`router::mutant`), each run over the same seeds, counting the failing
//! seeds and which invariant caught each. Then, for every invariant the
//! cluster added, a bug it catches on its own (the invariants that would
//! fire first switched off): a check that cannot fail proves nothing.
//!
//! By hand, in release mode for speed:
//! `cargo test --release -p routerd --lib mutation_table -- --ignored --nocapture`
//! (`ROUTERD_SIM_MUTANT_SEEDS=N` seeds per bug, 500 by default).

use std::collections::{BTreeMap, BTreeSet};

use super::check::Invariant;
use super::world::{run_checked, SimConfig};
use crate::router::mutant::{self, Mutant};

/// What one bug did over the seeds.
struct Outcome {
    seeds: u64,
    failing: u64,
    /// Failing seeds by the invariant their failure names.
    caught_by: BTreeMap<&'static str, u64>,
    /// One failure message, to show what the check printed.
    example: Option<String>,
}

fn run_mutant(
    mutant: Option<Mutant>,
    seeds: std::ops::Range<u64>,
    disabled: &BTreeSet<Invariant>,
) -> Outcome {
    let _guard = mutant::put_in(mutant);
    let config = SimConfig::default();
    let mut outcome = Outcome {
        seeds: seeds.end - seeds.start,
        failing: 0,
        caught_by: BTreeMap::new(),
        example: None,
    };
    for seed in seeds {
        let Err(error) = run_checked(seed, &config, disabled) else {
            continue;
        };
        outcome.failing += 1;
        let name = Invariant::of_failure(&error).map_or("(unnamed)", Invariant::name);
        *outcome.caught_by.entry(name).or_default() += 1;
        if outcome.example.is_none() {
            outcome.example = Some(error.chars().take(300).collect());
        }
    }
    outcome
}

fn caught_by(outcome: &Outcome) -> String {
    let mut by: Vec<(&str, u64)> = outcome.caught_by.iter().map(|(n, c)| (*n, *c)).collect();
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by.iter()
        .map(|(name, count)| format!("{name} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every new invariant with a bug it catches alone: the bug, and the
/// invariants switched off because they would catch it first.
fn demonstrations() -> Vec<(Invariant, Mutant, Vec<Invariant>)> {
    use Invariant as I;
    vec![
        (I::ClaimOfLiveLock, Mutant::ClaimFromLiveOwner, vec![]),
        (I::RouteVersionOwner, Mutant::ClaimKeepsRouteVersion, vec![]),
        (I::StaleWritable, Mutant::ConflictKeepsWritable, vec![]),
        (I::RequestUnanswered, Mutant::PendingDropped, vec![]),
        (
            I::TwoWriters,
            Mutant::ClaimFromLiveOwner,
            vec![I::ClaimOfLiveLock],
        ),
        (I::ReadBelowAcked, Mutant::AnswerOnSubmit, vec![]),
        (
            I::FencedWrite,
            Mutant::LeaseIgnored,
            vec![I::ClaimOfLiveLock],
        ),
        (
            I::WritableWithoutAppliedWrite,
            Mutant::IndeterminateAsApplied,
            vec![],
        ),
        (I::WritableNotStoreOwner, Mutant::RemoveKeepsObject, vec![]),
        (I::OwnCopyDropped, Mutant::UnknownWriteOneSlot, vec![]),
        (
            I::CounterSum,
            Mutant::AnswerOnSubmit,
            vec![I::ReadBelowAcked],
        ),
        (I::Membership, Mutant::DeclareMovedRow, vec![]),
        (I::Membership, Mutant::RejoinReusesIncarnation, vec![]),
    ]
}

/// Membership's planted bugs, each caught by membership's own check
/// (`Membership::check`, the `membership` invariant) within a few seeds:
/// the short form of the table's rows for them, run with every test.
#[test]
fn membership_mutants_are_caught_by_its_check() {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let none = BTreeSet::new();
    let outcomes: Vec<(Mutant, Outcome)> =
        [Mutant::DeclareMovedRow, Mutant::RejoinReusesIncarnation]
            .into_iter()
            .map(|mutant| (mutant, run_mutant(Some(mutant), 0..20, &none)))
            .collect();
    std::panic::set_hook(hook);
    for (mutant, outcome) in outcomes {
        let caught = outcome
            .caught_by
            .get(Invariant::Membership.name())
            .copied()
            .unwrap_or(0);
        assert!(
            caught > 0,
            "{mutant:?}: {}/{} seeds failing, by {}",
            outcome.failing,
            outcome.seeds,
            caught_by(&outcome)
        );
    }
}

#[test]
#[ignore = "long, by hand: cargo test --release -p routerd --lib mutation_table -- --ignored --nocapture"]
fn mutation_table() {
    let count = std::env::var("ROUTERD_SIM_MUTANT_SEEDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(500u64);
    let seeds = 0..count;
    // `ROUTERD_SIM_MUTANT=Name` runs that bug alone.
    let only = std::env::var("ROUTERD_SIM_MUTANT").ok();
    let chosen = |mutant: &Mutant| {
        only.as_ref()
            .is_none_or(|name| *name == format!("{mutant:?}"))
    };
    // A broken router panics often; the seed loop reports each panic with
    // its seed, so the default hook's printing is noise here.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let none = BTreeSet::new();
    let clean = run_mutant(None, seeds.clone(), &none);
    let mut table = vec![format!(
        "| router | seeds failing | caught by |\n|---|---|---|\n| as written | {}/{} | {} |",
        clean.failing,
        clean.seeds,
        caught_by(&clean)
    )];
    let mut weak = Vec::new();
    for mutant in Mutant::ALL.into_iter().filter(chosen) {
        let outcome = run_mutant(Some(mutant), seeds.clone(), &none);
        table.push(format!(
            "| {mutant:?} | {}/{} | {} |",
            outcome.failing,
            outcome.seeds,
            caught_by(&outcome)
        ));
        let named: u64 = outcome
            .caught_by
            .iter()
            .filter(|(name, _)| ![Invariant::Calm.name(), Invariant::Panic.name()].contains(name))
            .map(|(_, count)| count)
            .sum();
        if named * 20 < outcome.seeds {
            weak.push(mutant);
        }
        if let Some(example) = outcome.example {
            eprintln!("{mutant:?}: {example}");
        }
    }
    table.push(String::new());
    table.push(
        "| invariant | caught alone | bug | switched off | all failures |\n|---|---|---|---|---|"
            .into(),
    );
    let mut silent = Vec::new();
    for (invariant, mutant, off) in demonstrations().into_iter().filter(|d| chosen(&d.1)) {
        let disabled: BTreeSet<Invariant> = off.iter().copied().collect();
        let outcome = run_mutant(Some(mutant), seeds.clone(), &disabled);
        let alone = outcome
            .caught_by
            .get(invariant.name())
            .copied()
            .unwrap_or(0);
        let off: Vec<&str> = off.iter().map(|i| i.name()).collect();
        table.push(format!(
            "| {} | {alone}/{} | {mutant:?} | {} | {} |",
            invariant.name(),
            outcome.seeds,
            off.join(", "),
            caught_by(&outcome)
        ));
        if alone == 0 {
            silent.push(invariant);
        }
    }
    std::panic::set_hook(hook);
    eprintln!("{}", table.join("\n"));
    assert_eq!(clean.failing, 0, "the router as written fails");
    assert!(
        weak.is_empty(),
        "bugs caught by a named invariant in under 1 seed of 20: {weak:?}"
    );
    assert!(
        silent.is_empty(),
        "invariants that caught nothing: {silent:?}"
    );
}
