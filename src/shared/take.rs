//! `drip take NAME`: one slot (or one of a cost) from a shared limit, for
//! a script that makes one call at a time. It takes the next slot of the
//! same shared schedule the running drips reserve from (the state file or
//! Redis, the same NAME and limits), in one atomic step that spends it
//! only when it is due within `--timeout`, sleeps until it is due, and
//! exits 0; when no slot comes due in time it exits [`EXIT_TIMEOUT`]
//! having spent nothing.

use std::io::Write;
use std::time::{Duration, Instant};

use super::backend;
use super::gcra::{self, canonical, Meter, Weight};
use super::protocol::{Failure, Store, Taken};
use super::target::Target;
use super::voice::{told, Disagreement, Unusable};
use crate::schedule::{Limit, Unit};

/// `drip take`'s status when its slot is not due within `--timeout`: as
/// `timeout(1)`'s.
pub const EXIT_TIMEOUT: i32 = 124;

/// How often a take that found its slot beyond `--timeout` asks again,
/// at most: slots given back (a drip that ended) may bring it within.
const RETRY: Duration = Duration::from_millis(200);

/// What `drip take` was asked.
#[derive(Debug, Clone)]
pub struct TakeRequest {
    /// Where the shared state is, and its NAME.
    pub target: Target,
    /// The limits, as the drips sharing the NAME give them.
    pub limits: Vec<Limit>,
    /// The slot's cost (bytes under a byte rate, cost under a cost rate);
    /// 1 counts for each record rate whatever it is.
    pub cost: u64,
    /// How long to wait at most for the slot to be due.
    pub timeout: Option<Duration>,
}

/// Run `drip take` as `req` says, saying what went wrong on `err`; the
/// exit status: 0 (the slot was due and is spent), [`EXIT_TIMEOUT`], 2
/// (limits that differ from the shared ones), 4 (a state that cannot be
/// reached or used).
pub fn run(req: &TakeRequest, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    let limits = canonical(&req.limits);
    let spec = gcra::spec(&limits);
    let meters: Vec<Meter> = limits.iter().map(Meter::of).collect();
    let name = req.target.name().to_string();
    let mut place = match backend::open(&req.target, &spec, meters, None) {
        Ok(place) => place,
        Err(why) => return fail(err, &format!("take {name}: {why}"), 4),
    };
    let deadline = req.timeout.map(|t| started + t);
    loop {
        let asked = Instant::now();
        let within = deadline.map_or(i64::MAX / 4, |d| {
            i64::try_from(d.saturating_duration_since(asked).as_nanos()).unwrap_or(i64::MAX / 4)
        });
        let taken = match place.take(Weight::from(req.cost), within) {
            Ok(t) => t,
            // A take weighs one cost: limits spending different costs
            // (tagged) are no limits it can follow.
            Err(Failure::Changed(theirs))
                if gcra::limits_of(&theirs).is_some()
                    && gcra::tags_of(&theirs).iter().all(Option::is_none) =>
            {
                let _ = writeln!(
                    err,
                    "drip: {}",
                    told(&name, &spec, &theirs)
                        .replacen("--share ", "take ", 1)
                        .replacen("this drip", "this take", 2)
                );
                let meters = gcra::limits_of(&theirs).unwrap_or_default();
                place.adopt(theirs, meters.iter().map(Meter::of).collect(), None);
                continue;
            }
            Err(Failure::Mismatch(theirs) | Failure::Changed(theirs)) => {
                let d = Disagreement {
                    name,
                    ours: super::key_table::describe_spec(&spec),
                    theirs: super::key_table::describe_spec(&theirs),
                };
                return fail(
                    err,
                    &d.to_string().replacen("this drip's", "this take's", 1),
                    2,
                );
            }
            Err(Failure::Fatal(why)) => {
                let u = Unusable { name, why };
                return fail(err, &u.to_string(), 4);
            }
            Err(Failure::Unreachable(why)) => {
                let line = format!("--share {name}: the shared state cannot be reached: {why}");
                return fail(err, &line, 4);
            }
        };
        let answered = Instant::now();
        if taken.taken {
            std::thread::sleep(until_due(place.as_ref(), &taken, answered));
            return 0;
        }
        let left = deadline.map_or(RETRY, |d| d.saturating_duration_since(answered));
        if left.is_zero() {
            return EXIT_TIMEOUT;
        }
        std::thread::sleep(left.min(RETRY));
    }
}

/// How long from `answered` (when the reply came) until `taken`'s slot is
/// due: exactly, on the host's own clock (the file); from Redis, its
/// offset after the reply's arrival, which is never before the server's
/// time of the call, so the wait ends at the slot or after it, never
/// before.
fn until_due(place: &dyn Store, taken: &Taken, answered: Instant) -> Duration {
    let ns = match place.host_clock() {
        Some(host_now) => taken.now + taken.due - host_now,
        None => taken.due - i64::try_from(answered.elapsed().as_nanos()).unwrap_or(0),
    };
    Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

/// Say `line` on `err` as drip's one-line error; `status`
/// (what a drip says of `--share NAME` said of `take NAME`).
fn fail(err: &mut dyn Write, line: &str, status: i32) -> i32 {
    let line = match line.strip_prefix("--share ") {
        Some(rest) => format!("take {rest}"),
        None => line.to_string(),
    };
    let _ = writeln!(err, "drip: {line}");
    status
}

/// Whether some of `limits` is weighed (bytes or cost), so a `--cost`
/// means something.
pub fn weighs(limits: &[Limit]) -> bool {
    limits.iter().any(|l| l.unit != Unit::Records)
}
