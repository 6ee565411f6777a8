//! Membership's start and rejoin: deciding a start from this node's own
//! row, watching a row another process holds, the join write and its
//! answer, and the fence after a lost incarnation with the rejoin that
//! follows. Serving (heartbeats, the lease, observing the others) is the
//! parent module's.

use super::Action;
use super::{Event, Membership, Phase, Serving, WriteTag};
use crate::router::mutant::{self, Mutant};
use crate::store::{
    MemberCondition, MemberOutcome, MemberRow, MemberState, MemberVersion, MemberWrite,
};

impl Membership {
    /// The row that refused or outranked this node's: declared down (its
    /// own incarnation, `down`), or written by another process (an
    /// incarnation this one never took). `how` says how it was found.
    pub(super) fn lose(&mut self, now_ms: u64, row: Option<MemberRow>, how: &str) {
        let cause = match &row {
            Some(row) if row.incarnation > self.held_incarnation && !row.state.is_ended() => {
                // Another process holds the id (or this one's own join
                // whose answer was lost: it stands still, and is taken
                // after `down_wait_ms` like any stalled row).
                format!(
                    "node id {} is held by incarnation {}, which this process did not take \
                     ({how})",
                    self.me.0, row.incarnation
                )
            }
            Some(row) if row.state == MemberState::Down => format!(
                "declared down by another node: incarnation {} is `down` ({how})",
                row.incarnation
            ),
            Some(row) => format!(
                "incarnation {} of this node is `{}` ({how})",
                row.incarnation,
                row.state.as_str()
            ),
            None => format!("this node's membership row is gone ({how})"),
        };
        self.fence(now_ms, row, cause);
    }

    /// Watches a row another process wrote: its heartbeat moving means
    /// that process lives, and this one must go; standing still for
    /// `down_wait_ms` means it is gone, and this one takes the next
    /// incarnation as any start would.
    pub(super) fn watch_displaced(
        &mut self,
        now_ms: u64,
        own: Option<MemberRow>,
        watching: (MemberVersion, u64, u64),
    ) {
        let Some(row) = own else {
            // The row went away: join as a first start would.
            return self.join(now_ms, 1, MemberCondition::Absent);
        };
        let (version, heartbeat, since) = watching;
        if row.state.is_ended() {
            let condition = MemberCondition::VersionEquals(row.version);
            return self.join(now_ms, row.incarnation + 1, condition);
        }
        if row.version != version || row.heartbeat != heartbeat {
            self.phase = Phase::Refused;
            self.events.push(Event::TakenOver {
                incarnation: row.incarnation,
            });
        } else if now_ms.saturating_sub(since) >= self.down_wait_ms(&row) {
            let condition = MemberCondition::VersionEquals(row.version);
            self.join(now_ms, row.incarnation + 1, condition);
        }
    }

    /// Decides a start from this node's own row.
    pub(super) fn start_from(
        &mut self,
        now_ms: u64,
        own: Option<MemberRow>,
        watching: Option<(MemberVersion, u64, u64)>,
    ) {
        let Some(row) = own else {
            return self.join(now_ms, 1, MemberCondition::Absent);
        };
        if row.state.is_ended() {
            let condition = MemberCondition::VersionEquals(row.version);
            return self.join(now_ms, row.incarnation + 1, condition);
        }
        match watching {
            Some((version, heartbeat, since)) => {
                if row.version != version || row.heartbeat != heartbeat {
                    self.phase = Phase::Refused;
                    self.events.push(Event::Refused { node: self.me });
                } else if now_ms.saturating_sub(since) >= self.down_wait_ms(&row) {
                    // The holder of the id stopped heartbeating as long as
                    // an observer waits before declaring it down (its own
                    // lease counted, which may be longer than this
                    // process's config says).
                    let condition = MemberCondition::VersionEquals(row.version);
                    self.join(now_ms, row.incarnation + 1, condition);
                }
            }
            None => {
                self.phase = Phase::Starting {
                    watching: Some((row.version, row.heartbeat, now_ms)),
                };
            }
        }
    }

    pub(super) fn join(&mut self, now_ms: u64, incarnation: u64, condition: MemberCondition) {
        self.phase = Phase::Joining;
        let row = self.row(incarnation, MemberState::Joining, 0, MemberVersion(0));
        self.actions.push(Action::Write {
            tag: WriteTag::Join { sent_at_ms: now_ms },
            write: MemberWrite { row, condition },
        });
    }

    /// This incarnation is over (declared down, or the id taken over):
    /// fence, and rejoin as soon as the row that says so is known.
    pub(super) fn fence(&mut self, now_ms: u64, row: Option<MemberRow>, cause: String) {
        let was_serving = matches!(self.phase, Phase::Serving(_));
        let known = row.is_some();
        self.phase = Phase::Fenced { row };
        if was_serving {
            self.events.push(Event::Fenced { cause });
        }
        if known {
            self.rejoin(now_ms);
        } else {
            self.next_poll_ms = now_ms;
        }
    }

    /// Takes the next incarnation after a fence, unless the row shows an
    /// incarnation this process never took that has not ended: that one
    /// is watched first (`Phase::Displaced`), never taken over.
    pub(super) fn rejoin(&mut self, now_ms: u64) {
        let Phase::Fenced { row } = &self.phase else {
            return;
        };
        let (incarnation, condition) = match row {
            Some(row) if row.incarnation > self.held_incarnation && !row.state.is_ended() => {
                self.phase = Phase::Displaced {
                    watching: (row.version, row.heartbeat, now_ms),
                };
                self.next_poll_ms = now_ms;
                return;
            }
            Some(row) => (
                row.incarnation + 1,
                MemberCondition::VersionEquals(row.version),
            ),
            None => (1, MemberCondition::Absent),
        };
        let incarnation = if mutant::active(Mutant::RejoinReusesIncarnation) {
            incarnation.saturating_sub(1).max(1)
        } else {
            incarnation
        };
        self.join(now_ms, incarnation, condition);
    }

    pub(super) fn joined(
        &mut self,
        now_ms: u64,
        sent_at_ms: u64,
        write: &MemberWrite,
        outcome: MemberOutcome,
    ) {
        let MemberOutcome::Applied(version) = outcome else {
            self.next_poll_ms = now_ms;
            self.phase = if self.ever_joined {
                // A rejoin lost its CAS (a late write of this node's, or a
                // declaration): rejoin on the row as read next.
                Phase::Fenced { row: None }
            } else {
                // Someone else wrote the row first, or the answer was lost
                // (it may be ours: a live-looking row is watched as any
                // other).
                Phase::Starting { watching: None }
            };
            return;
        };
        let incarnation = write.row.incarnation;
        let lease_until_ms = sent_at_ms + self.timers.fence_after_ms;
        let first = !std::mem::replace(&mut self.ever_joined, true);
        self.held_incarnation = self.held_incarnation.max(incarnation);
        self.phase = Phase::Serving(Serving {
            incarnation,
            version,
            heartbeat: 0,
            state: MemberState::Joining,
            in_flight: None,
            next_heartbeat_ms: now_ms + self.timers.heartbeat_interval_ms,
            wanted_state: if first {
                MemberState::Joining
            } else {
                // `left` is written by the clean exit itself, never by a
                // rejoin: the others would claim at once what the node
                // may still write back.
                match self.asked_state {
                    Some(MemberState::Draining) => MemberState::Draining,
                    _ => MemberState::Up,
                }
            },
            lease_until_ms,
            lapsed_at_ms: None,
            renew_from_ms: 0,
            last_applied_ms: sent_at_ms,
            last_failure: None,
        });
        if first {
            self.events.push(Event::Joined { incarnation });
            self.events.push(Event::Lease {
                until_ms: lease_until_ms,
            });
        } else {
            self.events.push(Event::Rejoined {
                incarnation,
                lease_until_ms,
            });
        }
        self.on_tick(now_ms);
    }
}
