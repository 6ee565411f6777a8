//! One session's in-flight requests: `seq -> (route_id, deadline)`.
//!
//! Every accepted request inserts here and every answer removes, so this is
//! on the path of every request twice. A general hash map did both with a
//! SIMD probe and, under the constant churn of fresh seqs, left tombstones
//! that forced periodic rehashes (3% of a routed request's CPU). This is an
//! open-addressing table with linear probing and backward-shift deletion:
//! no tombstones, and for the common increasing seqs a Fibonacci hash puts
//! each key in its home slot, so an operation is one or two slot reads.

use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub route_id: u32,
    /// When the gateway answers TIMEOUT itself.
    pub deadline: Instant,
}

#[derive(Clone, Copy)]
struct Slot {
    seq: u32,
    request: InFlight,
}

const MIN_CAPACITY: usize = 8;
/// An empty table larger than this gives its slots back: a session that
/// once had `inflight_max` requests in flight should not keep the room for
/// them while it idles.
const IDLE_CAPACITY_MAX: usize = 64;

#[derive(Default)]
pub struct InFlightTable {
    /// A power of two long (or empty), at most half full.
    slots: Vec<Option<Slot>>,
    len: usize,
}

impl InFlightTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, seq: u32) -> bool {
        self.find(seq).is_some()
    }

    /// Records `seq`, which must not be in flight already (the caller has
    /// checked with [`Self::contains`]).
    pub fn insert(&mut self, seq: u32, request: InFlight) {
        debug_assert!(!self.contains(seq));
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut index = home(seq, mask);
        while self.slots[index].is_some() {
            index = (index + 1) & mask;
        }
        self.slots[index] = Some(Slot { seq, request });
        self.len += 1;
    }

    pub fn remove(&mut self, seq: u32) -> Option<InFlight> {
        let mut hole = self.find(seq)?;
        let removed = self.slots[hole].take().map(|slot| slot.request);
        self.len -= 1;
        if self.len == 0 && self.slots.len() > IDLE_CAPACITY_MAX {
            self.slots = Vec::new();
            return removed;
        }
        // Backward shift: move later members of the probe run into the
        // hole when that keeps them reachable from their home slot.
        let mask = self.slots.len() - 1;
        let mut next = (hole + 1) & mask;
        while let Some(slot) = self.slots[next] {
            let home = home(slot.seq, mask);
            // `slot` may move to `hole` iff its home is not cyclically
            // within (hole, next].
            let distance_to_home = next.wrapping_sub(home) & mask;
            let distance_to_hole = next.wrapping_sub(hole) & mask;
            if distance_to_home >= distance_to_hole {
                self.slots[hole] = Some(slot);
                self.slots[next] = None;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        removed
    }

    /// Every request in flight, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &InFlight)> {
        self.slots
            .iter()
            .flatten()
            .map(|slot| (slot.seq, &slot.request))
    }

    fn find(&self, seq: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut index = home(seq, mask);
        loop {
            match &self.slots[index] {
                None => return None,
                Some(slot) if slot.seq == seq => return Some(index),
                Some(_) => index = (index + 1) & mask,
            }
        }
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(MIN_CAPACITY);
        let old = std::mem::replace(&mut self.slots, vec![None; capacity]);
        self.len = 0;
        for slot in old.into_iter().flatten() {
            self.insert(slot.seq, slot.request);
        }
    }
}

/// Fibonacci hashing (the top bits of `seq` times 2^32 / phi): consecutive
/// seqs land in distinct, spread-out slots. `mask` is the slot count minus
/// one, at most `u32::MAX`.
fn home(seq: u32, mask: usize) -> usize {
    let bits = mask.count_ones();
    if bits == 0 {
        return 0;
    }
    (seq.wrapping_mul(0x9E37_79B9) >> (32 - bits)) as usize
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn request(route_id: u32) -> InFlight {
        InFlight {
            route_id,
            deadline: Instant::now() + Duration::from_secs(1),
        }
    }

    #[test]
    fn insert_find_remove() {
        let mut table = InFlightTable::default();
        assert!(!table.contains(7));
        assert_eq!(table.remove(7), None);
        let seven = request(70);
        table.insert(7, seven);
        table.insert(8, request(80));
        assert!(table.contains(7));
        assert_eq!(table.len(), 2);
        assert_eq!(table.remove(7), Some(seven));
        assert_eq!(table.remove(7), None);
        assert!(table.contains(8));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_stream_of_fresh_seqs_keeps_the_table_small() {
        let mut table = InFlightTable::default();
        for seq in 0..100_000u32 {
            table.insert(seq, request(1));
            if seq >= 16 {
                assert!(table.remove(seq - 16).is_some());
            }
        }
        assert_eq!(table.len(), 16);
        assert!(table.slots.len() <= 64, "{}", table.slots.len());
    }

    #[test]
    fn an_emptied_large_table_gives_its_slots_back() {
        let mut table = InFlightTable::default();
        for seq in 0..1024 {
            table.insert(seq, request(1));
        }
        assert!(table.slots.len() >= 2048);
        for seq in 0..1024 {
            assert!(table.remove(seq).is_some());
        }
        assert!(table.is_empty());
        assert_eq!(table.slots.len(), 0);
        table.insert(5, request(1));
        assert!(table.contains(5));
        assert_eq!(table.slots.len(), MIN_CAPACITY);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32),
        Remove(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // A small key space makes collisions, long probe runs and
        // wrap-around at the end of the slots common.
        prop_oneof![
            (0u32..64).prop_map(Op::Insert),
            (0u32..64).prop_map(Op::Remove),
            any::<u32>().prop_map(Op::Insert),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut table = InFlightTable::default();
            let mut model: HashMap<u32, InFlight> = HashMap::new();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(seq) => {
                        if let std::collections::hash_map::Entry::Vacant(vacant) = model.entry(seq) {
                            let value = request(step as u32);
                            table.insert(seq, value);
                            vacant.insert(value);
                        }
                    }
                    Op::Remove(seq) => {
                        prop_assert_eq!(table.remove(seq), model.remove(&seq));
                    }
                }
                prop_assert_eq!(table.len(), model.len());
                let seen: HashMap<u32, InFlight> =
                    table.iter().map(|(seq, value)| (seq, *value)).collect();
                prop_assert_eq!(&seen, &model);
                for &seq in model.keys() {
                    prop_assert!(table.contains(seq));
                }
            }
        }
    }
}
