//! The fake network between the simulated nodes: links that deliver late
//! and out of order, duplicate what may be duplicated, lose what was in
//! flight when a connection broke, and refuse a send (the router gets it
//! back with `on_send_failed`, as from the real driver) when the link is
//! down, partitioned, or its queue to a frozen peer is full.

use rand::RngExt;

use super::world::{Event, World};
use crate::ids::NodeId;
use crate::router::NodeMessage;

/// Messages one link queues for a peer that does not read them (a paused
/// process) before a send to it fails: the driver's `link_queue_max`,
/// shortened.
const LINK_QUEUE_MAX: usize = 16;

/// What a link does with one message.
enum Link {
    Deliver,
    /// Refused at the sender: the link is down or its queue is full.
    Refuse,
    /// Accepted, then lost with a connection that broke.
    Lose,
}

impl World {
    /// Whether a message from `a` to `b` gets through (faults drop some).
    pub(super) fn link_ok(&mut self, a: u64, b: u64) -> bool {
        if self.partitions.contains(&(a.min(b), a.max(b))) {
            return false;
        }
        !(self.faults && self.rng.random_range(0..100) < 3)
    }

    fn link(&mut self, from: u64, to: u64) -> Link {
        let broken = self.partitions.contains(&(from.min(to), from.max(to)));
        if broken || !self.serving(to) {
            // A link notices a dead peer or a partition most of the time;
            // what it had already accepted is lost.
            return if self.rng.random_range(0..100) < 80 {
                Link::Refuse
            } else {
                Link::Lose
            };
        }
        let queued = self.nodes.get(&to).map_or(0, |n| {
            n.held
                .iter()
                .filter(|event| matches!(event, Event::Deliver { from: f, .. } if *f == from))
                .count()
        });
        if queued >= LINK_QUEUE_MAX {
            return Link::Refuse;
        }
        if self.faults {
            match self.rng.random_range(0..100) {
                0..=1 => return Link::Refuse,
                2..=4 => return Link::Lose,
                _ => {}
            }
        }
        Link::Deliver
    }

    /// `Effect::SendToNode` of core `core` of `from`.
    pub(super) fn send(&mut self, from: u64, core: u32, to: u64, message: NodeMessage) {
        match self.link(from, to) {
            Link::Refuse => {
                self.report.send_failures += 1;
                let now = self.local_now(from);
                if let Some(sim_node) = self.nodes.get_mut(&from).filter(|n| n.serving()) {
                    sim_node.cores[core as usize].on_send_failed(now, NodeId(to), message);
                }
                return;
            }
            Link::Lose => {
                self.report.dropped_messages += 1;
                if let NodeMessage::Routed { request, .. } = &message {
                    self.answers.lost(request.id);
                }
                return;
            }
            Link::Deliver => {}
        }
        if let NodeMessage::Routed { request, .. } = &message {
            self.answers.moved(request.id, to);
        }
        // Delays up to 20 ms reorder messages. Requests are never duplicated:
        // node links are TCP and requests are not idempotent; the other
        // messages are, and are sometimes delivered twice.
        let duplicate = self.faults
            && !matches!(message, NodeMessage::Routed { .. })
            && self.rng.random_range(0..100) < 3;
        if duplicate {
            let at = self.now_ms + self.rng.random_range(1..=20);
            let message = message.clone();
            self.schedule(at, Event::Deliver { to, from, message });
        }
        let at = self.now_ms + self.rng.random_range(1..=20);
        self.schedule(at, Event::Deliver { to, from, message });
    }

    /// A message arrives; a process that does not serve (crashed, still
    /// joining) never reads it.
    pub(super) fn deliver(&mut self, to: u64, from: u64, message: NodeMessage) {
        if !self.serving(to) {
            if let NodeMessage::Routed { request, .. } = &message {
                self.answers.lost(request.id);
            }
            return;
        }
        let core = self.core_of(message.key());
        self.on_core(to, core, |c, now| {
            c.on_node_message(now, NodeId(from), message)
        });
    }
}
