//! The outflow of one call to a waiting room: the time, whether records
//! may leave, the schedule whose slots they take and the outbox they go
//! to. Below the waiting rooms (`waiting`, `keyed`), which both release
//! into it.

use crate::bucket::Segment;
use crate::pace::Pace;

/// What records leave by, at one call: the time, whether they may leave,
/// the schedule whose slots they take, and the outbox they go to.
pub struct Outflow<'a> {
    /// The time of the call (ns).
    pub now: u64,
    /// Whether records may leave now (the writer can take them and nothing
    /// is paused); when not, arrivals wait and nothing is released.
    pub may_leave: bool,
    /// The global limits: each record that leaves takes its slot.
    pub schedule: &'a mut Pace,
    /// Where the records that leave go, in order (the writer's).
    pub outbox: &'a mut Vec<Segment>,
}

impl<'a> Outflow<'a> {
    /// Records may leave at `now` under `schedule` into `outbox`.
    pub fn at(now: u64, schedule: &'a mut Pace, outbox: &'a mut Vec<Segment>) -> Outflow<'a> {
        Outflow {
            now,
            may_leave: true,
            schedule,
            outbox,
        }
    }
}
