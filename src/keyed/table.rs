//! The key table: the remembered keys, each in a slot (its bytes, when
//! its next record may leave and when it rests, its queue's ends, its
//! counts: one cache line), found by hash, with its schedule's position
//! and its drops kept apart; and its eviction: at most `max_keys` keys are
//! remembered, and a new key takes the place of the idle key that rested
//! first.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::cmp::Reverse;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use crate::report::keys::KeyStats;

use crate::report::spell::KeyName;

use super::index::KeyIndex;
use super::timers::Timers;
use super::{Keyed, Lane, NIL, NO_KEY};

/// A key's bytes: short keys (most host names, user ids, fields) live in
/// the slot itself, so finding a key costs no second cache miss.
#[derive(Debug)]
pub(super) enum KeyBytes {
    /// Up to [`INLINE_KEY`] bytes, and how many.
    Inline(u8, [u8; INLINE_KEY]),
    /// Longer keys.
    Heap(Box<[u8]>),
}

/// The longest key kept inline.
pub(super) const INLINE_KEY: usize = 22;

impl KeyBytes {
    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(len, bytes) => &bytes[..usize::from(*len)],
            KeyBytes::Heap(bytes) => bytes,
        }
    }

    /// Whether these are `key`'s bytes.
    pub(super) fn is(&self, key: &[u8]) -> bool {
        match self {
            KeyBytes::Inline(len, bytes) => {
                usize::from(*len) == key.len() && same_bytes(&bytes[..key.len()], key)
            }
            KeyBytes::Heap(bytes) => **bytes == *key,
        }
    }
}

/// Whether `a` and `b`, of the same length, hold the same bytes. Keys of
/// up to 16 bytes compare as two overlapping fixed-size words each (the
/// usual trick for short strings), without a call to `memcmp`.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    pub(super) fn word4(s: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(s[at..at + 4].try_into().expect("4 bytes"))
    }
    pub(super) fn word8(s: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"))
    }
    let n = a.len();
    debug_assert_eq!(n, b.len());
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        9..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

impl From<&[u8]> for KeyBytes {
    fn from(key: &[u8]) -> KeyBytes {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key);
            KeyBytes::Inline(key.len() as u8, bytes)
        } else {
            KeyBytes::Heap(key.into())
        }
    }
}

/// One remembered key: what finding it and deciding one of its records
/// read, in one cache line (64 bytes, aligned), so that a look-up in a
/// random order of keys misses the caches once. Its schedule's
/// [`Position`] (read only when a record leaves within its slack of the
/// last, written only then: see `fresh`) and its drops are kept apart, in
/// the local [`Pacing`](super::pacing::Pacing) and [`Table`]'s `dropped`
/// at the same index.
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct Slot {
    pub(super) key: KeyBytes,
    /// When its next record may leave
    /// ([`Pacer::next_due`](crate::pacer::Pacer::next_due)), cached.
    pub(super) due: u64,
    /// When `position` rests
    /// ([`Pacer::rests_at`](crate::pacer::Pacer::rests_at)), cached.
    pub(super) rests_at: u64,
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) len: u32,
    pub(super) lane: Lane,
    pub(super) in_rest: bool,
    /// Its schedule stands one departure from rested, at `rests_at`
    /// less the key limit's `rest_after_first`: nothing of it is in the
    /// local positions ([`Keyed::position`] makes it), so the record
    /// that leaves a rested key at once touches no line but its slot's.
    pub(super) fresh: bool,
    pub(super) sent: u64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

/// The remembered keys and their figures.
#[derive(Debug)]
pub(super) struct Table {
    /// The remembered keys, by slot number (the no-key lane first).
    pub(super) slots: Vec<Slot>,
    /// Each slot's records dropped, by slot number: a key's figures not
    /// read as its records are decided are kept beside its slot, not in
    /// it (a new per-key figure goes here, and into [`Table::stats`]).
    dropped: Vec<u64>,
    free_slots: Vec<u32>,
    /// Keys forgotten so far (a slot named ahead is its key's while this
    /// stays the same: [`Keyed::slot_of_looked`]).
    pub(super) forgotten: u64,
    /// The remembered keys' slots by hash.
    pub(super) index: KeyIndex,
    pub(super) hasher: RandomState,
    /// Keys with nothing waiting, by a lower bound of when they rest.
    pub(super) rest: Timers,
    /// Keys remembered at most (the no-key lane not counted).
    pub(super) max_keys: usize,
    keys_seen: u64,
    /// A record without a key has come.
    no_key_seen: bool,
    /// Records of new keys dropped because no key was idle.
    dropped_unremembered: u64,
    /// Records read that had no key (the no-key lane's arrivals).
    keyless: u64,
    /// The place in the input of the first of them.
    first_keyless: Option<u64>,
}

impl Table {
    /// A table for at most `max_keys` keys, holding the no-key lane.
    pub(super) fn new(max_keys: usize) -> Table {
        Table {
            slots: reserved(Slot::new(KeyBytes::from(&[][..])), max_keys),
            dropped: reserved(0, max_keys),
            free_slots: Vec::new(),
            forgotten: 0,
            index: KeyIndex::with_room(max_keys.min(RESERVED_SLOTS)),
            hasher: RandomState::default(),
            rest: Timers::default(),
            max_keys,
            keys_seen: 0,
            no_key_seen: false,
            dropped_unremembered: 0,
            keyless: 0,
            first_keyless: None,
        }
    }

    /// The slot of remembered key `key`, whose hash is `hash`.
    #[inline]
    pub(super) fn find(&self, key: &[u8], hash: u64) -> Option<u32> {
        let slots = &self.slots;
        self.index.find(hash, |s| slots[s as usize].key.is(key))
    }

    /// The no-key lane's slot, counted as a key seen the first time.
    pub(super) fn no_key(&mut self) -> u32 {
        if !self.no_key_seen {
            self.no_key_seen = true;
            self.keys_seen += 1;
        }
        NO_KEY
    }

    /// Remember `key`, whose hash is `hash`, in a free slot; returns it and
    /// whether the slot is new (not one a key was forgotten from).
    pub(super) fn remember(&mut self, key: &[u8], hash: u64) -> (u32, bool) {
        let slot = Slot::new(KeyBytes::from(key));
        let (s, added) = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                (s, false)
            }
            None => {
                self.slots.push(slot);
                self.dropped.push(0);
                let s = u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 keys");
                (s, true)
            }
        };
        self.index.insert(hash, s);
        self.keys_seen += 1;
        self.mark_idle(s);
        (s, added)
    }

    /// The remembered key that rested first, if one has by `now`.
    pub(super) fn find_idle(&mut self, now: u64) -> Option<u32> {
        while let Some((at, s)) = self.rest.peek() {
            if at > now {
                return None;
            }
            self.rest.pop();
            let slot = &mut self.slots[s as usize];
            if slot.len > 0 || slot.lane != Lane::Idle {
                slot.in_rest = false;
                continue;
            }
            if slot.rests_at > now {
                self.rest.push(slot.rests_at, s);
                continue;
            }
            slot.in_rest = false;
            return Some(s);
        }
        None
    }

    /// Forget idle key `s`: its slot is free.
    pub(super) fn forget(&mut self, s: u32) {
        let hash = self.hasher.hash_one(self.slots[s as usize].key.as_bytes());
        self.index.remove(hash, s);
        self.slots[s as usize] = Slot::new(KeyBytes::from(&[][..]));
        self.dropped[s as usize] = 0;
        self.free_slots.push(s);
        self.forgotten += 1;
    }

    /// Note that key `s` may have become idle (for [`Table::find_idle`]).
    pub(super) fn mark_idle(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if s != NO_KEY && slot.len == 0 && slot.lane == Lane::Idle && !slot.in_rest {
            slot.in_rest = true;
            self.rest.push(slot.rests_at, s);
        }
    }

    /// A record of key `s` was dropped.
    pub(super) fn dropped(&mut self, s: u32) {
        self.dropped[s as usize] += 1;
    }

    /// Record `number` (its place in the input) was read; `keyless`: it
    /// had no key.
    #[inline(always)]
    pub(super) fn read_keyless(&mut self, keyless: bool, number: u64) {
        if keyless {
            self.keyless += 1;
            self.first_keyless.get_or_insert(number);
        }
    }

    /// The place in the input of the first record read that had no key.
    pub(super) fn first_keyless(&self) -> Option<u64> {
        self.first_keyless
    }

    /// A record of a new key was dropped: no key was idle.
    pub(super) fn dropped_unremembered(&mut self) {
        self.dropped_unremembered += 1;
    }

    /// Keys remembered now (the no-key lane not counted).
    pub(super) fn keys(&self) -> usize {
        self.index.len()
    }

    /// Counts about the keys, with `busy` keys waiting, and the `top` keys
    /// of each kind (most first; ties in the order of the keys' places,
    /// the no-key lane first). Only remembered keys are named: a forgotten
    /// key's counts went with it.
    pub(super) fn stats(&self, busy: usize, top: usize) -> KeyStats {
        let named = |pick: &dyn Fn(usize) -> u64| -> Vec<(KeyName, u64)> {
            let mut all: Vec<(u64, usize)> = (0..self.slots.len())
                .map(|i| (pick(i), i))
                .filter(|&(n, _)| n > 0)
                .collect();
            all.sort_unstable_by_key(|&(n, i)| (Reverse(n), i));
            all.truncate(top);
            all.into_iter().map(|(n, i)| (self.name(i), n)).collect()
        };
        KeyStats {
            keys_seen: self.keys_seen,
            keys: self.keys() as u64,
            busy_keys: busy as u64,
            dropped_unremembered: self.dropped_unremembered,
            keyless: self.keyless,
            top_written: named(&|i| self.slots[i].sent),
            top_dropped: named(&|i| self.dropped[i]),
            top_waiting: named(&|i| u64::from(self.slots[i].len)),
            key_limits: None,
            longest: None,
        }
    }

    /// The slots of the remembered keys (the no-key lane's once used), in
    /// slot order.
    pub(super) fn remembered(&self) -> Vec<u32> {
        let free: std::collections::HashSet<u32> = self.free_slots.iter().copied().collect();
        let lane = self.no_key_seen.then_some(NO_KEY);
        let keys = (1..self.slots.len() as u32).filter(|s| !free.contains(s));
        lane.into_iter().chain(keys).collect()
    }

    /// Slot `i`'s key for the stats: its bytes, or `None` for the no-key
    /// lane.
    pub(super) fn name(&self, i: usize) -> KeyName {
        KeyName((i != NO_KEY as usize).then(|| self.slots[i].key.as_bytes().to_vec()))
    }
}

/// The most slots reserved ahead (`--max-keys` and the no-key lane, up to
/// this many).
pub(super) const RESERVED_SLOTS: usize = 1 << 22;

/// A vector holding `first`, with room reserved for `max_keys` more (up to
/// [`RESERVED_SLOTS`]): address space only, the pages are backed as keys
/// come. Slots are aligned to their cache line, and growing such a vector
/// copies it (an allocator moves only blocks of the usual alignment in
/// place), leaving the old block behind in the peak RSS.
pub(super) fn reserved<T>(first: T, max_keys: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(max_keys.saturating_add(1).min(RESERVED_SLOTS));
    v.push(first);
    v
}

impl Keyed {
    /// The slot of `key` (the no-key lane for `None`), whose hash is
    /// `hash`, remembered now if new; `None` when the key is new and every
    /// remembered key is busy.
    pub(super) fn slot_of(&mut self, key: Option<&[u8]>, hash: u64, now: u64) -> Option<u32> {
        let Some(key) = key else {
            return Some(self.table.no_key());
        };
        if let Some(s) = self.table.find(key, hash) {
            return Some(s);
        }
        if self.table.keys() >= self.table.max_keys {
            let idle = self.table.find_idle(now)?;
            self.table.forget(idle);
            self.pacing.forget(idle);
        }
        let (s, added) = self.table.remember(key, hash);
        self.limits.remember(s, added, key);
        if added {
            self.pacing.add_slot();
        }
        Some(s)
    }
}

impl Slot {
    pub(super) fn new(key: KeyBytes) -> Slot {
        Slot {
            key,
            due: 0,
            rests_at: 0,
            head: NIL,
            tail: NIL,
            len: 0,
            lane: Lane::Idle,
            in_rest: false,
            fresh: false,
            sent: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_sees_a_difference_at_any_place() {
        for n in 0..=40 {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(same_bytes(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same_bytes(&a, &b), "length {n}, byte {at}");
            }
        }
    }
}
