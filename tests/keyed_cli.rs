//! Limits per key from the command line: usage errors, and the keys in the
//! summary and the stats stream.

use crate::common;

use std::process::Stdio;
use std::thread;
use std::time::Duration;

use predicates::str::contains;

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
        let out = common::drip(&[])
            .args(args)
            .write_stdin("")
            .assert()
            .code(2);
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
    let out = common::drip(&[])
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
    common::drip(&[])
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
    let out = common::drip(&[])
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
        let out = common::drip(&[])
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
        common::drip(&[])
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
        common::drip(&[])
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

/// The lines of `stderr` that start `drip: keys seen`, in order.
fn keys_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("drip: keys seen"))
        .collect()
}

#[test]
fn sigusr1_prints_the_keys_and_a_stop_names_the_keys_left_waiting() {
    // Three keys at 5/s each (shared, through a state file), 20,000
    // records: at a stop nearly all wait.
    let input: String = (0..20_000).map(|i| format!("k{} {i}\n", i % 3)).collect();
    let input = common::temp_file(input.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let mut child = common::command(&["-q", "--key", "1", "--key-rate", "5/s", "-c", "20000"])
        .args(["--share", "usr1", "--stats", "--stats-json"])
        .arg(&json)
        .arg(input.path())
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(700));
    common::send_signal(&child, libc::SIGUSR1);
    thread::sleep(Duration::from_millis(300));
    common::send_signal(&child, libc::SIGTERM);
    let status = common::wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    // SIGUSR1 printed the keys' line and the share's too, as --stats does
    // at exit.
    let keys = keys_lines(&err);
    assert_eq!(keys.len(), 2, "{err}");
    assert_eq!(
        err.matches("drip: shared usr1 per key: ").count(),
        2,
        "{err}"
    );
    assert!(
        keys[0].starts_with("drip: keys seen 3 (remembered 3, busy 3)"),
        "{err}"
    );
    // At the stop, the keys' part was taken before the queues were
    // drained: the keys whose records were left are named.
    let v: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&json)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    let undelivered = v["undelivered"].as_u64().unwrap();
    assert!(undelivered > 19_000, "{v}");
    assert_eq!(v["keys"]["busy_keys"], 3, "{v}");
    let waiting = v["keys"]["top_waiting"].as_array().unwrap();
    let total: u64 = waiting.iter().map(|p| p[1].as_u64().unwrap()).sum();
    assert_eq!(total, undelivered, "{v}");
    assert!(
        keys[1].starts_with("drip: keys seen 3 (remembered 3, busy 3)"),
        "{err}"
    );
    assert!(err.contains("top waiting: k0 "), "{err}");
}

#[test]
fn keys_are_shown_safely_in_the_stats() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    let long = "x".repeat(200_000);
    let mut bytes = b"http://\x1b[2Jevil/x\nhttp://a b/x\nhttp://(no key)/\nnone\n".to_vec();
    bytes.extend(format!("http://{long}/x\n").bytes());
    // The four characters `\xff`, then the byte 0xff (invalid UTF-8).
    bytes.extend(b"http://\\xff/\nhttp://\xff/\n");
    let out = common::drip(&[])
        .args(["-q", "--stats", "--key", "3", "--field-separator", "/"])
        .args(["--key-rate", "1000/s"])
        .arg("--stats-json")
        .arg(&json)
        .write_stdin(bytes)
        .assert()
        .success();
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(!err.contains('\x1b'), "{err:?}");
    for line in err.lines() {
        assert!(line.starts_with("drip: "), "{line:?}");
        assert!(line.chars().count() <= 80, "{line:?}");
    }
    assert!(err.len() < 2000, "{} bytes", err.len());
    assert!(err.contains("\\x1b[2Jevil 1"), "{err}");
    assert!(err.contains("\"a b\" 1"), "{err}");
    assert!(err.contains(&format!("{}… 1", "x".repeat(39))), "{err}");
    assert!(
        err.contains("\\\\xff 1") && err.contains(" \\xff 1"),
        "{err}"
    );
    assert!(err.contains(" (no key) 1"), "{err}");
    assert!(err.contains("\"(no key)\" 1"), "{err}");
    let text = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let names: Vec<serde_json::Value> = v["keys"]["top_written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].clone())
        .collect();
    for name in [
        serde_json::json!("\x1b[2Jevil"),
        serde_json::json!("a b"),
        serde_json::json!(long),
        serde_json::json!("\\\\xff"),
        serde_json::json!("\\xff"),
        serde_json::json!("(no key)"),
        serde_json::Value::Null,
    ] {
        assert!(names.contains(&name), "{name} not in {v}");
    }
}

#[test]
fn drop_oldest_at_a_full_bucket_keeps_flowing_with_keys_in_random_order() {
    // 3000 records over 50 keys in a scrambled order into a bucket of 100:
    // each overflow takes the oldest record of the key holding most, and
    // drip ends with every record written or dropped. A key left marked
    // as holding records it no longer held made drip spin for ever.
    let mut input = String::new();
    let mut x: u64 = 7;
    for i in 0..3000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        input.push_str(&format!("{} {i}\n", (x >> 33) % 50));
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("stats.json");
    common::drip(&[])
        .args(["-q", "--key", "1", "--key-rate", "100/s", "-c", "100"])
        .args(["-o", "drop-oldest", "--stats-json"])
        .arg(&json)
        .write_stdin(input)
        .timeout(Duration::from_secs(30))
        .assert()
        .success();
    let v = common::last_json(&json);
    common::assert_books_add_up(&v);
    assert_eq!(v["read"], 3000);
    assert!(v["dropped_oldest"].as_u64().unwrap() > 2000, "{v}");
}

/// Records are never joined: an unterminated last record that a key lets
/// overtake a waiting one is written with the delimiter (`\n`, NUL under
/// -0, X under -d X); written last, in the input's order, it stays as it
/// was read.
#[test]
fn an_unterminated_last_record_overtaking_another_gets_the_delimiter() {
    let keyed = ["-q", "--key", "1", "--key-rate", "20/s"];
    for (flags, d) in [(&[][..], b'\n'), (&["-0"][..], 0), (&["-d", ";"][..], b';')] {
        let args: Vec<&str> = flags.iter().chain(&keyed).copied().collect();
        let record = |text: &str| [text.as_bytes(), &[d]].concat();
        let input = [record("a 1"), record("a 2"), b"b 3".to_vec()].concat();
        let (code, out, _) = common::run_bytes(&args, &input);
        assert_eq!(code, 0);
        let want = [record("a 1"), record("b 3"), record("a 2")].concat();
        assert_eq!(out, want, "{flags:?}: b 3 overtook a 2, apart");
        // Kept in order, the output is the input byte for byte.
        let input = [record("b 0"), record("a 1"), b"b 3".to_vec()].concat();
        let (code, out, _) = common::run_bytes(&args, &input);
        assert_eq!(code, 0);
        assert_eq!(out, input, "{flags:?}: in order, nothing added");
    }
}

#[test]
fn the_stats_stream_foresees_the_wait_behind_a_keys_records() {
    // for i in $(seq 30); do echo "a $i"; done | drip --key 1 --key-rate
    // 2/s --stats-interval 1s: 1 leaves at once, the rest 0.5 s apart. A
    // record of key a arriving with `depth` waiting would leave behind
    // them, with the head due within 0.5 s: about depth × 0.5 s from now.
    let input: String = (1..=30).map(|i| format!("a {i}\n")).collect();
    let mut child = common::command(&["-q", "--key", "1", "--key-rate", "2/s"])
        .args(["--stats-interval", "1s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut child, input.as_bytes());
    let mut line = String::new();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    common::send_signal(&child, libc::SIGTERM);
    common::wait_for(&mut child, Duration::from_secs(10));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let depth = v["depth"].as_f64().unwrap();
    let wait = v["forecast_wait_ms"].as_f64().unwrap();
    assert!(depth >= 10.0, "{line}");
    let floor = (depth - 1.0) * 500.0;
    let ceiling = (depth + 1.0) * 500.0;
    assert!((floor..=ceiling).contains(&wait), "{line}");
}
