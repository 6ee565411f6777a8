//! The fake store between the simulated nodes and its faults: busy
//! answers, Indeterminate writes applied now, never or later, failed
//! loads, nodes cut off from the store, and an outside writer that
//! re-saves records behind their owners' backs.

use rand::RngExt;
use wire::ObjectKey;

use super::check::Invariant;
use super::world::{Event, World};
use crate::router::{StoreFailure, StoreOp, StoreReply, StoreToken};
use crate::store::{CasVersion, RecordWrite, WriteCondition, WriteOutcome};

/// How long a node cut off from the store waits before an operation counts
/// as failed (the driver's request timeout, shortened like every timer).
const CUT_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 30..=60;

/// How the fake store treats one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteFate {
    Normal,
    Busy,
    IndeterminateApplied,
    IndeterminateNotApplied,
    /// Answered Indeterminate now, applied (if its CAS still holds) later.
    IndeterminateLate,
}

impl World {
    pub(super) fn write_fate(&mut self) -> WriteFate {
        if !self.faults {
            return WriteFate::Normal;
        }
        if self.store_stalled_until_ms > self.now_ms {
            // A frozen store: every write times out; one cut off by its
            // deadline may still commit, now or once the store resumes.
            return match self.rng.random_range(0..10) {
                0..=3 => WriteFate::IndeterminateApplied,
                4..=6 => WriteFate::IndeterminateNotApplied,
                _ => WriteFate::IndeterminateLate,
            };
        }
        match self.rng.random_range(0..100) {
            0..=2 => WriteFate::Busy,
            3..=4 => WriteFate::IndeterminateApplied,
            5..=6 => WriteFate::IndeterminateNotApplied,
            7 => WriteFate::IndeterminateLate,
            _ => WriteFate::Normal,
        }
    }

    /// Applies one write of `node` under a random fate; `None`: refused as
    /// busy, nothing applied.
    fn write_one(&mut self, node: u64, write: &RecordWrite) -> Option<WriteOutcome> {
        let fate = self.write_fate();
        if fate != WriteFate::Normal {
            self.report.store_faults += 1;
        }
        match fate {
            WriteFate::Normal => Some(self.apply_write(node, write)),
            WriteFate::Busy => None,
            WriteFate::IndeterminateApplied => {
                self.apply_write(node, write);
                Some(WriteOutcome::Indeterminate)
            }
            WriteFate::IndeterminateNotApplied => Some(WriteOutcome::Indeterminate),
            WriteFate::IndeterminateLate => {
                let at = self.now_ms + self.rng.random_range(20..=200);
                let write = write.clone();
                self.schedule(at, Event::LateApply { node, write });
                Some(WriteOutcome::Indeterminate)
            }
        }
    }

    /// Applies `write` of `node` to the table, checking at the write the
    /// invariants a write can break.
    pub(super) fn apply_write(&mut self, node: u64, write: &RecordWrite) -> WriteOutcome {
        let previous = self.table.load(write.key);
        let outcome = self.table.write(write);
        self.changes.store = true;
        match &outcome {
            WriteOutcome::Applied(cas) => {
                // Applied, whether or not its answer says so: a node that
                // later finds the record this write left (a conflict that
                // returns it) may rightly hold its copy at this version.
                self.checker.applied(node, write.key, *cas);
                self.check_applied(node, previous.as_ref(), write)
            }
            WriteOutcome::Conflict(_) => self.report.cas_conflicts += 1,
            WriteOutcome::Indeterminate => {}
        }
        outcome
    }

    pub(super) fn store_apply(
        &mut self,
        node: u64,
        process: u64,
        core: u32,
        token: StoreToken,
        op: StoreOp,
    ) {
        let cut = self.store_cut(node);
        let reply = match op {
            StoreOp::Load(_) if cut => StoreReply::Failed(StoreFailure::Failed),
            StoreOp::Load(key) => {
                if self.faults && self.rng.random_range(0..100) < 4 {
                    self.report.store_faults += 1;
                    let busy = self.rng.random_bool(0.5);
                    StoreReply::Failed(if busy {
                        StoreFailure::Busy
                    } else {
                        StoreFailure::Failed
                    })
                } else {
                    StoreReply::Loaded(self.table.load(key))
                }
            }
            StoreOp::Write(_) if cut => StoreReply::Written(WriteOutcome::Indeterminate),
            StoreOp::Write(write) => match self.write_one(node, &write) {
                Some(outcome) => StoreReply::Written(outcome),
                None => StoreReply::Failed(StoreFailure::Busy),
            },
            StoreOp::WriteBatch(writes) => StoreReply::WrittenBatch(
                writes
                    .iter()
                    .map(|w| {
                        if cut {
                            return WriteOutcome::Indeterminate;
                        }
                        self.write_one(node, w)
                            .unwrap_or(WriteOutcome::Indeterminate)
                    })
                    .collect(),
            ),
        };
        let delay = if cut {
            self.rng.random_range(CUT_TIMEOUT_MS)
        } else {
            self.rng.random_range(1..=10)
        };
        self.schedule(
            self.now_ms + delay,
            Event::StoreReply {
                node,
                process,
                core,
                token,
                reply,
            },
        );
    }

    /// Delivers a store answer, then checks that no copy the answer showed
    /// stale is still writable, and that no copy was dropped on meeting a
    /// record its own node's live incarnation left.
    pub(super) fn store_reply(
        &mut self,
        node: u64,
        core: u32,
        token: StoreToken,
        reply: StoreReply,
    ) {
        let shown = shown_records(&reply);
        let own = self.own_records_held(node, core, &reply);
        self.on_core(node, core, |c, now| c.on_store_reply(now, token, reply));
        for (key, cas) in shown {
            self.check_told_stale(node, core, key, cas);
        }
        for (key, cas) in own {
            self.check_own_copy_kept(node, core, key, cas);
        }
    }

    /// The conflicts in `reply` whose record a write of `node`'s live
    /// incarnation left, for keys of which its core `core` holds a copy.
    fn own_records_held(
        &self,
        node: u64,
        core: u32,
        reply: &StoreReply,
    ) -> Vec<(ObjectKey, CasVersion)> {
        let Some(router) = self
            .nodes
            .get(&node)
            .filter(|n| n.serving())
            .map(|n| &n.cores[core as usize])
        else {
            return Vec::new();
        };
        let outcomes = match reply {
            StoreReply::Written(outcome) => std::slice::from_ref(outcome),
            StoreReply::WrittenBatch(outcomes) => outcomes.as_slice(),
            StoreReply::Loaded(_) | StoreReply::Failed(_) => &[],
        };
        outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                WriteOutcome::Conflict(Some(record)) => Some(record),
                _ => None,
            })
            .filter(|record| {
                record.owner_node.0 == node
                    && record.owner_incarnation == router.incarnation()
                    && self
                        .checker
                        .was_applied(node, record.key, record.cas_version)
            })
            .filter(|record| {
                router
                    .entries()
                    .any(|v| v.key == record.key && (v.writable || v.aside))
            })
            .map(|record| (record.key, record.cas_version))
            .collect()
    }

    /// After `node` met the record its own write left at `cas`: its copy
    /// of `key` is still there (the record is its own, not another's).
    fn check_own_copy_kept(&mut self, node: u64, core: u32, key: ObjectKey, cas: CasVersion) {
        let Some(sim_node) = self.nodes.get(&node).filter(|n| n.serving()) else {
            return;
        };
        let kept = sim_node.cores[core as usize]
            .entries()
            .any(|v| v.key == key && (v.writable || v.aside));
        if !kept {
            let message = format!(
                "node {node} dropped its copy of {key:?} on meeting the record its own \
                 write left at {cas:?}"
            );
            self.safety.fail(Invariant::OwnCopyDropped, message);
        }
    }

    /// Cuts a random serving node off from the store (not from its peers)
    /// for a while: its heartbeats fail, its lease runs out, the others
    /// declare it down and claim its objects while it still forwards.
    pub(super) fn cut_random(&mut self) {
        let serving: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.serving())
            .map(|(id, _)| *id)
            .collect();
        if serving.is_empty() {
            return;
        }
        let node = serving[self.rng.random_range(0..serving.len())];
        let cluster = &self.config.cluster;
        let longest = 2 * cluster.down_after_ms;
        let duration = self
            .rng
            .random_range(cluster.heartbeat_interval_ms..=longest);
        if let Some(sim_node) = self.nodes.get_mut(&node) {
            sim_node.store_cut_until_ms = self.now_ms + duration;
            self.report.store_cuts += 1;
        }
    }

    /// Stalls the store's record writes for a while (shorter than
    /// `down_after_ms`: nobody is declared down for it): the writes of
    /// every node time out, some of them applied, so a copy meets several
    /// writes of unknown outcome in a row.
    pub(super) fn stall_store(&mut self) {
        let cluster = &self.config.cluster;
        let duration = self
            .rng
            .random_range(cluster.heartbeat_interval_ms..=cluster.down_after_ms);
        self.store_stalled_until_ms = self.now_ms + duration;
        self.report.store_stalls += 1;
    }

    /// An outside writer (an operator's repair, a migration) re-saves a
    /// record as it is: same owner, route and state, a new CAS version.
    /// Its owner's next save conflicts and must drop the copy, unless a
    /// write of the copy whose outcome is unknown said exactly the same:
    /// then the owner may take the record for that write's.
    pub(super) fn outside_write(&mut self, key: ObjectKey) {
        let Some(record) = self.table.load(key) else {
            return;
        };
        let write = RecordWrite {
            key,
            condition: WriteCondition::CasEquals(record.cas_version),
            owner_node: record.owner_node,
            owner_incarnation: record.owner_incarnation,
            route_version: record.route_version,
            save_timepoint_ms: record.save_timepoint_ms,
            state: record.state,
        };
        if let WriteOutcome::Applied(cas) = self.apply_write(0, &write) {
            self.checker.resaved(key, cas);
        }
        self.report.outside_writes += 1;
    }
}

/// The records a store answer shows its receiver: a CAS conflict's current
/// record, or a load's.
fn shown_records(reply: &StoreReply) -> Vec<(ObjectKey, CasVersion)> {
    let mut shown = Vec::new();
    let mut add = |outcome: &WriteOutcome| {
        if let WriteOutcome::Conflict(Some(record)) = outcome {
            shown.push((record.key, record.cas_version));
        }
    };
    match reply {
        StoreReply::Loaded(Some(record)) => shown.push((record.key, record.cas_version)),
        StoreReply::Written(outcome) => add(outcome),
        StoreReply::WrittenBatch(outcomes) => outcomes.iter().for_each(add),
        StoreReply::Loaded(None) | StoreReply::Failed(_) => {}
    }
    shown
}
