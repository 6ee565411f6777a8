//! Where the answers to this core's client requests go.

use std::collections::VecDeque;

use hashbrown::HashMap;

/// Requests of one core waiting for their answer. Each is also in the
/// gateway's in-flight table (bounded by `max_inflight` per session); this
/// bound only guards the driver's own memory.
pub const REPLY_ROUTES_MAX: usize = 1 << 20;

/// Bits of a request sequence number below the index of the core that made
/// it, so an answer finds its core without a shared table.
pub(super) const REQUEST_CORE_SHIFT: u32 = 48;

/// Where the answer to one client request goes.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplyRoute {
    pub(super) session_id: u64,
    pub(super) session_epoch: u32,
    pub(super) player_id: u64,
    pub(super) route_id: u32,
    pub(super) client_seq: u32,
}

/// The answers this core waits for, expired after the gateway's request
/// timeout (the gateway has answered TIMEOUT by then).
#[derive(Default)]
pub(super) struct ReplyRoutes {
    routes: HashMap<u64, ReplyRoute>,
    expiry: VecDeque<(u64, u64)>,
    next_serial: u64,
}

impl ReplyRoutes {
    pub(super) fn insert(
        &mut self,
        core_id: usize,
        route: ReplyRoute,
        expires_ms: u64,
    ) -> Option<u64> {
        if self.routes.len() >= REPLY_ROUTES_MAX {
            return None;
        }
        self.next_serial = (self.next_serial + 1) & ((1 << REQUEST_CORE_SHIFT) - 1);
        let seq = (core_id as u64) << REQUEST_CORE_SHIFT | self.next_serial;
        self.routes.insert(seq, route);
        self.expiry.push_back((expires_ms, seq));
        Some(seq)
    }

    pub(super) fn take(&mut self, seq: u64) -> Option<ReplyRoute> {
        self.routes.remove(&seq)
    }

    pub(super) fn expire(&mut self, now_ms: u64) {
        while let Some(&(expires_ms, seq)) = self.expiry.front() {
            if expires_ms > now_ms {
                break;
            }
            self.expiry.pop_front();
            self.routes.remove(&seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_routes_expire_and_bound() {
        let mut routes = ReplyRoutes::default();
        let route = ReplyRoute {
            session_id: 1,
            session_epoch: 1,
            player_id: 1,
            route_id: 10,
            client_seq: 1,
        };
        let first = routes.insert(1, route, 100).unwrap();
        let second = routes.insert(1, route, 200).unwrap();
        assert_eq!(
            first >> REQUEST_CORE_SHIFT,
            1,
            "the core is in the high bits"
        );
        routes.expire(150);
        assert!(routes.take(first).is_none(), "expired");
        assert!(routes.take(second).is_some());
        assert!(routes.take(second).is_none(), "answered once");
    }
}
