//! The router task's queue of inputs: filled in place, handled in turns.
//!
//! Every client request passes through it. Its inputs are built in their
//! slot (see `crate::in_place`), and the handler takes the whole queue at
//! once by swapping two vectors, which both keep their allocations, so a
//! steady load allocates nothing here.

use std::cell::{Cell, RefCell};

use crate::in_place::push_in_place;

pub(super) struct InputQueue<T> {
    queued: RefCell<Vec<T>>,
    /// The inputs of the turn in progress, taken from `queued` whole; kept
    /// between turns only for its allocation.
    handling: RefCell<Vec<T>>,
    /// Inputs queued and not handled yet, those of the turn in progress
    /// included.
    waiting: Cell<usize>,
}

impl<T> InputQueue<T> {
    pub(super) fn new() -> InputQueue<T> {
        InputQueue {
            queued: RefCell::new(Vec::new()),
            handling: RefCell::new(Vec::new()),
            waiting: Cell::new(0),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queued.borrow().is_empty()
    }

    /// Inputs waiting to be handled, also during a turn.
    pub(super) fn len(&self) -> usize {
        self.waiting.get()
    }

    /// Queues the input `build` makes, built in its slot.
    #[inline(always)]
    pub(super) fn push_with(&self, build: impl FnOnce() -> T) {
        push_in_place(&mut self.queued.borrow_mut(), build);
        self.waiting.set(self.waiting.get() + 1);
    }

    /// Hands up to `max` inputs to `handle` in the order they were queued,
    /// those `handle` queues meanwhile included; the rest stay queued, in
    /// order, ahead of anything queued later.
    pub(super) fn handle_turn(&self, max: usize, mut handle: impl FnMut(T)) {
        let mut handled = 0;
        let mut batch = std::mem::take(&mut *self.handling.borrow_mut());
        while handled < max {
            // `handle` may queue more: no borrow is held while it runs.
            std::mem::swap(&mut batch, &mut *self.queued.borrow_mut());
            if batch.is_empty() {
                break;
            }
            let mut inputs = batch.drain(..);
            for input in inputs.by_ref().take(max - handled) {
                self.waiting.set(self.waiting.get() - 1);
                handle(input);
                handled += 1;
            }
            if inputs.len() > 0 {
                // The turn is over: what it left goes ahead of what came later.
                self.queued.borrow_mut().splice(0..0, inputs);
            }
        }
        *self.handling.borrow_mut() = batch;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::InputQueue;

    #[test]
    fn a_turn_handles_in_order_what_its_inputs_queue_too() {
        let queue = InputQueue::new();
        for input in 0..3 {
            queue.push_with(|| input);
        }
        let handled = RefCell::new(Vec::new());
        queue.handle_turn(10, |input| {
            handled.borrow_mut().push(input);
            if input == 1 {
                queue.push_with(|| 10);
            }
        });
        assert_eq!(*handled.borrow(), [0, 1, 2, 10]);
        assert!(queue.is_empty());
    }

    #[test]
    fn what_a_turn_leaves_goes_first_in_the_next() {
        let queue = InputQueue::new();
        for input in 0..5 {
            queue.push_with(|| input);
        }
        let handled = RefCell::new(Vec::new());
        queue.handle_turn(3, |input| {
            handled.borrow_mut().push(input);
            if input == 1 {
                // Waiting during the turn: 2, 3 and 4 of the turn's batch,
                // and this one.
                queue.push_with(|| 10);
                assert_eq!(queue.len(), 4);
            }
        });
        assert_eq!(*handled.borrow(), [0, 1, 2]);
        assert!(!queue.is_empty());
        assert_eq!(queue.len(), 3);
        queue.push_with(|| 11);
        queue.handle_turn(10, |input| handled.borrow_mut().push(input));
        assert_eq!(*handled.borrow(), [0, 1, 2, 3, 4, 10, 11]);
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_turn_of_an_empty_queue_handles_nothing() {
        let queue: InputQueue<u32> = InputQueue::new();
        queue.handle_turn(10, |_| panic!("nothing was queued"));
        assert!(queue.is_empty());
    }
}
