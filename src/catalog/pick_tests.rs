use super::*;
use crate::catalog::actor::testing::actor;

fn weighted(node_id: u64, actor_id: u64, weight: u32) -> ActorConfig {
    let mut config = actor(node_id, actor_id, &[1]);
    config.weight = weight;
    config
}

/// The candidate set the pinned values below were computed for.
fn pinned_set() -> Vec<ActorConfig> {
    vec![
        weighted(1, 10, 1),
        weighted(1, 11, 2),
        weighted(2, 20, 3),
        weighted(3, 30, 4),
        weighted(4, 40, 0),
    ]
}

const PINNED_KEYS: [u64; 8] = [0, 1, 2, 42, 0xDEAD_BEEF, u64::MAX, 7, 1000];

#[test]
fn rendezvous_is_pinned() {
    // Expected values computed independently with the reference xxhash
    // (python `xxhash.xxh64(struct.pack('<QQQ', key, node, actor))`) and an
    // argmax in python. A change here breaks agreement between releases.
    assert_eq!(
        rendezvous_score(42, &weighted(1, 10, 1)),
        0x4a3d_b2a7_9c8c_543c
    );
    assert_eq!(
        rendezvous_score(0, &weighted(0, 0, 1)),
        0xbb33_02e8_a960_8868
    );
    let set = pinned_set();
    let picks: Vec<Option<usize>> = PINNED_KEYS
        .iter()
        .map(|&key| RendezvousHash.pick_one(key, &set))
        .collect();
    let expected = [1, 1, 2, 4, 2, 3, 0, 3].map(Some);
    assert_eq!(picks, expected);
}

#[test]
fn weighted_is_pinned() {
    // Same python check with `w / -math.log(u)`, which also cross-checks
    // `ln_stable` against a libm log on these inputs.
    let set = pinned_set();
    let picks: Vec<Option<usize>> = PINNED_KEYS
        .iter()
        .map(|&key| WeightedStrategy.pick_one(key, &set))
        .collect();
    let expected = [1, 1, 2, 1, 2, 3, 0, 3].map(Some);
    assert_eq!(picks, expected);
}

#[test]
fn empty_candidates_pick_nothing() {
    assert_eq!(RendezvousHash.pick_one(5, &[]), None);
    assert_eq!(WeightedStrategy.pick_one(5, &[]), None);
}

#[test]
fn pick_does_not_depend_on_list_order() {
    let set = pinned_set();
    let mut reversed = set.clone();
    reversed.reverse();
    for key in 0..2000u64 {
        for strategy in [&RendezvousHash as &dyn PickOne, &WeightedStrategy] {
            let a = &set[strategy.pick_one(key, &set).unwrap()];
            let b = &reversed[strategy.pick_one(key, &reversed).unwrap()];
            assert_eq!(a.stable_order_key(), b.stable_order_key());
        }
    }
}

fn share_counts(strategy: &dyn PickOne, set: &[ActorConfig], keys: u64) -> Vec<u64> {
    let mut counts = vec![0u64; set.len()];
    for key in 0..keys {
        counts[strategy.pick_one(key, set).unwrap()] += 1;
    }
    counts
}

#[test]
fn weighted_shares_follow_weights() {
    const KEYS: u64 = 200_000;
    let set = vec![
        weighted(1, 1, 1),
        weighted(1, 2, 0),
        weighted(2, 1, 2),
        weighted(3, 1, 3),
        weighted(4, 1, 4),
    ];
    let counts = share_counts(&WeightedStrategy, &set, KEYS);
    assert_eq!(
        counts[1], 0,
        "weight 0 is never picked beside positive weights"
    );
    let total_weight: u32 = set.iter().map(|c| c.weight).sum();
    for (candidate, count) in set.iter().zip(&counts) {
        let expected = f64::from(candidate.weight) / f64::from(total_weight);
        let measured = *count as f64 / KEYS as f64;
        // The standard error at 200k keys is under 0.0011; 0.01 is ~9 sigma,
        // yet tight enough to catch a score whose shares are not
        // proportional to the weights (such as a naive `weight * u`).
        assert!(
            (measured - expected).abs() < 0.01,
            "weight {} got {measured:.4}, expected {expected:.4}",
            candidate.weight
        );
    }
}

#[test]
fn all_zero_weights_fall_back_to_even_rendezvous() {
    let set: Vec<ActorConfig> = (0..4).map(|a| weighted(1, a, 0)).collect();
    for key in 0..500 {
        assert_eq!(
            WeightedStrategy.pick_one(key, &set),
            RendezvousHash.pick_one(key, &set)
        );
    }
    let counts = share_counts(&WeightedStrategy, &set, 40_000);
    for count in counts {
        assert!((9_000..11_000).contains(&count), "{count}");
    }
}

#[test]
fn rendezvous_spreads_evenly() {
    let set: Vec<ActorConfig> = (0..8).map(|a| weighted(a / 2, a, 1)).collect();
    let counts = share_counts(&RendezvousHash, &set, 80_000);
    for count in counts {
        assert!((9_400..10_600).contains(&count), "{count}");
    }
}

/// Removing one of N candidates moves exactly the keys it had; every other
/// key stays with the same actor.
fn assert_minimal_disruption(strategy: &dyn PickOne, set: &[ActorConfig]) {
    for removed in 0..set.len() {
        let mut rest = set.to_vec();
        let gone = rest.remove(removed).stable_order_key();
        let mut moved = 0;
        for key in 0..5_000u64 {
            let before = set[strategy.pick_one(key, set).unwrap()].stable_order_key();
            let after = rest[strategy.pick_one(key, &rest).unwrap()].stable_order_key();
            if before == gone {
                moved += 1;
                assert_ne!(after, gone);
            } else {
                assert_eq!(before, after, "key {key} moved without cause");
            }
        }
        assert!(moved > 0, "candidate {removed} had no keys to move");
    }
}

#[test]
fn rendezvous_minimal_disruption() {
    let set: Vec<ActorConfig> = (0..10).map(|a| weighted(a % 3, a, 1)).collect();
    assert_minimal_disruption(&RendezvousHash, &set);
}

#[test]
fn weighted_minimal_disruption() {
    let set: Vec<ActorConfig> = (0..10).map(|a| weighted(a % 3, a, 1 + a as u32)).collect();
    assert_minimal_disruption(&WeightedStrategy, &set);
}

#[test]
fn ln_stable_matches_libm() {
    let mut x = f64::MIN_POSITIVE;
    while x < 1e300 {
        for scale in [1.0, 1.1, 1.3, 1.41, 1.42, 1.7, 1.99] {
            let v = x * scale;
            let (ours, libm) = (ln_stable(v), v.ln());
            let tolerance = 4.0 * f64::EPSILON * libm.abs().max(1.0);
            assert!((ours - libm).abs() <= tolerance, "{v}: {ours} vs {libm}");
        }
        x *= 3.7;
    }
    assert_eq!(ln_stable(1.0), 0.0);
    // The extremes weighted_score feeds it are finite and of the right sign.
    assert!(weighted_score(0, 1).is_finite() && weighted_score(0, 1) > 0.0);
    assert!(weighted_score(u64::MAX, 1).is_finite() && weighted_score(u64::MAX, 1) > 0.0);
}

#[test]
fn pick_among_any_order_agrees_with_the_sorted_pick() {
    let set = pinned_set();
    // The set split in two (a node's own actors and the snapshot's) and in
    // reverse order: the same actor wins every key.
    let (local, remote) = set.split_at(2);
    for key in PINNED_KEYS.iter().copied().chain(100..400) {
        for weighted in [false, true] {
            let sorted = if weighted {
                WeightedStrategy.pick_one(key, &set)
            } else {
                RendezvousHash.pick_one(key, &set)
            };
            let among = pick_among(weighted, key, remote.iter().rev().chain(local.iter()));
            assert_eq!(
                among.map(ActorConfig::stable_order_key),
                sorted.map(|index| set[index].stable_order_key()),
                "key {key} weighted {weighted}"
            );
        }
    }
    assert!(pick_among(true, 1, [].iter()).is_none());
    // Every weight 0: plain rendezvous over all.
    let zeros = vec![weighted(1, 1, 0), weighted(2, 2, 0)];
    assert_eq!(
        pick_among(true, 9, zeros.iter()).map(|a| a.node_id),
        RendezvousHash.pick_one(9, &zeros).map(|i| zeros[i].node_id)
    );
}
