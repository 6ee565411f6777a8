//! The router task's queue of inputs: filled in place, handled in turns.
//!
//! Every client request passes through it. Its inputs are built in their
//! slot (see `crate::in_place`), and the handler takes the whole queue at
//! once by swapping two buffers, which both keep their allocations, so a
//! steady load allocates nothing here. What a turn leaves stays where it
//! is for the next: a turn costs what it handles, however long the queue
//! (putting the rest back in front of the queue moved all of it, each
//! turn, which made a long queue's turns slower the longer it was).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::in_place::push_in_place;

pub(super) struct InputQueue<T> {
    queued: RefCell<Vec<T>>,
    /// The inputs taken from `queued` whole, handled from the front, over
    /// as many turns as they take; ahead of everything in `queued`.
    handling: RefCell<VecDeque<T>>,
    /// Inputs queued and not handled yet, those of the turn in progress
    /// included.
    waiting: Cell<usize>,
}

impl<T> InputQueue<T> {
    pub(super) fn new() -> InputQueue<T> {
        InputQueue {
            queued: RefCell::new(Vec::new()),
            handling: RefCell::new(VecDeque::new()),
            waiting: Cell::new(0),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.get() == 0
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
        for _ in 0..max {
            // `handle` may queue more: no borrow is held while it runs.
            let Some(input) = self.next() else {
                return;
            };
            self.waiting.set(self.waiting.get() - 1);
            handle(input);
        }
    }

    /// The oldest input, taking what was queued when the inputs taken
    /// before are all handled.
    fn next(&self) -> Option<T> {
        let mut handling = self.handling.borrow_mut();
        if handling.is_empty() {
            // Both conversions keep the buffer, without moving an input:
            // the empty one becomes the queue to fill.
            let empty = Vec::from(std::mem::take(&mut *handling));
            let queued = std::mem::replace(&mut *self.queued.borrow_mut(), empty);
            *handling = VecDeque::from(queued);
        }
        handling.pop_front()
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

    /// A turn moves none of the inputs it leaves: working through a long
    /// queue a turn at a time costs what the inputs cost, not the queue's
    /// length each turn (two seconds here when every turn moved the
    /// rest: 3,125 turns each moving up to 25 MB).
    #[test]
    fn a_long_queue_costs_each_turn_what_the_turn_handles() {
        let queue = InputQueue::new();
        let inputs = 200_000u64;
        for input in 0..inputs {
            queue.push_with(|| [input; 16]);
        }
        let started = std::time::Instant::now();
        let mut next = 0;
        while !queue.is_empty() {
            queue.handle_turn(64, |input| {
                assert_eq!(input[0], next);
                next += 1;
            });
        }
        assert_eq!(next, inputs);
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_millis(500),
            "took {took:?}"
        );
    }

    #[test]
    fn a_turn_of_an_empty_queue_handles_nothing() {
        let queue: InputQueue<u32> = InputQueue::new();
        queue.handle_turn(10, |_| panic!("nothing was queued"));
        assert!(queue.is_empty());
    }
}
