//! The schedule: the base of the pace (`crate::pace`), whose slots
//! records take. [`Schedule`] is what every base offers; [`Limits`] is the
//! local one: one GCRA ([`Pacer`]) per `--rate`, `--byte-rate` and
//! `--cost-rate`. A record leaves only when every limit allows it, and then
//! takes its slot in all of them, so each limit's guarantee holds at once:
//! no window of length W holds more than `burst_i + rate_i × W` departures
//! (records, bytes for a byte rate, cost for a cost rate), up to the slack
//! ([`Pacer`]). The `--budget`s, a ramp and the gate are the pace's, not
//! the base's; slots leased from a shared state are the other base
//! (`shared::lease`).
//!
//! Pure: no threads, no clock, no I/O; times are ns on the caller's clock.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::cost::Cost;
use crate::pacer::{slack_for, Pacer};
use crate::rate::Rate;
use crate::settle::{record_hash, CostView, InFlight};

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Records: each record costs 1.
    Records,
    /// Bytes: each record costs its size, delimiter included.
    Bytes,
    /// Cost: each record costs the number read from it (`--cost`,
    /// [`Cost`]).
    Cost,
}

/// One limit: `rate` units per period, `burst` units back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// How many units per period (never [`Rate::Unlimited`] here).
    pub rate: Rate,
    /// Units that may leave back to back after an idle spell (≥ 1).
    pub burst: u64,
    /// Records, bytes or cost.
    pub unit: Unit,
}

impl Limit {
    /// A record limit: `rate`, and `burst` records back to back (1 when
    /// not given).
    pub fn records(rate: Rate, burst: Option<u64>) -> Limit {
        let (burst, unit) = (burst.unwrap_or(1), Unit::Records);
        Limit { rate, burst, unit }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.unit {
            Unit::Records => write!(f, "{} records, burst {}", self.rate, self.burst),
            Unit::Bytes => write!(f, "{} bytes, burst {} bytes", self.rate, self.burst),
            Unit::Cost => write!(f, "{} cost, burst {}", self.rate, self.burst),
        }
    }
}

/// The tightest of `limits` that count records, in records per second
/// (infinite when none does): for the display and the figures only.
pub fn records_per_second(limits: &[Limit]) -> f64 {
    limits
        .iter()
        .filter(|l| l.unit == Unit::Records)
        .map(|l| l.rate.per_second())
        .fold(f64::INFINITY, f64::min)
}

/// The global limits in force (`--rate`, `--byte-rate`, as `drip ctl`
/// changed them), shared by the steering (which changes them) and
/// `--metrics` (which reports the rate).
pub(crate) type InForce = Arc<Mutex<Vec<Limit>>>;

/// The limit per key in force (`--key-rate`, as `drip ctl` changed it),
/// shared by the steering and, under `--share`, the keys' keeper.
pub(crate) type KeyInForce = Arc<Mutex<Option<Limit>>>;

/// The limits in force as `drip ctl` shows and changes them: the global
/// ones and the limit per key.
#[derive(Debug, Clone)]
pub(crate) struct LimitsInForce {
    /// The global limits.
    pub(crate) limits: InForce,
    /// The limit per key (of the keys no row of a rate table matches).
    pub(crate) key: KeyInForce,
}

/// What every base of the pace offers (`crate::pace`): the local limits
/// ([`Limits`]) or slots leased from a shared state (`shared::lease`).
///
/// Records are offered in queue order; a schedule never lets a later record
/// leave before an earlier one. What only one kind of base does is a port
/// of its own (`pace::Leased`, the inherent methods of [`Limits`]).
pub trait Schedule: fmt::Debug + Send {
    /// Of `available` records waiting in order, which `records` yields (each
    /// with its delimiter, when it has one), how many may leave at `now`
    /// (ns). They take their slots: call only for records that do leave.
    /// `now` must not go backwards between calls.
    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize;

    /// The earliest time (ns) `record` may leave; 0 when it may leave at any
    /// time.
    fn next_due(&self, record: &[u8]) -> u64;

    /// The earliest time (ns) the `n`-th record from now (0: the next),
    /// `record`, may leave, as far as known; `None` when not known yet (a
    /// shared base whose slots are not reserved yet).
    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64>;

    /// How late (ns) a wake-up may be without restarting the schedule: the
    /// least slack of its limits.
    fn slack_ns(&self) -> u64;

    /// The highest rate in records per second the schedule can reach
    /// (infinite when a limit counts bytes or nothing is limited): the
    /// writer coalesces wake-ups above 20,000/s.
    fn records_per_second(&self) -> f64;

    /// Whether a record's content matters (some limit counts bytes or
    /// cost). When it does not, callers may pass an empty `records`
    /// iterator to [`Schedule::release`] and any record to
    /// [`Schedule::next_due`].
    fn weighs_bytes(&self) -> bool;
}

/// The local schedule: several GCRA limits, all of which must allow a
/// record before it leaves.
#[derive(Debug, Clone)]
pub struct Limits {
    limits: Vec<(Unit, Pacer)>,
    /// How a record's cost is read, for cost limits ([`Cost::none`]: it
    /// is not, and a cost limit counts every record as `UNREADABLE_COST`).
    cost: Cost,
    weighs_bytes: bool,
    slack_ns: u64,
    /// When records last left (ns), for a change of limits.
    last_departure: Option<u64>,
    /// With `--settle`: the records charged and not settled yet.
    in_flight: Option<InFlight>,
    /// What each named cost was charged and settled, in the order the
    /// names first come among the cost limits (in flight left `None`).
    costs: Vec<CostView>,
    /// For each cost limit in order, the place in `costs` of its name's
    /// figures; `None` for a later cost limit of a name already counted.
    tallied: Vec<Option<usize>>,
}

impl Limits {
    /// A schedule enforcing every limit in `limits` (none: unlimited).
    ///
    /// # Panics
    /// If a limit's rate is [`Rate::Unlimited`] or its burst is 0 (the
    /// command line drops unlimited rates and rejects a zero burst).
    pub fn new(limits: &[Limit]) -> Limits {
        let pacers = limits
            .iter()
            .map(|l| {
                assert!(l.rate != Rate::Unlimited, "an unlimited rate is no limit");
                (l.unit, Pacer::new(l.rate, l.burst, slack_for(l.rate)))
            })
            .collect::<Vec<_>>();
        let slack_ns = limits
            .iter()
            .map(|l| slack_for(l.rate))
            .min()
            .unwrap_or_else(|| slack_for(Rate::Unlimited));
        let mut new = Limits {
            weighs_bytes: limits.iter().any(|l| l.unit != Unit::Records),
            limits: pacers,
            cost: Cost::none(),
            slack_ns,
            last_departure: None,
            in_flight: None,
            costs: Vec::new(),
            tallied: Vec::new(),
        };
        new.name_costs();
        new
    }

    /// The same limits, a record's cost (for [`Unit::Cost`] limits) read by
    /// `cost`. Without it a cost limit counts every record as
    /// `UNREADABLE_COST` (`cost.rs`).
    pub fn with_cost(mut self, cost: Cost) -> Limits {
        self.cost = cost;
        self.name_costs();
        self
    }

    /// Give each cost limit's name (`""`: the unnamed cost) its figures in
    /// `costs`, the first cost limit of each name only (`tallied`). The
    /// figures of a name no cost limit has now are kept once counted.
    fn name_costs(&mut self) {
        let count = self.limits.iter().filter(|(u, _)| *u == Unit::Cost).count();
        let names: Vec<String> = (0..count)
            .map(|i| {
                let name = self.cost.budget_names().nth(i);
                name.flatten().unwrap_or("").to_string()
            })
            .collect();
        let mut old = std::mem::take(&mut self.costs);
        self.tallied = Vec::with_capacity(count);
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                self.tallied.push(None);
                continue;
            }
            let figures = match old.iter().position(|c| &c.name == name) {
                Some(at) => old.remove(at),
                None => CostView {
                    name: name.clone(),
                    ..CostView::default()
                },
            };
            self.tallied.push(Some(self.costs.len()));
            self.costs.push(figures);
        }
        let counted = |c: &CostView| c.estimated > 0 || c.settled_extra > 0;
        self.costs.extend(old.into_iter().filter(counted));
    }

    /// Add `amounts` (one for each cost limit, in order) to the figure
    /// `field` picks of each name's figures, once a name.
    fn tally(&mut self, amounts: &[u64], field: fn(&mut CostView) -> &mut u64) {
        for (at, &amount) in self.tallied.iter().zip(amounts) {
            if let Some(at) = *at {
                let figure = field(&mut self.costs[at]);
                *figure = figure.saturating_add(amount);
            }
        }
    }

    /// The same limits, keeping the records charged by cost limits in
    /// flight until they are settled ([`Limits::settle`]).
    pub fn with_settling(mut self) -> Limits {
        self.in_flight = Some(InFlight::default());
        self
    }

    /// The cost limits' pacers, in order.
    fn cost_pacers(&self) -> Vec<&Pacer> {
        self.limits
            .iter()
            .filter(|(u, _)| *u == Unit::Cost)
            .map(|(_, p)| p)
            .collect()
    }

    /// Note the records of a release at `now` in flight: each one's hash
    /// and what each cost limit charged it (`costs`, one for each limit).
    fn note_in_flight(&mut self, now: u64, batch: Vec<(u64, Vec<u64>)>) {
        let Some(mut flight) = self.in_flight.take() else {
            return;
        };
        let is_cost: Vec<bool> = self.limits.iter().map(|(u, _)| *u == Unit::Cost).collect();
        let batch = batch
            .into_iter()
            .map(|(hash, costs)| {
                let charged = costs
                    .into_iter()
                    .zip(&is_cost)
                    .filter(|(_, &c)| c)
                    .map(|(w, _)| w)
                    .collect();
                (hash, charged)
            })
            .collect();
        flight.left(now, &self.cost_pacers(), batch);
        self.in_flight = Some(flight);
    }

    /// What `record` spends of each limit, in `out` (one for each limit):
    /// 1 for a record limit, its size for a byte limit, and for the `i`-th
    /// cost limit the costs its budget sums (`cost.rs`; the costs read
    /// once).
    fn weigh(&self, record: &[u8], out: &mut [u64]) {
        let estimates = if self.limits.iter().any(|(u, _)| *u == Unit::Cost) {
            self.cost.estimates(record)
        } else {
            Vec::new()
        };
        let mut budget = 0;
        for ((unit, _), w) in self.limits.iter().zip(out) {
            *w = match unit {
                Unit::Records => 1,
                Unit::Bytes => record.len() as u64,
                Unit::Cost => {
                    budget += 1;
                    self.cost.spend(budget - 1, &estimates)
                }
            };
        }
    }

    /// Release, in order, the records `records` yields (at most
    /// `available`) while every limit allows: each limit's budget at `now`
    /// is taken once, then spent record by record.
    fn release_weighed(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        let mut budgets: Vec<i128> = self.limits.iter().map(|(_, p)| p.budget(now)).collect();
        let mut spent = vec![0u64; self.limits.len()];
        let mut costs = vec![0u64; self.limits.len()];
        let mut n = 0;
        let mut batch = Vec::new();
        for record in records.take(available) {
            self.weigh(record, &mut costs);
            let fits = self
                .limits
                .iter()
                .zip(&budgets)
                .zip(&costs)
                .all(|(((_, p), &budget), &cost)| p.fits(budget, cost));
            if !fits {
                break;
            }
            for ((budget, spent), &cost) in budgets.iter_mut().zip(&mut spent).zip(&costs) {
                *budget = budget.saturating_sub(i128::from(cost));
                *spent += cost;
            }
            if self.in_flight.is_some() {
                let body = self.cost.body(record);
                batch.push((record_hash(body), costs.clone()));
            }
            n += 1;
        }
        let charged: Vec<u64> = self
            .limits
            .iter()
            .zip(&spent)
            .filter(|((u, _), _)| *u == Unit::Cost)
            .map(|(_, &units)| units)
            .collect();
        self.tally(&charged, |c| &mut c.estimated);
        for ((_, p), units) in self.limits.iter_mut().zip(spent) {
            p.commit(now, units);
        }
        if !batch.is_empty() {
            self.note_in_flight(now, batch);
        }
        n
    }

    /// Note a departure of `n` records at `now`.
    fn departed(&mut self, now: u64, n: usize) -> usize {
        if n > 0 {
            self.last_departure = Some(now);
        }
        n
    }
}

impl Limits {
    /// Whether nothing is limited: every record may always leave.
    pub fn is_unlimited(&self) -> bool {
        self.limits.is_empty()
    }

    /// Records left at `at` (ns) without asking (the keyed queues, when
    /// nothing limits them): a change of limits counts from the latest
    /// departure, these included.
    pub fn left_unasked(&mut self, at: u64) {
        self.last_departure = Some(self.last_departure.map_or(at, |t| t.max(at)));
    }

    /// Enforce `limits` instead from `now` (ns) on (`drip ctl … rate`): the
    /// new schedule counts from the last departure, with no credit saved
    /// ([`Pacer::spent_at`]), so lowering the rate carries none of the old
    /// one's unused credit over and raising it sends no catch-up burst.
    /// The limits must be checked as [`Limits::new`] wants them.
    pub fn replace_limits(&mut self, now: u64, limits: &[Limit]) {
        let mut new = Limits::new(limits);
        // Records that left at `now` or before count from their departure;
        // with none yet, the new limits start fresh.
        if let Some(last) = self.last_departure.filter(|&t| t <= now) {
            for (_, p) in &mut new.limits {
                p.spent_at(last);
            }
        }
        new.last_departure = self.last_departure;
        new.cost = std::mem::take(&mut self.cost);
        new.costs = std::mem::take(&mut self.costs);
        new.name_costs();
        // The floors stand on the old limits: what is in flight is not
        // given back (an underestimate is still charged).
        new.in_flight = self.in_flight.as_ref().map(|_| InFlight::default());
        *self = new;
    }

    /// A record that left (`record`, its delimiter included or not)
    /// reported at `now` what it really spent of each cost (`spent`, in
    /// the order of [`Cost`]'s costs; `None`: its estimate stands): the
    /// cost limits are given back an overestimate and charged an
    /// underestimate (`settle.rs`). Only limits that keep records in
    /// flight ([`Limits::with_settling`]) settle.
    pub fn settle(&mut self, now: u64, record: &[u8], spent: &[Option<u64>]) {
        let cost = &self.cost;
        let Some(flight) = self.in_flight.as_mut().filter(|_| cost.weighs()) else {
            return;
        };
        let taken = flight.take(record_hash(cost.body(record)));
        let estimates = cost.estimates(record);
        let actual: Vec<Option<u64>> = estimates
            .iter()
            .enumerate()
            .map(|(i, e)| spent.get(i).copied().flatten().or(*e))
            .collect();
        let (mut debits, mut credits) = (Vec::new(), Vec::new());
        let mut budget = 0;
        for (unit, pacer) in &mut self.limits {
            if *unit != Unit::Cost {
                continue;
            }
            let charged = match &taken {
                Some(t) => t.charged[budget],
                None => cost.spend(budget, &estimates),
            };
            let real = cost.spend(budget, &actual);
            if real > charged {
                pacer.commit(now, real - charged);
            } else if let Some(t) = taken.as_ref().filter(|_| real < charged) {
                pacer.refund(now, charged - real, t.floors[budget]);
            }
            debits.push(real.saturating_sub(charged));
            // Given back only for a record found in flight.
            credits.push(if taken.is_some() {
                charged.saturating_sub(real)
            } else {
                0
            });
            budget += 1;
        }
        self.tally(&debits, |c| &mut c.settled_extra);
        self.tally(&credits, |c| &mut c.settled_back);
        let mut flight = self.in_flight.take().expect("checked above");
        flight.raise(now, &self.cost_pacers(), &debits);
        self.in_flight = Some(flight);
    }

    /// At the earliest, when `record` may leave (ns, at least `now`) as the
    /// `n`-th record from now (0: the next): each record limit must let
    /// `n` records go before it, and every limit let it go. A floor, not a
    /// forecast: the records before it may cost more.
    pub fn earliest(&self, now: u64, record: &[u8], n: u64) -> u64 {
        let records = self
            .limits
            .iter()
            .filter(|(unit, _)| *unit == Unit::Records)
            .map(|(_, p)| p.nth_due(now, n))
            .max()
            .unwrap_or(now);
        records.max(self.next_due(record)).max(now)
    }

    /// What each named cost's limits were charged at departure, what
    /// settlement gave back or charged on top, and what is in flight
    /// ([`CostView`]), in the cost's units.
    pub fn costs(&self) -> Vec<CostView> {
        let mut costs = self.costs.clone();
        if let Some(flight) = &self.in_flight {
            for (limit, at) in self.tallied.iter().enumerate() {
                if let Some(at) = *at {
                    costs[at].in_flight = Some(flight.charged(limit));
                }
            }
        }
        costs
    }
}

impl Schedule for Limits {
    fn weighs_bytes(&self) -> bool {
        self.weighs_bytes
    }

    fn release(
        &mut self,
        now: u64,
        available: usize,
        records: &mut dyn Iterator<Item = &[u8]>,
    ) -> usize {
        if !self.weighs_bytes {
            // Every record costs 1 everywhere: the tightest limit decides.
            let n = self
                .limits
                .iter()
                .map(|(_, p)| p.allowed(now, available as u64))
                .min()
                .unwrap_or(available as u64);
            for (_, p) in &mut self.limits {
                p.commit(now, n);
            }
            return self.departed(now, n as usize);
        }
        let n = self.release_weighed(now, available, records);
        self.departed(now, n)
    }

    fn next_due(&self, record: &[u8]) -> u64 {
        let (mut few, mut many) = ([0u64; 8], Vec::new());
        let costs: &mut [u64] = match self.limits.len() {
            n @ 0..=8 => &mut few[..n],
            n => {
                many.resize(n, 0);
                &mut many
            }
        };
        self.weigh(record, costs);
        self.limits
            .iter()
            .zip(costs.iter().copied())
            .map(|((_, p), cost)| p.next_due_for(cost))
            .max()
            .unwrap_or(0)
    }

    /// [`Schedule::next_due`] and one emission interval of the tightest
    /// record limit for each record before it (a burst may let them go
    /// sooner).
    fn nth_due(&self, record: &[u8], n: usize) -> Option<u64> {
        let per_second = self.records_per_second();
        let gap = if per_second.is_finite() && per_second > 0.0 {
            (1e9 / per_second) as u64
        } else {
            0
        };
        Some(
            self.next_due(record)
                .saturating_add(gap.saturating_mul(n as u64)),
        )
    }

    fn slack_ns(&self) -> u64 {
        self.slack_ns
    }

    fn records_per_second(&self) -> f64 {
        if self.weighs_bytes {
            return f64::INFINITY;
        }
        self.limits
            .iter()
            .map(|(_, p)| p.per_second())
            .fold(f64::INFINITY, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_rate;

    const MS: u64 = 1_000_000;

    fn limit(rate: &str, burst: u64, unit: Unit) -> Limit {
        Limit {
            rate: parse_rate(rate).unwrap(),
            burst,
            unit,
        }
    }

    /// Departure times of `sizes`, always waiting, woken exactly when due.
    fn departures(s: &mut Limits, sizes: &[usize]) -> Vec<u64> {
        let records: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'x'; n]).collect();
        departures_of(s, &records)
    }

    /// Departures of `records`, as [`departures`] does.
    fn departures_of(s: &mut Limits, records: &[Vec<u8>]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut now = 0;
        while out.len() < records.len() {
            let rest = &records[out.len()..];
            let n = s.release(now, rest.len(), &mut rest.iter().map(Vec::as_slice));
            out.extend(std::iter::repeat_n(now, n));
            if out.len() < records.len() {
                let due = s.next_due(&records[out.len()]);
                assert!(n > 0 || due > now, "nothing released although due");
                now = now.max(due);
            }
        }
        out
    }

    /// Departure times of `n` one-unit records always waiting, woken
    /// exactly when due, the limits replaced by `then` at `change` (ns).
    fn departures_changed(s: &mut Limits, n: usize, change: u64, then: &[Limit]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut now = 0;
        let mut changed = false;
        while out.len() < n {
            if !changed && now >= change {
                s.replace_limits(change, then);
                changed = true;
            }
            let k = s.release(now, 1, &mut std::iter::empty());
            out.extend(std::iter::repeat_n(now, k));
            let due = s.next_due(b"x\n").max(now + u64::from(k == 0));
            now = if changed { due } else { due.min(change) };
        }
        out
    }

    #[test]
    fn halving_the_rate_spaces_the_next_record_from_the_last_departure() {
        // 10/s: 0, 100, 200 ms; at 250 ms 5/s: 400, 600 ms (not 250).
        let mut s = Limits::new(&[limit("10/s", 1, Unit::Records)]);
        let t = departures_changed(&mut s, 5, 250 * MS, &[limit("5/s", 1, Unit::Records)]);
        assert_eq!(t, [0, 100 * MS, 200 * MS, 400 * MS, 600 * MS]);
    }

    #[test]
    fn raising_the_rate_sends_no_catch_up_burst() {
        // 1/s: 0, 1 s; at 1.5 s 10/s: one record at once (it is past
        // 1 s + 100 ms), then one every 100 ms, never two together.
        let mut s = Limits::new(&[limit("1/s", 1, Unit::Records)]);
        let t = departures_changed(&mut s, 5, 1500 * MS, &[limit("10/s", 1, Unit::Records)]);
        assert_eq!(t, [0, 1000 * MS, 1500 * MS, 1600 * MS, 1700 * MS]);
    }

    #[test]
    fn lowering_the_rate_carries_no_unused_credit() {
        // 10/s with a burst of 5, one record at 0: four more may leave at
        // once under the old limit. At 50 ms, 1/s burst 5: the next leaves
        // 1 s after the last departure, then one a second.
        let mut s = Limits::new(&[limit("10/s", 5, Unit::Records)]);
        s.release(0, 1, &mut std::iter::empty());
        s.replace_limits(50 * MS, &[limit("1/s", 5, Unit::Records)]);
        assert_eq!(s.release(50 * MS, 5, &mut std::iter::empty()), 0);
        assert_eq!(s.next_due(b"x\n"), 1000 * MS);
        assert_eq!(s.release(1000 * MS, 5, &mut std::iter::empty()), 1);
        assert_eq!(s.next_due(b"x\n"), 2000 * MS);
    }

    #[test]
    fn new_limits_before_any_departure_start_fresh() {
        let mut s = Limits::new(&[limit("1/s", 1, Unit::Records)]);
        s.replace_limits(0, &[limit("10/s", 3, Unit::Records)]);
        assert_eq!(s.release(0, 5, &mut std::iter::empty()), 3);
    }

    #[test]
    fn a_byte_rate_replaced_charges_the_next_record_from_the_last_departure() {
        // 1000 B/s burst 100: a 100-byte record at 0; 500 B/s from 10 ms:
        // the next 100-byte record leaves at 200 ms.
        let mut s = Limits::new(&[limit("1000/s", 100, Unit::Bytes)]);
        let record = [b'x'; 100];
        assert_eq!(s.release(0, 1, &mut std::iter::once(&record[..])), 1);
        s.replace_limits(10 * MS, &[limit("500/s", 100, Unit::Bytes)]);
        assert_eq!(s.next_due(&record), 200 * MS);
    }

    #[test]
    fn no_limit_releases_everything() {
        let mut s = Limits::new(&[]);
        assert!(s.is_unlimited());
        assert_eq!(s.release(0, 500, &mut std::iter::empty()), 500);
        assert_eq!(s.next_due(b"0123456789"), 0);
    }

    #[test]
    fn the_tightest_limit_decides_and_every_limit_is_charged() {
        // 10/s with a burst of 5, and 2 per 100 ms (20/s, burst 2): two
        // leave at once, then one every 50 ms while the first limit's burst
        // lasts, then one every 100 ms.
        let mut s = Limits::new(&[
            limit("10/s", 5, Unit::Records),
            limit("2/100ms", 2, Unit::Records),
        ]);
        let t = departures(&mut s, &[1; 9]);
        assert_eq!(
            t,
            vec![
                0,
                0,
                50 * MS,
                100 * MS,
                150 * MS,
                200 * MS,
                250 * MS,
                300 * MS,
                400 * MS
            ]
        );
    }

    #[test]
    fn layered_quota_holds_each_window() {
        // "10 per second and 30 per 5 seconds": a long backlog leaves at
        // 10/s for the first burst, then at 30 per 5 s.
        let mut s = Limits::new(&[
            limit("10/s", 10, Unit::Records),
            limit("30/5s", 30, Unit::Records),
        ]);
        let t = departures(&mut s, &[1; 100]);
        for (rate_per_s, burst) in [(10.0, 10.0), (6.0, 30.0)] {
            for window in [MS * 1000, MS * 5000, MS * 20_000] {
                let bound = burst + rate_per_s * window as f64 / 1e9;
                for (i, &start) in t.iter().enumerate() {
                    let n = t[i..].iter().take_while(|&&x| x < start + window).count();
                    assert!(n as f64 <= bound, "{n} in {window} ns (bound {bound})");
                }
            }
        }
    }

    #[test]
    fn byte_rate_spends_a_records_size() {
        // 1000 bytes/s, burst 1000: a 600-byte record, then one of 600 must
        // wait until 1200 bytes of schedule have passed the burst (200 ms).
        let mut s = Limits::new(&[limit("1000/s", 1000, Unit::Bytes)]);
        assert!(s.weighs_bytes());
        assert_eq!(
            departures(&mut s, &[600, 600, 400]),
            vec![0, 200 * MS, 600 * MS]
        );
    }

    #[test]
    fn a_record_larger_than_the_byte_burst_leaves_alone_then_pays() {
        // Burst 100 bytes: a 500-byte record leaves at once (a full burst
        // is saved) and puts the schedule 400 bytes in debt; a 10-byte
        // record then leaves when the schedule reaches 500 + 10 − 100
        // bytes: 410 ms at 1000 bytes/s.
        let mut s = Limits::new(&[limit("1000/s", 100, Unit::Bytes)]);
        assert_eq!(departures(&mut s, &[500, 10]), vec![0, 410 * MS]);
    }

    #[test]
    fn byte_window_bound_holds() {
        let sizes: Vec<usize> = (0..300).map(|i| 1 + (i * 37) % 90).collect();
        let mut s = Limits::new(&[limit("5000/s", 400, Unit::Bytes)]);
        let t = departures(&mut s, &sizes);
        for window in [MS, 100 * MS, 1000 * MS] {
            let bound = 400.0 + 5000.0 * window as f64 / 1e9;
            for i in 0..t.len() {
                let bytes: usize = (i..t.len())
                    .take_while(|&j| t[j] < t[i] + window)
                    .map(|j| sizes[j])
                    .sum();
                assert!(bytes as f64 <= bound, "{bytes} bytes in {window} ns");
            }
        }
    }

    #[test]
    fn a_forecast_gives_the_departures_the_writer_would_make() {
        // Several record limits, a byte limit, records of mixed sizes: the
        // forecast, one record at a time, gives the departures a writer
        // woken exactly when due makes.
        let limits = [
            limit("10/s", 5, Unit::Records),
            limit("30/5s", 30, Unit::Records),
            limit("2000/s", 300, Unit::Bytes),
        ];
        let sizes: Vec<usize> = (0..80).map(|i| 1 + (i * 53) % 200).collect();
        let mut forecast =
            crate::pace::Forecast::new(crate::pace::Pace::local(Limits::new(&limits)), 0);
        let records: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'x'; n]).collect();
        let predicted: Vec<u64> = records.iter().map(|r| forecast.push(0, r)).collect();
        assert_eq!(predicted, departures(&mut Limits::new(&limits), &sizes));
        assert_eq!(forecast.last(), *predicted.last().unwrap());
    }

    #[test]
    fn records_and_bytes_together() {
        let mut s = Limits::new(&[
            limit("2/s", 1, Unit::Records),
            limit("100/s", 100, Unit::Bytes),
        ]);
        // Small records: the record rate paces. A 100-byte record after a
        // 100-byte one: the byte rate does (1 s).
        assert_eq!(
            departures(&mut s, &[10, 10, 100, 100]),
            vec![0, 500 * MS, 1000 * MS, 2000 * MS]
        );
    }

    fn costed(records: &[&str]) -> Vec<Vec<u8>> {
        records
            .iter()
            .map(|r| format!("{r}\n").into_bytes())
            .collect()
    }

    fn cost_of_field(n: &str) -> Cost {
        use crate::key::{parse_key, KeySpec};
        Cost::new(KeySpec::new(parse_key(n).unwrap(), None), b'\n')
    }

    #[test]
    fn named_costs_spend_each_the_limits_that_name_them() {
        // in: 10/s burst 10, out: 100/s burst 100, in+out: 60/s burst 100.
        // Each record spends 10 of in and 50 of out: in lets one a second
        // through, out two, in+out more than one: in decides.
        let arg = |s: &str| crate::cost::parse_one_cost(s).unwrap();
        let cost = Cost::with_budgets(
            vec![
                (Some("in".into()), arg("i")),
                (Some("out".into()), arg("o")),
            ],
            &[Some("in".into()), Some("out".into()), Some("in+out".into())],
            None,
            b'\n',
        )
        .unwrap();
        let limits = [
            limit("10/s", 10, Unit::Cost),
            limit("100/s", 100, Unit::Cost),
            limit("60/s", 100, Unit::Cost),
        ];
        let mut s = Limits::new(&limits).with_cost(cost.clone());
        let record = b"{\"i\":10,\"o\":50}\n";
        assert_eq!(s.release(0, 5, &mut std::iter::repeat(&record[..])), 1);
        assert_eq!(s.next_due(record), 1000 * MS, "in decides");
        // Spending 1 of in and 50 of out: in+out decides (100 burst, 51
        // each: one at once, the next when 2 more are saved, at 1/30 s).
        let mut s = Limits::new(&limits).with_cost(cost);
        let record = b"{\"i\":1,\"o\":50}\n";
        assert_eq!(s.release(0, 5, &mut std::iter::repeat(&record[..])), 1);
        assert_eq!(s.next_due(record), 33_333_334, "in+out decides");
    }

    #[test]
    fn each_named_cost_counts_its_estimates_settlements_and_what_is_in_flight() {
        // Two cost limits named in (counted once) and one in+out, settling.
        let arg = |s: &str| crate::cost::parse_one_cost(s).unwrap();
        let cost = Cost::with_budgets(
            vec![
                (Some("in".into()), arg("i")),
                (Some("out".into()), arg("o")),
            ],
            &[Some("in".into()), Some("in".into()), Some("in+out".into())],
            None,
            b'\n',
        )
        .unwrap();
        let limits = [
            limit("1000/s", 1000, Unit::Cost),
            limit("2000/s", 1000, Unit::Cost),
            limit("1000/s", 1000, Unit::Cost),
        ];
        let mut s = Limits::new(&limits).with_cost(cost).with_settling();
        let figures = |s: &Limits| -> Vec<(String, u64, u64, u64, Option<u64>, u64)> {
            s.costs()
                .into_iter()
                .map(|c| {
                    let spent = c.spent();
                    (
                        c.name,
                        c.estimated,
                        c.settled_back,
                        c.settled_extra,
                        c.in_flight,
                        spent,
                    )
                })
                .collect()
        };
        let row = |name: &str, e, b, x, f, spent| (name.to_string(), e, b, x, Some(f), spent);
        let records = costed(&[
            r#"{"n":1,"i":100,"o":10}"#,
            r#"{"n":2,"i":200,"o":20}"#,
            r#"{"n":3,"i":50,"o":5}"#,
        ]);
        let mut all = records.iter().map(Vec::as_slice);
        assert_eq!(s.release(0, 3, &mut all), 3);
        assert_eq!(
            figures(&s),
            vec![
                row("in", 350, 0, 0, 350, 350),
                row("in+out", 385, 0, 0, 385, 385)
            ]
        );
        // The first spent less than its estimate (given back), the second
        // more (charged on top); the third is still in flight.
        s.settle(10 * MS, &records[0], &[Some(40), Some(10)]);
        s.settle(20 * MS, &records[1], &[Some(250), Some(30)]);
        let settled = vec![
            row("in", 350, 60, 50, 50, 340),
            row("in+out", 385, 60, 60, 55, 385),
        ];
        assert_eq!(figures(&s), settled);
        // Settled again, no longer in flight: nothing more is given back.
        s.settle(30 * MS, &records[0], &[Some(0), Some(0)]);
        assert_eq!(figures(&s), settled);
        // A record leaving later adds its estimates; spent = estimated -
        // settled back + settled extra throughout.
        let later = costed(&[r#"{"n":4,"i":10,"o":1}"#]);
        assert_eq!(
            s.release(2000 * MS, 1, &mut later.iter().map(Vec::as_slice)),
            1
        );
        s.settle(2010 * MS, &later[0], &[Some(12), Some(1)]);
        assert_eq!(
            figures(&s),
            vec![
                row("in", 360, 60, 52, 50, 352),
                row("in+out", 396, 60, 62, 55, 398)
            ]
        );
        // Without --settle nothing is in flight to tell.
        let plain = Limits::new(&[limit("1000/s", 1000, Unit::Cost)]).with_cost(cost_of_field("2"));
        let mut plain = plain;
        assert_eq!(
            plain.release(0, 1, &mut costed(&["a 7"]).iter().map(Vec::as_slice)),
            1
        );
        let c = &plain.costs()[0];
        assert_eq!((c.name.as_str(), c.estimated, c.in_flight), ("", 7, None));
    }

    #[test]
    fn cost_rate_spends_the_number_read_from_each_record() {
        // 100 per second, burst 100: 60 leaves at once, the next 60 when
        // 20 more are paid (200 ms), then 10 when 10 more are (300 ms).
        let mut s = Limits::new(&[limit("100/s", 100, Unit::Cost)]).with_cost(cost_of_field("2"));
        assert!(s.weighs_bytes());
        let records = costed(&["a 60", "b 60", "c 10"]);
        assert_eq!(departures_of(&mut s, &records), vec![0, 200 * MS, 300 * MS]);
    }

    #[test]
    fn an_unreadable_cost_costs_one() {
        let mut s = Limits::new(&[limit("10/s", 1, Unit::Cost)]).with_cost(cost_of_field("2"));
        let records = costed(&["a 5", "b", "c x", "d 0"]);
        // 5 puts the schedule 4 ahead (400 ms in debt, then 100 ms more for
        // the 1 "b" costs); "c x" costs 1 too; a cost of 0 leaves at once.
        assert_eq!(
            departures_of(&mut s, &records),
            vec![0, 500 * MS, 600 * MS, 600 * MS]
        );
    }

    #[test]
    fn records_bytes_and_cost_together() {
        // Records 2/s, bytes 100/s burst 100, cost 10/s burst 10: each
        // limit paces in turn.
        let mut s = Limits::new(&[
            limit("2/s", 1, Unit::Records),
            limit("100/s", 100, Unit::Bytes),
            limit("10/s", 10, Unit::Cost),
        ])
        .with_cost(cost_of_field("1"));
        let mut records = costed(&["1", "1", "20"]);
        records.push(format!("1 {}\n", "x".repeat(197)).into_bytes());
        // "1" at 0; "1" at 500 ms (records); "20" needs 10 paid past the
        // burst: 1 s after the debt of 0 (2 units spent at 0 and 0.5 s: the
        // schedule stands at 0.2 s, so 20 fits at 1.2 s); the 200-byte one
        // waits for its bytes: 6 + 3 + 200 bytes spent, 100 of burst.
        let t = departures_of(&mut s, &records);
        assert_eq!(t[..2], [0, 500 * MS]);
        assert!(t[2] >= 1000 * MS, "{t:?}");
        assert!(t[3] > t[2], "{t:?}");
    }
}
