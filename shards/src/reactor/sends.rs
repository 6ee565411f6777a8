//! The order of one stream's sends (see [`SendChain`]).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use io_uring::squeue;

use super::{Reactor, Slot};

/// One stream's sends, handed to the kernel one at a time: two sends in
/// the kernel at once may interleave their bytes when the first is short
/// (the second writes while the first waits for room). A send started while
/// another is in the kernel waits here, fully built, and is submitted when
/// the one before completes, whoever (if anyone) awaits either.
#[derive(Default)]
pub(crate) struct SendChain {
    /// The slot of the stream's send in the kernel (or on its way there),
    /// if one is: what a closing stream cancels by `user_data`, and what
    /// makes a later send wait. Slot indexes stay far below `u32::MAX` (one
    /// per operation in flight), and 4 bytes here keep the chain small.
    head: Cell<Option<u32>>,
    /// Sends waiting for it, in the order started: slot and entry.
    queued: RefCell<VecDeque<(usize, squeue::Entry)>>,
}

/// The most bytes a chain takes: every connection has one, and with the
/// `Rc`'s counts (16) 64 is an allocator size class (the next is 80).
const SEND_CHAIN_BYTES_MAX: usize = 48;
const _: () = assert!(std::mem::size_of::<SendChain>() <= SEND_CHAIN_BYTES_MAX);

/// A slot index as the chain keeps it.
fn slot_u32(index: usize) -> u32 {
    u32::try_from(index).expect("fewer than 2^32 operations in flight")
}

impl Reactor {
    /// Submits send `entry` of the stream whose sends `chain` orders: now
    /// if none of its sends is in the kernel, else after those before it.
    /// Poll it with `poll_op`.
    ///
    /// # Safety
    /// `entry` follows the submission rule (the reactor module's documentation), also
    /// while it waits behind the sends before it.
    pub unsafe fn submit_send(&self, entry: squeue::Entry, chain: &Rc<SendChain>) -> usize {
        let index = self.alloc(Slot::Waiting {
            waker: None,
            chain: Some(chain.clone()),
        });
        let entry = entry.user_data(index as u64);
        if chain.head.get().is_some() {
            chain.queued.borrow_mut().push_back((index, entry));
        } else {
            chain.head.set(Some(slot_u32(index)));
            // SAFETY: the caller's promise for `entry`.
            unsafe { self.push(entry) };
            self.quiet_pushed.borrow_mut().push(index);
        }
        index
    }

    /// The slot of `chain`'s send in the kernel (or queued for it), if one
    /// is: valid until that send's completion is reaped, which clears it.
    pub fn send_in_kernel(&self, chain: &SendChain) -> Option<usize> {
        chain.head.get().map(|index| index as usize)
    }

    /// The stream of `chain` is gone: its sends not yet in the kernel end
    /// with `ECANCELED` without reaching it (the socket's index or
    /// descriptor may name another socket by the time they would).
    pub fn cancel_queued_sends(&self, chain: &SendChain) {
        let queued = std::mem::take(&mut *chain.queued.borrow_mut());
        for (index, _) in queued {
            if let Some(waker) = self.complete(index, -libc::ECANCELED, 0) {
                waker.wake();
            }
        }
    }

    /// A send of `chain` completed: the next one goes to the kernel.
    pub(super) fn advance(&self, chain: &SendChain) {
        let next = chain.queued.borrow_mut().pop_front();
        chain
            .head
            .set(next.as_ref().map(|(index, _)| slot_u32(*index)));
        if let Some((index, entry)) = next {
            // SAFETY: `submit_send` queued the entry under the submission
            // rule; its slot (waiting or orphaned) still keeps its buffer.
            unsafe { self.push(entry) };
            self.quiet_pushed.borrow_mut().push(index);
        }
    }
}
