//! `drip ctl NAME rate` on a drip sharing its limits (`--share`): the
//! shared limits change for every drip on the NAME, through the state file
//! and through a real `redis-server`. Two drips share 20/s; `drip ctl`
//! on one of them sets 5/s; from the stated time on (1 s after `drip ctl`
//! answers) the two together send at most 5/s in any window, judged from
//! stamps at one consumer on one clock (no catch-up, no credit carried),
//! and still send; a drip started later with the old limits is told and
//! follows the new ones.

use crate::common;
use crate::fleet;

use std::io::Read;
use std::path::Path;
use std::process::{Child, ChildStdout, Output};
use std::thread;
use std::time::{Duration, Instant};

/// The stated time: every drip paces by the new limits at most this long
/// after `drip ctl` answers (docs/sharing.md).
const STATED: f64 = 1.0;

/// What a busy machine adds to a window's count beyond rate × window +
/// burst: a writer woken late still sends on its slot, and the reader
/// stamps lines as it reads them.
const BUSY_ALLOWANCE: usize = 2;

/// `drip ARGS` reading `records` numbered lines tagged `tag` (its input
/// held open for a minute when `hold`), its state and control socket
/// under `runtime`.
fn tagged_drip(args: &[&str], tag: &str, (records, hold): (usize, bool), runtime: &Path) -> Child {
    let input: String = (1..=records).map(|r| format!("{tag}-{r}\n")).collect();
    common::drip_reading(args, input, runtime, hold)
}

/// Wait until the drip named `name` answers `drip ctl`.
fn wait_answers(runtime: &Path, name: &str) {
    let start = Instant::now();
    while common::ctl(runtime, &[name, "info"]).0 != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{name} never answered"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The lines of `out`, each stamped (s since `start`) when read.
fn stamped(mut out: ChildStdout, start: Instant) -> Vec<f64> {
    let mut times = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = out.read(&mut buf) {
        if n == 0 {
            break;
        }
        let t = start.elapsed().as_secs_f64();
        times.extend(buf[..n].iter().filter(|&&b| b == b'\n').map(|_| t));
    }
    times
}

/// Stop `child` (SIGTERM): its stderr.
fn stop(mut child: Child) -> String {
    common::send_signal(&child, libc::SIGTERM);
    common::wait_for(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    err
}

/// Two drips share `share` at 20/s; `drip ctl a rate 5/s` changes both.
/// `None` when the run cannot be judged (the machine held the drips back
/// before the change: fewer than half the records due).
fn two_drips_follow_a_change(share: &str) -> Option<String> {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let start = Instant::now();
    let args = |name: &'static str| {
        vec!["-r", "20/s", "--share", share, "--name", name]
            .into_iter()
            .map(String::from)
            .collect::<Vec<String>>()
    };
    let mut children = Vec::new();
    let mut readers = Vec::new();
    for name in ["a", "b"] {
        let a = args(name);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let mut child = tagged_drip(&a, name, (400, true), rt);
        let out = child.stdout.take().unwrap();
        readers.push(thread::spawn(move || stamped(out, start)));
        children.push(child);
    }
    wait_answers(rt, "a");
    wait_answers(rt, "b");
    thread::sleep(Duration::from_millis(1500));
    let (status, _, err) = common::ctl(rt, &["a", "rate", "5/s"]);
    assert_eq!(status, 0, "drip ctl a rate 5/s: {err}");
    let changed = start.elapsed().as_secs_f64();
    thread::sleep(Duration::from_millis(4500));
    // The other drip shows the limits it follows.
    let (status, info, err) = common::ctl(rt, &["b", "info"]);
    assert_eq!(status, 0, "{err}");
    assert!(info.contains(r#""rate":["5/s:1"]"#), "{info}");
    // A drip started now with the old limits is told, and follows.
    let late = tagged_drip(
        &["-r", "20/s", "--share", share, "--no-control"],
        "c",
        (2, false),
        rt,
    );
    let late = late.wait_with_output().unwrap();
    let errs: Vec<String> = children.into_iter().map(stop).collect();
    let times: Vec<f64> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    for (name, err) in ["a", "b"].iter().zip(&errs) {
        assert!(
            err.contains("the shared limits were changed by drip ctl to 5/s, burst 1 (this drip had 20/s, burst 1): it follows them"),
            "{name}: {err}"
        );
    }
    let late_err = String::from_utf8_lossy(&late.stderr);
    assert!(late.status.success(), "the later drip: {late_err}");
    assert_eq!(String::from_utf8_lossy(&late.stdout), "c-1\nc-2\n");
    assert_eq!(
        late_err,
        "drip: --share ctl-test: the shared limits were changed by drip ctl to 5/s, burst 1 (this drip had 20/s, burst 1): it follows them\n"
    );
    // So is a take.
    let take = common::command(&["take", share, "-r", "20/s"])
        .env("XDG_RUNTIME_DIR", rt)
        .output()
        .unwrap();
    let take_err = String::from_utf8_lossy(&take.stderr);
    assert!(take.status.success(), "drip take: {take_err}");
    assert_eq!(
        take_err,
        "drip: take ctl-test: the shared limits were changed by drip ctl to 5/s, burst 1 (this take had 20/s, burst 1): it follows them\n"
    );
    let mut before: Vec<f64> = times.iter().copied().filter(|&t| t < changed).collect();
    before.sort_by(f64::total_cmp);
    let mut after: Vec<f64> = times
        .iter()
        .copied()
        .filter(|&t| t >= changed + STATED)
        .collect();
    after.sort_by(f64::total_cmp);
    // Before: 20/s for 1.5 s (and the start-up); held back, not judged.
    if before.len() < 15 {
        return Some(format!("{} records before the change", before.len()));
    }
    // After the stated time, 3.5 s at 5/s: at most 1 + 2 × 5 in 2 s, and
    // still sending.
    let most = common::most_in_window(&after, 2.0);
    assert!(
        most <= 1 + 10 + BUSY_ALLOWANCE,
        "{most} records in 2 s after the change to 5/s: {after:?}"
    );
    assert!(
        after.len() >= 8,
        "{} records after the change: {after:?}",
        after.len()
    );
    None
}

#[test]
fn ctl_rate_changes_the_limits_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || {
        two_drips_follow_a_change("ctl-test")
    });
}

#[test]
fn ctl_rate_changes_the_limits_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-test");
    common::until_judged(3, Duration::from_secs(90), || {
        two_drips_follow_a_change(&share)
    });
}

/// A state that cannot be reached leaves the limits as they were: `drip
/// ctl` says so in one line, status 1, and the drip keeps its limits.
#[test]
fn an_unreachable_state_leaves_the_limits_as_they_were() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-down");
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let args = ["-r", "20/s", "--share", &share, "--share-on-error", "local"];
    let mut args = args.to_vec();
    args.extend(["--name", "a", "-q"]);
    let child = tagged_drip(&args, "a", (400, true), rt);
    wait_answers(rt, "a");
    drop(redis);
    let (status, _, err) = common::ctl(rt, &["a", "rate", "5/s"]);
    assert_eq!(status, 1, "{err}");
    assert!(
        err.starts_with("drip: ctl: a: --share ctl-down: the shared state cannot be changed: ")
            && err.ends_with("; the limits are as they were\n")
            && err.lines().count() == 1,
        "{err}"
    );
    let (_, info, _) = common::ctl(rt, &["a", "info"]);
    assert!(info.contains(r#""rate":["20/s:1"]"#), "{info}");
    stop(child);
}

/// Under --share, SIGHUP on one drip puts the table of its own file in
/// force for every drip on the NAME: both drips' `key-list` show the new
/// row's rate within 3 s, and the other says so once.
#[test]
fn sighup_on_one_drip_changes_the_shared_table_of_all() {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let file = rt.join("rates");
    std::fs::write(&file, "k 20/s\n").unwrap();
    let file = file.to_str().unwrap();
    let spawn = |name: &'static str| {
        let args = [
            "--key",
            "2",
            "--key-rates",
            file,
            "--key-rate",
            "50/s",
            "--share",
            "ctl-hup",
            "--name",
            name,
        ];
        let input: String = (1..=400).map(|r| format!("{name}-{r} k\n")).collect();
        common::drip_reading(&args, input, rt, true)
    };
    let (a, b) = (spawn("a"), spawn("b"));
    wait_answers(rt, "a");
    wait_answers(rt, "b");
    std::fs::write(file, "k 5/s\n").unwrap();
    common::send_signal(&a, libc::SIGHUP);
    let started = Instant::now();
    let row = |name: &str| common::ctl(rt, &[name, "key-list"]).1;
    let new = |name: &str| row(name).contains("k\tk\t5/s:1\t");
    while !(new("a") && new("b")) {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "b: {}",
            row("b")
        );
        thread::sleep(Duration::from_millis(50));
    }
    let err = stop(b);
    assert_eq!(
        err.matches("the shared limits were changed").count(),
        1,
        "{err}"
    );
    stop(a);
}

/// Under --share every key needs a limit: `drip ctl NAME key-rates` with
/// a table that would leave keys with none (an empty file, where the `*`
/// row gave the default) is refused with one line, and the drips go on
/// under the table in force (it would otherwise stop every drip on the
/// NAME, their stored limits unreadable).
#[test]
fn a_shared_table_leaving_keys_unlimited_is_refused() {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let (old, empty) = (rt.join("old"), rt.join("empty"));
    std::fs::write(&old, "k 20/s\n* 10/s\n").unwrap();
    std::fs::write(&empty, "# nothing\n").unwrap();
    let old = old.to_str().unwrap();
    let args = [
        "--key",
        "2",
        "--key-rates",
        old,
        "--share",
        "ctl-none",
        "-q",
    ];
    let mut args = args.to_vec();
    args.extend(["--name", "a"]);
    let child = tagged_drip(&args, "a", (400, true), rt);
    wait_answers(rt, "a");
    let (status, _, err) = common::ctl(rt, &["a", "key-rates", empty.to_str().unwrap()]);
    assert_eq!(status, 1, "{err}");
    assert!(
        err.starts_with("drip: ctl: a: --share ctl-none: every key needs a limit: ")
            && err.lines().count() == 1,
        "{err}"
    );
    thread::sleep(Duration::from_millis(1500));
    let (status, info, err) = common::ctl(rt, &["a", "info"]);
    assert_eq!(status, 0, "the drip went on: {err}");
    assert!(
        info.contains(r#""key_rates":""#) && info.contains("/old"),
        "{info}"
    );
    let err = stop(child);
    assert!(!err.contains("differ"), "{err}");
}

/// `drip ctl NAME rate` to a limit a shared schedule cannot keep (slower
/// than one in 32 days) is refused with one line; the limits stay.
#[test]
fn a_shared_rate_out_of_range_is_refused() {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let args = ["-r", "20/s", "--share", "ctl-range", "--name", "a", "-q"];
    let child = tagged_drip(&args, "a", (400, true), rt);
    wait_answers(rt, "a");
    let (status, _, err) = common::ctl(rt, &["a", "rate", "1/40d"]);
    assert_eq!(status, 1, "{err}");
    assert!(
        err.starts_with("drip: ctl: a: --share ctl-range: --rate 1/")
            && err.contains("slower than one record in 32 days")
            && err.lines().count() == 1,
        "{err}"
    );
    let (_, info, _) = common::ctl(rt, &["a", "info"]);
    assert!(info.contains(r#""rate":["20/s:1"]"#), "{info}");
    stop(child);
}

/// A change of limits made by `drip ctl a WORDS…`, judged at one consumer.
struct Change<'a> {
    /// Each drip's arguments (besides `--share` and `--name`).
    args: &'a [&'a str],
    /// What each numbered line ends with (its cost, say).
    suffix: &'a str,
    /// `--share NAME` (a state file's NAME or a Redis URL), or a lone drip.
    share: Option<&'a str>,
    /// The drips' names (`a` is the one `drip ctl` asks).
    names: &'a [&'a str],
    /// `drip ctl a` WORDS.
    words: &'a [&'a str],
    /// The least records sent before the change for the run to be judged.
    before: usize,
    /// How long after `drip ctl` answers the judging starts (s).
    from: f64,
    /// The most records in any 2 s from the stated time on.
    most: usize,
    /// The least records in all from the stated time on.
    least: usize,
    /// What `drip ctl NAME info` of each drip holds after the change.
    info: &'a str,
    /// What every drip says on stderr when it follows the change; a drip
    /// started after it with the old limits says it too, once.
    told: Option<&'a str>,
}

/// Run `change` once: `None` when judged, else why it could not be.
fn follow(change: &Change<'_>) -> Option<String> {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let start = Instant::now();
    let mut children = Vec::new();
    let mut readers = Vec::new();
    for &name in change.names {
        let mut args = change.args.to_vec();
        args.extend(["--name", name]);
        if let Some(share) = change.share {
            args.extend(["--share", share]);
        }
        let input: String = (1..=400)
            .map(|r| format!("{name}-{r}{}\n", change.suffix))
            .collect();
        let mut child = common::drip_reading(&args, input, rt, true);
        let out = child.stdout.take().unwrap();
        readers.push(thread::spawn(move || stamped(out, start)));
        children.push(child);
    }
    for name in change.names {
        wait_answers(rt, name);
    }
    thread::sleep(Duration::from_millis(1500));
    let mut words = vec!["a"];
    words.extend_from_slice(change.words);
    let (status, _, err) = common::ctl(rt, &words);
    assert_eq!(status, 0, "drip ctl {words:?}: {err}");
    let changed = start.elapsed().as_secs_f64();
    thread::sleep(Duration::from_millis(4500));
    // A drip started now with the old limits is told, once, and follows.
    let late = change.share.map(|share| {
        let mut args = change.args.to_vec();
        args.extend(["--share", share, "--no-control"]);
        let input = format!("late-1{0}\nlate-2{0}\n", change.suffix);
        common::drip_reading(&args, input, rt, false)
            .wait_with_output()
            .unwrap()
    });
    let infos: Vec<String> = change
        .names
        .iter()
        .map(|name| common::ctl(rt, &[name, "info"]).1)
        .collect();
    let errs: Vec<String> = children.into_iter().map(stop).collect();
    let times: Vec<f64> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    let before = times.iter().filter(|&&t| t < changed).count();
    if before < change.before {
        return Some(format!("{before} records before the change"));
    }
    let mut after: Vec<f64> = times
        .iter()
        .copied()
        .filter(|&t| t >= changed + change.from)
        .collect();
    after.sort_by(f64::total_cmp);
    let most = common::most_in_window(&after, 2.0);
    assert!(
        most <= change.most,
        "{most} records in 2 s after drip ctl {:?} (at most {}): {after:?}",
        change.words,
        change.most
    );
    assert!(
        after.len() >= change.least,
        "{} records after drip ctl {:?} (at least {}): {after:?}",
        after.len(),
        change.words,
        change.least
    );
    told(change, &infos, &errs, late);
    None
}

/// What the drips of `change` show (`infos`) and say (`errs`), and what
/// the drip started after it (`late`) did: each follows the change.
fn told(change: &Change<'_>, infos: &[String], errs: &[String], late: Option<Output>) {
    for (name, info) in change.names.iter().zip(infos) {
        assert!(info.contains(change.info), "{name}: {info}");
    }
    if let Some(told) = change.told {
        for (name, err) in change.names.iter().zip(errs) {
            assert!(err.contains(told), "{name}: {err}");
        }
    }
    if let (Some(late), Some(told)) = (late, change.told) {
        let err = String::from_utf8_lossy(&late.stderr);
        assert!(late.status.success(), "the later drip: {err}");
        assert_eq!(late.stdout.len(), 2 * (7 + change.suffix.len()), "{err}");
        assert!(
            err.lines().count() == 1 && err.contains(told),
            "the later drip: {err}"
        );
    }
}

/// Raising a shared rate: two drips at 5/s together, `drip ctl a rate
/// 20/s`; from the stated time on they send more than 5/s could (at least
/// 30 in 3.5 s, where 5/s lets 1 + 17), and at most 1 + 20 × 2 in any 2 s.
fn raise(share: &str) -> Option<String> {
    follow(&Change {
        args: &["-r", "5/s"],
        suffix: "",
        share: Some(share),
        names: &["a", "b"],
        words: &["rate", "20/s"],
        before: 5,
        from: STATED,
        most: 1 + 40 + BUSY_ALLOWANCE,
        least: 30,
        info: r#""rate":["20/s:1"]"#,
        told: Some("the shared limits were changed by drip ctl to 20/s, burst 1 (this drip had 5/s, burst 1): it follows them"),
    })
}

#[test]
fn ctl_rate_raises_the_limits_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || raise("ctl-raise"));
}

#[test]
fn ctl_rate_raises_the_limits_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-raise");
    common::until_judged(3, Duration::from_secs(90), || raise(&share));
}

/// Lowering a shared cost rate: two drips spending a cost of 2 a record
/// from 40/s (burst 2) together, `drip ctl a cost-rate 10/s:2`; from the
/// stated time on they send at most (2 + 10 × 2) / 2 = 11 records in any
/// 2 s, and still send.
fn lower_cost(share: &str) -> Option<String> {
    follow(&Change {
        args: &["--cost", "2", "--cost-rate", "40/s:2"],
        suffix: " 2",
        share: Some(share),
        names: &["a", "b"],
        words: &["cost-rate", "10/s:2"],
        before: 15,
        from: STATED,
        most: 11 + BUSY_ALLOWANCE,
        least: 8,
        info: r#""cost_rate":["10/s:2"]"#,
        told: Some("the shared limits were changed by drip ctl to 10 cost/s, burst 2 cost (this drip had 40 cost/s, burst 2 cost): it follows them"),
    })
}

#[test]
fn ctl_cost_rate_changes_the_limits_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || lower_cost("ctl-cost"));
}

#[test]
fn ctl_cost_rate_changes_the_limits_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-cost");
    common::until_judged(3, Duration::from_secs(90), || lower_cost(&share));
}

/// Lowering one of two named costs of different weights shared
/// (`--cost-rate in=40/s:2 --cost-rate out=400/s:10`, records costing 2
/// `in` and 1 `out`, #40: 12): `drip ctl a cost-rate out=5/s:1` makes
/// `out` the tighter (the stored limits' order changes); from the stated
/// time on they send at most 1 + 5 × 2 records in any 2 s, and still send,
/// and every drip shows and says each limit under its own name.
fn lower_one_of_two_costs(share: &str) -> Option<String> {
    follow(&Change {
        args: &[
            "--cost",
            "in=2",
            "--cost",
            "out=3",
            "--cost-rate",
            "in=40/s:2",
            "--cost-rate",
            "out=400/s:10",
        ],
        suffix: " 2 1",
        share: Some(share),
        names: &["a", "b"],
        words: &["cost-rate", "out=5/s:1"],
        before: 15,
        from: STATED,
        most: 11 + BUSY_ALLOWANCE,
        least: 8,
        info: r#""cost_rate":["in=40/s:2","out=5/s:1"]"#,
        told: Some("the shared limits were changed by drip ctl to out=5 cost/s, burst 1 cost; in=40 cost/s, burst 2 cost (this drip had in=40 cost/s, burst 2 cost; out=400 cost/s, burst 10 cost): it follows them"),
    })
}

#[test]
fn ctl_cost_rate_changes_one_of_two_named_costs_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || {
        lower_one_of_two_costs("ctl-two-costs")
    });
}

#[test]
fn ctl_cost_rate_changes_one_of_two_named_costs_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-two-costs");
    common::until_judged(3, Duration::from_secs(90), || {
        lower_one_of_two_costs(&share)
    });
}

/// A lone drip's named cost rate, lowered and then judged the same way:
/// `in=40/s:2` at a cost of 2 a record, `drip ctl a cost-rate in=10/s:2`.
#[test]
fn ctl_cost_rate_changes_a_lone_drips_named_cost_limit() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || {
        follow(&Change {
            args: &["--cost", "in=2", "--cost-rate", "in=40/s:2"],
            suffix: " 2",
            share: None,
            names: &["a"],
            words: &["cost-rate", "in=10/s:2"],
            before: 15,
            from: STATED,
            most: 11 + BUSY_ALLOWANCE,
            least: 8,
            info: r#""cost_rate":["in=10/s:2"]"#,
            told: None,
        })
    });
}

/// Lowering a shared limit per key: two drips sending records of one key,
/// 20/s per key together, `drip ctl a key-rate 5/s`; from the stated time
/// on they send at most 1 + 5 × 2 of it in any 2 s, and still send.
fn lower_key_rate(share: &str) -> Option<String> {
    follow(&Change {
        args: &["--key", "2", "--key-rate", "20/s"],
        suffix: " k",
        share: Some(share),
        names: &["a", "b"],
        words: &["key-rate", "5/s"],
        before: 15,
        from: STATED,
        most: 11 + BUSY_ALLOWANCE,
        least: 8,
        info: r#""key_rate":"5/s:1""#,
        told: Some("the shared limits were changed by drip ctl to per key 5/s, burst 1 (this drip had per key 20/s, burst 1): it follows them"),
    })
}

#[test]
fn ctl_key_rate_changes_the_limits_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || lower_key_rate("ctl-key"));
}

#[test]
fn ctl_key_rate_changes_the_limits_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-key");
    common::until_judged(3, Duration::from_secs(90), || lower_key_rate(&share));
}

/// Changing a shared rate table: two drips sending records of key `k`
/// under the row `k 20/s` of their `--key-rates` file (50/s for other
/// keys), `drip ctl a key-rates FILE` with the row `k 5/s`; from the
/// stated time on they send at most 1 + 5 × 2 of it in any 2 s, and still
/// send; a drip started with the old table is told and follows the new
/// one.
fn lower_key_row(share: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let (old, file) = (dir.path().join("old"), dir.path().join("new"));
    std::fs::write(&old, "k 20/s\n").unwrap();
    std::fs::write(&file, "k 5/s\n").unwrap();
    follow(&Change {
        args: &["--key", "2", "--key-rates", old.to_str().unwrap(), "--key-rate", "50/s"],
        suffix: " k",
        share: Some(share),
        names: &["a", "b"],
        words: &["key-rates", file.to_str().unwrap()],
        before: 15,
        from: STATED,
        most: 11 + BUSY_ALLOWANCE,
        least: 8,
        info: r#""row":"k","rate":"5/s:1""#,
        told: Some("the shared limits were changed by drip ctl to per key: k 5/s, burst 1; other keys 50/s, burst 1 (this drip had per key: k 20/s, burst 1; other keys 50/s, burst 1): it follows them"),
    })
}

#[test]
fn ctl_key_rates_changes_the_table_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || lower_key_row("ctl-rows"));
}

#[test]
fn ctl_key_rates_changes_the_table_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-rows");
    common::until_judged(3, Duration::from_secs(90), || lower_key_row(&share));
}

/// Raising a shared limit per key, with a global rate beside it: two
/// drips at 5/s per key (and 100/s in all), `drip ctl a key-rate 20/s`;
/// from the stated time on they send more than 5/s could, and at most
/// 1 + 20 × 2 in any 2 s.
fn raise_key_rate(share: &str) -> Option<String> {
    follow(&Change {
        args: &["-r", "100/s", "--key", "2", "--key-rate", "5/s"],
        suffix: " k",
        share: Some(share),
        names: &["a", "b"],
        words: &["key-rate", "20/s"],
        before: 5,
        from: STATED,
        most: 1 + 40 + BUSY_ALLOWANCE,
        least: 30,
        info: r#""key_rate":"20/s:1""#,
        told: Some("the shared limits were changed by drip ctl to 100/s, burst 1; per key 20/s, burst 1 (this drip had 100/s, burst 1; per key 5/s, burst 1): it follows them"),
    })
}

#[test]
fn ctl_key_rate_raises_the_limits_of_every_drip_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || raise_key_rate("ctl-key-up"));
}

#[test]
fn ctl_key_rate_raises_the_limits_of_every_drip_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-key-up");
    common::until_judged(3, Duration::from_secs(90), || raise_key_rate(&share));
}

/// A burst raised on a busy shared key saves nothing up: two drips
/// sending records of one key at 2/s per key together, `drip ctl a
/// key-rate 2/s:10`; from the change itself on, at most the slots reserved
/// before it (1 s of 2/s at most) and 1 + 2 × 2 in any 2 s, where a burst
/// saved up at the change would let 10 go at once.
fn raise_key_burst(share: &str) -> Option<String> {
    follow(&Change {
        args: &["--key", "2", "--key-rate", "2/s"],
        suffix: " k",
        share: Some(share),
        names: &["a", "b"],
        words: &["key-rate", "2/s:10"],
        before: 2,
        from: 0.0,
        most: 2 + 5 + BUSY_ALLOWANCE,
        least: 6,
        info: r#""key_rate":"2/s:10""#,
        told: Some("the shared limits were changed by drip ctl to per key 2/s, burst 10 (this drip had per key 2/s, burst 1): it follows them"),
    })
}

#[test]
fn ctl_key_rate_saves_no_burst_up_for_a_busy_key_on_one_host() {
    let _t = common::beside_timing();
    common::until_judged(3, Duration::from_secs(90), || {
        raise_key_burst("ctl-key-burst")
    });
}

#[test]
fn ctl_key_rate_saves_no_burst_up_for_a_busy_key_through_redis() {
    if !common::have_redis() {
        return;
    }
    let _t = common::beside_timing();
    let redis = fleet::Redis::start();
    let share = redis.share("ctl-key-burst");
    common::until_judged(3, Duration::from_secs(90), || raise_key_burst(&share));
}
