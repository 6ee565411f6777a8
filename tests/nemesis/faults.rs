//! The nemesis: a schedule of faults drawn from a seed, and each fault's
//! injection and healing on the real processes. Every fault heals itself
//! before the next begins, so what is broken at any time is one thing.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::procs::{DOWN_AFTER_MS, FENCE_AFTER_MS};

/// What the run can do here, and what it was asked to do.
#[derive(Clone, Debug)]
pub struct Abilities {
    /// Nodes run in namespaces: partitions can be cut.
    pub partitions: bool,
    /// The store is a server of the run's own (PostgreSQL): it can be
    /// stopped, frozen, and cut from a node.
    pub store_server: bool,
    /// The kinds of fault asked for (`NEMESIS_FAULTS`), `None` for all. A
    /// name also stands for the kinds it prefixes: `freeze` for
    /// `freeze_short`, `freeze_mid` and `freeze_long`.
    pub kinds: Option<Vec<String>>,
}

/// Every kind of fault, as `NEMESIS_FAULTS` names them.
pub const KINDS: &[&str] = &[
    "kill",
    "freeze_short",
    "freeze_mid",
    "freeze_long",
    "cut_peers",
    "cut_pair",
    "cut_store",
    "store_stop",
    "store_freeze",
    "starve",
    "takeover",
];

impl Abilities {
    fn asked(&self, kind: &str) -> bool {
        self.kinds.as_ref().is_none_or(|kinds| {
            kinds
                .iter()
                .any(|asked| kind == asked || kind.starts_with(&format!("{asked}_")))
        })
    }
}

/// Draws tried for one fault before the plan ends: the kinds asked for
/// may be none this run can do.
const DRAWS_MAX: usize = 1000;

#[derive(Clone, Debug)]
pub enum Fault {
    /// `kill -9`, then a restart after `down_ms`.
    Kill { slot: usize, down_ms: u64 },
    /// `SIGSTOP` for `ms`, then `SIGCONT`.
    Freeze { slot: usize, ms: u64 },
    /// The node cut from every other node (not from the store or clients).
    CutPeers { slot: usize, ms: u64 },
    /// Two nodes cut from each other.
    CutPair { a: usize, b: usize, ms: u64 },
    /// The node cut from the store.
    CutStore { slot: usize, ms: u64 },
    /// The store stopped (`pg_ctl stop -m immediate`), then started.
    StoreStop { ms: u64 },
    /// Every store process `SIGSTOP`ped, then thawed.
    StoreFreeze { ms: u64 },
    /// A busy loop at nice -20 on the node's CPU.
    Starve { slot: usize, ms: u64 },
    /// A second process started with the node's id while the first is cut
    /// off (frozen, or cut from the store), then the first is let back.
    Takeover { slot: usize },
}

impl Fault {
    /// The fault's kind, one of `KINDS`.
    pub fn kind(&self) -> &'static str {
        match *self {
            Fault::Kill { .. } => "kill",
            Fault::Freeze { ms, .. } if ms < FENCE_AFTER_MS => "freeze_short",
            Fault::Freeze { ms, .. } if ms < DOWN_AFTER_MS => "freeze_mid",
            Fault::Freeze { .. } => "freeze_long",
            Fault::CutPeers { .. } => "cut_peers",
            Fault::CutPair { .. } => "cut_pair",
            Fault::CutStore { .. } => "cut_store",
            Fault::StoreStop { .. } => "store_stop",
            Fault::StoreFreeze { .. } => "store_freeze",
            Fault::Starve { .. } => "starve",
            Fault::Takeover { .. } => "takeover",
        }
    }

    /// How long the fault lasts, about (for planning).
    pub fn planned_ms(&self) -> u64 {
        match *self {
            Fault::Kill { down_ms, .. } => down_ms + DOWN_AFTER_MS + 500,
            Fault::Freeze { ms, .. }
            | Fault::CutPeers { ms, .. }
            | Fault::CutPair { ms, .. }
            | Fault::CutStore { ms, .. }
            | Fault::StoreStop { ms }
            | Fault::StoreFreeze { ms }
            | Fault::Starve { ms, .. } => ms,
            Fault::Takeover { .. } => 2 * DOWN_AFTER_MS + 5000,
        }
    }
}

/// How a pause compares with the membership timers.
fn freeze_class(ms: u64) -> &'static str {
    if ms < FENCE_AFTER_MS {
        "shorter than fence_after_ms"
    } else if ms < DOWN_AFTER_MS {
        "between fence_after_ms and down_after_ms"
    } else {
        "longer than down_after_ms"
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Fault::Kill { slot, down_ms } => {
                write!(f, "kill -9 node {}, restart after {down_ms} ms", slot + 1)
            }
            Fault::Freeze { slot, ms } => write!(
                f,
                "SIGSTOP node {} for {ms} ms ({})",
                slot + 1,
                freeze_class(ms)
            ),
            Fault::CutPeers { slot, ms } => {
                write!(f, "cut node {} from every other node for {ms} ms", slot + 1)
            }
            Fault::CutPair { a, b, ms } => {
                write!(f, "cut node {} from node {} for {ms} ms", a + 1, b + 1)
            }
            Fault::CutStore { slot, ms } => write!(
                f,
                "cut node {} from the store for {ms} ms ({})",
                slot + 1,
                freeze_class(ms)
            ),
            Fault::StoreStop { ms } => write!(f, "stop the store (immediate) for {ms} ms"),
            Fault::StoreFreeze { ms } => write!(f, "SIGSTOP the store for {ms} ms"),
            Fault::Starve { slot, ms } => {
                write!(f, "busy loop at nice -20 on node {}'s CPU for {ms} ms", slot + 1)
            }
            Fault::Takeover { slot } => write!(
                f,
                "same-id takeover of node {}: a second process with its id while the first is cut off",
                slot + 1
            ),
        }
    }
}

/// One planned fault: the quiet time before it, then the fault.
#[derive(Clone, Debug)]
pub struct Planned {
    pub gap_ms: u64,
    pub fault: Fault,
}

/// Quiet time before the first fault: every session logs in first.
const WARMUP_MS: u64 = 2000;

/// Quiet time between two faults, in milliseconds.
const GAP_MS: std::ops::RangeInclusive<u64> = 500..=2500;

/// Draws one fault.
fn draw(rng: &mut SmallRng, nodes: usize, can: &Abilities, takeover_done: bool) -> Option<Fault> {
    let slot = rng.random_range(0..nodes);
    for _ in 0..DRAWS_MAX {
        // Weights: pauses (the interval-persistence loss) most often.
        let fault = match rng.random_range(0..16) {
            0 => Fault::Freeze {
                slot,
                ms: rng.random_range(200..FENCE_AFTER_MS - 200),
            },
            1..=3 => Fault::Freeze {
                slot,
                ms: rng.random_range(FENCE_AFTER_MS + 200..DOWN_AFTER_MS - 200),
            },
            4 => Fault::Freeze {
                slot,
                ms: rng.random_range(DOWN_AFTER_MS + 500..DOWN_AFTER_MS + 2000),
            },
            5 | 6 => Fault::Kill {
                slot,
                down_ms: rng.random_range(0..2000),
            },
            7 if can.partitions => Fault::CutPeers {
                slot,
                ms: rng.random_range(1000..4000),
            },
            8 if can.partitions => {
                let other = (slot + rng.random_range(1..nodes)) % nodes;
                Fault::CutPair {
                    a: slot,
                    b: other,
                    ms: rng.random_range(1000..4000),
                }
            }
            9 | 10 if can.partitions && can.store_server => Fault::CutStore {
                slot,
                ms: rng.random_range(500..4000),
            },
            11 if can.store_server => Fault::StoreStop {
                ms: rng.random_range(1000..3000),
            },
            12 if can.store_server => Fault::StoreFreeze {
                ms: rng.random_range(500..2500),
            },
            13 | 14 => Fault::Starve {
                slot,
                ms: rng.random_range(1000..3000),
            },
            15 if !takeover_done => Fault::Takeover { slot },
            _ => continue,
        };
        if can.asked(fault.kind()) {
            return Some(fault);
        }
    }
    None
}

/// The faults of a run of `seconds` from `seed`. The last
/// `down_after_ms` of the run stay quiet.
pub fn plan(seed: u64, seconds: u64, nodes: usize, can: &Abilities) -> Vec<Planned> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let end_ms = seconds * 1000;
    let mut at_ms = WARMUP_MS;
    let mut gap_ms = WARMUP_MS;
    let mut takeover_done = false;
    let mut planned = Vec::new();
    loop {
        let Some(fault) = draw(&mut rng, nodes, can, takeover_done) else {
            return planned;
        };
        if at_ms + fault.planned_ms() + DOWN_AFTER_MS > end_ms {
            return planned;
        }
        takeover_done |= matches!(fault, Fault::Takeover { .. });
        at_ms += fault.planned_ms();
        planned.push(Planned { gap_ms, fault });
        gap_ms = rng.random_range(GAP_MS);
        at_ms += gap_ms;
    }
}

pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn a_plan_is_the_seed_s_and_keeps_to_what_was_asked() {
    let all = Abilities {
        partitions: true,
        store_server: true,
        kinds: None,
    };
    let text = |plan: &[Planned]| format!("{plan:?}");
    assert_eq!(text(&plan(42, 60, 3, &all)), text(&plan(42, 60, 3, &all)));
    assert_ne!(text(&plan(42, 60, 3, &all)), text(&plan(43, 60, 3, &all)));
    for seed in 0..20 {
        let planned = plan(seed, 60, 3, &all);
        assert!(!planned.is_empty());
        let total: u64 = planned
            .iter()
            .map(|p| p.gap_ms + p.fault.planned_ms())
            .sum();
        assert!(total + DOWN_AFTER_MS <= 60_000, "seed {seed}: {total} ms");
        let takeovers = planned
            .iter()
            .filter(|p| p.fault.kind() == "takeover")
            .count();
        assert!(takeovers <= 1, "seed {seed}: {takeovers} takeovers");
    }
    // Without namespaces or a store server, none of their faults.
    let bare = Abilities {
        partitions: false,
        store_server: false,
        kinds: None,
    };
    for seed in 0..20 {
        for planned in plan(seed, 60, 3, &bare) {
            assert!(
                !planned.fault.kind().starts_with("cut"),
                "{}",
                planned.fault
            );
            assert!(
                !planned.fault.kind().starts_with("store"),
                "{}",
                planned.fault
            );
        }
    }
    // Only what NEMESIS_FAULTS names; nothing when it names what cannot be.
    let mid = Abilities {
        kinds: Some(vec!["freeze_mid".into()]),
        ..bare.clone()
    };
    let planned = plan(7, 60, 3, &mid);
    assert!(!planned.is_empty());
    assert!(planned.iter().all(|p| p.fault.kind() == "freeze_mid"));
    let impossible = Abilities {
        kinds: Some(vec!["store".into()]),
        ..bare
    };
    assert!(plan(7, 60, 3, &impossible).is_empty());
}
