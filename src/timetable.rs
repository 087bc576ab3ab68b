//! Time-of-day schedules (`--schedule`): rows of weekdays and a span of
//! the local clock, each with a record rate or a pause, the first row that
//! matches the local time in force.
//!
//! `Mon-Fri 09:00-18:00 pause; Sat,Sun 00:00-08:00 500/s; * 50/s` reads:
//! on weekdays from 9 to 18 nothing leaves; on weekend nights 500/s; at
//! any other time 50/s. An item `@ZONE` (`@Europe/Berlin`) sets the zone
//! the rows read the clock in; without it, the local zone (`TZ`, else the
//! system's).
//!
//! A row reads the local clock as it shows: a span that ends before it
//! starts (`22:00-06:00`) runs past midnight into the next day (its days
//! name the day it starts); on a day the clock springs forward, an hour of
//! the clock never shows and a row spanning it is an hour shorter; on a
//! day it falls back, an hour shows twice and a row spanning it is an hour
//! longer (a row inside the repeated hour is in force both times).
//!
//! Pure: no threads, no clock, no I/O; the caller says what time it is
//! ([`Timestamp`]), so tests run on any date.

use std::fmt;

#[cfg(test)]
use jiff::civil::Date;
use jiff::civil::{DateTime, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::rate::{parse_rate_burst, Rate};
use crate::schedule::Limit;

/// What a row does while it is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing leaves: records wait (the overflow policy applies as the
    /// bucket fills).
    Pause,
    /// The record rate (`--rate`) in force; `None`: no record limit
    /// (`inf`).
    Rate(Option<Limit>),
}

/// One row: on `days`, from `start` to `end` on the local clock, `action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Monday is bit 0, Sunday bit 6; every day for `*` or no days given.
    days: u8,
    /// The span on the local clock: `None` for the whole day. An `end` at
    /// or before `start` runs into the next day.
    span: Option<(Time, Time)>,
    /// What the row does.
    pub action: Action,
    /// The row as written (spaces tidied), for the display and the figures.
    pub text: String,
}

/// The rows of `--schedule`, in order, and the zone they read the clock in.
#[derive(Debug, Clone)]
pub struct Timetable {
    rows: Vec<Row>,
    zone: TimeZone,
}

/// Every day of the week.
const EVERY_DAY: u8 = 0b111_1111;

/// How far ahead a change of rows is looked for: a week, and a day either
/// side for the spans running past midnight.
const DAYS_AHEAD: i64 = 8;

const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

impl Timetable {
    /// The rows in order.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The zone the rows read the clock in.
    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    /// The same rows, reading the clock in `zone`.
    pub fn in_zone(mut self, zone: TimeZone) -> Timetable {
        self.zone = zone;
        self
    }

    /// The index of the row in force at `at`: the first that matches the
    /// local time then; `None` when none does (the command line's limits
    /// apply).
    pub fn row_at(&self, at: Timestamp) -> Option<usize> {
        let local = self.zone.to_datetime(at);
        self.rows.iter().position(|row| row.matches(local))
    }

    /// The first instant after `at` at which another row (or none) comes
    /// into force, within the next week; `None` when the same row holds
    /// all week (`*` alone).
    pub fn next_change(&self, at: Timestamp) -> Option<Timestamp> {
        let now = self.row_at(at);
        let mut candidates = self.candidates(at);
        candidates.sort_unstable();
        candidates
            .into_iter()
            .filter(|&c| c > at)
            .find(|&c| self.row_at(c) != now)
    }

    /// Every instant after `at` (within [`DAYS_AHEAD`]) at which the local
    /// clock may cross a row's start or end: each start and end, earlier
    /// and later where the clock shows it twice or skips it, and the
    /// zone's transitions (where the clock jumps over a row's edge). Between
    /// two of them no row comes into force or leaves it.
    fn candidates(&self, at: Timestamp) -> Vec<Timestamp> {
        let today = self.zone.to_datetime(at).date();
        let horizon = at
            .checked_add((DAYS_AHEAD * 24).hours())
            .unwrap_or(Timestamp::MAX);
        let mut out: Vec<Timestamp> = self
            .zone
            .following(at)
            .map(|t| t.timestamp())
            .take_while(|&t| t <= horizon)
            .collect();
        let mut times: Vec<Time> = vec![Time::midnight()];
        for row in &self.rows {
            if let Some((start, end)) = row.span {
                times.extend([start, end]);
            }
        }
        for offset in -1..=DAYS_AHEAD {
            let Ok(day) = today.checked_add(offset.days()) else {
                continue;
            };
            for &time in &times {
                out.extend(self.instants(day.to_datetime(time)));
            }
        }
        out
    }

    /// The instants the local clock shows `local` at (or, where it skips
    /// it, the instants either side of the gap).
    fn instants(&self, local: DateTime) -> impl Iterator<Item = Timestamp> {
        let ambiguous = self.zone.to_ambiguous_timestamp(local);
        let earlier = ambiguous.earlier().ok();
        let later = ambiguous.later().ok();
        earlier.into_iter().chain(later)
    }
}

impl Row {
    /// Whether the row is in force at the local time `local`.
    fn matches(&self, local: DateTime) -> bool {
        let day = bit(local.date().weekday());
        let Some((start, end)) = self.span else {
            return self.days & day != 0;
        };
        let time = local.time();
        if start < end {
            return self.days & day != 0 && start <= time && time < end;
        }
        // Past midnight: from `start` on a day of the row to `end` on the
        // next.
        let yesterday = bit(local.date().weekday().previous());
        (self.days & day != 0 && time >= start) || (self.days & yesterday != 0 && time < end)
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn bit(day: Weekday) -> u8 {
    1 << day.to_monday_zero_offset()
}

/// Read `--schedule`: rows separated by `;`, each `[DAYS] [HH:MM-HH:MM]
/// ACTION` or `* ACTION`, and at most one item `@ZONE`. DAYS: day names
/// (`Mon`…`Sun`, any case) and ranges (`Mon-Fri`, `Fri-Mon`) joined by
/// commas. ACTION: `pause`, or a record rate as `--rate` takes it
/// (`50/s`, `50/s:10`, `inf`). The zone is the local one unless given.
///
/// # Errors
/// What is wrong, in words: an empty schedule or row, an unknown day or
/// zone, a bad time or span, a bad rate, a row after `*` (never reached).
pub fn parse(spec: &str) -> Result<Timetable, String> {
    let mut rows: Vec<Row> = Vec::new();
    let mut zone: Option<TimeZone> = None;
    for item in spec.split(';').map(str::trim) {
        if item.is_empty() {
            return Err(format!(
                "an empty row in '{spec}' (rows are separated by ';')"
            ));
        }
        if let Some(name) = item.strip_prefix('@') {
            if zone.is_some() {
                return Err("more than one @ZONE".to_string());
            }
            let found = TimeZone::get(name.trim())
                .map_err(|_| format!("unknown time zone '{}'", name.trim()))?;
            zone = Some(found);
            continue;
        }
        if let Some(always) = rows
            .iter()
            .find(|r| r.days == EVERY_DAY && r.span.is_none())
        {
            return Err(format!(
                "row '{item}' comes after '{always}', which always matches: it would never be in force"
            ));
        }
        rows.push(parse_row(item)?);
    }
    if rows.is_empty() {
        return Err("no rows (expected rows such as 'Mon-Fri 09:00-18:00 pause; * 50/s')".into());
    }
    Ok(Timetable {
        rows,
        zone: zone.unwrap_or_else(TimeZone::system),
    })
}

/// One row: `[DAYS] [HH:MM-HH:MM] ACTION` or `* ACTION`.
fn parse_row(item: &str) -> Result<Row, String> {
    let words: Vec<&str> = item.split_whitespace().collect();
    let (action_word, when) = words.split_last().expect("the row is not empty");
    if when.is_empty() {
        return Err(match parse_action(action_word) {
            Ok(_) => format!("row '{item}': no days or hours (write '* {action_word}' for always)"),
            Err(_) => {
                format!("row '{item}': no action (a rate such as 50/s, or pause, comes last)")
            }
        });
    }
    let action = parse_action(action_word).map_err(|why| format!("row '{item}': {why}"))?;
    let mut days = None;
    let (mut span, mut spans) = (None, 0);
    for &word in when {
        if word == "*" {
            if when.len() > 1 {
                return Err(format!("row '{item}': '*' stands alone before the action"));
            }
            days = Some(EVERY_DAY);
        } else if word.contains(':') {
            spans += 1;
            if spans > 1 {
                return Err(format!("row '{item}': more than one span of hours"));
            }
            span = parse_span(word).map_err(|why| format!("row '{item}': {why}"))?;
        } else if days.is_none() {
            days = Some(parse_days(word).map_err(|why| format!("row '{item}': {why}"))?);
        } else {
            return Err(format!(
                "row '{item}': unexpected '{word}' (days are joined by commas: Sat,Sun)"
            ));
        }
    }
    Ok(Row {
        days: days.unwrap_or(EVERY_DAY),
        span,
        action,
        text: words.join(" "),
    })
}

/// `pause`, or a record rate with its burst.
fn parse_action(word: &str) -> Result<Action, String> {
    if word.eq_ignore_ascii_case("pause") {
        return Ok(Action::Pause);
    }
    let (rate, burst) =
        parse_rate_burst(word).map_err(|why| format!("'{word}' is no rate or pause: {why}"))?;
    Ok(Action::Rate(match rate {
        Rate::Unlimited => None,
        rate => Some(Limit::records(rate, burst)),
    }))
}

/// `Mon-Fri`, `Sat,Sun`, `Mon,Wed-Fri`, `Fri-Mon` (wrapping the week).
fn parse_days(word: &str) -> Result<u8, String> {
    let mut days = 0;
    for part in word.split(',') {
        let (from, to) = match part.split_once('-') {
            Some((from, to)) => (day_number(from)?, day_number(to)?),
            None => (day_number(part)?, day_number(part)?),
        };
        let mut d = from;
        loop {
            days |= 1 << d;
            if d == to {
                break;
            }
            d = (d + 1) % 7;
        }
    }
    Ok(days)
}

fn day_number(name: &str) -> Result<usize, String> {
    let lower = name.to_ascii_lowercase();
    DAY_NAMES
        .iter()
        .position(|d| lower.len() >= 3 && d.starts_with(&lower[..3]) && is_day_name(&lower))
        .ok_or_else(|| {
            format!("unknown day '{name}' (expected Mon, Tue, Wed, Thu, Fri, Sat or Sun, or a range such as Mon-Fri)")
        })
}

/// Whether `lower` is a day's short or full name.
fn is_day_name(lower: &str) -> bool {
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    DAY_NAMES.contains(&lower) || FULL.contains(&lower)
}

/// `HH:MM-HH:MM` (the end may be `24:00`); the two must differ.
/// `00:00-24:00` is the whole day: `None`, as a row without hours.
fn parse_span(word: &str) -> Result<Option<(Time, Time)>, String> {
    let (from, to) = word
        .split_once('-')
        .ok_or_else(|| format!("'{word}' is no span of hours (expected HH:MM-HH:MM)"))?;
    let start = parse_time(from, false)?;
    let end = parse_time(to, true)?;
    if start == Time::midnight() && to == "24:00" {
        return Ok(None);
    }
    if start == end {
        return Err(format!(
            "'{word}' is empty (a whole day needs no hours: 'Mon pause')"
        ));
    }
    Ok(Some((start, end)))
}

/// `HH:MM` on the local clock; `24:00` (midnight at the end of the day)
/// where `end`.
fn parse_time(text: &str, end: bool) -> Result<Time, String> {
    let bad = || format!("'{text}' is no time of day (expected HH:MM, 00:00 to 23:59)");
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    let two = |s: &str| -> Option<i8> {
        (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let hour = two(h).ok_or_else(bad)?;
    let minute = two(m).ok_or_else(bad)?;
    if end && hour == 24 && minute == 0 {
        return Ok(Time::midnight());
    }
    Time::new(hour, minute, 0, 0).map_err(|_| bad())
}

/// The date of `at` in `zone` (for tests and the display).
#[cfg(test)]
fn local_date(zone: &TimeZone, at: Timestamp) -> Date {
    zone.to_datetime(at).date()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::tz::TimeZoneDatabase;

    fn zone(name: &str) -> TimeZone {
        TimeZoneDatabase::bundled().get(name).unwrap()
    }

    fn table(spec: &str, zone_name: &str) -> Timetable {
        parse(spec).unwrap().in_zone(zone(zone_name))
    }

    /// The instant the clock of `zone_name` shows `local` (the earlier one
    /// where it shows it twice).
    fn at(zone_name: &str, local: &str) -> Timestamp {
        let dt: DateTime = local.parse().unwrap();
        zone(zone_name)
            .to_ambiguous_timestamp(dt)
            .earlier()
            .unwrap()
    }

    fn row_text(t: &Timetable, when: Timestamp) -> Option<&str> {
        t.row_at(when).map(|i| t.rows()[i].text.as_str())
    }

    /// Every change of rows from `from` for `hours`, as (instant, row).
    fn changes(t: &Timetable, from: Timestamp, hours: i64) -> Vec<(Timestamp, Option<String>)> {
        let end = from.checked_add(hours.hours()).unwrap();
        let mut out = Vec::new();
        let mut now = from;
        while let Some(next) = t.next_change(now) {
            if next > end {
                break;
            }
            out.push((next, row_text(t, next).map(String::from)));
            now = next;
        }
        out
    }

    #[test]
    fn the_first_row_that_matches_is_in_force() {
        let t = table("Mon-Fri 09:00-18:00 pause; Mon-Fri 50/s; * 10/s", "UTC");
        // 2026-12-03 is a Thursday.
        assert_eq!(
            row_text(&t, at("UTC", "2026-12-03T10:00")),
            Some("Mon-Fri 09:00-18:00 pause")
        );
        assert_eq!(
            row_text(&t, at("UTC", "2026-12-03T18:00")),
            Some("Mon-Fri 50/s")
        );
        assert_eq!(
            row_text(&t, at("UTC", "2026-12-03T08:59:59")),
            Some("Mon-Fri 50/s")
        );
        assert_eq!(row_text(&t, at("UTC", "2026-12-05T10:00")), Some("* 10/s"));
        assert_eq!(t.rows()[0].action, Action::Pause);
    }

    #[test]
    fn no_row_matching_leaves_the_command_lines_limits() {
        let t = table("Sat,Sun 500/s", "UTC");
        assert_eq!(t.row_at(at("UTC", "2026-12-03T10:00")), None);
        assert_eq!(t.row_at(at("UTC", "2026-12-06T23:59")), Some(0));
        assert_eq!(
            t.next_change(at("UTC", "2026-12-03T10:00")),
            Some(at("UTC", "2026-12-05T00:00"))
        );
        assert_eq!(
            t.next_change(at("UTC", "2026-12-05T00:00")),
            Some(at("UTC", "2026-12-07T00:00"))
        );
    }

    #[test]
    fn a_row_spanning_midnight_runs_into_the_next_day() {
        // Fri 22:00 to Sat 06:00; Thursday night is not in it.
        let t = table("Fri 22:00-06:00 500/s; * 50/s", "UTC");
        let rows: Vec<_> = changes(&t, at("UTC", "2026-12-03T12:00"), 72);
        assert_eq!(
            rows,
            vec![
                (
                    at("UTC", "2026-12-04T22:00"),
                    Some("Fri 22:00-06:00 500/s".into())
                ),
                (at("UTC", "2026-12-05T06:00"), Some("* 50/s".into())),
            ]
        );
        assert_eq!(row_text(&t, at("UTC", "2026-12-04T02:00")), Some("* 50/s"));
        assert_eq!(
            row_text(&t, at("UTC", "2026-12-05T05:59:59")),
            Some("Fri 22:00-06:00 500/s")
        );
    }

    #[test]
    fn an_end_of_24_00_is_midnight_at_the_end_of_the_day() {
        let t = table("Mon 18:00-24:00 pause; * 1/s", "UTC");
        // 2026-12-07 is a Monday.
        assert_eq!(
            changes(&t, at("UTC", "2026-12-07T12:00"), 24),
            vec![
                (
                    at("UTC", "2026-12-07T18:00"),
                    Some("Mon 18:00-24:00 pause".into())
                ),
                (at("UTC", "2026-12-08T00:00"), Some("* 1/s".into())),
            ]
        );
    }

    /// A night row over the change of clocks lasts an hour less in spring
    /// and an hour more in autumn; a daily row comes once a day, on the
    /// local clock, over a 23-hour and a 25-hour day.
    fn across_dst(zone_name: &str, spring: &str, autumn: &str) {
        let t = table("22:00-06:00 pause; * 50/s", zone_name);
        for (day, hours) in [(spring, 7), (autumn, 9)] {
            let night = format!("{day}T22:00");
            let date: Date = day.parse().unwrap();
            let before = date.yesterday().unwrap();
            let from = at(zone_name, &format!("{before}T22:00"));
            let seen = changes(&t, from, 26);
            let start = seen[0].0;
            let end = seen[1].0;
            assert_eq!(seen[0].1.as_deref(), Some("* 50/s"), "{zone_name} {day}");
            assert_eq!(start, at(zone_name, &format!("{day}T06:00")));
            // The previous night's pause (begun at `from`) ran from 22:00
            // to 06:00 across the change: 7 h in spring, 9 h in autumn.
            assert_eq!(
                start.duration_since(from).as_hours(),
                hours,
                "{zone_name} {day}"
            );
            assert_eq!(end, at(zone_name, &night));
            assert_eq!(seen.len(), 2, "{zone_name} {day}: {seen:?}");
        }
        // Day by day across both changes: one pause a night, from 22:00 to
        // 06:00 local, never skipped, never twice.
        let t = table("22:00-06:00 pause; * 50/s", zone_name);
        let from = at(
            zone_name,
            &format!(
                "{}T12:00",
                spring
                    .parse::<Date>()
                    .unwrap()
                    .checked_sub(3.days())
                    .unwrap()
            ),
        );
        let seen = changes(&t, from, 24 * 7);
        assert_eq!(seen.len(), 14, "{seen:?}");
        for (i, (when, row)) in seen.iter().enumerate() {
            let local = t.zone().to_datetime(*when).time();
            if i % 2 == 0 {
                assert_eq!(
                    (local, row.as_deref()),
                    (Time::constant(22, 0, 0, 0), Some("22:00-06:00 pause"))
                );
            } else {
                assert_eq!(
                    (local, row.as_deref()),
                    (Time::constant(6, 0, 0, 0), Some("* 50/s"))
                );
            }
        }
    }

    #[test]
    fn rows_across_the_change_of_clocks_in_los_angeles() {
        across_dst("America/Los_Angeles", "2026-03-08", "2026-11-01");
    }

    #[test]
    fn rows_across_the_change_of_clocks_in_berlin() {
        across_dst("Europe/Berlin", "2026-03-29", "2026-10-25");
    }

    #[test]
    fn a_row_inside_the_skipped_hour_starts_when_the_clock_jumps_past_its_start() {
        // Los Angeles, 2026-03-08: 02:00 PST is 03:00 PDT. A row from
        // 02:30 starts at the jump (10:00 UTC) and ends at 04:00 PDT.
        let t = table("02:30-04:00 pause; * 50/s", "America/Los_Angeles");
        let seen = changes(&t, at("America/Los_Angeles", "2026-03-08T00:00"), 12);
        let jump: Timestamp = "2026-03-08T10:00:00Z".parse().unwrap();
        assert_eq!(seen[0], (jump, Some("02:30-04:00 pause".into())));
        assert_eq!(seen[1].0, at("America/Los_Angeles", "2026-03-08T04:00"));
        assert_eq!(seen[1].0.duration_since(jump).as_hours(), 1);
    }

    #[test]
    fn a_row_inside_the_repeated_hour_is_in_force_both_times() {
        // Berlin, 2026-10-25: 03:00 CEST is 02:00 CET again.
        let t = table("02:15-02:45 10/s; * 50/s", "Europe/Berlin");
        let seen = changes(&t, at("Europe/Berlin", "2026-10-25T00:00"), 6);
        let times: Vec<String> = seen.iter().map(|(w, _)| w.to_string()).collect();
        assert_eq!(
            times,
            [
                "2026-10-25T00:15:00Z",
                "2026-10-25T00:45:00Z",
                "2026-10-25T01:15:00Z",
                "2026-10-25T01:45:00Z"
            ]
        );
        assert_eq!(local_date(t.zone(), seen[3].0).to_string(), "2026-10-25");
    }

    #[test]
    fn one_row_always_in_force_never_changes() {
        let t = table("* 50/s", "UTC");
        assert_eq!(t.next_change(at("UTC", "2026-12-03T10:00")), None);
    }

    #[test]
    fn rows_read() {
        let t = parse("mon,wed-fri 08:00-09:30 20/s:5 ; sat pause; * inf; @UTC").unwrap();
        assert_eq!(t.rows().len(), 3);
        assert_eq!(t.rows()[0].days, 0b001_1101);
        assert_eq!(t.rows()[0].text, "mon,wed-fri 08:00-09:30 20/s:5");
        match t.rows()[0].action {
            Action::Rate(Some(limit)) => assert_eq!(limit.burst, 5),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.rows()[2].action, Action::Rate(None));
        assert_eq!(t.zone().iana_name(), Some("UTC"));
        assert_eq!(parse_days("Fri-Mon").unwrap(), 0b111_0001);
        assert_eq!(parse_days("Sunday").unwrap(), 0b100_0000);
        // 24:00 ends the day: 00:00-24:00 is the whole day, as no hours.
        let whole = parse("Thu 00:00-24:00 pause; @UTC").unwrap();
        assert_eq!(whole.rows()[0].span, None);
        assert_eq!(whole.rows()[0].days, parse_days("Thu").unwrap());
        assert!(parse("Thu 00:00-24:00 09:00-10:00 pause")
            .unwrap_err()
            .contains("more than one span"));
    }

    #[test]
    fn malformed_schedules_say_why() {
        for (spec, why) in [
            ("", "an empty row"),
            ("Mon pause;", "an empty row"),
            ("pause", "no days or hours"),
            ("Mon-Fry 09:00-18:00 pause", "unknown day 'Fry'"),
            ("09:00-25:00 pause", "'25:00' is no time of day"),
            ("9:00-18:00 pause", "'9:00' is no time of day"),
            ("09:00-09:00 pause", "is empty"),
            ("*", "no action (a rate such as 50/s, or pause, comes last)"),
            ("Mon", "no action"),
            ("pause", "write '* pause' for always"),
            ("09:00 pause", "no span of hours"),
            ("Mon 09:00-18:00 fast", "'fast' is no rate or pause"),
            ("Mon 09:00-18:00 0/s", "'0/s' is no rate or pause"),
            ("* 50/s; Mon pause", "would never be in force"),
            (
                "Mon pause; @Mars/Olympus",
                "unknown time zone 'Mars/Olympus'",
            ),
            ("@UTC; @UTC; * 1/s", "more than one @ZONE"),
            ("@UTC", "no rows"),
            ("Mon Tue pause", "unexpected 'Tue'"),
            ("* Mon pause", "'*' stands alone"),
        ] {
            let err = parse(spec).unwrap_err();
            assert!(err.contains(why), "{spec:?}: {err}");
            assert!(!err.contains('\n'), "{spec:?}: {err}");
        }
    }
}
