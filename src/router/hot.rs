//! The hottest objects of a core: the keys its requests name most, kept by
//! the space-saving algorithm (Metwally, Agrawal, El Abbadi, 2005) in
//! [`HOT_OBJECTS_KEPT`] slots, so counting costs one scan of a few slots
//! per request and no allocation whatever the number of keys.
//!
//! Any key with more than `1 / HOT_OBJECTS_KEPT` of a window's requests is
//! sure to hold a slot; a slot's count may exceed the key's true count by
//! at most its `error` (what the key it replaced had counted). Counts are
//! kept per window of [`HOT_WINDOW_MS`]: the report adds the window under
//! way to the one before, so an object that cooled down leaves the list
//! within two windows.

use wire::ObjectKey;

/// Slots per core.
pub const HOT_OBJECTS_KEPT: usize = 16;
/// The length of a counting window.
pub const HOT_WINDOW_MS: u64 = 60_000;

/// One slot: a key, the requests counted for it and the bound on how many
/// of them were another key's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotObject {
    pub key: ObjectKey,
    pub requests: u64,
    pub error: u64,
}

/// A core's counter (see the module's comment).
#[derive(Clone, Debug, Default)]
pub(crate) struct HotCounter {
    window_start_ms: u64,
    current: Vec<HotObject>,
    previous: Vec<HotObject>,
    /// Whether `previous` is a whole window that ended when `current`
    /// began (not one older, with nothing counted between).
    previous_adjacent: bool,
    /// The slot of `current` the last count went to: requests come in runs
    /// for one key (a connection's pipelined batch), and a run after its
    /// first request costs one comparison, not a scan of the slots. Checked
    /// by its key before use, so a stale index only costs the scan.
    last: usize,
}

impl HotCounter {
    /// Counts one request for `key` at `now_ms`.
    pub(crate) fn count(&mut self, now_ms: u64, key: ObjectKey) {
        self.roll(now_ms);
        if let Some(slot) = self.current.get_mut(self.last) {
            if slot.key == key {
                slot.requests += 1;
                return;
            }
        }
        if let Some(index) = self.current.iter().position(|slot| slot.key == key) {
            self.current[index].requests += 1;
            self.last = index;
            return;
        }
        if self.current.len() < HOT_OBJECTS_KEPT {
            self.current.push(HotObject {
                key,
                requests: 1,
                error: 0,
            });
            self.last = self.current.len() - 1;
            return;
        }
        // Full: the key takes the slot of the least counted, and its count.
        let least = (0..self.current.len())
            .min_by_key(|&index| self.current[index].requests)
            .expect("a full table has slots");
        let taken = self.current[least].requests;
        self.current[least] = HotObject {
            key,
            requests: taken + 1,
            error: taken,
        };
        self.last = least;
    }

    /// Starts a new window when the one under way has ended.
    fn roll(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.window_start_ms);
        if elapsed < HOT_WINDOW_MS {
            return;
        }
        self.previous = std::mem::take(&mut self.current);
        self.previous_adjacent = elapsed < 2 * HOT_WINDOW_MS;
        // Windows stay aligned, so one report covers at most two of them.
        self.window_start_ms = now_ms - elapsed % HOT_WINDOW_MS;
    }

    /// The keys counted over the window under way and the one before it
    /// (when it was the one just before), most requested first, with the
    /// length of time they cover.
    pub(crate) fn report(&mut self, now_ms: u64) -> (Vec<HotObject>, u64) {
        self.roll(now_ms);
        let mut covered = now_ms.saturating_sub(self.window_start_ms);
        let mut merged = self.current.clone();
        if self.previous_adjacent {
            covered += HOT_WINDOW_MS;
            for old in &self.previous {
                match merged.iter_mut().find(|slot| slot.key == old.key) {
                    Some(slot) => {
                        slot.requests += old.requests;
                        slot.error += old.error;
                    }
                    None => merged.push(*old),
                }
            }
        }
        merged.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.key.cmp(&b.key)));
        (merged, covered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u64) -> ObjectKey {
        ObjectKey::new(2, 0, id)
    }

    #[test]
    fn a_hot_key_holds_its_slot_among_many_cold_ones() {
        let mut counter = HotCounter::default();
        // Key 7 takes a fifth of the requests; 10,000 other keys one each.
        for cold in 0..10_000u64 {
            counter.count(1, key(1_000 + cold));
            if cold % 4 == 0 {
                counter.count(1, key(7));
            }
        }
        let (top, covered) = counter.report(1);
        assert_eq!(covered, 1);
        assert!(top.len() <= HOT_OBJECTS_KEPT);
        assert_eq!(top[0].key, key(7));
        // Its true count is 2,500: the slot says at least that, and no more
        // than its error above it.
        assert!(top[0].requests >= 2_500, "{:?}", top[0]);
        assert!(top[0].requests - top[0].error <= 2_500, "{:?}", top[0]);
    }

    /// The slot remembered for a run of one key changes no count: runs of
    /// keys, more keys than slots, counted as the plain scan counts them.
    #[test]
    fn runs_of_one_key_count_as_the_scan_counts_them() {
        fn scan(slots: &mut Vec<HotObject>, key: ObjectKey) {
            if let Some(slot) = slots.iter_mut().find(|slot| slot.key == key) {
                slot.requests += 1;
            } else if slots.len() < HOT_OBJECTS_KEPT {
                slots.push(HotObject {
                    key,
                    requests: 1,
                    error: 0,
                });
            } else if let Some(least) = slots.iter_mut().min_by_key(|slot| slot.requests) {
                *least = HotObject {
                    key,
                    requests: least.requests + 1,
                    error: least.requests,
                };
            }
        }
        let mut counter = HotCounter::default();
        let mut model = Vec::new();
        let mut state = 7u64;
        for _ in 0..5_000 {
            // A key among 40 (more than the slots), in runs of 1 to 16.
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = (state >> 33) % 40;
            for _ in 0..1 + (state >> 20) % 16 {
                counter.count(1, key(id));
                scan(&mut model, key(id));
            }
        }
        assert_eq!(counter.current, model);
    }

    #[test]
    fn a_report_covers_the_window_under_way_and_the_one_before() {
        let mut counter = HotCounter::default();
        counter.count(10, key(1));
        counter.count(HOT_WINDOW_MS + 10, key(1));
        counter.count(HOT_WINDOW_MS + 20, key(2));
        let (top, covered) = counter.report(HOT_WINDOW_MS + 30);
        assert_eq!(covered, HOT_WINDOW_MS + 30);
        assert_eq!(
            top.iter().map(|h| (h.key, h.requests)).collect::<Vec<_>>(),
            [(key(1), 2), (key(2), 1)]
        );
        // Two quiet windows later the old counts are gone.
        let (top, covered) = counter.report(4 * HOT_WINDOW_MS + 5);
        assert!(top.is_empty(), "{top:?}");
        assert_eq!(covered, 5);
    }
}
