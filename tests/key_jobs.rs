//! `--key-jobs N`: at most N jobs of one key at once, beside `-j`, held
//! against each job's own start and end stamps; a key at its limit does
//! not hold up the others; loopback hosts with limits of their own.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::hosts::{spread, Host, Limits};
use crate::common::{self, run};

/// A job that notes `KEY START_NS END_NS REST` in `log` (its record is
/// `KEY REST`), having run `secs`.
fn stamping_job(log: &std::path::Path, secs: &str) -> Vec<String> {
    let script = format!(
        r#"s=$(date +%s%N); sleep {secs}; e=$(date +%s%N); echo "${{1%% *}} $s $e ${{1#* }}" >> '{}'"#,
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

/// Under --share (each key's rate shared, and its job limit), the limit
/// holds for a drip alone as well.
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

/// The jobs noted in `log` by [`stamping_job`] for records `KEY DRIP-N`:
/// (drip, key, start, end), ns.
fn stamps_by_drip(log: &Path) -> Vec<(usize, String, u64, u64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            let drip = w[3].split('-').next().unwrap().parse().unwrap();
            (
                drip,
                w[0].to_string(),
                w[1].parse().unwrap(),
                w[2].parse().unwrap(),
            )
        })
        .collect()
}

/// Whether the jobs of `key` of drip 0 and of drip 1 ran in spans that
/// meet (from each one's first start to its last end): the two drips
/// asked for the key at once.
fn runs_met(jobs: &[(usize, String, u64, u64)], key: &str) -> bool {
    let span = |drip: usize| {
        let mine = jobs.iter().filter(|j| j.0 == drip && j.1 == key);
        let first = mine.clone().map(|j| j.2).min().unwrap_or(u64::MAX);
        (first, mine.map(|j| j.3).max().unwrap_or(0))
    };
    let (a, b) = (span(0), span(1));
    a.0 < b.1 && b.0 < a.1
}

/// Two drips with `flags` under `shares[i]` (their state directories
/// `runtimes[i]`), each running stamped jobs of `secs` over `input(i)`
/// (records `KEY i-N`) to the end; the jobs, drip by drip.
fn two_drips(
    shares: [&str; 2],
    runtimes: [&Path; 2],
    flags: &[&str],
    secs: &str,
    input: &dyn Fn(usize) -> String,
) -> Vec<(usize, String, u64, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let drips: Vec<_> = (0..2)
        .map(|i| {
            let mut args: Vec<String> = ["-r", "inf", "--key", "1", "--key-rate", "1000/s"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(["--share", shares[i]].map(String::from));
            args.extend(flags.iter().map(|s| s.to_string()));
            args.extend(stamping_job(&log, secs));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            common::drip_reading(&args, input(i), runtimes[i], false)
        })
        .collect();
    for child in drips {
        let (status, _, err) = common::output_of(child);
        assert_eq!(status, 0, "{err}");
    }
    stamps_by_drip(&log)
}

/// Two drips on one NAME with `--key-jobs 1`: by the jobs' own stamps,
/// never two jobs of a key at once across both (each drip alone would
/// run one of a beside the other's: two), while a job of b runs beside
/// one of a. Judged where the two drips' jobs of a met (their runs, 1.5 s
/// each alone, started together).
fn two_drips_share_each_keys_job_limit(share: &str, runtimes: [&Path; 2]) {
    let attempt = std::cell::Cell::new(0);
    common::until_judged(3, Duration::from_secs(90), || {
        // A NAME of its own each run: no lease of a run before is met.
        attempt.set(attempt.get() + 1);
        let share = format!("{share}-{}", attempt.get());
        let input = |i: usize| -> String {
            (1..=3)
                .flat_map(|n| ["a", "b"].map(|k| format!("{k} {i}-{n}\n")))
                .collect()
        };
        let flags = ["--key-jobs", "1", "-j", "4"];
        let jobs = two_drips([&share, &share], runtimes, &flags, "0.5", &input);
        assert_eq!(jobs.len(), 12, "{jobs:?}");
        let keyed: Vec<(String, u64, u64)> = jobs.iter().map(|j| (j.1.clone(), j.2, j.3)).collect();
        for key in ["a", "b"] {
            let most = most_at_once(&keyed, |k| k == key);
            assert_eq!(
                most, 1,
                "{most} jobs of {key} at once across the drips: {jobs:?}"
            );
        }
        assert_eq!(most_at_once(&keyed, |_| true), 2, "b beside a: {jobs:?}");
        (!runs_met(&jobs, "a")).then(|| format!("the two drips' jobs of a never met: {jobs:?}"))
    });
}

/// Under --share each key's job limit holds across every drip on the
/// NAME, through the state file.
#[test]
fn drips_sharing_a_name_run_n_of_a_key_between_them() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    two_drips_share_each_keys_job_limit("kjtwo", [r, r]);
}

/// The same across two "hosts" (state directories) through Redis.
#[test]
fn drips_sharing_a_name_through_redis_run_n_of_a_key_between_them() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = crate::fleet::Redis::start();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    two_drips_share_each_keys_job_limit(&redis.share("kjtwo"), [a.path(), b.path()]);
}

/// `--key-jobs` with `--share-jobs`: both hold across the two drips, by
/// the jobs' own stamps: at most 3 jobs at once in all (`--share-jobs
/// 3`; the drips' `-j 4` each would run 6, two of each key), and at most
/// 2 of a key (`--key-jobs 2`; a's own pool, where 3 of the fleet's
/// leases would let 3 of a run). Judged where the drips' jobs of a met,
/// and where the fleet's 3 and a key's 2 were each reached.
fn both_the_fleets_and_each_keys_job_limit_hold(share: &str, runtimes: [&Path; 2]) {
    let attempt = std::cell::Cell::new(0);
    common::until_judged(3, Duration::from_secs(120), || {
        attempt.set(attempt.get() + 1);
        let share = format!("{share}-{}", attempt.get());
        // Each drip: a's records first, then b's and c's.
        let input = |i: usize| -> String {
            let a: String = (1..=6).map(|n| format!("a {i}-{n}\n")).collect();
            let bc: String = (1..=2)
                .flat_map(|n| ["b", "c"].map(|k| format!("{k} {i}-{n}\n")))
                .collect();
            a + &bc
        };
        let flags = ["--key-jobs", "2", "--share-jobs", "3", "-j", "4"];
        let jobs = two_drips([&share, &share], runtimes, &flags, "0.3", &input);
        assert_eq!(jobs.len(), 20, "{jobs:?}");
        let keyed: Vec<(String, u64, u64)> = jobs.iter().map(|j| (j.1.clone(), j.2, j.3)).collect();
        let all = most_at_once(&keyed, |_| true);
        assert!(all <= 3, "{all} jobs at once across the drips: {jobs:?}");
        let mut most_of_a_key = 0;
        for key in ["a", "b", "c"] {
            let most = most_at_once(&keyed, |k| k == key);
            assert!(
                most <= 2,
                "{most} jobs of {key} at once across the drips: {jobs:?}"
            );
            most_of_a_key = most_of_a_key.max(most);
        }
        if !runs_met(&jobs, "a") || all < 3 || most_of_a_key < 2 {
            return Some(format!(
                "the drips' jobs of a never met, or the limits were never reached ({all} at once, {most_of_a_key} of a key): {jobs:?}"
            ));
        }
        None
    });
}

#[test]
fn with_share_jobs_both_the_fleets_and_each_keys_job_limit_hold() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    both_the_fleets_and_each_keys_job_limit_hold("kjboth", [r, r]);
}

/// What a job of [`stamping_drip`] stamped: its start or its end, its
/// key, its attempt, its process group, and when (the realtime clock,
/// s).
#[derive(Debug, Clone)]
struct Stamp {
    start: bool,
    key: String,
    attempt: u32,
    group: i32,
    at: f64,
}

/// A drip with `--key-jobs 1` and `flags` under `share` (its state
/// directory `runtime`) over `input` (records `KEY WHO-N`), whose jobs
/// stamp their start into `log`, run the shell's `body` (which may set
/// `r`, the job's exit status), and stamp their end.
fn stamping_drip(
    share: &str,
    runtime: &Path,
    log: &Path,
    (flags, body): (&[&str], &str),
    input: &str,
) -> Child {
    let stamp = |what: &str| {
        format!(
            r#"echo "{what} ${{1%% *}} ${{1#* }} $DRIP_ATTEMPT $$ $(date +%s%N)" >> '{}'"#,
            log.display()
        )
    };
    let script = format!("{}; r=0; {body}; {}; exit $r", stamp("s"), stamp("e"));
    let mut args = vec!["-r", "inf", "--key", "1", "--key-rate", "1000/s"];
    args.extend(["--share", share, "--key-jobs", "1", "-q"]);
    args.extend(flags);
    args.extend(["--exec", "sh", "-c", &script, "sh", "{}"]);
    common::drip_reading(&args, input.to_string(), runtime, false)
}

/// The stamps [`stamping_drip`]'s jobs made in `log` for the records of
/// `who` (their rest starting `WHO-`), in the order made.
fn stamps_of(log: &Path, who: &str) -> Vec<Stamp> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w.len() == 6 && w[2].starts_with(who)).then(|| Stamp {
                start: w[0] == "s",
                key: w[1].to_string(),
                attempt: w[3].parse().unwrap(),
                group: w[4].parse().unwrap(),
                at: w[5].parse::<f64>().unwrap() / 1e9,
            })
        })
        .collect()
}

/// When the first job of `key` among `stamps` started.
fn first_start(stamps: &[Stamp], key: &str) -> Option<f64> {
    stamps
        .iter()
        .find(|s| s.start && s.key == key)
        .map(|s| s.at)
}

/// Whether `what` holds within `secs` s (asked every 20 ms).
fn within(secs: u64, what: &dyn Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !what() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    what()
}

/// A drip holding a key's one lease (`--key-jobs 1` under --share) with a
/// job that would run 100 s is killed with `kill -9`; the other drip's
/// job of that key, waiting for the lease meanwhile (its job of another
/// key ran at once), starts once the lease lapsed: within its 5 s of the
/// kill and a second for a busy machine (a poll, a job's start), after
/// the killed drip's job is gone (its warden's doing), not never. A later
/// start is not judged where the waiting drip's threads waited for a CPU
/// as long as it was late, and is made again.
fn a_killed_holders_key_lease_lapses_to_the_other_drip(share: &str, runtimes: [&Path; 2]) {
    let _t = common::timing();
    let attempt = std::cell::Cell::new(0);
    common::until_judged(3, Duration::from_secs(120), || {
        // A NAME of its own each run: the lease of the drip killed in the
        // run before holds its 5 s.
        attempt.set(attempt.get() + 1);
        let share = format!("{share}-{}", attempt.get());
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stamps");
        let long = (&["-j", "4"][..], "sleep 100");
        let mut holder = stamping_drip(&share, runtimes[0], &log, long, "a 0-1\na 0-2\n");
        let holding = within(20, &|| !stamps_of(&log, "0-").is_empty());
        assert!(holding, "the holder's job never started");
        let origin = Instant::now();
        // -j 2: a's second record waits in the queue, not in a slot, and b
        // takes the other.
        let short = (&["-j", "2"][..], "sleep 0.2");
        let input = "a 1-1\na 1-3\nb 1-2\n";
        let mut waiter = stamping_drip(&share, runtimes[1], &log, short, input);
        let cpu = common::watch_cpu_waits(waiter.id(), origin);
        // The waiter asks for a's lease (a few polls) before the holder goes.
        std::thread::sleep(Duration::from_millis(600));
        let groups: Vec<i32> = stamps_of(&log, "0-").iter().map(|s| s.group).collect();
        holder.kill().unwrap();
        holder.wait().unwrap();
        let (killed_at, killed_since) = (common::unix_now(), origin.elapsed().as_secs_f64());
        let gone = crate::jobs_leaving::until_gone(&groups, &[], Duration::from_secs(20));
        let gone_at = common::unix_now();
        let got = within(20, &|| first_start(&stamps_of(&log, "1-"), "a").is_some());
        if !got {
            let _ = waiter.kill();
        }
        let (status, _, err) = common::output_of(waiter);
        let cpu = cpu.join().unwrap();
        for g in groups {
            crate::jobs_leaving::kill_quietly(&format!("-{g}"));
        }
        assert!(
            gone.is_some(),
            "the holder's job ran on 20 s after its kill"
        );
        assert!(got, "the waiter never had a's lease (20 s after the kill)");
        assert_eq!(status, 0, "{err}");
        let mine = stamps_of(&log, "1-");
        let at = |key: &str| first_start(&mine, key).unwrap();
        assert_eq!(stamps_of(&log, "0-").len(), 1, "the holder ran one of a");
        assert_eq!(mine.iter().filter(|s| s.start).count(), 3, "{mine:?}");
        assert!(at("b") < at("a"), "b's job waited for a's lease: {mine:?}");
        assert!(gone_at <= at("a"), "a's job started while the holder's ran");
        let late = at("a") - killed_at;
        eprintln!("a's lease went to the waiter {late:.2} s after the kill");
        if late <= 6.0 {
            return None;
        }
        let waited = common::threads_cpu_wait_between(&cpu, killed_since, killed_since + late);
        assert!(
            waited >= late - 6.0,
            "a's lease went to the waiter {late:.2} s after the kill (its threads waited {waited:.2} s for a CPU)"
        );
        Some(format!(
            "{late:.2} s after the kill, but the waiter waited {waited:.2} s for a CPU"
        ))
    });
}

/// The stamps of drip `who`'s jobs once they are all made: it ended by
/// itself, with status 0.
fn ended_stamps(drip: Child, log: &Path, who: &str) -> Vec<Stamp> {
    let (status, _, err) = common::output_of(drip);
    assert_eq!(status, 0, "{err}");
    stamps_of(log, who)
}

/// A key's lease is held through its record's retries, and renewed while
/// they run on past the 5 s a lease lives unrenewed: drip 0's record of
/// a fails its first attempt of 3 s (75: try again) and succeeds in a
/// second of 3 s half a second later; drip 1's record of a, asking from
/// the first attempt on, starts only after the second ended (with no
/// renewal, 5 s after the lease was taken, during the second).
#[test]
fn a_keys_lease_is_held_through_the_retries_and_renewed() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    let log = r.join("stamps");
    let retried = (
        &["-j", "2", "--retries", "1", "--backoff", "500ms..500ms"][..],
        r#"sleep 3; [ "$DRIP_ATTEMPT" = 2 ] || r=75"#,
    );
    let first = stamping_drip("kjretry", r, &log, retried, "a 0-1\n");
    assert!(within(20, &|| !stamps_of(&log, "0-").is_empty()));
    let second = stamping_drip("kjretry", r, &log, (&["-j", "2"], "sleep 0.1"), "a 1-1\n");
    let theirs = ended_stamps(first, &log, "0-");
    let mine = ended_stamps(second, &log, "1-");
    let last_end = theirs.iter().find(|s| !s.start && s.attempt == 2);
    let last_end = last_end
        .unwrap_or_else(|| panic!("no second attempt: {theirs:?}"))
        .at;
    let started = first_start(&mine, "a").unwrap();
    assert!(
        started >= last_end,
        "drip 1's job of a started {:.2} s before drip 0's retry ended: {theirs:?}",
        last_end - started
    );
}

/// Under --share, `drip ctl NAME key-jobs 2` reaches the key's shared
/// lease at its next ask: a key held at 1 runs 2 at once, by its jobs'
/// stamps (each lease asked with the limit the drip holds now, not the
/// one it started with).
#[test]
fn a_key_jobs_change_reaches_the_shared_lease() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let log = rt.join("stamps");
    let flags = (&["-j", "4", "--name", "kjctl"][..], "sleep 2");
    let drip = stamping_drip("kjctl", rt, &log, flags, "a 0-1\na 0-2\na 0-3\n");
    let starts = || stamps_of(&log, "0-").iter().filter(|s| s.start).count();
    assert!(within(20, &|| starts() == 1), "no job started");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(starts(), 1, "a is held at 1");
    let (status, _, err) = common::ctl(rt, &["kjctl", "key-jobs", "2"]);
    assert_eq!(status, 0, "{err}");
    assert!(
        within(1, &|| starts() == 2),
        "a's second job did not start within 1 s of key-jobs 2"
    );
    let stamps = ended_stamps(drip, &log, "0-");
    assert_eq!(stamps.iter().filter(|s| s.start).count(), 3, "{stamps:?}");
}

/// Beside --share-jobs, a job waiting for its key's lease holds the
/// fleet's lease it took with its `-j` slot (docs/keys.md says so): drip
/// 0 runs a for 2 s (a's one lease, one of the fleet's 2); drip 1's a
/// takes the fleet's other and waits for a's, so its b, a slot free,
/// waits for a lease of the fleet's until drip 0's job ends.
#[test]
fn a_job_waiting_for_its_keys_lease_holds_its_fleet_lease() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    let log = r.join("stamps");
    let flags = &["-j", "2", "--share-jobs", "2"][..];
    let first = stamping_drip("kjhold", r, &log, (flags, "sleep 2"), "a 0-1\n");
    assert!(within(20, &|| !stamps_of(&log, "0-").is_empty()));
    let second = stamping_drip("kjhold", r, &log, (flags, "sleep 0.1"), "a 1-1\nb 1-2\n");
    let theirs = ended_stamps(first, &log, "0-");
    let mine = ended_stamps(second, &log, "1-");
    let ended = theirs.iter().find(|s| !s.start).unwrap().at;
    let b = first_start(&mine, "b").unwrap();
    assert!(
        b >= ended,
        "b started {:.2} s before a's lease came back",
        ended - b
    );
}

#[test]
fn a_killed_holders_key_lease_lapses_to_the_other_drip_on_one_host() {
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    a_killed_holders_key_lease_lapses_to_the_other_drip("kjkill", [r, r]);
}

#[test]
fn a_killed_holders_key_lease_lapses_to_the_other_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let redis = crate::fleet::Redis::start();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    a_killed_holders_key_lease_lapses_to_the_other_drip(
        &redis.share("kjkill"),
        [a.path(), b.path()],
    );
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
