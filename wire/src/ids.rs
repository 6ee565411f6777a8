//! Where a session id and a request sequence number keep the index of the
//! core that made them, so a frame for either finds its core on any node
//! with no table shared between cores or nodes.
//!
//! Both are `core << 56 | incarnation << 40 | ...`: 8 bits of core index,
//! then 16 bits of the making node's incarnation at start (a reference kept
//! from an earlier run of the node never matches an id of this run), then
//! 40 bits the maker numbers as it likes.

/// Bits below the core index.
pub const CORE_SHIFT: u32 = 56;
/// Bits below the incarnation.
pub const INCARNATION_SHIFT: u32 = 40;
/// The largest core index an id can hold.
pub const CORE_MAX: usize = (1 << (64 - CORE_SHIFT)) - 1;
/// The low 40 bits the maker numbers.
pub const LOCAL_MASK: u64 = (1 << INCARNATION_SHIFT) - 1;
const INCARNATION_MASK: u64 = (1 << (CORE_SHIFT - INCARNATION_SHIFT)) - 1;

/// An id of `core` of a node started as `incarnation`, with `local` in its
/// low 40 bits (higher bits of `local` are dropped).
pub const fn make(core: usize, incarnation: u64, local: u64) -> u64 {
    (core as u64) << CORE_SHIFT
        | (incarnation & INCARNATION_MASK) << INCARNATION_SHIFT
        | (local & LOCAL_MASK)
}

/// The core that made `id`.
pub const fn core_of(id: u64) -> usize {
    (id >> CORE_SHIFT) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_stay_in_their_bits() {
        let id = make(3, 7, 99);
        assert_eq!(core_of(id), 3);
        assert_eq!(id & LOCAL_MASK, 99);
        assert_eq!((id >> INCARNATION_SHIFT) & INCARNATION_MASK, 7);
        assert_eq!(core_of(make(CORE_MAX, u64::MAX, u64::MAX)), CORE_MAX);
        assert_ne!(make(1, 1, 5), make(1, 2, 5), "another run, another id");
        assert_eq!(
            make(1, 1, (LOCAL_MASK + 1) + 5),
            make(1, 1, 5),
            "local wraps"
        );
    }
}
