//! The rate table per key through the real binary: each key at its row's
//! rate, the spacing read from the consumer's timestamps; the table read
//! again by `drip ctl … key-rates` and by SIGHUP, each key keeping its
//! place; a bad file at the start and at a reload; the rows and limits in
//! the figures (`--stats-json`, `drip ctl … info`, `key-list`).

use crate::common;

use std::io::{Read, Write};
use std::process::Stdio;
use std::thread;
use std::time::Duration;

use common::running::Running;
use common::{ctl_ok, send_signal, wait_for};

/// The stamps of the lines of `key` (their first word) after `from`.
fn stamps(lines: &[(f64, String)], key: &str, from: f64) -> Vec<f64> {
    lines
        .iter()
        .filter(|(t, l)| *t > from && l.split(' ').next() == Some(key))
        .map(|(t, _)| *t)
        .collect()
}

/// Each key leaves at its row's rate: an exact row, a `*.DOMAIN` row (not
/// matching DOMAIN itself, which takes --key-rate), with hosts for keys,
/// a row spelled otherwise than the URLs (upper case, a root dot).
#[test]
fn each_key_leaves_at_its_rows_rate() {
    let _t = common::beside_timing();
    let table =
        common::temp_file(b"# the hosts\n*.Slow.TEST. 4/s   # every subdomain\nfast.test 20/s\n\n");
    common::until_judged(3, Duration::from_secs(60), || {
        let runtime = tempfile::tempdir().unwrap();
        let mut input = String::new();
        for i in 0..30 {
            input.push_str(&format!("https://fast.test/{i}\n"));
            if i < 8 {
                input.push_str(&format!("https://a.slow.test/{i}\n"));
            }
            if i < 14 {
                input.push_str(&format!("https://slow.test/{i}\n"));
                input.push_str(&format!("no-url/{i}\n"));
            }
        }
        let path = table.path().to_str().unwrap();
        let args = ["--key", "host", "--key-rate", "10/s", "--key-rates", path];
        let drip = Running::start(&args, runtime.path(), input, None);
        drip.wait_lines(66);
        let lines = drip.lines();
        drip.stop();
        let host = |l: &str| l.split('/').nth(2).unwrap_or("nokey").to_string();
        let keyed: Vec<(f64, String)> = lines.iter().map(|(t, l)| (*t, host(l))).collect();
        let mut account = Vec::new();
        // slow.test: no row (*.slow.test is its subdomains'); the records
        // with no key: --key-rate too.
        let keys = [
            ("fast.test", 50.0),
            ("a.slow.test", 250.0),
            ("slow.test", 100.0),
            ("nokey", 100.0),
        ];
        for (key, ms) in keys {
            let gap = 1e3 * common::median_gap(&stamps(&keyed, key, 0.0));
            if !(ms * 0.9..=ms * 1.3).contains(&gap) {
                account.push(format!("{key}: {gap:.1} ms, not {ms}"));
            }
        }
        (!account.is_empty()).then(|| account.join("; "))
    });
}

/// The table read again by `drip ctl … key-rates` and by SIGHUP: the key's
/// next record leaves one new interval after its last, with no burst;
/// SIGHUP stops drip no more; a bad file is said and the table stays.
#[test]
fn a_new_table_keeps_each_keys_place() {
    let _t = common::beside_timing();
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rates");
    let path = file.to_str().unwrap();
    std::fs::write(&file, "a 20/s\nb 20/s\n").unwrap();
    let input: String = (1..=2000).map(|i| format!("a {i}\n")).collect();
    let stats = dir.path().join("stats.json");
    let stats_path = stats.to_str().unwrap();
    let args = [
        "--key",
        "1",
        "--key-rates",
        path,
        "--name",
        "table",
        "--stats-json",
        stats_path,
    ];
    let drip = Running::start(&args, rt, input, None);
    drip.wait_lines(8);
    let info = ctl_ok(rt, &["table", "info"]);
    assert_eq!(info["key_rates"], path, "{info}");
    assert_eq!(info["keys"]["key_limits"][0]["row"], "a", "{info}");
    assert_eq!(info["keys"]["key_limits"][0]["rate"], "20/s:1", "{info}");
    // Slower, by drip ctl, from another file, named as the client's
    // working directory sees it.
    let other = dir.path().join("other");
    std::fs::write(&other, "a 4/s\n").unwrap();
    let before = drip.now();
    let (status, _, err) = common::ctl_in(rt, dir.path(), &["table", "key-rates", "other"]);
    assert_eq!(status, 0, "{err}");
    let changed = drip.now();
    let info = ctl_ok(rt, &["table", "info"]);
    assert_eq!(info["key_rates"], other.to_str().unwrap(), "{info}");
    drip.wait_lines(drip.lines().len() + 5);
    // Faster again, by SIGHUP, which reads the file drip ctl named: drip
    // goes on.
    std::fs::write(&file, "a 1/s\n").unwrap();
    std::fs::write(&other, "a 20/s:5\n").unwrap();
    let hup = drip.now();
    send_signal(&drip.child, libc::SIGHUP);
    thread::sleep(Duration::from_millis(400));
    // A bad file, by SIGHUP and by ctl: said, and the table stays.
    std::fs::write(&other, "a 1/s\nb nonsense\n").unwrap();
    send_signal(&drip.child, libc::SIGHUP);
    let other_path = other.to_str().unwrap();
    let (status, _, err) = common::ctl(rt, &["table", "key-rates", other_path]);
    assert_eq!(status, 1);
    let said = format!("drip: ctl: table: --key-rates {other_path}:2: 'nonsense' is not a number");
    assert!(err.starts_with(&said) && err.lines().count() == 1, "{err}");
    let bad = drip.now();
    thread::sleep(Duration::from_millis(500));
    let (list_status, list, _) = common::ctl(rt, &["table", "key-list"]);
    let lines = drip.lines();
    let (status, err) = drip.stop();
    assert_eq!(status, Some(143), "SIGHUP stopped drip: {err}");
    assert!(
        err.contains(&format!(
            "drip: SIGHUP: --key-rates {other_path}:2: 'nonsense' is not a number"
        )),
        "{err}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let limits = &summary["keys"]["key_limits"];
    assert_eq!(limits[0]["key"], "a", "{summary}");
    assert_eq!(limits[0]["row"], "a", "{summary}");
    assert_eq!(limits[0]["rate"], "20/s:5", "{summary}");
    assert_eq!(list_status, 0);
    assert!(list.starts_with("a\ta\t20/s:5\t"), "{list}");
    assert_eq!(list.lines().count(), 1, "{list}");
    let a = stamps(&lines, "a", 0.0);
    let last_before = *stamps(&lines, "a", 0.0)
        .iter()
        .rfind(|&&t| t <= before)
        .unwrap();
    let slow = stamps(&lines, "a", changed);
    // No record sooner than one new interval (250 ms) after the last.
    assert!(slow[0] - last_before >= 0.2, "{last_before} then {slow:?}");
    let gap = 1e3 * common::median_gap(&stamps(&lines, "a", changed)[..5]);
    assert!((230.0..=330.0).contains(&gap), "at 4/s: {gap} ms");
    // No burst at the change (a burst of 5 would send 6 in 150 ms).
    let first = stamps(&lines, "a", hup);
    let soon = first.iter().filter(|&&t| t < hup + 0.15).count();
    assert!(soon <= 4, "a burst after SIGHUP: {first:?}");
    let fast = stamps(&lines, "a", hup + 0.1);
    let gap = 1e3 * common::median_gap(&fast);
    assert!((40.0..=70.0).contains(&gap), "at 20/s: {gap} ms ({a:?})");
    let after_bad = stamps(&lines, "a", bad);
    let gap = 1e3 * common::median_gap(&after_bad);
    assert!((40.0..=70.0).contains(&gap), "the table stays: {gap} ms");
}

/// A malformed table at the start: one line naming the file and the line,
/// exit status 2; a file that cannot be read, the same.
#[test]
fn a_bad_table_at_the_start_is_a_usage_error() {
    let table = common::temp_file(b"# rows\nexample.com 5/s\n*.a*.com 1/s\n");
    let path = table.path().to_str().unwrap();
    for (file, says) in [
        (
            path,
            format!("drip: --key-rates {path}:3: '*.a*.com': expected *.DOMAIN"),
        ),
        (
            "/nonexistent/rates",
            "drip: --key-rates /nonexistent/rates: ".to_string(),
        ),
    ] {
        let out = common::drip(&[])
            .args(["--key", "host", "--key-rates", file])
            .write_stdin("https://example.com/\n")
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(err.starts_with(&says) && err.lines().count() == 1, "{err}");
    }
}

/// SIGHUP reads the table again even when the parent ignores it (nohup):
/// drip goes on; without --key-rates, it stays ignored (accounting.rs).
#[test]
fn sighup_reads_the_table_even_under_nohup() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rates");
    std::fs::write(&file, "a 10/s\n").unwrap();
    let script = format!(
        "trap '' HUP; exec drip --key 1 --key-rates '{}'",
        file.display()
    );
    let mut child = common::shell(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a 1\na 2\n").unwrap();
    // Started (the table read) once its first record is out.
    let mut first = [0u8; 4];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    assert_eq!(&first, b"a 1\n");
    std::fs::write(&file, "a nonsense\n").unwrap();
    send_signal(&child, libc::SIGHUP);
    thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP stopped drip");
    drop(stdin);
    assert!(wait_for(&mut child, Duration::from_secs(5)).success());
    let err = common::stderr_of(&mut child);
    assert!(err.starts_with("drip: SIGHUP: --key-rates "), "{err}");
}
