//! A page of a walk: the `limit` items with the smallest keys, in key
//! order, kept in memory bounded by the page rather than by the walk.
//!
//! The admin endpoint lists a core's objects and sessions a page at a
//! time, and a core may hold a million of them. Collecting every match
//! and then selecting the page made each listing a copy of all of them
//! (tens of MB, and the time to write it) on the core that serves the
//! requests. This keeps at most `2 * limit` candidates: when the buffer
//! fills, a selection cuts it back to the `limit` smallest, so the walk
//! costs O(n) time overall and O(limit) memory.

/// The `limit` items of `items` with the smallest `key`, in key order.
pub fn smallest_by_key<T, K: Ord>(
    items: impl Iterator<Item = T>,
    limit: usize,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    if limit == 0 {
        return Vec::new();
    }
    let room = limit.saturating_mul(2);
    let mut kept: Vec<T> = Vec::with_capacity(room.min(1024));
    for item in items {
        if kept.len() == room {
            keep_smallest(&mut kept, limit, &key);
        }
        kept.push(item);
    }
    keep_smallest(&mut kept, limit, &key);
    kept.sort_unstable_by_key(|item| key(item));
    kept
}

/// Cuts `kept` to its `limit` smallest by `key` (in no order).
fn keep_smallest<T, K: Ord>(kept: &mut Vec<T>, limit: usize, key: &impl Fn(&T) -> K) {
    if kept.len() > limit {
        kept.select_nth_unstable_by_key(limit, |item| key(item));
        kept.truncate(limit);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Counts the items alive at once: the page's bound on memory.
    struct Counted<'a> {
        key: u64,
        alive: &'a std::cell::Cell<usize>,
    }

    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.alive.set(self.alive.get() - 1);
        }
    }

    #[test]
    fn a_long_walk_holds_no_more_than_twice_the_page() {
        let alive = std::cell::Cell::new(0);
        let most = std::cell::Cell::new(0);
        let walk = (0..100_000u64).rev().map(|key| {
            alive.set(alive.get() + 1);
            most.set(most.get().max(alive.get()));
            Counted { key, alive: &alive }
        });
        let page = smallest_by_key(walk, 10, |item| item.key);
        let keys: Vec<u64> = page.iter().map(|item| item.key).collect();
        assert_eq!(keys, (0..10).collect::<Vec<_>>());
        assert!(most.get() <= 21, "{} items held at once", most.get());
    }

    proptest! {
        #[test]
        fn the_page_is_the_sorted_prefix(
            keys in proptest::collection::vec(any::<u16>(), 0..300),
            limit in 0usize..40,
        ) {
            let page = smallest_by_key(keys.iter().copied(), limit, |key| *key);
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            sorted.truncate(limit);
            prop_assert_eq!(page, sorted);
        }
    }
}
