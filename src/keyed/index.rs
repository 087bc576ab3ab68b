//! The key index: which slot holds the key of a hash. One array of 8-byte
//! words, each a slot number and 32 bits of its key's hash (the *tag*), in
//! open addressing with linear probing (Knuth, TAOCP vol. 3, §6.4,
//! Algorithm L), so a look-up reads one cache line, whose place is known
//! from the hash alone: the batched look-ups fetch it ahead
//! ([`KeyIndex::prefetch`]). A removal shifts the words after it back
//! (Knuth's Algorithm R), so no tombstones build up as keys are forgotten.
//!
//! The index knows hashes and slot numbers, not keys: whether a slot holds
//! the key looked for is the caller's to say.
//!
//! Pure: no threads, no clock, no I/O.

/// An unused word: a word holds its slot number plus one, so a fresh
/// index is zeroed memory, which the system backs only as it is written.
const EMPTY: u64 = 0;
/// The fewest words (a power of two).
const MIN_WORDS: usize = 16;
/// The most words made ahead for the keys a run may remember.
const MOST_WORDS_AHEAD: usize = 1 << 23;

/// Slot numbers by hash (see the module's notes).
#[derive(Debug)]
pub(super) struct KeyIndex {
    /// `tag << 32 | (slot + 1)`, or [`EMPTY`]; a power of two of them.
    words: Vec<u64>,
    /// Words in use.
    len: usize,
    /// log2 of `words.len()` (≤ 32: the home of a word is its tag's top
    /// bits).
    bits: u32,
}

/// The 32 bits of `hash` an index keeps: its top ones, whose top bits in
/// turn give its home.
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// The slot number a word in use holds.
fn slot_of(word: u64) -> u32 {
    (word as u32).wrapping_sub(1)
}

impl KeyIndex {
    /// An index with room for `keys` slots (up to 3 · 2^21) before it
    /// grows: growing makes a new array and leaves the old one to the
    /// allocator, which may keep it in the peak RSS.
    pub(super) fn with_room(keys: usize) -> KeyIndex {
        let words = keys
            .saturating_mul(4)
            .div_ceil(3)
            .clamp(MIN_WORDS, MOST_WORDS_AHEAD)
            .next_power_of_two();
        KeyIndex {
            words: vec![EMPTY; words],
            len: 0,
            bits: words.trailing_zeros(),
        }
    }

    /// Slots indexed.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.words.len() - 1
    }

    /// Where the words of tag `tag` start.
    fn home(&self, tag: u32) -> usize {
        (u64::from(tag) >> (32 - self.bits)) as usize
    }

    /// Start fetching the cache line a look-up of `hash` reads first.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        crate::sys::prefetch(&self.words[self.home(tag_of(hash))]);
    }

    /// The slot of `hash` for which `is` holds, if any; `is` is asked only
    /// of slots whose tag matches (rarely more than one).
    #[inline]
    pub(super) fn find(&self, hash: u64, is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.place_of(hash, is).map(|i| slot_of(self.words[i]))
    }

    /// Where in `words` the slot of `hash` for which `is` holds is, if
    /// any ([`KeyIndex::find`]).
    #[inline]
    fn place_of(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<usize> {
        let tag = tag_of(hash);
        let mask = self.mask();
        let mut i = self.home(tag);
        loop {
            let word = self.words[i];
            if word == EMPTY {
                return None;
            }
            if (word >> 32) as u32 == tag && is(slot_of(word)) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The first slot whose tag matches `hash`'s (almost always its key's
    /// when it is indexed), without asking which key it holds.
    #[inline]
    pub(super) fn first(&self, hash: u64) -> Option<u32> {
        self.find(hash, |_| true)
    }

    /// Index slot `s` under `hash` (a key not indexed yet).
    ///
    /// # Panics
    /// If `s` is `u32::MAX` or the index would outgrow 2^32 words.
    pub(super) fn insert(&mut self, hash: u64, s: u32) {
        assert!(s != u32::MAX, "fewer than 2^32 - 1 keys");
        // At most three words in four used: probes stay short.
        if (self.len + 1) * 4 > self.words.len() * 3 {
            self.grow();
        }
        self.place((u64::from(tag_of(hash)) << 32) | (u64::from(s) + 1));
        self.len += 1;
    }

    /// Put `word` in the first unused place from its home.
    fn place(&mut self, word: u64) {
        let mask = self.mask();
        let mut i = self.home((word >> 32) as u32);
        while self.words[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.words[i] = word;
    }

    /// Twice the words, each placed again (its home comes from its tag:
    /// no key is hashed again).
    #[cold]
    fn grow(&mut self) {
        assert!(self.bits < 32, "an index of at most 2^32 words");
        let twice = vec![EMPTY; self.words.len() * 2];
        let old = std::mem::replace(&mut self.words, twice);
        self.bits += 1;
        for word in old.into_iter().filter(|&w| w != EMPTY) {
            self.place(word);
        }
    }

    /// Take slot `s`, indexed under `hash`, out of the index (nothing when
    /// it is not there).
    pub(super) fn remove(&mut self, hash: u64, s: u32) {
        let Some(i) = self.place_of(hash, |slot| slot == s) else {
            return;
        };
        let mask = self.mask();
        // Shift back each following word of the run that may sit in the
        // hole: one whose home is not between the hole and it.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let word = self.words[j];
            if word == EMPTY {
                break;
            }
            let home = self.home((word >> 32) as u32);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.words[hole] = word;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.words[hole] = EMPTY;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// A hash whose tag, and so whose home, comes from few values: many
    /// keys collide and runs wrap around the end of the words.
    fn crowded(key: u16, spread: u32) -> u64 {
        let tag = u64::from(u32::from(key) % spread).wrapping_mul(0x9E37_79B9) as u32;
        (u64::from(tag) << 32) | u64::from(key)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
        Find(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u16>().prop_map(|k| Op::Insert(k % 512)),
            2 => any::<u16>().prop_map(|k| Op::Remove(k % 512)),
            2 => any::<u16>().prop_map(|k| Op::Find(k % 512)),
        ]
    }

    proptest! {
        /// Against a map from key to slot: the same slot for every key,
        /// found or not, through inserts, removals and growth, with hashes
        /// that collide often.
        #[test]
        fn finds_what_a_map_finds(ops in prop::collection::vec(op(), 1..600), spread in 1u32..64) {
            let mut index = KeyIndex::with_room(0);
            let mut model: HashMap<u16, u32> = HashMap::new();
            // Each key's slot: its number, so `is` can tell keys apart.
            for op in ops {
                match op {
                    Op::Insert(k) => {
                        if let std::collections::hash_map::Entry::Vacant(e) = model.entry(k) {
                            e.insert(u32::from(k));
                            index.insert(crowded(k, spread), u32::from(k));
                        }
                    }
                    Op::Remove(k) => {
                        index.remove(crowded(k, spread), u32::from(k));
                        model.remove(&k);
                    }
                    Op::Find(k) => {
                        let found = index.find(crowded(k, spread), |s| s == u32::from(k));
                        prop_assert_eq!(found, model.get(&k).copied());
                    }
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for k in 0..512u16 {
                let found = index.find(crowded(k, spread), |s| s == u32::from(k));
                prop_assert_eq!(found, model.get(&k).copied(), "key {}", k);
            }
        }
    }

    #[test]
    fn it_grows_to_keep_a_quarter_of_the_words_free() {
        let mut index = KeyIndex::with_room(0);
        for s in 0..10_000u32 {
            index.insert(u64::from(s).wrapping_mul(0x9E37_79B9_7F4A_7C15), s);
            assert!(index.len() * 4 <= index.words.len() * 3);
        }
        for s in 0..10_000u32 {
            let hash = u64::from(s).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            assert_eq!(index.first(hash), Some(s));
        }
    }
}
