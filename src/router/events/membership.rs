//! Membership's news: other nodes up and down, this node's lease, the
//! fence that ends an incarnation and the rejoin that starts the next.

use crate::ids::NodeId;
use crate::router::core::{checked, run, RouterCore};
use crate::router::ctx::Member;
use crate::router::entry::Manager;
use crate::router::handler::OP_TIMER;
use crate::router::mutant::{self, Mutant};
use crate::router::steps::Next;
use crate::router::types::{TransferDone, TransferOutcome};
use crate::store::MemberState;

impl RouterCore {
    /// Membership reports incarnation `incarnation` of `node` up (joining,
    /// up or draining). Earlier incarnations of the node have ended: a node
    /// gets a new incarnation only after its previous one was down or left.
    /// It does not touch any route.
    pub fn on_node_up(&mut self, node: NodeId, incarnation: u64) {
        self.on_member(node, incarnation, MemberState::Up);
    }

    /// Membership reports incarnation `incarnation` of `node` down (or
    /// left): records it owns are claimable at once, by CAS as always.
    /// Routes to it are kept until a request finds them stale.
    pub fn on_node_down(&mut self, node: NodeId, incarnation: u64) {
        self.on_member(node, incarnation, MemberState::Down);
    }

    /// Membership's view of one node: its incarnation and state.
    pub fn on_member(&mut self, node: NodeId, incarnation: u64, state: MemberState) {
        if node == self.ctx.node || node.is_none() {
            return;
        }
        let member = self.ctx.members.entry(node).or_insert(Member {
            live: None,
            dead_through: 0,
            draining: false,
        });
        // Reports can arrive late: nothing moves an incarnation backwards.
        if incarnation <= member.dead_through {
            return;
        }
        member.dead_through = member.dead_through.max(incarnation.saturating_sub(1));
        if state.is_ended() {
            member.dead_through = incarnation;
            member.live = None;
            member.draining = false;
        } else {
            member.live = Some(incarnation);
            member.draining = state == MemberState::Draining;
        }
    }

    /// Extends the node's membership lease to `until_ms` (this core's
    /// clock): the driver calls it after each heartbeat the store applied.
    /// A shorter lease than the current one is ignored. A core whose lease
    /// had run out serves again once a later heartbeat extends it: its
    /// copies were kept, and nobody could claim them meanwhile, since a
    /// claim needs this incarnation declared down, and a declaration makes
    /// that heartbeat's compare-and-set fail (`ClusterConfig::check_timing`).
    pub fn extend_lease(&mut self, now_ms: u64, until_ms: u64) {
        if self.ctx.fenced {
            return;
        }
        let current = self.ctx.lease_until_ms.unwrap_or(0);
        if until_ms > current {
            self.ctx.lease_until_ms = Some(until_ms);
        }
        self.resume_paused(now_ms);
    }

    /// Runs the one-way events kept while this core could not serve
    /// (`paused.rs`), in arrival order, once it can. A timer whose copy
    /// is gone meanwhile went with it, as one firing then would have.
    fn resume_paused(&mut self, now_ms: u64) {
        if self.ctx.paused.is_empty() || !self.ctx.may_serve(now_ms) {
            return;
        }
        for waiter in self.ctx.paused.take() {
            let timer = waiter.request.op == OP_TIMER;
            if timer
                && !self
                    .entry_mut(waiter.head.key)
                    .is_some_and(|entry| entry.is_writable())
            {
                continue;
            }
            self.dispatch(now_ms, waiter);
        }
    }

    /// Ends the lease at `at_ms` at the latest: membership saw time jump
    /// (a suspend, a paused virtual machine), so the lease it gave may
    /// already have run out in real time.
    pub fn end_lease(&mut self, at_ms: u64) {
        let until = self
            .ctx
            .lease_until_ms
            .map_or(at_ms, |until| until.min(at_ms));
        self.ctx.lease_until_ms = Some(until);
    }

    /// Fences the node: membership found it declared down, or its id taken
    /// over, so this incarnation is over. Nothing is served or claimed here
    /// from now on; every writable object is kept aside with its unsaved
    /// changes, to be written back by compare-and-set on `rejoin` (kept if
    /// nobody took it over meanwhile, dropped and counted if somebody did).
    /// Saves already in flight still settle their held answers by their
    /// outcome: an applied CAS made those changes durable whoever claims
    /// the object next.
    pub fn fence(&mut self, _now_ms: u64) {
        if self.ctx.fenced {
            return;
        }
        self.ctx.fenced = true;
        self.ctx.counters.fences_total += 1;
        let ctx = &mut self.ctx;
        // The bug: copies stay in service through the fence.
        let leave = mutant::active(Mutant::FenceLeavesCopiesInService);
        for manager in self.managers.values_mut() {
            for (key, entry) in manager.entries.iter_mut() {
                if let Some(object) = entry.object.as_mut().filter(|_| !leave) {
                    object.aside = true;
                }
                if let Some((target, _)) = entry.queued_transfer.take() {
                    ctx.transfer_done(TransferDone {
                        key: *key,
                        target,
                        outcome: TransferOutcome::NotMoved,
                        route_version: entry.route_version,
                    });
                }
                checked(*key, entry);
            }
        }
    }

    /// The node rejoined with incarnation `incarnation` (higher than any it
    /// had): it serves again. Every copy kept aside is written back under
    /// the new incarnation by CAS on the record it last knew; until that
    /// applies its requests wait, and if another node owns the record by
    /// then the copy is dropped and counted.
    pub fn rejoin(&mut self, now_ms: u64, incarnation: u64, lease_until_ms: u64) {
        assert!(
            incarnation > self.ctx.incarnation,
            "a rejoin takes a higher incarnation"
        );
        // A core that missed the fence must still set its copies aside:
        // they belong to the incarnation that ended.
        self.fence(now_ms);
        self.ctx.incarnation = incarnation;
        self.ctx.fenced = false;
        self.ctx.lease_until_ms = None;
        self.extend_lease(now_ms, lease_until_ms);
        let ctx = &mut self.ctx;
        for Manager { kind, entries } in self.managers.values_mut() {
            for (key, entry) in entries.iter_mut() {
                if entry.is_aside() && entry.io.is_none() {
                    run(ctx, kind.as_ref(), *key, entry, now_ms, Next::Readopt(None));
                    checked(*key, entry);
                }
            }
        }
    }
}
