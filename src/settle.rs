//! Settlement (`--settle`): a record's cost limits are charged its
//! estimate as it leaves; once its job reports what it really spent, the
//! difference is settled. This is the bookkeeping of the records in
//! flight (charged, not settled yet) that makes a give-back safe.
//!
//! # The bound
//!
//! A cost limit is a GCRA: departures conform while the theoretical
//! arrival time (TAT) stays within the burst of now, which bounds what
//! leaves in any window to `burst + rate × W` (up to the slack,
//! [`crate::pacer`]). Charged estimates, the TAT is never below the TAT
//! the same departures would make charged what they really spent (call it
//! the true TAT), as long as every estimate is at least the real spend:
//! the TAT is monotone in each charge. A give-back must keep that so, or
//! the bound holds only for estimates and not for what was spent.
//!
//! Giving back the whole overestimate is not safe: the schedule may have
//! rested (gone idle) since the record left, and the records after it were
//! then charged from a restart that the overestimate did not delay; the
//! true TAT is then the larger of (the TAT less the overestimate) and (the
//! TAT the records that left *after* it make by themselves, from its
//! departure). So each record in flight keeps the latter, its *floor*
//! (a [`Position`] advanced by every later departure), and a give-back
//! never takes the TAT below it ([`Pacer::refund`]). An underestimate is
//! charged at once ([`Pacer::commit`]), and raises the floors of the
//! records in flight.
//!
//! So with settlement, what the records that left in any window of length
//! W really spent is at most `burst + rate × W`, plus what records still
//! in flight spent above their estimates (known only once they report
//! it). With estimates that are upper bounds (`max_tokens` for a
//! completion) the bound holds exactly, and an overestimate comes back as
//! soon as it is reported, so the budget is spent to what was really used.
//!
//! A record is found by its content (a hash): identical records have the
//! same estimate, so any of them will do; the give-back takes the floor of
//! the oldest (the highest) and the entry of the newest, which keeps every
//! floor left at or above the one it stands for. At most [`MOST_IN_FLIGHT`]
//! records are kept; a record forgotten (or never found) is not given
//! back, but an underestimate is still charged.
//!
//! Pure: no threads, no clock, no I/O.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use crate::pacer::{Pacer, Position};

/// The most records in flight kept: the oldest is forgotten beyond.
pub const MOST_IN_FLIGHT: usize = 4096;

/// A record that left: its content's hash and what each cost limit charged.
#[derive(Debug, Clone)]
struct Charged {
    hash: u64,
    charged: Vec<u64>,
    floors: Vec<Position>,
}

/// The records in flight, oldest first, for the cost limits in order.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    entries: VecDeque<Charged>,
}

/// A record's entry, taken to settle it: what each cost limit charged, and
/// the floor of each give-back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settling {
    /// What each cost limit charged.
    pub charged: Vec<u64>,
    /// How low each cost limit's TAT may go.
    pub floors: Vec<Position>,
}

/// What the cost limits of one name were charged, in their units (a
/// token count, say): the estimates at departure and what settlement gave
/// back or charged on top. Several cost limits of one name spend the same
/// costs, so a name is counted once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CostView {
    /// The cost limit's name as given (`in`, `in+out`); `""` for the
    /// unnamed cost.
    pub name: String,
    /// Charged as records left: their estimates.
    pub estimated: u64,
    /// Given back by settlement: what records found in flight spent below
    /// their estimates.
    pub settled_back: u64,
    /// Charged by settlement: what records spent above their estimates.
    pub settled_extra: u64,
    /// With `--settle`: the estimates charged and not settled yet (of the
    /// records kept in flight); `None` without.
    pub in_flight: Option<u64>,
}

impl CostView {
    /// What was spent: the estimates, less what settlement gave back, plus
    /// what it charged on top.
    pub fn spent(&self) -> u64 {
        self.estimated
            .saturating_sub(self.settled_back)
            .saturating_add(self.settled_extra)
    }
}

/// The hash that finds a record (without its delimiter).
pub fn record_hash(body: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}

impl InFlight {
    /// Records left at `now` in order (`batch`: each record's hash and
    /// what each of `pacers`, the cost limits, charged it): the floors of
    /// those in flight rise by the batch, and each new one's floor is what
    /// the records after it in the batch make from `now`.
    pub fn left(&mut self, now: u64, pacers: &[&Pacer], batch: Vec<(u64, Vec<u64>)>) {
        let n = pacers.len();
        let mut total = vec![0u64; n];
        for (_, charged) in &batch {
            for (t, c) in total.iter_mut().zip(charged) {
                *t = t.saturating_add(*c);
            }
        }
        self.raise(now, pacers, &total);
        let mut after = vec![0u64; n];
        let mut new: Vec<Charged> = Vec::with_capacity(batch.len());
        for (hash, charged) in batch.into_iter().rev() {
            let floors = pacers
                .iter()
                .zip(&after)
                .map(|(p, &units)| p.advanced(start(now), now, units))
                .collect();
            for (a, c) in after.iter_mut().zip(&charged) {
                *a = a.saturating_add(*c);
            }
            new.push(Charged {
                hash,
                charged,
                floors,
            });
        }
        self.entries.extend(new.into_iter().rev());
        while self.entries.len() > MOST_IN_FLIGHT {
            self.entries.pop_front();
        }
    }

    /// `units` more charged on each cost limit at `now` (an underestimate
    /// settled): every floor rises by it.
    pub fn raise(&mut self, now: u64, pacers: &[&Pacer], units: &[u64]) {
        if units.iter().all(|&u| u == 0) {
            return;
        }
        for e in &mut self.entries {
            for ((f, p), &u) in e.floors.iter_mut().zip(pacers).zip(units) {
                if u > 0 {
                    *f = p.advanced(*f, now, u);
                }
            }
        }
    }

    /// What the `limit`-th cost limit charged the records in flight, in
    /// its units (the estimates not settled yet).
    pub fn charged(&self, limit: usize) -> u64 {
        self.entries
            .iter()
            .filter_map(|e| e.charged.get(limit))
            .fold(0u64, |sum, &c| sum.saturating_add(c))
    }

    /// Take the entry of a record hashed `hash`: the floors of the oldest
    /// such record, the entry of the newest (removed). `None` when none is
    /// in flight.
    pub fn take(&mut self, hash: u64) -> Option<Settling> {
        let (floors, entry) = take_newest(
            &mut self.entries,
            |e| e.hash == hash,
            |oldest| oldest.floors.clone(),
        )?;
        Some(Settling {
            charged: entry.charged,
            floors,
        })
    }
}

/// Of `entries` (records in flight, oldest first), those of one record
/// (`is`: identical records hash alike): what `oldest` reads of the oldest
/// (its floor, the higher), and the newest, removed (what its slot
/// charged). `None` when none is in flight.
pub fn take_newest<T, U>(
    entries: &mut VecDeque<T>,
    is: impl Fn(&T) -> bool,
    oldest: impl FnOnce(&T) -> U,
) -> Option<(U, T)> {
    let first = entries.iter().position(&is)?;
    let last = entries.iter().rposition(&is)?;
    let read = oldest(&entries[first]);
    Some((read, entries.remove(last)?))
}

/// A schedule's position before any record after one leaving at `now`:
/// its TAT is `now`.
fn start(now: u64) -> Position {
    Position::at(now)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::cost::{parse_one_cost, Cost};
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Schedule, Unit};

    const MS: u64 = 1_000_000;
    /// The cost limit of the model: 100 a second, a burst of 50.
    const RATE: f64 = 100.0;
    const BURST: u64 = 50;

    /// The cost limit, costs the number `e` in each record, settling.
    fn limits(settling: bool) -> Limits {
        let limit = Limit {
            rate: parse_rate("100/s").unwrap(),
            burst: BURST,
            unit: Unit::Cost,
        };
        let cost = Cost::with_budgets(
            vec![(None, parse_one_cost("e").unwrap())],
            &[None],
            None,
            b'\n',
        )
        .unwrap();
        let limits = Limits::new(&[limit]).with_cost(cost);
        if settling {
            limits.with_settling()
        } else {
            limits
        }
    }

    /// A record: its number, estimate, real spend and job time (ms).
    type Job = (u64, u64, u64);

    /// Run `jobs` (all waiting at 0) on virtual time, from event to event
    /// (a job's end, the next record's due time): each leaves when the schedule lets it, its job ends after its
    /// time and settles (when `settling`). Each record's departure (ns),
    /// and when it was settled.
    fn run(jobs: &[Job], settling: bool) -> Vec<(u64, u64)> {
        let mut s = limits(settling);
        let records: Vec<Vec<u8>> = jobs
            .iter()
            .enumerate()
            .map(|(i, (e, _, _))| format!("{{\"i\":{i},\"e\":{e}}}\n").into_bytes())
            .collect();
        let mut times = vec![(0u64, 0u64); jobs.len()];
        let mut next = 0;
        let mut running: Vec<(u64, usize)> = Vec::new();
        let mut t = 0u64;
        while next < jobs.len() || !running.is_empty() {
            running.sort_unstable();
            while running.first().is_some_and(|&(end, _)| end <= t) {
                let (_, i) = running.remove(0);
                if settling {
                    s.settle(t, &records[i], &[Some(jobs[i].1)]);
                }
                times[i].1 = t;
            }
            let mut line = records[next..].iter().map(Vec::as_slice);
            let n = s.release(t, jobs.len() - next, &mut line);
            for i in next..next + n {
                times[i].0 = t;
                running.push((t + jobs[i].2 * MS, i));
            }
            next += n;
            // On to the next job's end or the next record's due time.
            let end = running.iter().map(|&(end, _)| end).min();
            let due = records.get(next).map(|r| s.next_due(r));
            t = end.into_iter().chain(due).min().unwrap_or(t).max(t + 1_000);
            assert!(t < 3_600_000 * MS, "every record leaves");
        }
        times
    }

    /// The most any window may hold: the burst, the rate over the window
    /// and over the slack (2 ms at this rate: `pacer::slack_for`).
    fn allowed(window_ns: u64) -> f64 {
        BURST as f64 + RATE * (window_ns + 5 * MS) as f64 / 1e9 + 1e-9
    }

    fn jobs(most_spent: u64) -> impl Strategy<Value = Vec<Job>> {
        prop::collection::vec(
            (1u64..=BURST, 0u64..=most_spent, 1u64..300)
                .prop_map(|(e, pct, d)| (e, (e * pct).div_ceil(100).min(BURST), d)),
            1..40,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Estimates at least what was spent: what the records that left
        /// in any window spent is within the bound, however much was
        /// given back.
        #[test]
        fn refunds_never_let_what_was_spent_pass_the_bound(jobs in jobs(100)) {
            let times = run(&jobs, true);
            for i in 0..jobs.len() {
                for j in i..jobs.len() {
                    let (from, to) = (times[i].0, times[j].0);
                    let spent: u64 = (0..jobs.len())
                        .filter(|&k| times[k].0 >= from && times[k].0 <= to)
                        .map(|k| jobs[k].1)
                        .sum();
                    prop_assert!(spent as f64 <= allowed(to - from),
                        "{spent} spent from {from} to {to} ns: {times:?}");
                }
            }
        }

        /// Estimates below what was spent: every record still leaves, and
        /// a window holds at most the bound plus what the records in
        /// flight during it spent above their estimates.
        #[test]
        fn debits_never_lose_a_record(jobs in jobs(300)) {
            let times = run(&jobs, true);
            prop_assert_eq!(times.len(), jobs.len());
            for i in 0..jobs.len() {
                for j in i..jobs.len() {
                    let (from, to) = (times[i].0, times[j].0);
                    let spent: u64 = (0..jobs.len())
                        .filter(|&k| times[k].0 >= from && times[k].0 <= to)
                        .map(|k| jobs[k].1)
                        .sum();
                    let unsettled: u64 = (0..jobs.len())
                        .filter(|&k| times[k].0 <= to && times[k].1 > from)
                        .map(|k| jobs[k].1.saturating_sub(jobs[k].0))
                        .sum();
                    prop_assert!(spent as f64 <= allowed(to - from) + unsettled as f64,
                        "{spent} spent from {from} to {to} ns: {times:?}");
                }
            }
        }
    }

    #[test]
    fn an_overestimate_given_back_lets_the_next_records_go_sooner() {
        // Estimates 50 (the burst), each spending 5, jobs of 10 ms: without
        // settlement one leaves every 500 ms; given back, ten times as many.
        let jobs: Vec<Job> = (0..20).map(|_| (50, 5, 10)).collect();
        let estimated = run(&jobs, false);
        let settled = run(&jobs, true);
        let last = |t: &[(u64, u64)]| t.iter().map(|x| x.0).max().unwrap();
        assert_eq!(last(&estimated), 19 * 500 * MS);
        assert!(last(&settled) <= 19 * 60 * MS, "{settled:?}");
    }

    #[test]
    fn an_underestimate_holds_the_next_records_back() {
        // Estimates 1, each spending 50: 50 leave at once (the burst);
        // their 49 × 50 more, charged as they settle at 1 ms, hold the
        // other 10 back for 24.5 s.
        let jobs: Vec<Job> = (0..60).map(|_| (1, 50, 1)).collect();
        let settled = run(&jobs, true);
        assert_eq!(settled[49].0, 0);
        assert!(settled[50].0 >= 24_500 * MS, "{settled:?}");
        let estimated = run(&jobs, false);
        assert!(estimated[59].0 <= 100 * MS, "{estimated:?}");
    }

    #[test]
    fn a_record_left_before_a_rest_gives_back_no_more_than_its_floor() {
        // 50 charged at 0 (the whole burst), 10 spent; idle until 1 s, when
        // 50 more leave; the give-back at 1 s must not let more go at once.
        let mut s = limits(true);
        let a = b"{\"i\":0,\"e\":50}\n";
        let b = b"{\"i\":1,\"e\":50}\n";
        assert_eq!(s.release(0, 1, &mut std::iter::once(&a[..])), 1);
        assert_eq!(s.release(1000 * MS, 1, &mut std::iter::once(&b[..])), 1);
        s.settle(1000 * MS, a, &[Some(10)]);
        let c = b"{\"i\":2,\"e\":1}\n";
        assert_eq!(s.release(1000 * MS, 1, &mut std::iter::once(&c[..])), 0);
    }
}
