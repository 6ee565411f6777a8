//! The operation slots: the state of every operation between its
//! submission and its last completion, and what each change of state asks
//! of the ring (see [`SlotEnv`]). Nothing here touches the kernel, so the
//! model test (`model_tests.rs`) drives these transitions with a fake ring,
//! under valgrind's memcheck in CI, exactly as the reactor does with the
//! real one.

use std::any::Any;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use io_uring::cqueue;

use super::{MultiKind, SendChain, CQE_F_BUFFER};
use crate::bufring::RecvQuota;

// A boxed collection on purpose: `Multi::spilled` is boxed to keep every
// slot small, not to move a collection's contents to the heap.
#[allow(clippy::box_collection)]
pub(crate) enum Slot {
    /// Submitted (or queued behind its stream's send in the kernel), not
    /// completed; `chain` is the stream's sends for a send.
    Waiting {
        waker: Option<Waker>,
        chain: Option<Rc<SendChain>>,
    },
    /// Completed; the future has not looked yet.
    Done(i32, u32),
    /// A multishot operation: completions in arrival order; `more` false
    /// once the kernel said no more will come.
    Multi {
        results: VecDeque<(i32, u32)>,
        waker: Option<Waker>,
        more: bool,
        kind: MultiKind,
        /// A receive's share of the buffer ring: at its bound the receive
        /// is cancelled (see `bufring.rs`).
        quota: Option<Rc<RecvQuota>>,
        /// Bytes of results past the share, copied out of the ring: one for
        /// each result in `results` whose buffer flag was cleared, in order.
        /// Boxed, and made at the first spill: only a connection whose
        /// reader falls behind ever has one, and every connection's receive
        /// slot is in the table (see `SLOT_BYTES_MAX`).
        spilled: Option<Box<VecDeque<Vec<u8>>>>,
    },
    /// The future is gone; the slot keeps what the kernel may still use
    /// until the operation's last completion.
    Orphan {
        _keep: Option<Box<dyn Any>>,
        multishot: Option<MultiKind>,
        chain: Option<Rc<SendChain>>,
    },
    /// The close of the registered file at this index: the index is free
    /// for another file once it completes.
    FileClose(u32),
}

/// What a change of an operation's state asks of the ring and the buffer
/// ring. The reactor does it on the real ones; the model test on fakes
/// that count every buffer and descriptor.
pub(crate) trait SlotEnv {
    /// Gives buffer `bid` of the buffer ring back to the kernel.
    fn give_back(&self, bid: u16);
    /// Copies the first `len` bytes of lent buffer `bid` out and gives the
    /// buffer back.
    fn spill(&self, bid: u16, len: usize) -> Vec<u8>;
    /// Closes a socket an accept made that nobody will take.
    fn close_accepted(&self, fd: i32);
    /// Asks the kernel to cancel the operation of slot `index`.
    fn cancel(&self, index: usize);
    /// A send of `chain` completed: the next one may go to the kernel.
    fn advance(&self, chain: &SendChain);
    /// Registered file index `file` is free for another socket.
    fn release_file(&self, file: u32);
    /// A connection reached its share of the buffer ring.
    fn count_held_max(&self);
}

/// How an orphaned multishot operation reaches its last completion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// A cancel is submitted for it.
    Cancel,
    /// The kernel ends it without one.
    ByItself,
}

/// The most bytes a slot takes in the table. Every connection keeps its
/// receive's slot, and most an idle send's too, for as long as it is open:
/// at 10,000 connections each 8 bytes here is 160 KB of the core's memory.
pub(crate) const SLOT_BYTES_MAX: usize = 72;
// Held in every build, not only under test.
const _: () = assert!(std::mem::size_of::<Option<Slot>>() <= SLOT_BYTES_MAX);

/// Every operation's slot, by index (its submission's `user_data`), and
/// the free indexes. Grows to the most operations in flight at once.
#[derive(Default)]
pub(crate) struct SlotTable {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
}

impl SlotTable {
    /// A table with room reserved for `expected` operations at once.
    ///
    /// Reserved room is address space, not memory: a page of it becomes
    /// resident only when a slot on it is first used, so the table costs
    /// what its operations use. A table grown by doubling instead copies
    /// itself at every power of two and leaves the old copies, as large as
    /// half the table together, resident in the allocator.
    pub fn with_capacity(expected: usize) -> SlotTable {
        SlotTable {
            slots: Vec::with_capacity(expected),
            free: Vec::with_capacity(expected),
        }
    }

    pub fn alloc(&mut self, slot: Slot) -> usize {
        match self.free.pop() {
            Some(index) => {
                debug_assert!(self.slots[index].is_none(), "a free slot is empty");
                self.slots[index] = Some(slot);
                index
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Whether operation `index`'s completion, if it came now, would wake
    /// no task: nobody polled it yet, its future is gone, or it is a
    /// file's close.
    pub fn wakes_nobody(&self, index: usize) -> bool {
        matches!(
            self.slots.get(index),
            Some(Some(
                Slot::Waiting { waker: None, .. } | Slot::Orphan { .. } | Slot::FileClose(_)
            ))
        )
    }

    fn release(&mut self, index: usize) {
        debug_assert!(self.slots[index].is_some(), "a slot released twice");
        self.slots[index] = None;
        self.free.push(index);
    }

    /// The result of one-shot operation `index` (`res`, `flags`); the slot
    /// is freed when it is returned.
    pub fn poll_op(&mut self, index: usize, cx: &mut Context<'_>) -> Poll<(i32, u32)> {
        match self.slots[index].as_mut() {
            Some(Slot::Done(result, flags)) => {
                let done = (*result, *flags);
                self.release(index);
                Poll::Ready(done)
            }
            Some(Slot::Waiting { waker, .. }) => {
                set_waker(waker, cx);
                Poll::Pending
            }
            _ => unreachable!("poll_op on a slot that is not a one-shot operation"),
        }
    }

    /// The next completion of multishot operation `index`, or `None` once
    /// it ended (the slot is then freed).
    pub fn poll_multi(&mut self, index: usize, cx: &mut Context<'_>) -> Poll<Option<(i32, u32)>> {
        let Some(Slot::Multi {
            results,
            waker,
            more,
            ..
        }) = self.slots[index].as_mut()
        else {
            unreachable!("poll_multi on a slot that is not a multishot operation")
        };
        if let Some(result) = results.pop_front() {
            return Poll::Ready(Some(result));
        }
        if !*more {
            self.release(index);
            return Poll::Ready(None);
        }
        set_waker(waker, cx);
        Poll::Pending
    }

    /// The bytes of the result `poll_multi` just returned for `index` whose
    /// buffer was copied out of the ring (see `Slot::Multi::spilled`).
    pub fn take_spilled(&mut self, index: usize) -> Option<Vec<u8>> {
        match self.slots[index].as_mut() {
            Some(Slot::Multi { spilled, .. }) => spilled.as_mut()?.pop_front(),
            _ => None,
        }
    }

    /// The future of operation `index` is dropped: keep `keep` (memory the
    /// kernel may still touch) until its last completion, and cancel a
    /// multishot operation that would otherwise run forever.
    pub fn orphan(&mut self, index: usize, keep: Option<Box<dyn Any>>, env: &impl SlotEnv) {
        self.orphan_and(index, keep, env, Ending::Cancel);
    }

    /// [`SlotTable::orphan`] of a multishot operation the kernel is ending
    /// by itself (its socket was shut down: the receive completes with the
    /// end of the stream): no cancel is submitted for it.
    pub fn orphan_ending(&mut self, index: usize, env: &impl SlotEnv) {
        self.orphan_and(index, None, env, Ending::ByItself);
    }

    fn orphan_and(
        &mut self,
        index: usize,
        keep: Option<Box<dyn Any>>,
        env: &impl SlotEnv,
        ending: Ending,
    ) {
        let Some(slot) = self.slots[index].take() else {
            return;
        };
        match slot {
            Slot::Done(_, flags) => {
                give_back_buffer(env, flags);
                self.free.push(index);
            }
            Slot::Waiting { chain, .. } => {
                self.slots[index] = Some(Slot::Orphan {
                    _keep: keep,
                    multishot: None,
                    chain,
                })
            }
            Slot::Multi {
                results,
                more,
                kind,
                quota,
                spilled,
                ..
            } => {
                // Spilled bytes are the slot's own copies: dropped with it.
                drop(spilled);
                for (result, flags) in results {
                    // A filled buffer nobody read no longer counts against
                    // the connection's share once it is back in the ring.
                    if let (Some(quota), Some(_)) = (&quota, cqueue::buffer_select(flags)) {
                        quota.released();
                    }
                    drop_result(env, kind, result, flags);
                }
                if more {
                    self.slots[index] = Some(Slot::Orphan {
                        _keep: keep,
                        multishot: Some(kind),
                        chain: None,
                    });
                    if ending == Ending::Cancel {
                        env.cancel(index);
                    }
                } else {
                    self.free.push(index);
                }
            }
            Slot::Orphan { .. } => unreachable!("a slot is orphaned once"),
            Slot::FileClose(_) => unreachable!("a file close has no future"),
        }
    }

    /// Stores completion (`result`, `flags`) of operation `index`; returns
    /// the waker of the future that waits for it.
    pub fn complete(
        &mut self,
        index: usize,
        result: i32,
        flags: u32,
        env: &impl SlotEnv,
    ) -> Option<Waker> {
        let slot = self.slots.get_mut(index).and_then(Option::as_mut)?;
        match slot {
            Slot::Waiting { waker, chain } => {
                let waker = waker.take();
                let chain = chain.take();
                *slot = Slot::Done(result, flags);
                if let Some(chain) = chain {
                    env.advance(&chain);
                }
                waker
            }
            Slot::Multi {
                results,
                waker,
                more,
                quota,
                spilled,
                ..
            } => {
                if !cqueue::more(flags) {
                    *more = false;
                }
                let mut flags = flags;
                let mut at_max = false;
                if let (Some(quota), Some(bid)) = (quota.as_ref(), cqueue::buffer_select(flags)) {
                    if quota.at_max() {
                        // Past the share (one kernel pass filled buffers
                        // beyond it): keep the bytes, give the buffer back.
                        let len = usize::try_from(result).unwrap_or(0);
                        spilled
                            .get_or_insert_with(Box::default)
                            .push_back(env.spill(bid, len));
                        flags &= !CQE_F_BUFFER;
                    } else {
                        // Counted for every buffer, also the last one's.
                        at_max = quota.filled() && *more;
                    }
                }
                results.push_back((result, flags));
                let waker = waker.take();
                if at_max {
                    // The connection holds its share of the ring: stop its
                    // receive; its reader re-arms it once it gives some back.
                    env.count_held_max();
                    env.cancel(index);
                }
                waker
            }
            Slot::Orphan {
                multishot, chain, ..
            } => {
                let multishot = *multishot;
                let chain = chain.take();
                self.complete_orphan(index, multishot, chain, result, flags, env);
                None
            }
            Slot::FileClose(file) => {
                // Whatever the result: after this completion the kernel
                // holds nothing at the index (a failure means it was empty).
                let file = *file;
                self.release(index);
                env.release_file(file);
                None
            }
            Slot::Done(..) => {
                debug_assert!(false, "a second completion of a one-shot operation");
                None
            }
        }
    }

    /// A completion of an operation whose future was dropped: nobody takes
    /// its result, so what it holds goes back (a buffer to the ring, an
    /// accepted socket closed), and the slot is freed at its last one.
    fn complete_orphan(
        &mut self,
        index: usize,
        multishot: Option<MultiKind>,
        chain: Option<Rc<SendChain>>,
        result: i32,
        flags: u32,
        env: &impl SlotEnv,
    ) {
        let last = multishot.is_none() || !cqueue::more(flags);
        if let Some(chain) = chain {
            env.advance(&chain);
        }
        match multishot {
            Some(kind) => drop_result(env, kind, result, flags),
            None => give_back_buffer(env, flags),
        }
        if last {
            // Only now may the kept memory go: the kernel is done.
            self.release(index);
        }
    }

    /// Operations still owned by the kernel (slots not free).
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|slot| slot.is_some()).count()
    }

    /// Slots whose operation the kernel may still complete or write into:
    /// not those completed for good, which only wait for a future that may
    /// never look again (one held past the core's end, a timer's poll kept
    /// in a structure that outlives the tasks).
    pub fn in_kernel(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|slot| match slot {
                Slot::Done(..) => false,
                Slot::Multi { more, .. } => *more,
                _ => true,
            })
            .count()
    }

    /// Keeps every buffer the kernel may still use allocated for the life
    /// of the process: for a ring whose operations would not finish.
    pub fn leak(&mut self) {
        #[allow(clippy::mem_forget)] // the point: the kernel may still write into them
        std::mem::forget(std::mem::take(&mut self.slots));
    }
}

fn set_waker(waker: &mut Option<Waker>, cx: &Context<'_>) {
    match waker {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *waker = Some(cx.waker().clone()),
    }
}

fn give_back_buffer(env: &impl SlotEnv, flags: u32) {
    if let Some(bid) = cqueue::buffer_select(flags) {
        env.give_back(bid);
    }
}

/// Lets go of a multishot result nobody will take: a buffer goes back to
/// the ring, an accepted socket is closed (no submission can name it:
/// nobody but the kernel and this slot has seen it).
fn drop_result(env: &impl SlotEnv, kind: MultiKind, result: i32, flags: u32) {
    match kind {
        MultiKind::Recv => give_back_buffer(env, flags),
        MultiKind::Accept if result >= 0 => env.close_accepted(result),
        MultiKind::Accept => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot stays within its bound (the rare parts are boxed).
    #[test]
    fn a_slot_fits_its_bound() {
        let bytes = std::mem::size_of::<Option<Slot>>();
        assert!(bytes <= SLOT_BYTES_MAX, "a slot takes {bytes} bytes");
    }
}
