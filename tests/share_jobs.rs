//! `--share-jobs N`: at most N jobs running at once across every drip on
//! a NAME, sampled from the jobs themselves, through the state file and
//! through Redis (drips on two "hosts": two state directories, one
//! Redis); and the leases of a drip killed with SIGKILL lapse within the
//! stated 5 s.

use crate::common;
use crate::fleet;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// The jobs' limit across the drips.
const LIMIT: usize = 8;

/// What a job does: stamps its start and end (ns of the realtime clock,
/// and its record, which names its drip) into `log`, 300 ms apart; ended
/// early by TERM (its drip killed: the warden's), it stamps its end then.
fn job(log: &Path) -> Vec<String> {
    let script = format!(
        "trap '[ -n \"$done\" ] || echo \"e $1 $(date +%s%N)\" >> {0}; exit 143' TERM; \
         echo \"s $1 $(date +%s%N)\" >> {0}; sleep 0.3; done=1; echo \"e $1 $(date +%s%N)\" >> {0}",
        log.display()
    );
    vec!["sh".into(), "-c".into(), script, "sh".into(), "{}".into()]
}

/// Drip `i` running [`job`]s for 400 records under `share`, its state
/// directory `runtime`, its joblog [`joblog_of`] `log`.
fn leasing_drip(i: usize, share: &str, log: &Path, runtime: &Path) -> Child {
    let n = LIMIT.to_string();
    let joblog = joblog_of(log, i);
    let mut args: Vec<String> = [
        "-r",
        "200/s",
        "--share",
        share,
        "--share-jobs",
        &n,
        "-j",
        &n,
        "-q",
        "--joblog",
        joblog.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push("--exec".into());
    args.extend(job(log));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = common::command(&args);
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn drip");
    let input: String = (1..=400).map(|r| format!("{i}-{r}\n")).collect();
    common::feed(&mut child, input.as_bytes());
    child
}

/// A job that stamps its record's start (`s RECORD NS`) and end (`e …`)
/// into `log`, sleeping `secs` between.
fn stamped(log: &Path, secs: &str) -> String {
    format!(
        "echo \"s $1 $(date +%s%N)\" >> {0}; sleep {secs}; echo \"e $1 $(date +%s%N)\" >> {0}",
        log.display()
    )
}

/// The joblog of drip `i` whose jobs stamp into `log`: beside it.
fn joblog_of(log: &Path, i: usize) -> std::path::PathBuf {
    log.with_file_name(format!("joblog-{i}"))
}

/// How long (s) the job whose start is stamped at `t` in `log` took from
/// drip's starting it (its joblog's `start_us`) to its stamp: the
/// machine's part in it (a fork, `sh`, `date`). 0 if not found (a job of
/// a drip killed before it wrote its joblog line).
fn start_lag(log: &Path, t: f64) -> f64 {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let record = text.lines().find_map(|l| {
        let mut w = l.split(' ');
        let (kind, record, ns) = (w.next()?, w.next()?, w.next()?);
        (kind == "s" && ns.parse::<f64>().ok()? / 1e9 == t).then(|| record.to_string())
    });
    let Some(record) = record else { return 0.0 };
    let i: usize = record.split('-').next().unwrap().parse().unwrap();
    let joblog = joblog_of(log, i);
    if !joblog.exists() {
        return 0.0;
    }
    common::json_lines(&joblog)
        .iter()
        .find(|e| e["record"] == record.as_str())
        .map_or(0.0, |e| t - e["start_us"].as_f64().unwrap() / 1e6)
}

/// The jobs' stamps: (time in s, +1 for a start or -1 for an end, the
/// drip's number), in time order.
fn stamps(log: &Path) -> Vec<(f64, i32, usize)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<(f64, i32, usize)> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let kind = w.next()?;
            let drip = w.next()?.split('-').next()?.parse().ok()?;
            let ns: f64 = w.next()?.parse().ok()?;
            Some((ns / 1e9, if kind == "s" { 1 } else { -1 }, drip))
        })
        .collect();
    // At one instant an end counts before a start.
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    out
}

/// The drip with the most jobs running at the end of `stamps`.
fn running_most(stamps: &[(f64, i32, usize)]) -> usize {
    let mut running = [0i32; 3];
    for &(_, step, drip) in stamps {
        running[drip] += step;
    }
    (0..3).max_by_key(|&i| running[i]).unwrap()
}

/// How long, s, a lease given back may take to start another job (a
/// poll of 100 ms, a job's start) on a machine not too busy to judge the
/// recovery by.
const REFILL: f64 = 0.5;

/// The longest a survivor's job end waited for the next start of a job
/// (by a drip alive then), s, over the run: how long the machine took to
/// hand a lease given back to another job. The jobs always wait for
/// leases, so every end is followed by a start. Not counted: the ends in
/// the second after the kill (the killed drip's place in the line holds
/// for 1 s, by design) and near the run's end.
fn slowest_refill(stamps: &[(f64, i32, usize)], victim: usize, killed_at: f64) -> f64 {
    let alive = |t: f64, drip: usize| drip != victim || t < killed_at;
    let first = stamps.first().map_or(0.0, |s| s.0);
    let counted = |t: f64| {
        t > first + 0.5 && !(killed_at - 0.1..killed_at + 1.2).contains(&t) && t < killed_at + 7.0
    };
    let mut slowest: f64 = 0.0;
    for (i, &(t, step, drip)) in stamps.iter().enumerate() {
        if step != -1 || drip == victim || !counted(t) {
            continue;
        }
        let next = stamps[i + 1..]
            .iter()
            .find(|&&(u, s, d)| s == 1 && alive(u, d))
            .map_or(f64::INFINITY, |s| s.0);
        slowest = slowest.max(next - t);
    }
    slowest
}

/// Three drips on `shares` (one each) and state directories `runtimes`
/// (one each), each allowed [`LIMIT`] jobs itself: the jobs running at
/// once, counted from their own stamps, never exceed [`LIMIT`] across the
/// three; after a `kill -9` at 2 s of the drip running the most jobs, the two others run
/// [`LIMIT`] jobs again within the leases' 5 s (and 1 s for a busy
/// machine: a poll, a job's start). A run later than that is not judged,
/// and is made again, where the machine also took over [`REFILL`] to hand
/// some lease given back to a new job, or where it held up the recovery by
/// as much as it was late: the job that made [`LIMIT`] again took that
/// long from drip's start of it to its stamp ([`start_lag`]), with the
/// two others' threads' waits for a CPU since the kill.
fn three_drips_share_eight_jobs(shares: [&str; 3], runtimes: [&Path; 3]) {
    let attempt = std::cell::Cell::new(0);
    common::until_judged(3, Duration::from_secs(120), || {
        // A NAME of its own each run: the leases of the drips killed in
        // the run before hold their 5 s.
        attempt.set(attempt.get() + 1);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stamps");
        let (origin, origin_unix) = (std::time::Instant::now(), common::unix_now());
        let mut drips: Vec<Child> = (0..3)
            .map(|i| {
                let share = format!("{}-{}", shares[i], attempt.get());
                leasing_drip(i, &share, &log, runtimes[i])
            })
            .collect();
        let waits: Vec<_> = drips
            .iter()
            .map(|d| common::watch_cpu_waits(d.id(), origin))
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        // The drip running the most jobs now is the one killed: one that
        // holds no lease (the others took them all first) has none to lose.
        let victim = running_most(&stamps(&log));
        let killed_at = common::unix_now();
        drips[victim].kill().unwrap();
        drips[victim].wait().unwrap();
        std::thread::sleep(Duration::from_secs(8));
        for d in &mut drips {
            let _ = d.kill();
            let _ = d.wait();
        }
        let waits: Vec<_> = waits.into_iter().map(|w| w.join().unwrap()).collect();
        // The jobs of the drips killed are ended by their wardens, and
        // stamp their ends.
        std::thread::sleep(Duration::from_millis(600));
        let stamps = stamps(&log);
        let mut running = 0;
        let mut most = 0;
        let mut full_before = false;
        let mut dead_held = 0;
        let mut recovered: Option<f64> = None;
        let mut dead_running = 0;
        for &(t, step, drip) in &stamps {
            running += step;
            most = most.max(running);
            if drip == victim {
                dead_running += step;
            }
            if t < killed_at {
                full_before |= running == LIMIT as i32;
                dead_held = dead_running;
            } else if recovered.is_none()
                && running == LIMIT as i32
                && drip != victim
                && dead_running == 0
            {
                recovered = Some(t);
            }
        }
        assert!(most <= LIMIT as i32, "{most} jobs ran at once: {stamps:?}");
        if !full_before || dead_held == 0 {
            return Some(format!(
                "before the kill the drips never ran {LIMIT} jobs ({full_before}), or the one killed ran none ({dead_held})"
            ));
        }
        let recovered_at = recovered;
        let recovered = recovered.map_or(f64::INFINITY, |t| t - killed_at);
        let slowest = slowest_refill(&stamps, victim, killed_at);
        eprintln!("at most {most} at once; drip {victim} held {dead_held} at its kill; {LIMIT} again {recovered:.2} s after; a lease given back taken up again within {slowest:.2} s");
        // A survivor's end never followed by a start is no busy machine
        // (a lease given back was lost): the recovery is judged.
        if recovered > 6.0 && slowest > REFILL && slowest.is_finite() {
            return Some(format!(
                "{LIMIT} jobs again {recovered:.2} s after the kill, but a job's lease given back took {slowest:.2} s to start another job (over {REFILL} s): the machine was too busy to tell"
            ));
        }
        if let Some(at) = recovered_at.filter(|_| recovered > 6.0) {
            let lag = start_lag(&log, at);
            let (from, to) = (killed_at - origin_unix, at - origin_unix);
            let waited: f64 = (0..3)
                .filter(|&i| i != victim)
                .map(|i| common::threads_cpu_wait_between(&waits[i], from, to))
                .sum();
            let account = format!(
                "the job that made {LIMIT} again took {lag:.3} s from its start to its stamp, and \
                 the two other drips' threads waited {waited:.3} s for a CPU since the kill"
            );
            if lag + waited >= recovered - 6.0 {
                return Some(format!(
                    "{LIMIT} jobs again {recovered:.2} s after the kill, but {account}: the \
                     machine held it up as long"
                ));
            }
            eprintln!("not the machine's doing: {account}");
        }
        assert!(
            recovered <= 6.0,
            "{LIMIT} jobs again {recovered:.2} s after the kill (drip {victim} held {dead_held})"
        );
        None
    });
}

#[test]
fn three_drips_on_one_host_share_eight_jobs() {
    let _t = common::timing();
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    three_drips_share_eight_jobs(["fleet", "fleet", "fleet"], [r, r, r]);
}

#[test]
fn three_drips_on_two_hosts_share_eight_jobs_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::timing();
    let redis = fleet::Redis::start();
    let share = redis.share("fleet");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    three_drips_share_eight_jobs([&share, &share, &share], [a.path(), a.path(), b.path()]);
}

/// `--share-jobs` needs --exec and --share: status 2, one line.
#[test]
fn share_jobs_needs_exec_and_share() {
    let (status, _, stderr) = common::run(&["--share-jobs", "3", "--share", "x"], "");
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.starts_with("drip: --share-jobs: only with --exec"),
        "{stderr}"
    );
    let (status, _, stderr) = common::run(&["--share-jobs", "3", "--exec", "true"], "");
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.starts_with("drip: --share-jobs: only with --share NAME"),
        "{stderr}"
    );
}

/// The figures: while two jobs of a limit of 2 run, `drip ctl NAME info`
/// shows the leases held here and across the drips; at the end the
/// `--stats` line, `--stats-json` and `--metrics` show the limit, no lease
/// held, and the waits.
#[test]
fn the_figures_show_the_shared_job_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (json, prom) = (dir.path().join("stats.json"), dir.path().join("drip.prom"));
    let mut child = common::command(&[
        "-r",
        "100/s",
        "--share",
        "figs",
        "--share-jobs",
        "2",
        "-j",
        "4",
        "--name",
        "figs",
        "--stats",
        "--stats-json",
        json.to_str().unwrap(),
        "--metrics",
        prom.to_str().unwrap(),
        "--exec",
        "sleep",
        "0.5",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Records of 0: each job is `sleep 0.5 0`.
    common::feed(&mut child, b"0\n0\n0\n0\n");
    // Two jobs hold the two leases; the others wait.
    let mut info = serde_json::Value::Null;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        let out = common::command(&["ctl", "figs", "info"]).output().unwrap();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            if v["share_jobs"]["held"] == 2 {
                info = v;
                break;
            }
        }
    }
    // `drip ctl … jobs` names it too (docs/sharing.md), while the two run.
    let out = common::command(&["ctl", "figs", "jobs"]).output().unwrap();
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(jobs["share_jobs"]["limit"], 2, "{jobs}");
    assert_eq!(info["share_jobs"]["limit"], 2, "{info}");
    assert_eq!(info["share_jobs"]["fleet"], 2, "{info}");
    assert_eq!(info["jobs"], 4, "{info}");
    let status = common::wait_for(&mut child, Duration::from_secs(30));
    assert!(status.success());
    let stderr = common::stderr_of(&mut child);
    assert!(
        stderr.contains("shared jobs 0 of 2 held here (0 across the drips, waited "),
        "{stderr}"
    );
    // Its leases went back at exit.
    let leases =
        std::fs::read_to_string(common::runtime_dir().join("drip/figs.jobs.json")).unwrap();
    let leases: serde_json::Value = serde_json::from_str(&leases).unwrap();
    assert_eq!(leases["leases"], serde_json::json!({}), "{leases}");
    let stats = common::last_json(&json);
    assert_eq!(stats["share_jobs"]["limit"], 2, "{stats}");
    assert_eq!(stats["share_jobs"]["held"], 0, "{stats}");
    assert!(stats["share_jobs"]["waits"].as_u64() >= Some(1), "{stats}");
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert!(
        metrics.contains("\ndrip_share_jobs_limit{drip=\"figs\"} 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\ndrip_share_jobs_held{drip=\"figs\"} 0\n"),
        "{metrics}"
    );
}

/// Drip `who` running `records` jobs of 100 ms (each stamps its start and
/// end into `log`) under `share` with `--share-jobs 1`.
fn one_at_a_time(who: &str, records: usize, share: &str, log: &Path, runtime: &Path) -> Child {
    let script = stamped(log, "0.1");
    let mut cmd = common::command(&[
        "-r",
        "100/s",
        "--share",
        share,
        "--share-jobs",
        "1",
        "-j",
        "1",
        "-q",
        "--exec",
        "sh",
        "-c",
        &script,
        "sh",
        "{}",
    ]);
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn drip");
    let input: String = (1..=records).map(|r| format!("{who}-{r}\n")).collect();
    common::feed(&mut child, input.as_bytes());
    child
}

/// A drip that gives its one lease back and asks again at once does not
/// starve one that waits for it: while the first drip runs 40 jobs of
/// 100 ms one at a time, the second, started beside it with 5, waits in
/// line and takes the lease when the first gives it back, so no more than
/// two of the first drip's jobs start from the second's start to its
/// first job, or between two of its jobs (the two take turns; two for a
/// busy machine). Without a line, the first takes the lease back each
/// time, a millisecond after giving it, and the second runs a job only
/// when a poll of its happens to fall in that gap.
fn a_waiting_drip_is_not_starved(share: &str, runtime: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let mut first = one_at_a_time("0", 40, share, &log, runtime);
    std::thread::sleep(Duration::from_millis(500));
    let started = common::unix_now();
    let mut second = one_at_a_time("1", 5, share, &log, runtime);
    assert!(common::wait_for(&mut second, Duration::from_secs(30)).success());
    assert!(common::wait_for(&mut first, Duration::from_secs(30)).success());
    let stamps = stamps(&log);
    let mut running = 0;
    for &(_, step, _) in &stamps {
        running += step;
        assert!(running <= 1, "two jobs at once: {stamps:?}");
    }
    assert_eq!(stamps.iter().filter(|s| s.2 == 1).count(), 10, "{stamps:?}");
    // The first drip's starts before each of the second's.
    let mut between = Vec::new();
    let mut firsts = 0;
    for &(_, _, drip) in stamps.iter().filter(|s| s.0 >= started && s.1 == 1) {
        if drip == 1 {
            between.push(std::mem::take(&mut firsts));
        } else {
            firsts += 1;
        }
    }
    assert!(
        between.iter().all(|&n| n <= 2),
        "the first drip's jobs started before each of the second's: {between:?}"
    );
}

#[test]
fn a_drip_waiting_for_the_shared_job_limit_is_not_starved_on_one_host() {
    let _t = common::timing();
    let runtime = tempfile::tempdir().unwrap();
    a_waiting_drip_is_not_starved("line", runtime.path());
}

#[test]
fn a_drip_waiting_for_the_shared_job_limit_is_not_starved_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::timing();
    let redis = fleet::Redis::start();
    let runtime = tempfile::tempdir().unwrap();
    a_waiting_drip_is_not_starved(&redis.share("line"), runtime.path());
}

/// The most jobs running at once in `stamps` (in time order).
fn most_at_once(stamps: &[(f64, i32, usize)]) -> i32 {
    let mut running = 0;
    stamps
        .iter()
        .map(|s| {
            running += s.1;
            running
        })
        .max()
        .unwrap_or(0)
}

/// Wait until `n` jobs have stamped their start in `log` (20 s at most).
fn until_started(log: &Path, n: usize) {
    let began = std::time::Instant::now();
    while stamps(log).iter().filter(|s| s.1 == 1).count() < n {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the jobs never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `drip take` holds no `--share-jobs` slot (docs/sharing.md says so): a
/// take while the job limit is held returns at once. A command run as a
/// one-record drip with `--share-jobs`, the documented way, waits for a
/// lease: its job starts only once one of the running ones has ended.
#[test]
fn a_take_holds_no_job_slot_and_a_one_record_drip_waits_for_one() {
    let runtime = tempfile::tempdir().unwrap();
    let log = runtime.path().join("log");
    fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec![
            "-r",
            "100/s",
            "--share",
            "jobslot",
            "--share-jobs",
            "2",
            "-q",
        ];
        a.extend_from_slice(extra);
        a
    }
    let script = stamped(&log, "1.5");
    let mut holder = common::command(&args(&[
        "-j", "2", "--exec", "sh", "-c", &script, "sh", "{}",
    ]));
    holder
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let mut holder = holder.spawn().unwrap();
    common::feed(&mut holder, b"0-1\n0-2\n");
    // Both of its jobs run: the limit is held.
    until_started(&log, 2);
    let asked = common::unix_now();
    let take = common::command(&["take", "jobslot", "-r", "100/s", "--timeout", "1s"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .unwrap();
    assert!(take.status.success(), "{take:?}");
    assert!(
        common::unix_now() - asked < 1.0,
        "a take waited for the job limit"
    );
    let mut one = common::command(&args(&["--exec", "sh", "-c", &script, "sh", "{}"]));
    one.env("XDG_RUNTIME_DIR", runtime.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let mut one = one.spawn().unwrap();
    common::feed(&mut one, b"1-1\n");
    assert!(common::wait_for(&mut one, Duration::from_secs(30)).success());
    assert!(common::wait_for(&mut holder, Duration::from_secs(30)).success());
    let stamps = stamps(&log);
    assert!(most_at_once(&stamps) <= 2, "{stamps:?}");
    let first_end = stamps.iter().find(|s| s.1 == -1).unwrap().0;
    let b_start = stamps.iter().find(|s| s.1 == 1 && s.2 == 1).unwrap();
    assert!(
        b_start.0 >= first_end,
        "the one-record drip started before a lease came back: {stamps:?}"
    );
}

/// The job leases' state lost while a drip's jobs run (`forget`: Redis
/// flushed, `NAME.jobs.json` removed) and another drip waits for a lease:
/// the waiting drip finds the state lost, says so once, and no new job
/// starts for a lease's length while the holder renews its leases; so
/// never more than N run at once. It used to take N fresh leases within
/// 80 ms while the holder's N jobs still ran: 2N at once, and nothing
/// said.
fn a_lost_state_starts_no_job_beside_the_running_ones(
    share: &str,
    runtime: &Path,
    forget: &dyn Fn(),
) {
    let log = runtime.join("log");
    let script = stamped(&log, "2.5");
    let start = |input: &[u8]| {
        let args = [
            "-r",
            "100/s",
            "--share",
            share,
            "--share-jobs",
            "2",
            "-j",
            "2",
            "--exec",
            "sh",
            "-c",
            &script,
            "sh",
            "{}",
        ];
        let mut cmd = common::command(&args);
        cmd.env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        common::feed(&mut child, input);
        child
    };
    let mut holder = start(b"0-1\n0-2\n");
    until_started(&log, 2);
    let mut waiter = start(b"1-1\n1-2\n");
    // The waiter has asked (and waits in line) before the state is lost.
    std::thread::sleep(Duration::from_millis(400));
    forget();
    assert!(common::wait_for(&mut waiter, Duration::from_secs(60)).success());
    assert!(common::wait_for(&mut holder, Duration::from_secs(60)).success());
    let stamps = stamps(&log);
    assert!(most_at_once(&stamps) <= 2, "{stamps:?}");
    assert_eq!(stamps.len(), 8, "{stamps:?}");
    let err = common::stderr_of(&mut waiter);
    assert_eq!(
        err.matches("the shared state was lost (a restart or a flush); no new job starts for 5 s")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn a_lost_state_file_starts_no_job_beside_the_running_ones() {
    let runtime = tempfile::tempdir().unwrap();
    let file = runtime.path().join("drip").join("lost-jobs.jobs.json");
    a_lost_state_starts_no_job_beside_the_running_ones("lost-jobs", runtime.path(), &|| {
        std::fs::remove_file(&file).unwrap();
    });
}

#[test]
fn a_flushed_redis_starts_no_job_beside_the_running_ones() {
    if !common::have_redis() {
        return;
    }
    let redis = fleet::Redis::start();
    let runtime = tempfile::tempdir().unwrap();
    a_lost_state_starts_no_job_beside_the_running_ones(
        &redis.share("lost-jobs"),
        runtime.path(),
        &|| {
            redis.query(&["FLUSHALL"]).unwrap();
        },
    );
}

/// Drip `who` running `sh` jobs that stamp `s WHO PID NS` into `log` and
/// sleep 100 s (each with a background `sleep` in its group too), for
/// `records` records, stdin held open; one job at a time per `-j`.
fn long_jobs(who: &str, records: usize, share: &str, log: &Path, runtime: &Path) -> Child {
    let script = format!(
        "sleep 100 & echo \"s {who} $$ $(date +%s%N)\" >> {}; sleep 100",
        log.display()
    );
    let n = records.to_string();
    let mut cmd = common::command(&[
        "-r",
        "100/s",
        "--share",
        share,
        "--share-jobs",
        "2",
        "-j",
        &n,
        "-q",
        "--exec",
        "sh",
        "-c",
        &script,
    ]);
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn drip");
    use std::io::Write;
    let input: String = (1..=records).map(|r| format!("{r}\n")).collect();
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child
}

/// The starts stamped in `log` by drip `who`: (its job's process group,
/// the realtime clock in s).
fn starts_of(log: &Path, who: &str) -> Vec<(i32, f64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w.len() == 4 && w[1] == who).then(|| (w[2].parse().ok(), w[3].parse::<f64>().ok()))
        })
        .filter_map(|(g, ns)| Some((g?, ns? / 1e9)))
        .collect()
}

/// docs/sharing.md: after a `kill -9`, N jobs at most at any moment. Drip
/// A holds both leases of `--share-jobs 2` with jobs that would run 100 s;
/// B waits with two more. A is killed: its jobs (and their background
/// children) are gone, as the test sees by polling, before B's first job
/// stamps its start, which its leases allow only once A's have lapsed
/// (5 s). Before the warden, A's jobs ran on beside B's: 4 at once.
fn a_killed_drip_s_jobs_end_before_its_leases_go_to_another(share: &str, runtimes: [&Path; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stamps");
    let mut a = long_jobs("a", 2, share, &log, runtimes[0]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while starts_of(&log, "a").len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "A's jobs never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut b = long_jobs("b", 2, share, &log, runtimes[1]);
    // B waits in the line (a few of its asks) before A goes.
    std::thread::sleep(Duration::from_millis(500));
    let groups: Vec<i32> = starts_of(&log, "a").iter().map(|s| s.0).collect();
    a.kill().unwrap();
    a.wait().unwrap();
    let killed_at = common::unix_now();
    let gone = crate::jobs_leaving::until_gone(&groups, &[], Duration::from_secs(20));
    let gone_at = common::unix_now();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while starts_of(&log, "b").len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = b.kill();
    let _ = b.wait();
    for &(g, _) in starts_of(&log, "a").iter().chain(&starts_of(&log, "b")) {
        crate::jobs_leaving::kill_quietly(&format!("-{g}"));
    }
    let b_starts = starts_of(&log, "b");
    let first_b = b_starts.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    assert!(
        gone.is_some(),
        "A's jobs ran on 20 s after its kill (B started {:.2} s after it)",
        first_b - killed_at
    );
    assert_eq!(b_starts.len(), 2, "B's jobs never started");
    assert!(
        gone_at <= first_b,
        "B started a job {:.2} s after A's kill, while A's jobs still ran (gone {:.2} s after)",
        first_b - killed_at,
        gone_at - killed_at
    );
    eprintln!(
        "A's jobs gone {:.3} s after its kill; B's first job {:.2} s after",
        gone_at - killed_at,
        first_b - killed_at
    );
}

#[test]
fn a_killed_drip_s_jobs_end_before_its_leases_go_to_another_on_one_host() {
    let _t = common::timing();
    let runtime = tempfile::tempdir().unwrap();
    let r = runtime.path();
    a_killed_drip_s_jobs_end_before_its_leases_go_to_another("killed", [r, r]);
}

#[test]
fn a_killed_drip_s_jobs_end_before_its_leases_go_to_another_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::timing();
    let redis = fleet::Redis::start();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    a_killed_drip_s_jobs_end_before_its_leases_go_to_another(
        &redis.share("killed"),
        [a.path(), b.path()],
    );
}

/// The shared budget of the test below a window.
const LOST_BUDGET: usize = 40;

/// The whole shared state lost (`forget`: Redis flushed, the state files
/// removed) while two drips share a rate, a budget of 40 a day and a job
/// limit of 2, after some 15 of their jobs started. Every feature finds
/// the loss by its epoch at its next call: each drip says it once (one
/// line whichever feature found it first) and counts it once (`state
/// lost 1 times`); the job leases take no new lease for 5 s while the
/// running jobs' are held again, so never more than 2 run at once; the
/// budget's count is made again from what the two drips hold, so the
/// jobs started stay within 40 and a call's grant (a second of one drip's
/// rate, 10). The count used to start again from 0, silently: some 55 to
/// 75 jobs in the window.
fn a_lost_state_keeps_the_budget_and_the_job_limit(share: &str, runtime: &Path, forget: &dyn Fn()) {
    // Not across a window's end: the day's last minute waited out.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = 86_400 - now % 86_400;
    if left < 60 {
        std::thread::sleep(Duration::from_secs(left + 1));
    }
    let log = runtime.join("log");
    let script = stamped(&log, "0.1");
    let budget = format!("{LOST_BUDGET}/day@UTC");
    let start = |i: usize| {
        let args = [
            "-r",
            "10/s",
            "--share",
            share,
            "--budget",
            &budget,
            "--budget-exhausted",
            "stop",
            "--share-jobs",
            "2",
            "-j",
            "2",
            "--stats",
            "--exec",
            "sh",
            "-c",
            &script,
            "sh",
            "{}",
        ];
        let mut cmd = common::command(&args);
        cmd.env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let input: String = (1..=60).map(|r| format!("{i}-{r}\n")).collect();
        common::feed(&mut child, input.as_bytes());
        child
    };
    let mut drips = [start(0), start(1)];
    until_started(&log, 15);
    forget();
    for d in &mut drips {
        let status = common::wait_for(d, Duration::from_secs(60));
        assert!(matches!(status.code(), Some(0 | 5)), "{status:?}");
    }
    let stamps = stamps(&log);
    let started = stamps.iter().filter(|s| s.1 == 1).count();
    assert!(most_at_once(&stamps) <= 2, "{stamps:?}");
    assert!(
        (LOST_BUDGET - 10..=LOST_BUDGET + 10).contains(&started),
        "{started} jobs started in the window"
    );
    for d in &mut drips {
        let err = common::stderr_of(d);
        assert_eq!(err.matches("the shared state was lost").count(), 1, "{err}");
        assert!(err.contains("state lost 1 times"), "{err}");
    }
}

#[test]
fn a_lost_state_file_keeps_the_budget_and_the_job_limit() {
    let runtime = tempfile::tempdir().unwrap();
    let dir = runtime.path().join("drip");
    a_lost_state_keeps_the_budget_and_the_job_limit("lost-both", runtime.path(), &|| {
        for file in ["lost-both.json", "lost-both.budget", "lost-both.jobs.json"] {
            std::fs::remove_file(dir.join(file)).unwrap();
        }
    });
}

#[test]
fn a_flushed_redis_keeps_the_budget_and_the_job_limit() {
    if !common::have_redis() {
        return;
    }
    let redis = fleet::Redis::start();
    let runtime = tempfile::tempdir().unwrap();
    a_lost_state_keeps_the_budget_and_the_job_limit(
        &redis.share("lost-both"),
        runtime.path(),
        &|| {
            redis.query(&["FLUSHALL"]).unwrap();
        },
    );
}
