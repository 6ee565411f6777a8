//! What the built-ins' unit tests share: a session and a request as the
//! gateway of node 1 would hand them in.

use crate::ids::NodeId;
use crate::router::{ClientRef, Request, RequestId};

/// A session of `player_id` on node 1's gateway, at binding epoch 1.
pub(super) fn client(player_id: u64, session_id: u64) -> ClientRef {
    ClientRef {
        gateway_node: NodeId(1),
        session_id,
        session_epoch: 1,
        player_id,
    }
}

/// A request for `op` from node 1 that waits for its answer.
pub(super) fn request(op: u32, body: Vec<u8>, client: Option<ClientRef>) -> Request {
    Request {
        id: RequestId {
            origin_node: NodeId(1),
            seq: 1,
        },
        op,
        body,
        client,
        needs_reply: true,
        keyed: false,
    }
}
