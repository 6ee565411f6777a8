//! Stable hashing shared by every node.
//!
//! Two nodes must agree on which core owns a key and which candidate a
//! rendezvous pick chooses, across processes, platforms and releases. So the
//! hash is XXH64 (seed 0) implemented here from its public specification and
//! pinned by tests against the reference vectors: it never depends on a
//! crate's version, on `std`'s `Hasher`, or on a per-process random seed (which
//! rules out `ahash` and `DefaultHasher`).

const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;

fn read_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

fn read_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(word)
}

fn round(acc: u64, lane: u64) -> u64 {
    acc.wrapping_add(lane.wrapping_mul(PRIME64_2))
        .rotate_left(31)
        .wrapping_mul(PRIME64_1)
}

fn merge_round(acc: u64, lane_acc: u64) -> u64 {
    (acc ^ round(0, lane_acc))
        .wrapping_mul(PRIME64_1)
        .wrapping_add(PRIME64_4)
}

/// XXH64 of `input` with the given seed, bit-exact with the reference
/// implementation (little-endian reads on every platform).
pub fn xxh64(input: &[u8], seed: u64) -> u64 {
    let mut rest = input;
    let mut acc = if input.len() >= 32 {
        let mut v1 = seed.wrapping_add(PRIME64_1).wrapping_add(PRIME64_2);
        let mut v2 = seed.wrapping_add(PRIME64_2);
        let mut v3 = seed;
        let mut v4 = seed.wrapping_sub(PRIME64_1);
        while rest.len() >= 32 {
            v1 = round(v1, read_u64(&rest[0..]));
            v2 = round(v2, read_u64(&rest[8..]));
            v3 = round(v3, read_u64(&rest[16..]));
            v4 = round(v4, read_u64(&rest[24..]));
            rest = &rest[32..];
        }
        let mut acc = v1
            .rotate_left(1)
            .wrapping_add(v2.rotate_left(7))
            .wrapping_add(v3.rotate_left(12))
            .wrapping_add(v4.rotate_left(18));
        acc = merge_round(acc, v1);
        acc = merge_round(acc, v2);
        acc = merge_round(acc, v3);
        merge_round(acc, v4)
    } else {
        seed.wrapping_add(PRIME64_5)
    };
    acc = acc.wrapping_add(input.len() as u64);
    while rest.len() >= 8 {
        acc ^= round(0, read_u64(rest));
        acc = acc
            .rotate_left(27)
            .wrapping_mul(PRIME64_1)
            .wrapping_add(PRIME64_4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        acc ^= u64::from(read_u32(rest)).wrapping_mul(PRIME64_1);
        acc = acc
            .rotate_left(23)
            .wrapping_mul(PRIME64_2)
            .wrapping_add(PRIME64_3);
        rest = &rest[4..];
    }
    for &byte in rest {
        acc ^= u64::from(byte).wrapping_mul(PRIME64_5);
        acc = acc.rotate_left(11).wrapping_mul(PRIME64_1);
    }
    avalanche(acc)
}

fn avalanche(mut acc: u64) -> u64 {
    acc ^= acc >> 33;
    acc = acc.wrapping_mul(PRIME64_2);
    acc ^= acc >> 29;
    acc = acc.wrapping_mul(PRIME64_3);
    acc ^ (acc >> 32)
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
    }

    #[test]
    fn reduce_stays_in_range() {
        for n in 1..64 {
            assert!(reduce(u64::MAX, n) < n);
            assert_eq!(reduce(0, n), 0);
        }
    }
}
