//! Test-only bugs, put into the router one at a time so the simulator can
//! show it catches each (`sim/mutants.rs`). Outside `cfg(test)` `active`
//! is a constant `false`: the checks compile away and nothing changes.
//!
//! Each variant names one place in the router where the bug goes; the
//! comment there says what the bug does. Most sit at a step boundary, in
//! the dispatcher (`core.rs`): they change what one step hands the next.

/// One deliberate bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mutant {
    /// `ctx::lock_expired` (the claim rule `pull` and `route` ask): another node's record is claimable even
    /// while its owner is live in membership.
    ClaimFromLiveOwner,
    /// `steps::save::reply`: a save's CAS Conflict leaves the object writable,
    /// as it was (its CAS version and route untouched).
    ConflictKeepsWritable,
    /// `steps::claim::start`: a claim writes the record's route version again
    /// instead of the next one.
    ClaimKeepsRouteVersion,
    /// `core::RouterCore::end_notify`, between the notification's end
    /// and the `FinishTransfer` it hands the dispatcher: the leak `finish_transfer` closes: when the target's
    /// notification failed (refused, timed out, not sent) the handoff never
    /// ends and its pending queue is never re-dispatched.
    PendingNotRedispatched,
    /// `core::RouterCore::end_notify`: as above, but the handoff ends and its
    /// queued requests are dropped without an answer.
    PendingDropped,
    /// `core::run`, after `save::start`: an `on_write` answer is emitted when its
    /// save is sent, not when the save applied.
    AnswerOnSubmit,
    /// `core::RouterCore::entry_reply`, before the answer reaches its
    /// step: a write answered Indeterminate is taken as
    /// Applied (with the CAS version it would have produced).
    IndeterminateAsApplied,
    /// `core::RouterCore::fence`: copies stay in service instead of aside, so after the
    /// rejoin they serve at once, with no write-back, while their records
    /// name the ended incarnation that any node may claim.
    FenceLeavesCopiesInService,
    /// `ctx::Ctx::may_serve`: the lease is never checked, only the fence
    /// (extra: shows how much membership's own fencing covers for it).
    LeaseIgnored,
    /// `steps::transfer::remove_reply`: the old owner keeps its copy writable once
    /// the record names the target (extra: shows the writable-not-store-
    /// owner check failing).
    RemoveKeepsObject,
    /// `cluster::membership`'s `judge_watched` (not the router's: membership's
    /// bugs are put in the same way): a watched member is declared down
    /// as soon as a poll reads its row, though the row moved within
    /// `down_after_ms`.
    DeclareMovedRow,
    /// `cluster::membership`'s `rejoin`: a rejoin after a fence takes the
    /// incarnation that was declared down again, not the next, so that
    /// incarnation, ended, comes back.
    RejoinReusesIncarnation,
    /// `entry::Entry::write_unknown`: an entry remembers only its latest
    /// write of unknown outcome (the one slot of old), so a conflict with
    /// the record an earlier one left drops the copy as another node's.
    UnknownWriteOneSlot,
}

#[cfg(test)]
impl Mutant {
    pub const ALL: [Mutant; 13] = [
        Mutant::ClaimFromLiveOwner,
        Mutant::ConflictKeepsWritable,
        Mutant::ClaimKeepsRouteVersion,
        Mutant::PendingNotRedispatched,
        Mutant::PendingDropped,
        Mutant::AnswerOnSubmit,
        Mutant::IndeterminateAsApplied,
        Mutant::FenceLeavesCopiesInService,
        Mutant::LeaseIgnored,
        Mutant::RemoveKeepsObject,
        Mutant::DeclareMovedRow,
        Mutant::RejoinReusesIncarnation,
        Mutant::UnknownWriteOneSlot,
    ];
}

#[cfg(test)]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

/// Whether `mutant` is put in on this thread.
#[cfg(test)]
#[inline]
pub(crate) fn active(mutant: Mutant) -> bool {
    ACTIVE.with(|active| active.get() == Some(mutant))
}

/// Never: release and non-test builds carry no bug.
#[cfg(not(test))]
#[inline(always)]
pub(crate) const fn active(_mutant: Mutant) -> bool {
    false
}

/// Puts `mutant` in on this thread (`None`: the router as written) until
/// the returned guard drops.
#[cfg(test)]
pub(crate) fn put_in(mutant: Option<Mutant>) -> Guard {
    let previous = ACTIVE.with(|active| active.replace(mutant));
    Guard { previous }
}

#[cfg(test)]
pub(crate) struct Guard {
    previous: Option<Mutant>,
}

#[cfg(test)]
impl Drop for Guard {
    fn drop(&mut self) {
        ACTIVE.with(|active| active.set(self.previous));
    }
}
