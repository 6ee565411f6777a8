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

/// Whether `id` was made by incarnation `incarnation` of its node or by an
/// earlier one, as far as its 16 bits tell: they are read in serial-number
/// order (RFC 1982), so an id of a start up to 32,767 incarnations later
/// counts as later, however the bits wrapped.
pub const fn made_at_or_before(id: u64, incarnation: u64) -> bool {
    let made = (id >> INCARNATION_SHIFT) & INCARNATION_MASK;
    let ahead = made.wrapping_sub(incarnation) & INCARNATION_MASK;
    ahead == 0 || ahead > INCARNATION_MASK / 2
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

    #[test]
    fn an_id_is_made_at_or_before_an_incarnation_in_serial_order() {
        assert!(made_at_or_before(make(0, 7, 1), 7));
        assert!(made_at_or_before(make(0, 6, 1), 7));
        assert!(!made_at_or_before(make(0, 8, 1), 7), "a later start");
        // Across the 16 bits' wrap: 65,535 is just before 65,537 (1 in
        // its bits), and 65,537 just after 65,535.
        assert!(made_at_or_before(make(0, 65_535, 1), 65_537));
        assert!(!made_at_or_before(make(0, 65_537, 1), 65_535));
    }
}
