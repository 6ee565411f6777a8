//! The router task's queues of inputs: filled in place, handled in turns.
//!
//! Two queues ([`Inputs`]): the messages this core's objects send to
//! objects of this core, and everything else (every client request, what
//! other cores and nodes send, the store's replies, timers). Each keeps its
//! order; a turn takes at most an eighth of itself of the objects'
//! messages, so a storm of them (a fan-out that reaches itself) delays a
//! client by a few short turns instead of queueing it behind the whole
//! storm, and only they count against the bound on them (a burst of
//! clients does not refuse an object's message).
//!
//! Every client request passes through one. Its inputs are built in their
//! slot (see `crate::in_place`), and the handler takes the whole queue at
//! once by swapping two buffers, which both keep their allocations, so a
//! steady load allocates nothing here. What a turn leaves stays where it
//! is for the next: a turn costs what it handles, however long the queue
//! (putting the rest back in front of the queue moved all of it, each
//! turn, which made a long queue's turns slower the longer it was).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::in_place::push_in_place;

/// Objects' messages take at most this fraction of a turn. A turn's
/// answers leave at its end, and the core's ring and other tasks come
/// round between turns, so a client's request waits behind a few short
/// turns of a storm, not behind a whole turn of it (or the whole storm);
/// and the messages still get an eighth of every turn however busy its
/// clients are (a turn of them alone is short, not slow: the next follows
/// at once).
const MESSAGES_SHARE: usize = 8;

/// The two queues of a router task.
pub(super) struct Inputs<T> {
    /// Everything but `messages`.
    others: InputQueue<T>,
    /// Messages of this core's objects to objects of this core.
    messages: InputQueue<T>,
}

impl<T> Inputs<T> {
    pub(super) fn new() -> Inputs<T> {
        Inputs {
            others: InputQueue::new(),
            messages: InputQueue::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.others.is_empty() && self.messages.is_empty()
    }

    /// Messages of this core's objects waiting, also during a turn.
    pub(super) fn messages_waiting(&self) -> usize {
        self.messages.len()
    }

    /// Queues the input `build` makes, built in its slot.
    #[inline(always)]
    pub(super) fn push_with(&self, build: impl FnOnce() -> T) {
        self.others.push_with(build);
    }

    /// Queues a message of one of this core's objects to another.
    pub(super) fn push_message_with(&self, build: impl FnOnce() -> T) {
        self.messages.push_with(build);
    }

    /// Hands up to `max` inputs to `handle`, each queue in its order: a
    /// share of the objects' messages (`MESSAGES_SHARE`), then the other
    /// inputs.
    #[cfg(test)]
    pub(super) fn handle_turn(&self, max: usize, handle: impl FnMut(T)) {
        self.handle_turn_while(max, handle, || true);
    }

    /// [`Self::handle_turn`], ending the turn before an input once `go_on`
    /// says no (the turn holds as much as it may).
    pub(super) fn handle_turn_while(
        &self,
        max: usize,
        mut handle: impl FnMut(T),
        go_on: impl Fn() -> bool,
    ) {
        let handled = (self.messages).handle_while(max / MESSAGES_SHARE, &mut handle, &go_on);
        self.others.handle_while(max - handled, handle, &go_on);
    }
}

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
    /// order, ahead of anything queued later. Says how many it handed.
    #[cfg(test)]
    pub(super) fn handle_turn(&self, max: usize, handle: impl FnMut(T)) -> usize {
        self.handle_while(max, handle, &|| true)
    }

    /// [`Self::handle_turn`], stopping before an input once `go_on` says
    /// no.
    fn handle_while(
        &self,
        max: usize,
        mut handle: impl FnMut(T),
        go_on: &dyn Fn() -> bool,
    ) -> usize {
        for handled in 0..max {
            if !go_on() {
                return handled;
            }
            // `handle` may queue more: no borrow is held while it runs.
            let Some(input) = self.next() else {
                return handled;
            };
            self.waiting.set(self.waiting.get() - 1);
            handle(input);
        }
        max
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

    use super::{InputQueue, Inputs};

    #[test]
    fn a_turn_ends_before_an_input_once_it_may_hold_no_more() {
        let inputs = Inputs::new();
        for input in 0..10 {
            inputs.push_with(|| input);
        }
        let handled = RefCell::new(Vec::new());
        inputs.handle_turn_while(
            100,
            |input| handled.borrow_mut().push(input),
            || handled.borrow().len() < 4,
        );
        assert_eq!(*handled.borrow(), vec![0, 1, 2, 3]);
        inputs.handle_turn(100, |input| handled.borrow_mut().push(input));
        assert_eq!(
            *handled.borrow(),
            (0..10).collect::<Vec<_>>(),
            "the rest next turn"
        );
    }

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

    /// Objects' messages take at most an eighth of a turn, first; only
    /// messages count as messages waiting.
    #[test]
    fn objects_messages_share_each_turn_with_the_other_inputs() {
        let inputs = Inputs::new();
        for message in 0..100 {
            inputs.push_message_with(|| message);
        }
        for other in 1000..1004 {
            inputs.push_with(|| other);
        }
        assert_eq!(inputs.messages_waiting(), 100);
        let handled = RefCell::new(Vec::new());
        inputs.handle_turn(80, |input| handled.borrow_mut().push(input));
        let expected: Vec<u32> = (0..10).chain(1000..1004).collect();
        assert_eq!(
            *handled.borrow(),
            expected,
            "the turn ends after the others"
        );
        assert_eq!(inputs.messages_waiting(), 90);
        handled.borrow_mut().clear();
        inputs.handle_turn(80, |input| handled.borrow_mut().push(input));
        let expected: Vec<u32> = (10..20).collect();
        assert_eq!(*handled.borrow(), expected, "a short turn");
        handled.borrow_mut().clear();
        inputs.push_with(|| 1004);
        inputs.handle_turn(200, |input| handled.borrow_mut().push(input));
        let expected: Vec<u32> = (20..45).chain([1004]).collect();
        assert_eq!(*handled.borrow(), expected);
        assert_eq!(inputs.messages_waiting(), 55);
    }

    #[test]
    fn a_turn_of_an_empty_queue_handles_nothing() {
        let queue: InputQueue<u32> = InputQueue::new();
        queue.handle_turn(10, |_| panic!("nothing was queued"));
        assert!(queue.is_empty());
    }
}
