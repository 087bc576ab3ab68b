//! Limits by the clock on real processes: `--ramp` measured from the
//! records stamped as they arrive, `--schedule` rows put in force on the
//! wall clock (a zone whose offset puts a row's edge a few seconds from
//! now, so a run takes seconds), shown in `--stats-json`, `--metrics` and
//! `drip ctl … info`; malformed specs refused.

use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{command, drip, spawn, timed_lines, until_judged, wait_for};

/// The records a ramp from 0 to `rate` over `over` seconds has let go
/// `t` seconds after its start (the integral of its rate).
fn ramp_integral(rate: f64, over: f64, t: f64) -> f64 {
    if t <= over {
        rate * t * t / (2.0 * over)
    } else {
        rate * (over / 2.0 + (t - over))
    }
}

/// When (s after the ramp's start) the ramp lets record `n` go.
fn ramp_time(rate: f64, over: f64, n: f64) -> f64 {
    let at_end = rate * over / 2.0;
    if n <= at_end {
        (2.0 * over * n / rate).sqrt()
    } else {
        over + (n - at_end) / rate
    }
}

/// One run of `drip -r 200/s --ramp 3s` over 600 records (300 in the ramp,
/// 300 in the 1.5 s after it), judged slice by slice: `None` when judged,
/// or why it could not be.
fn a_ramp_run() -> Option<String> {
    const RATE: f64 = 200.0;
    const OVER: f64 = 3.0;
    let input = common::numbered(1..=600);
    let mut cmd = command(&["-r", "200/s", "--ramp", "3s"]);
    cmd.stdin(Stdio::piped());
    let origin = Instant::now();
    let mut child = spawn(cmd);
    let pid = child.id();
    let waiting = common::watch_cpu_waits(pid, origin);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let lines = timed_lines(&mut child, origin);
    assert!(wait_for(&mut child, Duration::from_secs(30)).success());
    let samples = waiting.join().unwrap();
    let waited: f64 = samples.last().map_or(0.0, |s| s.1.values().sum());
    assert_eq!(lines.len(), 600);
    assert!(lines
        .iter()
        .enumerate()
        .all(|(i, (_, l))| *l == (i + 1).to_string()));
    let times: Vec<f64> = lines.iter().map(|(t, _)| t - lines[0].0).collect();
    // Never ahead of the line, however busy the machine (it only makes
    // records late): record k is seen no sooner than the line's time of k
    // after the first, less the line's time of record 1 (the first may be
    // seen that late). A drip that does not ramp is ahead by a second and
    // more.
    let ahead = (1..times.len())
        .map(|k| ramp_time(RATE, OVER, k as f64) - ramp_time(RATE, OVER, 1.0) - times[k])
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(ahead <= 0.0, "record seen {ahead:.3} s ahead of the line");
    // The rate in a slice is read from the time each run of ten records
    // took, beside the line's: the median of those ratios. A wake-up
    // drip lost on a busy machine (the schedule restarts from it rather
    // than catch up in a burst) or a reader held up stretches a few runs
    // and leaves the median, where a ramp off the line moves every run.
    const RUN: usize = 10;
    let mut worst = String::new();
    let mut judged = true;
    let mut slices = Vec::new();
    for slice in 0..4 {
        let (a, b) = (0.5 + slice as f64, 1.5 + slice as f64);
        let first = ramp_integral(RATE, OVER, a).ceil() as usize;
        let last = (ramp_integral(RATE, OVER, b).ceil() as usize - 1).min(599);
        let mut ratios: Vec<f64> = (first..last - RUN + 1)
            .step_by(RUN)
            .map(|k| {
                let line =
                    ramp_time(RATE, OVER, (k + RUN) as f64) - ramp_time(RATE, OVER, k as f64);
                (times[k + RUN] - times[k]) / line
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        let line = (last - first) as f64
            / (ramp_time(RATE, OVER, last as f64) - ramp_time(RATE, OVER, first as f64));
        let measured = line / median;
        let off = measured / line - 1.0;
        slices.push(format!("{a}-{b} s {:+.2} %", off * 100.0));
        if off.abs() <= 0.02 {
            continue;
        }
        // Off the line: the machine's doing or the ramp's, which a run on
        // a busy machine cannot tell apart (a slow ramp hidden under a
        // busy machine must not pass): the run is made again, but when
        // drip never waited for a CPU.
        assert!(
            waited > 0.005,
            "{a}-{b} s: {measured:.1}/s, the line {line:.1}/s ({:+.1} %), \
             though drip's threads waited only {waited:.3} s for a CPU",
            off * 100.0
        );
        judged = false;
        worst = format!(
            "{a}-{b} s: {measured:.1}/s, the line {line:.1}/s ({:+.1} %)",
            off * 100.0
        );
    }
    eprintln!("the ramp's rate against the line's: {}", slices.join(", "));
    if judged {
        return None;
    }
    Some(format!(
        "{worst}; drip's threads waited {waited:.3} s for a CPU"
    ))
}

#[test]
fn a_ramp_rises_on_the_line_slice_by_slice() {
    let _t = common::beside_timing();
    // 200/s over 3 s from 0: in each second from 0.5 s to 4.5 s the rate
    // is within 2 % of the line's (the ramp's, then 200/s).
    // A run with a slice off the line is made again (it fails when drip
    // never waited for a CPU): only a run on the line passes.
    until_judged(6, Duration::from_secs(120), a_ramp_run);
}

#[test]
fn a_ramp_from_a_start_rate_takes_the_time_its_integral_says() {
    let _t = common::beside_timing();
    // 50/s rising to 100/s over 2 s lets 150 records go in the ramp: 250
    // records take 3 s, where 100/s alone takes 2.5 s.
    let start = Instant::now();
    let (status, out, err) = common::run(
        &[
            "-r",
            "100/s",
            "--ramp",
            "50/s:2s",
            "--stats-json",
            "/dev/stderr",
            "--stats-interval",
            "500ms",
        ],
        &common::numbered(1..=251),
    );
    let took = start.elapsed().as_secs_f64();
    assert_eq!(status, 0, "{err}");
    assert_eq!(out.lines().count(), 251);
    assert!(took >= 3.0, "{took} s");
    let json: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(json["ramp"]["from"], 0.5, "{json}");
    assert_eq!(json["ramp"]["fraction"], 1.0, "{json}");
    // The stats lines say where the ramp stands as it rises.
    let fractions: Vec<f64> = err
        .lines()
        .rev()
        .skip(1)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|tick| tick["ramp"]["fraction"].as_f64().expect("a ramp"))
        .collect();
    assert!(
        fractions.iter().any(|&f| f > 0.5 && f < 1.0),
        "{fractions:?}: {err}"
    );
}

/// A zone (a POSIX `TZ`) whose clock shows a new minute about `ahead`
/// seconds from now, and the minute its clock shows now, `HH:MM`.
fn zone_turning_in(ahead: f64) -> (String, String, f64) {
    let now = common::unix_now();
    // The local clock is UTC + offset: the minute turns when
    // now + ahead + offset is a whole minute.
    let offset = (60.0 - (now + ahead).rem_euclid(60.0)).floor() as i64 % 60;
    let local = now as i64 + offset;
    let minute = local.div_euclid(60).rem_euclid(24 * 60);
    let turns = ((local.div_euclid(60) + 1) * 60 - offset) as f64;
    (
        format!("ABC-0:00:{offset:02}"),
        format!("{:02}:{:02}", minute / 60, minute % 60),
        turns,
    )
}

fn hhmm(minute: i64) -> String {
    let m = minute.rem_euclid(24 * 60);
    format!("{:02}:{:02}", m / 60, m % 60)
}

#[test]
fn a_schedule_row_pauses_until_its_end_then_its_rate_takes_over() {
    let _t = common::beside_timing();
    // The row for this minute pauses; the next row lets 20/s go. Ten
    // records arrive in the pause: the bucket holds 6, and drop-newest
    // drops the rest, as when paused by drip ctl. None leaves before the
    // minute turns; then one every 50 ms.
    let (tz, minute, turns) = zone_turning_in(3.0);
    let (h, m) = minute.split_once(':').unwrap();
    let next = hhmm(h.parse::<i64>().unwrap() * 60 + m.parse::<i64>().unwrap() + 1);
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let metrics = dir.path().join("drip.prom");
    let spec = format!("{minute}-{next} pause; * 20/s");
    let mut cmd = command(&[
        "--schedule",
        &spec,
        "-c",
        "6",
        "--overflow",
        "drop-newest",
        "--name",
        "timed-schedule",
        "--stats-json",
        stats.to_str().unwrap(),
        "--metrics",
        metrics.to_str().unwrap(),
    ]);
    cmd.env("TZ", &tz).stdin(Stdio::piped());
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    cmd.env("XDG_RUNTIME_DIR", &runtime);
    let mut child = spawn(cmd);
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(common::numbered(1..=10).as_bytes())
        .unwrap();
    // While paused: drip ctl info names the row, its end and the pause.
    let info = ctl_info(&runtime, "timed-schedule");
    if common::unix_now() < turns - 0.2 {
        assert_eq!(info["paused"], true, "{info}");
        assert_eq!(info["schedule"]["row"], 1, "{info}");
        assert_eq!(info["schedule"]["text"], format!("{minute}-{next} pause"));
    }
    drop(stdin);
    let clock = Instant::now();
    let started = common::unix_now();
    let (lines, status) = lines_and_status(&mut child, clock);
    let err = common::stderr_of(&mut child);
    assert!(status.success(), "{status:?}: {err}");
    let seen: Vec<f64> = lines.iter().map(|(t, _)| started + t).collect();
    assert_eq!(
        lines.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5", "6"]
    );
    // Seen late is all a busy machine does: never before the minute turns.
    assert!(
        seen[0] >= turns - 0.002,
        "the first left {:.3} s early",
        turns - seen[0]
    );
    // 20/s from there: 5 gaps of 50 ms at least (no catch-up burst).
    let spread = seen[5] - seen[0];
    assert!(spread >= 0.25 - 0.002, "{spread}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["written"], 6, "{json}");
    assert_eq!(json["dropped_newest"], 4, "{json}");
    assert_eq!(json["schedule"]["row"], 2, "{json}");
    assert_eq!(json["schedule"]["text"], "* 20/s", "{json}");
    assert_eq!(json["schedule"]["zone"], "local", "{json}");
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.contains("drip_schedule_row{drip=\"timed-schedule\"} 2"),
        "{prom}"
    );
    assert!(
        prom.contains("drip_paused{drip=\"timed-schedule\"} 0"),
        "{prom}"
    );
}

/// Under a row that pauses, the display and the stats stream say when the
/// pause ends: `paused until HH:MM` (with the weekday when that is another
/// day), the start of the row after it; `paused_until` in RFC 3339.
#[test]
fn a_pause_of_the_schedule_says_when_it_ends() {
    let _t = common::beside_timing();
    // A row from an hour ago to two hours from now, on a UTC clock.
    let minute = common::unix_now() as i64 / 60;
    let (from, to) = (hhmm(minute - 60), hhmm(minute + 120));
    let spec = format!("{from}-{to} pause; * 20/s");
    let mut cmd = command(&[
        "--schedule",
        &spec,
        "--progress",
        "--stats-interval",
        "100ms",
    ]);
    cmd.env("TZ", "UTC0").stdin(Stdio::piped());
    let mut child = spawn(cmd);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"1\n2\n").unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { stderr }, &mut text).unwrap();
        text
    });
    std::thread::sleep(Duration::from_millis(1500));
    common::send_signal(&child, libc::SIGTERM);
    drop(stdin);
    let status = wait_for(&mut child, Duration::from_secs(10));
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(143), "{err:?}");
    // The display's sign, last on its line: `paused until 02:15`, or
    // `paused until Tue 02:15` past midnight.
    let said = err
        .split("paused until ")
        .nth(1)
        .and_then(|rest| rest.split(['\x1b', '\r', '\n']).next())
        .unwrap_or_else(|| panic!("no end of the pause said: {err:?}"));
    assert!(
        said == to || (said.len() == to.len() + 4 && said.ends_with(&format!(" {to}"))),
        "{said:?} for {to}: {err:?}"
    );
    // Each line of the stream while paused: the same end, in RFC 3339.
    let line = err
        .lines()
        .find(|l| l.contains("\"paused\":true"))
        .unwrap_or_else(|| panic!("no stats line while paused: {err:?}"));
    let tick: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap();
    let until = tick["paused_until"].as_str().unwrap_or_default();
    assert!(until.ends_with(&format!("T{to}:00+00:00")), "{tick}");
    // And the row in force, as in --stats-json.
    assert_eq!(tick["schedule"]["row"], 1, "{tick}");
    assert_eq!(tick["schedule"]["until"], until, "{tick}");
}

/// `drip ctl NAME info`, asked until the drip listens (at most 10 s).
fn ctl_info(runtime: &std::path::Path, name: &str) -> serde_json::Value {
    let began = Instant::now();
    loop {
        let out = command(&["ctl", name, "info"])
            .env("XDG_RUNTIME_DIR", runtime)
            .output()
            .unwrap();
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).unwrap();
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_rate_of_the_row_in_force_paces() {
    let _t = common::beside_timing();
    // The row for this minute and the next (not turning for over 60 s):
    // 10/s, whatever --rate says.
    let (tz, minute, _) = zone_turning_in(90.0);
    let spec = format!("{minute}-{} 10/s; * 1/s", {
        let (h, m) = minute.split_once(':').unwrap();
        hhmm(h.parse::<i64>().unwrap() * 60 + m.parse::<i64>().unwrap() + 2)
    });
    let mut cmd = command(&["-r", "1000/s", "--schedule", &spec, "--stats"]);
    cmd.env("TZ", &tz).stdin(Stdio::piped());
    let mut child = spawn(cmd);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(common::numbered(1..=11).as_bytes())
        .unwrap();
    let start = Instant::now();
    let (lines, status) = lines_and_status(&mut child, start);
    let took = start.elapsed().as_secs_f64();
    assert!(status.success());
    assert_eq!(lines.len(), 11);
    // One every 100 ms (1000/s would take 10 ms for all), never sooner:
    // record k seen no sooner than k − 1 intervals after the first was.
    let times: Vec<f64> = lines.iter().map(|(t, _)| *t).collect();
    let ahead = common::ahead_of_first(&times, 0.1);
    assert!(ahead <= 0.002, "{ahead} s ahead: {lines:?}");
    assert!(common::median_gap(&times) >= 0.098, "{lines:?}");
    assert!(took < 30.0);
    let err = common::stderr_of(&mut child);
    // --stats names the row, and when the next comes into force.
    let summary = err
        .lines()
        .filter(|l| l.starts_with("drip: "))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        summary.contains(&format!(
            "schedule row 1 '{spec_row}' until ",
            spec_row = spec.split(';').next().unwrap()
        )),
        "{summary}: {err}"
    );
}

#[test]
fn malformed_schedules_and_ramps_are_usage_errors_on_one_line() {
    for (args, why) in [
        (
            vec!["--schedule", "Mon-Fry 09:00-18:00 pause"],
            "drip: --schedule: row 'Mon-Fry 09:00-18:00 pause': unknown day 'Fry'",
        ),
        (
            vec!["--schedule", "* 50/s; Mon pause"],
            "drip: --schedule: row 'Mon pause' comes after '* 50/s'",
        ),
        (
            vec!["--schedule", "09:00-25:00 pause"],
            "drip: --schedule: row '09:00-25:00 pause': '25:00' is no time of day",
        ),
        (
            vec!["--schedule", "* pause; @Nowhere/Atall"],
            "drip: --schedule: unknown time zone 'Nowhere/Atall'",
        ),
        (
            vec!["--schedule", "* 50/s", "--share", "quota"],
            "drip: --schedule: not with --share",
        ),
        (
            vec!["--ramp", "10s", "--share", "quota"],
            "drip: --ramp: not with --share",
        ),
        (
            vec!["-r", "5/s", "--ramp", "10s", "--budget", "100/day@UTC"],
            "drip: --ramp: not with --budget",
        ),
        (
            vec!["-r", "5/s", "--ramp", "10/s:1s"],
            "drip: --ramp: the start rate 10/s must be below the rate",
        ),
        (vec!["--ramp", "0s"], "drip: invalid value '0s' for '--ramp"),
        (
            vec!["--ramp", "fast"],
            "drip: invalid value 'fast' for '--ramp",
        ),
    ] {
        let out = drip(&args).write_stdin("").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with(why), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn drip_ctl_steers_a_scheduled_drip_until_the_next_row_starts() {
    let _t = common::beside_timing();
    // Two rows of 50/s, the second starting in 4 s. drip ctl sets 2/s at
    // once: records leave 500 ms apart until the second row starts and
    // puts 50/s in force again.
    until_judged(3, Duration::from_secs(60), a_steered_run);
}

/// One run of [`drip_ctl_steers_a_scheduled_drip_until_the_next_row_starts`]:
/// `None` when judged, or why not (drip took too long to start).
fn a_steered_run() -> Option<String> {
    let (tz, minute, turns) = zone_turning_in(4.0);
    let (h, m) = minute.split_once(':').unwrap();
    let next = hhmm(h.parse::<i64>().unwrap() * 60 + m.parse::<i64>().unwrap() + 1);
    let spec = format!("{minute}-{next} 50/s; * 50/s");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&["--schedule", &spec, "--name", "timed-steered"]);
    cmd.env("TZ", &tz)
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::piped());
    let mut child = spawn(cmd);
    let mut stdin = child.stdin.take().unwrap();
    let info = ctl_info(dir.path(), "timed-steered");
    assert_eq!(info["schedule"]["row"], 1, "{info}");
    let out = command(&["ctl", "timed-steered", "rate", "2/s"])
        .env("XDG_RUNTIME_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steered = common::unix_now();
    if steered > turns - 2.0 {
        let _ = child.kill();
        let _ = child.wait();
        return Some(format!(
            "steered only {:.2} s before the row's start",
            turns - steered
        ));
    }
    stdin
        .write_all(common::numbered(1..=120).as_bytes())
        .unwrap();
    drop(stdin);
    let clock = Instant::now();
    let started = common::unix_now();
    let (lines, status) = lines_and_status(&mut child, clock);
    assert!(status.success());
    assert_eq!(lines.len(), 120);
    let seen: Vec<f64> = lines.iter().map(|(t, _)| started + t).collect();
    let before: Vec<f64> = seen.iter().copied().filter(|&t| t < turns).collect();
    let after: Vec<f64> = seen.iter().copied().filter(|&t| t >= turns + 0.1).collect();
    // At 2/s: a record every 500 ms at most before the row starts (at
    // 50/s all 120 would be gone in 2.4 s).
    assert!(
        before.len() as f64 <= (turns - steered) * 2.0 + 2.0,
        "{} records in {:.2} s",
        before.len(),
        turns - steered
    );
    assert!(before.len() >= 2, "{before:?}");
    // Then 50/s: the rest leave 20 ms apart.
    assert!(after.len() >= 100, "{}", after.len());
    assert!(common::median_gap(&after) < 0.03, "{after:?}");
    assert!(common::ahead_of_first(&after, 0.02) <= 0.002);
    None
}

#[test]
fn during_a_ramp_max_wait_refuses_nothing_at_arrival_and_expires_as_usual() {
    let _t = common::beside_timing();
    // 10/s from 0 over 5 s, 300 ms at most in the bucket: after the first,
    // none leaves within 300 ms; none is refused as it arrives (there is no
    // forecast during the ramp), each expires.
    let (status, out, err) = common::run(
        &[
            "-r",
            "10/s",
            "--ramp",
            "5s",
            "--max-wait",
            "300ms",
            "-o",
            "drop-newest",
            "--stats-json",
            "/dev/stderr",
        ],
        &common::numbered(1..=20),
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, "1\n");
    let json: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(json["refused"], 0, "{json}");
    assert_eq!(json["expired"], 19, "{json}");
    let fraction = json["ramp"]["fraction"].as_f64().unwrap();
    assert!(fraction > 0.0 && fraction < 1.0, "{json}");
}

/// `child`'s stdout, each line stamped as it arrives (seconds since
/// `clock`), and how `child` ended: one that has not ended within 30 s is
/// killed and the test fails (a drip left paused would hang it).
fn lines_and_status(
    child: &mut std::process::Child,
    clock: Instant,
) -> (Vec<(f64, String)>, std::process::ExitStatus) {
    use std::io::Read;
    let mut out = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let (mut lines, mut pending, mut buf) = (Vec::new(), Vec::new(), [0u8; 65536]);
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            let t = clock.elapsed().as_secs_f64();
            pending.extend_from_slice(&buf[..n]);
            while let Some(i) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                lines.push((t, String::from_utf8_lossy(&line[..i]).into_owned()));
            }
        }
        lines
    });
    let status = wait_for(child, Duration::from_secs(30));
    (reader.join().unwrap(), status)
}
