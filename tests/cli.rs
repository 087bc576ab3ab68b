//! The main job, end to end against the real binary: byte-exactness,
//! pacing, overflow policies, closed pipes, bad input and exit statuses.

use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{command, drip, numbered, shell, spawn, temp_file, timed_lines, wait_for};
use predicates::prelude::*;

// 1. Byte-exact.

#[test]
fn output_is_the_input_byte_for_byte() {
    let mut input = Vec::new();
    input.extend_from_slice(b"plain\n\n\nCRLF\r\n\xff\xfe invalid utf-8\nNUL\0inside\n");
    input.extend(std::iter::repeat_n(b'x', 3 << 20));
    input.extend_from_slice(b"\nlast without newline");
    drip(&["-r", "inf"])
        .write_stdin(input.clone())
        .assert()
        .success()
        .stdout(input);
}

#[test]
fn unpaced_output_to_a_file_is_the_input() {
    // A file as stdout takes the reader's own writes; -0 and a drop
    // policy change nothing when stdout keeps up.
    let dir = tempfile::tempdir().unwrap();
    let input = numbered(1..=300_000).replace('7', "\0") + "unterminated";
    let file = temp_file(input.as_bytes());
    for args in [
        &["-r", "inf"][..],
        &["-0", "-r", "inf", "-o", "drop-newest"],
    ] {
        let out = dir.path().join("out");
        let status = command(args)
            .stdin(Stdio::from(file.reopen().unwrap()))
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
            .status()
            .unwrap();
        assert!(status.success(), "{args:?}");
        assert!(
            std::fs::read(&out).unwrap() == input.as_bytes(),
            "{args:?}: output differs from the input"
        );
    }
}

#[test]
fn null_delimited_records_round_trip() {
    let input = b"a b\0c\nd\0\0e".to_vec();
    drip(&["-0", "-r", "inf"])
        .write_stdin(input.clone())
        .assert()
        .success()
        .stdout(input);
}

#[test]
fn custom_delimiter_and_pacing_per_record() {
    // Three comma-terminated records at 20/s take at least two intervals.
    let start = Instant::now();
    drip(&["-d", ",", "-r", "20/s"])
        .write_stdin("a,b\nc,d")
        .assert()
        .success()
        .stdout("a,b\nc,d");
    assert!(start.elapsed() >= Duration::from_millis(95));
}

#[test]
fn records_never_merge_across_files() {
    let a = temp_file(b"a1\na2");
    let b = temp_file(b"b1\n");
    let c = temp_file(b"c1");
    drip(&["-r", "inf"])
        .args([a.path(), b.path(), c.path()])
        .assert()
        .success()
        .stdout("a1\na2\nb1\nc1");
}

#[test]
fn dash_reads_stdin_between_files() {
    let a = temp_file(b"file\n");
    drip(&["-r", "inf"])
        .arg(a.path())
        .arg("-")
        .arg(a.path())
        .write_stdin("stdin")
        .assert()
        .success()
        .stdout("file\nstdin\nfile\n");
}

// 2. Pacing.

#[test]
fn records_leave_on_schedule_never_early() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let start = Instant::now();
    let mut cmd = command(&["--rate", "20/s", "--stats-json", stats.to_str().unwrap()]);
    cmd.stdin(Stdio::from(
        temp_file(numbered(1..=20).as_bytes()).reopen().unwrap(),
    ));
    let mut child = spawn(cmd);
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(10)).success());
    let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(texts, numbered(1..=20).lines().collect::<Vec<_>>());
    // The first record leaves at once (a bound a loaded machine keeps).
    assert!(lines[0].0 < 1.5, "first record after {} s", lines[0].0);
    let times: Vec<f64> = lines.iter().map(|(t, _)| *t).collect();
    // Record k is due k * 50 ms after the first. Never early, on drip's
    // own clock: 19 gaps of 50 ms at least from the first departure to the
    // last (half an interval for a first write the machine held up); a
    // record an interval early, or a pace 20 % fast, takes 50 ms or more.
    let text = std::fs::read_to_string(&stats).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let span = v["span_ms"].as_f64().unwrap();
    assert!(span >= 19.0 * 50.0 - 25.0, "span {span} ms: {times:?}");
    // Never early, as the reader saw it: record k no sooner than k * 50 ms
    // after drip was started, nor than 50 ms less after the first record's
    // arrival (with half an interval for a first record seen late).
    let early = common::ahead_of_start(&times, 0.05);
    assert!(early <= 0.0, "a record {early} s early: {times:?}");
    let early = common::ahead_of_first(&times, 0.05);
    assert!(early < 0.025, "a record {early} s early: {times:?}");
    // On pace, as the reader saw it (see common::median_gap): the median
    // gap is the interval; a rate 20 % slow moves it 12 ms (20 % fast
    // fails the span above).
    let median = common::median_gap(&times);
    assert!(
        (0.045..0.055).contains(&median),
        "the median gap is {median} s: {times:?}"
    );
    // No drift, and no trailing sleep (loosely: the machine may be busy).
    let span = times[19] - times[0];
    assert!(span < 2.0, "20 records at 20/s spanned {span} s");
}

/// b arrives after 600 ms of silence: it leaves at once, and c one
/// interval (200 ms) after it, not together. Judged on the reader's clock
/// from a moment before the shell began: b is written 600 ms after it at
/// the soonest, so c can leave no sooner than 800 ms after it, however
/// late the machine ran drip or the reader; with a catch-up burst c
/// leaves with b. A run where the reader saw b 750 ms or more after the
/// start (the shell's sleep or drip held up) cannot show a burst: it is
/// run again ([`common::until_judged`]).
#[test]
fn no_catch_up_burst_after_idle_input() {
    common::until_judged(5, Duration::from_secs(60), || {
        let start = Instant::now();
        let mut child = spawn(shell(
            "{ echo a; sleep 0.6; echo b; echo c; } | drip --rate 5/s",
        ));
        let lines = timed_lines(&mut child, start);
        assert!(wait_for(&mut child, Duration::from_secs(10)).success());
        assert_eq!(lines.len(), 3);
        // b not before it arrived (a reader may see it late, never early).
        assert!(lines[1].0 >= 0.6, "b left before it arrived: {lines:?}");
        assert!(
            lines[2].0 >= 0.8,
            "c left {:.3} s after b: a catch-up burst: {lines:?}",
            lines[2].0 - lines[1].0
        );
        (lines[1].0 >= 0.75).then(|| format!("b seen {:.3} s after the start", lines[1].0))
    });
}

#[test]
fn burst_lets_records_leave_back_to_back() {
    let start = Instant::now();
    let mut cmd = command(&["--rate", "2/s", "--burst", "3"]);
    cmd.stdin(Stdio::from(
        temp_file(numbered(1..=4).as_bytes()).reopen().unwrap(),
    ));
    let mut child = spawn(cmd);
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(10)).success());
    assert!(lines[2].0 - lines[0].0 < 0.2, "burst of 3 was spread out");
    assert!(lines[3].0 - lines[0].0 >= 0.495, "4th record came early");
}

/// [`timed_run`], and drip's own span from its first write to its last
/// (`--stats-json`'s `span_ms`, ms).
fn timed_run_with_span(args: &[&str], input: &[u8]) -> (Vec<(f64, String)>, f64) {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut all = args.to_vec();
    all.extend(["--stats-json", stats.to_str().unwrap()]);
    let lines = timed_run(&all, input);
    let span = common::last_json(&stats)["span_ms"].as_f64().unwrap();
    (lines, span)
}

/// Run `args` over `input`, timestamping each output line.
fn timed_run(args: &[&str], input: &[u8]) -> Vec<(f64, String)> {
    let start = Instant::now();
    let mut cmd = command(args);
    cmd.stdin(Stdio::from(temp_file(input).reopen().unwrap()));
    let mut child = spawn(cmd);
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(20)).success());
    lines
}

#[test]
fn a_burst_leaves_at_once_whatever_the_capacity() {
    // seq 15 | drip -r 1/s -b 5 -c 1 -o drop-newest: five leave as they
    // arrive (taking no place in the bucket), the sixth waits a second.
    let (lines, span_ms) = timed_run_with_span(
        &["-r", "1/s", "-b", "5", "-c", "1", "-o", "drop-newest"],
        numbered(1..=15).as_bytes(),
    );
    let got: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(got, ["1", "2", "3", "4", "5", "6"]);
    assert!(
        lines[4].0 - lines[0].0 < 0.3,
        "the burst was spread: {lines:?}"
    );
    // The sixth a second after the five, never early: on drip's own clock
    // (100 ms less for a first write the machine held up; a rate 20 %
    // fast sends it at 833 ms), and as the reader saw it, not before a
    // second after drip was started (a reader may see the five late).
    assert!(
        span_ms >= 900.0,
        "the sixth left {span_ms} ms after the five"
    );
    assert!(lines[5].0 >= 1.0, "the sixth came early: {lines:?}");
}

#[test]
fn several_limits_hold_together() {
    // 1000/s with a burst of 5, and 10/s with a burst of 5: five at once,
    // then the second limit paces: ten more take a second.
    let lines = timed_run(
        &["-r", "1000/s:5", "-r", "10/s:5"],
        numbered(1..=15).as_bytes(),
    );
    assert_eq!(lines.len(), 15);
    assert!(
        lines[4].0 - lines[0].0 < 0.3,
        "the burst was spread: {lines:?}"
    );
    // Ten intervals of 100 ms after the burst; the burst may be seen late
    // on a loaded machine (90 ms allowed), but a 10/s limit not held, or
    // one 20 % fast (830 ms), is caught.
    let span = lines[14].0 - lines[0].0;
    assert!(
        span >= 0.9,
        "15 records in {span:.3} s: the 10/s limit was not held"
    );
}

#[test]
fn a_byte_rate_spends_each_records_size() {
    // 100 bytes/s: 10-byte records leave 100 ms apart; a 50-byte one puts
    // the next half a second behind: 700 ms from the first to the last.
    let input = "aaaaaaaaa\nbbbbbbbbb\nccccccccccccccccccccccccccccccccccccccccccccccccc\nd\n";
    let (lines, span_ms) = timed_run_with_span(&["--byte-rate", "100/s"], input.as_bytes());
    assert_eq!(lines.len(), 4);
    // Never early, on drip's own clock (50 ms less for a first write the
    // machine held up): the 50-byte record not paid for, or priced as a
    // 10-byte one, takes 400 ms off, a rate 20 % fast over 100 ms; and as
    // the reader saw it, the last not before 700 ms after drip was
    // started (a reader may see the first late, so no gap is judged).
    assert!(
        span_ms >= 650.0,
        "the 50-byte record was not paid for: {span_ms} ms, {lines:?}"
    );
    assert!(lines[3].0 >= 0.7, "the last came early: {lines:?}");
}

#[test]
fn a_cost_rate_spends_the_cost_read_from_each_record() {
    // 100 cost/s, burst 10, no record limit: `a 10` leaves at once, `b 40`
    // once a full burst is saved again (100 ms), and puts the schedule 30
    // in debt, so `c 5` waits 350 ms; the record whose cost cannot be read
    // costs 1 (10 ms), and one costing 0 leaves with it.
    let input = "a 10
b 40
c 5
d none
e 0
";
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let start = Instant::now();
    let mut child = spawn(shell(&format!(
        "printf '{}' | drip -q --cost 2 --cost-rate 100/s:10 --stats-json '{}'",
        input.replace('\n', "\\n"),
        stats.display()
    )));
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(20)).success());
    let firsts: String = lines.iter().filter_map(|(_, l)| l.chars().next()).collect();
    assert_eq!(firsts, "abcde", "{lines:?}");
    // Never early, on drip's own clock: 460 ms from a to e (50 ms less
    // for a first write the machine held up); a's 10 not paid for takes
    // 100 ms off, b's debt not kept 350 ms. As the reader saw them, b
    // not before 100 ms after drip was started, nor c before 450 ms (a
    // reader may see a late, so the gaps after it are not judged).
    let span = common::last_json(&stats)["span_ms"].as_f64().unwrap();
    assert!(span >= 410.0, "a to e in {span} ms: {lines:?}");
    assert!(lines[1].0 >= 0.1, "a's 10 were not paid for: {lines:?}");
    assert!(
        lines[2].0 >= 0.45,
        "c waited for less than b's debt: {lines:?}"
    );
    // d and e leave with c, or 10 ms after it (loosely: seen late).
    let gap = |i: usize| lines[i].0 - lines[i - 1].0;
    assert!(gap(3) < 0.2 && gap(4) < 0.2, "{lines:?}");
}

#[test]
fn a_record_without_a_cost_is_named_once_and_costs_one() {
    let args = [
        "-r",
        "inf",
        "--cost",
        r#""tokens": *([0-9]+)"#,
        "--cost-rate",
        "1000/s:100",
    ];
    drip(&args)
        .write_stdin("{\"tokens\": 5}\n{}\n{\"tokens\": x}\n")
        .assert()
        .success()
        .stdout("{\"tokens\": 5}\n{}\n{\"tokens\": x}\n")
        .stderr(
            predicate::str::contains("drip: --cost: record 2 has no cost to read ('{}')")
                .and(predicate::str::contains("record 3").not()),
        );
    // -q: a notice, not an error; stderr gets nothing.
    drip(&[&["-q"][..], &args].concat())
        .write_stdin("{\"tokens\": 5}\n{}\n")
        .assert()
        .success()
        .stdout("{\"tokens\": 5}\n{}\n")
        .stderr("");
}

#[test]
fn cost_options_go_together_and_are_not_shared() {
    for (args, why) in [
        (&["--cost", "2"][..], "--cost: needs --cost-rate"),
        (&["--cost-rate", "5/s"], "--cost-rate: needs --cost"),
        (&["--cost", "2", "--cost-rate", "inf"], "not inf"),
        (
            &[
                "--cost",
                "2",
                "--cost-rate",
                "5/s",
                "--byte-rate",
                "1KB/s",
                "--share",
                "x",
            ],
            "not beside --byte-rate",
        ),
        (
            &["--cost", "(", "--cost-rate", "5/s"],
            "invalid regular expression",
        ),
        (
            &["--cost", "[a-z]+", "--cost-rate", "5/s"],
            "a regular expression with a group such as '\"tokens\": *([0-9]+)', around the cost",
        ),
    ] {
        usage_error(args).stderr(predicate::str::contains(why));
    }
}

#[test]
fn an_eviction_that_brings_a_due_time_nearer_wakes_the_writer() {
    // 100 bytes/s, a burst of 1000: `a` (1000 bytes) leaves at once, `A`
    // (1000 bytes) waits, due in 10 s; `b` (100 bytes) evicts it and is due
    // at 1 s. The input stays open for 2.5 s, so only a woken writer sends
    // `b` on time.
    let start = Instant::now();
    let mut child = spawn(shell(
        "{ head -c 999 /dev/zero | tr '\\0' a; echo; head -c 999 /dev/zero | tr '\\0' A; echo; \
           sleep 0.1; head -c 99 /dev/zero | tr '\\0' b; echo; sleep 2.5; } | \
         drip -q --byte-rate 100/s:1000 -c 1 -o drop-oldest",
    ));
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(20)).success());
    let firsts: Vec<char> = lines.iter().filter_map(|(_, l)| l.chars().next()).collect();
    assert_eq!(firsts, ['a', 'b']);
    assert!(
        lines[1].0 < 1.8,
        "b was due at about 1.1 s but left at {:.2} s",
        lines[1].0
    );
}

#[test]
fn an_ambiguous_burst_is_a_usage_error() {
    usage_error(&["-r", "10/s", "-r", "500/min", "-b", "5"])
        .stderr(predicate::str::contains("RATE:BURST"));
    usage_error(&["--byte-rate", "1MiB"]).stderr(predicate::str::starts_with(
        "drip: invalid value '1MiB' for '--byte-rate",
    ));
}

// 3. Records reach the pipe when due; no trailing sleep.

#[test]
fn a_record_is_written_when_due_not_at_exit() {
    let start = Instant::now();
    let mut child = spawn(shell(
        "{ echo first; sleep 1; echo second; } | drip -r 100/s",
    ));
    let lines = timed_lines(&mut child, start);
    assert!(wait_for(&mut child, Duration::from_secs(10)).success());
    assert!(lines[0].0 < 0.6, "first record held until {} s", lines[0].0);
    assert!(lines[1].0 >= 1.0);
}

#[test]
fn exits_when_the_last_record_is_written() {
    let start = Instant::now();
    drip(&["--rate", "1/min"])
        .write_stdin("only\n")
        .assert()
        .success();
    assert!(start.elapsed() < Duration::from_secs(2), "trailing sleep");
}

// 4. Overflow policies.

#[test]
fn block_makes_the_producer_wait() {
    // 100 records of 8 KiB at 50/s through a 5-record bucket: a producer
    // that is not held back would finish writing at once.
    let mut child = command(&["--rate", "50/s", "--capacity", "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let record = format!("{}\n", "r".repeat(8191));
    let producer = std::thread::spawn(move || {
        let start = Instant::now();
        for _ in 0..100 {
            stdin.write_all(record.as_bytes()).unwrap();
        }
        start.elapsed()
    });
    let output = child.wait_with_output().unwrap();
    let producer_took = producer.join().unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout.len(), 100 * 8192, "every record arrives");
    // At most ~40 records fit in the pipe, the reader's chunk and the
    // bucket; the other 60 wait for drip, at 50/s: over a second.
    assert!(
        producer_took >= Duration::from_millis(700),
        "producer was not held back: done after {producer_took:?}"
    );
}

#[test]
fn drop_newest_keeps_the_first_records() {
    let input = temp_file(numbered(1..=100).as_bytes());
    drip(&["-c", "10", "-r", "1000/s", "-o", "drop-newest", "--stats"])
        .arg(input.path())
        .assert()
        .success()
        // Record 1 leaves as it arrives; 2 to 11 wait; the rest are shed.
        .stdout(numbered(1..=11))
        .stderr(predicate::str::contains("dropped 89 (newest 89, oldest 0)"));
}

#[test]
fn drop_oldest_keeps_the_last_records() {
    let input = temp_file(numbered(1..=100).as_bytes());
    // Record 1 leaves as it arrives; eviction takes only waiting records.
    let expected = numbered(1..=1) + &numbered(91..=100);
    drip(&["-c", "10", "-r", "1000/s", "-o", "drop-oldest", "--stats"])
        .arg(input.path())
        .assert()
        .success()
        .stdout(expected)
        .stderr(predicate::str::contains("dropped 89 (newest 0, oldest 89)"));
}

#[test]
fn fail_stops_with_status_3() {
    let input = temp_file(numbered(1..=100).as_bytes());
    drip(&["-c", "10", "-r", "1000/s", "-o", "fail"])
        .arg(input.path())
        .assert()
        .code(3)
        .stderr(
            predicate::str::is_match(
                r"^drip: overflow: record 12 arrived at a full bucket \(capacity 10 records\)",
            )
            .unwrap(),
        );
}

#[test]
fn drop_policy_keeps_memory_flat_under_endless_input() {
    let mut child = spawn(shell("yes | exec drip --rate 10/s -o drop-oldest"));
    std::thread::sleep(Duration::from_millis(500));
    let rss = |pid: u32| -> Option<u64> {
        // The shell execs into drip; find it as the shell's pid or a child.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let pid = child.id();
    let early = rss(pid).expect("rss");
    std::thread::sleep(Duration::from_millis(2000));
    let late = rss(pid).expect("rss");
    common::send_signal(&child, libc::SIGTERM);
    wait_for(&mut child, Duration::from_secs(5));
    assert!(
        late < 32 * 1024,
        "RSS {late} KiB after 2.5 s of endless input"
    );
    assert!(
        late <= early + 4 * 1024,
        "RSS grew from {early} to {late} KiB"
    );
}

// 5. A slow consumer.

#[test]
fn slow_consumer_fills_the_bucket_and_the_policy_applies() {
    // 2000 records of 1 KiB, no pacing, a consumer that stalls for a
    // second: the pipe holds ~64, so most are dropped, and the counts add up.
    let input = temp_file(stdin_data_for_slow_consumer().as_bytes());
    let out = shell(&format!(
        "drip -r inf -c 10 -o drop-newest --stats {} | {{ sleep 1; cat; }}",
        input.path().display()
    ))
    .output()
    .unwrap();
    assert!(out.status.success());
    let written = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(written < 2000, "nothing was dropped: {stderr}");
    assert!(
        stderr.contains(&format!(
            "read 2000, written {written}, dropped {}",
            2000 - written
        )),
        "{stderr}"
    );
}

fn stdin_data_for_slow_consumer() -> String {
    (0..2000)
        .map(|i| format!("{i:04}{}\n", "x".repeat(1019)))
        .collect()
}

// 6. A closed stdout.

#[test]
fn closed_stdout_ends_quietly() {
    let start = Instant::now();
    let out = shell("yes | drip -r 1000/s | head -n 3").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "y\ny\ny\n");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn closed_stdout_status_is_zero() {
    let mut child = command(&["-r", "1000/s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for _ in 0..10_000 {
            if stdin.write_all(b"line\n").is_err() {
                break;
            }
        }
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 10];
    std::io::Read::read_exact(&mut stdout, &mut buf).unwrap();
    drop(stdout);
    let status = wait_for(&mut child, Duration::from_secs(5));
    writer.join().unwrap();
    assert_eq!(status.code(), Some(0));
}

// 7. Bad input.

#[test]
fn bad_flag_values_are_usage_errors() {
    for args in [
        &["--rate", "0"][..],
        &["--rate", "-1/s"],
        &["--rate", "10/fortnight"],
        &["--capacity", "0"],
        &["--burst", "0"],
        &["--overflow", "sometimes"],
        &["--interval", "0s"],
        &["--max-record", "huge"],
        &["-d", "ab"],
        &["--no-such-flag"],
    ] {
        let out = drip(args).write_stdin("").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("drip: "), "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{args:?} not named: {stderr}");
    }
}

/// `--capacity` and `--key-capacity` count records in thousands, millions
/// and billions (decimal: `10k`, `2M`, `1G`), while a duration keeps its
/// units (`2m` is two minutes of the rate) and a month is spelled out:
/// `M` is a million, never a month.
#[test]
fn a_capacity_counts_in_k_m_and_g_and_m_is_no_month() {
    // 2k: the first record leaves at once, 2,000 wait, the next overflows.
    let input = temp_file(numbered(1..=2005).as_bytes());
    drip(&["-r", "1/min", "-c", "2k", "-o", "fail"])
        .arg(input.path())
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "record 2002 arrived at a full bucket (capacity 2000 records)",
        ));
    // A key's queue, by the same parser: 1.5k is 1,500.
    let one_key = temp_file("a\n".repeat(1505).as_bytes());
    drip(&[
        "-r",
        "1/min",
        "-c",
        "5k",
        "--key",
        "1",
        "--key-rate",
        "1/min",
    ])
    .args(["--key-capacity", "1.5k", "-o", "fail"])
    .arg(one_key.path())
    .assert()
    .code(3)
    .stderr(predicate::str::contains(
        "record 1502 arrived at its key's full queue (--key-capacity 1500)",
    ));
    // 2M is two million records, not two months of the rate: a count
    // needs no rate to drain it, and the summary names no duration.
    drip(&["-q", "-r", "inf", "-c", "2M", "--stats"])
        .write_stdin("a\n")
        .assert()
        .success()
        .stdout("a\n")
        .stderr(predicate::str::contains("cap ").not());
    // 2m is still two minutes of the rate.
    drip(&["-q", "-r", "10/s", "-c", "2m", "--stats"])
        .write_stdin("a\n")
        .assert()
        .success()
        .stderr(predicate::str::contains("cap 1200 (2m, by --rate 10/s)"));
    // A month is spelled month; M beside other units is refused.
    drip(&["-q", "-r", "1/d", "-c", "1month", "--stats"])
        .write_stdin("a\n")
        .assert()
        .success()
        .stderr(predicate::str::contains("cap 30 ("));
    usage_error_says(
        &["--capacity", "2mo"],
        "unknown unit 'mo': a month is spelled month",
    );
    usage_error_says(&["--capacity", "1M2d"], "M is a million records");
    usage_error_says(&["--capacity", "1.2345k"], "1.2345k is no whole number");
    usage_error_says(&["--key-capacity", "0k"], "must be at least 1");
}

#[test]
fn output_files_that_are_one_file_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old"), "kept\n").unwrap();
    std::fs::hard_link(dir.path().join("old"), dir.path().join("link")).unwrap();
    // The same name, another spelling of it, and (existing) a hard link.
    for (first, second, path) in [
        ("--dead-letter", "--stats-json", "y.out"),
        ("--dead-letter", "--metrics", "./y.out"),
        ("--stats-json", "--metrics", "link"),
    ] {
        let first_path = if path == "link" { "old" } else { "y.out" };
        let args = ["-r", "1/s", "-c", "1", "-o", "drop-newest"];
        let out = drip(&args)
            .current_dir(dir.path())
            .args([second, path, first, first_path])
            .write_stdin("1\n2\n3\n")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{first} {second}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("drip: {second} {path}: the same file as {first}")),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{first} {second}: read");
        assert!(!dir.path().join("y.out").exists(), "{first} {second}");
    }
    assert_eq!(std::fs::read(dir.path().join("old")).unwrap(), b"kept\n");
    // Distinct files, and a device written twice, are fine.
    for (dead, stats) in [("d.out", "s.out"), ("/dev/null", "/dev/null")] {
        drip(&[
            "-q",
            "-r",
            "inf",
            "--dead-letter",
            dead,
            "--stats-json",
            stats,
        ])
        .current_dir(dir.path())
        .write_stdin("1\n")
        .assert()
        .success()
        .stdout("1\n");
    }
}

#[test]
fn a_joblog_that_is_another_output_file_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    for (joblog, other) in [("--joblog", "--dead-letter"), ("--resume", "--metrics")] {
        let out = drip(&[other, "y.out", joblog, "./y.out", "--exec", "true"])
            .current_dir(dir.path())
            .write_stdin("1\n")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{joblog}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("drip: {joblog} ./y.out: the same file as {other}")),
            "{stderr}"
        );
        assert!(!dir.path().join("y.out").exists(), "{joblog}");
    }
}

#[test]
fn durations_and_periods_beyond_100_years_are_usage_errors() {
    // Such values used to wrap drip's nanosecond deadlines: records
    // expired at once, or the writer spun.
    for args in [
        &["--max-wait", "18446744074s"][..],
        &["--max-wait", "18446744073s"],
        &["--interval", "101y"],
        &["--stats-interval", "100y 1s"],
        &["--rate", "1/101y"],
        &["--rate", "0.5/100y"],
    ] {
        let out = drip(args).write_stdin("a\n").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{args:?} not named: {stderr}");
        assert!(stderr.contains("100 years"), "{args:?}: {stderr}");
    }
    // 100 years itself is fine, and nothing expires.
    drip(&["-q", "-r", "inf", "--max-wait", "100y", "--stats"])
        .write_stdin("a\nb\nc\n")
        .assert()
        .success()
        .stdout("a\nb\nc\n")
        .stderr(predicate::str::contains("expired 0"));
}

#[test]
fn rate_errors_show_the_accepted_form() {
    usage_error(&["--rate", "10/fortnight"]).stderr(
        predicate::str::contains("unknown unit 'fortnight'")
            .and(predicate::str::contains("90/min")),
    );
}

/// drip run with `args` on one record: a usage error (exit status 2);
/// the caller checks what it said.
fn usage_error(args: &[&str]) -> assert_cmd::assert::Assert {
    drip(args).write_stdin("x\n").assert().code(2)
}

/// drip run with `args` is a usage error (2) told in one line, `drip:
/// invalid value '<value>' for '<flag>…': <why>…`.
fn usage_error_says(args: &[&str], why: &str) {
    let out = drip(args).write_stdin("a\n").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    let head = format!("drip: invalid value '{}' for '{}", args[1], args[0]);
    assert!(stderr.starts_with(&head), "{args:?}: {stderr}");
    assert!(stderr.contains(&format!(">': {why}")), "{args:?}: {stderr}");
}

#[test]
fn a_negative_duration_is_named_as_such() {
    for flag in ["--interval", "--max-wait", "--stats-interval"] {
        usage_error_says(&[flag, "-1s"], "a duration cannot be negative");
    }
    usage_error_says(&["--capacity", "-1s"], "cannot be negative");
    usage_error_says(&["--key-capacity", "-1s"], "cannot be negative");
    for flag in ["--timeout", "--deadline"] {
        usage_error_says(
            &[flag, "-1s", "--exec", "true"],
            "a duration cannot be negative",
        );
    }
    usage_error_says(&["--interval", "5"], "a unit is needed, such as 5s");
}

#[test]
fn a_whole_number_too_large_names_the_largest() {
    let huge = "99999999999999999999999";
    let most = u64::MAX.to_string();
    usage_error_says(&["--capacity", huge], &format!("too large: at most {most}"));
    usage_error_says(&["--burst", huge], &format!("too large: at most {most}"));
    usage_error_says(&["--max-keys", huge], "too large: at most ");
    for (flag, most) in [
        ("--jobs", 4096),
        ("--retries", 1000),
        ("--order-window", 1_000_000),
    ] {
        for value in [huge.to_string(), (most + 1).to_string()] {
            usage_error_says(
                &[flag, &value, "--exec", "true"],
                &format!("too large: at most {most}"),
            );
        }
    }
}

#[test]
fn a_rate_below_the_smallest_is_too_small() {
    for rate in [
        "0.0000000001/s",
        "0.00000000001",
        "1/200y",
        "0.0000000000000000000000001/s",
    ] {
        usage_error_says(
            &["--rate", rate],
            "the rate is too small: the smallest is one record per 100 years",
        );
    }
    // Ten digits after the point are fine where the rate is not too small.
    drip(&["-q", "--rate", "1.0000000001/ns"])
        .write_stdin("a\n")
        .assert()
        .success()
        .stdout("a\n");
}

#[test]
fn unreadable_files_are_reported_and_skipped() {
    let good = temp_file(b"good\n");
    let dir = tempfile::tempdir().unwrap();
    drip(&["-r", "inf", "/no/such/file"])
        .arg(dir.path())
        .arg(good.path())
        .assert()
        .code(1)
        .stdout("good\n")
        .stderr(
            predicate::str::contains("drip: /no/such/file: No such file or directory\n").and(
                predicate::str::contains(format!(
                    "drip: {}: Is a directory\n",
                    dir.path().display()
                )),
            ),
        );
}

#[test]
fn oversized_record_is_an_error_after_earlier_records() {
    drip(&["-r", "inf", "--max-record", "8"])
        .write_stdin("short\n12345678\n123456789\nafter\n")
        .assert()
        .code(1)
        .stdout("short\n12345678\n")
        .stderr("drip: stdin: record 3 is longer than --max-record (8 bytes)\n");
}

// 8. Exit statuses documented.

#[test]
fn help_documents_exit_statuses_and_examples() {
    drip(&["--help"]).assert().success().stdout(
        predicate::str::contains("Exit status:")
            .and(predicate::str::contains(
                "  3\n      the bucket overflowed under --overflow fail",
            ))
            .and(predicate::str::contains("Examples:")),
    );
    drip(&["-V"])
        .assert()
        .success()
        .stdout(predicate::str::starts_with("drip "));
}

#[test]
fn help_states_the_real_burst_bound() {
    // From 500/s up the 2 ms slack covers whole intervals (src/pacer.rs,
    // back_to_back_is_burst_plus_the_records_the_slack_covers).
    drip(&["--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("at most N + rate × 2ms together"));
}

#[test]
fn interval_is_another_way_to_give_the_rate() {
    let start = Instant::now();
    drip(&["-i", "100ms"])
        .write_stdin("a\nb\nc\n")
        .assert()
        .success()
        .stdout("a\nb\nc\n");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(195), "{took:?}");
}

#[test]
fn a_socket_stdout_hanging_up_is_noticed_between_slow_records() {
    // stdout is a Unix socket whose other end closes after the first
    // record; the next is a minute away.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let start = Instant::now();
    let mut child = command(&["-r", "1/min"])
        .stdin(Stdio::piped())
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"1\n2\n").unwrap();
    let mut first = [0u8; 2];
    std::io::Read::read_exact(&mut &ours, &mut first).unwrap();
    assert_eq!(&first, b"1\n");
    drop(ours);
    let status = wait_for(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_socket_stdout_closed_mid_write_ends_drip_quietly() {
    // The other end closes with data unread: the write fails with EPIPE or
    // ECONNRESET, and either means the reader went away.
    let input = temp_file(numbered(1..=300_000).as_bytes());
    for _ in 0..3 {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let child = command(&["-r", "inf"])
            .stdin(Stdio::from(input.reopen().unwrap()))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(ours);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_socket_stdout_half_closed_by_its_reader_costs_no_cpu() {
    // The other end stops sending (shutdown(SHUT_WR)) but goes on reading:
    // that is not a hang-up, and drip must wait for its next record idle.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = command(&["-r", "1/min"])
        .stdin(Stdio::piped())
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"1\n2\n").unwrap();
    let mut first = [0u8; 2];
    std::io::Read::read_exact(&mut &ours, &mut first).unwrap();
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let cpu = common::cpu_seconds(&child);
    assert!(cpu < 0.3, "{cpu} s of CPU in 1 s of waiting");
    // Then it hangs up altogether: noticed within a second or two, not at
    // the next record a minute away.
    let closed = Instant::now();
    drop(ours);
    let status = wait_for(&mut child, Duration::from_secs(10));
    drop(stdin);
    assert!(status.success(), "{status:?}");
    assert!(
        closed.elapsed() < Duration::from_secs(4),
        "{:?}",
        closed.elapsed()
    );
}

#[test]
fn closed_stdout_is_noticed_between_slow_records() {
    // The next record is a minute away when head exits: drip must not
    // wait for it to find out.
    let start = Instant::now();
    let out = shell("seq 5 | { drip -r 1/min; echo \"drip $?\" >&2; } | head -n 1")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "drip 0\n");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn help_and_version_fail_when_stdout_cannot_take_them() {
    for (flag, what) in [
        ("--help", "--help"),
        ("-h", "-h"),
        ("--version", "--version"),
    ] {
        let out = shell(&format!("drip {flag} > /dev/full")).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            stderr,
            format!("drip: {what}: writing to stdout: No space left on device\n"),
        );
    }
    // A reader that stops early is no error, as with records.
    let out = shell("drip --help | head -1").output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dash_is_refused_where_drip_would_write_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--stats-json", "--dead-letter"] {
        let out = command(&[flag, "-", "-r", "inf"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.starts_with(&format!("drip: invalid value '-' for '{flag} <FILE>'")),
            "{stderr}"
        );
        assert!(
            stderr.contains("stdout, which carries the records"),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            !dir.path().join("-").exists(),
            "{flag} created a file named -"
        );
    }
}

/// A capacity no limit drains anything of is echoed as it was written,
/// not as a float of milliseconds.
#[test]
fn a_tiny_capacity_is_echoed_as_written() {
    for (value, echo) in [
        ("1ns", "1ns"),
        ("1us", "1us"),
        ("999ms", "999ms"),
        ("2.5ms", "2ms500us"),
    ] {
        usage_error(&["-c", value]).stderr(predicate::str::starts_with(format!(
            "drip: --capacity {echo}: the default --rate 1/s drains nothing"
        )));
    }
    // Long ones in days, never in months or years of a guessed length.
    usage_error(&["-r", "1/100d", "-c", "40d"]).stderr(predicate::str::starts_with(
        "drip: --capacity 40d: --rate 1/100d drains nothing",
    ));
    usage_error(&["--key", "1", "--key-rate", "1/min", "--key-capacity", "3ns"]).stderr(
        predicate::str::starts_with("drip: --key-capacity 3ns: --key-rate 1/min drains nothing"),
    );
}

/// A metrics file that exists where no file can be made beside it (in
/// /proc) is said to be that, not a missing file.
#[test]
fn a_metrics_file_where_nothing_can_be_made_beside_it_says_so() {
    drip(&["--metrics", "/proc/version"])
        .write_stdin("a\n")
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with(
            "drip: --metrics /proc/version: cannot write a temporary file beside it (.drip-metrics-* in /proc): ",
        ));
}

/// A size too large for any byte rate says so, and the largest there is.
#[test]
fn a_byte_rate_too_large_says_so() {
    for value in ["16EiB/s", "18446744073709551616/s", "20EB/s"] {
        usage_error(&["--byte-rate", value]).stderr(predicate::str::contains(format!(
            "'{}' is too large: at most 18446744073709551615 bytes",
            value.trim_end_matches("/s")
        )));
    }
    drip(&["--byte-rate", "18446744073709551615/s"])
        .write_stdin("a\n")
        .assert()
        .success()
        .stdout("a\n");
    usage_error(&["--max-record", "16EiB"]).stderr(predicate::str::contains(
        "too large: at most 18446744073709551615 bytes",
    ));
}

/// `-h` is one screen (at most 66 lines of 80 columns): the flags most runs
/// need, grouped by task, each one drip has, pointing at --help and man
/// drip; --help still has every flag.
#[test]
fn short_help_is_one_screen_grouped_by_task() {
    let out = drip(&["-h"]).assert().success().get_output().stdout.clone();
    let short = String::from_utf8(out).unwrap();
    let lines = short.lines().count();
    assert!((30..=66).contains(&lines), "{lines} lines:\n{short}");
    for line in short.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
    }
    for heading in ["Pace:", "Bucket:", "Keys:", "Share:", "Jobs:", "Observe:"] {
        assert!(short.contains(&format!("\n{heading}\n")), "{heading}");
    }
    assert!(short.contains("drip --help") && short.contains("man drip"));
    let out = drip(&["--help"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let long = String::from_utf8(out).unwrap();
    assert!(long.lines().count() > 300, "--help is no longer whole");
    assert!(long.contains("Exit status:") && long.contains("--order-window"));
    // Every flag -h names is drip's.
    let mut named = 0;
    for word in short.split(|c: char| c.is_whitespace() || "(),;:[]".contains(c)) {
        let flag: String = word
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if flag.starts_with("--") && flag.len() > 2 {
            named += 1;
            let whole = long.match_indices(flag.as_str()).any(|(at, _)| {
                let next = long[at + flag.len()..].chars().next();
                !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            });
            assert!(whole, "{flag} is no flag of --help");
        }
    }
    assert!(named >= 20, "{named} flags");
    // drip ctl keeps its own help.
    for flag in ["-h", "--help"] {
        drip(&["ctl", flag])
            .assert()
            .success()
            .stdout(predicate::str::contains(
                "Usage: drip ctl [list|TARGET] [COMMAND]...",
            ));
    }
}

/// The sections of a help text: each heading (an unindented line ending
/// in `:`) with the flags listed under it, in order, up to `Examples:`.
fn help_sections(help: &str) -> Vec<(String, Vec<String>)> {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in help.lines() {
        if line.starts_with("Examples:") {
            break;
        }
        if !line.starts_with(' ') && line.ends_with(':') {
            sections.push((line.trim_end_matches(':').to_string(), Vec::new()));
            continue;
        }
        let flag = line.trim_start();
        if !flag.starts_with('-') || !line.starts_with("  ") || line.starts_with("          ") {
            continue;
        }
        // `-r, --rate <RATE[:BURST]>`, `      --byte-rate ...`, `-h`: the
        // long name when there is one.
        let name = flag
            .split([' ', ','])
            .find(|w| w.starts_with("--"))
            .or_else(|| flag.split([' ', ',']).next())
            .unwrap()
            .to_string();
        if let Some((_, flags)) = sections.last_mut() {
            flags.push(name);
        }
    }
    sections
}

/// `--help` files every flag under a heading, the groups of `-h` (pace,
/// bucket, keys, share, jobs, observe) in its order and then help's own,
/// each flag `-h` names under the same heading; none under a bare
/// `Options:`.
#[test]
fn help_files_every_flag_under_the_groups_of_short_help() {
    let stdout = |flag: &str| {
        let out = drip(&[flag]).assert().success().get_output().stdout.clone();
        String::from_utf8(out).unwrap()
    };
    let (long, short) = (stdout("--help"), stdout("-h"));
    let groups = ["Pace", "Bucket", "Keys", "Share", "Jobs", "Observe"];
    let sections = help_sections(&long);
    let headings: Vec<&str> = sections.iter().map(|(h, _)| h.as_str()).collect();
    let expected: Vec<&str> = ["Commands", "Arguments"]
        .into_iter()
        .chain(groups)
        .chain(["Help"])
        .collect();
    assert_eq!(headings, expected, "{long}");
    let filed: Vec<&String> = sections.iter().flat_map(|(_, f)| f).collect();
    assert!(filed.len() >= 50, "{} flags filed: {filed:?}", filed.len());
    for (heading, flags) in &sections {
        if heading == "Help" {
            assert_eq!(flags, &["-h", "--help", "--version"], "{long}");
        } else if heading == "Commands" || heading == "Arguments" {
            assert!(flags.is_empty(), "{heading}: {flags:?}");
        }
    }
    // Each flag -h names sits under the heading of the same name.
    let heading_of = |flag: &str| {
        sections
            .iter()
            .find(|(_, flags)| flags.iter().any(|f| f == flag))
            .map(|(h, _)| h.clone())
    };
    let mut named = 0;
    for (group, flags) in help_sections(&short) {
        if !groups.contains(&group.as_str()) {
            continue;
        }
        for flag in flags.iter().filter(|f| f.starts_with("--")) {
            assert_eq!(heading_of(flag).as_deref(), Some(group.as_str()), "{flag}");
            named += 1;
        }
    }
    assert!(named >= 20, "{named} flags of -h checked");
}

/// A misspelled flag is a usage error that names the flag meant, on its
/// one line.
#[test]
fn a_misspelled_flag_names_the_one_meant() {
    for (typed, meant) in [
        ("--rat", "--rate"),
        ("--capcity", "--capacity"),
        ("--stat", "--stats"),
        ("--exe", "--exec"),
    ] {
        let out = drip(&[typed, "10/s"]).write_stdin("").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{typed}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "drip: unexpected argument '{typed}' found (tip: a similar argument exists: \
                 '{meant}'; see 'drip --help')\n"
            )
        );
    }
}

/// `drip help` is `drip --help` (and `drip help ctl` is `drip ctl
/// --help`): `help`, as drip's first word, is the help as `ctl` is a
/// subcommand, also where a file is named help, which is read as
/// `./help` (said on stderr).
#[test]
fn drip_help_is_the_help_even_beside_a_file_named_help() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = |args: &[&str]| {
        let out = drip(args)
            .current_dir(dir.path())
            .write_stdin("x\n")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (long, _) = stdout(&["--help"]);
    assert!(long.contains("Exit status:"), "{long}");
    assert_eq!(stdout(&["help"]), (long.clone(), String::new()));
    assert_eq!(stdout(&["help", "ctl"]), stdout(&["ctl", "--help"]));
    std::fs::write(dir.path().join("help"), "from the file\n").unwrap();
    assert_eq!(
        stdout(&["help"]),
        (
            long,
            "drip: help: printing the help; to read the file named help, give it as ./help\n"
                .to_string()
        )
    );
    assert_eq!(
        stdout(&["-r", "inf", "./help"]),
        ("from the file\n".to_string(), String::new())
    );
}

/// A FILE that is not there but reads as a rate: `--rate` was left out,
/// and the error says so.
#[test]
fn a_missing_file_that_looks_like_a_rate_suggests_rate() {
    drip(&["10/s"])
        .write_stdin("a\n")
        .assert()
        .code(1)
        .stdout("")
        .stderr("drip: 10/s: No such file or directory (did you mean --rate 10/s?)\n");
    drip(&["no-such-file.txt"])
        .write_stdin("a\n")
        .assert()
        .code(1)
        .stderr("drip: no-such-file.txt: No such file or directory\n");
}
