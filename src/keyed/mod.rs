//! Limits per key with fair queueing (`--key`, `--key-rate`).
//!
//! Each key (see [`crate::key`]) has its own GCRA schedule (one [`Pacer`]'s
//! parameters, a 32-byte [`Position`] per key) and its own FIFO of waiting
//! records; the global [`Schedule`] (`--rate`, `--byte-rate`) still caps
//! all records together. Records are decided one at a time, each at its
//! arrival `t`:
//!
//! 1. if its key has nothing waiting, no key is waiting only for the global
//!    limit, and both its key's limit and the global one allow a departure
//!    at `t`, it leaves now;
//! 2. otherwise, if the bucket (`--capacity`, `--capacity-bytes`, all keys
//!    together) and its key's queue (`--key-capacity`) have room, it waits
//!    in its key's queue;
//! 3. otherwise the overflow policy applies: `drop-newest` drops it;
//!    `drop-oldest` evicts the oldest waiting record of its own key when
//!    that key's queue is full, and otherwise of the key holding the most
//!    (the fat flow pays, ties going to the key whose head is oldest);
//!    `block` and `fail` hand it back.
//!
//! Fairness is round robin (deficit-free, one record a turn, as in Nagle's
//! fair queueing, RFC 970): a key whose head comes due under its own limit
//! joins the end of the line; the key at the front sends one record when
//! the global limit allows and goes to the end of the line if its next
//! record is due, so under a global limit every busy key gets an equal
//! share whatever its backlog. A record waiting for its key's slot never
//! holds back another key's record (no head-of-line blocking); within a
//! key, records leave in input order.
//!
//! At most `max_keys` keys are remembered. A key is *idle* when nothing of
//! it waits and its schedule is rested ([`Pacer::rests_at`]): forgetting it
//! changes no departure. A new key takes the place of the idle key that
//! rested first; when no key is idle, its record meets the overflow policy
//! as if the bucket were full (under `drop-oldest` it is dropped as the
//! newest: no older record of its key exists). Records with no key share
//! one lane, which is never forgotten and not counted against `max_keys`.
//!
//! With `--share`, the keys' schedules are shared with other drips
//! ([`KeySchedule`], implemented by `crate::shared::keys`): a key's head
//! may leave when its lease holds a slot due, and a key whose lease is
//! empty waits in the line (timed, without a timer) until its slots
//! arrive ([`KeySchedule::arrived`]). Under a global limit of records a
//! key asks for its slot only when its turn in the line nears, for the
//! time the global limit lets that turn go ([`Schedule::nth_due`]), so no
//! slot waits on the global limit until it is too late to use
//! (`Keyed::release_shared`). Without it the per-key [`Pacer`] over each
//! slot's [`Position`] decides, with no call through the trait.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};
use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use bytes::Bytes;
use hashbrown::HashTable;

use crate::bucket::{Fate, Offered, Overflow, Segment};
use crate::key::KeySpec;
use crate::ledger::Ledger;
use crate::pacer::{slack_for, Pacer, Position};
use crate::rate::Rate;
use crate::schedule::Schedule;
use crate::stats::{KeyName, KeyStats};

mod shared;
pub use shared::{KeySchedule, LeaseHead, Want};

/// The lane of records that have no key.
const NO_KEY: u32 = 0;
/// No node (end of a key's list).
const NIL: u32 = u32::MAX;

/// How records are keyed and limited per key.
#[derive(Debug, Clone)]
pub struct KeyConfig {
    /// Where a record's key is.
    pub spec: KeySpec,
    /// Each key's rate (records).
    pub rate: Rate,
    /// Each key's burst (≥ 1).
    pub burst: u64,
    /// Keys remembered at most (≥ 1), besides the no-key lane.
    pub max_keys: usize,
    /// Records one key may have waiting at most (≥ 1).
    pub key_capacity: usize,
}

/// Where a key's queue stands in the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// Not in the line (nothing waits, or it was just forgotten).
    Idle,
    /// In `ready`: its head may leave as far as its own limit goes.
    Ready,
    /// In `timers`: its head waits for its key's slot.
    Timed,
    /// Shared key schedules only: in `ready`, its slot asked for the time
    /// its turn is expected; other keys pass it until the slot is due.
    Asked,
}

/// A key's bytes: short keys (most host names, user ids, fields) live in
/// the slot itself, so finding a key costs no second cache miss.
#[derive(Debug)]
enum KeyBytes {
    /// Up to [`INLINE_KEY`] bytes, and how many.
    Inline(u8, [u8; INLINE_KEY]),
    /// Longer keys.
    Heap(Box<[u8]>),
}

/// The longest key kept inline.
const INLINE_KEY: usize = 22;

impl KeyBytes {
    fn as_bytes(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(len, bytes) => &bytes[..usize::from(*len)],
            KeyBytes::Heap(bytes) => bytes,
        }
    }
}

impl KeyBytes {
    /// Whether these are `key`'s bytes.
    fn is(&self, key: &[u8]) -> bool {
        match self {
            KeyBytes::Inline(len, bytes) => {
                usize::from(*len) == key.len() && same_bytes(&bytes[..key.len()], key)
            }
            KeyBytes::Heap(bytes) => **bytes == *key,
        }
    }
}

/// What a record's key is looked for in: the record without its
/// delimiter, and, for lines (`\n`), without a CR before it, so a file with
/// CRLF line ends keys as one with LF ends.
#[inline(always)]
fn body_of(record: &[u8], delimiter: u8) -> &[u8] {
    // Index arithmetic rather than `strip_suffix`: this runs for every
    // record, and the plainer code keeps the look-up loop tight.
    let mut end = record.len();
    if end > 0 && record[end - 1] == delimiter {
        end -= 1;
    }
    if delimiter == b'\n' && end > 0 && record[end - 1] == b'\r' {
        end -= 1;
    }
    &record[..end]
}

/// The key of `record` (its delimiter included) under `spec`, as the keyed
/// queues see it (without the delimiter, nor a CR before a newline).
pub fn record_key<'a>(spec: &KeySpec, record: &'a [u8], delimiter: u8) -> Option<&'a [u8]> {
    spec.key(body_of(record, delimiter))
}

/// Whether `a` and `b`, of the same length, hold the same bytes. Keys of
/// up to 16 bytes compare as two overlapping fixed-size words each (the
/// usual trick for short strings), without a call to `memcmp`.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    fn word4(s: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(s[at..at + 4].try_into().expect("4 bytes"))
    }
    fn word8(s: &[u8], at: usize) -> u64 {
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

/// One remembered key.
#[derive(Debug)]
struct Slot {
    key: KeyBytes,
    position: Position,
    /// When its next record may leave ([`Pacer::next_due`]), cached.
    due: u64,
    /// When `position` rests ([`Pacer::rests_at`]), cached.
    rests_at: u64,
    head: u32,
    tail: u32,
    len: u32,
    lane: Lane,
    in_rest: bool,
    sent: u64,
    dropped: u64,
}

/// A waiting record and the next of its key.
#[derive(Debug)]
struct Node {
    seg: Segment,
    seq: u64,
    next: u32,
}

/// Per-key queues and schedules, with the round-robin line between them.
#[derive(Debug)]
pub struct Keyed {
    spec: KeySpec,
    delimiter: u8,
    pacer: Pacer,
    /// How long after one departure from a rested schedule it rests again.
    rest_after_first: u64,
    /// How long after one departure from a rested schedule the next is due.
    due_after_first: u64,
    max_keys: usize,
    key_capacity: usize,
    capacity: usize,
    capacity_bytes: usize,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    table: HashTable<u32>,
    hasher: RandomState,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    /// Keys whose head is due under their own limit, in turn order.
    ready: VecDeque<u32>,
    /// Keys whose head waits for their own slot: (due, key).
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    /// Keys with nothing waiting, by a lower bound of when they rest.
    rest: BinaryHeap<Reverse<(u64, u32)>>,
    /// Each busy key's head: (arrived, seq, key); the first is the oldest.
    fronts: BTreeSet<(u64, u64, u32)>,
    /// Busy keys by records waiting: (len, oldest head first, key).
    fat: BTreeSet<(u32, Reverse<u64>, u32)>,
    len: usize,
    bytes: usize,
    max_depth: usize,
    seq: u64,
    keys_seen: u64,
    longest_wait_ns: u64,
    /// A new key's record was handed back because no key was idle.
    blocked_on_keys: bool,
    /// A record without a key has come.
    no_key_seen: bool,
    /// Keys forgotten so far: a slot found before a forgetting may since
    /// belong to another key.
    forgets: u64,
    /// Why the latest record handed back under `fail` found no room.
    no_room: NoRoom,
    /// Records of new keys dropped because no key was idle.
    dropped_unremembered: u64,
    /// The keys' schedules, when shared (`None`: each key's [`Position`]).
    shared: Option<Box<dyn KeySchedule>>,
    /// Shared: when the line next needs a look (ns), if it does.
    shared_next: Option<u64>,
    /// Shared: when the line was last walked (ns), for the poll's floor.
    last_walk: u64,
    /// Shared: the global limits' least spacing of records (ns; 0: they
    /// do not limit records).
    global_gap: u64,
    /// The key limit's spacing of records (ns).
    key_gap: u64,
}

/// Why a record found no room (under `--overflow fail`, the error says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The bucket (`--capacity`, `--capacity-bytes`: all keys together).
    Bucket,
    /// Its key's queue (`--key-capacity`).
    Key,
    /// Its key is new and every remembered key is busy (`--max-keys`).
    Keys,
}

/// Records looked up at once ([`Keyed::look_ahead`]).
const AHEAD: usize = 16;

/// A record split and looked up ahead of its turn.
#[derive(Debug, Clone, Copy, Default)]
struct Ahead {
    /// One past its last byte (delimiter included), in the read.
    end: usize,
    /// Where its key is in the read; `None`: it has no key.
    key: Option<(usize, usize)>,
    /// The key's hash.
    hash: u64,
    /// The key's slot, if remembered when looked up.
    found: Option<u32>,
}

impl Keyed {
    /// Keyed queues for `config`, all of them holding at most `capacity`
    /// records and `capacity_bytes` bytes together; records end in
    /// `delimiter`.
    ///
    /// # Panics
    /// If the key rate is unlimited or a bound is 0 (the command line
    /// refuses them).
    pub fn new(
        config: KeyConfig,
        delimiter: u8,
        capacity: usize,
        capacity_bytes: Option<usize>,
    ) -> Keyed {
        assert!(config.rate != Rate::Unlimited && config.max_keys >= 1);
        assert!(config.key_capacity >= 1 && capacity >= 1);
        let no_key = Slot::new(KeyBytes::from(&[][..]));
        let mut pacer = Pacer::new(config.rate, config.burst, slack_for(config.rate));
        let rest_after_first = pacer.rests_at(Pacer::first_departure(0));
        pacer.restore(Pacer::first_departure(0));
        let due_after_first = pacer.next_due();
        let pacer_per_second = pacer.per_second();
        Keyed {
            spec: config.spec,
            delimiter,
            pacer,
            rest_after_first,
            due_after_first,
            max_keys: config.max_keys,
            key_capacity: config.key_capacity,
            capacity,
            capacity_bytes: capacity_bytes.unwrap_or(usize::MAX),
            slots: vec![no_key],
            free_slots: Vec::new(),
            table: HashTable::new(),
            hasher: RandomState::default(),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            rest: BinaryHeap::new(),
            fronts: BTreeSet::new(),
            fat: BTreeSet::new(),
            len: 0,
            bytes: 0,
            max_depth: 0,
            seq: 0,
            keys_seen: 0,
            longest_wait_ns: 0,
            blocked_on_keys: false,
            no_key_seen: false,
            forgets: 0,
            no_room: NoRoom::Bucket,
            dropped_unremembered: 0,
            shared: None,
            shared_next: None,
            last_walk: 0,
            global_gap: 0,
            key_gap: (1e9 / pacer_per_second) as u64,
        }
    }

    /// Why the latest record handed back under `fail` found no room.
    pub fn no_room(&self) -> NoRoom {
        self.no_room
    }

    /// Each key's queue holds at most this many records.
    pub fn key_capacity(&self) -> usize {
        self.key_capacity
    }

    /// Keys remembered at most.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The same queues with their keys' schedules kept by `schedule`
    /// (shared with other drips) instead of each key's own.
    pub fn with_shared(mut self, schedule: Box<dyn KeySchedule>) -> Keyed {
        self.shared = Some(schedule);
        self
    }

    /// Records waiting, in all keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes waiting, in all keys.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most records that ever waited at once.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Keys remembered now (the no-key lane not counted).
    pub fn keys(&self) -> usize {
        self.table.len()
    }

    /// Keys with records waiting.
    pub fn busy_keys(&self) -> usize {
        // Each busy key has its head, and only that, in `fronts`.
        self.fronts.len()
    }

    /// The longest any record that left waited, ns.
    pub fn longest_wait_ns(&self) -> u64 {
        self.longest_wait_ns
    }

    /// When the oldest waiting record arrived (ns).
    pub fn oldest_arrival(&self) -> Option<u64> {
        self.fronts.first().map(|&(arrived, _, _)| arrived)
    }

    /// Records of `seg` arrive at `now`, in order, each decided alone (see
    /// the module's notes); those that leave go to `outbox` in runs.
    /// `may_leave`: whether the writer can take records now. Returns what
    /// `block` or `fail` handed back (not counted as read) and how many
    /// records went to `outbox`.
    #[allow(clippy::too_many_arguments)]
    pub fn arrive(
        &mut self,
        now: u64,
        mut seg: Segment,
        policy: Overflow,
        may_leave: bool,
        global: &mut dyn Schedule,
        ledger: &mut Ledger,
        outbox: &mut Vec<Segment>,
    ) -> (Offered, usize) {
        seg.arrived = now;
        self.blocked_on_keys = false;
        if self.shared.is_some() {
            self.note_global(global);
        }
        let whole = seg.clone();
        let data = whole.as_bytes();
        let global_open = global.is_unlimited();
        let weighs_bytes = global.weighs_bytes();
        let (mut run_bytes, mut run_len, mut sent) = (0, 0, 0);
        let mut ahead = [Ahead::default(); AHEAD];
        let (mut start, mut next, mut looked) = (0, 0, 0);
        let mut forgets = self.forgets;
        while start < data.len() {
            if next == looked {
                (next, looked) = (0, self.look_ahead(data, start, &mut ahead));
                forgets = self.forgets;
            }
            let record = ahead[next];
            next += 1;
            let size = record.end - start;
            let key = record.key.map(|(from, to)| &data[from..to]);
            start = record.end;
            // A key forgotten since the look-up may have left its slot to
            // another: look again.
            let slot = match record.found {
                Some(s) if self.forgets == forgets => Some(s),
                _ => self.slot_of(key, record.hash, now),
            };
            if let Some(s) = slot {
                if may_leave && self.leave_now(now, s, size, global, global_open) {
                    run_bytes += size;
                    run_len += 1;
                    continue;
                }
            }
            if run_len > 0 {
                ledger.read(run_len);
                sent += run_len;
                outbox.push(seg.split_known(run_bytes, run_len));
                (run_bytes, run_len) = (0, 0);
            }
            if let Some(back) = self.wait(now, slot, &mut seg, size, policy, ledger) {
                return (back, sent);
            }
            if may_leave && policy == Overflow::DropOldest && weighs_bytes {
                // An eviction can put a smaller record at the front of the
                // line, which a byte rate may let go at once.
                sent += self.release(now, global, outbox);
            }
        }
        if run_len > 0 {
            ledger.read(run_len);
            sent += run_len;
            outbox.push(seg.split_known(run_bytes, run_len));
        }
        (Offered::Done, sent)
    }

    /// Split up to [`AHEAD`] records of `data` from `start`, find their
    /// keys and look each up among the remembered ones, before any of them
    /// is decided: the look-ups are independent, so their cache misses on
    /// the table and the slots overlap instead of following one another.
    /// Returns how many records `ahead` now holds (≥ 1).
    fn look_ahead(&self, data: &[u8], mut start: usize, ahead: &mut [Ahead; AHEAD]) -> usize {
        let mut n = 0;
        while n < AHEAD && start < data.len() {
            let end = memchr::memchr(self.delimiter, &data[start..])
                .map_or(data.len(), |i| start + i + 1);
            let record = &data[start..end];
            let key = self.spec.key(body_of(record, self.delimiter));
            let hash = key.map_or(0, |k| self.hasher.hash_one(k));
            ahead[n] = Ahead {
                end,
                key: key.map(|k| {
                    let from = k.as_ptr() as usize - data.as_ptr() as usize;
                    (from, from + k.len())
                }),
                hash,
                found: key.and_then(|k| self.find(k, hash)),
            };
            start = end;
            n += 1;
        }
        n
    }

    /// The slot of remembered key `key`, whose hash is `hash`.
    fn find(&self, key: &[u8], hash: u64) -> Option<u32> {
        let slots = &self.slots;
        self.table
            .find(hash, |&s| slots[s as usize].key.is(key))
            .copied()
    }

    /// The slot of `key` (the no-key lane for `None`), whose hash is
    /// `hash`, remembered now if new; `None` when the key is new and every
    /// remembered key is busy.
    fn slot_of(&mut self, key: Option<&[u8]>, hash: u64, now: u64) -> Option<u32> {
        let Some(key) = key else {
            if !self.no_key_seen {
                self.no_key_seen = true;
                self.keys_seen += 1;
            }
            return Some(NO_KEY);
        };
        if let Some(s) = self.find(key, hash) {
            return Some(s);
        }
        if self.table.len() >= self.max_keys {
            let idle = self.find_idle(now)?;
            self.forget(idle);
        }
        let slot = Slot::new(KeyBytes::from(key));
        let s = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                s
            }
            None => {
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 keys")
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.table.insert_unique(hash, s, |&i| {
            hasher.hash_one(slots[i as usize].key.as_bytes())
        });
        self.keys_seen += 1;
        self.mark_idle(s);
        Some(s)
    }

    /// The remembered key that rested first, if one has by `now`.
    fn find_idle(&mut self, now: u64) -> Option<u32> {
        while let Some(&Reverse((at, s))) = self.rest.peek() {
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
                self.rest.push(Reverse((slot.rests_at, s)));
                continue;
            }
            slot.in_rest = false;
            return Some(s);
        }
        None
    }

    /// Forget idle key `s`.
    fn forget(&mut self, s: u32) {
        self.forgets += 1;
        let hash = self.hasher.hash_one(self.slots[s as usize].key.as_bytes());
        if let Ok(entry) = self.table.find_entry(hash, |&i| i == s) {
            entry.remove();
        }
        self.slots[s as usize] = Slot::new(KeyBytes::from(&[][..]));
        self.free_slots.push(s);
        if let Some(shared) = self.shared.as_deref_mut() {
            shared.forget(s);
        }
    }

    /// Note that key `s` may have become idle (for [`Keyed::find_idle`]).
    fn mark_idle(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if s != NO_KEY && slot.len == 0 && slot.lane == Lane::Idle && !slot.in_rest {
            slot.in_rest = true;
            self.rest.push(Reverse((slot.rests_at, s)));
        }
    }

    /// Whether a record of key `s`, `size` bytes, leaves at `now`; if so it
    /// takes its slot in its key's schedule and the global one.
    /// `global_open`: the global schedule limits nothing.
    fn leave_now(
        &mut self,
        now: u64,
        s: u32,
        size: usize,
        global: &mut dyn Schedule,
        global_open: bool,
    ) -> bool {
        while let Some(&front) = self.ready.front() {
            if self.slots[front as usize].len > 0 {
                return false;
            }
            self.ready.pop_front();
            self.slots[front as usize].lane = Lane::Idle;
            self.mark_idle(front);
        }
        if self.held(s, now, &*global) {
            return false;
        }
        if self.shared.is_some() {
            return self.leave_now_shared(now, s, size, global);
        }
        let slot = &self.slots[s as usize];
        if slot.len > 0 || now < slot.due {
            return false;
        }
        if !global_open && global.release(now, 1, &mut std::iter::once(size)) == 0 {
            return false;
        }
        self.take_slot(s, now);
        global.key_left(self.slots[s as usize].key.as_bytes(), now);
        true
    }

    /// Whether key `s` is held back at `now` by a hold on it alone
    /// ([`Schedule::key_due`]: an overload's pause); if so its own schedule
    /// is due no earlier than the hold's end, so it waits out of the line.
    #[inline]
    fn held(&mut self, s: u32, now: u64, global: &dyn Schedule) -> bool {
        let slot = &mut self.slots[s as usize];
        let due = global.key_due(slot.key.as_bytes());
        if due <= now {
            return false;
        }
        slot.due = slot.due.max(due);
        true
    }

    /// Key `s`, whose schedule allows it, takes its slot at `now`.
    #[inline]
    fn take_slot(&mut self, s: u32, now: u64) {
        if self.shared.is_some() {
            return self.take_shared_slot(s, now);
        }
        let slot = &mut self.slots[s as usize];
        if now >= slot.rests_at {
            // A rested schedule restarts from now: no arithmetic needed.
            slot.position = Pacer::first_departure(now);
            slot.due = now.saturating_add(self.due_after_first);
            slot.rests_at = now.saturating_add(self.rest_after_first);
        } else {
            let taken = self.pacer.take_one(slot.position, now);
            (slot.position, slot.due, slot.rests_at) = (taken.position, taken.due, taken.rests_at);
        }
        slot.sent += 1;
    }

    /// The record at the front of `seg` (`size` bytes), of key `slot`
    /// (`None`: a new key and no idle one), waits or meets `policy`.
    /// Returns what `block` or `fail` hands back.
    fn wait(
        &mut self,
        now: u64,
        slot: Option<u32>,
        seg: &mut Segment,
        size: usize,
        policy: Overflow,
        ledger: &mut Ledger,
    ) -> Option<Offered> {
        let key_full = slot.map_or(true, |s| {
            self.slots[s as usize].len as usize >= self.key_capacity
        });
        let full = self.len >= self.capacity || self.bytes + size > self.capacity_bytes;
        if key_full || full {
            match policy {
                Overflow::Block => {
                    self.blocked_on_keys = slot.is_none();
                    return Some(Offered::Wait(seg.clone()));
                }
                Overflow::Fail => {
                    self.no_room = if full {
                        NoRoom::Bucket
                    } else if slot.is_none() {
                        NoRoom::Keys
                    } else {
                        NoRoom::Key
                    };
                    return Some(Offered::Overflowed(seg.clone()));
                }
                _ => {}
            }
        }
        let record = seg.split_known(size, 1);
        ledger.read(1);
        let Some(s) = slot else {
            self.dropped_unremembered += 1;
            ledger.dispose(record, Fate::DroppedNewest);
            return None;
        };
        if key_full || full {
            if policy == Overflow::DropNewest {
                self.slots[s as usize].dropped += 1;
                ledger.dispose(record, Fate::DroppedNewest);
                return None;
            }
            if key_full {
                self.evict(s, Fate::DroppedOldest, ledger);
            }
            while self.len >= self.capacity || self.bytes + size > self.capacity_bytes {
                let Some(&(_, _, fattest)) = self.fat.last() else {
                    break;
                };
                self.evict(fattest, Fate::DroppedOldest, ledger);
            }
        }
        self.enqueue(now, s, record.own_copy());
        None
    }

    /// Drop the oldest waiting record of key `s` as `fate`.
    fn evict(&mut self, s: u32, fate: Fate, ledger: &mut Ledger) {
        if let Some(seg) = self.pop_head(s) {
            self.slots[s as usize].dropped += 1;
            ledger.dispose(seg, fate);
        }
    }

    /// Put `record` at the end of key `s`'s queue.
    fn enqueue(&mut self, now: u64, s: u32, record: Segment) {
        self.seq += 1;
        let node = Node {
            seq: self.seq,
            next: NIL,
            seg: record,
        };
        self.len += 1;
        self.bytes += node.seg.bytes();
        self.max_depth = self.max_depth.max(self.len);
        let arrived = node.seg.arrived;
        let n = match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                n
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 records")
            }
        };
        self.unindex(s);
        let slot = &mut self.slots[s as usize];
        if slot.len == 0 {
            slot.head = n;
            self.fronts.insert((arrived, self.seq, s));
        } else {
            let tail = slot.tail;
            self.nodes[tail as usize].next = n;
        }
        let slot = &mut self.slots[s as usize];
        slot.tail = n;
        slot.len += 1;
        self.index(s);
        if self.slots[s as usize].lane == Lane::Idle {
            self.join_line(s, now);
        }
    }

    /// Take key `s`'s head out of its queue.
    fn pop_head(&mut self, s: u32) -> Option<Segment> {
        let slot = &self.slots[s as usize];
        if slot.len == 0 {
            return None;
        }
        let n = slot.head;
        let head = &self.nodes[n as usize];
        let (arrived, seq, next) = (head.seg.arrived, head.seq, head.next);
        self.fronts.remove(&(arrived, seq, s));
        self.unindex(s);
        let seg = std::mem::replace(
            &mut self.nodes[n as usize].seg,
            Segment::new(Bytes::new(), self.delimiter),
        );
        self.free_nodes.push(n);
        self.len -= 1;
        self.bytes -= seg.bytes();
        let slot = &mut self.slots[s as usize];
        slot.len -= 1;
        slot.head = next;
        if slot.len > 0 {
            let head = &self.nodes[next as usize];
            self.fronts.insert((head.seg.arrived, head.seq, s));
        }
        self.index(s);
        Some(seg)
    }

    /// Take key `s` out of `fat` before its queue changes.
    fn unindex(&mut self, s: u32) {
        let slot = &self.slots[s as usize];
        if slot.len > 0 {
            let seq = self.nodes[slot.head as usize].seq;
            self.fat.remove(&(slot.len, Reverse(seq), s));
        }
    }

    /// Put key `s` back in `fat` after its queue changed.
    fn index(&mut self, s: u32) {
        let slot = &self.slots[s as usize];
        if slot.len > 0 {
            let seq = self.nodes[slot.head as usize].seq;
            self.fat.insert((slot.len, Reverse(seq), s));
        }
    }

    /// Key `s`, with records waiting, takes its place in the line: the end
    /// of `ready` when its head may leave at `now` as far as its own limit
    /// goes, otherwise `timers` until it may.
    fn join_line(&mut self, s: u32, now: u64) {
        if self.shared.is_some() {
            return self.join_line_shared(s, now);
        }
        let slot = &mut self.slots[s as usize];
        if now >= slot.due {
            slot.lane = Lane::Ready;
            self.ready.push_back(s);
        } else {
            slot.lane = Lane::Timed;
            self.timers.push(Reverse((slot.due, s)));
        }
    }

    /// Keys whose timer is due by `now` join the end of the line.
    #[inline]
    fn due_timers(&mut self, now: u64) {
        while let Some(&Reverse((due, s))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            self.slots[s as usize].lane = Lane::Ready;
            self.ready.push_back(s);
        }
    }

    /// Woken for a key that may rest by `now`: the record handed back is
    /// offered again (the writer's top-up, or the reader).
    #[inline]
    fn wake_blocked(&mut self, now: u64) {
        if self.blocked_on_keys && self.rest.peek().is_some_and(|&Reverse((at, _))| at <= now) {
            self.blocked_on_keys = false;
        }
    }

    /// Let waiting records leave at `now` that their keys' limits and the
    /// global one allow, in turn, into `outbox`. Returns how many left.
    pub fn release(
        &mut self,
        now: u64,
        global: &mut dyn Schedule,
        outbox: &mut Vec<Segment>,
    ) -> usize {
        if self.shared.is_some() {
            return self.release_shared(now, global, outbox);
        }
        self.due_timers(now);
        self.wake_blocked(now);
        let mut sent = 0;
        while let Some(&s) = self.ready.front() {
            let slot = &self.slots[s as usize];
            if slot.len == 0 {
                self.ready.pop_front();
                self.slots[s as usize].lane = Lane::Idle;
                self.mark_idle(s);
                continue;
            }
            let size = self.nodes[slot.head as usize].seg.bytes();
            if self.held(s, now, &*global) {
                // Out of the line until its hold ends.
                self.ready.pop_front();
                self.slots[s as usize].lane = Lane::Timed;
                self.timers.push(Reverse((self.slots[s as usize].due, s)));
                continue;
            }
            if global.release(now, 1, &mut std::iter::once(size)) == 0 {
                break;
            }
            self.ready.pop_front();
            self.take_slot(s, now);
            global.key_left(self.slots[s as usize].key.as_bytes(), now);
            self.slots[s as usize].lane = Lane::Idle;
            let seg = self.pop_head(s).expect("a waiting record");
            self.longest_wait_ns = self.longest_wait_ns.max(now.saturating_sub(seg.arrived));
            outbox.push(seg);
            sent += 1;
            if self.slots[s as usize].len > 0 {
                self.join_line(s, now);
            } else {
                self.mark_idle(s);
            }
        }
        sent
    }

    /// Expire records that arrived before `cutoff` (ns), oldest first, in
    /// every key. Returns how many expired.
    pub fn expire_before(&mut self, cutoff: u64, ledger: &mut Ledger) -> usize {
        let mut n = 0;
        while let Some(&(arrived, _, s)) = self.fronts.first() {
            if arrived >= cutoff {
                break;
            }
            self.evict(s, Fate::Expired, ledger);
            n += 1;
        }
        n
    }

    /// When something changes without an arrival (ns): a key's head comes
    /// due, the global limit lets the next in line go, or (a new key's
    /// record waiting for room) a key rests. `None` when nothing waits.
    pub fn next_event(&self, global: &dyn Schedule) -> Option<u64> {
        // A key whose queue was emptied by an eviction or an expiry keeps
        // its timer until it comes due: with nothing waiting, every timer
        // is such a one, and nothing is to happen.
        let waiting = self.len > 0;
        let timer = waiting
            .then(|| self.timers.peek().map(|&Reverse((due, _))| due))
            .flatten();
        let line = if self.shared.is_some() {
            waiting.then_some(self.shared_next).flatten()
        } else {
            self.ready.iter().find_map(|&s| {
                let slot = &self.slots[s as usize];
                (slot.len > 0).then(|| global.next_due(self.nodes[slot.head as usize].seg.bytes()))
            })
        };
        let rest = self
            .blocked_on_keys
            .then(|| self.rest.peek().map(|&Reverse((at, _))| at))
            .flatten();
        // Never earlier than a poll after the last walk: a poll time gone by
        // would wake the writer over and over.
        let poll = waiting
            .then(|| self.shared.as_deref().and_then(|s| s.next_poll()))
            .flatten()
            .map(|t| t.max(self.last_walk.saturating_add(shared::POLL_FLOOR_NS)));
        [timer, line, rest, poll].into_iter().flatten().min()
    }

    /// Every waiting record, oldest first, as `fate`.
    pub fn drain(&mut self, fate: Fate, ledger: &mut Ledger) {
        while let Some(&(_, _, s)) = self.fronts.first() {
            let seg = self.pop_head(s).expect("a waiting record");
            ledger.dispose(seg, fate);
        }
    }

    /// Counts about the keys, with the `top` keys of each kind (most
    /// first; ties in the order of the keys' places, the no-key lane
    /// first). Only remembered keys are named: a forgotten key's counts
    /// went with it.
    pub fn stats(&self, top: usize) -> KeyStats {
        let named = |pick: &dyn Fn(&Slot) -> u64| -> Vec<(KeyName, u64)> {
            let mut all: Vec<(u64, usize)> = self
                .slots
                .iter()
                .enumerate()
                .map(|(i, slot)| (pick(slot), i))
                .filter(|&(n, _)| n > 0)
                .collect();
            all.sort_unstable_by_key(|&(n, i)| (Reverse(n), i));
            all.truncate(top);
            all.into_iter().map(|(n, i)| (self.name(i), n)).collect()
        };
        KeyStats {
            keys_seen: self.keys_seen,
            keys: self.keys() as u64,
            busy_keys: self.fronts.len() as u64,
            dropped_unremembered: self.dropped_unremembered,
            top_written: named(&|s| s.sent),
            top_dropped: named(&|s| s.dropped),
            top_waiting: named(&|s| u64::from(s.len)),
        }
    }

    /// Slot `i`'s key for the stats: its bytes, or `None` for the no-key
    /// lane.
    fn name(&self, i: usize) -> KeyName {
        KeyName((i != NO_KEY as usize).then(|| self.slots[i].key.as_bytes().to_vec()))
    }
}

impl Slot {
    fn new(key: KeyBytes) -> Slot {
        Slot {
            key,
            position: Position::default(),
            due: 0,
            rests_at: 0,
            head: NIL,
            tail: NIL,
            len: 0,
            lane: Lane::Idle,
            in_rest: false,
            sent: 0,
            dropped: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_looked_for_without_the_delimiter_or_a_cr_before_a_newline() {
        assert_eq!(body_of(b"a,b\r\n", b'\n'), b"a,b");
        assert_eq!(body_of(b"a,b\n", b'\n'), b"a,b");
        assert_eq!(
            body_of(b"a,b\r", b'\n'),
            b"a,b",
            "a last line without its newline"
        );
        assert_eq!(body_of(b"a,b\r\r\n", b'\n'), b"a,b\r", "one CR only");
        assert_eq!(body_of(b"a,b\r\0", 0), b"a,b\r", "a CR is data with -0");
    }

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
