//! Requests this core sent to other nodes and whose answers someone
//! waits for. When membership declares one of those nodes down, its
//! incarnation will never answer; when this core's link to it breaks
//! (silent peer, cut network), what the link carried lately may never have
//! arrived. Either way the requests waiting on that node are answered
//! TIMEOUT at once (their outcome is unknown: the node may have applied
//! them) instead of at the gateway's request timeout, so a client that
//! waits for each answer is served again as soon as the objects are
//! reachable or claimable.
//!
//! Bounded: the newest `FORWARDED_MAX` are kept, which at any rate this
//! core reaches covers the requests in flight when a node dies. The table
//! is not told of answers (they go straight to the requesting core), so an
//! entry lives until it ages out; abandoning one that was answered already
//! reaches nobody.

use std::collections::VecDeque;

use crate::ids::NodeId;
use crate::router::RequestId;

/// Forwarded requests remembered per core.
pub const FORWARDED_MAX: usize = 1 << 16;

pub(super) struct Forwarded {
    /// In the order sent: (sent at, request, node).
    entries: VecDeque<(u64, RequestId, NodeId)>,
    ttl_ms: u64,
}

impl Forwarded {
    /// Entries are dropped `ttl_ms` after they were sent (the gateway has
    /// answered TIMEOUT by then).
    pub(super) fn new(ttl_ms: u64) -> Forwarded {
        Forwarded {
            entries: VecDeque::new(),
            ttl_ms,
        }
    }

    pub(super) fn sent(&mut self, now_ms: u64, request: RequestId, node: NodeId) {
        self.expire(now_ms);
        if self.entries.len() >= FORWARDED_MAX {
            self.entries.pop_front();
        }
        self.entries.push_back((now_ms, request, node));
    }

    /// Takes every request still waiting on `node`.
    pub(super) fn take_node(&mut self, now_ms: u64, node: NodeId) -> Vec<RequestId> {
        self.expire(now_ms);
        let mut taken = Vec::new();
        self.entries.retain(|&(_, request, to)| {
            let take = to == node;
            if take {
                taken.push(request);
            }
            !take
        });
        taken
    }

    fn expire(&mut self, now_ms: u64) {
        while let Some(&(sent_ms, _, _)) = self.entries.front() {
            if now_ms.saturating_sub(sent_ms) < self.ttl_ms {
                break;
            }
            self.entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(seq: u64) -> RequestId {
        RequestId {
            origin_node: NodeId(1),
            seq,
        }
    }

    #[test]
    fn a_dead_node_gives_back_only_its_own_live_entries() {
        let mut forwarded = Forwarded::new(1_000);
        forwarded.sent(0, request(1), NodeId(2));
        forwarded.sent(500, request(2), NodeId(3));
        forwarded.sent(600, request(3), NodeId(2));
        // At 1200 the first has aged out (the gateway answered it).
        assert_eq!(forwarded.take_node(1_200, NodeId(2)), vec![request(3)]);
        assert!(forwarded.take_node(1_200, NodeId(2)).is_empty());
        assert_eq!(forwarded.take_node(1_200, NodeId(3)), vec![request(2)]);
    }

    #[test]
    fn the_newest_are_kept() {
        let mut forwarded = Forwarded::new(u64::MAX);
        for seq in 0..FORWARDED_MAX as u64 + 10 {
            forwarded.sent(0, request(seq), NodeId(2));
        }
        let taken = forwarded.take_node(0, NodeId(2));
        assert_eq!(taken.len(), FORWARDED_MAX);
        assert_eq!(taken[0], request(10));
    }
}
