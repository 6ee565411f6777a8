//! Stable hashing shared by every node.
//!
//! Two nodes must agree on which core owns a key and which candidate a
//! rendezvous pick chooses, across processes, platforms and releases. So the
//! hash is XXH64 (seed 0), from the maintained `twox-hash` crate, pinned by
//! tests against the reference vectors: it never depends on `std`'s
//! `Hasher` or on a per-process random seed (which rules out `ahash` and
//! `DefaultHasher`), and a crate release that changed a value fails the
//! tests.

/// XXH64 of `input` with the given seed, bit-exact with the reference
/// implementation (the `twox-hash` crate's one-shot XXH64; the vectors
/// below pin it, so a release of the crate that changed a value would fail
/// here before it moved a key).
pub fn xxh64(input: &[u8], seed: u64) -> u64 {
    twox_hash::XxHash64::oneshot(seed, input)
}

/// The project's stable 64-bit hash: XXH64 with seed 0.
pub fn stable_hash64(input: &[u8]) -> u64 {
    xxh64(input, 0)
}

/// Maps a uniformly distributed 64-bit hash onto `0..n` without the bias of
/// `%` and without a division (Lemire's multiply-shift reduction).
pub fn reduce(hash: u64, n: u32) -> u32 {
    ((u128::from(hash) * u128::from(n)) >> 64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_vectors() {
        // Vectors from the reference implementation (python `xxhash.xxh64`).
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
        // Long enough for the four-lane loop plus a tail of every size class.
        assert_eq!(
            xxh64(b"0123456789abcdef0123456789abcdef0123456789", 0),
            0xA761_90C3_ACF0_8A1C
        );
        let counting: Vec<u8> = (0u8..16).collect();
        assert_eq!(xxh64(&counting, 0), 0x44B6_EF2F_B841_69F7);
        // A seed changes the value (the crate takes seed, then input).
        assert_ne!(xxh64(b"abc", 1), xxh64(b"abc", 0));
        assert_eq!(stable_hash64(b"abc"), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn reduce_stays_in_range() {
        for n in 1..64 {
            assert!(reduce(u64::MAX, n) < n);
            assert_eq!(reduce(0, n), 0);
        }
    }
}
