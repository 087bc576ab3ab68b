//! Keys by a time, earliest first (ties: the lower key first): the keys'
//! timers (keys whose head waits for its own slot, by when it is due) and
//! the keys at rest (by a lower bound of when they rest).
//!
//! A binary min-heap of `(time, key)` packed into one `u128` (the time in
//! the high 64 bits), so that each comparison in a sift is one wide
//! compare rather than a tuple's two. (The keyed benchmark shows no
//! difference in CPU from a heap of the pairs, nor from a heap of four
//! children a node: the heap is not where a random order's time goes.)
//!
//! Pure: no threads, no clock, no I/O. Times are ns.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Keys by a time (ns).
#[derive(Debug, Default)]
pub(super) struct Timers {
    heap: BinaryHeap<Reverse<u128>>,
}

/// `(due, key)` as one number ordered as the pair is.
#[inline(always)]
fn pack(due: u64, key: u32) -> u128 {
    (u128::from(due) << 64) | u128::from(key)
}

#[inline(always)]
fn unpack(packed: u128) -> (u64, u32) {
    ((packed >> 64) as u64, packed as u32)
}

impl Timers {
    /// Key `key` at `due` (ns).
    #[inline]
    pub(super) fn push(&mut self, due: u64, key: u32) {
        self.heap.push(Reverse(pack(due, key)));
    }

    /// Each key on a timer at `due(key)` instead (the keys' limits
    /// changed).
    pub(super) fn retime(&mut self, due: impl Fn(u32) -> u64) {
        let heap = std::mem::take(&mut self.heap);
        for Reverse(p) in heap.into_vec() {
            let key = unpack(p).1;
            self.push(due(key), key);
        }
    }

    /// The earliest: (time, key).
    #[inline]
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.heap.peek().map(|&Reverse(p)| unpack(p))
    }

    /// Take the earliest off: (time, key).
    #[inline]
    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        self.heap.pop().map(|Reverse(p)| unpack(p))
    }

    /// Every key on it, in no order (a key as often as it is on it).
    pub(super) fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.heap.iter().map(|&Reverse(p)| unpack(p).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a sorted list: due first, then the key, whatever the order
    /// they came in; the largest due times and keys included.
    #[test]
    fn timers_come_out_by_due_time_then_key() {
        let mut timers = Timers::default();
        let mut want = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..2_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let due = match i % 5 {
                0 => u64::MAX - (x % 3),
                1 => x % 4,
                _ => x % 1_000,
            };
            let key = if i % 7 == 0 {
                u32::MAX - i
            } else {
                (x >> 40) as u32
            };
            timers.push(due, key);
            want.push((due, key));
        }
        want.sort_unstable();
        let mut got = Vec::new();
        while let Some(t) = timers.peek() {
            assert_eq!(timers.pop(), Some(t));
            got.push(t);
        }
        assert_eq!(got, want);
        assert_eq!(timers.pop(), None);
    }

    proptest::proptest! {
        /// Pushes and pops interleaved, against the standard library's
        /// binary heap of the pairs (ties in time included: few times).
        #[test]
        fn timers_agree_with_a_binary_heap(
            ops in proptest::collection::vec(
                proptest::option::weighted(0.6, (0u64..50, proptest::num::u32::ANY)),
                0..400,
            ),
        ) {
            let mut timers = Timers::default();
            let mut reference = BinaryHeap::new();
            for op in ops {
                match op {
                    Some((due, key)) => {
                        timers.push(due, key);
                        reference.push(Reverse((due, key)));
                    }
                    None => {
                        let want = reference.pop().map(|Reverse(t)| t);
                        proptest::prop_assert_eq!(timers.pop(), want);
                    }
                }
                let want = reference.peek().map(|&Reverse(t)| t);
                proptest::prop_assert_eq!(timers.peek(), want);
            }
        }
    }
}
