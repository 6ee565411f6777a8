//! What a run prints: the summary of its history, the verdict, and the
//! whole history as lines for reading a failed run.

use std::collections::BTreeMap;

use super::check::{ok_value, secs, History, Verdict, SHOWN_MAX};
use super::client::{Kind, Outcome};
use super::faults::Fault;

impl History {
    /// The counts and times every run prints.
    pub fn summary(&self) -> String {
        let total = self.ops.len();
        let ok = self.ops.iter().filter(|op| ok_value(op).is_some()).count();
        let failed = self
            .ops
            .iter()
            .filter(|op| matches!(op.outcome, Outcome::Failed(_)))
            .count();
        let uncertain = total - ok - failed;
        let incrs = self.ops.iter().filter(|op| op.kind == Kind::Incr).count();
        let acked = self
            .ops
            .iter()
            .filter(|op| op.kind == Kind::Incr && ok_value(op).is_some())
            .count();
        let reads = self
            .ops
            .iter()
            .filter(|op| op.kind == Kind::Get && ok_value(op).is_some())
            .count();
        let mut out = format!(
            "operations {total} ({incrs} incr, {} get): acknowledged {acked} increments, reads {reads}, uncertain {uncertain}, failed {failed}, answered OK {:.1}%\n",
            total - incrs,
            if total == 0 { 0.0 } else { 100.0 * ok as f64 / total as f64 }
        );
        let mut by_player: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for op in self.ops.iter().filter(|op| ok_value(op).is_some()) {
            by_player.entry(op.player).or_default().push(op.answer_us);
        }
        let mut longest = (0u64, 0u64, 0u64);
        for (player, mut times) in by_player {
            times.sort_unstable();
            for pair in times.windows(2) {
                if pair[1] - pair[0] > longest.1 {
                    longest = (player, pair[1] - pair[0], pair[0]);
                }
            }
        }
        out += &format!(
            "longest gap between two OK answers: {:.3} s (player {}, from {})\n",
            longest.1 as f64 / 1e6,
            longest.0,
            secs(longest.2)
        );
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for injected in &self.injected {
            *by_kind.entry(injected.fault.kind()).or_default() += 1;
            if let Fault::Operator { during, .. } = &injected.fault {
                *by_kind.entry(during.kind()).or_default() += 1;
            }
        }
        let kinds: Vec<String> = by_kind
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        out += &format!("faults by kind: {}\n", kinds.join(", "));
        out += &format!("faults injected ({}):\n", self.injected.len());
        for injected in &self.injected {
            out += &format!(
                "  {} .. {}  {}\n",
                secs(injected.start_us),
                secs(injected.end_us),
                injected.fault
            );
            for note in &injected.notes {
                out += &format!("      {note}\n");
            }
        }
        out
    }
}

impl History {
    /// Every operation, fault, poll and ownership read, one a line, in
    /// the order of their times, for reading a failed run.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut lines: Vec<(u64, String)> = Vec::new();
        lines.extend(self.ops.iter().map(|op| (op.send_us, format!("op {op}"))));
        lines.extend(self.injected.iter().map(|injected| {
            (
                injected.start_us,
                format!(
                    "fault {} .. {} {} {}",
                    secs(injected.start_us),
                    secs(injected.end_us),
                    injected.fault,
                    injected.notes.join("; ")
                ),
            )
        }));
        lines.extend(self.polls.iter().map(|poll| {
            let members: Vec<String> = poll
                .members
                .iter()
                .map(|m| format!("{}#{}={}", m.node_id, m.incarnation, m.state))
                .collect();
            (
                poll.send_us,
                format!(
                    "poll {}..{} pid {} node {} incarnation {} fenced {} members {}",
                    secs(poll.send_us),
                    secs(poll.answer_us),
                    poll.pid,
                    poll.node_id,
                    poll.incarnation,
                    poll.fenced,
                    members.join(" ")
                ),
            )
        }));
        lines.extend(self.owners.iter().map(|seen| {
            (
                seen.at_us,
                format!(
                    "owner {} player {} node {} incarnation {}",
                    secs(seen.at_us),
                    seen.player,
                    seen.owner,
                    seen.owner_incarnation
                ),
            )
        }));
        lines.extend(self.finals.iter().map(|read| {
            (
                read.at_us,
                format!(
                    "final {} player {} node {}: {:?}",
                    secs(read.at_us),
                    read.player,
                    read.slot + 1,
                    read.value
                ),
            )
        }));
        lines.sort_by_key(|line| line.0);
        let text: String = lines.into_iter().map(|(_, line)| line + "\n").collect();
        std::fs::write(path, text)
    }
}

impl Verdict {
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(ledger) = &self.ledger {
            out += &format!("{}\n", ledger.render());
        }
        for note in &self.notes {
            out += &format!("note: {note}\n");
        }
        if !self.allowances.is_empty() {
            out += &format!("interval allowances used ({}):\n", self.allowances.len());
            for allowance in self.allowances.iter().take(SHOWN_MAX) {
                out += &format!("  {allowance}\n");
            }
        }
        if !self.lost.is_empty() {
            out += "acknowledged increments a later request did not see (not excused):\n";
            for &(player, lost, acked) in &self.lost {
                out += &format!(
                    "  player {player}: {lost} of {acked} ({:.1}%)\n",
                    100.0 * lost as f64 / acked.max(1) as f64
                );
            }
        }
        for (rule, offences) in &self.violations {
            out += &format!("VIOLATION of \"{rule}\" ({} times):\n", offences.len());
            for offence in offences.iter().take(SHOWN_MAX) {
                out += &format!("    {offence}\n");
            }
        }
        out
    }
}
