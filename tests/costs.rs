//! Several named costs (`--cost NAME=SPEC`, `--cost-rate NAME=…`, a sum
//! `in+out=…`), costs estimated from the record (JSON paths, its size),
//! and settlement after the job (`--settle`), as a user runs them.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{command, drip, last_json};
use predicates::prelude::*;

/// Run drip with `args` on `input`; its output and how long its records
/// took from the first to the last (`span_ms`, drip's own clock).
fn span(args: &[&str], input: &str) -> (String, f64) {
    let (out, ms, _) = watched_span(args, input);
    (out, ms)
}

/// [`span`], and how long (s) drip's threads waited for a CPU, all told,
/// from the input's arrival to the last record's (seen by this test, a
/// moment after its write): the input is fed once drip is up and waits
/// for it ([`until_asleep`]), so its start-up is not counted.
fn watched_span(args: &[&str], input: &str) -> (String, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut all = vec!["-q", "--stats-json", stats.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    cmd.stdin(Stdio::piped());
    let origin = Instant::now();
    let mut child = common::spawn(cmd);
    let waits = common::watch_cpu_waits(child.id(), origin);
    until_asleep(child.id());
    let fed = origin.elapsed().as_secs_f64();
    common::feed(&mut child, input.as_bytes());
    let lines = common::timed_lines(&mut child, origin);
    let err = common::stderr_of(&mut child);
    let status = common::wait_for(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{err}");
    let samples = waits.join().unwrap();
    let last = lines.last().map_or(fed, |l| l.0);
    let waited = common::threads_cpu_wait_between(&samples, fed, last);
    let out = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let span = last_json(&stats)["span_ms"].as_f64().unwrap();
    (out, span, waited)
}

/// Wait (up to 5 s) until every thread of process `pid` sleeps: drip is
/// up and waits for its input.
fn until_asleep(pid: u32) {
    let asleep = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return true;
        };
        tasks.flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            stat.rfind(')')
                .and_then(|i| stat.get(i + 2..i + 3))
                .map_or(true, |state| state == "S")
        })
    };
    let start = Instant::now();
    while !asleep() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long drip's threads may have waited for a CPU (s, all told, from
/// the input's arrival to the last record's) before a span that breaks
/// its bound is not judged: the span runs from the end of the first write
/// to the end of the last, so a first write held up shortens it (a last
/// one lengthens it); the bounds have 50 ms and more to spare.
const HELD_UP: f64 = 0.02;

#[test]
fn each_named_cost_spends_the_limits_that_name_it() {
    // 10 of in and 50 of out a record: in at 1000/s lets them all go at
    // once, out at 100/s (burst 100) two at once and then one every 500
    // ms: the fourth at 1 s.
    let input = "{\"i\":10,\"o\":50}\n".repeat(4);
    let args = [
        "--cost",
        "in=i",
        "--cost",
        "out=o",
        "--cost-rate",
        "in=1000/s:100",
        "--cost-rate",
        "out=100/s:100",
    ];
    let (out, ms) = span(&args, &input);
    assert_eq!(out, input);
    assert!(ms >= 950.0, "out was not spent: {ms} ms");
    // With out loose, the same records leave at once.
    let mut loose = args;
    loose[7] = "out=100000/s:100";
    let (_, ms) = span(&loose, &input);
    assert!(ms < 900.0, "in held them back: {ms} ms");
}

#[test]
fn a_sum_of_named_costs_spends_each_of_them() {
    // 30 + 20 = 50 a record of in+out at 100/s, burst 100: the fourth
    // leaves at 1 s.
    let input = "{\"i\":30,\"o\":20}\n".repeat(4);
    let args = [
        "--cost",
        "in=i",
        "--cost",
        "out=o",
        "--cost-rate",
        "in+out=100/s:100",
    ];
    let (_, ms) = span(&args, &input);
    assert!(ms >= 950.0, "in+out spent less than 50 a record: {ms} ms");
}

#[test]
fn a_cost_is_estimated_from_json_paths_and_the_records_size() {
    // The spans are drip's clock's, from the end of the first write to the
    // end of the last: a busy machine that holds the first write up
    // shortens them (254 ms for 350 on a busy machine). A span off its
    // bound is judged where drip's threads waited under [`HELD_UP`] for a
    // CPU; otherwise the run is made again ([`common::until_judged`]).
    common::until_judged(5, Duration::from_secs(60), || {
        // {"max_tokens":40,"n":2}: 23 bytes, so 6 + 40 × 2 = 86 a record
        // at 100/s, burst 100: the second leaves at 0.72 s, the third at
        // 1.58 s.
        let input = "{\"max_tokens\":40,\"n\":2}\n".repeat(3);
        let args = [
            "--cost",
            "bytes/4 + max_tokens*n?1",
            "--cost-rate",
            "100/s:100",
        ];
        let (out, ms, waited) = watched_span(&args, &input);
        assert_eq!(out, input);
        if let Some(account) = judged(ms >= 1500.0, waited, || {
            format!("estimated below 86 a record: {ms} ms")
        }) {
            return Some(account);
        }
        // Without n, it counts 1: 17 bytes, so 5 + 40 = 45, two at once,
        // the third at 0.35 s.
        let input = "{\"max_tokens\":40}\n".repeat(3);
        let (_, ms, waited) = watched_span(&args, &input);
        judged((300.0..1200.0).contains(&ms), waited, || format!("{ms} ms"))
    });
}

/// A span's check that `holds` or not, over a run whose drip's threads
/// `waited` (s) for a CPU: `None` when it holds; otherwise an account of
/// the run, not judged, where drip was held up ([`HELD_UP`]), and a
/// failure where it was served in time.
fn judged(holds: bool, waited: f64, what: impl FnOnce() -> String) -> Option<String> {
    if holds {
        return None;
    }
    let account = format!("drip's threads waited {waited:.3} s for a CPU");
    assert!(
        waited >= HELD_UP,
        "{}\n(not the machine's doing: {account})",
        what()
    );
    Some(format!("{}; {account}", what()))
}

#[test]
fn a_record_whose_estimate_cannot_be_read_costs_one_and_is_named_once() {
    drip(&[
        "-r",
        "inf",
        "--cost",
        "out=max_tokens",
        "--cost-rate",
        "out=1000/s:100",
    ])
    .write_stdin("{\"max_tokens\":5}\nnot json\n{}\n")
    .assert()
    .success()
    .stdout("{\"max_tokens\":5}\nnot json\n{}\n")
    .stderr(
        predicate::str::contains("drip: --cost out: record 2 has no out cost to read")
            .and(predicate::str::contains("record 3").not()),
    );
}

#[test]
fn named_costs_and_their_limits_go_together() {
    for (args, why) in [
        (
            &["--cost", "in=a", "--cost-rate", "5/s"][..],
            "--cost in=…: no limit spends it",
        ),
        (
            &["--cost", "2", "--cost-rate", "in=5/s"],
            "spends the cost named in; give --cost in=SPEC",
        ),
        (
            &["--cost", "a", "--cost", "b", "--cost-rate", "5/s"],
            "--cost: given twice",
        ),
        (
            &["--cost", "in=a", "--cost", "in=b", "--cost-rate", "in=5/s"],
            "--cost in=…: given twice",
        ),
        (
            &["--cost", "2", "--cost-rate", "in+in=5/s"],
            "a cost named twice",
        ),
        (
            &[
                "--cost",
                "a=1",
                "--cost",
                "b=2",
                "--cost",
                "c=3",
                "--cost-rate",
                "a=5/s",
                "--cost-rate",
                "b=5/s",
                "--cost-rate",
                "c=5/s",
                "--cost-rate",
                "a+b=5/s",
                "--cost-rate",
                "b+c=5/s",
                "--share",
                "x",
            ],
            "more than 4 different sets of costs",
        ),
        (
            &[
                "--cost",
                "a",
                "--cost-rate",
                "5/s",
                "--settle",
                "out=b",
                "--exec",
                "true",
            ],
            "--settle out=…: no cost named out",
        ),
        (
            &["--cost", "a", "--cost-rate", "5/s", "--settle", "b"],
            "--settle: only with --exec",
        ),
        (
            &["--cost", "bytes/0", "--cost-rate", "5/s"],
            "divide by a whole number from 1",
        ),
    ] {
        drip(args)
            .write_stdin("x\n")
            .assert()
            .code(2)
            .stderr(predicate::str::contains(why));
    }
}

#[test]
fn a_regular_expression_that_looks_like_a_name_stays_one_unless_a_limit_spends_the_name() {
    // tokens=([0-9]+) is the unnamed cost's expression: no limit spends
    // "tokens".
    let (_, ms) = span(
        &["--cost", "tokens=([0-9]+)", "--cost-rate", "100/s:100"],
        "tokens=50\ntokens=50\ntokens=50\n",
    );
    assert!(ms >= 450.0, "{ms} ms");
}

/// drip running `job` (a shell command) per record of `input`, each
/// record's cost its `e`, at 100/s with a burst of 100, settled by
/// `settle` if given; how long the run took.
fn settled_run(input: &str, job: &str, settle: Option<&str>) -> (Duration, String) {
    let mut args = vec!["-q", "--cost", "e", "--cost-rate", "100/s:100"];
    if let Some(s) = settle {
        args.extend(["--settle", s]);
    }
    args.extend(["--exec", "sh", "-c", job]);
    let start = Instant::now();
    let mut cmd = command(&args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    common::feed(&mut child, input.as_bytes());
    let (status, out, err) = common::output_of(child);
    assert_eq!(status, 0, "{err}");
    let lines = String::from_utf8_lossy(&out).lines().count();
    assert_eq!(lines, input.lines().count(), "a line of output a record");
    (start.elapsed(), err)
}

#[test]
fn an_overestimate_settled_from_the_jobs_output_lets_the_next_records_go_sooner() {
    // Each record estimated at 100 (the burst) at 100/s: one a second.
    // The job reports 1: given back, they all go within a fraction of it.
    let input = "{\"e\":100}\n".repeat(6);
    let job = "echo '{\"usage\":{\"total\":1}}'";
    let (alone, _) = settled_run(&input, job, None);
    assert!(alone >= Duration::from_millis(4900), "{alone:?}");
    common::until_judged(3, Duration::from_secs(60), || {
        let (settled, _) = settled_run(&input, job, Some("usage.total"));
        (settled > Duration::from_millis(2500)).then(|| format!("settled in {settled:?}"))
    });
}

#[test]
fn an_output_without_the_number_keeps_the_estimate_and_is_said_once() {
    let input = "{\"e\":100}\n".repeat(3);
    let (took, err) = settled_run(&input, "echo hello", Some("usage.total"));
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert_eq!(err.matches("no number to settle").count(), 0, "-q: {err}");
    let out = command(&[
        "--cost",
        "e",
        "--cost-rate",
        "1000/s:100",
        "--settle",
        "usage.total",
        "--exec",
        "echo",
        "hello",
    ])
    .stdin(common::temp_file(input.as_bytes()).reopen().unwrap())
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("drip: --settle: the output of record").count(),
        1,
        "{err}"
    );
}

/// A job whose output passes 1 MiB is settled from its last line (the
/// output's tail is read), and one whose last line has no number says
/// the output was too large to read whole. It used to ignore any output
/// over 1 MiB ("no number to settle").
#[test]
fn a_usage_line_after_a_megabyte_of_output_is_settled() {
    let input = "{\"e\":100}\n".repeat(6);
    let big = "head -c 2100000 /dev/zero | tr '\\0' x; echo";
    let run = |job: &str| {
        let args = [
            "--cost",
            "e",
            "--cost-rate",
            "100/s:100",
            "--settle",
            "usage.total",
            "--exec",
            "sh",
            "-c",
            job,
        ];
        let start = Instant::now();
        let out = command(&args)
            .stdin(common::temp_file(input.as_bytes()).reopen().unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            out.stdout.len(),
            6 * (2_100_001 + 22),
            "every output passed on whole"
        );
        (
            start.elapsed(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    common::until_judged(3, Duration::from_secs(90), || {
        let (took, err) = run(&format!("{big}; echo '{{\"usage\":{{\"total\":1}}}}'"));
        assert!(!err.contains("no number to settle"), "{err}");
        (took > Duration::from_millis(2500)).then(|| format!("settled in {took:?}"))
    });
    let (took, err) = run(&format!("{big}; echo '{{\"other\":{{\"total\":1}}}}'"));
    assert!(
        took >= Duration::from_millis(4900),
        "the estimates stand: {took:?}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("--settle")).collect::<Vec<_>>(),
        ["drip: --settle: the output of record 1 is larger than 1 MiB, and its last line has no number to settle; its estimate stands (said once)"],
        "{err}"
    );
}

/// Six records estimated at 100, at `100/s:100`, each job `sh -c JOB sh
/// {usage}` settling 1: given back, they go within a fraction of 5 s
/// (judged as a clock test: a run over 2.5 s is made again).
fn settled_from_the_usage_file(job: &str) {
    let input = "{\"e\":100}\n".repeat(6);
    common::until_judged(3, Duration::from_secs(60), || {
        let args = [
            "-q",
            "--cost",
            "e",
            "--cost-rate",
            "100/s:100",
            "--settle",
            "spent",
            "--exec",
            "sh",
            "-c",
            job,
            "sh",
            "{usage}",
        ];
        let start = Instant::now();
        let out = command(&args)
            .stdin(common::temp_file(input.as_bytes()).reopen().unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n".repeat(6));
        let took = start.elapsed();
        (took > Duration::from_millis(2500)).then(|| format!("settled in {took:?}"))
    });
}

#[test]
fn what_a_job_spent_is_read_from_the_usage_file_it_writes() {
    // The job's stdout says nothing; it writes 1 to {usage}.
    settled_from_the_usage_file("echo '{\"spent\":1}' > \"$1\"; echo done");
}

#[test]
fn under_sh_c_the_usage_file_is_drip_usage() {
    // The job writes 1 to "$DRIP_USAGE", the file {usage} names (beside
    // its headers file, named by it).
    settled_from_the_usage_file(
        r#"[ "$DRIP_USAGE" = "$1" ] && [ "$DRIP_USAGE" = "$DRIP_HEADERS.usage" ] || exit 9
           echo '{"spent":1}' > "$DRIP_USAGE"; echo done"#,
    );
}

/// With `--settle`, each named cost tells what it spent (the estimates,
/// less what settlement gave back, plus what it charged on top) in
/// `--stats` and `--stats-json`: three records estimated at 100, 200 and
/// 50, each job reporting 120 (20 and 70 settled extra, 80 settled back).
#[test]
fn each_named_cost_tells_what_it_spent_and_settled() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let out = command(
        &[
            &["-q", "--stats", "--stats-json", stats.to_str().unwrap()][..],
            &common::SETTLING_JOBS,
        ]
        .concat(),
    )
    .stdin(
        common::temp_file(b"{\"i\":100}\n{\"i\":200}\n{\"i\":50}\n")
            .reopen()
            .unwrap(),
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("drip: cost in: 360 spent (estimated 350, 80 settled back, 90 settled extra)"),
        "{err}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        summary["costs"],
        serde_json::json!([{
            "cost": "in",
            "spent": 360,
            "estimated": 350,
            "settled_back": 80,
            "settled_extra": 90,
            "in_flight": 0,
        }]),
        "{summary}"
    );
    // With --share the limits are the shared state's: no figures.
    let runtime = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared.json");
    let out = command(
        &[
            &[
                "-q",
                "--stats-json",
                shared.to_str().unwrap(),
                "--share",
                "costs-figures",
            ][..],
            &common::SETTLING_JOBS,
        ]
        .concat(),
    )
    .env("XDG_RUNTIME_DIR", runtime.path())
    .stdin(common::temp_file(b"{\"i\":100}\n").reopen().unwrap())
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&shared).unwrap()).unwrap();
    assert_eq!(summary["succeeded"], 1, "{summary}");
    assert!(summary.get("costs").is_none(), "{summary}");
    // Without --settle: the estimates spent, nothing in flight told.
    let out = command(&[
        "-q",
        "--stats",
        "--cost",
        "n",
        "--cost-rate",
        "100000/s:1000",
    ])
    .stdin(
        common::temp_file(b"{\"n\":5}\n{\"n\":7}\n")
            .reopen()
            .unwrap(),
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().any(|l| l == "drip: cost: 12 spent"), "{err}");
}
