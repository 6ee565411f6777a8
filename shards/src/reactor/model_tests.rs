//! The model test of the operation slots: a fake ring completes
//! operations as the kernel would (writing into the memory it was lent
//! first, then posting the completion), while futures poll, take results
//! and are dropped in flight, in a random order drawn from a seeded
//! generator. Every buffer of the fake buffer ring, every descriptor an
//! accept made and every piece of memory lent to the kernel is counted, so
//! a leak, a double give-back or a free before the last completion fails
//! an assertion; CI also runs it under valgrind's memcheck, which sees a
//! write into freed memory (`.ci/run`).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::slots::{Slot, SlotEnv, SlotTable};
use super::{MultiKind, SendChain, CQE_F_BUFFER};
use crate::bufring::RecvQuota;

/// `IORING_CQE_F_MORE`: more completions of this operation follow.
const CQE_F_MORE: u32 = 1 << 1;
/// `IORING_CQE_BUFFER_SHIFT`: where a completion's buffer id sits in its flags.
const CQE_BUFFER_SHIFT: u32 = 16;
/// Buffers of the fake buffer ring: few, so receives run it dry often.
const FAKE_BUFFERS: u16 = 16;
const FAKE_BUFFER_BYTES: usize = 64;
/// A connection's share of the fake ring: small, so receives reach it.
const HELD_MAX: u32 = 3;
/// Steps of one run, and the seeds run: thousands of operations each.
const STEPS: usize = 20_000;
const SEEDS: [u64; 3] = [1, 0x5eed, 0xdead_beef];

/// splitmix64: a seeded generator, so a failing sequence can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What the fake kernel and buffer ring hold, and the counts the test
/// checks.
#[derive(Default)]
struct FakeRing {
    /// Per buffer id: the kernel may fill it (else it is lent out).
    in_kernel: RefCell<Vec<bool>>,
    /// The buffers' bytes, written by the fake kernel.
    memory: RefCell<Vec<[u8; FAKE_BUFFER_BYTES]>>,
    /// Descriptors accepts made that nobody has closed yet.
    open_fds: RefCell<BTreeSet<i32>>,
    next_fd: Cell<i32>,
    /// Cancels asked for, by slot index, not yet seen by the kernel.
    cancels: RefCell<VecDeque<usize>>,
    /// Registered file indexes whose close completed.
    files_released: RefCell<Vec<u32>>,
    held_max_total: Cell<u64>,
    spilled_total: Cell<u64>,
}

impl FakeRing {
    fn new() -> FakeRing {
        let ring = FakeRing::default();
        *ring.in_kernel.borrow_mut() = vec![true; usize::from(FAKE_BUFFERS)];
        *ring.memory.borrow_mut() = vec![[0; FAKE_BUFFER_BYTES]; usize::from(FAKE_BUFFERS)];
        ring.next_fd.set(1000);
        ring
    }

    /// The kernel picks a buffer for a receive, if it has one, and fills it.
    fn pick_buffer(&self, fill: u8) -> Option<u16> {
        let mut in_kernel = self.in_kernel.borrow_mut();
        let bid = in_kernel.iter().position(|&free| free)?;
        in_kernel[bid] = false;
        self.memory.borrow_mut()[bid] = [fill; FAKE_BUFFER_BYTES];
        Some(bid as u16)
    }

    fn accept_fd(&self) -> i32 {
        let fd = self.next_fd.get();
        self.next_fd.set(fd + 1);
        assert!(self.open_fds.borrow_mut().insert(fd));
        fd
    }

    fn user_closes(&self, fd: i32) {
        assert!(
            self.open_fds.borrow_mut().remove(&fd),
            "descriptor {fd} closed twice or never made"
        );
    }
}

impl SlotEnv for FakeRing {
    fn give_back(&self, bid: u16) {
        let mut in_kernel = self.in_kernel.borrow_mut();
        let free = &mut in_kernel[usize::from(bid)];
        assert!(!*free, "buffer {bid} given back while the kernel has it");
        *free = true;
    }

    fn spill(&self, bid: u16, len: usize) -> Vec<u8> {
        assert!(
            !self.in_kernel.borrow()[usize::from(bid)],
            "spill of a free buffer"
        );
        let bytes = self.memory.borrow()[usize::from(bid)][..len].to_vec();
        self.spilled_total.set(self.spilled_total.get() + 1);
        self.give_back(bid);
        bytes
    }

    fn close_accepted(&self, fd: i32) {
        self.user_closes(fd);
    }

    fn cancel(&self, index: usize) {
        self.cancels.borrow_mut().push_back(index);
    }

    fn advance(&self, _chain: &SendChain) {
        unreachable!("the model's sends are not chained");
    }

    fn release_file(&self, file: u32) {
        self.files_released.borrow_mut().push(file);
    }

    fn count_held_max(&self) {
        self.held_max_total.set(self.held_max_total.get() + 1);
    }
}

/// Memory lent to the kernel with a one-shot operation. Dropping it while
/// the kernel may still write it fails the test (and the fake kernel's
/// write into it would be a use after free, which memcheck reports).
struct Kept {
    bytes: Box<[u8; 32]>,
    op: u64,
    kernel_ops: Rc<RefCell<BTreeSet<u64>>>,
    drops: Rc<Cell<u64>>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        assert!(
            !self.kernel_ops.borrow().contains(&self.op),
            "memory of operation {} freed before its last completion",
            self.op
        );
        self.drops.set(self.drops.get() + 1);
    }
}

/// An operation as the fake kernel sees it.
enum KernelOp {
    /// Writes `fill` into `target` (memory the operation was lent), then
    /// completes once.
    OneShot {
        op: u64,
        target: *mut u8,
        fill: u8,
    },
    Recv,
    Accept,
    FileClose,
}

/// A future of the test, waiting on a slot.
enum Waiter {
    OneShot {
        index: usize,
        keep: Option<Box<Kept>>,
        fill: u8,
    },
    Recv {
        index: usize,
        quota: Rc<RecvQuota>,
    },
    Accept {
        index: usize,
    },
}

struct Model {
    table: SlotTable,
    ring: FakeRing,
    rng: Rng,
    /// Operations in the fake kernel, by slot index.
    kernel: BTreeMap<usize, KernelOp>,
    kernel_ops: Rc<RefCell<BTreeSet<u64>>>,
    waiters: Vec<Waiter>,
    /// Buffers readers hold, with the share they count against.
    held: Vec<(u16, Rc<RecvQuota>)>,
    quotas: Vec<Rc<RecvQuota>>,
    /// Descriptors accepts handed to the test, not yet closed.
    accepted: Vec<i32>,
    /// Receives whose socket was shut down as their future was dropped
    /// (`orphan_ending`, no cancel): the kernel ends them by itself.
    shut: BTreeSet<usize>,
    next_op: u64,
    kept_made: u64,
    kept_drops: Rc<Cell<u64>>,
    completions: u64,
}

impl Model {
    fn new(seed: u64) -> Model {
        Model {
            table: SlotTable::default(),
            ring: FakeRing::new(),
            rng: Rng(seed),
            kernel: BTreeMap::new(),
            kernel_ops: Rc::default(),
            waiters: Vec::new(),
            held: Vec::new(),
            quotas: Vec::new(),
            accepted: Vec::new(),
            shut: BTreeSet::new(),
            next_op: 0,
            kept_made: 0,
            kept_drops: Rc::default(),
            completions: 0,
        }
    }

    fn submit_one_shot(&mut self) {
        let op = self.next_op;
        self.next_op += 1;
        let fill = (op % 251) as u8 + 1;
        let mut keep = Box::new(Kept {
            bytes: Box::new([0; 32]),
            op,
            kernel_ops: self.kernel_ops.clone(),
            drops: self.kept_drops.clone(),
        });
        self.kept_made += 1;
        let target = keep.bytes.as_mut_ptr();
        let index = self.table.alloc(Slot::Waiting {
            waker: None,
            chain: None,
        });
        self.kernel_ops.borrow_mut().insert(op);
        assert!(self
            .kernel
            .insert(index, KernelOp::OneShot { op, target, fill })
            .is_none());
        self.waiters.push(Waiter::OneShot {
            index,
            keep: Some(keep),
            fill,
        });
    }

    fn submit_multi(&mut self, kind: MultiKind) {
        let quota = RecvQuota::new(HELD_MAX);
        let index = self.table.alloc(Slot::Multi {
            results: VecDeque::new(),
            waker: None,
            more: true,
            kind,
            quota: (kind == MultiKind::Recv).then(|| quota.clone()),
            spilled: None,
        });
        let (op, waiter) = match kind {
            MultiKind::Recv => {
                self.quotas.push(quota.clone());
                (KernelOp::Recv, Waiter::Recv { index, quota })
            }
            MultiKind::Accept => (KernelOp::Accept, Waiter::Accept { index }),
        };
        assert!(self.kernel.insert(index, op).is_none());
        self.waiters.push(waiter);
    }

    fn submit_file_close(&mut self) {
        let file = self.rng.below(64) as u32;
        let index = self.table.alloc(Slot::FileClose(file));
        assert!(self.kernel.insert(index, KernelOp::FileClose).is_none());
    }

    /// The kernel sees the oldest cancel: the operation at that index (if
    /// any) ends with ECANCELED.
    fn kernel_cancels(&mut self) {
        let Some(index) = self.ring.cancels.borrow_mut().pop_front() else {
            return;
        };
        if matches!(
            self.kernel.get(&index),
            Some(KernelOp::Recv | KernelOp::Accept)
        ) {
            self.kernel.remove(&index);
            self.shut.remove(&index);
            self.post(index, -libc::ECANCELED, 0);
        }
    }

    /// The kernel completes one step of a random operation it holds.
    fn kernel_completes(&mut self) {
        if self.kernel.is_empty() {
            return;
        }
        let nth = self.rng.below(self.kernel.len());
        let index = *self.kernel.keys().nth(nth).unwrap();
        let last_roll = self.rng.below(16) == 0;
        match self.kernel.get(&index).unwrap() {
            &KernelOp::OneShot { op, target, fill } => {
                // SAFETY: the test's own invariant under check: the memory
                // lent with the operation lives until this completion
                // (memcheck reports the write if it does not).
                unsafe { std::ptr::write_bytes(target, fill, 32) };
                self.kernel.remove(&index);
                self.kernel_ops.borrow_mut().remove(&op);
                self.post(index, 32, 0);
            }
            KernelOp::Recv => {
                let fill = self.rng.below(200) as u8 + 1;
                // A shut socket may still deliver what arrived before.
                let shut = self.shut.contains(&index) && self.rng.below(2) == 0;
                if last_roll || shut {
                    // End of stream: no buffer, no more.
                    self.kernel.remove(&index);
                    self.shut.remove(&index);
                    self.post(index, 0, 0);
                    return;
                }
                match self.ring.pick_buffer(fill) {
                    Some(bid) => {
                        let len = 1 + self.rng.below(FAKE_BUFFER_BYTES);
                        let flags =
                            CQE_F_BUFFER | CQE_F_MORE | (u32::from(bid) << CQE_BUFFER_SHIFT);
                        self.post(index, len as i32, flags);
                    }
                    None => {
                        self.kernel.remove(&index);
                        self.shut.remove(&index);
                        self.post(index, -libc::ENOBUFS, 0);
                    }
                }
            }
            KernelOp::Accept => {
                if last_roll {
                    self.kernel.remove(&index);
                    self.post(index, -libc::EMFILE, 0);
                    return;
                }
                let fd = self.ring.accept_fd();
                self.post(index, fd, CQE_F_MORE);
            }
            KernelOp::FileClose => {
                self.kernel.remove(&index);
                self.post(index, 0, 0);
            }
        }
    }

    fn post(&mut self, index: usize, result: i32, flags: u32) {
        self.completions += 1;
        // The waker is the no-op waker: the test polls every future itself.
        drop(self.table.complete(index, result, flags, &self.ring));
    }

    /// Polls a random future; what it takes it holds or lets go of.
    fn poll_one(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        let at = self.rng.below(self.waiters.len());
        let mut cx = Context::from_waker(Waker::noop());
        let finished = match &mut self.waiters[at] {
            Waiter::OneShot { index, keep, fill } => match self.table.poll_op(*index, &mut cx) {
                Poll::Ready((result, _)) => {
                    assert_eq!(result, 32);
                    let keep = keep.take().expect("a one-shot completes once");
                    assert!(keep.bytes.iter().all(|byte| byte == fill));
                    true
                }
                Poll::Pending => false,
            },
            Waiter::Recv { index, quota } => match self.table.poll_multi(*index, &mut cx) {
                Poll::Ready(Some((result, flags))) => {
                    if result > 0 {
                        match io_uring::cqueue::buffer_select(flags) {
                            Some(bid) => self.held.push((bid, quota.clone())),
                            None => {
                                let bytes = self.table.take_spilled(*index);
                                let bytes = bytes.expect("a receive without a buffer was spilled");
                                assert_eq!(bytes.len(), result as usize);
                            }
                        }
                    }
                    false
                }
                Poll::Ready(None) => true,
                Poll::Pending => false,
            },
            Waiter::Accept { index } => match self.table.poll_multi(*index, &mut cx) {
                Poll::Ready(Some((fd, _))) => {
                    if fd >= 0 {
                        self.accepted.push(fd);
                    }
                    false
                }
                Poll::Ready(None) => true,
                Poll::Pending => false,
            },
        };
        if finished {
            self.waiters.swap_remove(at);
        }
    }

    /// Drops a random future, in flight or not, as a task being dropped
    /// does.
    fn drop_one(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        let at = self.rng.below(self.waiters.len());
        match self.waiters.swap_remove(at) {
            Waiter::OneShot { index, keep, .. } => {
                let keep = keep.map(|keep| keep as Box<dyn std::any::Any>);
                self.table.orphan(index, keep, &self.ring);
            }
            // A stream dropped with its socket shut down: no cancel.
            Waiter::Recv { index, .. } if self.rng.below(2) == 0 => {
                if self.kernel.contains_key(&index) {
                    self.shut.insert(index);
                }
                self.table.orphan_ending(index, &self.ring);
            }
            Waiter::Recv { index, .. } | Waiter::Accept { index } => {
                self.table.orphan(index, None, &self.ring);
            }
        }
    }

    /// A reader gives a random buffer back (a `RecvBuf` dropped).
    fn release_one(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let at = self.rng.below(self.held.len());
        let (bid, quota) = self.held.swap_remove(at);
        quota.released();
        self.ring.give_back(bid);
    }

    fn close_one(&mut self) {
        if self.accepted.is_empty() {
            return;
        }
        let at = self.rng.below(self.accepted.len());
        let fd = self.accepted.swap_remove(at);
        self.ring.user_closes(fd);
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=11 => self.submit_one_shot(),
            12..=17 => self.submit_multi(MultiKind::Recv),
            18..=19 => self.submit_multi(MultiKind::Accept),
            20 => self.submit_file_close(),
            21..=50 => self.kernel_completes(),
            51..=55 => self.kernel_cancels(),
            56..=75 => self.poll_one(),
            76..=85 => self.drop_one(),
            86..=95 => self.release_one(),
            _ => self.close_one(),
        }
    }

    /// Everything ends: the futures are dropped, the kernel completes what
    /// it still holds, readers and accept owners let go.
    fn finish(&mut self) {
        while !self.waiters.is_empty() {
            self.drop_one();
        }
        let mut turns = 0;
        while !self.kernel.is_empty() || !self.ring.cancels.borrow().is_empty() {
            turns += 1;
            assert!(turns < 1_000_000, "the fake kernel never finished");
            if self.ring.cancels.borrow().is_empty() {
                self.kernel_completes();
            } else {
                self.kernel_cancels();
            }
        }
        while !self.held.is_empty() {
            self.release_one();
        }
        while !self.accepted.is_empty() {
            self.close_one();
        }
    }

    fn check_nothing_leaked(&self) {
        assert_eq!(self.table.in_flight(), 0, "slots left occupied");
        assert!(
            self.ring.in_kernel.borrow().iter().all(|&free| free),
            "a buffer never came back to the ring"
        );
        assert!(
            self.ring.open_fds.borrow().is_empty(),
            "accepted descriptors never closed: {:?}",
            self.ring.open_fds.borrow()
        );
        assert_eq!(
            self.kept_drops.get(),
            self.kept_made,
            "memory lent to the kernel freed a different number of times than lent"
        );
        assert!(self.kernel_ops.borrow().is_empty());
        for quota in &self.quotas {
            assert_eq!(quota.held(), 0, "a share still counts a buffer");
        }
    }
}

/// Thousands of operations, completions, polls and drops in flight in a
/// seeded random order: every buffer comes back exactly once, every
/// accepted descriptor is closed exactly once, and memory lent to the
/// kernel is freed exactly once, after the operation's last completion.
#[test]
fn op_slots_against_a_fake_ring_leak_nothing_and_free_nothing_early() {
    for seed in SEEDS {
        let mut model = Model::new(seed);
        for _ in 0..STEPS {
            model.step();
        }
        model.finish();
        model.check_nothing_leaked();
        // The run went through the paths it is meant to: drops in flight,
        // a dry ring, shares reached and spills past them.
        assert!(
            model.kept_made > 1000,
            "seed {seed}: one-shots {}",
            model.kept_made
        );
        assert!(
            model.completions > 5000,
            "seed {seed}: completions {}",
            model.completions
        );
        assert!(
            model.ring.held_max_total.get() > 0,
            "seed {seed}: no share reached"
        );
        assert!(
            model.ring.spilled_total.get() > 0,
            "seed {seed}: nothing spilled"
        );
        assert!(!model.ring.files_released.borrow().is_empty());
    }
}
