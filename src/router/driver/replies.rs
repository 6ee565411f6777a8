//! Where the answers to this core's requests go, and the request numbers
//! that name them: client requests (answered to a session) and object calls
//! (answered to the calling object as an event). One slab type serves both;
//! a bit of the number says which slab made it.

use std::collections::VecDeque;

/// Requests of one core waiting for their answer. Each is also in the
/// gateway's in-flight table (bounded by `max_inflight` per session); this
/// bound only guards the driver's own memory.
pub const REPLY_ROUTES_MAX: usize = 1 << 20;

/// The low 40 bits of a request number (`wire::ids` holds the core and the
/// node's incarnation above them): the slab's kind bit, a slot's
/// generation, then its index. The index takes only the bits the bound
/// needs, so the generation gets the rest (19 bits): an answer that comes
/// after its route expired (a deferred answer, a peer paused past the
/// gateway's timeout) finds its slot reused, and would be taken for the
/// answer of the request there now, to another client, if the slot's
/// generation had come round to its own. With the slots also reused
/// oldest-freed first, a slot comes round once every 2^19 times the
/// slab's requests in flight.
const SLOT_BITS: u32 = 20;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
const KIND_BIT: u64 = 1 << (wire::ids::INCARNATION_SHIFT - 1);
const GENERATION_MASK: u64 = (1 << (wire::ids::INCARNATION_SHIFT - 1 - SLOT_BITS)) - 1;
const _: () = assert!(REPLY_ROUTES_MAX as u64 <= SLOT_MASK + 1);

/// Which slab made a request number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RouteKind {
    /// A client request: its answer goes to a session.
    Client,
    /// An object's call: its answer goes to the calling object.
    Call,
}

impl RouteKind {
    fn bit(self) -> u64 {
        match self {
            RouteKind::Client => 0,
            RouteKind::Call => KIND_BIT,
        }
    }

    /// The kind of slab that made `seq`.
    pub(super) fn of(seq: u64) -> RouteKind {
        if seq & KIND_BIT == 0 {
            RouteKind::Client
        } else {
            RouteKind::Call
        }
    }
}

/// Where the answer to one client request goes: the session it came from
/// (as the gateway's egress gate checks it) and the client's route and seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyRoute {
    pub session_id: u64,
    pub session_epoch: u32,
    pub player_id: u64,
    pub route_id: u32,
    pub client_seq: u32,
    /// The session's connection that sent the request (`Ingress::
    /// connection`).
    pub connection: u32,
}

struct Slot<T> {
    /// Bumped when the slot is freed, so a sequence number names one use
    /// of the slot: an answer for an earlier use finds nothing.
    generation: u64,
    /// The full number of the use waiting, compared whole: a number made
    /// by an earlier run of the node (another incarnation) never matches.
    waiting: Option<(T, u64, u64)>,
}

/// The answers this core waits for: a slab whose slot index and generation
/// are the request's sequence number, so inserting and taking are an index
/// each (no hashing, no per-request queue entry). A request that is never
/// answered is dropped by a sweep after the gateway's request timeout (the
/// gateway has answered TIMEOUT by then); the sweep walks the slab once per
/// `sweep_interval_ms`, so memory is bounded by the requests in flight.
pub(super) struct ReplyRoutes<T = ReplyRoute> {
    kind: RouteKind,
    core_id: usize,
    incarnation: u64,
    slots: Vec<Slot<T>>,
    /// Free slots, oldest freed first.
    free: VecDeque<u32>,
    waiting: usize,
    sweep_interval_ms: u64,
    next_sweep_ms: u64,
}

impl ReplyRoutes<ReplyRoute> {
    /// Unanswered routes are dropped between `request_timeout_ms` and
    /// 1.25 times that after they were made.
    pub(super) fn new(core_id: usize, incarnation: u64, request_timeout_ms: u64) -> ReplyRoutes {
        ReplyRoutes::of_kind(RouteKind::Client, core_id, incarnation, request_timeout_ms)
    }
}

impl<T: Copy> ReplyRoutes<T> {
    /// An empty slab of `kind`; see [`ReplyRoutes::new`].
    pub(super) fn of_kind(
        kind: RouteKind,
        core_id: usize,
        incarnation: u64,
        request_timeout_ms: u64,
    ) -> ReplyRoutes<T> {
        ReplyRoutes {
            kind,
            core_id,
            incarnation,
            slots: Vec::new(),
            free: VecDeque::new(),
            waiting: 0,
            sweep_interval_ms: (request_timeout_ms / 4).max(1),
            next_sweep_ms: 0,
        }
    }

    /// Records where a request's answer goes; returns the request's
    /// sequence number, or `None` when `REPLY_ROUTES_MAX` are waiting.
    pub(super) fn insert(&mut self, route: T, expires_ms: u64) -> Option<u64> {
        if self.waiting >= REPLY_ROUTES_MAX {
            return None;
        }
        let index = match self.free.pop_front() {
            Some(index) => index,
            None => {
                // Generations start at 1: no request of core 0 is seq 0,
                // the sequence number of one-way notifications.
                self.slots.push(Slot {
                    generation: 1,
                    waiting: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        let local =
            self.kind.bit() | (slot.generation & GENERATION_MASK) << SLOT_BITS | u64::from(index);
        let seq = wire::ids::make(self.core_id, self.incarnation, local);
        slot.waiting = Some((route, expires_ms, seq));
        self.waiting += 1;
        Some(seq)
    }

    /// The route of request `seq`, once: `None` if it was answered or
    /// dropped already.
    pub(super) fn take(&mut self, seq: u64) -> Option<T> {
        let index = (seq & SLOT_MASK) as usize;
        let slot = self.slots.get_mut(index)?;
        match slot.waiting {
            Some((route, _, waiting_seq)) if waiting_seq == seq => {
                slot.waiting = None;
                self.free_slot(index);
                Some(route)
            }
            _ => None,
        }
    }

    /// Whether request `seq` still waits for its answer at `now_ms`: made
    /// here, not answered, not past its expiry (whether swept yet or not).
    pub(super) fn is_waiting(&self, seq: u64, now_ms: u64) -> bool {
        let index = (seq & SLOT_MASK) as usize;
        self.slots.get(index).is_some_and(|slot| {
            matches!(slot.waiting, Some((_, expires_ms, waiting_seq))
                if waiting_seq == seq && now_ms < expires_ms)
        })
    }

    /// Drops the routes that expired by `now_ms`; cheap until the next
    /// sweep is due.
    pub(super) fn expire(&mut self, now_ms: u64) {
        self.expire_each(now_ms, |_| {});
    }

    /// [`Self::expire`], handing each expired route to `expired`.
    pub(super) fn expire_each(&mut self, now_ms: u64, mut expired: impl FnMut(T)) {
        if now_ms < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = now_ms + self.sweep_interval_ms;
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if let Some((route, expires_ms, _)) = slot.waiting {
                if expires_ms <= now_ms {
                    slot.waiting = None;
                    self.free_slot(index);
                    expired(route);
                }
            }
        }
    }

    /// Routes waiting for an answer.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.waiting
    }

    /// Gives slot `index` back to the free list, its generation moved on
    /// so a late answer naming the old one finds nothing.
    fn free_slot(&mut self, index: usize) {
        self.slots[index].generation += 1;
        self.free.push_back(index as u32);
        self.waiting -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: ReplyRoute = ReplyRoute {
        session_id: 1,
        session_epoch: 1,
        player_id: 1,
        route_id: 10,
        client_seq: 1,
        connection: 0,
    };

    #[test]
    fn reply_routes_are_taken_once_and_expire() {
        let mut routes = ReplyRoutes::new(1, 7, 100);
        let first = routes.insert(ROUTE, 100).unwrap();
        let second = routes.insert(ROUTE, 200).unwrap();
        assert_eq!(wire::ids::core_of(first), 1, "the core is in the high bits");
        // The same slot and generation under another incarnation's number
        // (an answer to an earlier run of this node) finds nothing.
        let other_run = wire::ids::make(1, 6, second & wire::ids::LOCAL_MASK);
        assert!(routes.take(other_run).is_none());
        routes.expire(150);
        assert!(routes.take(first).is_none(), "expired");
        assert!(routes.take(second).is_some());
        assert!(routes.take(second).is_none(), "answered once");
        assert_eq!(routes.len(), 0);
    }

    #[test]
    fn a_reused_slot_does_not_answer_its_earlier_use() {
        let mut routes = ReplyRoutes::new(0, 1, 100);
        let first = routes.insert(ROUTE, 100).unwrap();
        assert!(routes.take(first).is_some());
        let reused = routes.insert(ROUTE, 100).unwrap();
        assert_eq!(reused & SLOT_MASK, first & SLOT_MASK, "same slot");
        assert!(routes.take(first).is_none(), "the earlier use is gone");
        assert!(routes.take(reused).is_some());
        assert!(routes.take(u64::MAX).is_none(), "no such slot");
    }

    /// A route dropped unanswered (expired) leaves a late answer that must
    /// not be taken for a later request's: with 15 bits of generation and
    /// the slot reused first, 32,768 requests made its number again.
    #[test]
    fn a_late_answer_is_not_taken_for_a_later_request() {
        let mut routes = ReplyRoutes::new(0, 1, 100);
        let late = routes.insert(ROUTE, 10).unwrap();
        routes.expire(10);
        for _ in 0..(1 << 15) {
            let seq = routes.insert(ROUTE, 1_000).unwrap();
            assert_ne!(seq, late);
            assert!(routes.take(seq).is_some());
        }
        let now = routes.insert(ROUTE, 1_000).unwrap();
        assert!(routes.take(late).is_none(), "the late answer finds nothing");
        assert!(routes.take(now).is_some());
    }

    #[test]
    fn a_route_waits_until_it_is_answered_or_expires() {
        let mut routes = ReplyRoutes::new(0, 1, 100);
        let seq = routes.insert(ROUTE, 50).unwrap();
        assert!(routes.is_waiting(seq, 49));
        assert!(!routes.is_waiting(seq, 50), "expired, if not swept yet");
        assert!(routes.take(seq).is_some());
        assert!(!routes.is_waiting(seq, 0), "answered");
    }

    #[test]
    fn slots_are_reused_oldest_freed_first() {
        let mut routes = ReplyRoutes::new(0, 1, 100);
        let seqs: Vec<u64> = (0..3).map(|_| routes.insert(ROUTE, 100).unwrap()).collect();
        for &seq in seqs.iter().rev() {
            assert!(routes.take(seq).is_some());
        }
        let slot = |seq: u64| seq & SLOT_MASK;
        let next = routes.insert(ROUTE, 100).unwrap();
        assert_eq!(slot(next), slot(seqs[2]), "freed first, reused first");
    }

    #[test]
    fn the_slab_grows_only_with_requests_waiting() {
        let mut routes = ReplyRoutes::new(0, 1, 100);
        for _ in 0..10_000 {
            let seq = routes.insert(ROUTE, 100).unwrap();
            assert!(routes.take(seq).is_some());
        }
        assert_eq!(routes.slots.len(), 1);
        // A sweep is due at most once per interval, and frees what expired.
        let held: Vec<u64> = (0..3).map(|_| routes.insert(ROUTE, 10).unwrap()).collect();
        routes.expire(5);
        assert_eq!(routes.len(), 3, "not expired yet");
        routes.expire(10);
        assert_eq!(routes.len(), 3, "the next sweep is not due before 5 + 25");
        routes.expire(30);
        assert_eq!(routes.len(), 0);
        assert!(held.iter().all(|&seq| routes.take(seq).is_none()));
    }

    #[test]
    fn a_call_number_is_never_a_client_number() {
        let mut clients = ReplyRoutes::new(2, 7, 100);
        let mut calls: ReplyRoutes<u64> = ReplyRoutes::of_kind(RouteKind::Call, 2, 7, 100);
        let client = clients.insert(ROUTE, 100).unwrap();
        let call = calls.insert(99, 100).unwrap();
        assert_eq!(RouteKind::of(client), RouteKind::Client);
        assert_eq!(RouteKind::of(call), RouteKind::Call);
        assert_eq!(wire::ids::core_of(call), 2);
        // Same slot and generation, another slab: never confused.
        assert_eq!(call & SLOT_MASK, client & SLOT_MASK);
        assert!(clients.take(call).is_none());
        assert!(calls.take(client).is_none());
        assert_eq!(calls.take(call), Some(99));
        // Expiry hands back what it drops, once.
        let late = calls.insert(5, 10).unwrap();
        let mut expired = Vec::new();
        calls.expire_each(10, |tag| expired.push(tag));
        assert_eq!(expired, vec![5]);
        assert!(calls.take(late).is_none());
        assert!(clients.take(client).is_some());
    }

    #[test]
    fn the_bound_refuses_more() {
        let mut routes = ReplyRoutes::new(0, 1, 100);
        for _ in 0..REPLY_ROUTES_MAX {
            routes.insert(ROUTE, 100).unwrap();
        }
        assert!(routes.insert(ROUTE, 100).is_none());
    }
}
