//! The checker: what a run's history must show, and the summary printed
//! after every run.

use std::collections::{BTreeMap, HashMap};

use super::client::{Kind, Op, Outcome};
use super::cluster::{Injected, Killed, TakeoverOutcome};
use super::observe::{OwnerSeen, Poll};

/// Violations printed per rule; the count says how many there were.
pub const SHOWN_MAX: usize = 8;

/// How far around an acknowledgement an ownership read still tells who
/// owned the player then (ownership reads come every 300 ms).
const OWNER_WINDOW_US: u64 = 1_000_000;

/// The longest gap between two polls of one process that still shows it
/// unfenced in between: across a longer one (a frozen process answers no
/// poll) it may have been stopped, and a stopped process serves nothing
/// and checks its lease before it serves again.
const SPAN_GAP_MAX_US: u64 = 3 * super::observe::POLL_INTERVAL.as_micros() as u64;

/// How long a core may stay fenced while its node serves.
const CORE_FENCED_MAX_US: u64 = 1_000_000;

/// The final read of one player through one node.
#[derive(Clone, Debug)]
pub struct FinalRead {
    pub slot: usize,
    pub player: u64,
    pub at_us: u64,
    pub value: Result<i64, String>,
}

/// Per node, each declaration of it down the polls show: the incarnation
/// declared, the poll that showed it first, and when that observer's poll
/// before it was sent (the declaration came between the two).
type Declarations = BTreeMap<u64, Vec<(u64, usize, u64)>>;

pub struct History {
    pub ops: Vec<Op>,
    pub polls: Vec<Poll>,
    pub owners: Vec<OwnerSeen>,
    pub kills: Vec<Killed>,
    pub injected: Vec<Injected>,
    pub takeovers: Vec<TakeoverOutcome>,
    pub finals: Vec<FinalRead>,
    pub interval: bool,
    /// The declarations the polls show, worked out once.
    pub declarations: std::cell::OnceCell<Declarations>,
    /// The ownership reads by player, worked out once.
    pub owners_by_player: std::cell::OnceCell<BTreeMap<u64, Vec<OwnerSeen>>>,
}

#[derive(Default)]
pub struct Verdict {
    /// Rule name, then one text per offence.
    pub violations: BTreeMap<&'static str, Vec<String>>,
    pub allowances: Vec<String>,
    pub notes: Vec<String>,
    /// Per player: acknowledged increments a later request did not see
    /// (not excused), of all acknowledged.
    pub lost: Vec<(u64, usize, usize)>,
    /// What the request keys came to, when the increments carried keys.
    pub ledger: Option<super::exactly::Ledger>,
}

impl Verdict {
    pub(super) fn violate(&mut self, rule: &'static str, text: String) {
        self.violations.entry(rule).or_default().push(text);
    }

    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }
}

pub fn secs(us: u64) -> String {
    format!("{:.3}s", us as f64 / 1e6)
}

pub fn ok_value(op: &Op) -> Option<i64> {
    match op.outcome {
        Outcome::Ok(value) => Some(value),
        _ => None,
    }
}

impl History {
    /// Why an increment acknowledged by `lost` may be missing from what
    /// the player shows at `later_us`: with `interval` persistence, the
    /// node that owned the player then was declared down (another node saw
    /// it `down`) or killed, after the increment was sent.
    pub(super) fn excuse(&self, lost: &Op, later_us: u64) -> Option<String> {
        if !self.interval {
            return None;
        }
        let window =
            lost.send_us.saturating_sub(OWNER_WINDOW_US)..=lost.answer_us + OWNER_WINDOW_US;
        let seen = self.owners_of(lost.player);
        let start = seen.partition_point(|seen| seen.at_us < *window.start());
        let end = seen.partition_point(|seen| seen.at_us <= *window.end());
        let mut owners: Vec<u64> = seen[start..end].iter().map(|seen| seen.owner).collect();
        // The reads on either side of the window bracket it: whoever owned
        // the player when it was acknowledged was read at one of them or
        // claimed it between them (reads thin out while a node that would
        // answer them is frozen, so a claim may be read only after it).
        if let Some(before) = start.checked_sub(1).map(|at| &seen[at]) {
            owners.push(before.owner);
        }
        if let Some(after) = seen.get(end) {
            owners.push(after.owner);
        }
        if owners.is_empty() {
            // No ownership read near it: any node may have owned it.
            owners.extend(self.polls.iter().map(|poll| poll.node_id));
        }
        let incarnations = |node: u64| {
            let mut seen: Vec<String> = seen[start..end]
                .iter()
                .filter(|seen| seen.owner == node)
                .map(|seen| seen.owner_incarnation.to_string())
                .collect();
            seen.dedup();
            seen.join(", ")
        };
        // Who owned the player next: the other side of the allowance.
        let taken_over = |node: u64| {
            let answered = seen.partition_point(|seen| seen.at_us <= lost.answer_us);
            let last = seen[..answered]
                .iter()
                .filter(|seen| seen.owner == node)
                .map(|seen| seen.owner_incarnation)
                .max()
                .unwrap_or(0);
            match seen[answered..]
                .iter()
                .find(|seen| seen.owner != node || seen.owner_incarnation > last)
            {
                Some(next) => format!(
                    "; then node {} (incarnation {}) owned it at {}",
                    next.owner,
                    next.owner_incarnation,
                    secs(next.at_us)
                ),
                None => "; no later owner was read".to_string(),
            }
        };
        owners.sort_unstable();
        owners.dedup();
        for &node in &owners {
            // A poll shows a declaration some time after it was made: it
            // may have come before `later_us` if the observer's previous
            // poll (which did not show it, or did) was sent before then.
            let first_shown = self
                .declarations
                .get_or_init(|| self.declarations())
                .get(&node)
                .map_or(&[][..], Vec::as_slice);
            let declared = first_shown
                .iter()
                .find_map(|&(incarnation, at, possible_from)| {
                    let poll = &self.polls[at];
                    // The takeover that explains the loss must be able to have
                    // come after the acknowledgement was completed (one shown
                    // before the answer came is a takeover the owner
                    // acknowledged after: two owners at once, which no policy
                    // allows), and before the later request was answered.
                    (poll.answer_us > lost.answer_us && possible_from < later_us)
                        .then_some((poll, incarnation))
                });
            if let Some((poll, incarnation)) = declared {
                return Some(format!(
                    "node {node} (owner incarnation {}), owner of player {} then, was seen down (incarnation {incarnation}) by node {} at {}{}",
                    incarnations(node),
                    lost.player,
                    poll.node_id,
                    secs(poll.answer_us),
                    taken_over(node)
                ));
            }
            let killed = self.kills.iter().find(|kill| {
                kill.node_id == node && kill.at_us > lost.send_us && kill.at_us < later_us
            });
            if let Some(kill) = killed {
                return Some(format!(
                    "node {node}, owner of player {} then, was killed at {}{}",
                    lost.player,
                    secs(kill.at_us),
                    taken_over(node)
                ));
            }
        }
        None
    }

    /// What the run saw of `lost`'s player's ownership from shortly before
    /// it was sent until `later_us`: the owner reads, kills and
    /// declarations a reader of a violation needs to tell a checker's gap
    /// from a loss.
    fn ownership_around(&self, lost: &Op, later_us: u64) -> String {
        let from = lost.send_us.saturating_sub(OWNER_WINDOW_US);
        // Runs of one owner, each as its first and last read, from the
        // read before the window on.
        let reads_from = self
            .owners
            .iter()
            .rev()
            .find(|seen| seen.player == lost.player && seen.at_us < from)
            .map_or(from, |seen| seen.at_us);
        let mut runs: Vec<(u64, u64, u64, u64)> = Vec::new();
        for seen in self.owners.iter().filter(|seen| {
            seen.player == lost.player
                && (reads_from..=later_us + OWNER_WINDOW_US).contains(&seen.at_us)
        }) {
            match runs.last_mut() {
                Some(run) if (run.2, run.3) == (seen.owner, seen.owner_incarnation) => {
                    run.1 = seen.at_us
                }
                _ => runs.push((seen.at_us, seen.at_us, seen.owner, seen.owner_incarnation)),
            }
        }
        let reads: Vec<String> = runs
            .iter()
            .map(|&(first, last, node, incarnation)| {
                format!("node {node}#{incarnation} {}..{}", secs(first), secs(last))
            })
            .collect();
        let kills: Vec<String> = self
            .kills
            .iter()
            .filter(|kill| kill.at_us >= from && kill.at_us <= later_us)
            .map(|kill| format!("node {} at {}", kill.node_id, secs(kill.at_us)))
            .collect();
        let declared: Vec<String> = self
            .declarations
            .get_or_init(|| self.declarations())
            .iter()
            .flat_map(|(node, list)| list.iter().map(move |entry| (*node, entry)))
            .filter(|(_, &(_, at, _))| {
                let poll = &self.polls[at];
                poll.answer_us >= from && poll.answer_us <= later_us + OWNER_WINDOW_US
            })
            .map(|(node, &(incarnation, at, _))| {
                format!(
                    "node {node}#{incarnation} by {}",
                    secs(self.polls[at].answer_us)
                )
            })
            .collect();
        format!(
            "owner reads: {}; kills: {}; seen down: {}",
            if reads.is_empty() {
                "none".to_string()
            } else {
                reads.join(", ")
            },
            if kills.is_empty() {
                "none".to_string()
            } else {
                kills.join(", ")
            },
            if declared.is_empty() {
                "none".to_string()
            } else {
                declared.join(", ")
            },
        )
    }

    /// `player`'s ownership reads in time order (worked out once: the
    /// checker asks for them for every acknowledgement it weighs).
    fn owners_of(&self, player: u64) -> &[OwnerSeen] {
        let by_player = self.owners_by_player.get_or_init(|| {
            let mut by_player: BTreeMap<u64, Vec<OwnerSeen>> = BTreeMap::new();
            for seen in &self.owners {
                by_player.entry(seen.player).or_default().push(seen.clone());
            }
            for seen in by_player.values_mut() {
                seen.sort_by_key(|seen| seen.at_us);
            }
            by_player
        });
        by_player.get(&player).map_or(&[][..], Vec::as_slice)
    }

    /// Each declaration of a node (one an incarnation: it is a CAS on its
    /// row) was made before the first poll that showed it was answered,
    /// and after that observer's previous poll was sent.
    fn declarations(&self) -> Declarations {
        let mut first_shown: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for (at, poll) in self.polls.iter().enumerate() {
            for member in &poll.members {
                if member.node_id != poll.node_id && member.state == "down" {
                    let first = first_shown
                        .entry((member.node_id, member.incarnation))
                        .or_insert(at);
                    if poll.answer_us < self.polls[*first].answer_us {
                        *first = at;
                    }
                }
            }
        }
        let mut by_node = Declarations::new();
        for ((node, incarnation), at) in first_shown {
            let poll = &self.polls[at];
            // Each process's polls are pushed in the order it made them.
            let previous = self.polls[..at].iter().rev().find(|p| p.pid == poll.pid);
            let possible_from = previous.map_or(0, |previous| previous.send_us);
            by_node
                .entry(node)
                .or_default()
                .push((incarnation, at, possible_from));
        }
        by_node
    }

    fn allow(
        &self,
        verdict: &mut Verdict,
        rule: &'static str,
        lost: &Op,
        later: String,
        why: String,
    ) {
        verdict
            .allowances
            .push(format!("{rule}: {lost} then {later}: allowed, {why}"));
    }

    /// Every acknowledged increment value is unique per player.
    fn check_unique(&self, verdict: &mut Verdict, by_player: &BTreeMap<u64, Vec<&Op>>) {
        for ops in by_player.values() {
            let mut by_value: HashMap<i64, Vec<&Op>> = HashMap::new();
            for op in ops.iter().filter(|op| op.kind == Kind::Incr) {
                if let Some(value) = ok_value(op) {
                    by_value.entry(value).or_default().push(op);
                }
            }
            let mut repeated: Vec<_> = by_value.into_values().filter(|ops| ops.len() > 1).collect();
            repeated.sort_by_key(|ops| ops[0].answer_us);
            for mut ops in repeated {
                ops.sort_by_key(|op| op.answer_us);
                let first = ops[0];
                for later in &ops[1..] {
                    match self.excuse(first, later.answer_us) {
                        Some(why) => self.allow(verdict, "unique", first, later.to_string(), why),
                        None => verdict.violate(
                            "every acknowledged value unique per player",
                            format!("{first}\n      and {later}"),
                        ),
                    }
                }
            }
        }
    }

    /// An increment (a get) sent after another increment was acknowledged
    /// returns a larger (no smaller) value.
    fn check_order(&self, verdict: &mut Verdict, by_player: &BTreeMap<u64, Vec<&Op>>) {
        for ops in by_player.values() {
            let mut acked: Vec<&Op> = ops
                .iter()
                .copied()
                .filter(|op| op.kind == Kind::Incr && ok_value(op).is_some())
                .collect();
            acked.sort_by_key(|op| op.answer_us);
            let mut readers: Vec<&Op> = ops
                .iter()
                .copied()
                .filter(|op| ok_value(op).is_some())
                .collect();
            readers.sort_by_key(|op| op.send_us);
            // Sweep: `best` is the largest acknowledged value answered
            // before the reader was sent.
            let mut next = 0;
            let mut best: Option<&Op> = None;
            for reader in readers {
                while next < acked.len() && acked[next].answer_us < reader.send_us {
                    if best.is_none_or(|best| ok_value(acked[next]) > ok_value(best)) {
                        best = Some(acked[next]);
                    }
                    next += 1;
                }
                let Some(top) = best else { continue };
                let value = ok_value(reader).unwrap();
                let too_small = |earlier: &Op| match reader.kind {
                    Kind::Incr => value <= ok_value(earlier).unwrap(),
                    Kind::Get => value < ok_value(earlier).unwrap(),
                };
                if !too_small(top) {
                    continue;
                }
                // Every earlier acknowledgement it is below must be excused.
                let offending = acked[..next]
                    .iter()
                    .filter(|earlier| too_small(earlier))
                    .find(|earlier| self.excuse(earlier, reader.answer_us).is_none());
                match offending {
                    Some(earlier) => verdict.violate(
                        "a request sent after an increment was acknowledged sees it",
                        format!(
                            "{earlier}\n      then {reader}\n      {}",
                            self.ownership_around(earlier, reader.answer_us)
                        ),
                    ),
                    None => {
                        let why = self.excuse(top, reader.answer_us).unwrap();
                        self.allow(verdict, "order", top, reader.to_string(), why);
                    }
                }
            }
        }
    }

    /// No answer counts more than was sent: a value (of a get or an
    /// increment) is at most the number of increments sent before it was
    /// answered, leaving out those answered with an error the protocol
    /// says took no effect. Never excused: no policy invents increments.
    fn check_bounded(&self, verdict: &mut Verdict, by_player: &BTreeMap<u64, Vec<&Op>>) {
        for ops in by_player.values() {
            let mut sent: Vec<u64> = ops
                .iter()
                .filter(|op| op.kind == Kind::Incr && !matches!(op.outcome, Outcome::Failed(_)))
                .map(|op| op.send_us)
                .collect();
            sent.sort_unstable();
            for op in ops {
                let Some(value) = ok_value(op) else { continue };
                let before = sent.partition_point(|&at| at < op.answer_us) as i64;
                if value > before {
                    verdict.violate(
                        "a value is at most the increments sent before it was answered",
                        format!("{op}: {value} > {before} increments sent by then"),
                    );
                }
            }
        }
    }

    /// How many of a player's acknowledged increments some later request
    /// did not see (a get below it, an increment at or below it), not
    /// excused: the size of a loss, where the order rule lists pairs.
    fn count_lost(&self, ops: &[&Op]) -> (usize, usize) {
        // A reader's key: the smallest acknowledged value it contradicts.
        let mut readers: Vec<(u64, i64, &Op)> = ops
            .iter()
            .filter_map(|op| {
                let value = ok_value(op)?;
                Some(match op.kind {
                    Kind::Incr => (op.send_us, value, *op),
                    Kind::Get => (op.send_us, value + 1, *op),
                })
            })
            .collect();
        readers.sort_by_key(|reader| reader.0);
        let mut lowest: Vec<(i64, &Op)> = Vec::with_capacity(readers.len());
        for reader in readers.iter().rev() {
            match lowest.last() {
                Some(&(key, _)) if key <= reader.1 => lowest.push(*lowest.last().unwrap()),
                _ => lowest.push((reader.1, reader.2)),
            }
        }
        lowest.reverse();
        let (mut lost, mut acked) = (0, 0);
        for op in ops.iter().filter(|op| op.kind == Kind::Incr) {
            let Some(value) = ok_value(op) else { continue };
            acked += 1;
            let first = readers.partition_point(|reader| reader.0 <= op.answer_us);
            let Some(&(key, reader)) = lowest.get(first) else {
                continue;
            };
            if key <= value && self.excuse(op, reader.answer_us).is_none() {
                lost += 1;
            }
        }
        (lost, acked)
    }

    /// The final counters: every node agrees, no acknowledged increment
    /// is missing, and none counted more than was sent.
    fn check_finals(&self, verdict: &mut Verdict, by_player: &BTreeMap<u64, Vec<&Op>>) {
        let mut finals: BTreeMap<u64, Vec<&FinalRead>> = BTreeMap::new();
        for read in &self.finals {
            finals.entry(read.player).or_default().push(read);
        }
        for (player, reads) in finals {
            let ops = by_player.get(&player).cloned().unwrap_or_default();
            let incrs = ops.iter().filter(|op| op.kind == Kind::Incr);
            let acked = incrs.clone().filter(|op| ok_value(op).is_some()).count() as i64;
            let uncertain = incrs
                .clone()
                .filter(|op| matches!(op.outcome, Outcome::Uncertain(_)))
                .count() as i64;
            let top = incrs
                .filter(|op| ok_value(op).is_some())
                .max_by_key(|op| ok_value(op));
            let values: Vec<String> = reads
                .iter()
                .map(|read| match &read.value {
                    Ok(value) => format!("node {}: {value}", read.slot + 1),
                    Err(error) => format!("node {}: unread ({error})", read.slot + 1),
                })
                .collect();
            let read_values: Vec<i64> = reads
                .iter()
                .filter_map(|read| read.value.clone().ok())
                .collect();
            if read_values.len() < reads.len() || read_values.windows(2).any(|w| w[0] != w[1]) {
                verdict.violate(
                    "all nodes agree on the final counter",
                    format!("player {player}: {}", values.join(", ")),
                );
            }
            for read in reads {
                let Ok(value) = read.value else { continue };
                if value > acked + uncertain {
                    verdict.violate(
                        "final <= acknowledged + uncertain increments",
                        format!(
                            "player {player} node {}: final {value} > {acked} acknowledged + {uncertain} uncertain",
                            read.slot + 1
                        ),
                    );
                }
                let Some(top) = top else { continue };
                if value >= ok_value(top).unwrap() {
                    continue;
                }
                let later = format!(
                    "final read {value} through node {} at {}",
                    read.slot + 1,
                    secs(read.at_us)
                );
                match self.excuse(top, read.at_us) {
                    Some(why) => self.allow(verdict, "final", top, later, why),
                    None => verdict.violate(
                        "final counter >= the largest acknowledged value",
                        format!("{top}\n      then {later}"),
                    ),
                }
            }
        }
    }

    /// Never two unfenced (serving) processes with one node id at once. A
    /// process polled serving twice in one incarnation, shortly one after
    /// the other, is taken as serving in between: it may have lapsed and
    /// renewed its lease meanwhile, but a renewal is a heartbeat applied on
    /// the row it wrote, which no longer happens once another process took
    /// the id. So only such spans are compared: the rule can miss what
    /// was, not see what was not.
    fn check_one_process_per_id(&self, verdict: &mut Verdict) {
        let mut by_pid: BTreeMap<u32, Vec<&Poll>> = BTreeMap::new();
        for poll in &self.polls {
            by_pid.entry(poll.pid).or_default().push(poll);
        }
        // (node id, pid, serial, incarnation, from, to)
        let mut spans: Vec<(u64, u32, u32, u64, u64, u64)> = Vec::new();
        for polls in by_pid.values_mut() {
            polls.sort_by_key(|poll| poll.send_us);
            for pair in polls.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if !a.fenced
                    && !b.fenced
                    && a.incarnation == b.incarnation
                    && a.answer_us < b.send_us
                    && b.send_us - a.answer_us <= SPAN_GAP_MAX_US
                {
                    spans.push((
                        a.node_id,
                        a.pid,
                        a.serial,
                        a.incarnation,
                        a.answer_us,
                        b.send_us,
                    ));
                }
            }
        }
        let mut reported = std::collections::HashSet::new();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if a.0 != b.0 || a.1 == b.1 || a.4.max(b.4) >= a.5.min(b.5) {
                    continue;
                }
                if !reported.insert((a.1.min(b.1), a.1.max(b.1))) {
                    continue;
                }
                verdict.violate(
                    "never two unfenced processes with one id",
                    format!(
                        "node id {}: pid {} (start {}, incarnation {}) unfenced {}..{} and pid {} (start {}, incarnation {}) unfenced {}..{}",
                        a.0, a.1, a.2, a.3, secs(a.4), secs(a.5), b.1, b.2, b.3, secs(b.4), secs(b.5)
                    ),
                );
            }
        }
    }

    /// No core fenced for longer than `CORE_FENCED_MAX_US` while its
    /// node's top-level fence is off.
    fn check_cores(&self, verdict: &mut Verdict) {
        if self.polls.iter().all(|poll| poll.cores.is_none()) {
            verdict.notes.push(
                "skipped \"no core fenced while its node serves\": /cluster reports no cores"
                    .into(),
            );
            return;
        }
        let mut by_pid: BTreeMap<u32, Vec<&Poll>> = BTreeMap::new();
        for poll in &self.polls {
            by_pid.entry(poll.pid).or_default().push(poll);
        }
        for polls in by_pid.values_mut() {
            polls.sort_by_key(|poll| poll.send_us);
            // core -> (first poll that saw it fenced while the node serves)
            let mut since: HashMap<u64, &Poll> = HashMap::new();
            let mut previous: Option<&Poll> = None;
            for poll in polls.iter() {
                // Across a gap in the polls the process may have been
                // stopped: what it showed before says nothing of the gap.
                if previous.is_some_and(|p| poll.send_us > p.answer_us + SPAN_GAP_MAX_US) {
                    since.clear();
                }
                previous = Some(poll);
                let fenced_cores: Vec<u64> = match (&poll.cores, poll.fenced) {
                    (Some(cores), false) => {
                        cores.iter().filter(|c| c.fenced).map(|c| c.core).collect()
                    }
                    _ => Vec::new(),
                };
                since.retain(|core, first| {
                    fenced_cores.contains(core) && first.incarnation == poll.incarnation
                });
                for core in fenced_cores {
                    let first = *since.entry(core).or_insert(poll);
                    if poll.send_us > first.answer_us + CORE_FENCED_MAX_US {
                        verdict.violate(
                            "no core fenced while its node serves",
                            format!(
                                "node id {} pid {} core {core}: fenced from {} to {} while the node was not",
                                poll.node_id,
                                poll.pid,
                                secs(first.answer_us),
                                secs(poll.send_us)
                            ),
                        );
                        since.remove(&core);
                    }
                }
            }
        }
    }

    pub fn check(&self) -> Verdict {
        let mut verdict = Verdict::default();
        // Each key's attempts weigh as one increment (see `exactly.rs`).
        let (logical, ledger) = self.logical_ops(&mut verdict);
        if ledger.keys > 0 {
            verdict.ledger = Some(ledger);
        }
        let mut by_player: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
        for op in &logical {
            by_player.entry(op.player).or_default().push(op);
        }
        self.check_unique(&mut verdict, &by_player);
        self.check_order(&mut verdict, &by_player);
        self.check_bounded(&mut verdict, &by_player);
        for (player, ops) in &by_player {
            let (lost, acked) = self.count_lost(ops);
            if lost > 0 {
                verdict.lost.push((*player, lost, acked));
            }
        }
        self.check_finals(&mut verdict, &by_player);
        self.check_exactly_once(&mut verdict, &by_player);
        self.check_one_process_per_id(&mut verdict);
        self.check_cores(&mut verdict);
        for takeover in &self.takeovers {
            if !takeover.first_exited_as_fixed {
                verdict.violate(
                    "a process whose id was taken exits",
                    format!("node {}: {}", takeover.node_id, takeover.description),
                );
            }
        }
        verdict
    }
}
