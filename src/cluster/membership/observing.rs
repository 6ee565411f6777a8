//! Observing the other members at a cost that grows with N, not N².
//!
//! - Polls: every half interval a node reads the table version and the
//!   rows of the peers it watches (while it starts or rejoins, its own row
//!   instead): `1 + WATCHED_PER_NODE` rows.
//! - Listings: when the polled version differs from the one the view was
//!   last listed at, the node lists the rows changed since then, page by
//!   page (`store::MEMBERS_PAGE_MAX` entries a page), rows deleted
//!   included; the first listing (since version 0) reads every live row.
//!   A heartbeat moves no version, so a steady cluster lists nothing.
//! - Watching: the live members (not `left` or `down`) and this node sit
//!   on a ring ordered by a hash of their ids; each watches the
//!   `WATCHED_PER_NODE` that follow it, so every live member is watched by
//!   as many: those that precede it. A watched member whose row stood at one
//!   version for `down_wait_ms` since this node first read that version
//!   (its own clock) is declared down by CAS on it: a heartbeat in between
//!   moved the version, and the declaration fails. A row read at any time
//!   proves the row had that version then, so a version first seen by a
//!   listing long ago and unchanged at a poll now stood still that long.
//!   When a watcher dies it is declared down by its own watchers, every
//!   node lists that change, and the ring closes over it: the members it
//!   watched get the next live predecessor as a watcher.
//! - Deleting: the lowest live node id deletes the row of a node that
//!   `left`, by CAS on its version, `left_retention_ms` after it first read
//!   it so; the store keeps a tombstone, so no incarnation or version
//!   repeats for that id.

use super::{Action, Event, Membership, Phase, WriteTag};
use crate::ids::NodeId;
use crate::router::mutant::{self, Mutant};
use crate::store::{
    MemberCondition, MemberOutcome, MemberPage, MemberPoll, MemberRow, MemberState, MemberWrite,
    TableVersion,
};

/// How many peers each live node watches (its successors on the ring), and
/// so by how many each live node is watched when the cluster is larger.
/// Three keeps a member watched while two of its watchers are dead at once,
/// and costs `1 + 3` row reads a poll.
pub const WATCHED_PER_NODE: usize = 3;

/// What this node saw of another member.
#[derive(Clone, Debug)]
pub(super) struct Observed {
    pub row: MemberRow,
    /// When this node first read the row at its current version (its
    /// clock): a row that keeps one version has not heartbeat since.
    pub since_ms: u64,
    pub declaring: bool,
    pub deleting: bool,
}

/// A listing in progress: the rows changed after `since`, which makes the
/// view hold every change up to `upto` (the version polled before it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Listing {
    since: TableVersion,
    upto: TableVersion,
}

/// A node's place on the watch ring: its id's hash, so that nodes with
/// neighbouring ids (often one rack or one start-up batch) do not watch
/// each other only.
fn ring_position(node: NodeId) -> u64 {
    // splitmix64's finaliser: a bijection, so positions never collide.
    let mut z = node.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Membership {
    /// Sends a poll: the watched peers' rows while serving, this node's
    /// own row while it starts, rejoins or watches a row another process
    /// wrote.
    pub(super) fn poll(&mut self) {
        let nodes = match self.phase {
            Phase::Serving(_) => self.watched().to_vec(),
            _ => vec![self.me],
        };
        self.polling = Some(nodes.contains(&self.me));
        self.actions.push(Action::Poll { nodes });
    }

    /// The peers this node watches: the `WATCHED_PER_NODE` live members
    /// after it on the ring.
    pub fn watched(&mut self) -> &[NodeId] {
        if self.ring_dirty {
            self.ring_dirty = false;
            let mut ring: Vec<(u64, NodeId)> = self
                .observed
                .values()
                .filter(|seen| !seen.row.state.is_ended())
                .map(|seen| seen.row.node_id)
                .chain(std::iter::once(self.me))
                .map(|node| (ring_position(node), node))
                .collect();
            ring.sort_unstable();
            self.lowest_live = ring.iter().map(|(_, node)| *node).min().unwrap_or(self.me);
            let at = ring
                .iter()
                .position(|(_, node)| *node == self.me)
                .unwrap_or(0);
            self.watched = (1..ring.len())
                .take(WATCHED_PER_NODE)
                .map(|step| ring[(at + step) % ring.len()].1)
                .collect();
            debug_assert!(!self.watched.contains(&self.me));
        }
        &self.watched
    }

    /// A poll could not be made; the next tick tries again, and the watch
    /// restarts at the next poll that is answered (see `restart_watch`).
    pub fn on_poll_failed(&mut self) {
        self.polling = None;
        self.polled_ok_ms = None;
    }

    /// The answer to a poll, read at `now_ms`.
    pub fn on_polled(&mut self, now_ms: u64, poll: MemberPoll) {
        let asked_me = self.polling.take().unwrap_or(false);
        self.check_lease(now_ms);
        self.restart_watch_after_gap(now_ms);
        let mut own = None;
        let mut read = Vec::with_capacity(poll.rows.len());
        for row in poll.rows {
            if row.node_id == self.me {
                own = Some(row);
            } else if !row.node_id.is_none() {
                read.push(row.node_id);
                self.merge(now_ms, row);
            }
        }
        if asked_me {
            self.own_polled(now_ms, own);
        }
        if self.listed != Some(poll.version) && self.listing.is_none() {
            let since = self.listed.unwrap_or_default();
            self.listing = Some(Listing {
                since,
                upto: poll.version,
            });
            self.actions.push(Action::List {
                since,
                after: NodeId(0),
            });
        }
        self.judge_watched(now_ms, &read);
    }

    /// A row's standing still counts only over polls that were answered:
    /// after a gap in them longer than a heartbeat interval (two ticks: a
    /// poll failed, or was answered late, or this node did not run), every
    /// peer's count starts again at this poll. Without it a store outage
    /// longer than `down_after_ms` would make every watcher declare its
    /// peers down the moment the store came back (their heartbeats could
    /// not apply meanwhile either), fencing the whole cluster. Restarting
    /// only ever delays a declaration, so the timing rule holds as before.
    /// Rows that `left` keep their retention clock.
    fn restart_watch_after_gap(&mut self, now_ms: u64) {
        let gap = self
            .polled_ok_ms
            .is_none_or(|at| now_ms.saturating_sub(at) > 2 * self.tick_ms());
        self.polled_ok_ms = Some(now_ms);
        if !gap {
            return;
        }
        // A start (or a displaced process) watching its own id's row waits
        // for it to stand still the same way: the process holding the id
        // could not heartbeat through the outage either, and taking the id
        // then would make two processes of one node.
        if let Phase::Starting {
            watching: Some((_, _, since)),
        }
        | Phase::Displaced {
            watching: (_, _, since),
        } = &mut self.phase
        {
            *since = (*since).max(now_ms);
        }
        for seen in self.observed.values_mut() {
            if seen.row.state != MemberState::Left {
                seen.since_ms = seen.since_ms.max(now_ms);
            }
        }
    }

    /// This node's own row as a poll read it (`None`: there is none).
    fn own_polled(&mut self, now_ms: u64, own: Option<MemberRow>) {
        match self.phase.clone() {
            Phase::Starting { watching } => self.start_from(now_ms, own, watching),
            Phase::Fenced { row: None } if own.is_some() => {
                self.phase = Phase::Fenced { row: own };
                self.rejoin(now_ms);
            }
            Phase::Displaced { watching } => self.watch_displaced(now_ms, own, watching),
            _ => {}
        }
    }

    /// A listing could not be made or went wrong: the next poll starts it
    /// again from the version the view holds.
    pub fn on_list_failed(&mut self) {
        self.listing = None;
    }

    /// One page of a listing, read at `now_ms`.
    pub fn on_listed(&mut self, now_ms: u64, page: MemberPage) {
        let Some(listing) = self.listing else {
            return;
        };
        self.check_lease(now_ms);
        let after = page.last();
        for row in page.rows {
            if row.node_id == self.me {
                self.own_listed(now_ms, Some(row));
            } else if !row.node_id.is_none() {
                self.merge(now_ms, row);
            }
        }
        for node in page.deleted {
            if node == self.me {
                self.own_listed(now_ms, None);
            } else if self.observed.remove(&node).is_some() {
                self.ring_dirty = true;
                self.events.push(Event::Removed { node });
            }
        }
        match after.filter(|_| page.more) {
            Some(after) => self.actions.push(Action::List {
                since: listing.since,
                after,
            }),
            None => {
                self.listing = None;
                self.listed = Some(listing.upto);
            }
        }
    }

    /// This node's own row changed (`None`: it was deleted): while it
    /// serves, a row showing it declared down, or a later incarnation,
    /// ends this incarnation.
    fn own_listed(&mut self, now_ms: u64, own: Option<MemberRow>) {
        let Phase::Serving(serving) = &self.phase else {
            return;
        };
        let lost = match &own {
            Some(row) => {
                row.incarnation > serving.incarnation
                    || (row.incarnation == serving.incarnation && row.state == MemberState::Down)
            }
            // Deleted: only a row that left is, so only a node that wrote
            // `left` and lingers sees it, and it serves nothing any more.
            None => serving.state != MemberState::Left,
        };
        if lost {
            self.lose(now_ms, own, "the membership table shows it");
        }
    }

    /// Takes a row read at `now_ms` into the view, unless the view holds a
    /// later version of it (reads may cross: versions only grow).
    fn merge(&mut self, now_ms: u64, row: MemberRow) {
        let node = row.node_id;
        let changed = match self.observed.get_mut(&node) {
            Some(seen) if row.version < seen.row.version => return,
            Some(seen) => {
                // A row that stays `left` keeps its retention clock: a
                // lingering process's heartbeats move its version, not
                // its departure.
                let still_left = seen.row.state == MemberState::Left
                    && row.state == MemberState::Left
                    && seen.row.incarnation == row.incarnation;
                if row.version != seen.row.version && !still_left {
                    seen.since_ms = now_ms;
                }
                let changed =
                    seen.row.incarnation != row.incarnation || seen.row.state != row.state;
                seen.row = row.clone();
                changed
            }
            None => {
                self.observed.insert(
                    node,
                    Observed {
                        row: row.clone(),
                        since_ms: now_ms,
                        declaring: false,
                        deleting: false,
                    },
                );
                true
            }
        };
        if changed {
            self.ring_dirty = true;
            self.events.push(Event::Member { row });
        }
    }

    /// Declares down every watched member whose row, as this poll read
    /// it (`read`), stood at one version for `down_after_ms` (or its own
    /// lease and margin, when longer: `down_wait_ms`), by CAS on
    /// that version. Only a node that serves judges: its watch list is its
    /// own view's. A member the poll did not read (the ring changed since
    /// it was sent) waits for the next poll: its row as last read may be
    /// old, and a CAS on it would only fail.
    fn judge_watched(&mut self, now_ms: u64, read: &[NodeId]) {
        if !matches!(self.phase, Phase::Serving(_)) {
            return;
        }
        let watched = self.watched().to_vec();
        for node in watched.into_iter().filter(|node| read.contains(node)) {
            let Some(seen) = self.observed.get_mut(&node) else {
                continue;
            };
            let wait_ms = super::down_wait_ms(self.timers, seen.row.timers);
            let stalled = now_ms.saturating_sub(seen.since_ms) >= wait_ms;
            let stalled = stalled || mutant::active(Mutant::DeclareMovedRow);
            if seen.row.state.is_ended() || !stalled || seen.declaring {
                continue;
            }
            seen.declaring = true;
            let write = MemberWrite {
                row: MemberRow {
                    state: MemberState::Down,
                    ..seen.row.clone()
                },
                condition: MemberCondition::VersionEquals(seen.row.version),
            };
            self.actions.push(Action::Write {
                tag: WriteTag::DeclareDown { node },
                write,
            });
        }
    }

    /// The answer to a declaration of `node`.
    pub(super) fn declared(
        &mut self,
        now_ms: u64,
        node: NodeId,
        write: &MemberWrite,
        outcome: MemberOutcome,
    ) {
        if let Some(seen) = self.observed.get_mut(&node) {
            seen.declaring = false;
        }
        match outcome {
            MemberOutcome::Applied(version) => self.merge(now_ms, write.applied(version)),
            // A late heartbeat won (or another watcher declared first):
            // the row as it stands is a fresh read.
            MemberOutcome::Conflict(Some(row)) => self.merge(now_ms, row),
            MemberOutcome::Conflict(None) | MemberOutcome::Indeterminate => {}
        }
    }

    /// The lowest live node deletes the rows of nodes that left at least
    /// `left_retention_ms` ago (by its clock, since it first read them so).
    pub(super) fn delete_left(&mut self, now_ms: u64) {
        if !matches!(self.phase, Phase::Serving(_)) {
            return;
        }
        self.watched();
        if self.lowest_live != self.me {
            return;
        }
        for seen in self.observed.values_mut() {
            let due = now_ms.saturating_sub(seen.since_ms) >= self.left_retention_ms;
            if seen.row.state != MemberState::Left || seen.deleting || !due {
                continue;
            }
            seen.deleting = true;
            self.actions.push(Action::Delete {
                node: seen.row.node_id,
                version: seen.row.version,
            });
        }
    }

    /// The answer to a deletion of `node`'s row (`Err`: no answer, or a
    /// store error; the next tick tries again).
    pub fn on_deleted(
        &mut self,
        now_ms: u64,
        node: NodeId,
        outcome: Result<MemberOutcome, super::MemberOpError>,
    ) {
        if let Some(seen) = self.observed.get_mut(&node) {
            seen.deleting = false;
        }
        match outcome {
            Ok(MemberOutcome::Applied(_) | MemberOutcome::Conflict(None)) => {
                if self.observed.remove(&node).is_some() {
                    self.ring_dirty = true;
                    self.events.push(Event::Removed { node });
                }
            }
            Ok(MemberOutcome::Conflict(Some(row))) => self.merge(now_ms, row),
            Ok(MemberOutcome::Indeterminate) | Err(_) => {}
        }
    }
}
