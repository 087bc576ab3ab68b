//! `--key-jobs N`: at most N jobs of one key at once, beside `-j`, held
//! against each job's own start and end stamps; a key at its limit does
//! not hold up the others; loopback hosts with limits of their own.

use std::time::Duration;

use crate::common::hosts::{spread, Host, Limits};
use crate::common::{self, run};

/// A job that notes `KEY START_NS END_NS` in `log` (its record is `KEY
/// N`), having run `secs`.
fn stamping_job(log: &std::path::Path, secs: &str) -> Vec<String> {
    let script = format!(
        r#"s=$(date +%s%N); sleep {secs}; e=$(date +%s%N); echo "${{1%% *}} $s $e" >> '{}'"#,
        log.display()
    );
    ["--exec", "sh", "-c", &script, "sh", "{}"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The jobs noted in `log`: (key, start, end), ns.
fn stamps(log: &std::path::Path) -> Vec<(String, u64, u64)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (
                w[0].to_string(),
                w[1].parse().unwrap(),
                w[2].parse().unwrap(),
            )
        })
        .collect()
}

/// The most jobs running at once, among those `of` picks: at each start,
/// the jobs begun by then and not yet ended.
fn most_at_once(jobs: &[(String, u64, u64)], of: impl Fn(&str) -> bool) -> usize {
    let picked: Vec<_> = jobs.iter().filter(|(k, _, _)| of(k)).collect();
    picked
        .iter()
        .map(|(_, at, _)| picked.iter().filter(|(_, s, e)| s <= at && at < e).count())
        .max()
        .unwrap_or(0)
}

/// Records `KEY N` for each key of `keys`, `n` of each, interleaved.
fn keyed_records(keys: &[&str], n: usize) -> String {
    (1..=n)
        .flat_map(|i| keys.iter().map(move |k| format!("{k} {i}\n")))
        .collect()
}

/// Run `--exec` jobs of 0.2 s over `input` with `flags`; the jobs' stamps.
fn stamped_run(flags: &[&str], input: &str) -> Vec<(String, u64, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let mut args: Vec<String> = ["-r", "inf", "--key", "1", "--key-rate", "1000/s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(flags.iter().map(|s| s.to_string()));
    args.extend(stamping_job(&log, "0.2"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, _, err) = run(&args, input);
    assert_eq!(status, 0, "{err}");
    stamps(&log)
}

/// No more than N jobs of one key ever overlap, by the jobs' own stamps,
/// while the other keys' jobs run meanwhile (more than N at once in all),
/// and -j still bounds them all; without --key-jobs one key's jobs run
/// more than N at once (the same run can tell).
#[test]
fn no_more_than_n_jobs_of_a_key_overlap_and_other_keys_run_meanwhile() {
    let _t = common::beside_timing();
    // a's records first: without a limit -j 5 would run 5 of them.
    let input = keyed_records(&["a"], 10) + &keyed_records(&["b", "c"], 4);
    let jobs = stamped_run(&["-j", "5", "--key-jobs", "2"], &input);
    assert_eq!(jobs.len(), 18);
    for key in ["a", "b", "c"] {
        let most = most_at_once(&jobs, |k| k == key);
        assert!(most <= 2, "{most} jobs of {key} at once: {jobs:?}");
    }
    let all = most_at_once(&jobs, |_| true);
    assert!(all > 2, "the other keys ran meanwhile: {all} at most");
    assert!(all <= 5, "-j 5 bounds them all: {all}");
    // Without it, a's jobs run more than 2 at once.
    let jobs = stamped_run(&["-j", "5"], &keyed_records(&["a"], 6));
    let most = most_at_once(&jobs, |k| k == "a");
    assert!(most > 2, "without --key-jobs: {most}");
}

/// A key with many records at its limit does not hold up a key that comes
/// after them: b's one record starts at once, not after a's backlog.
#[test]
fn a_key_at_its_limit_does_not_hold_up_a_key_behind_it() {
    let _t = common::beside_timing();
    let mut input = keyed_records(&["a"], 8);
    input.push_str("b 1\n");
    let jobs = stamped_run(&["-j", "4", "--key-jobs", "1"], &input);
    let first = jobs.iter().map(|(_, s, _)| *s).min().unwrap();
    let b = jobs.iter().find(|(k, _, _)| k == "b").unwrap().1;
    // a's 8 jobs one at a time take 1.6 s; b starts with a's first.
    assert!(
        b - first < 1_000_000_000,
        "b started {} ms after the first job: {jobs:?}",
        (b - first) / 1_000_000
    );
    assert_eq!(most_at_once(&jobs, |k| k == "a"), 1);
}

/// `--key host --key-jobs N` alone, with no rate per key (each host's
/// concurrency its only limit, as lychee's per-host concurrency): it runs,
/// at most N of a key at once, the keys side by side.
#[test]
fn a_job_limit_per_key_needs_no_rate_per_key() {
    let _t = common::beside_timing();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let mut args: Vec<String> = ["-r", "inf", "--key", "1", "--key-jobs", "2", "-j", "8"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(stamping_job(&log, "0.2"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, _, err) = run(&args, &keyed_records(&["a", "b"], 6));
    assert_eq!(status, 0, "{err}");
    let jobs = stamps(&log);
    assert_eq!(jobs.len(), 12, "{jobs:?}");
    assert_eq!(most_at_once(&jobs, |k| k == "a"), 2, "{jobs:?}");
    assert_eq!(most_at_once(&jobs, |k| k == "b"), 2, "{jobs:?}");
    assert!(most_at_once(&jobs, |_| true) > 2, "{jobs:?}");
}

/// Under --share (each key's rate shared, the job limit this drip's own,
/// as -j is), the limit holds as well.
#[test]
fn the_limit_holds_with_key_rates_shared() {
    let _t = common::beside_timing();
    let input = keyed_records(&["a"], 8) + &keyed_records(&["b"], 2);
    let flags = ["--share", "keyjobs", "-j", "6", "--key-jobs", "2"];
    let jobs = stamped_run(&flags, &input);
    assert_eq!(jobs.len(), 10);
    assert_eq!(most_at_once(&jobs, |k| k == "a"), 2, "{jobs:?}");
    assert!(most_at_once(&jobs, |_| true) > 2, "{jobs:?}");
}

#[test]
fn key_jobs_needs_exec_and_key_and_a_whole_number_from_1() {
    for (args, says) in [
        (
            &["--key", "1", "--key-rate", "5/s", "--key-jobs", "2"][..],
            "--key-jobs: only with --exec",
        ),
        (
            &["--key-jobs", "2", "--exec", "true"][..],
            "--key-jobs: needs --key",
        ),
        (
            &[
                "--key",
                "1",
                "--key-rate",
                "5/s",
                "--key-jobs",
                "0",
                "--exec",
                "true",
            ][..],
            "--key-jobs",
        ),
        (
            &[
                "--key",
                "1",
                "--key-rate",
                "5/s",
                "--key-jobs",
                "2",
                "--share",
                "x",
                "--share-jobs",
                "4",
                "--exec",
                "true",
            ][..],
            "--key-jobs: not with --share-jobs",
        ),
    ] {
        let (status, _, err) = run(args, "x\n");
        assert_eq!(status, 2, "{args:?}: {err}");
        assert!(err.starts_with("drip: "), "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
}

/// Three hosts, each refusing more than its own number of requests in
/// flight (503): with `--key host --key-jobs` at the smallest of them, curl
/// never meets a 503, and no host sees more than its limit at once.
#[test]
fn hosts_with_their_own_concurrency_never_answer_503() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let service = Duration::from_millis(100);
    let hosts = Host::start_all(&[
        Limits::concurrency(2, service),
        Limits::concurrency(3, service),
        Limits::concurrency(2, service),
    ]);
    let urls = spread(&hosts, &[2, 1, 1], 40);
    let input: String = urls.iter().map(|u| format!("{u}\n")).collect();
    let mut args = vec![
        "-r",
        "inf",
        "--key",
        "host",
        "--key-rate",
        "1000/s",
        "--key-jobs",
        "2",
        "-j",
        "8",
    ];
    args.extend(common::curl_exec("{}"));
    let (status, _, err) = run(&args, &input);
    assert_eq!(status, 0, "{err}");
    let mut all_at_once = 0;
    for host in &hosts {
        let c = host.counts();
        assert_eq!(c.unavailable, 0, "{}: {c:?}", host.key());
        assert_eq!(c.too_many, 0, "{}: {c:?}", host.key());
        assert!(c.most_at_once <= 2, "{}: {c:?}", host.key());
        assert!(c.most_at_once <= host.limits.concurrency);
        all_at_once += c.most_at_once;
    }
    let served: usize = hosts.iter().map(|h| h.counts().ok).sum();
    assert_eq!(served, 40);
    assert!(all_at_once > 3, "the hosts were served side by side");
}

/// The same hosts without --key-jobs: -j 8 over one host allowing 2 meets
/// 503s (the harness can tell a run that breaks the limit).
#[test]
fn without_key_jobs_a_host_is_overrun() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let host = Host::start(Limits::concurrency(2, Duration::from_millis(200)));
    let input: String = (1..=16)
        .map(|i| format!("{}\n", host.url(&format!("/{i}"))))
        .collect();
    let mut args = vec!["-r", "inf", "-j", "8"];
    args.extend(common::curl_exec("{}"));
    // The records refused fail (an overload, no retries): status 123.
    let (status, _, err) = run(&args, &input);
    assert!(status == 0 || status == 123, "{status}: {err}");
    let c = host.counts();
    assert!(c.unavailable > 0 && c.most_at_once > 2, "{c:?}");
}

/// A host given a rate answers 429 with Retry-After over it (the harness's
/// rate, for runs with a rate per host).
#[test]
fn a_host_over_its_rate_answers_429() {
    if !common::have(&["curl"]) {
        return;
    }
    let _t = common::beside_timing();
    let host = Host::start(
        Limits::concurrency(8, Duration::from_millis(10)).with_rate(2, Duration::from_secs(5)),
    );
    let input: String = (1..=4)
        .map(|i| format!("{}\n", host.url(&format!("/{i}"))))
        .collect();
    let mut args = vec!["-r", "inf", "-j", "4"];
    args.extend(common::curl_exec("{}"));
    let (status, _, err) = run(&args, &input);
    assert!(status == 0 || status == 123, "{status}: {err}");
    let c = host.counts();
    assert_eq!((c.ok, c.too_many, c.unavailable), (2, 2, 0), "{c:?}");
}

/// A record waiting out its backoff between attempts still counts: the
/// key's next record starts only after its last attempt ended. Each
/// attempt notes `RECORD ATTEMPT START END`.
#[test]
fn a_record_between_its_attempts_still_counts() {
    let _t = common::beside_timing();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    // "a 1" fails its first attempt (75: try again), then succeeds.
    let script = format!(
        r#"s=$(date +%s%N); sleep 0.1; e=$(date +%s%N); echo "${{1#* }} $DRIP_ATTEMPT $s $e" >> '{}'; [ "$1" != "a 1" ] || [ "$DRIP_ATTEMPT" = 2 ] || exit 75"#,
        log.display()
    );
    let args = [
        "-r",
        "inf",
        "--key",
        "1",
        "--key-rate",
        "1000/s",
        "--key-jobs",
        "1",
        "-j",
        "4",
        "--retries",
        "1",
        "--backoff",
        "300ms..300ms",
        "--exec",
        "sh",
        "-c",
        &script,
        "sh",
        "{}",
    ];
    let (status, _, err) = run(&args, "a 1\na 2\n");
    assert_eq!(status, 0, "{err}");
    let text = std::fs::read_to_string(&log).unwrap();
    let at = |record: &str, attempt: &str| -> (u64, u64) {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{record} {attempt} ")))
            .unwrap_or_else(|| panic!("{record} {attempt}: {text}"));
        let w: Vec<u64> = line
            .split(' ')
            .skip(2)
            .map(|x| x.parse().unwrap())
            .collect();
        (w[0], w[1])
    };
    let (_, first_ends) = at("1", "1");
    let (_, retry_ends) = at("1", "2");
    let (second_starts, _) = at("2", "1");
    assert!(
        second_starts >= retry_ends,
        "a 2 started {} ms after a 1's first attempt ended, before its retry ended: {text}",
        (second_starts - first_ends) / 1_000_000
    );
}

/// Records with no key count as one key.
#[test]
fn records_with_no_key_count_as_one_key() {
    let _t = common::beside_timing();
    // --key 2: records of one field have no key.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let mut args: Vec<String> = ["-r", "inf", "--key", "2", "--key-rate", "1000/s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--key-jobs", "2", "-j", "6"].map(String::from));
    args.extend(stamping_job(&log, "0.2"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let input: String = (1..=6).map(|i| format!("n{i}\n")).collect();
    let (status, _, err) = run(&args, &input);
    assert_eq!(status, 0, "{err}");
    let jobs = stamps(&log);
    assert_eq!(jobs.len(), 6);
    assert_eq!(most_at_once(&jobs, |_| true), 2, "{jobs:?}");
}

/// Under --share the limit is each drip's own, as -j is: two drips on one
/// NAME run N jobs of a key each.
#[test]
fn each_drip_sharing_a_name_runs_its_own_n_of_a_key() {
    let _t = common::beside_timing();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let mut args: Vec<String> = [
        "-r",
        "inf",
        "--key",
        "1",
        "--key-rate",
        "1000/s",
        "--share",
        "kjtwo",
        "--key-jobs",
        "1",
        "-j",
        "4",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(stamping_job(&log, "0.5"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let input = keyed_records(&["a"], 3);
    common::until_judged(3, Duration::from_secs(60), || {
        let _ = std::fs::remove_file(&log);
        let drips: Vec<_> = (0..2)
            .map(|_| common::drip_reading(&args, input.clone(), &common::runtime_dir(), false))
            .collect();
        for child in drips {
            let (status, _, err) = common::output_of(child);
            assert_eq!(status, 0, "{err}");
        }
        let jobs = stamps(&log);
        assert_eq!(jobs.len(), 6);
        // Each drip runs one a at a time, so never more than two; two
        // once their runs (1.5 s each, started together) meet.
        match most_at_once(&jobs, |k| k == "a") {
            2 => None,
            1 => Some(format!("the two drips' runs never met: {jobs:?}")),
            n => panic!("{n} jobs of a at once: {jobs:?}"),
        }
    });
}

/// A rate table's JOBS column gives the keys of a row their own job limit
/// (`KEY RATE[:BURST] [JOBS]`), `--key-jobs` the keys whose row has none
/// and the keys no row matches: by the jobs' own stamps, at most a row's
/// JOBS of its key at once, each reaching it.
#[test]
fn each_key_runs_at_most_its_rows_jobs() {
    let _t = common::beside_timing();
    let table = common::temp_file(b"a 1000/s 1\nb 1000/s:2 3 # three at once\nc 1000/s\n");
    let path = table.path().to_str().unwrap();
    let input = keyed_records(&["a", "b", "c", "d"], 6);
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let stats_path = stats.to_str().unwrap();
    let flags = [
        "-j",
        "12",
        "--key-jobs",
        "2",
        "--key-rates",
        path,
        "--stats-json",
        stats_path,
    ];
    let jobs = stamped_run(&flags, &input);
    assert_eq!(jobs.len(), 24);
    for (key, most) in [("a", 1), ("b", 3), ("c", 2), ("d", 2)] {
        let seen = most_at_once(&jobs, |k| k == key);
        assert_eq!(seen, most, "{key}: {jobs:?}");
    }
    // Each key's job limit in --stats-json, its jobs all ended.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let limits = summary["keys"]["key_limits"].as_array().unwrap().clone();
    let of = |key: &str| limits.iter().find(|l| l["key"] == key).cloned().unwrap();
    for (key, jobs) in [("a", 1), ("b", 3), ("c", 2), ("d", 2)] {
        assert_eq!(of(key)["jobs"], jobs, "{key}: {summary}");
        assert_eq!(of(key)["running"], 0, "{key}: {summary}");
    }
}

/// The table read again (`drip ctl … key-rates`, SIGHUP) changes each
/// key's job limit: a key held at its old JOBS runs up to its new one at once;
/// `key-list` and `info`'s key_limits show each key's job limit and its
/// jobs running.
#[test]
fn a_table_read_again_raises_a_keys_job_limit() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rates");
    std::fs::write(&file, "a 1000/s 1\n").unwrap();
    let records: String = (1..=10).map(|i| format!("a {i}\n")).collect();
    let path = file.to_str().unwrap();
    let args = [
        "-r",
        "inf",
        "--key",
        "1",
        "--key-rates",
        path,
        "-j",
        "8",
        "--name",
        "rows",
        "--exec",
        "sh",
        "-c",
        "sleep 3",
    ];
    let mut child = common::drip_reading(&args, records, rt, true);
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let running = |rt: &std::path::Path| -> Option<serde_json::Value> {
        let (status, out, _) = common::ctl(rt, &["rows", "jobs"]);
        (status == 0).then(|| serde_json::from_str(&out).unwrap())
    };
    let count = |v: &serde_json::Value| v["running"].as_array().map_or(0, Vec::len);
    loop {
        if running(rt).is_some_and(|v| count(&v) == 1) {
            break;
        }
        assert!(std::time::Instant::now() < until, "no job started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(count(&running(rt).unwrap()), 1, "a is held at 1");
    let (_, list, _) = common::ctl(rt, &["rows", "key-list"]);
    assert!(list.contains("a\ta\t1000/s:1\t9\t1\t1"), "{list}");
    std::fs::write(&file, "a 1000/s 3\n").unwrap();
    let (status, info, err) = common::ctl(rt, &["rows", "key-rates", path]);
    assert_eq!(status, 0, "{err}");
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["keys"]["key_limits"][0]["jobs"], 3, "{info}");
    std::thread::sleep(Duration::from_millis(500));
    let jobs = running(rt).unwrap();
    assert_eq!(
        count(&jobs),
        3,
        "a runs 3 at once, started before the first ended: {jobs}"
    );
    let (_, info, _) = common::ctl(rt, &["rows", "info"]);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["keys"]["key_limits"][0]["running"], 3, "{info}");
    // SIGHUP reads the file again: 5 at once.
    std::fs::write(&file, "a 1000/s 5\n").unwrap();
    common::send_signal(&child, libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    let jobs = running(rt).unwrap();
    assert_eq!(count(&jobs), 5, "after SIGHUP, a runs 5 at once: {jobs}");
    common::send_signal(&child, libc::SIGTERM);
    common::wait_for(&mut child, Duration::from_secs(20));
}

/// A JOBS column without `--exec` is a malformed row (its line named);
/// with `--exec` but no `--key`, `--key-rates` is refused as before.
#[test]
fn a_jobs_column_needs_exec() {
    let table = common::temp_file(b"a 5/s\nb 5/s 2\n");
    let path = table.path().to_str().unwrap();
    let out = common::drip(&["--key", "1", "--key-rates", path])
        .write_stdin("a 1\n")
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    let says = format!("drip: --key-rates {path}:2: '2': a job limit only with --exec");
    assert!(err.starts_with(&says) && err.lines().count() == 1, "{err}");
    let out = common::drip(&["--key-rates", path, "--exec", "true"])
        .write_stdin("a 1\n")
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("--key-rates: needs --key"), "{err}");
}
