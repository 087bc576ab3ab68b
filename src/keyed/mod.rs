//! Limits per key with fair queueing (`--key`, `--key-rate`).
//!
//! Each key (see [`crate::key`]) has its own GCRA schedule (one [`Pacer`](crate::pacer::Pacer)'s
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
//! it waits and its schedule is rested ([`Pacer::rests_at`](crate::pacer::Pacer::rests_at)): forgetting it
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
//! time the global limit lets that turn go ([`Pace::nth_due`](crate::pace::Pace::nth_due)), so no
//! slot waits on the global limit until it is too late to use
//! (`Keyed::release_shared`). Without it the per-key
//! [`Pacer`](crate::pacer::Pacer) over each slot's [`Position`] decides,
//! with no call through the trait.
//!
//! The parts, each a struct of its own file holding its own data:
//! `table` (`Table`: the remembered keys' slots, which idle one a new
//! key replaces, and the per-key figures and their stats), `index` (their
//! slots by hash), `lookup` (a read's records split and hashed, and what
//! their look-ups read fetched, ahead of their turn), `queues`
//! (`Queues`: each key's waiting records, the bounds and the overflow
//! policies), `line` (`Line`: the round-robin line and the keys'
//! timers), `pacing` (`KeyLimit`, the key limit, and `Pacing`, where
//! each key's schedule stands: this drip's own or shared), `shared` (the
//! seam to shared key schedules and the walk of the line over them) and
//! `deadline` (`Refusal`: holding records to `--max-wait`). A key's one
//! cache line, its `Slot`, is the table's; the queues, the
//! line and the pacing each keep their part of it. This file holds the
//! parts together and decides each arriving record.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::hash::BuildHasher;

use crate::bucket::{Offered, Overflow, Segment};
use crate::key::KeySpec;
use crate::ledger::Ledger;
use crate::outflow::Outflow;
use crate::pacer::Position;
use crate::rate::Rate;
use crate::report::keys::{KeyLimitView, KeyStats};

mod deadline;
mod index;
mod line;
mod lookup;
mod pacing;
mod queues;
pub mod rates;
mod shared;
mod spill;
mod table;
mod timers;

pub use lookup::record_key;
pub use shared::{KeySchedule, LeaseHead, Want};

use deadline::Refusal;
use line::{GlobalKind, Lane, Line};
use lookup::Ahead;
use pacing::{KeyLimits, Pacing};
use queues::Queues;
pub use rates::{KeyRates, KeyTable};
use shared::SharedSchedules;
use table::{reserved, Table};

/// The lane of records that have no key.
const NO_KEY: u32 = 0;
/// No node (end of a key's list).
const NIL: u32 = u32::MAX;

/// How records are keyed and limited per key.
#[derive(Debug, Clone)]
pub struct KeyConfig {
    /// Where a record's key is.
    pub spec: KeySpec,
    /// The rate of each key no row of `rates` matches (records; unlimited:
    /// no limit of its own).
    pub rate: Rate,
    /// Its burst (≥ 1).
    pub burst: u64,
    /// The rate table (`--key-rates`, `--key-rate KEY=RATE`): each key
    /// the most specific row matching it.
    pub rates: KeyRates,
    /// Keys remembered at most (≥ 1), besides the no-key lane.
    pub max_keys: usize,
    /// Records one key may have waiting at most (≥ 1).
    pub key_capacity: usize,
}

/// Per-key queues and schedules, with the round-robin line between them.
/// Each part is its own file's.
#[derive(Debug)]
pub struct Keyed {
    /// Where a record's key is.
    spec: KeySpec,
    /// What ends a record.
    delimiter: u8,
    /// The remembered keys, their slots and figures (`table.rs`).
    table: Table,
    /// The waiting records, each key's in its queue (`queues.rs`).
    queues: Queues,
    /// The round-robin line and the keys' timers (`line.rs`).
    line: Line,
    /// The key limits, each row's and the default's, and each key's
    /// (`pacing.rs`).
    limits: KeyLimits,
    /// Where each key's schedule stands: this drip's own, or shared
    /// (`pacing.rs`, `shared.rs`).
    pacing: Pacing,
    /// Holding records to `--max-wait` (`deadline.rs`).
    refusal: Refusal,
}

/// Runs of records leaving at once of up to this many bytes are copied
/// (see `Keyed::send_run`).
const COPY_RUN_BYTES: usize = 1024;

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
    /// If a bound or a burst is 0 (the command line refuses them).
    pub fn new(
        config: KeyConfig,
        delimiter: u8,
        capacity: usize,
        capacity_bytes: Option<usize>,
    ) -> Keyed {
        assert!(config.max_keys >= 1);
        assert!(config.key_capacity >= 1 && capacity >= 1);
        Keyed {
            spec: config.spec,
            delimiter,
            table: Table::new(config.max_keys),
            queues: Queues::new(capacity, capacity_bytes, config.key_capacity, delimiter),
            line: Line::default(),
            limits: KeyLimits::new(config.rates, (config.rate, config.burst), config.max_keys),
            pacing: Pacing::Local(reserved(Position::default(), config.max_keys)),
            refusal: Refusal::default(),
        }
    }

    /// Why the latest record handed back under `fail` found no room.
    pub fn no_room(&self) -> NoRoom {
        self.queues.no_room
    }

    /// Each key's queue holds at most this many records.
    pub fn key_capacity(&self) -> usize {
        self.queues.key_capacity
    }

    /// The same queues under the overflow policy `policy` (the bucket's:
    /// each arrival is told the policy that applies to it).
    pub fn overflowing(mut self, policy: Overflow) -> Keyed {
        self.queues.policy = policy;
        self
    }

    /// The overflow policy.
    pub fn policy(&self) -> Overflow {
        self.queues.policy
    }

    /// Records that may wait, all keys together.
    pub fn capacity(&self) -> usize {
        self.queues.capacity
    }

    /// Bytes that may wait, all keys together (`usize::MAX`: unbounded).
    pub fn capacity_bytes(&self) -> usize {
        self.queues.capacity_bytes
    }

    /// When records of the keys last left (ns): the schedule was not
    /// asked when it limits nothing and holds no key.
    pub fn left_at(&self) -> Option<u64> {
        self.line.left_at
    }

    /// `sent` records left at `now`.
    fn left(&mut self, now: u64, sent: usize) {
        if sent > 0 {
            self.line.left_at = Some(now);
        }
    }

    /// Keys remembered at most.
    pub fn max_keys(&self) -> usize {
        self.table.max_keys
    }

    /// The same queues with their keys' schedules kept by `schedule`
    /// (shared with other drips) instead of each key's own.
    pub fn with_shared(mut self, schedule: Box<dyn KeySchedule>) -> Keyed {
        self.pacing = Pacing::Shared(SharedSchedules::new(schedule));
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
        self.queues.apart = true;
        self
    }

    /// Records waiting, in all keys.
    pub fn len(&self) -> usize {
        self.queues.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queues.len == 0
    }

    /// Bytes waiting, in all keys.
    pub fn bytes(&self) -> usize {
        self.queues.bytes
    }

    /// The most records that ever waited at once.
    pub fn max_depth(&self) -> usize {
        self.queues.max_depth
    }

    /// Keys remembered now (the no-key lane not counted).
    pub fn keys(&self) -> usize {
        self.table.keys()
    }

    /// Keys with records waiting.
    pub fn busy_keys(&self) -> usize {
        self.queues.busy
    }

    /// The longest any record that left waited, ns.
    pub fn longest_wait_ns(&self) -> u64 {
        self.queues.longest_wait_ns
    }

    /// When the oldest waiting record arrived (ns).
    pub fn oldest_arrival(&self) -> Option<u64> {
        self.queues.oldest().map(|(_, arrived)| arrived)
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
        to: &mut Outflow,
    ) -> (Offered, usize) {
        let (now, may_leave) = (to.now, to.may_leave);
        let global = &mut *to.schedule;
        let outbox = &mut *to.outbox;
        seg.arrived = now;
        self.line.blocked_on_keys = false;
        if self.pacing.is_shared() {
            self.note_global(global);
        }
        let whole = seg.clone();
        let data = whole.as_bytes();
        let global_kind = GlobalKind::of(global);
        let weighs_bytes = global.weighs_bytes();
        let (mut run_bytes, mut run_len, mut sent) = (0, 0, 0);
        let mut ahead = Ahead::default();
        let mut start = 0;
        while let Some(record) = self.next_looked(data, &mut ahead, now) {
            let size = record.end - start;
            let bytes = &data[start..record.end];
            let key = ahead.key_of(&record, data);
            let keyless = (key.is_none(), whole.number + ahead.decided() as u64 - 1);
            start = record.end;
            let slot = self.slot_of_looked(&record, key, now);
            if let Some(s) = slot {
                if may_leave && self.leave_now(now, s, bytes, global, global_kind) {
                    self.table.read_keyless(keyless.0, keyless.1);
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
            let back = match self.hold(now, slot, &mut seg, size, policy, &*global, ledger) {
                deadline::Judged::Admit => self.wait(now, slot, &mut seg, size, policy, ledger),
                deadline::Judged::Refused => {
                    self.table.read_keyless(keyless.0, keyless.1);
                    continue;
                }
                deadline::Judged::Back(back) => Some(back),
            };
            if let Some(back) = back {
                self.queues.outgoing.flush(outbox);
                self.left(now, sent);
                return (back, sent);
            }
            // Read: it waits, or met the policy.
            self.table.read_keyless(keyless.0, keyless.1);
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
        self.queues.outgoing.flush(outbox);
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
        if bytes > COPY_RUN_BYTES || self.queues.apart {
            self.queues.outgoing.flush(outbox);
            outbox.push(seg.split_known(bytes, len));
            return;
        }
        self.queues
            .outgoing
            .add_run(&seg.as_bytes()[..bytes], len, now, outbox);
        seg.skip_known(bytes, len);
    }

    /// The place in the input of the first record read that had no key.
    pub fn first_keyless(&self) -> Option<u64> {
        self.table.first_keyless()
    }

    /// Counts about the keys, with the `top` keys of each kind (most
    /// first; ties in the order of the keys' places, the no-key lane
    /// first). Only remembered keys are named: a forgotten key's counts
    /// went with it.
    pub fn stats(&self, top: usize) -> KeyStats {
        let mut stats = self.table.stats(self.queues.busy, top);
        stats.longest = self.longest();
        if !self.limits.rates.is_empty() {
            let lists = [&stats.top_written, &stats.top_dropped, &stats.top_waiting];
            let mut named: Vec<u32> = Vec::new();
            for (name, _) in lists.into_iter().flatten() {
                let s = match &name.0 {
                    None => Some(NO_KEY),
                    Some(key) => self.table.find(key, self.table.hasher.hash_one(&key[..])),
                };
                if let Some(s) = s.filter(|s| !named.contains(s)) {
                    named.push(s);
                }
            }
            stats.key_limits = Some(named.into_iter().map(|s| self.limit_view(s)).collect());
        }
        stats
    }

    /// The key whose oldest record has waited longest (the oldest of all
    /// waiting), with its row, limit and records waiting; `None` when no
    /// record waits.
    pub fn longest(&self) -> Option<KeyLimitView> {
        self.queues.oldest().map(|(s, _)| self.limit_view(s))
    }

    /// Every remembered key's row, limit and records waiting (the no-key
    /// lane first, once used; then in the order the keys took their
    /// slots, a forgotten key's slot taken again by the next).
    pub fn key_limits(&self) -> Vec<KeyLimitView> {
        let slots = self.table.remembered();
        slots.into_iter().map(|s| self.limit_view(s)).collect()
    }

    /// Key slot `s`'s row, limit and records waiting.
    fn limit_view(&self, s: u32) -> KeyLimitView {
        let limit = self.limits.of(s);
        let row = self.limits.row(s);
        KeyLimitView {
            key: self.table.name(s as usize),
            row: row.map(|i| self.limits.rates.rows()[i].name.clone()),
            rate: (limit.rate != Rate::Unlimited).then_some((limit.rate, limit.burst)),
            waiting: u64::from(self.table.slots[s as usize].len),
            jobs: None,
            running: None,
        }
    }

    /// The rate table in force.
    pub fn rates(&self) -> &KeyRates {
        &self.limits.rates
    }
}

/// Whether a hold on one key alone holds it ([`Keyed::key_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyHold {
    /// It may go as far as such holds go.
    No,
    /// Until its slot's `due`, moved to the hold's end.
    Until,
    /// Until the pace frees it ([`crate::pace::UNTIL_FREED`]).
    Freed,
}
