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
            self.enqueue(Input::Request { head, request });
            return true;
        }
        match source {
            FrameSource::Core => false,
            FrameSource::Node(from) => match decode_node_message(message) {
                Some(message) => {
                    self.enqueue(Input::Node {
                        from,
                        message: Box::new(message),
                    });
                    true
                }
                None => false,
            },
        }
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
