//! Limits per key with fair queueing (`--key`, `--key-rate`).
//!
//! Each key (see [`crate::key`]) has its own GCRA schedule (one [`Pacer`]'s
//! parameters, a 32-byte [`Position`] per key) and
//! its own FIFO of waiting records; the global
//! [`Schedule`](crate::schedule::Schedule) (`--rate`,
//! `--byte-rate`) still caps all records together. Records are decided one
//! at a time, each at its arrival `t`:
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
//! time the global limit lets that turn go ([`Schedule::nth_due`](crate::schedule::Schedule::nth_due)), so no
//! slot waits on the global limit until it is too late to use
//! (`Keyed::release_shared`). Without it the per-key [`Pacer`] over each
//! slot's [`Position`] decides, with no call
//! through the trait.
//!
//! The rooms: `table` (the remembered keys, and which idle one a new key
//! replaces), `index` (their slots by hash), `lookup` (a read's records
//! split and hashed, and what their look-ups read fetched, ahead of their
//! turn), `queues` (each key's waiting records, and the overflow
//! policies), `line` (the round-robin line and the keys' timers) and
//! `shared` (the seam to shared key schedules). This file holds the state
//! they share and the decision of each arriving record.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::cmp::Reverse;
use std::collections::{BTreeSet, VecDeque};

use foldhash::fast::RandomState;

use crate::bucket::{Offered, Overflow, Segment};
use crate::key::KeySpec;
use crate::ledger::Ledger;
use crate::pacer::{slack_for, Pacer, Position};
use crate::rate::Rate;
use crate::stats::{KeyName, KeyStats};
use crate::waiting::Departures;

mod deadline;
mod index;
mod line;
mod lookup;
mod queues;
mod shared;
mod spill;
mod table;
mod timers;

pub use lookup::record_key;
pub use shared::{KeySchedule, LeaseHead, Want};

use index::KeyIndex;
use line::Lane;
use lookup::Ahead;
use queues::Node;
use spill::{Outgoing, Spill};
use table::{KeyBytes, Slot};
use timers::Timers;

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
    /// The remembered keys, by slot number (the no-key lane first).
    slots: Vec<Slot>,
    /// Each slot's schedule, apart from the slot's one cache line.
    positions: Vec<Position>,
    /// Each slot's records dropped.
    dropped: Vec<u64>,
    free_slots: Vec<u32>,
    /// Keys forgotten so far (a slot named ahead is its key's while this
    /// stays the same: [`Keyed::slot_of_looked`]).
    forgotten: u64,
    /// The remembered keys' slots by hash.
    index: KeyIndex,
    hasher: RandomState,
    nodes: Vec<Node>,
    /// Each node's record's number in arrival order (`seq`), 0 when it
    /// holds none: what tells a live entry of `arrivals` from one gone.
    seqs: Vec<u64>,
    free_nodes: Vec<u32>,
    /// Where waiting records are copied out of their reads.
    spill: Spill,
    /// Records let go and not yet in the outbox.
    outgoing: Outgoing,
    /// Each record that waited leaves as a segment of its own, carrying
    /// its arrival and its place in the input ([`Keyed::records_apart`]).
    apart: bool,
    /// With records apart: each waiting record's place in the input
    /// ([`Segment::number`]), by its node's index (kept beside the nodes,
    /// so a node is no larger without it).
    numbers: Vec<u64>,
    /// Keys whose head is due under their own limit, in turn order.
    ready: VecDeque<u32>,
    /// Keys whose head waits for their own slot: (due, key).
    timers: Timers,
    /// Keys with nothing waiting, by a lower bound of when they rest.
    rest: Timers,
    /// Waiting records in arrival order, (seq, node), some of them gone
    /// since (see [`Keyed::is_waiting`]): the front is always waiting.
    arrivals: VecDeque<(u64, u32)>,
    /// Keys with records waiting.
    busy: usize,
    /// Busy keys by records waiting: (len, oldest head first, key); kept
    /// only once `drop-oldest` has had to choose (`fat_kept`).
    fat: BTreeSet<(u32, Reverse<u64>, u32)>,
    /// Whether `fat` is kept.
    fat_kept: bool,
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
    /// Why the latest record handed back under `fail` found no room.
    no_room: NoRoom,
    /// Records of new keys dropped because no key was idle.
    dropped_unremembered: u64,
    /// The keys' schedules, when shared (`None`: each key's
    /// [`Position`](crate::pacer::Position)).
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
    /// With `--max-wait` under a drop or fail policy: a record foreseen to
    /// leave later than this after it arrives (ns) is refused.
    refuse_after: Option<u64>,
    /// Under `fail`: how long after its arrival the record handed back was
    /// foreseen to leave, when that was why (ns).
    refused_wait_ns: Option<u64>,
    /// The overflow policy (the bucket's: `Keyed::overflowing`).
    policy: Overflow,
    /// When records of the keys last left (ns), noted once a call: the
    /// queues do not ask a schedule that limits nothing and holds no key.
    left_at: Option<u64>,
}

/// Runs of records leaving at once of up to this many bytes are copied
/// (see `Keyed::send_run`).
const COPY_RUN_BYTES: usize = 1024;

/// The most slots reserved ahead (`--max-keys` and the no-key lane, up to
/// this many).
const RESERVED_SLOTS: usize = 1 << 22;

/// A vector holding `first`, with room reserved for `max_keys` more (up to
/// [`RESERVED_SLOTS`]): address space only, the pages are backed as keys
/// come. Slots are aligned to their cache line, and growing such a vector
/// copies it (an allocator moves only blocks of the usual alignment in
/// place), leaving the old block behind in the peak RSS.
fn reserved<T>(first: T, max_keys: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(max_keys.saturating_add(1).min(RESERVED_SLOTS));
    v.push(first);
    v
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
            slots: reserved(no_key, config.max_keys),
            positions: reserved(Position::default(), config.max_keys),
            dropped: reserved(0, config.max_keys),
            free_slots: Vec::new(),
            forgotten: 0,
            index: KeyIndex::with_room(config.max_keys.min(RESERVED_SLOTS)),
            hasher: RandomState::default(),
            nodes: Vec::new(),
            seqs: Vec::new(),
            free_nodes: Vec::new(),
            spill: Spill::default(),
            outgoing: Outgoing::new(delimiter),
            apart: false,
            numbers: Vec::new(),
            ready: VecDeque::new(),
            timers: Timers::default(),
            rest: Timers::default(),
            arrivals: VecDeque::new(),
            busy: 0,
            fat: BTreeSet::new(),
            fat_kept: false,
            len: 0,
            bytes: 0,
            max_depth: 0,
            seq: 0,
            keys_seen: 0,
            longest_wait_ns: 0,
            blocked_on_keys: false,
            no_key_seen: false,
            no_room: NoRoom::Bucket,
            dropped_unremembered: 0,
            shared: None,
            shared_next: None,
            last_walk: 0,
            global_gap: 0,
            key_gap: (1e9 / pacer_per_second) as u64,
            refuse_after: None,
            refused_wait_ns: None,
            policy: Overflow::Block,
            left_at: None,
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

    /// The same queues under the overflow policy `policy` (the bucket's:
    /// each arrival is told the policy that applies to it).
    pub fn overflowing(mut self, policy: Overflow) -> Keyed {
        self.policy = policy;
        self
    }

    /// The overflow policy.
    pub fn policy(&self) -> Overflow {
        self.policy
    }

    /// Records that may wait, all keys together.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes that may wait, all keys together (`usize::MAX`: unbounded).
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// When records of the keys last left (ns): the schedule was not
    /// asked when it limits nothing and holds no key.
    pub fn left_at(&self) -> Option<u64> {
        self.left_at
    }

    /// `sent` records left at `now`.
    fn left(&mut self, now: u64, sent: usize) {
        if sent > 0 {
            self.left_at = Some(now);
        }
    }

    /// Keys remembered at most.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Limit each key to `rate` with `burst` from `now` (ns) on (`drip ctl
    /// … key-rate`): each key's schedule counts from its latest slot with
    /// no credit saved ([`Pacer::spent_at`]), a rested key stays rested
    /// (its position is cleared: its next departure restarts it, and a
    /// `fresh` slot's one departure is told by the limit it was taken
    /// under, which is going). A key already in line or on a timer keeps
    /// that turn (at most one record each leaves as the old limit said).
    /// Local keys only: shared keys' limits are the state's.
    ///
    /// # Panics
    /// If `rate` is unlimited or `burst` is 0 (the command refuses them).
    pub fn replace_limit(&mut self, now: u64, rate: Rate, burst: u64) {
        assert!(rate != Rate::Unlimited);
        let mut pacer = Pacer::new(rate, burst, slack_for(rate));
        for s in 0..self.slots.len() {
            if self.slots[s].rests_at <= now {
                self.positions[s] = Position::default();
                self.slots[s].fresh = false;
                continue;
            }
            self.pacer.restore(self.position(s as u32));
            let last = self.pacer.last_slot().unwrap_or(now).min(now);
            pacer.spent_at(last);
            let position = pacer.position_now();
            self.positions[s] = position;
            let slot = &mut self.slots[s];
            slot.due = pacer.next_due();
            slot.rests_at = pacer.rests_at(position);
            slot.fresh = false;
        }
        self.rest_after_first = pacer.rests_at(Pacer::first_departure(0));
        pacer.restore(Pacer::first_departure(0));
        self.due_after_first = pacer.next_due();
        self.key_gap = (1e9 / pacer.per_second()) as u64;
        self.pacer = pacer;
    }

    /// The same queues with their keys' schedules kept by `schedule`
    /// (shared with other drips) instead of each key's own.
    pub fn with_shared(mut self, schedule: Box<dyn KeySchedule>) -> Keyed {
        self.shared = Some(schedule);
        self
    }

    /// The same queues letting each record that waited leave as a segment
    /// of its own, whose `arrived` is its arrival and whose `number` its
    /// place in the input, and the runs that leave at once as slices of
    /// their read (numbered too): for a sink that times each record from
    /// its arrival and names it by its place (the runner: its waits,
    /// `--deadline`, `DRIP_RECORD_ID`). Without it, the records let go
    /// together leave as one segment (one copy, one piece of a write),
    /// whose `arrived` is the earliest of theirs.
    pub fn records_apart(mut self) -> Keyed {
        self.apart = true;
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
        self.index.len()
    }

    /// Keys with records waiting.
    pub fn busy_keys(&self) -> usize {
        self.busy
    }

    /// The longest any record that left waited, ns.
    pub fn longest_wait_ns(&self) -> u64 {
        self.longest_wait_ns
    }

    /// When the oldest waiting record arrived (ns).
    pub fn oldest_arrival(&self) -> Option<u64> {
        self.oldest().map(|(_, arrived)| arrived)
    }

    /// Records of `seg` arrive at `now`, in order, each decided alone (see
    /// the module's notes); those that leave go to `outbox` in runs.
    /// `may_leave`: whether the writer can take records now. Returns what
    /// `block` or `fail` handed back (not counted as read) and how many
    /// records went to `outbox`.
    pub fn arrive(
        &mut self,
        mut seg: Segment,
        policy: Overflow,
        ledger: &mut Ledger,
        to: &mut Departures,
    ) -> (Offered, usize) {
        let (now, may_leave) = (to.now, to.may_leave);
        let global = &mut *to.schedule;
        let outbox = &mut *to.outbox;
        seg.arrived = now;
        self.blocked_on_keys = false;
        if self.shared.is_some() {
            self.note_global(global);
        }
        let whole = seg.clone();
        let data = whole.as_bytes();
        let global_kind = (global.is_unlimited(), global.holds_keys());
        let weighs_bytes = global.weighs_bytes();
        let (mut run_bytes, mut run_len, mut sent) = (0, 0, 0);
        let mut ahead = Ahead::new();
        let mut start = 0;
        while let Some(record) = self.next_looked(data, &mut ahead, now) {
            let size = record.end - start;
            let bytes = &data[start..record.end];
            let key = record.key.map(|(from, to)| &data[from..to]);
            start = record.end;
            let slot = self.slot_of_looked(&record, key, now);
            if let Some(s) = slot {
                if may_leave && self.leave_now(now, s, bytes, global, global_kind) {
                    run_bytes += size;
                    run_len += 1;
                    continue;
                }
            }
            if run_len > 0 {
                ledger.read(run_len);
                sent += run_len;
                self.send_run(now, &mut seg, run_bytes, run_len, outbox);
                (run_bytes, run_len) = (0, 0);
            }
            match self.hold(now, slot, &mut seg, size, policy, &*global, ledger) {
                deadline::Held::Admit => {}
                deadline::Held::Refused => continue,
                deadline::Held::Back(back) => {
                    self.outgoing.flush(outbox);
                    self.left(now, sent);
                    return (back, sent);
                }
            }
            if let Some(back) = self.wait(now, slot, &mut seg, size, policy, ledger) {
                self.outgoing.flush(outbox);
                self.left(now, sent);
                return (back, sent);
            }
            if may_leave && policy == Overflow::DropOldest && weighs_bytes {
                // An eviction can put a smaller record at the front of the
                // line, which a byte rate may let go at once.
                sent += self.release_at(now, global, outbox);
            }
        }
        if run_len > 0 {
            ledger.read(run_len);
            sent += run_len;
            self.send_run(now, &mut seg, run_bytes, run_len, outbox);
        }
        self.outgoing.flush(outbox);
        self.left(now, sent);
        (Offered::Done, sent)
    }

    /// The run of `len` records (`bytes` bytes) at the front of `seg` that
    /// left at `now` goes out: a short one copied, with the records let go
    /// with it, into one segment; a long one as a slice of its read. (A
    /// slice shares the read's buffer: a count of its holders that the
    /// writer touches again, which costs more than copying a few records,
    /// and in a random order of keys most runs are a record or two.)
    fn send_run(
        &mut self,
        now: u64,
        seg: &mut Segment,
        bytes: usize,
        len: usize,
        outbox: &mut Vec<Segment>,
    ) {
        if bytes > COPY_RUN_BYTES || self.apart {
            self.outgoing.flush(outbox);
            outbox.push(seg.split_known(bytes, len));
            return;
        }
        self.outgoing
            .add_run(&seg.as_bytes()[..bytes], len, now, outbox);
        seg.skip_known(bytes, len);
    }

    /// Counts about the keys, with the `top` keys of each kind (most
    /// first; ties in the order of the keys' places, the no-key lane
    /// first). Only remembered keys are named: a forgotten key's counts
    /// went with it.
    pub fn stats(&self, top: usize) -> KeyStats {
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
            busy_keys: self.busy as u64,
            dropped_unremembered: self.dropped_unremembered,
            top_written: named(&|i| self.slots[i].sent),
            top_dropped: named(&|i| self.dropped[i]),
            top_waiting: named(&|i| u64::from(self.slots[i].len)),
        }
    }

    /// Slot `i`'s key for the stats: its bytes, or `None` for the no-key
    /// lane.
    fn name(&self, i: usize) -> KeyName {
        KeyName((i != NO_KEY as usize).then(|| self.slots[i].key.as_bytes().to_vec()))
    }
}
