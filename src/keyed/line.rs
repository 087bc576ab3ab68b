//! The round-robin line: keys whose head may leave under their own limit
//! wait their turn in `ready`, keys whose head waits for its key's slot on
//! `timers`; a record of a key with nothing waiting leaves at once when
//! the line and both limits allow; the key at the front sends one record
//! a turn when the global limit allows.
//!
//! Pure: no threads, no clock, no I/O. Times are ns and never go backwards.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use crate::bucket::Segment;
use crate::outflow::Outflow;
use crate::pace::{Pace, UNTIL_FREED};

use super::pacing::Pacing;
use super::timers::Timers;
use super::{shared, KeyHold, Keyed};

/// How many places ahead in the line [`Keyed::release`] starts fetching
/// a key's slot (a power of two).
const LINE_AHEAD: usize = 16;

/// Where a key's queue stands in the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// Not in the line (nothing waits, or it was just forgotten).
    Idle,
    /// In `ready`: its head may leave as far as its own limit goes.
    Ready,
    /// In `timers`: its head waits for its key's slot.
    Timed,
    /// Shared key schedules only: in `ready`, its slot asked for the time
    /// its turn is expected; other keys pass it until the slot is due.
    Asked,
    /// Out of the line and off the timers: held until the pace frees it
    /// ([`Pace::keys_freed`]: a key at its job limit, until one of its
    /// jobs ends).
    Parked,
}

/// The round-robin line and the keys' timers.
#[derive(Debug, Default)]
pub(super) struct Line {
    /// Keys whose head is due under their own limit, in turn order.
    pub(super) ready: VecDeque<u32>,
    /// Keys whose head waits for their own slot: (due, key).
    pub(super) timers: Timers,
    /// A new key's record was handed back because no key was idle.
    pub(super) blocked_on_keys: bool,
    /// When records of the keys last left (ns), noted once a call: the
    /// queues do not ask a schedule that limits nothing and holds no key.
    pub(super) left_at: Option<u64>,
}

/// What the global pace is, asked once for all the records an arrival
/// brings: whether it limits nothing (`open`: a record leaving takes no
/// slot of it) and whether it may hold a key back
/// ([`Pace::holds_keys`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct GlobalKind {
    pub(super) open: bool,
    pub(super) holds_keys: bool,
}

impl GlobalKind {
    /// What `global` is.
    pub(super) fn of(global: &Pace) -> GlobalKind {
        GlobalKind {
            open: global.is_unlimited(),
            holds_keys: global.holds_keys(),
        }
    }
}

impl Keyed {
    /// Key `s`, out of the line, takes its slot and sends its head at
    /// `now`, then joins the line again if more of its records wait.
    pub(super) fn send_turn(&mut self, s: u32, now: u64, outbox: &mut Vec<Segment>) {
        self.take_slot(s, now);
        self.table.slots[s as usize].lane = Lane::Idle;
        self.send_head(s, now, outbox);
        if self.table.slots[s as usize].len > 0 {
            self.join_line(s, now);
        } else {
            self.table.mark_idle(s);
        }
    }

    /// Whether `record`, of key `s`, leaves at `now`; if so it takes its
    /// slot in its key's schedule and the `global` one (`kind`: what
    /// `global` is, [`GlobalKind::of`]).
    pub(super) fn leave_now(
        &mut self,
        now: u64,
        s: u32,
        record: &[u8],
        global: &mut Pace,
        kind: GlobalKind,
    ) -> bool {
        let GlobalKind {
            open: global_open,
            holds_keys,
        } = kind;
        while let Some(&front) = self.line.ready.front() {
            if self.table.slots[front as usize].len > 0 {
                return false;
            }
            self.line.ready.pop_front();
            self.table.slots[front as usize].lane = Lane::Idle;
            self.table.mark_idle(front);
        }
        if holds_keys && self.held(s, now, &*global) {
            return false;
        }
        if self.pacing.is_shared() {
            return self.leave_now_shared(now, s, record, global);
        }
        let slot = &self.table.slots[s as usize];
        if slot.len > 0 || now < slot.due {
            return false;
        }
        if !global_open && global.release(now, 1, &mut std::iter::once(record)) == 0 {
            return false;
        }
        self.take_slot(s, now);
        if holds_keys {
            global.key_left(self.table.slots[s as usize].key.as_bytes(), now);
        }
        true
    }

    /// Whether key `s` is held back at `now` by a hold on it alone
    /// ([`Keyed::key_hold`]).
    #[inline]
    pub(super) fn held(&mut self, s: u32, now: u64, global: &Pace) -> bool {
        self.key_hold(s, now, global) != KeyHold::No
    }

    /// Whether key `s` is held back at `now` by a hold on it alone
    /// ([`Pace::key_due`]: an overload's pause, its job limit); if so
    /// until a time (its own schedule is then due no earlier than the
    /// hold's end, so it waits out of the line), or until the pace frees
    /// it (its schedule untouched).
    #[inline]
    pub(super) fn key_hold(&mut self, s: u32, now: u64, global: &Pace) -> KeyHold {
        let slot = &mut self.table.slots[s as usize];
        let due = global.key_due(slot.key.as_bytes());
        if due <= now {
            return KeyHold::No;
        }
        if due == UNTIL_FREED {
            return KeyHold::Freed;
        }
        slot.due = slot.due.max(due);
        KeyHold::Until
    }

    /// Keys the pace freed ([`Pace::keys_freed`]) that wait parked join
    /// the line again at `now`.
    pub(super) fn unpark(&mut self, now: u64, global: &mut Pace) {
        global.keys_freed(&mut |key| {
            let hash = self.table.hasher.hash_one(key);
            let found = self.table.find(key, hash);
            // The keyless lane's key is the empty one too.
            let keyless = key.is_empty().then_some(super::NO_KEY);
            for s in [found, keyless].into_iter().flatten() {
                if self.table.slots[s as usize].lane == Lane::Parked {
                    self.table.slots[s as usize].lane = Lane::Idle;
                    self.join_line(s, now);
                }
            }
        });
    }

    /// Key `s`, with records waiting, takes its place in the line: the end
    /// of `ready` when its head may leave at `now` as far as its own limit
    /// goes, otherwise `timers` until it may.
    pub(super) fn join_line(&mut self, s: u32, now: u64) {
        if self.pacing.is_shared() {
            return self.join_line_shared(s, now);
        }
        let slot = &mut self.table.slots[s as usize];
        if now >= slot.due {
            slot.lane = Lane::Ready;
            self.line.ready.push_back(s);
        } else {
            slot.lane = Lane::Timed;
            self.line.timers.push(slot.due, s);
        }
    }

    /// Keys whose timer is due by `now` join the end of the line.
    #[inline]
    pub(super) fn due_timers(&mut self, now: u64) {
        while let Some((due, s)) = self.line.timers.peek() {
            if due > now {
                break;
            }
            self.line.timers.pop();
            self.table.slots[s as usize].lane = Lane::Ready;
            self.line.ready.push_back(s);
        }
    }

    /// Woken for a key that may rest by `now`: the record handed back is
    /// offered again (the writer's top-up, or the reader).
    #[inline]
    pub(super) fn wake_blocked(&mut self, now: u64) {
        if self.line.blocked_on_keys && self.table.rest.peek().is_some_and(|(at, _)| at <= now) {
            self.line.blocked_on_keys = false;
        }
    }

    /// Let waiting records leave at `to.now` that their keys' limits and
    /// the global one allow, in turn, into the outbox. Returns how many
    /// left.
    pub fn release(&mut self, to: &mut Outflow) -> usize {
        let sent = self.release_at(to.now, to.schedule, to.outbox);
        self.left(to.now, sent);
        sent
    }

    /// [`Keyed::release`] at `now` under `global` into `outbox`.
    pub(super) fn release_at(
        &mut self,
        now: u64,
        global: &mut Pace,
        outbox: &mut Vec<Segment>,
    ) -> usize {
        self.unpark(now, global);
        if self.pacing.is_shared() {
            return self.release_shared(now, global, outbox);
        }
        self.due_timers(now);
        self.wake_blocked(now);
        // Asked once: a schedule that limits nothing and holds no key has
        // no say in any turn (as for a record leaving at once).
        let open = global.is_unlimited() && !global.holds_keys();
        let mut sent = 0;
        while let Some(&s) = self.line.ready.front() {
            self.fetch_ahead_in_line();
            let slot = &self.table.slots[s as usize];
            if slot.len == 0 {
                self.line.ready.pop_front();
                self.table.slots[s as usize].lane = Lane::Idle;
                self.table.mark_idle(s);
                continue;
            }
            let held = if open {
                KeyHold::No
            } else {
                self.key_hold(s, now, &*global)
            };
            if held != KeyHold::No {
                // Out of the line until its hold ends, or it is freed.
                self.line.ready.pop_front();
                let slot = &mut self.table.slots[s as usize];
                if held == KeyHold::Freed {
                    slot.lane = Lane::Parked;
                } else {
                    slot.lane = Lane::Timed;
                    self.line.timers.push(slot.due, s);
                }
                continue;
            }
            if !open && global.release(now, 1, &mut std::iter::once(self.head_record(s))) == 0 {
                break;
            }
            self.line.ready.pop_front();
            if !open {
                global.key_left(self.table.slots[s as usize].key.as_bytes(), now);
            }
            self.send_turn(s, now, outbox);
            sent += 1;
        }
        self.queues.outgoing.flush(outbox);
        sent
    }

    /// Start fetching what releasing the keys further on in the line will
    /// read, in stages, each reading what the one before fetched: the
    /// slots (and schedule positions) [`LINE_AHEAD`] places on, their
    /// heads' nodes half as far, and those records' bytes a quarter as
    /// far. In a random order of keys each is a cache miss, and so they
    /// overlap instead of each stalling its turn.
    #[inline]
    fn fetch_ahead_in_line(&self) {
        if let Some(&far) = self.line.ready.get(LINE_AHEAD) {
            crate::sys::prefetch(&self.table.slots[far as usize]);
            self.pacing.prefetch(far);
        }
        let head_of = |place: usize| {
            let &s = self.line.ready.get(place)?;
            let slot = &self.table.slots[s as usize];
            (slot.len > 0).then_some(slot.head as usize)
        };
        if let Some(head) = head_of(LINE_AHEAD / 2) {
            crate::sys::prefetch(&self.queues.nodes[head]);
        }
        if let Some(head) = head_of(LINE_AHEAD / 4) {
            self.queues.spill.prefetch(self.queues.nodes[head].place);
        }
    }

    /// When something changes without an arrival (ns): a key's head comes
    /// due, the global limit lets the next in line go, or (a new key's
    /// record waiting for room) a key rests. `None` when nothing waits.
    pub fn next_event(&self, global: &Pace) -> Option<u64> {
        // A key whose queue was emptied by an eviction or an expiry keeps
        // its timer until it comes due: with nothing waiting, every timer
        // is such a one, and nothing is to happen.
        let waiting = self.queues.len > 0;
        let timer = waiting
            .then(|| self.line.timers.peek().map(|(due, _)| due))
            .flatten();
        let (line, poll) = match &self.pacing {
            Pacing::Shared(shared) => {
                // Never earlier than a poll after the last walk: a poll
                // time gone by would wake the writer over and over.
                let floor = shared.last_walk.saturating_add(shared::POLL_FLOOR_NS);
                let poll = shared.schedule.next_poll().map(|t| t.max(floor));
                if waiting {
                    (shared.next, poll)
                } else {
                    (None, None)
                }
            }
            Pacing::Local(_) => {
                let line = self.line.ready.iter().find_map(|&s| {
                    let slot = &self.table.slots[s as usize];
                    (slot.len > 0).then(|| global.next_due(self.head_record(s)))
                });
                (line, None)
            }
        };
        let rest = self
            .line
            .blocked_on_keys
            .then(|| self.table.rest.peek().map(|(at, _)| at))
            .flatten();
        [timer, line, rest, poll].into_iter().flatten().min()
    }
}
