//! Limits per key from the command line: usage errors, and the keys in the
//! summary and the stats stream.

use assert_cmd::Command;
use predicates::str::contains;

fn drip() -> Command {
    Command::cargo_bin("drip").unwrap()
}

#[test]
fn key_options_are_checked_as_usage_errors() {
    for (args, flag) in [
        (&["--key", "1"][..], "--key"),
        (&["--key-rate", "5/s"][..], "--key-rate"),
        (&["--key", "0", "--key-rate", "5/s"][..], "--key"),
        (&["--key", "(", "--key-rate", "5/s"][..], "--key"),
        (&["--key", "x", "--key-rate", "5/s"][..], "--key"),
        (&["--key", "1", "--key-rate", "inf"][..], "--key-rate"),
        (&["--field-separator", ","][..], "--field-separator"),
        (&["--key-capacity", "3"][..], "--key-capacity"),
        (&["--max-keys", "5"][..], "--max-keys"),
        (
            &["--key", "1", "--key-rate", "5/s", "--key-rate", "9/s"][..],
            "--key-rate",
        ),
        (
            &["--key", "1", "--key", "2", "--key-rate", "5/s"][..],
            "--key",
        ),
        // --burst is the global --rate's: without one it is a guess.
        (
            &["-b", "1", "--key", "1", "--key-rate", "5/s"][..],
            "--burst",
        ),
        (
            &[
                "-d",
                ";",
                "--field-separator",
                ";",
                "--key",
                "1",
                "--key-rate",
                "5/s",
            ][..],
            "--field-separator",
        ),
        (
            &[
                "-0",
                "--field-separator",
                "\\0",
                "--key",
                "1",
                "--key-rate",
                "5/s",
            ][..],
            "--field-separator",
        ),
    ] {
        let out = drip().args(args).write_stdin("").assert().code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(
            err.starts_with("drip: ") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn an_unlimited_key_rate_is_refused_without_offering_inf() {
    let out = drip()
        .args(["--key", "1", "--key-rate", "inf"])
        .write_stdin("")
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("each key needs a limit, not inf"), "{err}");
    assert!(!err.contains("or inf"), "{err}");
}

#[test]
fn stats_name_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let input = "a 1\nb 1\na 2\na 3\nnokey\n";
    drip()
        .args(["-q", "--stats", "--key", "2", "--key-rate", "1000/s"])
        .arg("--stats-json")
        .arg(&json)
        .write_stdin(input.replace(' ', ",").replace("nokey", "x"))
        .args(["--field-separator", ","])
        .assert()
        .success()
        .stderr(contains(
            "keys seen 4 (remembered 3, busy 0); top written: 1 2, ",
        ));
    let text = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(v["keys"]["keys_seen"], 4);
    assert_eq!(v["keys"]["top_written"][0], serde_json::json!(["1", 2]));
    assert_eq!(v["written"], 5);
}

#[test]
fn the_stats_stream_counts_keys() {
    let out = drip()
        .args([
            "-q",
            "--key",
            "1",
            "--key-rate",
            "10/s",
            "--stats-interval",
            "50ms",
        ])
        .write_stdin("a\na\na\nb\n")
        .assert()
        .success();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    let first: serde_json::Value = serde_json::from_str(err.lines().next().unwrap()).unwrap();
    assert_eq!(first["keys"], 2, "{err}");
    assert_eq!(first["busy_keys"], 1, "{err}");
}

#[test]
fn an_overflow_under_fail_says_what_was_full() {
    // Record 8 (a 4) finds key a's queue full; record 5 (c 1) is a third
    // key while both remembered keys are busy; with neither bound, record
    // 5 finds the bucket full.
    let input = "a 1\na 2\na 3\nb 1\nc 1\nc 2\nd 1\na 4\n";
    for (args, why) in [
        (
            &["--key-capacity", "2"][..],
            "record 8 arrived at its key's full queue (--key-capacity 2)",
        ),
        (
            &["--max-keys", "2"][..],
            "record 5 brought a new key while all 2 remembered keys were busy (--max-keys 2)",
        ),
        (
            &["-c", "3"][..],
            "record 5 arrived at a full bucket (capacity 3 records)",
        ),
    ] {
        let out = drip()
            .args(["-r", "1/s", "-o", "fail", "--key", "1", "--key-rate", "1/s"])
            .args(args)
            .write_stdin(input)
            .assert()
            .code(3);
        let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert_eq!(
            err.trim_end(),
            format!("drip: overflow: {why} under --overflow fail"),
            "{args:?}"
        );
    }
}

#[test]
fn drip_ends_once_the_last_waiting_record_expires_or_is_evicted() {
    // Key A's next slot is an hour away; its waiting record expires at
    // 1 s, or is evicted by B's arrival: nothing is left to wait for.
    for (input, args) in [
        ("A 1\nA 2\n", &["--max-wait", "1s"][..]),
        (
            "A 1\nA 2\nB 1\n",
            &["-r", "1/s", "-c", "1", "-o", "drop-oldest"][..],
        ),
    ] {
        let start = std::time::Instant::now();
        drip()
            .args(["--key", "1", "--key-rate", "1/h"])
            .args(args)
            .timeout(std::time::Duration::from_secs(30))
            .write_stdin(input)
            .assert()
            .success();
        let took = start.elapsed();
        assert!(took.as_secs_f64() < 10.0, "{args:?}: {took:?}");
    }
}

#[test]
fn crlf_and_lf_lines_key_alike() {
    // A CR before the newline is not part of the key, whichever way keys
    // are found.
    for (args, input) in [
        (
            &["--key", "2", "--field-separator", ","][..],
            "x,a\r\nx,a\n",
        ),
        (&["--key", "2"][..], "x a\r\nx a\n"),
        (&["--key", r"(\w+)$"][..], "x,a\r\nx,a\n"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("stats.json");
        drip()
            .args(["-q", "--key-rate", "1000/s", "--stats-json"])
            .arg(&json)
            .args(args)
            .write_stdin(input)
            .assert()
            .success()
            .stdout(input);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["keys"]["keys_seen"], 1, "{args:?}: {v}");
        assert_eq!(
            v["keys"]["top_written"][0],
            serde_json::json!(["a", 2]),
            "{args:?}: {v}"
        );
    }
}
