//! What the driver reaches through others: the client side (the gateway,
//! through the services) and the links to other nodes (the cluster). Both
//! are traits the router defines, so it depends on neither.

use std::time::Instant;

use wire::frame::Message;
use wire::ObjectKey;

use super::ReplyRoute;
use crate::ids::NodeId;
use crate::router::types::{ClientRef, Outcome};

/// Where answers, pushes, kicks and session checks for this node's client
/// sessions go. The services implement it over the gateway.
pub trait ClientSide {
    /// The one answer to a client request this core submitted, timed at
    /// `answered_at` (a reading of this core's clock taken while answering),
    /// made by node `answered_by` (this one, or the owner of the object it
    /// was sent to).
    fn answer(
        &self,
        route: ReplyRoute,
        outcome: Outcome,
        answered_at: Instant,
        answered_by: NodeId,
    );
    /// A server-to-client PUSH for a session of this node (any core).
    fn push(&self, client: ClientRef, route_id: u32, body: &[u8]);
    /// Closes a session of this node (any core) in the kick order.
    fn kick(&self, client: ClientRef);
    /// Whether a session of this node (any core) still stands as `client`
    /// names it; if not, its target is told it was unbound.
    fn check_session(&self, client: ClientRef);
    /// A session of a node that has no live incarnation any more: its
    /// target is told it was unbound.
    fn session_gone(&self, client: ClientRef);
}

/// Where a message goes on another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The core that owns this key there (`shard_of` over its cores).
    Object(ObjectKey),
    /// That core.
    Core(usize),
}

/// Why a link did not take a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRefusal {
    /// The link's bounded send queue is full.
    Full,
    /// The link is down (connecting after a failure, or backing off).
    Down,
    /// Membership knows no such node (or its cores).
    UnknownNode,
}

impl LinkRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRefusal::Full => "queue_full",
            LinkRefusal::Down => "link_down",
            LinkRefusal::UnknownNode => "unknown_node",
        }
    }
}

/// How the driver reaches other nodes; the cluster implements it. A send
/// never waits: the message is queued or refused at once.
pub trait NodeLinks {
    fn send(&self, node: NodeId, to: Destination, message: &Message) -> Result<(), LinkRefusal>;
}

/// Links of a node that has none: every message is refused.
pub struct NoLinks;

impl NodeLinks for NoLinks {
    fn send(&self, _node: NodeId, _to: Destination, _message: &Message) -> Result<(), LinkRefusal> {
        Err(LinkRefusal::UnknownNode)
    }
}

/// Where a frame came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameSource {
    /// Another core of this node.
    Core,
    /// A link from another node.
    Node(NodeId),
}
