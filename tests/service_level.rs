//! The bucket sized by a service level: `--capacity DURATION`, records that
//! cannot make `--max-wait` refused at arrival, and the wait a record
//! arriving now would face, against the real binary.
//!
//! What drip decides at a record's arrival (what it refuses, drops or
//! evicts) is checked at once: the input comes in one write, so it is
//! read at once and no clock decides it. What the clock decides can be
//! broken by a busy machine: a last record 50 ms short of its `--max-wait`
//! expires once drip's wake-ups come that late all told (each one more
//! than 5 ms late restarts its schedule), a line of `--stats-interval`
//! comes late, and a reader woken late stamps its lines late. So each run
//! is watched ([`Watch`]): how long drip's threads waited for a CPU (from
//! record 1's departure on, where the records' times count from it), how
//! long this test's readers waited for one before a read returned, and
//! how late a 1 ms timer of this process came back. A clock check that
//! fails where none of them reached [`HELD_UP`] fails at once; where one
//! did, the run is not judged and is made again
//! ([`common::until_judged`]): a test none of whose runs could be judged
//! fails as not judged.

use crate::common;

use std::io::Read;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{command, drip, feed, json_lines, numbered, spawn, wait_for};
use predicates::prelude::*;

/// How long drip or a reader may have been held up (s) before a clock
/// check it failed is not judged: under the least margin of these checks,
/// the 50 ms a last record has to spare under `--max-wait`, which drip's
/// wake-ups must lose all told (past the 5 ms each may be late at 10/s)
/// to make it expire.
const HELD_UP: f64 = 0.02;

/// A wake-up of the reference timer later than this (s) counts as held
/// up: at 10/s, drip's schedule restarts from a wake-up that late.
const TIMER_LATE: f64 = 0.005;

/// Runs of a test that could not be judged before it fails as not judged,
/// and the time they may take all told.
const TRIES: usize = 5;
const BUDGET: Duration = Duration::from_secs(60);

/// How long (s) the calling thread has waited for a CPU while runnable,
/// all told (the second field of `/proc/thread-self/schedstat`); 0 where
/// the kernel does not keep it.
fn cpu_wait_here() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// Read `from` to the end, stamping each line with the time (s since
/// `start`) its read returned; and the longest (s) this thread waited for
/// a CPU before a read returned, as late as a stamp may be.
fn stamped(mut from: impl Read, start: Instant) -> (Vec<(f64, String)>, f64) {
    let mut lines = Vec::new();
    let mut pending = Vec::new();
    let mut buf = [0u8; 65536];
    let mut late: f64 = 0.0;
    let mut waited = cpu_wait_here();
    loop {
        let n = from.read(&mut buf).expect("read");
        let t = start.elapsed().as_secs_f64();
        let now = cpu_wait_here();
        late = late.max(now - waited);
        waited = now;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            lines.push((t, String::from_utf8_lossy(&line[..i]).into_owned()));
        }
    }
    (lines, late)
}

/// How a run was served, watched from its start: drip's threads' waits
/// for a CPU (sampled every 10 ms, [`common::watch_cpu_waits`]), and a
/// timer of this process's own (1 ms sleeps).
struct Watch {
    drip: JoinHandle<Vec<common::CpuWaitSample>>,
    done: Arc<AtomicBool>,
    timer: JoinHandle<f64>,
}

impl Watch {
    /// Watch `child` (drip) until it is waited for; times in seconds since
    /// `start`, as the stamps of its lines.
    fn start(child: &Child, start: Instant) -> Watch {
        let drip = common::watch_cpu_waits(child.id(), start);
        let done = Arc::new(AtomicBool::new(false));
        let timer = {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut late = 0.0;
                while !done.load(Ordering::Relaxed) {
                    let before = Instant::now();
                    std::thread::sleep(Duration::from_millis(1));
                    let over = before.elapsed().as_secs_f64() - 0.001;
                    if over > TIMER_LATE {
                        late += over;
                    }
                }
                late
            })
        };
        Watch { drip, done, timer }
    }

    /// Once drip has been waited for: how the run was served, counting
    /// drip's waits from `from` on (s since the start: its start-up, all
    /// threads starting at once, does not move a record that arrives after
    /// it), the timer's over the run, and `reader`, the longest a reader of
    /// drip's output waited for a CPU before a read returned.
    fn served(self, reader: f64, from: f64) -> Served {
        self.done.store(true, Ordering::Relaxed);
        let timer = self.timer.join().unwrap();
        let samples = self.drip.join().unwrap();
        let drip: f64 = common::threads_cpu_wait_between(&samples, from, f64::INFINITY);
        Served {
            held_up: [drip, reader, timer].iter().any(|&s| s >= HELD_UP),
            account: format!(
                "drip's threads waited {drip:.3} s for a CPU from {from:.2} s on, a reader \
                 {reader:.3} s before a read, and a 1 ms timer here came back {timer:.3} s late"
            ),
        }
    }
}

/// How the machine served a run ([`Watch::served`]).
struct Served {
    /// Whether drip, a reader or this process was held up for [`HELD_UP`]
    /// or more.
    held_up: bool,
    /// The figures, in words.
    account: String,
}

/// A check of what the clock decides: `Ok` when it `holds`; otherwise the
/// run is not judged (`Err`, saying why) where the machine held it up, and
/// the test fails where it served the run in time.
fn check(holds: bool, served: &Served, what: impl FnOnce() -> String) -> Result<(), String> {
    let account = &served.account;
    match (holds, served.held_up) {
        (true, _) => Ok(()),
        (false, true) => Err(format!("{}; {account}", what())),
        (false, false) => panic!("{}\n(not the machine's doing: {account})", what()),
    }
}

/// `drip ARGS` over `input` (fed at once, in one write), watched from its
/// start: its status, the lines of its stdout with the time (s) each was
/// seen, its stderr, and the longest its reader waited for a CPU before a
/// read returned ([`stamped`]); and the [`Watch`], to ask once the run is
/// read.
fn watched_run(args: &[&str], input: &str) -> (i32, Vec<(f64, String)>, String, f64, Watch) {
    let start = Instant::now();
    let mut child = command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let watch = Watch::start(&child, start);
    feed(&mut child, input.as_bytes());
    let out = child.stdout.take().unwrap();
    let reading = std::thread::spawn(move || stamped(out, start));
    let stderr = common::stderr_of(&mut child);
    let status = wait_for(&mut child, Duration::from_secs(60));
    let (lines, reader) = reading.join().unwrap();
    (status.code().unwrap_or(-1), lines, stderr, reader, watch)
}

#[test]
fn a_capacity_for_a_duration_holds_what_the_rate_drains_in_it() {
    let _t = common::beside_timing();
    // seq 100 | drip -r 10/s -c 3s -o drop-newest: the first leaves at
    // once, 30 wait, and the last of them leaves 3 s later (as the reader
    // sees them: judged where drip and the reader were served in time).
    common::until_judged(TRIES, BUDGET, || capacity_run().err());
}

/// One run of [`a_capacity_for_a_duration_holds_what_the_rate_drains_in_it`].
fn capacity_run() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let start = Instant::now();
    let mut child = command(&["-r", "10/s", "-c", "3s", "-o", "drop-newest", "--stats"])
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let watch = Watch::start(&child, start);
    feed(&mut child, numbered(1..=100).as_bytes());
    let (lines, reader) = stamped(child.stdout.take().unwrap(), start);
    let status = wait_for(&mut child, Duration::from_secs(20));
    assert!(status.success());
    // From record 1's departure (its arrival), seen no later than this.
    let served = watch.served(reader, lines[0].0 - reader);
    let written: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    let expected: Vec<String> = (1..=31).map(|i| i.to_string()).collect();
    assert_eq!(written, expected);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("cap 30 (3s, by --rate 10/s)"), "{stderr}");
    let summary = json_lines(&stats).pop().unwrap();
    assert_eq!(summary["capacity_for"]["capacity"], 30);
    assert_eq!(summary["capacity_for"]["set_by"], "--rate 10/s");
    assert_eq!(summary["dropped_newest"], 69);
    assert_eq!(summary["refused"], 0);
    let last = lines.last().unwrap().0 - lines[0].0;
    check((2.9..3.6).contains(&last), &served, || {
        format!("the last left {last:.2}s after the first")
    })
}

#[test]
fn a_capacity_for_a_duration_with_no_rate_is_a_usage_error() {
    drip(&["-r", "inf", "-c", "30s"])
        .write_stdin("1\n")
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with(
            "drip: --capacity 30s: a duration needs a --rate",
        ));
}

#[test]
fn what_cannot_make_max_wait_goes_to_the_dead_letter_at_once() {
    let _t = common::beside_timing();
    // seq 100 | drip -r 10/s --max-wait 2050ms -o drop-newest --dead-letter
    // dl: 1..21 leave over 2 s; 22..100 reach the dead letter (a FIFO read
    // here as it is written) as soon as they are read, not 2 s later. What
    // is refused is checked at once; that 21 makes its deadline, and when
    // the records are seen, where drip and the readers were served in time.
    common::until_judged(TRIES, BUDGET, || dead_letter_run().err());
}

/// One run of [`what_cannot_make_max_wait_goes_to_the_dead_letter_at_once`].
fn dead_letter_run() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("dl");
    let stats = dir.path().join("stats.json");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || stamped(std::fs::File::open(fifo).unwrap(), start))
    };
    let mut seq = std::process::Command::new("seq")
        .arg("100")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cmd = command(&["-r", "10/s", "--max-wait", "2050ms", "-o", "drop-newest"]);
    cmd.arg("--dead-letter")
        .arg(&fifo)
        .arg("--stats-json")
        .arg(&stats);
    cmd.stdin(Stdio::from(seq.stdout.take().unwrap()));
    let mut child = spawn(cmd);
    let watch = Watch::start(&child, start);
    let (lines, late) = stamped(child.stdout.take().unwrap(), start);
    let status = wait_for(&mut child, Duration::from_secs(20));
    seq.wait().unwrap();
    let (dead, dead_late) = reader.join().unwrap();
    assert!(status.success());
    let served = watch.served(late.max(dead_late), lines[0].0 - late);
    let summary = json_lines(&stats).pop().unwrap();
    assert_eq!(summary["refused"], 79);
    assert_eq!(summary["dropped_newest"], 79);
    // Record 21 leaves 2 s after its arrival, 50 ms before its deadline.
    check(summary["expired"] == 0, &served, || {
        format!("{} expired: {summary}", summary["expired"])
    })?;
    let written: Vec<String> = lines.iter().map(|(_, l)| l.clone()).collect();
    assert_eq!(written, (1..=21).map(|i| i.to_string()).collect::<Vec<_>>());
    let dead_ids: Vec<String> = dead.iter().map(|(_, l)| l.clone()).collect();
    assert_eq!(
        dead_ids,
        (22..=100).map(|i| i.to_string()).collect::<Vec<_>>()
    );
    let span = lines.last().unwrap().0 - lines[0].0;
    check((1.9..2.6).contains(&span), &served, || {
        format!("1..21 over {span:.2}s")
    })?;
    // All 100 are read at once, when record 1 leaves: the refused ones
    // reach the file a few ms later (the dead letter flushes 5 ms after its
    // last flush once its queue is dry; 100 ms allows a loaded machine),
    // not at its 200 ms flush while shedding goes on, nor 2 s later.
    let latest = dead.last().unwrap().0 - lines[0].0;
    check(latest < 0.1, &served, || {
        format!("the last refused record reached the file {latest:.3}s after record 1 left")
    })
}

#[test]
fn drop_oldest_keeps_the_newest_records_that_can_make_it() {
    let _t = common::beside_timing();
    // All 100 are read at once: 1 leaves, and each record from 12 on evicts
    // the oldest waiting one, so 91..100 leave within the second (100 50 ms
    // before its deadline: judged where drip was served in time).
    common::until_judged(TRIES, BUDGET, || {
        let args = ["-r", "10/s", "--max-wait", "1050ms", "-o", "drop-oldest"];
        let (status, lines, stderr, reader, watch) =
            watched_run(&[&args[..], &["--stats"]].concat(), &numbered(1..=100));
        assert_eq!(status, 0, "{stderr}");
        assert!(
            stderr.contains("dropped 89 (newest 0, oldest 89; refused at arrival 89)"),
            "{stderr}"
        );
        let served = watch.served(reader, lines[0].0 - reader);
        let out: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
        let expected: String = std::iter::once(1)
            .chain(91..=100)
            .map(|i| format!("{i}\n"))
            .collect();
        check(out == expected, &served, || {
            format!("wrote {out:?}, not {expected:?}: {stderr}")
        })
        .err()
    });
}

#[test]
fn fail_stops_at_the_first_record_that_cannot_make_it() {
    let _t = common::beside_timing();
    // 1 leaves at once; 2..11 would leave by 1 s; 12 would leave at 1.1 s.
    // fail stops drip there, as a full bucket does.
    drip(&["-r", "10/s", "--max-wait", "1050ms", "-o", "fail"])
        .write_stdin(numbered(1..=20))
        .assert()
        .code(3)
        .stdout("1\n")
        .stderr(predicate::str::starts_with(
            "drip: overflow: record 12 could not leave in time: the schedule puts its departure 1.10s after its arrival, past --max-wait 1.05s",
        ));
}

#[test]
fn the_stream_shows_the_oldest_age_the_wait_and_the_refused() {
    let _t = common::beside_timing();
    // 20 records at once at 10/s, --max-wait 1.55 s: 1..16 leave by 1.5 s,
    // 17..20 are refused. The first interval line, due 0.5 s after drip's
    // start, is judged where drip and this test were served in time.
    common::until_judged(TRIES, BUDGET, || stream_run().err());
}

/// One run of [`the_stream_shows_the_oldest_age_the_wait_and_the_refused`].
fn stream_run() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let args = ["-r", "10/s", "--max-wait", "1550ms", "-o", "drop-newest"];
    let interval = ["--stats-interval", "500ms", "--stats-json"];
    let args = [&args[..], &interval, &[stats.to_str().unwrap()]].concat();
    let (status, _, stderr, _, watch) = watched_run(&args, &numbered(1..=20));
    assert_eq!(status, 0, "{stderr}");
    // From drip's start: the first line is due 0.5 s after it.
    let served = watch.served(0.0, 0.0);
    let lines = json_lines(&stats);
    let summary = lines.last().unwrap();
    assert_eq!(summary["refused"], 4);
    assert_eq!(summary["depth"], 0);
    assert!(summary["forecast_wait_ms"].is_number());
    let first = &lines[0];
    // Refused at arrival, before the first line, unless the input came
    // that late.
    check(first["refused"] == 4, &served, || {
        format!("{} refused by the first line: {first}", first["refused"])
    })?;
    let wait = first["forecast_wait_ms"].as_f64().unwrap();
    let age = first["oldest_age_ms"].as_f64().unwrap();
    // At 0.5 s: 7..16 wait (the last leaves at 1.5 s), the oldest since
    // the start; one more would leave at 1.6 s, 1.1 s later.
    check((900.0..1200.0).contains(&wait), &served, || {
        format!("forecast wait {wait} ms")
    })?;
    check((400.0..800.0).contains(&age), &served, || {
        format!("oldest age {age} ms")
    })
}

#[test]
fn with_keys_only_the_key_that_cannot_make_it_is_refused() {
    let _t = common::beside_timing();
    // --key 1 --key-rate 10/s --max-wait 1050ms -o drop-newest: key a's
    // 0..10 leave by 1 s, its 11..19 are refused at once; b's leaves now
    // (a 10 50 ms before its deadline: judged where drip was served in
    // time).
    let mut input: String = (0..20).map(|n| format!("a {n}\n")).collect();
    input.push_str("b 0\n");
    common::until_judged(TRIES, BUDGET, || {
        let args = ["--key", "1", "--key-rate", "10/s", "--max-wait", "1050ms"];
        let args = [&args[..], &["-o", "drop-newest", "--stats"]].concat();
        let (status, seen, stderr, reader, watch) = watched_run(&args, &input);
        assert_eq!(status, 0, "{stderr}");
        assert!(
            stderr.contains("dropped 9 (newest 9, oldest 0; refused at arrival 9)"),
            "{stderr}"
        );
        let served = watch.served(reader, seen[0].0 - reader);
        let mut lines: Vec<&str> = seen.iter().map(|(_, l)| l.as_str()).collect();
        lines.sort_unstable();
        let mut expected: Vec<String> = (0..=10).map(|n| format!("a {n}")).collect();
        expected.push("b 0".into());
        expected.sort_unstable();
        check(lines == expected, &served, || {
            format!("wrote {lines:?}, not {expected:?}: {stderr}")
        })
        .err()
    });
}
