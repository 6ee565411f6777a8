//! Membership's invariants, checked after every step by its drivers (the
//! node's agent in debug builds, the simulator and the unit tests always):
//! what the machine's types do not say, held to what the check saw the
//! step before.
//!
//! - This process's incarnation never goes back, and one taken after an
//!   incarnation ended (a fence, a rejoin) is higher than every one it held.
//! - Every row the view holds, against the same row a step before: its
//!   version never goes back, and moves with every change of incarnation,
//!   state or heartbeat; its incarnation never goes back; an incarnation
//!   that ended (`down`, `left`) stays ended.
//! - The table version the view holds every change up to never goes back.
//! - The watched set, when computed, is the `WATCHED_PER_NODE` (or all, if
//!   fewer) live members other than this node, and `lowest_live` the
//!   lowest live id.
//! - A declaration sent is a CAS on the row as read, same incarnation, that
//!   stood at that version for `down_wait_ms` (this node's clock); a
//!   deletion is of a `left` row, by its lowest live node, after
//!   `left_retention_ms`; a join takes an incarnation above every one held.

use std::collections::BTreeMap;

use super::{Action, Membership, Phase, WriteTag, WATCHED_PER_NODE};
use crate::ids::NodeId;
use crate::store::{MemberCondition, MemberState, MemberVersion, TableVersion};

/// What one check saw, for the next to compare with.
#[derive(Clone, Debug, Default)]
pub(super) struct Checked {
    held_incarnation: u64,
    /// The incarnation last seen serving, and whether a phase other than
    /// serving was seen since (the next must then be higher).
    serving: Option<(u64, bool)>,
    /// Each row of the view: version, incarnation, state, heartbeat.
    rows: BTreeMap<NodeId, (MemberVersion, u64, MemberState, u64)>,
    listed: Option<TableVersion>,
}

impl Membership {
    /// The invariants after a step at `now_ms` (this node's clock): the
    /// first that fails, described. Cheap (the view is a few rows per
    /// member), but the drivers call it only in debug builds and tests.
    pub fn check(&mut self, now_ms: u64) -> Result<(), String> {
        let result = self
            .check_own()
            .and_then(|()| self.check_view(now_ms))
            .and_then(|()| self.check_watched())
            .and_then(|()| self.check_actions(now_ms));
        self.checked = self.seen_now();
        result.map_err(|broken| format!("membership of node {}: {broken}", self.me.0))
    }

    /// `check`, panicking on a failure, in debug builds only: for the
    /// node's driver after every step.
    pub fn debug_check(&mut self, now_ms: u64) {
        if cfg!(debug_assertions) {
            if let Err(broken) = self.check(now_ms) {
                panic!("{broken}");
            }
        }
    }

    fn seen_now(&self) -> Checked {
        let serving = match (&self.phase, self.checked.serving) {
            (Phase::Serving(serving), _) => Some((serving.incarnation, false)),
            (_, Some((incarnation, _))) => Some((incarnation, true)),
            (_, None) => None,
        };
        Checked {
            held_incarnation: self.held_incarnation,
            serving,
            rows: self
                .observed
                .iter()
                .map(|(node, seen)| {
                    let row = &seen.row;
                    (
                        *node,
                        (row.version, row.incarnation, row.state, row.heartbeat),
                    )
                })
                .collect(),
            listed: self.listed,
        }
    }

    fn check_own(&self) -> Result<(), String> {
        let before = &self.checked;
        if self.held_incarnation < before.held_incarnation {
            return Err(format!(
                "the incarnation held went back from {} to {}",
                before.held_incarnation, self.held_incarnation
            ));
        }
        let Phase::Serving(serving) = &self.phase else {
            return Ok(());
        };
        if serving.incarnation > self.held_incarnation {
            return Err(format!(
                "serves incarnation {} above the highest held, {}",
                serving.incarnation, self.held_incarnation
            ));
        }
        match before.serving {
            Some((last, true)) if serving.incarnation <= last => Err(format!(
                "serves incarnation {} again after incarnation {last} ended",
                serving.incarnation
            )),
            Some((last, false)) if serving.incarnation < last => Err(format!(
                "serves incarnation {} after {last}",
                serving.incarnation
            )),
            _ => Ok(()),
        }
    }

    fn check_view(&self, now_ms: u64) -> Result<(), String> {
        let before = &self.checked;
        if self.listed < before.listed {
            return Err(format!(
                "the view's table version went back from {:?} to {:?}",
                before.listed, self.listed
            ));
        }
        for (node, seen) in &self.observed {
            let row = &seen.row;
            if row.node_id != *node || *node == self.me || node.is_none() {
                return Err(format!(
                    "the view holds {:?}'s row under {node:?}",
                    row.node_id
                ));
            }
            if seen.since_ms > now_ms {
                return Err(format!("{node:?}'s row was first read after now"));
            }
            let Some(&(version, incarnation, state, heartbeat)) = before.rows.get(node) else {
                continue;
            };
            let changed =
                (incarnation, state, heartbeat) != (row.incarnation, row.state, row.heartbeat);
            let broken = if row.version < version {
                Some("its version went back")
            } else if row.version == version && changed {
                Some("it changed at the same version")
            } else if row.incarnation < incarnation {
                Some("its incarnation went back")
            } else if row.incarnation == incarnation && state.is_ended() && !row.state.is_ended() {
                Some("an incarnation that ended came back")
            } else {
                None
            };
            if let Some(broken) = broken {
                return Err(format!(
                    "{node:?}'s row was incarnation {incarnation} `{}` heartbeat {heartbeat} at \
                     {version:?}, now incarnation {} `{}` heartbeat {} at {:?}: {broken}",
                    state.as_str(),
                    row.incarnation,
                    row.state.as_str(),
                    row.heartbeat,
                    row.version
                ));
            }
        }
        Ok(())
    }

    fn check_watched(&self) -> Result<(), String> {
        if self.ring_dirty {
            return Ok(());
        }
        let live: Vec<NodeId> = self
            .observed
            .values()
            .filter(|seen| !seen.row.state.is_ended())
            .map(|seen| seen.row.node_id)
            .collect();
        let wanted = live.len().min(WATCHED_PER_NODE);
        let mut distinct = self.watched.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if self.watched.len() != wanted || distinct.len() != wanted {
            return Err(format!(
                "watches {:?}, not {wanted} distinct of the {} live others",
                self.watched,
                live.len()
            ));
        }
        if let Some(node) = self.watched.iter().find(|node| !live.contains(node)) {
            return Err(format!(
                "watches {node:?}, which is not a live other member"
            ));
        }
        let lowest = live.iter().copied().chain([self.me]).min();
        if lowest != Some(self.lowest_live) {
            return Err(format!(
                "takes {:?} for the lowest live node, not {lowest:?}",
                self.lowest_live
            ));
        }
        Ok(())
    }

    /// The writes and deletions this step asked for. One whose row the
    /// view has since read at a later version (a later step of the same
    /// batch) is past checking: it was judged on the row as it stood.
    fn check_actions(&self, now_ms: u64) -> Result<(), String> {
        for action in &self.actions {
            match action {
                Action::Write {
                    tag: WriteTag::DeclareDown { node },
                    write,
                } => {
                    let Some(seen) = self.observed.get(node) else {
                        return Err(format!("declares {node:?} down, whose row it never read"));
                    };
                    let MemberCondition::VersionEquals(version) = write.condition else {
                        return Err(format!("declares {node:?} down without a CAS"));
                    };
                    if version != seen.row.version {
                        continue;
                    }
                    let stood_ms = now_ms.saturating_sub(seen.since_ms);
                    let wait_ms = self.down_wait_ms(&seen.row);
                    if write.row.state != MemberState::Down
                        || write.row.incarnation != seen.row.incarnation
                        || seen.row.state.is_ended()
                        || stood_ms < wait_ms
                    {
                        return Err(format!(
                            "declares {node:?} down (incarnation {} `{}`) on its row at \
                             {version:?}, incarnation {} `{}`, which stood still {stood_ms} ms \
                             of the {} ms it must",
                            write.row.incarnation,
                            write.row.state.as_str(),
                            seen.row.incarnation,
                            seen.row.state.as_str(),
                            wait_ms
                        ));
                    }
                }
                Action::Write {
                    tag: WriteTag::Join { .. },
                    write,
                } if write.row.incarnation <= self.held_incarnation => {
                    return Err(format!(
                        "joins as incarnation {}, not above the {} it held",
                        write.row.incarnation, self.held_incarnation
                    ));
                }
                Action::Delete { node, version } => {
                    let Some(seen) = self.observed.get(node) else {
                        continue;
                    };
                    let stood_ms = now_ms.saturating_sub(seen.since_ms);
                    let due = stood_ms >= self.left_retention_ms;
                    let lowest = self.ring_dirty || self.lowest_live == self.me;
                    if seen.row.version == *version
                        && (seen.row.state != MemberState::Left || !due || !lowest)
                    {
                        return Err(format!(
                            "deletes {node:?}'s row `{}`, {stood_ms} ms after reading it so",
                            seen.row.state.as_str()
                        ));
                    }
                }
                Action::Write { .. } | Action::Poll { .. } | Action::List { .. } => {}
            }
        }
        Ok(())
    }
}
