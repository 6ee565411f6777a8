//! The router driver's cluster side: frames from other cores and nodes,
//! link failures, membership (members, the lease, fence and rejoin), and the
//! operations (`transfer`, drain) the node asks of a core.

use super::*;

impl RouterDriver {
    /// Takes a frame for the router, from another core or another node;
    /// returns any other frame.
    pub fn handle_frame(&self, source: FrameSource, frame: FrameBuf) -> Option<FrameBuf> {
        if self.handle_message(source, frame.message(), Instant::now) {
            None
        } else {
            Some(frame)
        }
    }

    /// Takes a message for the router, read where it lies (a link's frames
    /// are read in the link's buffer: what the core keeps of one, it
    /// decodes into its own types here); `false` for any other message.
    /// `arrived_at` gives the reading an answer is timed at (a link reads
    /// the clock once per receive, for every answer in it).
    pub fn handle_message(
        &self,
        source: FrameSource,
        message: &ArchivedMessage,
        arrived_at: impl FnOnce() -> Instant,
    ) -> bool {
        if let Some((origin, seq, outcome)) = decode_reply(message) {
            if origin == self.0.node {
                // A reply from a link was made by the node at its other end,
                // the object's owner; one from another core, on this node.
                let answered_by = match source {
                    FrameSource::Node(from) => from,
                    FrameSource::Core => self.0.node,
                };
                self.answer_local(seq, outcome, arrived_at(), answered_by);
            }
            return true;
        }
        // A request, from another core (entering the cluster here) or
        // routed from another node: the core handles both alike
        // (`on_node_message` hands a routed one to `on_request`), so one
        // from a link skips the boxed node message on the way.
        if let Some((head, request)) = decode_request(message) {
            match arrival_core(head.key, self.0.core_id, self.0.core_count) {
                None => self.enqueue(Input::Request { head, request }),
                Some(core) => {
                    self.count_misrouted(source, head.key, core);
                    self.submit_to_core(core, head, request);
                }
            }
            return true;
        }
        match source {
            FrameSource::Core => false,
            FrameSource::Node(from) => match decode_node_message(message) {
                Some(message) => {
                    self.node_message_arrived(from, message);
                    true
                }
                None => false,
            },
        }
    }

    /// A node message from `from`: handled here when its key maps to this
    /// core. One that does not (its sender picked the core from a row of
    /// an earlier incarnation of this node, which ran another
    /// `cores.count`) is never handled here, where the key's entry is not:
    /// a transfer is refused (the sender's refusal path, as when this node
    /// is busy with the key), anything else is dropped (a route update is
    /// a hint; an acknowledgement's transfer ends at its timeout).
    fn node_message_arrived(&self, from: NodeId, message: NodeMessage) {
        let stateless = matches!(message, NodeMessage::ServiceRequest { .. });
        let Some(core) =
            arrival_core(message.key(), self.0.core_id, self.0.core_count).filter(|_| !stateless)
        else {
            return self.enqueue(Input::Node {
                from,
                message: Box::new(message),
            });
        };
        self.count_misrouted(FrameSource::Node(from), message.key(), core);
        if let NodeMessage::RouterTransfer(transfer) = message {
            let refusal = NodeMessage::TransferAck {
                key: transfer.key,
                transfer_id: transfer.transfer_id,
                accepted: false,
            };
            self.send_to_node(clock::now_ms(), from, refusal);
        }
    }

    /// Counts (as unroutable) and logs a message for `key` that reached
    /// this core though the key maps to `core`.
    fn count_misrouted(&self, source: FrameSource, key: ObjectKey, core: usize) {
        self.0
            .unroutable_total
            .set(self.0.unroutable_total.get() + 1);
        let from = match source {
            FrameSource::Node(node) => node.0,
            FrameSource::Core => self.0.node.0,
        };
        tracing::debug!(
            from,
            core = self.0.core_id,
            right_core = core,
            ?key,
            "a message for another core of this node arrived here; passed on"
        );
    }

    /// A frame a link took for `node` and gave back undelivered (the link
    /// failed before writing it): the core answers or re-resolves it as
    /// any send failure. Replies and session frames are dropped: their
    /// requests time out at the gateway that made them.
    pub fn send_failed(&self, node: NodeId, frame: FrameBuf) {
        if let Some(message) = decode_node_message(frame.message()) {
            self.enqueue(Input::SendFailed {
                node,
                message: Box::new(message),
            });
        }
    }

    /// A link of this core to `node` failed after it was up (the peer went
    /// silent, or the connection broke): requests it carried may never
    /// have arrived, so the ones waiting on `node` are answered TIMEOUT now
    /// rather than at the gateway's timeout (their outcome is unknown
    /// either way).
    pub fn link_lost(&self, node: NodeId) {
        self.enqueue(Input::LinkLost { node });
    }

    /// Membership's view of another node.
    pub fn on_member(&self, node: NodeId, incarnation: u64, state: MemberState) {
        self.enqueue(Input::Member {
            node,
            incarnation,
            state,
        });
    }

    /// The node's membership lease now runs until `until_ms` (this node's
    /// router clock).
    pub fn extend_lease(&self, until_ms: u64) {
        self.enqueue(Input::Lease { until_ms });
    }

    /// Membership ended the lease at `at_ms` at the latest (time jumped).
    pub fn end_lease(&self, at_ms: u64) {
        self.enqueue(Input::LeaseEnd { at_ms });
    }

    /// What the core's router does now: its incarnation, fence and lease.
    pub fn standing(&self) -> CoreStanding {
        let core = self.0.core.borrow();
        CoreStanding {
            incarnation: core.incarnation(),
            fenced: core.is_fenced(),
            lease_until_ms: core.lease_until_ms().unwrap_or(u64::MAX),
        }
    }

    /// The node was declared down: serve nothing until `rejoin`.
    pub fn fence(&self) {
        self.enqueue(Input::Fence);
    }

    /// The node rejoined as `incarnation`.
    pub fn rejoin(&self, incarnation: u64, lease_until_ms: u64) {
        self.enqueue(Input::Rejoin {
            incarnation,
            lease_until_ms,
        });
    }

    /// No new object is placed on this node while it drains.
    pub fn set_draining(&self, draining: bool) {
        self.enqueue(Input::Draining(draining));
    }

    /// Transfers `key` (owned by this core) to `target`, shipping its state;
    /// `done` is called once, when the target confirmed, refused or did
    /// not answer, or at once when the transfer cannot start.
    pub fn transfer(
        &self,
        key: ObjectKey,
        target: NodeId,
        done: impl FnOnce(TransferReply) + 'static,
    ) {
        self.enqueue(Input::Transfer {
            key,
            target,
            done: Box::new(done),
        });
    }

    /// Starts draining this core: nothing new is placed here and every
    /// object is transferred away, `concurrency` at a time.
    pub fn start_drain(&self, concurrency: usize) {
        self.enqueue(Input::Drain { concurrency });
    }

    /// Lets the drain start transfers that a change elsewhere (a member
    /// up again) made possible; the drain's own transfers step it already.
    pub fn drain_step(&self) {
        self.enqueue(Input::DrainStep);
    }

    /// The moves that would leave each of this core's objects on its
    /// rendezvous node, once the core knows every node of `expected` (see
    /// `RouterCore::rebalance_plan`).
    pub fn rebalance_plan(&self, expected: &[NodeId]) -> Option<Vec<(ObjectKey, NodeId)>> {
        self.0
            .core
            .borrow()
            .rebalance_plan(clock::now_ms(), expected)
    }

    /// How far this core's drain is (a walk over its entries).
    pub fn drain_progress(&self) -> DrainProgress {
        self.0.core.borrow().drain_progress()
    }
}

/// The core of this node a message for `key` must go to, when it is not
/// `core_id`: a sender picks the core from its view of this node's row,
/// and a view that still shows an earlier incarnation (another
/// `cores.count`) picks by the wrong count. Handling it here would put the
/// object on two cores of one node.
fn arrival_core(key: ObjectKey, core_id: usize, core_count: u32) -> Option<usize> {
    let core = shard_of(key, core_count) as usize;
    (core != core_id).then_some(core)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node restarted from one core to two: senders that still see one
    /// core send every key to core 0; the keys of core 1 go on to it.
    #[test]
    fn a_message_for_another_core_is_passed_on_to_it() {
        let keys = (0..64).map(|id| ObjectKey::new(2, 0, id));
        let (mut here, mut there) = (0, 0);
        for key in keys {
            match arrival_core(key, 0, 2) {
                None => here += 1,
                Some(core) => {
                    assert_eq!(core, 1);
                    assert_eq!(arrival_core(key, core, 2), None);
                    there += 1;
                }
            }
            assert_eq!(arrival_core(key, 0, 1), None);
        }
        assert!(here > 0 && there > 0, "{here} {there}");
    }
}

/// What one core's router does (its incarnation, fence and lease), for
/// `/cluster`: every core follows the node's one membership decision, and
/// this shows that it really did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStanding {
    pub incarnation: u64,
    pub fenced: bool,
    /// The lease end the core holds (router clock); 0: none yet.
    pub lease_until_ms: u64,
}

impl CoreStanding {
    /// Whether the core may serve objects at `now_ms`.
    pub fn is_serving(&self, now_ms: u64) -> bool {
        !self.fenced && now_ms < self.lease_until_ms
    }
}
