//! Pushing a value built where it will live.
//!
//! `vec.push(value)` builds `value` in a temporary on the stack, field by
//! field, then copies it into the vector in 16-byte pieces. A piece that
//! spans two of the field stores cannot be forwarded from the store
//! buffer: the load waits until both stores have reached the cache. On the
//! path of every request the router pushes its input and its answer this
//! way, and the profile put a large share of those functions' time on that
//! one load. Making room first and building the value in its slot writes
//! each field once, where it stays.

/// Appends the value `build` makes, built in its slot of `vec`.
#[inline(always)]
pub(crate) fn push_in_place<T>(vec: &mut Vec<T>, build: impl FnOnce() -> T) {
    vec.reserve(1);
    vec.spare_capacity_mut()[0].write(build());
    let len = vec.len() + 1;
    // SAFETY: `reserve` made room for one more element, and the slot just
    // past the last one is initialized now.
    unsafe { vec.set_len(len) };
}

#[cfg(test)]
mod tests {
    use super::push_in_place;

    #[test]
    fn values_pushed_in_place_follow_the_ones_before_in_order() {
        let mut vec = vec![String::from("a")];
        for word in ["b", "c", "d", "e"] {
            push_in_place(&mut vec, || word.to_string());
        }
        assert_eq!(vec, ["a", "b", "c", "d", "e"]);
        let mut empty: Vec<u64> = Vec::new();
        push_in_place(&mut empty, || 7);
        assert_eq!(empty, [7]);
    }
}
