//! Pick strategies (`RemoteRouteStrategy.PickOne` in docs/origins.md): which
//! of a msgId's candidates gets a message with a given key.
//!
//! Both strategies score every candidate from a stable hash of
//! `(msg_key, node_id, actor_id)` and take the highest score, so every node
//! with the same candidate set picks the same actor, and a candidate's score
//! never depends on the others: removing one candidate moves only the keys
//! it had (minimal disruption). Ties, which need equal 64-bit hashes, go to
//! the lower index, i.e. the lower `(node_id, actor_id)`.

use wire::hash::stable_hash64;

use super::actor::ActorConfig;

/// Chooses one candidate index for a message key, or `None` when there is no
/// candidate. `msg_key` is what must stick to one actor (`KeyFunc` in
/// docs/origins.md): e.g. `stable_hash64` of an object key or a session id.
pub trait PickOne {
    fn pick_one(&self, msg_key: u64, candidates: &[ActorConfig]) -> Option<usize>;
}

/// Highest-random-weight hashing, every candidate equal.
#[derive(Clone, Copy, Debug, Default)]
pub struct RendezvousHash;

/// Weighted rendezvous (logarithmic method): candidate `i` scores
/// `weight_i / -ln(u_i)` with `u_i` in (0, 1) from its hash, which gives it
/// `weight_i / sum(weight)` of the keys.
///
/// Weight 0 means "send nothing here" while any candidate has a positive
/// weight. If every candidate has weight 0 the strategy falls back to plain
/// [`RendezvousHash`] over all of them: a misconfigured set still routes,
/// evenly, instead of dropping every message.
#[derive(Clone, Copy, Debug, Default)]
pub struct WeightedStrategy;

/// The stable per-candidate hash: XXH64 (seed 0) of the key, node id and actor
/// id as little-endian u64s. Identities, not addresses, so a candidate keeps
/// its keys across versions of the registry.
pub(crate) fn rendezvous_score(msg_key: u64, candidate: &ActorConfig) -> u64 {
    let mut input = [0u8; 24];
    input[..8].copy_from_slice(&msg_key.to_le_bytes());
    input[8..16].copy_from_slice(&candidate.node_id.to_le_bytes());
    input[16..].copy_from_slice(&candidate.actor_id.to_le_bytes());
    stable_hash64(&input)
}

impl PickOne for RendezvousHash {
    fn pick_one(&self, msg_key: u64, candidates: &[ActorConfig]) -> Option<usize> {
        pick_index(false, msg_key, candidates.iter())
    }
}

impl PickOne for WeightedStrategy {
    fn pick_one(&self, msg_key: u64, candidates: &[ActorConfig]) -> Option<usize> {
        pick_index(true, msg_key, candidates.iter())
    }
}

/// The candidate that gets `msg_key` among `candidates` in any order (a
/// node's own actors and its snapshot's, say): the same one as
/// [`RendezvousHash`] (or [`WeightedStrategy`] when `weighted`) picks from
/// the same candidates sorted by `(node_id, actor_id)`, ties included.
pub fn pick_among<'a>(
    weighted: bool,
    msg_key: u64,
    candidates: impl Iterator<Item = &'a ActorConfig> + Clone,
) -> Option<&'a ActorConfig> {
    let index = pick_index(weighted, msg_key, candidates.clone())?;
    candidates.into_iter().nth(index)
}

/// The index of the best-scoring candidate; on equal scores, the one with
/// the lower `(node_id, actor_id)`.
fn pick_index<'a>(
    weighted: bool,
    msg_key: u64,
    candidates: impl Iterator<Item = &'a ActorConfig> + Clone,
) -> Option<usize> {
    // Weight 0 everywhere: plain rendezvous over all, rather than nothing.
    let weighted = weighted && candidates.clone().any(|c| c.weight > 0);
    let mut best: Option<(usize, f64, u64, (u64, u64))> = None;
    for (index, candidate) in candidates.enumerate() {
        if weighted && candidate.weight == 0 {
            continue;
        }
        let hash = rendezvous_score(msg_key, candidate);
        let score = if weighted {
            weighted_score(hash, candidate.weight)
        } else {
            0.0
        };
        let order = candidate.stable_order_key();
        let better = match best {
            None => true,
            Some((_, top_score, top_hash, top_order)) => {
                let ordering = if weighted {
                    score.total_cmp(&top_score)
                } else {
                    hash.cmp(&top_hash)
                };
                ordering.is_gt() || (ordering.is_eq() && order < top_order)
            }
        };
        if better {
            best = Some((index, score, hash, order));
        }
    }
    best.map(|(index, ..)| index)
}

/// `weight / -ln(u)` with `u` uniform in (0, 1) from the top 52 bits of the
/// hash: `u = (x + 0.5) / 2^52` is exact in f64 and never 0 or 1, so the score
/// is finite and positive.
pub(crate) fn weighted_score(hash: u64, weight: u32) -> f64 {
    const TWO_POW_52: f64 = (1u64 << 52) as f64;
    let u = ((hash >> 12) as f64 + 0.5) / TWO_POW_52;
    f64::from(weight) / -ln_stable(u)
}

/// Natural log of a positive normal f64 from IEEE basic operations only
/// (+, -, *, / are correctly rounded everywhere, and Rust never fuses them),
/// so every node computes the same bits. `f64::ln` calls the platform's libm,
/// whose last bit may differ between systems, which could flip a near-tie
/// pick between two nodes.
pub(crate) fn ln_stable(x: f64) -> f64 {
    const LN_2: f64 = std::f64::consts::LN_2;
    const SQRT_2: f64 = std::f64::consts::SQRT_2;
    debug_assert!(x.is_normal() && x > 0.0);
    let bits = x.to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // The mantissa as a number in [1, 2), then moved to [sqrt(1/2), sqrt(2))
    // so that the series argument below stays under 0.1716.
    let mut mantissa = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if mantissa > SQRT_2 {
        mantissa /= 2.0;
        exponent += 1;
    }
    // ln(m) = 2 atanh(s), s = (m - 1) / (m + 1): 2 (s + s^3/3 + s^5/5 + ...).
    // With s^2 < 0.0295, eleven terms bring the tail under 2^-53.
    let s = (mantissa - 1.0) / (mantissa + 1.0);
    let s2 = s * s;
    let mut series = 1.0 / 23.0;
    for odd in [21.0, 19.0, 17.0, 15.0, 13.0, 11.0, 9.0, 7.0, 5.0, 3.0, 1.0] {
        series = 1.0 / odd + s2 * series;
    }
    exponent as f64 * LN_2 + 2.0 * s * series
}

#[cfg(test)]
#[path = "pick_tests.rs"]
mod tests;
