//! Calendar budgets (`--budget 10000/day@America/Los_Angeles`): at most N
//! records in each calendar window of a time zone ([`crate::calendar`]),
//! beside the rates. A [`Counter`] counts one budget's window on the
//! schedule's clock; the schedule holds one per `--budget` and lets a record
//! leave only while every budget has room ([`crate::schedule::Limits`]).
//!
//! Pure: no threads, no clock, no I/O. The caller's clock (ns since drip
//! started) meets the wall clock once, at the start: `origin` is the wall
//! clock's reading then, in ns since the Unix epoch.

use std::fmt;
use std::sync::Arc;

use jiff::tz::TimeZone;

use crate::calendar::{Calendar, Span, Window, WINDOWS};
use crate::quantity::parse_count;

/// One budget: `count` records in each window of `calendar`.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Records each window allows (≥ 1).
    pub count: u64,
    /// The windows and their zone.
    pub calendar: Calendar,
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.calendar)
    }
}

/// The forms `--budget` takes, for its errors.
const BUDGET_FORM: &str = "N/WINDOW[@ZONE], WINDOW one of second, minute, hour, day, week, month, ZONE a tz database name such as America/Los_Angeles";

/// Parse a budget as `--budget` takes it: `N/WINDOW[@ZONE]`, the zone the
/// local one (`TZ`, else the system's) when not given.
///
/// # Errors
/// A count that is not a whole number of at least 1, a window not in
/// [`WINDOWS`], a zone the tz database does not hold, or no local zone.
pub fn parse_budget(text: &str) -> Result<Budget, String> {
    let (count, rest) = text
        .split_once('/')
        .ok_or_else(|| format!("expected {BUDGET_FORM}"))?;
    let count = parse_count(count).map_err(|why| format!("{why} (expected {BUDGET_FORM})"))?;
    let (window, zone) = match rest.split_once('@') {
        Some((window, zone)) => (window, Some(zone)),
        None => (rest, None),
    };
    let window = Window::parse(window).ok_or_else(|| {
        format!(
            "no window {window:?}: expected one of {}",
            WINDOWS.join(", ")
        )
    })?;
    let zone = match zone {
        Some(name) => {
            TimeZone::get(name).map_err(|_| format!("no time zone {name:?} in the tz database"))?
        }
        None => TimeZone::try_system()
            .map_err(|e| format!("the local time zone cannot be read ({e}); give @ZONE"))?,
    };
    Ok(Budget {
        count,
        calendar: Calendar::new(window, zone),
    })
}

/// What drip does while a budget is spent and records wait
/// (`--budget-exhausted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Exhausted {
    /// Records wait for the next window.
    #[default]
    Wait,
    /// drip stops: what waits is undelivered (exit status 5).
    Stop,
}

/// The policies `--budget-exhausted` takes, each with its help.
pub const EXHAUSTED: &[(&str, &str)] = &[
    ("wait", "records wait for the budget's next window"),
    (
        "stop",
        "drip stops (exit status 5); the records not written are undelivered",
    ),
];

impl std::str::FromStr for Exhausted {
    type Err = String;

    fn from_str(text: &str) -> Result<Exhausted, String> {
        match text {
            "wait" => Ok(Exhausted::Wait),
            "stop" => Ok(Exhausted::Stop),
            _ => Err("expected wait or stop".to_string()),
        }
    }
}

/// A budget's count kept elsewhere, for every drip on one `--share` NAME
/// (`shared::budget`): this drip spends only what it was granted of a
/// window's count. Windows are named by their start, ns since the Unix
/// epoch.
pub trait Allowance: fmt::Debug + Send + Sync {
    /// Records granted this drip so far in the window starting at `start`,
    /// and whether the window's shared count is spent (no more will come).
    fn granted(&self, start: i128) -> (u64, bool);
    /// Ask that `total` records in all be granted this drip in the window
    /// `[start, end)` (no more than the budget's count); asked again, the
    /// largest total stands.
    fn want(&self, start: i128, end: i128, total: u64);
    /// The window's count in the shared state, every drip's grants in it,
    /// as last heard; `None` before any.
    fn counted(&self, start: i128) -> Option<u64>;
    /// This drip sent `spent` records in all in the window starting at
    /// `start`: what it was granted beyond that is given back when it
    /// leaves.
    fn sent(&self, start: i128, spent: u64);
}

/// With a shared count and nothing granted yet, the writer looks again
/// this often (ns); the grant's arrival wakes it sooner.
const SHARED_POLL_NS: u64 = 50_000_000;

/// One budget's count on the schedule's clock.
#[derive(Debug, Clone)]
pub struct Counter {
    budget: Budget,
    /// The wall clock at the schedule's 0, ns since the Unix epoch.
    origin: i128,
    /// The window last counted in, on the schedule's clock (its start may
    /// be before 0, its end never is); `None` before the first record.
    window: Option<(i128, i128)>,
    /// Records counted in it.
    spent: u64,
    /// The shared count this drip spends from (`--share`), if any.
    shared: Option<Arc<dyn Allowance>>,
    /// The most it asks the shared count for beyond what it spent: about
    /// what its rate sends in a second (at least 1), so a drip that stops
    /// or sends slowly holds little of a window it does not use.
    ahead: u64,
    /// The latest time counted at (ns).
    last_now: u64,
}

/// Windows looked ahead at most, for a floor of a far departure
/// ([`Counter::floor`]); beyond, the floor stays where it got to.
const MOST_WINDOWS_AHEAD: usize = 1000;

/// What a budget stands at, for the display and the figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetView {
    /// The budget as given: `20/second@UTC`.
    pub budget: String,
    /// Records each window allows.
    pub count: u64,
    /// Records left in the window now.
    pub left: u64,
    /// When the next window starts, ns since the Unix epoch.
    pub reset_unix_ns: i128,
    /// When the next window starts, ns on the schedule's clock.
    pub reset_at: u64,
    /// When the next window starts, as the zone's clock shows it.
    pub reset_text: String,
}

impl Counter {
    /// Count `budget` on a clock whose 0 is `origin` on the wall clock (ns
    /// since the Unix epoch).
    pub fn new(budget: Budget, origin: i128) -> Counter {
        Counter {
            budget,
            origin,
            window: None,
            spent: 0,
            shared: None,
            ahead: u64::MAX,
            last_now: 0,
        }
    }

    /// The same budget, each window's count shared with the other drips on
    /// `allowance`: records leave only as it grants them, asked for at
    /// most `ahead` beyond what this drip sent (about a second of its
    /// rate; at least 1).
    pub fn shared(mut self, allowance: Arc<dyn Allowance>, ahead: u64) -> Counter {
        self.shared = Some(allowance);
        self.ahead = ahead.max(1);
        self
    }

    /// The shared grant of the window counted (records, spent), if shared.
    fn grant(&self) -> Option<(u64, bool)> {
        let (start, _) = self.window?;
        Some(self.shared.as_ref()?.granted(self.origin + start))
    }

    /// With a shared count, ask for grants for `available` records waiting
    /// at `now` beyond what this window has granted this drip.
    pub fn ask(&mut self, now: u64, available: u64) {
        self.roll(now);
        let (Some(shared), Some((start, end))) = (&self.shared, self.window) else {
            return;
        };
        let total = self
            .spent
            .saturating_add(available.min(self.ahead))
            .min(self.budget.count);
        shared.want(self.origin + start, self.origin + end, total);
    }

    /// The budget counted.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The window holding `at` on the schedule's clock.
    fn span_at(&self, at: i128) -> (i128, i128) {
        let Span { start, end } = self.budget.calendar.span(self.origin + at);
        (start - self.origin, end - self.origin)
    }

    /// Move on to the window holding `now`, if it is not the one counted.
    fn roll(&mut self, now: u64) {
        self.last_now = self.last_now.max(now);
        let now = i128::from(now);
        if !matches!(self.window, Some((_, end)) if now < end) {
            self.window = Some(self.span_at(now));
            self.spent = 0;
        }
    }

    /// Records that may still leave at `now` in its window.
    pub fn room(&mut self, now: u64) -> u64 {
        self.roll(now);
        let local = self.budget.count.saturating_sub(self.spent);
        match self.grant() {
            Some((granted, _)) => local.min(granted.saturating_sub(self.spent)),
            None => local,
        }
    }

    /// `n` records left at `now` (no more than [`Counter::room`] allowed).
    pub fn spend(&mut self, now: u64, n: u64) {
        self.roll(now);
        self.spent += n;
        if let (Some(shared), Some((start, _))) = (&self.shared, self.window) {
            shared.sent(self.origin + start, self.spent);
        }
    }

    /// The earliest time (ns) the next record may leave as far as this
    /// budget goes: 0 while its window has room, else the next window's
    /// start.
    /// With a shared count, while this drip waits for a grant: soon.
    pub fn due(&self) -> u64 {
        let Some((_, end)) = self.window else {
            return 0;
        };
        match self.grant() {
            _ if self.spent >= self.budget.count => clock(end),
            Some((granted, true)) if self.spent >= granted => clock(end),
            Some((granted, false)) if self.spent >= granted => {
                clock(end).min(self.last_now.saturating_add(SHARED_POLL_NS))
            }
            _ => 0,
        }
    }

    /// Whether the window holding `now` is spent (with a shared count: by
    /// every drip on it, as far as this one has heard).
    pub fn spent_at(&self, now: u64) -> bool {
        let spent = match self.grant() {
            Some((granted, true)) => self.spent >= granted,
            _ => self.spent >= self.budget.count,
        };
        matches!(self.window, Some((_, end)) if i128::from(now) < end && spent)
    }

    /// At the earliest, when the `n`-th record from `now` (0: the next) may
    /// leave as far as this budget goes (ns): in the window holding `now`
    /// while it has room for it, else the start of the window that will.
    pub fn floor(&self, now: u64, n: u64) -> u64 {
        let mut copy = self.clone();
        copy.roll(now);
        let (_, mut end) = copy.window.expect("rolled");
        let mut ahead = copy.spent.saturating_add(n);
        let mut at = now;
        let mut windows = 0;
        while ahead >= self.budget.count && windows < MOST_WINDOWS_AHEAD {
            ahead -= self.budget.count;
            at = clock(end);
            end = copy.span_at(end).1;
            windows += 1;
        }
        at
    }

    /// Where the budget stands at `now`.
    pub fn view(&self, now: u64) -> BudgetView {
        let (left, end) = match self.window {
            Some((start, end)) if i128::from(now) < end => match self.grant() {
                Some((granted, true)) => (granted.saturating_sub(self.spent), end),
                // Of the shared count: what no drip was granted, and what
                // this one was and has not sent.
                Some((granted, false)) => {
                    let counted = self
                        .shared
                        .as_ref()
                        .and_then(|s| s.counted(self.origin + start));
                    let free = self.budget.count.saturating_sub(counted.unwrap_or(granted));
                    (free + granted.saturating_sub(self.spent), end)
                }
                None => (self.budget.count.saturating_sub(self.spent), end),
            },
            _ => (self.budget.count, self.span_at(i128::from(now)).1),
        };
        BudgetView {
            budget: self.budget.to_string(),
            count: self.budget.count,
            left,
            reset_unix_ns: self.origin + end,
            reset_at: clock(end),
            reset_text: self.budget.calendar.show(self.origin + end),
        }
    }
}

/// The `--budget`s in front of the pace's base (`crate::pace::BudgetStage`):
/// a record leaves only while every one has
/// room, and counts against every one once it leaves.
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    /// One counter per `--budget`.
    pub counters: Vec<Counter>,
    /// What a spent budget does to the records waiting.
    pub exhausted: Exhausted,
}

impl Budgets {
    /// Whether there is no budget.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// How many of `available` records every budget lets leave at `now`
    /// (ns), after asking a shared count for them.
    pub fn room(&mut self, now: u64, available: usize) -> usize {
        self.counters
            .iter_mut()
            .map(|b| {
                b.ask(now, available as u64);
                usize::try_from(b.room(now)).unwrap_or(usize::MAX)
            })
            .fold(available, usize::min)
    }

    /// `n` records left at `now` (ns): each budget counts them.
    pub fn spend(&mut self, now: u64, n: usize) {
        for b in &mut self.counters {
            b.spend(now, n as u64);
        }
    }

    /// When the budgets let the next record leave (ns): 0 while all have
    /// room ([`Counter::due`]).
    pub fn due(&self) -> u64 {
        self.counters.iter().map(Counter::due).max().unwrap_or(0)
    }

    /// At the earliest, when the `n`-th record from `now` may leave as far
    /// as the budgets go (ns, `now` without any; [`Counter::floor`]).
    pub fn floor(&self, now: u64, n: u64) -> u64 {
        let floors = self.counters.iter().map(|b| b.floor(now, n));
        floors.max().unwrap_or(now)
    }

    /// Where each budget stands at `now` (ns).
    pub fn views(&self, now: u64) -> Vec<BudgetView> {
        self.counters.iter().map(|b| b.view(now)).collect()
    }

    /// Under `--budget-exhausted stop`, the budget spent at `now` (ns), in
    /// words (`20/second@UTC`); `None` when none is, or under `wait`.
    pub fn exhausted(&self, now: u64) -> Option<String> {
        if self.exhausted != Exhausted::Stop {
            return None;
        }
        let spent = self.counters.iter().find(|b| b.spent_at(now));
        spent.map(|b| b.budget().to_string())
    }
}

/// A time on the schedule's clock as a `u64` (before its 0: 0).
fn clock(at: i128) -> u64 {
    u64::try_from(at.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::{BudgetStage, Pace};
    use crate::rate::parse_rate;
    use crate::schedule::{Limit, Limits, Unit};

    /// `limits` behind `counters`.
    fn budgeted(limits: Limits, counters: Vec<Counter>, exhausted: Exhausted) -> Pace {
        Pace::local(limits).with_stage(Box::new(BudgetStage::new(counters, exhausted)))
    }
    use jiff::civil::{date, Date};
    use jiff::tz::TimeZoneDatabase;

    const SECOND: u64 = 1_000_000_000;
    const HOUR: u64 = 3600 * SECOND;

    fn budget(count: u64, window: Window, zone: &str) -> Budget {
        Budget {
            count,
            calendar: Calendar::new(window, TimeZoneDatabase::bundled().get(zone).unwrap()),
        }
    }

    /// Ns since the epoch of hour `h` of `day` in `zone`.
    fn unix(zone: &str, day: Date, h: i8) -> i128 {
        day.at(h, 0, 0, 0)
            .to_zoned(TimeZoneDatabase::bundled().get(zone).unwrap())
            .unwrap()
            .timestamp()
            .as_nanosecond()
    }

    /// Departures of records always waiting under `counter` alone, woken
    /// exactly when due, until `until` (ns on its clock).
    fn departures(counter: &mut Counter, until: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut now = 0;
        while now < until {
            let n = counter.room(now);
            counter.spend(now, n);
            out.extend(std::iter::repeat_n(now, n as usize));
            now = counter.due().max(now + 1);
        }
        out
    }

    #[test]
    fn a_daily_budget_resets_once_at_each_local_midnight_across_dst() {
        // Three days around each change, from noon the day before: every
        // day's 5 records leave at its midnight, 23 or 25 hours apart.
        for (zone, day, hours) in [
            ("America/Los_Angeles", date(2026, 3, 8), 23),
            ("Europe/Berlin", date(2026, 3, 29), 23),
            ("America/Los_Angeles", date(2026, 11, 1), 25),
            ("Europe/Berlin", date(2026, 10, 25), 25),
        ] {
            let origin = unix(zone, day, 0) - i128::from(12 * HOUR);
            let mut c = Counter::new(budget(5, Window::Day, zone), origin);
            let t = departures(&mut c, (12 + hours + 1) * HOUR);
            let mut starts: Vec<u64> = t.clone();
            starts.dedup();
            assert_eq!(t.len(), 5 * starts.len(), "{zone}: {t:?}");
            assert_eq!(
                starts.len(),
                3,
                "{zone}: noon, and two midnights: {starts:?}"
            );
            assert_eq!(
                starts[1],
                12 * HOUR,
                "{zone}: the day of the change starts at midnight"
            );
            assert_eq!(starts[2] - starts[1], hours * HOUR, "{zone}");
        }
    }

    #[test]
    fn a_monthly_budget_resets_on_the_first() {
        let zone = "Europe/Berlin";
        // From 2028-01-20: February has 29 days that year.
        let origin = unix(zone, date(2028, 1, 20), 0);
        let mut c = Counter::new(budget(2, Window::Month, zone), origin);
        let t = departures(&mut c, 100 * 24 * HOUR);
        let firsts: Vec<i128> = [date(2028, 2, 1), date(2028, 3, 1), date(2028, 4, 1)]
            .into_iter()
            .map(|d| unix(zone, d, 0) - origin)
            .collect();
        let want: Vec<u64> = [0, 0]
            .into_iter()
            .chain(firsts.iter().flat_map(|&f| [f as u64, f as u64]))
            .collect();
        assert_eq!(t, want);
    }

    #[test]
    fn the_floor_of_a_far_record_is_the_window_that_has_room_for_it() {
        let mut c = Counter::new(budget(10, Window::Second, "UTC"), 0);
        c.spend(100, 4);
        assert_eq!(c.floor(200, 5), 200);
        assert_eq!(c.floor(200, 6), SECOND);
        assert_eq!(c.floor(200, 25), 2 * SECOND);
        assert_eq!(c.floor(SECOND + 1, 9), SECOND + 1);
        assert!(!c.spent_at(200));
        c.spend(300, 6);
        assert!(c.spent_at(300));
        assert_eq!(c.due(), SECOND);
        assert!(!c.spent_at(SECOND));
    }

    #[test]
    fn the_view_tells_what_is_left_and_the_next_reset() {
        let zone = "America/Los_Angeles";
        let origin = unix(zone, date(2026, 3, 7), 18);
        let mut c = Counter::new(budget(100, Window::Day, zone), origin);
        c.spend(0, 40);
        let v = c.view(HOUR);
        assert_eq!(v.budget, "100/day@America/Los_Angeles");
        assert_eq!(v.left, 60);
        assert_eq!(v.reset_at, 6 * HOUR);
        assert_eq!(v.reset_text, "2026-03-08 00:00:00 PST");
        // Past the reset with nothing counted since: all left.
        let v = c.view(7 * HOUR);
        assert_eq!(v.left, 100);
        assert_eq!(v.reset_at, 6 * HOUR + 23 * HOUR);
    }

    /// Departures of records arriving at `arrivals` (sorted, ns) through
    /// `limits`, the writer woken at each arrival and each due time.
    fn through(limits: &mut Pace, arrivals: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        let (mut arrived, mut now) = (0, 0);
        while out.len() < arrivals.len() {
            while arrived < arrivals.len() && arrivals[arrived] <= now {
                arrived += 1;
            }
            let n = limits.release(now, arrived - out.len(), &mut std::iter::empty());
            out.extend(std::iter::repeat_n(now, n));
            let next_arrival = arrivals.get(arrived).copied().unwrap_or(u64::MAX);
            now = if arrived > out.len() {
                limits.next_due(b"x\n").max(now + 1).min(next_arrival)
            } else {
                next_arrival
            };
        }
        out
    }

    /// The plain model of a budget alone: each record leaves as it comes,
    /// after the one before, unless its window is full: then at the next
    /// window's start.
    fn model(calendar: &Calendar, count: u64, origin: i128, arrivals: &[u64]) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        let (mut window, mut spent) = (None, 0);
        for &arrival in arrivals {
            let mut at = out.last().map_or(arrival, |&last| last.max(arrival));
            loop {
                let span = calendar.span(origin + i128::from(at));
                if window != Some(span) {
                    window = Some(span);
                    spent = 0;
                }
                if spent < count {
                    break;
                }
                at = (span.end - origin) as u64;
            }
            spent += 1;
            out.push(at);
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn no_window_gets_more_than_its_budget(
            count in 1u64..6,
            window in proptest::sample::select(vec![Window::Second, Window::Minute]),
            origin_ms in 0i64..120_000,
            gaps_ms in proptest::collection::vec(0u64..700, 1..80),
            rate in proptest::option::of(1u64..20),
        ) {
            let calendar = Calendar::new(window, TimeZone::UTC);
            let origin = 1_790_000_000 * i128::from(SECOND) + i128::from(origin_ms) * 1_000_000;
            let arrivals: Vec<u64> = gaps_ms
                .iter()
                .scan(0, |t, gap| { *t += gap * 1_000_000; Some(*t) })
                .collect();
            let rates: Vec<Limit> = rate
                .map(|r| Limit { rate: parse_rate(&format!("{r}/s")).unwrap(), burst: 2, unit: Unit::Records })
                .into_iter()
                .collect();
            let counter = Counter::new(Budget { count, calendar: calendar.clone() }, origin);
            let mut limits = budgeted(Limits::new(&rates), vec![counter], Exhausted::Wait);
            let t = through(&mut limits, &arrivals);
            // Never lost, never reordered, never before its arrival.
            proptest::prop_assert_eq!(t.len(), arrivals.len());
            proptest::prop_assert!(t.windows(2).all(|w| w[0] <= w[1]));
            proptest::prop_assert!(t.iter().zip(&arrivals).all(|(d, a)| d >= a));
            // No window holds more than the budget.
            let mut per_window = std::collections::BTreeMap::new();
            for &d in &t {
                *per_window.entry(calendar.span(origin + i128::from(d)).start).or_insert(0u64) += 1;
            }
            proptest::prop_assert!(per_window.values().all(|&n| n <= count), "{per_window:?}");
            if rates.is_empty() {
                proptest::prop_assert_eq!(t, model(&calendar, count, origin, &arrivals));
            }
        }
    }

    #[test]
    fn a_change_of_rates_keeps_the_budgets_count() {
        let counter = Counter::new(budget(3, Window::Second, "UTC"), 0);
        let rate = |r: &str| Limit {
            rate: parse_rate(r).unwrap(),
            burst: 10,
            unit: Unit::Records,
        };
        let mut limits = budgeted(
            Limits::new(&[rate("100/s")]),
            vec![counter],
            Exhausted::Stop,
        );
        assert_eq!(limits.release(0, 2, &mut std::iter::empty()), 2);
        limits.replace_limits(1000, &[rate("1000/s")]).unwrap();
        assert_eq!(limits.release(SECOND / 2, 5, &mut std::iter::empty()), 1);
        assert_eq!(
            limits.exhausted(SECOND / 2).as_deref(),
            Some("3/second@UTC")
        );
        assert_eq!(limits.next_due(b"x\n"), SECOND);
        assert_eq!(limits.exhausted(SECOND), None);
    }

    #[test]
    fn budgets_parse_or_say_why() {
        let b = parse_budget("10000/day@America/Los_Angeles").unwrap();
        assert_eq!(b.count, 10000);
        assert_eq!(b.calendar.window(), Window::Day);
        assert_eq!(b.to_string(), "10000/day@America/Los_Angeles");
        assert!(parse_budget("20/second@UTC").is_ok());
        // The short names --rate takes; the budget is spelled in full.
        for (short, long) in [
            ("s", "second"),
            ("min", "minute"),
            ("h", "hour"),
            ("d", "day"),
            ("w", "week"),
        ] {
            let b = parse_budget(&format!("7/{short}@UTC")).unwrap();
            assert_eq!(b.to_string(), format!("7/{long}@UTC"));
        }
        assert!(parse_budget("7/m@UTC").unwrap_err().contains("no window"));
        assert!(parse_budget("0/day@UTC")
            .unwrap_err()
            .contains("at least 1"));
        assert!(parse_budget("5/fortnight")
            .unwrap_err()
            .contains("no window"));
        assert!(parse_budget("5/day@Mars/Olympus")
            .unwrap_err()
            .contains("no time zone"));
        assert!(parse_budget("5").unwrap_err().contains("N/WINDOW"));
        assert_eq!("stop".parse::<Exhausted>(), Ok(Exhausted::Stop));
        assert!("later".parse::<Exhausted>().is_err());
    }
}
