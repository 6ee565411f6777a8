//! The membership driver of each simulated node: the real
//! `cluster::membership::Membership` against a simulated membership table,
//! whose reads and writes go through the same faulty store as the records,
//! and its events turned into the router calls a node makes on every core.

use rand::RngExt;

use super::check::Invariant;
use super::faults::WriteFate;
use super::world::{Event, World};
use crate::cluster::membership::{
    Action, Event as MemberEvent, MemberOpError, Membership, WriteTag,
};
use crate::ids::NodeId;
use crate::store::{MemberOutcome, MemberPage, MemberPoll, MemberWrite};

/// A membership table operation's answer, on its way to the node.
pub(super) enum MemberReply {
    Polled(MemberPoll),
    PollFailed,
    Listed(MemberPage),
    ListFailed,
    Deleted {
        node: NodeId,
        outcome: Result<MemberOutcome, ()>,
    },
    Written {
        tag: WriteTag,
        write: Box<MemberWrite>,
        outcome: Result<MemberOutcome, ()>,
    },
}

impl World {
    /// Runs `f` on `node`'s membership machine with the node's clock, then
    /// performs what it asked for.
    pub(super) fn with_membership(&mut self, node: u64, f: impl FnOnce(&mut Membership, u64)) {
        let true_now = self.now_ms;
        let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) else {
            return;
        };
        let now = sim_node.clock.local(true_now);
        let Some(membership) = sim_node.membership.as_mut() else {
            return;
        };
        f(membership, now);
        if let Err(broken) = membership.check(now) {
            self.safety.fail(Invariant::Membership, broken);
        }
        self.member_effects(node);
    }

    pub(super) fn member_tick(&mut self, node: u64, process: u64) {
        let mut next = None;
        self.with_membership(node, |m, now| {
            m.on_tick(now);
            next = Some(now + m.tick_ms());
        });
        if let (Some(next), Some(sim_node)) = (next, self.nodes.get(&node)) {
            let at = sim_node.clock.true_at(next).max(self.now_ms + 1);
            self.schedule(at, Event::MemberTick { node, process });
        }
    }

    /// Sends the machine's table operations to the store and turns its
    /// events into router calls, until it has nothing more to say.
    fn member_effects(&mut self, node: u64) {
        loop {
            let Some(sim_node) = self.nodes.get_mut(&node).filter(|n| n.up) else {
                return;
            };
            let process = sim_node.process;
            let Some(membership) = sim_node.membership.as_mut() else {
                return;
            };
            let actions = membership.take_actions();
            let events = membership.take_events();
            if actions.is_empty() && events.is_empty() {
                return;
            }
            for action in actions {
                let at = self.now_ms + self.rng.random_range(1..=10);
                self.schedule(
                    at,
                    Event::MemberApply {
                        node,
                        process,
                        action,
                    },
                );
            }
            for event in events {
                self.member_event(node, event);
            }
        }
    }

    /// What the real node does with each membership event.
    fn member_event(&mut self, node: u64, event: MemberEvent) {
        if self.trace {
            eprintln!("{} n{node} membership: {event:?}", self.now_ms);
        }
        match event {
            MemberEvent::Joined { incarnation } => self.join_cores(node, incarnation),
            MemberEvent::Refused { .. } => {
                // A start refused: the process exits with an error.
                self.report.refused_starts += 1;
                self.take_down(node);
            }
            MemberEvent::Lease { until_ms } => {
                self.with_cores(node, |c, now| c.extend_lease(now, until_ms))
            }
            MemberEvent::Fenced { .. } => self.with_cores(node, |c, now| c.fence(now)),
            MemberEvent::LeaseLapsed { at_ms, .. } => {
                self.report.lapses += 1;
                self.with_cores(node, |c, _| c.end_lease(at_ms))
            }
            MemberEvent::LeaseRenewed { .. } => {}
            MemberEvent::TakenOver { .. } => {
                // The process exits, as a refused start does.
                self.report.refused_starts += 1;
                self.take_down(node);
            }
            MemberEvent::Rejoined {
                incarnation,
                lease_until_ms,
            } => {
                self.report.rejoins += 1;
                self.with_cores(node, |c, now| c.rejoin(now, incarnation, lease_until_ms));
            }
            MemberEvent::Member { row } => self.with_cores(node, |c, _| {
                c.on_member(row.node_id, row.incarnation, row.state)
            }),
            // The router keeps what it learnt of the node (its last
            // incarnation ended), as a real node's cores do.
            MemberEvent::Removed { .. } => {}
        }
    }

    /// A table operation reaches the store, unless the node is cut off
    /// from it; a read answers at once, a write after a delay.
    pub(super) fn member_apply(&mut self, node: u64, process: u64, action: Action) {
        let cut = self.store_cut(node);
        let reply = match action {
            Action::Poll { nodes } => {
                let failed = cut || (self.faults && self.rng.random_range(0..100) < 4);
                let reply = if failed {
                    MemberReply::PollFailed
                } else {
                    MemberReply::Polled(self.members.poll(&nodes))
                };
                return self.member_read_reply(node, process, reply);
            }
            Action::List { since, after } => {
                let failed = cut || (self.faults && self.rng.random_range(0..100) < 4);
                let reply = if failed {
                    MemberReply::ListFailed
                } else {
                    MemberReply::Listed(self.members.list_page(since, after))
                };
                return self.member_read_reply(node, process, reply);
            }
            Action::Delete {
                node: gone,
                version,
            } => {
                let outcome = if cut || (self.faults && self.rng.random_range(0..100) < 4) {
                    Err(())
                } else {
                    Ok(self.members.delete(gone, version))
                };
                if outcome
                    .as_ref()
                    .is_ok_and(|o| matches!(o, MemberOutcome::Applied(_)))
                {
                    self.report.deletions += 1;
                }
                MemberReply::Deleted {
                    node: gone,
                    outcome,
                }
            }
            Action::Write { tag, write } => {
                let outcome = if cut {
                    Err(())
                } else {
                    self.member_write(tag, &write)
                };
                MemberReply::Written {
                    tag,
                    write: Box::new(write),
                    outcome,
                }
            }
        };
        let at = self.now_ms + self.rng.random_range(1..=10);
        self.schedule(
            at,
            Event::MemberReply {
                node,
                process,
                reply,
            },
        );
    }

    /// A read is answered when it is made: its latency was the trip here.
    fn member_read_reply(&mut self, node: u64, process: u64, reply: MemberReply) {
        let event = Event::MemberReply {
            node,
            process,
            reply,
        };
        self.process(event);
    }

    /// Applies one membership write under a random fate, as the records'
    /// writes: busy, or Indeterminate and applied now, never, or later.
    fn member_write(&mut self, tag: WriteTag, write: &MemberWrite) -> Result<MemberOutcome, ()> {
        let fate = self.write_fate();
        if fate == WriteFate::Normal {
            let outcome = self.members.write(write);
            self.count_declaration(tag, &outcome);
            return Ok(outcome);
        }
        self.report.store_faults += 1;
        match fate {
            WriteFate::IndeterminateApplied => self.member_late_apply(tag, write),
            WriteFate::IndeterminateLate => {
                let at = self.now_ms + self.rng.random_range(20..=200);
                let event = Event::MemberLateApply {
                    tag,
                    write: write.clone(),
                };
                self.schedule(at, event);
            }
            WriteFate::Normal | WriteFate::Busy | WriteFate::IndeterminateNotApplied => {}
        }
        Err(())
    }

    /// A membership write whose answer was lost reaches the table (if its
    /// CAS still holds).
    pub(super) fn member_late_apply(&mut self, tag: WriteTag, write: &MemberWrite) {
        let outcome = self.members.write(write);
        self.count_declaration(tag, &outcome);
    }

    fn count_declaration(&mut self, tag: WriteTag, outcome: &MemberOutcome) {
        if let (WriteTag::DeclareDown { node }, MemberOutcome::Applied(_)) = (tag, outcome) {
            self.report.declarations += 1;
            if self.trace {
                eprintln!("{} declared down: {node:?}", self.now_ms);
            }
        }
    }

    pub(super) fn member_reply(&mut self, node: u64, reply: MemberReply) {
        self.with_membership(node, |m, now| match reply {
            MemberReply::Polled(poll) => m.on_polled(now, poll),
            MemberReply::PollFailed => m.on_poll_failed(),
            MemberReply::Listed(page) => m.on_listed(now, page),
            MemberReply::ListFailed => m.on_list_failed(),
            MemberReply::Deleted { node, outcome } => {
                m.on_deleted(now, node, outcome.map_err(|()| MemberOpError::CutOff))
            }
            MemberReply::Written {
                tag,
                write,
                outcome,
            } => m.on_written(
                now,
                tag,
                &write,
                outcome.map_err(|()| MemberOpError::CutOff),
            ),
        });
    }

    /// Whether `node` is cut off from the store now.
    pub(super) fn store_cut(&self, node: u64) -> bool {
        self.nodes
            .get(&node)
            .is_some_and(|n| n.store_cut_until_ms > self.now_ms)
    }

    /// Whether every running node has joined and serves, unfenced, and
    /// every node's view of every other names its current incarnation.
    pub(super) fn membership_settled(&self) -> bool {
        let live: Vec<(NodeId, u64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.serving())
            .map(|(id, n)| (NodeId(*id), n.cores[0].incarnation()))
            .collect();
        self.nodes.iter().all(|(id, n)| {
            if !n.serving() || n.paused.is_some() {
                return false;
            }
            let now = n.clock.local(self.now_ms);
            let Some(membership) = n.membership.as_ref() else {
                return false;
            };
            let views = live.iter().all(|(other, incarnation)| {
                *other == NodeId(*id)
                    || membership.members().any(|row| {
                        row.node_id == *other
                            && row.incarnation == *incarnation
                            && !row.state.is_ended()
                    })
            });
            views && n.cores.iter().all(|c| c.may_serve(now))
        })
    }
}
