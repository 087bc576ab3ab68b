//! `drip take`: one slot from a shared limit, on the same schedule as the
//! running drips, through the state file and through Redis.

use crate::common;
use crate::fleet;

use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::{timed_lines, wait_for};

/// What a busy machine adds to a window's count beyond rate + burst, as in
/// `tests/share.rs`: a slot used up to its allowance late (one), and a
/// stamp taken late at the consumer (one more).
const BUSY_ALLOWANCE: usize = 2;

/// `drip take ARGS` with its state files under `runtime`: its status and
/// stderr.
fn take(args: &[&str], runtime: &Path) -> (i32, String) {
    let mut cmd = common::command(&[&["take"], args].concat());
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn drip take");
    let status = wait_for(&mut child, Duration::from_secs(60));
    (status.code().unwrap_or(-1), common::stderr_of(&mut child))
}

/// Two drips sharing 20/s under `share`, 50 records each, and `drip take`
/// in a loop beside them until both are done: the drips' lines and the
/// takes' exits, stamped on the test's one clock, stay within the bound
/// (20 + burst 1 in any second, plus what a busy machine adds), and the
/// takes got slots too. Without the take sharing the schedule it runs 20
/// a second by itself, and the window holds 40 and more.
fn takes_beside_two_drips_hold_the_bound(share: &str, runtime: &Path) {
    let _t = common::timing();
    let start = Instant::now();
    let args = ["-r", "20/s", "--share", share, "-q"];
    let drips: Vec<_> = (0..2)
        .map(|i| {
            let mut cmd = common::command(&args);
            cmd.env("XDG_RUNTIME_DIR", runtime)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("spawn drip");
            let input: String = (1..=50).map(|r| format!("{i}-{r}\n")).collect();
            common::feed(&mut child, input.as_bytes());
            thread::spawn(move || {
                let lines = timed_lines(&mut child, start);
                let status = wait_for(&mut child, Duration::from_secs(60));
                assert!(status.success(), "drip {i}: {status}");
                assert_eq!(lines.len(), 50, "drip {i}");
                lines.into_iter().map(|(t, _)| t).collect::<Vec<f64>>()
            })
        })
        .collect();
    let mut takes = Vec::new();
    while drips.iter().any(|d| !d.is_finished()) {
        let (status, stderr) = take(&["-r", "20/s", share], runtime);
        assert_eq!(status, 0, "{stderr}");
        takes.push(start.elapsed().as_secs_f64());
    }
    let mut all: Vec<f64> = drips.into_iter().flat_map(|d| d.join().unwrap()).collect();
    assert!(takes.len() >= 10, "{} takes: {takes:?}", takes.len());
    all.extend(&takes);
    all.sort_by(f64::total_cmp);
    let most = common::most_in_window(&all, 1.0);
    assert!(
        most <= 20 + 1 + BUSY_ALLOWANCE,
        "{most} in one second ({} takes): {all:?}",
        takes.len()
    );
    // Together they ran at the shared rate, not beside it.
    let span = all[all.len() - 1] - all[0];
    let rate = (all.len() - 1) as f64 / span;
    eprintln!(
        "{} records and takes ({} takes): at most {most} in one second, {rate:.2}/s together",
        all.len(),
        takes.len()
    );
    assert!(rate <= 20.5, "{rate}/s together: {all:?}");
}

#[test]
fn takes_beside_two_drips_hold_the_bound_on_one_host() {
    let runtime = tempfile::tempdir().unwrap();
    takes_beside_two_drips_hold_the_bound("quota", runtime.path());
}

#[test]
fn takes_beside_two_drips_hold_the_bound_through_redis() {
    if !common::have_redis() {
        return;
    }
    let redis = fleet::Redis::start();
    let runtime = tempfile::tempdir().unwrap();
    takes_beside_two_drips_hold_the_bound(&redis.share("quota"), runtime.path());
}

/// A take whose slot is not due within --timeout exits 124 and spends
/// nothing: at 2/s, after a first take, one with --timeout 100ms fails,
/// and the next take's slot is the one 500 ms after the first (had the
/// failed one spent its slot, 1 s after).
fn a_timeout_spends_nothing(share: &str, runtime: &Path) {
    let _t = common::timing();
    let first = Instant::now();
    assert_eq!(take(&["-r", "2/s", share], runtime), (0, String::new()));
    let (status, stderr) = take(&["-r", "2/s", "--timeout", "100ms", share], runtime);
    assert_eq!((status, stderr.as_str()), (124, ""));
    if first.elapsed() >= Duration::from_millis(400) {
        // Too slow a machine to tell the slots apart: the third take
        // could have been due anyway.
        eprintln!("not judged: the timed-out take ended late");
        return;
    }
    assert_eq!(take(&["-r", "2/s", share], runtime), (0, String::new()));
    let took = first.elapsed();
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(
        took < Duration::from_millis(950),
        "{took:?}: the timed-out take spent a slot"
    );
}

#[test]
fn a_timeout_spends_nothing_on_one_host() {
    let runtime = tempfile::tempdir().unwrap();
    a_timeout_spends_nothing("slow", runtime.path());
}

#[test]
fn a_timeout_spends_nothing_through_redis() {
    if !common::have_redis() {
        return;
    }
    let redis = fleet::Redis::start();
    let runtime = tempfile::tempdir().unwrap();
    a_timeout_spends_nothing(&redis.share("slow"), runtime.path());
}

/// A cost spends the cost rate: at 10/s with a burst of 10, a take of
/// cost 10 goes at once, and the next one a second later.
#[test]
fn a_cost_spends_the_cost_rate() {
    let _t = common::timing();
    let runtime = tempfile::tempdir().unwrap();
    let args = ["--cost-rate", "10/s:10", "--cost", "10", "tokens"];
    let first = Instant::now();
    assert_eq!(take(&args, runtime.path()), (0, String::new()));
    assert_eq!(take(&args, runtime.path()), (0, String::new()));
    let took = first.elapsed();
    assert!(took >= Duration::from_millis(1000), "{took:?}");
}

/// Limits that differ from the shared ones: status 2, one line naming
/// both; a --cost with nothing to spend it on: status 2.
#[test]
fn other_limits_and_a_cost_with_no_cost_rate_are_refused() {
    let runtime = tempfile::tempdir().unwrap();
    assert_eq!(
        take(&["-r", "5/s", "q"], runtime.path()),
        (0, String::new())
    );
    assert_eq!(
        take(&["-r", "6/s", "q"], runtime.path()),
        (2, "drip: take q: this take's limits (6/s, burst 1) differ from the shared ones (5/s, burst 1): wait until the shared state expires, 10 s after the end of its reserved schedule, or choose another NAME\n".into())
    );
    assert_eq!(
        take(&["--cost", "3", "q"], runtime.path()),
        (2, "drip: --cost: there is no --cost-rate or --byte-rate to spend it on (a --rate slot is one record)\n".into())
    );
}

/// A NAME whose drips share limits per key: a take (it has no key) is
/// refused as limits that differ, status 2.
#[test]
fn a_name_with_limits_per_key_is_refused() {
    let runtime = tempfile::tempdir().unwrap();
    let mut cmd = common::command(&["--key", "1", "--key-rate", "5/s", "--share", "keyed", "-q"]);
    cmd.env("XDG_RUNTIME_DIR", runtime.path());
    let out = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            common::feed(&mut c, b"a\n");
            c.wait()
        })
        .unwrap();
    assert!(out.success());
    let (status, stderr) = take(&["-r", "5/s", "keyed"], runtime.path());
    assert_eq!(status, 2, "{stderr}");
    assert!(
        stderr.contains("differ from the shared ones (per key 5/s, burst 1)"),
        "{stderr}"
    );
}

/// A server that cannot be reached: status 4, one line.
#[test]
fn an_unreachable_server_is_status_4() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let runtime = tempfile::tempdir().unwrap();
    let url = format!("redis://127.0.0.1:{port}/q");
    let (status, stderr) = take(&["-r", "5/s", &url], runtime.path());
    assert_eq!(status, 4, "{stderr}");
    assert!(
        stderr.starts_with("drip: take q: the shared state cannot be reached: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
