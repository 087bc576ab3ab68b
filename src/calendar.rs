//! Calendar windows in a time zone: the second, minute, hour, day, week
//! (Monday to Sunday) or month that holds an instant, and when the next one
//! starts, as a clock on the wall of that zone shows them (`--budget`).
//!
//! Instants are nanoseconds since the Unix epoch on the caller's clock; the
//! time zone's rules come from the tz database through jiff. A day starts at
//! local midnight (or, where a change of offset skips midnight, at the
//! first instant of the date), so a day across a change to summer time
//! lasts 23 hours and one across the change back 25; a week starts on a
//! Monday's start, a month on its first day's. A second, a minute or an
//! hour is that long whatever the zone, aligned to the local clock (an
//! hour in a zone 5:30 from UTC starts at half past in UTC).
//!
//! Pure: no threads, no clock, no I/O (the zone is read by the caller).

use std::fmt;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

const NS_PER_SECOND: i128 = 1_000_000_000;

/// A calendar window's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// A second of the clock.
    Second,
    /// A minute of the clock.
    Minute,
    /// An hour of the clock.
    Hour,
    /// A day, from local midnight to the next.
    Day,
    /// A week, from Monday's start to the next.
    Week,
    /// A month, from its first day's start to the next month's.
    Month,
}

/// The windows' names, as `--budget` takes them.
pub const WINDOWS: &[&str] = &["second", "minute", "hour", "day", "week", "month"];

impl Window {
    /// The window named `name` (one of [`WINDOWS`], or the short names
    /// `--rate` takes: `s`, `sec`, `min`, `h`, `d`, and `w`), if any.
    pub fn parse(name: &str) -> Option<Window> {
        Some(match name {
            "second" | "sec" | "s" => Window::Second,
            "minute" | "min" => Window::Minute,
            "hour" | "h" => Window::Hour,
            "day" | "d" => Window::Day,
            "week" | "w" => Window::Week,
            "month" => Window::Month,
            _ => return None,
        })
    }

    /// The length of a clock window (second, minute, hour) in seconds;
    /// `None` for the windows of the calendar.
    fn clock_seconds(self) -> Option<i128> {
        match self {
            Window::Second => Some(1),
            Window::Minute => Some(60),
            Window::Hour => Some(3600),
            Window::Day | Window::Week | Window::Month => None,
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = *self as usize;
        f.write_str(WINDOWS[i])
    }
}

/// One window: `[start, end)` in ns since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Its first instant.
    pub start: i128,
    /// The next window's first instant.
    pub end: i128,
}

/// Windows of one length in one time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Calendar {
    window: Window,
    zone: TimeZone,
}

impl Calendar {
    /// Windows of `window` in `zone`.
    pub fn new(window: Window, zone: TimeZone) -> Calendar {
        Calendar { window, zone }
    }

    /// The window's length.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The zone's name (its tz database name; `UTC` or the offset for a
    /// zone without one).
    pub fn zone_name(&self) -> String {
        match self.zone.iana_name() {
            Some(name) => name.to_string(),
            None => Timestamp::UNIX_EPOCH
                .to_zoned(self.zone.clone())
                .offset()
                .to_string(),
        }
    }

    /// The window holding `at` (ns since the Unix epoch, between the
    /// years −9999 and 9999).
    pub fn span(&self, at: i128) -> Span {
        let ts = Timestamp::from_nanosecond(at).unwrap_or(if at < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
        let zoned = ts.to_zoned(self.zone.clone());
        if let Some(seconds) = self.window.clock_seconds() {
            // The local time's offset into its window, by its own offset.
            let local = ts.as_nanosecond() + i128::from(zoned.offset().seconds()) * NS_PER_SECOND;
            let start = ts.as_nanosecond() - local.rem_euclid(seconds * NS_PER_SECOND);
            return Span {
                start,
                end: start + seconds * NS_PER_SECOND,
            };
        }
        let date = zoned.date();
        let first = match self.window {
            Window::Week => date
                .checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days())
                .unwrap_or(date),
            Window::Month => date.first_of_month(),
            _ => date,
        };
        let next = match self.window {
            Window::Week => first.checked_add(7.days()),
            Window::Month => first.checked_add(1.month()),
            _ => first.checked_add(1.day()),
        };
        let start = self.day_start(first).unwrap_or(ts.as_nanosecond());
        let end = next
            .ok()
            .and_then(|d| self.day_start(d))
            .unwrap_or(Timestamp::MAX.as_nanosecond());
        Span { start, end }
    }

    /// The first instant of `date` in the zone (ns since the Unix epoch).
    fn day_start(&self, date: Date) -> Option<i128> {
        let zoned: Zoned = date.to_zoned(self.zone.clone()).ok()?;
        Some(zoned.start_of_day().ok()?.timestamp().as_nanosecond())
    }

    /// `at` (ns since the Unix epoch) as the zone's clock shows it, to the
    /// second: `2026-03-08 00:00:00 PST`.
    pub fn show(&self, at: i128) -> String {
        match Timestamp::from_nanosecond(at) {
            Ok(ts) => ts
                .to_zoned(self.zone.clone())
                .strftime("%Y-%m-%d %H:%M:%S %Z")
                .to_string(),
            Err(_) => "never".to_string(),
        }
    }
}

impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.window, self.zone_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;
    use jiff::tz::TimeZoneDatabase;

    const HOUR: i128 = 3600 * NS_PER_SECOND;

    fn zone(name: &str) -> TimeZone {
        TimeZoneDatabase::bundled().get(name).unwrap()
    }

    /// Ns since the epoch of the civil time in `zone` (the earlier of two).
    fn at(zone_name: &str, y: i16, m: i8, d: i8, h: i8, min: i8) -> i128 {
        date(y, m, d)
            .at(h, min, 0, 0)
            .to_zoned(zone(zone_name))
            .unwrap()
            .timestamp()
            .as_nanosecond()
    }

    /// Local midnight `k` days after `day` in `zone_name`.
    fn midnight(zone_name: &str, day: Date, k: i64) -> i128 {
        day.checked_add(k.days())
            .unwrap()
            .to_zoned(zone(zone_name))
            .unwrap()
            .timestamp()
            .as_nanosecond()
    }

    /// Every window start from `from` for `days` days of `calendar`, found
    /// by walking the instants an hour (and a minute) apart.
    fn starts(calendar: &Calendar, from: i128, hours: i128) -> Vec<i128> {
        let mut seen = Vec::new();
        let mut t = from;
        while t < from + hours * HOUR {
            let span = calendar.span(t);
            assert!(span.start <= t && t < span.end, "{t} not in {span:?}");
            assert_eq!(calendar.span(span.end).start, span.end, "windows meet");
            assert_eq!(calendar.span(span.end - 1), span, "a window is one");
            if seen.last() != Some(&span.start) {
                seen.push(span.start);
            }
            t += HOUR / 4 + 60 * NS_PER_SECOND;
        }
        seen
    }

    #[test]
    fn days_across_the_change_to_summer_time_last_23_hours() {
        for (name, (y, m, d)) in [
            ("America/Los_Angeles", (2026, 3, 8)),
            ("Europe/Berlin", (2026, 3, 29)),
        ] {
            let c = Calendar::new(Window::Day, zone(name));
            let day = c.span(at(name, y, m, d, 12, 0));
            assert_eq!(day.start, at(name, y, m, d, 0, 0), "{name}");
            assert_eq!(day.end - day.start, 23 * HOUR, "{name}");
            // One start a day at local midnight, none twice, none skipped.
            let got = starts(&c, midnight(name, date(y, m, d), -2) + 6 * HOUR, 24 * 5);
            let want: Vec<i128> = (-2..=3).map(|k| midnight(name, date(y, m, d), k)).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn days_across_the_change_back_last_25_hours() {
        for (name, (y, m, d)) in [
            ("America/Los_Angeles", (2026, 11, 1)),
            ("Europe/Berlin", (2026, 10, 25)),
        ] {
            let c = Calendar::new(Window::Day, zone(name));
            let day = c.span(at(name, y, m, d, 12, 0));
            assert_eq!(day.start, at(name, y, m, d, 0, 0), "{name}");
            assert_eq!(day.end - day.start, 25 * HOUR, "{name}");
            let got = starts(&c, midnight(name, date(y, m, d), -2) + 6 * HOUR, 24 * 5);
            let want: Vec<i128> = (-2..=3).map(|k| midnight(name, date(y, m, d), k)).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn an_hour_repeated_by_the_change_back_is_two_windows() {
        // 01:00-02:00 PDT, then 01:00-02:00 PST: an hour each.
        let c = Calendar::new(Window::Hour, zone("America/Los_Angeles"));
        let first = at("America/Los_Angeles", 2026, 11, 1, 1, 30);
        let a = c.span(first);
        let b = c.span(first + HOUR);
        assert_eq!(a.end - a.start, HOUR);
        assert_eq!(b.start, a.end);
        assert_eq!(b.end - b.start, HOUR);
        let got = starts(&c, at("America/Los_Angeles", 2026, 10, 31, 22, 0), 8);
        assert_eq!(got.len(), 8, "one window an hour: {got:?}");
        assert!(got.windows(2).all(|w| w[1] - w[0] == HOUR));
    }

    #[test]
    fn an_hour_skipped_by_the_change_to_summer_time_has_no_window() {
        let c = Calendar::new(Window::Hour, zone("Europe/Berlin"));
        let one = c.span(at("Europe/Berlin", 2026, 3, 29, 1, 30));
        assert_eq!(one.end, at("Europe/Berlin", 2026, 3, 29, 3, 0));
        assert_eq!(one.end - one.start, HOUR);
    }

    #[test]
    fn a_day_whose_midnight_is_skipped_starts_at_its_first_instant() {
        // Sao Paulo moved its clocks from 00:00 to 01:00 on 2018-11-04.
        let c = Calendar::new(Window::Day, zone("America/Sao_Paulo"));
        let day = c.span(at("America/Sao_Paulo", 2018, 11, 4, 12, 0));
        assert_eq!(day.start, at("America/Sao_Paulo", 2018, 11, 4, 1, 0));
        assert_eq!(day.end - day.start, 23 * HOUR);
        assert_eq!(c.span(day.start - 1).end, day.start);
    }

    #[test]
    fn months_end_after_28_29_30_and_31_days() {
        let name = "America/Los_Angeles";
        let c = Calendar::new(Window::Month, zone(name));
        for ((y, m), days) in [
            ((2026, 2), 28),
            ((2028, 2), 29),
            ((2026, 4), 30),
            ((2026, 1), 31),
            ((2026, 12), 31),
        ] {
            let span = c.span(at(name, y, m, 15, 9, 0));
            assert_eq!(span.start, at(name, y, m, 1, 0, 0), "{y}-{m}");
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            assert_eq!(span.end, at(name, ny, nm, 1, 0, 0), "{y}-{m}");
            // March and November hold an hour more or less.
            let hours = (span.end - span.start) / HOUR;
            assert_eq!(hours, days * 24, "{y}-{m}");
        }
        // The last instant of a month is in it, the next in the next.
        let feb = c.span(at(name, 2028, 2, 1, 0, 0));
        assert_eq!(c.span(feb.end - 1).start, feb.start);
        assert_eq!(c.span(feb.end).start, feb.end);
    }

    #[test]
    fn march_in_berlin_is_an_hour_short() {
        let c = Calendar::new(Window::Month, zone("Europe/Berlin"));
        let span = c.span(at("Europe/Berlin", 2026, 3, 10, 0, 0));
        assert_eq!((span.end - span.start) / HOUR, 31 * 24 - 1);
    }

    #[test]
    fn weeks_start_on_monday_at_midnight() {
        let name = "Europe/Berlin";
        let c = Calendar::new(Window::Week, zone(name));
        // Thursday 2026-10-29: the week of Monday 26th (after the change
        // back on Sunday the 25th, so the week before is 169 hours).
        let span = c.span(at(name, 2026, 10, 29, 13, 0));
        assert_eq!(span.start, at(name, 2026, 10, 26, 0, 0));
        assert_eq!(span.end, at(name, 2026, 11, 2, 0, 0));
        let before = c.span(span.start - 1);
        assert_eq!(before.start, at(name, 2026, 10, 19, 0, 0));
        assert_eq!(before.end - before.start, 7 * 24 * HOUR + HOUR);
        // A Monday's midnight starts the week; a Sunday's last instant ends it.
        assert_eq!(c.span(span.start).start, span.start);
        let got = starts(&c, at(name, 2026, 10, 20, 0, 0), 24 * 21);
        assert_eq!(
            got,
            [
                at(name, 2026, 10, 19, 0, 0),
                at(name, 2026, 10, 26, 0, 0),
                at(name, 2026, 11, 2, 0, 0),
                at(name, 2026, 11, 9, 0, 0)
            ]
        );
    }

    #[test]
    fn clock_windows_follow_the_local_clock() {
        // Kolkata is 5:30 from UTC: its hours start at half past in UTC,
        // its minutes and seconds where UTC's do.
        let c = Calendar::new(Window::Hour, zone("Asia/Kolkata"));
        let t = at("Asia/Kolkata", 2026, 6, 1, 10, 45);
        let span = c.span(t);
        assert_eq!(span.start, at("Asia/Kolkata", 2026, 6, 1, 10, 0));
        assert_eq!(span.start.rem_euclid(HOUR), HOUR / 2);
        let s = Calendar::new(Window::Second, zone("Asia/Kolkata"));
        let span = s.span(t + 1_500_000_123);
        assert_eq!(
            (span.start, span.end),
            (t + NS_PER_SECOND, t + 2 * NS_PER_SECOND)
        );
        let m = Calendar::new(Window::Minute, TimeZone::UTC);
        let span = m.span(-1);
        assert_eq!((span.start, span.end), (-60 * NS_PER_SECOND, 0));
    }

    #[test]
    fn names_and_shown_times() {
        let c = Calendar::new(Window::Day, zone("America/Los_Angeles"));
        assert_eq!(c.to_string(), "day@America/Los_Angeles");
        let t = at("America/Los_Angeles", 2026, 3, 8, 0, 0);
        assert_eq!(c.show(t), "2026-03-08 00:00:00 PST");
        assert_eq!(Window::parse("week"), Some(Window::Week));
        assert_eq!(Window::parse("fortnight"), None);
        for name in WINDOWS {
            assert_eq!(Window::parse(name).unwrap().to_string(), *name);
        }
    }
}
