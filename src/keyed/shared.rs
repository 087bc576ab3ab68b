//! Limits per key shared with other drips (`--key` with `--share`): the
//! seam ([`KeySchedule`]) through which the keyed queues ask for each
//! key's slots, and the queues' side of it: taking a shared slot, joining
//! and walking the line when a key's slot must be asked for at its turn.
//! The schedules themselves (leases, the keeper, the shared state) are
//! `crate::shared::keys`'s. Only drips given `--share` come here: the
//! unshared path never calls into this file.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use crate::bucket::Segment;
use crate::pace::Pace;

use super::{KeyHold, Keyed, Lane};

/// Each key's schedule when it is not this drip's alone (`--share`): the
/// keys are the keyed queues' slot numbers `s`, with their bytes `key`.
/// Times are ns on drip's clock.
pub trait KeySchedule: Send + std::fmt::Debug {
    /// Whether key `s`'s head may leave at `now`.
    fn allows(&mut self, now: u64, s: u32, key: &[u8]) -> bool;
    /// Key `s`'s head leaves at `now`: it takes its slot.
    fn commit(&mut self, now: u64, s: u32, key: &[u8]);
    /// What key `s`'s lease holds at `now` (its slots too late to use by
    /// then forfeited first).
    fn first_slot(&mut self, now: u64, s: u32, key: &[u8]) -> LeaseHead;
    /// Key `s` has `want.records` records waiting, to leave from `want.at`
    /// on, `want.every` ns apart: slots for those its lease lacks are
    /// asked for, no earlier than those times ([`KeySchedule::arrived`]
    /// reports them when it had none).
    fn ask(&mut self, now: u64, s: u32, key: &[u8], want: Want);
    /// The keys that had no slot and now have: (when due, `s`); each once.
    fn arrived(&mut self) -> Vec<(u64, u32)>;
    /// Key `s` is forgotten (its slot number may be another key's next).
    fn forget(&mut self, s: u32);
    /// Key `s`'s records expired, `waiting` of them left: the slots its
    /// lease holds beyond them go back at once, as the global limits' do
    /// ([`Pace::expired`]).
    fn expired(&mut self, _s: u32, _key: &[u8], _waiting: u32) {}
    /// When to look again (ns) while records wait; asked only then.
    fn next_poll(&self) -> Option<u64>;
    /// How long before its record's turn a key asks for its slot (ns):
    /// the time slots take to arrive.
    fn lead(&self) -> u64;
    /// The limits per key, when `drip ctl` changed them for every drip on
    /// the state since last asked (the schedule follows them already);
    /// each change once.
    fn relimited(&mut self) -> Option<super::KeyTable> {
        None
    }
}

/// What a key's shared lease holds ([`KeySchedule::first_slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseHead {
    /// A slot, due at this time (ns).
    At(u64),
    /// No slot; some are asked for.
    Asked,
    /// No slot, none asked for.
    Empty,
}

/// What a key's records want of the shared key schedule
/// ([`KeySchedule::ask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// Records waiting (0: none to ask for yet).
    pub records: u32,
    /// When the first may leave as far as the global limits go (ns).
    pub at: u64,
    /// How far apart the global limits let them go (ns; 0: as the key's
    /// own limit lets them).
    pub every: u64,
}

/// The keys' schedules when shared, and the walk of the line over them.
#[derive(Debug)]
pub(super) struct SharedSchedules {
    /// Each key's schedule.
    pub(super) schedule: Box<dyn KeySchedule>,
    /// When the line next needs a look (ns), if it does.
    pub(super) next: Option<u64>,
    /// When the line was last walked (ns), for the poll's floor.
    pub(super) last_walk: u64,
    /// The global limits' least spacing of records (ns; 0: they do not
    /// limit records).
    pub(super) global_gap: u64,
}

impl SharedSchedules {
    /// Over `schedule`, nothing walked yet.
    pub(super) fn new(schedule: Box<dyn KeySchedule>) -> SharedSchedules {
        SharedSchedules {
            schedule,
            next: None,
            last_walk: 0,
            global_gap: 0,
        }
    }
}

/// The least key spacing (ns) at which a key held back by the global
/// limits asks for its slots at its turns ([`Keyed::release_shared`]).
const PRECISE_KEY_GAP: u64 = 10_000_000;

/// Keys looked at for an earlier due slot ([`Keyed::earliest_due`]).
const EDF_LOOK: usize = 32;

/// While records wait on shared slots, the line is walked again at least
/// this often (ns), and never more often on account of a poll.
pub(super) const POLL_FLOOR_NS: u64 = 50_000_000;

impl Keyed {
    /// [`Keyed::take_slot`] with shared key schedules: its lease, not its
    /// schedule, is this drip's, and it is taken to rest one burst's time
    /// later. Kept out of line: the local path runs for every record.
    #[cold]
    #[inline(never)]
    pub(super) fn take_shared_slot(&mut self, s: u32, now: u64) {
        let slot = &mut self.table.slots[s as usize];
        let shared = &mut self.pacing.shared_mut().schedule;
        shared.commit(now, s, slot.key.as_bytes());
        slot.rests_at = now.saturating_add(self.limits.of(s).rest_after_first);
        slot.sent += 1;
    }

    /// [`Keyed::leave_now`] with shared key schedules: the key's slot from
    /// its lease.
    pub(super) fn leave_now_shared(
        &mut self,
        now: u64,
        s: u32,
        record: &[u8],
        global: &mut Pace,
    ) -> bool {
        let shared = &mut self.pacing.shared_mut().schedule;
        let slot = &self.table.slots[s as usize];
        if slot.len > 0 || !shared.allows(now, s, slot.key.as_bytes()) {
            return false;
        }
        if global.release(now, 1, &mut std::iter::once(record)) == 0 {
            return false;
        }
        self.take_slot(s, now);
        global.key_left(self.table.slots[s as usize].key.as_bytes(), now);
        true
    }

    /// Shared key schedules: note the global limits' spacing of records.
    #[cold]
    #[inline(never)]
    pub(super) fn note_global(&mut self, global: &Pace) {
        let per_second = global.records_per_second();
        self.pacing.shared_mut().global_gap = if per_second.is_finite() && per_second > 0.0 {
            (1e9 / per_second) as u64
        } else {
            0
        };
    }

    /// [`Keyed::join_line`] with shared key schedules. Under global
    /// limits of records, the key's slots could come before the global
    /// limits let its records go, and be forfeited late: the key joins the
    /// line with no slot asked for, and asks when its turn nears
    /// ([`Keyed::release_shared`]). Otherwise it asks for slots for all
    /// its records now, and waits out of the line until they arrive.
    #[cold]
    #[inline(never)]
    pub(super) fn join_line_shared(&mut self, s: u32, now: u64) {
        let lazy = self.pacing.shared().global_gap > 0;
        let shared = &mut self.pacing.shared_mut().schedule;
        let slot = &mut self.table.slots[s as usize];
        let key = slot.key.as_bytes();
        let records = if lazy { 0 } else { slot.len };
        shared.ask(
            now,
            s,
            key,
            Want {
                records,
                at: now,
                every: 0,
            },
        );
        match shared.first_slot(now, s, key) {
            LeaseHead::At(due) if due > now && !lazy => {
                slot.lane = Lane::Timed;
                self.line.timers.push(due, s);
            }
            // No timer without a due time: `arrived` brings it.
            LeaseHead::Asked | LeaseHead::Empty if !lazy => slot.lane = Lane::Timed,
            _ => {
                slot.lane = Lane::Ready;
                self.line.ready.push_back(s);
                self.pacing.shared_mut().next = Some(now);
            }
        }
    }

    /// [`Keyed::release`] with shared key schedules. The line is walked in
    /// turn order: a key whose slot is due sends when the global limits
    /// allow; a key whose slot is asked for and not yet due (or not yet
    /// come) keeps its place and lets the others pass; a key whose slot is
    /// later than its turn leaves the line until it is due; a key with no
    /// slot asks for one, for when its turn is expected (the global
    /// limits' next departure, one global spacing more for each key before
    /// it, and its later records one round of the busy keys apart), once
    /// that is within [`KeySchedule::lead`]. Keys further back wait: a
    /// slot reserved long before its record's turn would be forfeited.
    #[cold]
    #[inline(never)]
    pub(super) fn release_shared(
        &mut self,
        now: u64,
        global: &mut Pace,
        outbox: &mut Vec<Segment>,
    ) -> usize {
        let (binds, every) = self.begin_walk(now, global);
        let (mut sent, mut i, mut before) = (0, 0, 0u64);
        let mut blocked = false;
        while i < self.line.ready.len() && !(blocked && self.pacing.shared().global_gap == 0) {
            let s = self.line.ready[i];
            let slot = &self.table.slots[s as usize];
            if slot.len == 0 {
                self.line.ready.remove(i);
                self.table.slots[s as usize].lane = Lane::Idle;
                self.table.mark_idle(s);
                continue;
            }
            let hold = (!blocked).then(|| self.key_hold(s, now, &*global));
            let held = hold.is_some_and(|h| h != KeyHold::No);
            let slot = &self.table.slots[s as usize];
            let shared = &mut self.pacing.shared_mut().schedule;
            match shared.first_slot(now, s, slot.key.as_bytes()) {
                LeaseHead::At(t) if t <= now && !blocked && !held => {
                    // Under a binding global limit, the key whose slot
                    // came first goes first: its slot expires first.
                    let j = if binds {
                        self.earliest_due(now, i, t)
                    } else {
                        i
                    };
                    let j = if j != i && self.held(self.line.ready[j], now, &*global) {
                        i
                    } else {
                        j
                    };
                    let s = self.line.ready[j];
                    let head = self.head_record(s);
                    if global.release(now, 1, &mut std::iter::once(head)) > 0 {
                        self.line.ready.remove(j);
                        self.send_turn(s, now, outbox);
                        global.key_left(self.table.slots[s as usize].key.as_bytes(), now);
                        sent += 1;
                        continue;
                    }
                    blocked = true;
                    self.look_at(global.next_due(head));
                }
                LeaseHead::At(t) if t <= now => {
                    // Held back by a hold on this key alone: looked at
                    // again when it ends (its job limit's: woken).
                    if hold == Some(KeyHold::Until) {
                        let due = self.table.slots[s as usize].due;
                        self.look_at(due);
                    }
                }
                LeaseHead::At(t) if binds && slot.lane == Lane::Asked => self.look_at(t),
                LeaseHead::At(t) => {
                    self.line.ready.remove(i);
                    self.table.slots[s as usize].lane = Lane::Timed;
                    self.line.timers.push(t, s);
                    continue;
                }
                LeaseHead::Asked => {}
                LeaseHead::Empty if !binds => self.ask_all(now, s, before, &*global),
                LeaseHead::Empty => {
                    if !self.ask_turn(now, s, before, every, &*global) {
                        break;
                    }
                }
            }
            before += 1;
            i += 1;
        }
        self.queues.outgoing.flush(outbox);
        if binds {
            self.tell_global(now, global);
        }
        sent
    }

    /// The start of [`Keyed::release_shared`]: keys whose slots came go on
    /// the timers, due timers into the line. Returns whether the global
    /// limits bind (a round of the line at the global spacing is longer
    /// than the key's own spacing: its slots are then asked for its turns)
    /// and that round's length (ns).
    fn begin_walk(&mut self, now: u64, global: &Pace) -> (bool, u64) {
        self.note_global(global);
        let shared = &mut self.pacing.shared_mut().schedule;
        if let Some(table) = shared.relimited() {
            let default = table.default();
            let (rate, burst) =
                default.map_or((crate::rate::Rate::Unlimited, 1), |l| (l.rate, l.burst));
            self.replace_limit(now, rate, burst);
            self.replace_rates(now, table.rows().clone());
        }
        let shared = &mut self.pacing.shared_mut().schedule;
        for (due, s) in shared.arrived() {
            if self.table.slots[s as usize].lane == Lane::Timed {
                self.line.timers.push(due, s);
            }
        }
        self.due_timers(now);
        self.wake_blocked(now);
        let shared = self.pacing.shared_mut();
        shared.next = None;
        shared.last_walk = now;
        let every = (self.queues.busy as u64).saturating_mul(self.pacing.shared().global_gap);
        // Above 100/s a key's slot is usable for less than 10 ms, shorter
        // than the keeper's gathering: its turns cannot be met that
        // closely, and it asks as its own limit lets it.
        let binds = self.pacing.shared().global_gap > 0
            && every >= self.limits.default().key_gap
            && self.limits.default().key_gap >= PRECISE_KEY_GAP;
        (binds, every)
    }

    /// Shared, its own limit binding: key `s`, with no slot and `before`
    /// keys before it in the line, asks for slots for all its records, as
    /// soon as its limit lets them, but not before the global limits let
    /// its turn go, nor closer than they do.
    fn ask_all(&mut self, now: u64, s: u32, before: u64, global: &Pace) {
        let slot = &self.table.slots[s as usize];
        let head = self.queues.head_record(slot);
        let at = global.nth_due(head, before as usize).unwrap_or(now);
        let want = Want {
            records: slot.len,
            at: at.max(now),
            every: self.pacing.shared().global_gap,
        };
        let shared = &mut self.pacing.shared_mut().schedule;
        shared.ask(now, s, self.table.slots[s as usize].key.as_bytes(), want);
        self.table.slots[s as usize].lane = Lane::Asked;
    }

    /// Shared, under a binding global limit: key `s`, with no slot and
    /// `before` keys before it in the line, asks for slots for its turns
    /// (`every` ns apart) within the lead, the first when the global
    /// limits let its turn go. Returns false when its turn is not near, or
    /// not yet known (a shared schedule's slots not yet reserved): keys
    /// further back wait too.
    fn ask_turn(&mut self, now: u64, s: u32, before: u64, every: u64, global: &Pace) -> bool {
        let shared = &mut self.pacing.shared_mut().schedule;
        let lead = shared.lead();
        let slot = &mut self.table.slots[s as usize];
        let node = &self.queues.nodes[slot.head as usize];
        let head = self.queues.spill.bytes(node.place, node.len);
        let Some(at) = global.nth_due(head, before as usize) else {
            // Its turn is past the global slots reserved. With none due
            // yet, look when the first is; with one due, it waits for a
            // key before this one whose own slot is asked for: what
            // changes is the keeper's, whose grants wake the writer (and
            // the poll looks again), so a look at once would find the
            // same, over and over.
            let due = global.next_due(head);
            if due > now {
                self.look_at(due);
            }
            return false;
        };
        let at = at.max(now);
        if at > now.saturating_add(lead) {
            self.look_at(at - lead);
            return false;
        }
        // The turns within the lead: later ones are asked for nearer their
        // time, when it is better known.
        let turns = 1 + lead / every.max(1);
        let records = slot.len.min(u32::try_from(turns).unwrap_or(u32::MAX));
        shared.ask(now, s, slot.key.as_bytes(), Want { records, at, every });
        slot.lane = Lane::Asked;
        true
    }

    /// Shared: of the keys in the line from place `from` on, whose first
    /// is due at `t`, the place of the one whose slot is due first (among
    /// the next few).
    fn earliest_due(&mut self, now: u64, from: usize, t: u64) -> usize {
        let shared = &mut self.pacing.shared_mut().schedule;
        let mut best = (t, from);
        for (j, &s) in self
            .line
            .ready
            .iter()
            .enumerate()
            .skip(from + 1)
            .take(EDF_LOOK)
        {
            let slot = &self.table.slots[s as usize];
            if slot.len == 0 || slot.lane != Lane::Asked {
                continue;
            }
            if let LeaseHead::At(u) = shared.first_slot(now, s, slot.key.as_bytes()) {
                if u < best.0 {
                    best = (u, j);
                }
            }
        }
        best.1
    }

    /// Shared: when the global limits have no slot due, tell them how many
    /// records wait (a shared schedule reserves its slots for them; a
    /// local one takes none, none being due). A shared schedule holding no
    /// slot has none due, whenever it says to look again: its look comes
    /// from its last release, and, told nothing for that long, it would
    /// never reserve, the keys asking for nothing before it does.
    fn tell_global(&mut self, now: u64, global: &mut Pace) {
        let heads = self.line.ready.iter().filter_map(|&s| {
            let slot = &self.table.slots[s as usize];
            (slot.len > 0).then(|| self.queues.head_record(slot))
        });
        // Under record limits, every record waiting (the keys' turns
        // further on are known as far as the slots reach); under byte
        // limits, whose slots are reserved for sizes, the keys' heads.
        let waiting = if global.weighs_bytes() {
            heads.clone().count()
        } else {
            self.queues.len
        };
        let first = heads.clone().next();
        let none_due = |head| global.next_due(head) > now || global.nth_due(head, 0).is_none();
        if first.is_some_and(none_due) {
            let n = global.release(now, waiting, &mut heads.clone());
            debug_assert_eq!(n, 0, "no slot was due");
        }
    }

    /// Shared: a record of key `s` expired; the schedule hears how many
    /// are left ([`KeySchedule::expired`]).
    pub(super) fn expired_shared(&mut self, s: u32) {
        let slot = &self.table.slots[s as usize];
        let shared = &mut self.pacing.shared_mut().schedule;
        shared.expired(s, slot.key.as_bytes(), slot.len);
    }

    /// Shared: the line needs a look at `t` (ns).
    fn look_at(&mut self, t: u64) {
        let shared = self.pacing.shared_mut();
        shared.next = Some(shared.next.map_or(t, |n| n.min(t)));
    }
}
