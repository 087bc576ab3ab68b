//! The command runner's sink: the writer hands it the records the
//! schedule released, and it starts a job for each ([`Pool`]) once a job
//! slot is free (`-j`, `--keep-order`'s window) and the gate lets it
//! (a pause, a spacing learned from a quota). It waits on the slots'
//! condition variable, which a freed slot, a change of the gate and a
//! stop notify.

use std::sync::Arc;

use super::gate::Scope;
use super::pool::Pool;
use crate::bucket::Segment;
use crate::output::{Stop, Written};
use crate::state::Jobs;
use crate::writer::Sink;

/// The sink that runs a job per record.
pub(crate) struct Runner(pub(crate) Arc<Pool>);

impl Runner {
    /// Take a job slot, waiting for one; `false` at a stop, or once the
    /// command could not be run (even with a slot free: a record started
    /// after the stop would settle after the records the writer gives
    /// back, out of input order).
    fn acquire(&self, stop: &dyn Fn() -> bool) -> bool {
        let mut table = self.0.slots.lock();
        loop {
            if stop() || table.fatal.is_some() {
                return false;
            }
            if self.0.has_room_in(&table) {
                break;
            }
            table = self.0.slots.wait(table, None);
        }
        table.busy += 1;
        true
    }

    /// Wait until every start's pause is over, and with `spaced` until its
    /// spacing after the last start has passed too, then count this as a
    /// start; `false` at a stop.
    fn wait_turn(&self, spaced: bool) -> bool {
        let mut table = self.0.slots.lock();
        loop {
            let now = self.0.shared.clock.now();
            let due = if spaced {
                self.0.gate.due(&Scope::All)
            } else {
                self.0.gate.paused_until(&Scope::All)
            };
            if now >= due {
                if spaced {
                    self.0.gate.started(&Scope::All, now);
                }
                return true;
            }
            if self.0.stopping() {
                return false;
            }
            table = self.0.slots.wait(table, Some(due - now));
        }
    }
}

impl Sink for Runner {
    fn write(
        &mut self,
        batch: &[Segment],
        stop: &dyn Fn() -> Stop,
        progress: &dyn Fn(usize),
    ) -> Written {
        // A job is whole or not started: any stop stops further starts.
        let stop = || stop() != Stop::No;
        let stop: &dyn Fn() -> bool = &stop;
        let mut done = Written::default();
        // The gate released the batch's first record at its slot; the
        // others wait for theirs (a spacing learned since, from a quota,
        // holds them too, even when the rate is unlimited).
        let mut first = true;
        for seg in batch {
            let mut seg = seg.clone();
            while !seg.is_empty() {
                let record = seg.split_front(1);
                if !self.acquire(stop) {
                    done.stopped = true;
                    return done;
                }
                if !self.0.hooks.acquire(&self.0, stop) {
                    self.0.slots.release();
                    done.stopped = true;
                    return done;
                }
                if !self.wait_turn(!std::mem::take(&mut first)) {
                    self.0.hooks.release();
                    self.0.slots.release();
                    done.stopped = true;
                    return done;
                }
                done.bytes += record.bytes() as u64;
                done.records += 1;
                self.0.starting(&record);
                self.0.start(record);
                if !self.0.has_room() {
                    // Arrivals wait in the bucket from now, not in the
                    // outbox, so a start never comes late off its slot.
                    self.0.shared.lock().writing.sink_full = true;
                }
                progress(done.bytes as usize);
            }
        }
        done
    }

    fn settles_itself(&self) -> bool {
        true
    }

    fn ready(&self) -> bool {
        self.0.has_room()
    }
}
