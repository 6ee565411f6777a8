//! The nemesis: a schedule of faults drawn from a seed, and what each
//! fault is. A fault heals itself before the next begins; an operator call
//! (a transfer, a drain, a rebalance after a node joined) runs during
//! another fault, so what is broken at any time is one fault and maybe one
//! operator's call.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::procs::{Timers, DOWN_AFTER_MS, DRAIN_TIMEOUT_MS, FENCE_AFTER_MS};

/// One kind of fault, as `NEMESIS_FAULTS` names it.
pub struct FaultKind {
    pub name: &'static str,
    /// Drawn by a run that names no kinds (the schedule `cargo test` and
    /// CI run). A kind that still finds a known bug stays off here until
    /// the bug is fixed; `NEMESIS_FAULTS=all` (or its name) draws it.
    pub by_default: bool,
}

const fn kind(name: &'static str, by_default: bool) -> FaultKind {
    FaultKind { name, by_default }
}

/// Every kind of fault: the one list a schedule draws from.
pub const KINDS: &[FaultKind] = &[
    // Node processes.
    kind("kill", true),
    kind("freeze_short", true),
    kind("freeze_mid", true),
    kind("freeze_long", true),
    kind("freeze_busy", true),
    kind("starve", true),
    kind("takeover", true),
    kind("restart_cores", true),
    // The network between nodes, and between node and store.
    kind("cut_peers", true),
    kind("cut_pair", true),
    kind("cut_store", true),
    kind("store_reset", true),
    kind("store_delay", true),
    // The store server (PostgreSQL) and the disk (SQLite).
    kind("store_stop", true),
    kind("store_stop_long", true),
    kind("store_freeze_short", true),
    kind("store_freeze_mid", true),
    kind("store_freeze_long", true),
    kind("disk_full", true),
    // Operators' admin calls, each during another fault.
    kind("transfer", true),
    kind("drain", true),
    kind("join_rebalance", true),
];

/// What the run can do here, and what it was asked to do.
#[derive(Clone, Debug)]
pub struct Abilities {
    /// Nodes run in namespaces: partitions can be cut.
    pub partitions: bool,
    /// The store is a server of the run's own (PostgreSQL): it can be
    /// stopped, frozen, and its connections reset and delayed.
    pub store_server: bool,
    /// SQLite's file is on a small filesystem of the run's own.
    pub disk: bool,
    /// The machine has two CPUs or more: a node can restart with another
    /// core count.
    pub cpus: usize,
    /// Players of the run (a transfer moves some).
    pub players: u64,
    /// The run's timers, which the store's stalls are drawn around.
    pub timers: Timers,
    /// The kinds of fault asked for (`NEMESIS_FAULTS`), `None` for the
    /// default ones, `all` for every one. A name also stands for the kinds
    /// it prefixes: `freeze` for `freeze_short`, `freeze_mid`, ...
    pub kinds: Option<Vec<String>>,
}

fn by_default(kind: &str) -> bool {
    KINDS
        .iter()
        .any(|known| known.name == kind && known.by_default)
}

impl Abilities {
    /// Whether an operator's call may run during a fault of `kind`: one
    /// asked for, or one on by default.
    fn asked_during(&self, kind: &str) -> bool {
        by_default(kind) || self.asked(kind)
    }

    fn asked(&self, kind: &str) -> bool {
        match &self.kinds {
            None => by_default(kind),
            Some(kinds) => kinds.iter().any(|asked| {
                asked == "all" || kind == asked || kind.starts_with(&format!("{asked}_"))
            }),
        }
    }
}

/// True when `asked` names a kind (or is `all`, or prefixes kinds).
pub fn known(asked: &str) -> bool {
    asked == "all"
        || KINDS
            .iter()
            .any(|kind| kind.name == asked || kind.name.starts_with(&format!("{asked}_")))
}

/// Draws tried for one fault before the plan ends: the kinds asked for
/// may be none this run can do.
const DRAWS_MAX: usize = 1000;

/// Requests one pipelining burst writes at once (`freeze_busy`).
pub const BURST_REQUESTS: usize = 256;

/// An operator's admin call, made during another fault.
#[derive(Clone, Debug)]
pub enum Call {
    /// `POST /objects/player/{id}/transfer?to=N` for each player, sent to
    /// the node of slot `via`.
    Transfer {
        players: Vec<u64>,
        to: usize,
        via: usize,
    },
    /// `POST /drain` on the node; once it exits, it is started again.
    Drain { slot: usize },
    /// A node joins (the slot after the last), then `POST /rebalance` on
    /// the node of slot `via`.
    JoinRebalance { via: usize },
}

#[derive(Clone, Debug)]
pub enum Fault {
    /// `kill -9`, then a restart after `down_ms`.
    Kill { slot: usize, down_ms: u64 },
    /// `kill -9`, then a restart after `down_ms` with the other core
    /// count (1 and 2 alternate).
    RestartCores { slot: usize, down_ms: u64 },
    /// `SIGSTOP` for `ms`, then `SIGCONT`.
    Freeze { slot: usize, ms: u64 },
    /// `BURST_REQUESTS` pipelined increments written to the node, then
    /// `SIGSTOP` while it works through them, for `ms`.
    FreezeBusy { slot: usize, ms: u64 },
    /// The node cut from every other node (not from the store or clients).
    CutPeers { slot: usize, ms: u64 },
    /// Two nodes cut from each other.
    CutPair { a: usize, b: usize, ms: u64 },
    /// The node cut from the store.
    CutStore { slot: usize, ms: u64 },
    /// The node's store connections reset (TCP RST) every `every_ms`, for
    /// `ms`.
    StoreReset { slot: usize, every_ms: u64, ms: u64 },
    /// Every request the node sends the store held `delay_ms`, for `ms`.
    StoreDelay { slot: usize, delay_ms: u64, ms: u64 },
    /// The store stopped (`pg_ctl stop -m immediate`), then started.
    StoreStop { ms: u64 },
    /// The store server's postmaster and backends `SIGSTOP`ped, then
    /// thawed.
    StoreFreeze { ms: u64, timers: Timers },
    /// SQLite's filesystem filled (ENOSPC), then emptied.
    DiskFull { ms: u64 },
    /// A busy loop at nice -20 on the node's CPU.
    Starve { slot: usize, ms: u64 },
    /// A second process started with the node's id while the first is cut
    /// off (frozen, or cut from the store), then the first is let back.
    Takeover { slot: usize },
    /// An operator's call `after_ms` into another fault.
    Operator {
        call: Call,
        after_ms: u64,
        during: Box<Fault>,
    },
}

impl Fault {
    /// The fault's kind, one of `KINDS`.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::RestartCores { .. } => "restart_cores",
            Fault::Freeze { ms, .. } if *ms < FENCE_AFTER_MS => "freeze_short",
            Fault::Freeze { ms, .. } if *ms < DOWN_AFTER_MS => "freeze_mid",
            Fault::Freeze { .. } => "freeze_long",
            Fault::FreezeBusy { .. } => "freeze_busy",
            Fault::CutPeers { .. } => "cut_peers",
            Fault::CutPair { .. } => "cut_pair",
            Fault::CutStore { .. } => "cut_store",
            Fault::StoreReset { .. } => "store_reset",
            Fault::StoreDelay { .. } => "store_delay",
            Fault::StoreStop { ms } if *ms < DOWN_AFTER_MS => "store_stop",
            Fault::StoreStop { .. } => "store_stop_long",
            Fault::StoreFreeze { ms, .. } if *ms >= DOWN_AFTER_MS => "store_freeze_long",
            Fault::StoreFreeze { ms, timers } if *ms >= timers.store_timeout_ms => {
                "store_freeze_mid"
            }
            Fault::StoreFreeze { .. } => "store_freeze_short",
            Fault::DiskFull { .. } => "disk_full",
            Fault::Starve { .. } => "starve",
            Fault::Takeover { .. } => "takeover",
            Fault::Operator { call, .. } => match call {
                Call::Transfer { .. } => "transfer",
                Call::Drain { .. } => "drain",
                Call::JoinRebalance { .. } => "join_rebalance",
            },
        }
    }

    /// How long the fault lasts, about (for planning).
    pub fn planned_ms(&self) -> u64 {
        match self {
            Fault::Kill { down_ms, .. } | Fault::RestartCores { down_ms, .. } => {
                down_ms + DOWN_AFTER_MS + 500
            }
            Fault::Freeze { ms, .. }
            | Fault::CutPeers { ms, .. }
            | Fault::CutPair { ms, .. }
            | Fault::CutStore { ms, .. }
            | Fault::StoreReset { ms, .. }
            | Fault::StoreDelay { ms, .. }
            | Fault::StoreStop { ms }
            | Fault::StoreFreeze { ms, .. }
            | Fault::DiskFull { ms }
            | Fault::Starve { ms, .. } => *ms,
            Fault::FreezeBusy { ms, .. } => ms + 500,
            Fault::Takeover { .. } => 2 * DOWN_AFTER_MS + 5000,
            Fault::Operator { call, during, .. } => {
                let call_ms = match call {
                    Call::Transfer { .. } => 1000,
                    // The drain (at most its timeout), then the restart.
                    Call::Drain { .. } => DRAIN_TIMEOUT_MS,
                    // The join, then the rebalance's moves.
                    Call::JoinRebalance { .. } => 6000,
                };
                during.planned_ms() + call_ms
            }
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

/// How a store stall compares with each bound it may cross.
fn stall_class(ms: u64, timers: &Timers) -> String {
    let side = |bound: u64| if ms < bound { "<" } else { ">=" };
    format!(
        "{} store request_timeout_ms {}, {} object_save_interval_ms {}, {} down_after_ms {DOWN_AFTER_MS}",
        side(timers.store_timeout_ms),
        timers.store_timeout_ms,
        side(timers.save_interval_ms),
        timers.save_interval_ms,
        side(DOWN_AFTER_MS),
    )
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::Transfer { players, to, via } => write!(
                f,
                "transfer players {players:?} to node {} (asked of node {})",
                to + 1,
                via + 1
            ),
            Call::Drain { slot } => write!(f, "drain node {} (then start it again)", slot + 1),
            Call::JoinRebalance { via } => write!(
                f,
                "a node joins, then rebalance (asked of node {})",
                via + 1
            ),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill { slot, down_ms } => {
                write!(f, "kill -9 node {}, restart after {down_ms} ms", slot + 1)
            }
            Fault::RestartCores { slot, down_ms } => write!(
                f,
                "kill -9 node {}, restart after {down_ms} ms with another cores.count",
                slot + 1
            ),
            Fault::Freeze { slot, ms } => write!(
                f,
                "SIGSTOP node {} for {ms} ms ({})",
                slot + 1,
                freeze_class(*ms)
            ),
            Fault::FreezeBusy { slot, ms } => write!(
                f,
                "{BURST_REQUESTS} pipelined increments to node {}, SIGSTOP inside the turn for {ms} ms ({})",
                slot + 1,
                freeze_class(*ms)
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
                freeze_class(*ms)
            ),
            Fault::StoreReset { slot, every_ms, ms } => write!(
                f,
                "reset node {}'s store connections (TCP RST) every {every_ms} ms for {ms} ms",
                slot + 1
            ),
            Fault::StoreDelay { slot, delay_ms, ms } => write!(
                f,
                "delay node {}'s store requests by {delay_ms} ms for {ms} ms",
                slot + 1
            ),
            Fault::StoreStop { ms } => write!(
                f,
                "stop the store (immediate) for {ms} ms ({})",
                freeze_class(*ms)
            ),
            Fault::StoreFreeze { ms, timers } => write!(
                f,
                "SIGSTOP the store server (postmaster and backends) for {ms} ms ({})",
                stall_class(*ms, timers)
            ),
            Fault::DiskFull { ms } => {
                write!(f, "fill SQLite's filesystem (ENOSPC) for {ms} ms")
            }
            Fault::Starve { slot, ms } => {
                write!(f, "busy loop at nice -20 on node {}'s CPU for {ms} ms", slot + 1)
            }
            Fault::Takeover { slot } => write!(
                f,
                "same-id takeover of node {}: a second process with its id while the first is cut off",
                slot + 1
            ),
            Fault::Operator {
                call,
                after_ms,
                during,
            } => write!(f, "{call}, {after_ms} ms into: {during}"),
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

/// A stall of the store drawn around one of the bounds it may cross
/// (the store's request timeout, the save interval, `down_after_ms`):
/// shorter or longer, so each side of each bound is met.
fn stall_ms(rng: &mut SmallRng, timers: &Timers) -> u64 {
    let bounds = [
        timers.store_timeout_ms,
        timers.save_interval_ms,
        DOWN_AFTER_MS,
    ];
    let bound = bounds[rng.random_range(0..bounds.len())] as f64;
    let factor = if rng.random_bool(0.5) {
        rng.random_range(0.4..0.9)
    } else {
        rng.random_range(1.1..1.8)
    };
    ((bound * factor) as u64).clamp(100, 8000)
}

/// Draws one fault that is not an operator's call.
fn draw_plain(rng: &mut SmallRng, nodes: usize, can: &Abilities) -> Option<Fault> {
    let slot = rng.random_range(0..nodes);
    let fault = match rng.random_range(0..24) {
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
            ms: rng.random_range(500..DOWN_AFTER_MS - 200),
        },
        12 if can.store_server => Fault::StoreStop {
            ms: rng.random_range(DOWN_AFTER_MS + 500..DOWN_AFTER_MS + 3000),
        },
        13 | 14 if can.store_server => Fault::StoreFreeze {
            ms: stall_ms(rng, &can.timers),
            timers: can.timers,
        },
        15 if can.store_server => Fault::StoreReset {
            slot,
            every_ms: rng.random_range(100..1000),
            ms: rng.random_range(500..3000),
        },
        16 if can.store_server => Fault::StoreDelay {
            slot,
            delay_ms: stall_ms(rng, &can.timers).min(DOWN_AFTER_MS + 500),
            ms: rng.random_range(1000..4000),
        },
        17 if can.disk => Fault::DiskFull {
            ms: rng.random_range(300..4000),
        },
        18 | 19 => Fault::Starve {
            slot,
            ms: rng.random_range(1000..3000),
        },
        20 => Fault::FreezeBusy {
            slot,
            ms: rng.random_range(DOWN_AFTER_MS + 500..DOWN_AFTER_MS + 2000),
        },
        21 if can.cpus >= 2 => Fault::RestartCores {
            slot,
            down_ms: rng.random_range(0..1000),
        },
        22 | 23 => Fault::Takeover { slot },
        _ => return None,
    };
    Some(fault)
}

/// The faults an operator's call runs during: any asked for or on by
/// default that leaves the node the call is asked of running, other than
/// another takeover.
fn draw_during(rng: &mut SmallRng, nodes: usize, can: &Abilities, spared: usize) -> Option<Fault> {
    for _ in 0..DRAWS_MAX {
        let Some(fault) = draw_plain(rng, nodes, can) else {
            continue;
        };
        if !can.asked_during(fault.kind()) {
            continue;
        }
        let hits_spared = match &fault {
            Fault::Kill { slot, .. }
            | Fault::RestartCores { slot, .. }
            | Fault::Freeze { slot, .. }
            | Fault::FreezeBusy { slot, .. }
            | Fault::Takeover { slot } => *slot == spared,
            _ => false,
        };
        if !hits_spared && !matches!(fault, Fault::Takeover { .. }) {
            return Some(fault);
        }
    }
    None
}

/// Draws one operator's call and the fault it runs during.
fn draw_operator(rng: &mut SmallRng, nodes: usize, can: &Abilities, joined: bool) -> Option<Fault> {
    let via = rng.random_range(0..nodes);
    let call = match rng.random_range(0..4) {
        0 | 1 => {
            let count = rng.random_range(1..=3.min(can.players));
            let players = (0..count)
                .map(|_| rng.random_range(1..=can.players))
                .collect();
            Call::Transfer {
                players,
                to: rng.random_range(0..nodes),
                via,
            }
        }
        2 => Call::Drain { slot: via },
        _ if !joined => Call::JoinRebalance { via },
        _ => return None,
    };
    let during = draw_during(rng, nodes, can, via)?;
    let after_ms = rng.random_range(0..during.planned_ms().clamp(1, 1500));
    Some(Fault::Operator {
        call,
        after_ms,
        during: Box::new(during),
    })
}

/// Draws one fault. `takeover_done`, `joined`: a run makes one of each at
/// most.
fn draw(
    rng: &mut SmallRng,
    nodes: usize,
    can: &Abilities,
    takeover_done: bool,
    joined: bool,
) -> Option<Fault> {
    for _ in 0..DRAWS_MAX {
        // About one fault in five is an operator's call during another.
        let fault = if rng.random_range(0..5) == 0 {
            draw_operator(rng, nodes, can, joined)
        } else {
            draw_plain(rng, nodes, can)
        };
        let Some(fault) = fault else { continue };
        if takeover_done && matches!(fault, Fault::Takeover { .. }) {
            continue;
        }
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
    let (mut takeover_done, mut joined) = (false, false);
    let mut planned = Vec::new();
    loop {
        let Some(fault) = draw(&mut rng, nodes, can, takeover_done, joined) else {
            return planned;
        };
        if at_ms + fault.planned_ms() + DOWN_AFTER_MS > end_ms {
            return planned;
        }
        takeover_done |= matches!(fault, Fault::Takeover { .. });
        joined |= fault.kind() == "join_rebalance";
        at_ms += fault.planned_ms();
        planned.push(Planned { gap_ms, fault });
        gap_ms = rng.random_range(GAP_MS);
        at_ms += gap_ms;
    }
}

pub fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[cfg(test)]
fn abilities(partitions: bool, server: bool, kinds: Option<Vec<String>>) -> Abilities {
    Abilities {
        partitions,
        store_server: server,
        disk: !server,
        cpus: 2,
        players: 6,
        timers: Timers {
            save_interval_ms: 200,
            store_timeout_ms: 300,
            long_lease_node: None,
        },
        kinds,
    }
}

#[test]
fn a_plan_is_the_seed_s_and_keeps_to_what_was_asked() {
    let all = abilities(true, true, None);
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
        // Without NEMESIS_FAULTS, only the kinds on by default.
        for p in &planned {
            let kind = KINDS.iter().find(|k| k.name == p.fault.kind()).unwrap();
            assert!(kind.by_default, "seed {seed}: {}", p.fault);
        }
    }
    // Without namespaces or a store server, none of their faults.
    let bare = abilities(false, false, Some(vec!["all".into()]));
    for seed in 0..20 {
        for planned in plan(seed, 60, 3, &bare) {
            let kind = planned.fault.kind();
            assert!(!kind.starts_with("cut"), "{}", planned.fault);
            assert!(!kind.starts_with("store"), "{}", planned.fault);
        }
    }
    // Only what NEMESIS_FAULTS names; nothing when it names what cannot be.
    let mid = abilities(false, false, Some(vec!["freeze_mid".into()]));
    let planned = plan(7, 60, 3, &mid);
    assert!(!planned.is_empty());
    assert!(planned.iter().all(|p| p.fault.kind() == "freeze_mid"));
    let impossible = abilities(false, false, Some(vec!["store".into()]));
    assert!(plan(7, 60, 3, &impossible).is_empty());
}

#[test]
fn every_kind_is_drawn_somewhere() {
    let mut seen = std::collections::BTreeSet::new();
    for server in [false, true] {
        let all = abilities(true, server, Some(vec!["all".into()]));
        for seed in 0..200 {
            for planned in plan(seed, 120, 3, &all) {
                seen.insert(planned.fault.kind());
            }
        }
    }
    for kind in KINDS {
        assert!(seen.contains(kind.name), "{} is never drawn", kind.name);
        assert!(known(kind.name));
    }
    // A store stall is drawn on each side of each bound.
    let timers = abilities(true, true, None).timers;
    let mut sides = std::collections::BTreeSet::new();
    let mut rng = SmallRng::seed_from_u64(1);
    for _ in 0..1000 {
        let ms = stall_ms(&mut rng, &timers);
        for bound in [
            timers.store_timeout_ms,
            timers.save_interval_ms,
            DOWN_AFTER_MS,
        ] {
            sides.insert((bound, ms < bound));
        }
    }
    assert_eq!(sides.len(), 6, "{sides:?}");
}
