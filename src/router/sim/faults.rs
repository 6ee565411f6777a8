//! Fault injection: the fake network (drop, delay, reorder, duplicate,
//! partition) and the fake store (busy, Indeterminate writes applied now, never
//! or later, failed loads) between the simulated nodes.

use rand::Rng;

use super::world::{Event, World};
use crate::router::{NodeMessage, StoreFailure, StoreOp, StoreReply, StoreToken};
use crate::store::{RecordWrite, WriteOutcome};

/// How the fake store treats one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteFate {
    Normal,
    Busy,
    IndeterminateApplied,
    IndeterminateNotApplied,
    /// Answered Indeterminate now, applied (if its CAS still holds) later.
    IndeterminateLate,
}

impl World {
    /// Whether a message from `a` to `b` gets through (faults drop some).
    pub(super) fn link_ok(&mut self, a: u64, b: u64) -> bool {
        if self.partitions.contains(&(a.min(b), a.max(b))) {
            return false;
        }
        !(self.faults && self.rng.gen_range(0..100) < 3)
    }

    pub(super) fn send(&mut self, from: u64, to: u64, message: NodeMessage) {
        if !self.link_ok(from, to) {
            self.report.dropped_messages += 1;
            return;
        }
        // Delays up to 20 ms reorder messages. Requests are never duplicated:
        // node links are TCP and requests are not idempotent; the other
        // messages are, and are sometimes delivered twice.
        let duplicate = self.faults
            && !matches!(message, NodeMessage::Routed { .. })
            && self.rng.gen_range(0..100) < 3;
        if duplicate {
            let at = self.now_ms + self.rng.gen_range(1..=20);
            self.schedule(
                at,
                Event::Deliver {
                    to,
                    from,
                    message: message.clone(),
                },
            );
        }
        let at = self.now_ms + self.rng.gen_range(1..=20);
        self.schedule(at, Event::Deliver { to, from, message });
    }

    fn write_fate(&mut self) -> WriteFate {
        if !self.faults {
            return WriteFate::Normal;
        }
        match self.rng.gen_range(0..100) {
            0..=2 => WriteFate::Busy,
            3..=4 => WriteFate::IndeterminateApplied,
            5..=6 => WriteFate::IndeterminateNotApplied,
            7 => WriteFate::IndeterminateLate,
            _ => WriteFate::Normal,
        }
    }

    /// Applies one write under a random fate; `None`: refused as busy,
    /// nothing applied.
    pub(super) fn write_one(&mut self, node: u64, write: &RecordWrite) -> Option<WriteOutcome> {
        let fate = self.write_fate();
        if fate != WriteFate::Normal {
            self.report.store_faults += 1;
        }
        match fate {
            WriteFate::Normal => {
                let outcome = self.table.write(write);
                if let WriteOutcome::Applied(cas) = outcome {
                    self.checker.applied(node, write.key, cas);
                }
                Some(outcome)
            }
            WriteFate::Busy => None,
            WriteFate::IndeterminateApplied => {
                self.table.write(write);
                Some(WriteOutcome::Indeterminate)
            }
            WriteFate::IndeterminateNotApplied => Some(WriteOutcome::Indeterminate),
            WriteFate::IndeterminateLate => {
                let at = self.now_ms + self.rng.gen_range(20..=200);
                self.schedule(
                    at,
                    Event::LateApply {
                        write: write.clone(),
                    },
                );
                Some(WriteOutcome::Indeterminate)
            }
        }
    }

    pub(super) fn store_apply(
        &mut self,
        node: u64,
        incarnation: u64,
        core: u32,
        token: StoreToken,
        op: StoreOp,
    ) {
        let reply = match op {
            StoreOp::Load(key) => {
                if self.faults && self.rng.gen_range(0..100) < 4 {
                    self.report.store_faults += 1;
                    let busy = self.rng.gen_bool(0.5);
                    StoreReply::Failed(if busy {
                        StoreFailure::Busy
                    } else {
                        StoreFailure::Failed
                    })
                } else {
                    StoreReply::Loaded(self.table.load(key))
                }
            }
            StoreOp::Write(write) => match self.write_one(node, &write) {
                Some(outcome) => StoreReply::Written(outcome),
                None => StoreReply::Failed(StoreFailure::Busy),
            },
            StoreOp::WriteBatch(writes) => StoreReply::WrittenBatch(
                writes
                    .iter()
                    .map(|w| {
                        self.write_one(node, w)
                            .unwrap_or(WriteOutcome::Indeterminate)
                    })
                    .collect(),
            ),
        };
        let at = self.now_ms + self.rng.gen_range(1..=10);
        self.schedule(
            at,
            Event::StoreReply {
                node,
                incarnation,
                core,
                token,
                reply,
            },
        );
    }
}
