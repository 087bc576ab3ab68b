//! The `--schedule` section: the row in force, and when the next comes.

use serde::Serialize;

use super::exposition::Exposition;
use super::{Clause, PauseEnd, Section, Spot};

/// The row of `--schedule` in force (`timetable`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleRow {
    /// Its number, counting the rows from 1; 0 when no row matches (the
    /// command line's limits apply).
    pub row: usize,
    /// The row as written (`Mon-Fri 09:00-18:00 pause`); `null` when no
    /// row matches.
    pub text: Option<String>,
    /// When the next row comes into force, RFC 3339 with the offset of
    /// the schedule's zone; `null` when the same row holds all week.
    pub until: Option<String>,
    /// The zone the rows read the clock in (an IANA name, or `local`).
    pub zone: String,
    /// `until` in seconds since the epoch, for `--metrics`.
    #[serde(skip)]
    pub until_unix: Option<f64>,
    /// `until` as the zone's clock shows it, for the display: `18:00` on
    /// the same day, `Mon 09:00` within the week ([`clock_at`]).
    #[serde(skip)]
    pub until_clock: Option<String>,
    /// The row pauses (`pause`).
    #[serde(skip)]
    pub pauses: bool,
}

/// When `at` is on the clock of `zone`, seen at `now`, in few words: `18:00`
/// on the same day, `Mon 09:00` within the next six days, else the date
/// (`2026-12-04 09:00`); the zone's abbreviation after it (`18:00 CET`)
/// when `zone` is not the local one.
pub fn clock_at(at: jiff::Timestamp, now: jiff::Timestamp, zone: &jiff::tz::TimeZone) -> String {
    let (at, today) = (at.to_zoned(zone.clone()), now.to_zoned(zone.clone()).date());
    let days = (at.date() - today).get_days();
    let format = match days {
        0 => "%H:%M",
        1..=6 => "%a %H:%M",
        _ => "%Y-%m-%d %H:%M",
    };
    let mut text = at.strftime(format).to_string();
    if *zone != jiff::tz::TimeZone::system() {
        text.push_str(&at.strftime(" %Z").to_string());
    }
    text
}

impl ScheduleRow {
    /// The summary's clause: `schedule row 1 'Mon-Fri 09:00-18:00 pause'
    /// until 2026-12-04T18:00:00+01:00`.
    fn clause(&self) -> String {
        let row = match &self.text {
            Some(text) => format!("schedule row {} '{text}'", self.row),
            None => "schedule: no row (the command line's limits)".to_string(),
        };
        match &self.until {
            Some(until) => format!("{row} until {until}"),
            None => row,
        }
    }
}

impl Section for ScheduleRow {
    fn key(&self) -> &'static str {
        "schedule"
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self)
    }

    fn clauses(&self) -> Vec<Clause> {
        vec![(self.clause(), ",")]
    }

    /// A row that pauses ends at the next row's start.
    fn pause_end(&self) -> Option<PauseEnd> {
        if !self.pauses {
            return None;
        }
        Some(PauseEnd {
            clock: self.until_clock.clone()?,
            at: self.until.clone()?,
        })
    }

    /// On the display: `row 2 * 50/s`, `no row`.
    fn shown(&self) -> Option<(Spot, String)> {
        let text = match &self.text {
            Some(text) => format!("row {} {text}", self.row),
            None => "no row".to_string(),
        };
        Some((Spot::InForce, text))
    }

    fn metrics(&self, out: &mut Exposition) {
        out.gauge(
            "drip_schedule_row",
            "The row of --schedule in force, counting from 1; 0 when no row matches.",
            self.row as f64,
        );
        if let Some(at) = self.until_unix {
            out.gauge(
                "drip_schedule_next_change_timestamp_seconds",
                "When the next row of --schedule comes into force, seconds since the epoch.",
                at,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_that_pauses_says_when_the_pause_ends() {
        let row = |pauses| ScheduleRow {
            row: 1,
            text: Some("Mon-Fri 09:00-18:00 pause".into()),
            until: Some("2026-12-04T18:00:00+01:00".into()),
            zone: "Europe/Berlin".into(),
            until_unix: None,
            until_clock: Some("18:00".into()),
            pauses,
        };
        let end = PauseEnd {
            clock: "18:00".into(),
            at: "2026-12-04T18:00:00+01:00".into(),
        };
        assert_eq!(row(true).pause_end(), Some(end));
        assert_eq!(row(false).pause_end(), None);
        let all_week = ScheduleRow {
            until: None,
            until_clock: None,
            ..row(true)
        };
        assert_eq!(all_week.pause_end(), None, "no next row, no end");
    }

    #[test]
    fn a_clock_time_is_said_in_few_words() {
        let zone = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
        let at = |text: &str| -> jiff::Timestamp {
            jiff::civil::DateTime::strptime("%Y-%m-%d %H:%M", text)
                .unwrap()
                .to_zoned(zone.clone())
                .unwrap()
                .timestamp()
        };
        let now = at("2026-12-04 10:30");
        let suffix = if zone == jiff::tz::TimeZone::system() {
            ""
        } else {
            " CET"
        };
        for (then, said) in [
            ("2026-12-04 18:00", "18:00"),
            ("2026-12-07 09:00", "Mon 09:00"),
            ("2026-12-11 09:00", "2026-12-11 09:00"),
        ] {
            assert_eq!(clock_at(at(then), now, &zone), format!("{said}{suffix}"));
        }
    }
}
