//! `--keep-order`: with several jobs at once, each job's output reaches
//! stdout in input order, whole, byte for byte, whatever order the jobs end
//! in; the window of records bounds how far starts run ahead of the oldest
//! record not written out. Real processes.

use crate::common;

use std::process::Stdio;
use std::time::Instant;

use common::{command, shell, temp_file};

/// Run drip over `input` to the end; (status, stdout, stderr).
fn run(args: &[&str], input: &[u8]) -> (i32, Vec<u8>, String) {
    let file = temp_file(input);
    let out = command(args)
        .stdin(Stdio::from(file.reopen().unwrap()))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each job sleeps the time its record names, then writes three lines
/// naming it, the second without a newline until a pause later, so a job
/// whose output were passed on piecemeal would interleave.
const JOB: &str = r#"set -- $1; sleep "$2"; printf '%s one\n%s two' "$1" "$1"; sleep 0.01; printf ' more\n%s three\n' "$1""#;

fn expected(ids: impl Iterator<Item = usize>) -> Vec<u8> {
    ids.flat_map(|i| format!("{i} one\n{i} two more\n{i} three\n").into_bytes())
        .collect()
}

#[test]
fn outputs_come_in_input_order_whatever_the_job_durations() {
    for round in 0..3u64 {
        let mut rng = fastrand::Rng::with_seed(round);
        let input: String = (1..=40)
            .map(|i| format!("{i} 0.{:03}\n", rng.u32(0..150)))
            .collect();
        let (status, out, err) = run(
            &[
                "-q", "-r", "inf", "-j", "8", "-k", "--exec", "sh", "-c", JOB, "sh", "{}",
            ],
            input.as_bytes(),
        );
        assert_eq!(status, 0, "{err}");
        assert!(
            out == expected(1..=40),
            "round {round}: out of order:\n{}",
            String::from_utf8_lossy(&out)
        );
    }
}

#[test]
fn large_outputs_and_binary_bytes_stay_whole_and_in_order() {
    // Record 1 is slow and writes 3 MB (held in a file, not in memory),
    // written out as the last job ends: drip must not exit before it is;
    // the others are quick and write bytes that are not UTF-8.
    let job = r#"if [ "$1" = 1 ]; then sleep 0.3; head -c 3000000 /dev/zero | tr '\0' x; echo; else printf '%s\377\000\n' "$1"; fi"#;
    // The reader of drip's stdout comes late: the outputs cannot all be
    // in the pipe when the last job ends.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job");
    std::fs::write(&script, job).unwrap();
    let out = shell(&format!(
        "printf '1\\n2\\n3\\n4\\n5\\n' | drip -q -r inf -j 4 -k --exec sh {} {{}} | \
         {{ sleep 0.5; cat; }}",
        script.display()
    ))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = out.stdout;
    let mut want = vec![b'x'; 3_000_000];
    want.push(b'\n');
    for i in 2..=5 {
        want.extend_from_slice(format!("{i}\u{0}").as_bytes());
        let at = want.len() - 1;
        want[at] = 0xff;
        want.extend_from_slice(b"\0\n");
    }
    assert!(out == want, "{} bytes", out.len());
}

#[test]
fn the_oldest_record_holds_the_window_and_new_starts_wait() {
    // Window 3, four jobs: record 1 runs 1 s; 2 and 3 start at once, 4
    // waits until 1 is written out.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("starts");
    let job = format!(
        r#"echo "$1 $(date +%s.%N)" >> {}; [ "$1" = 1 ] && sleep 1; echo "$1""#,
        log.display()
    );
    let start = Instant::now();
    let (status, out, err) = run(
        &[
            "-q",
            "-r",
            "inf",
            "-j",
            "4",
            "-k",
            "--order-window",
            "3",
            "--exec",
            "sh",
            "-c",
            &job,
            "sh",
            "{}",
        ],
        b"1\n2\n3\n4\n5\n",
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(out, b"1\n2\n3\n4\n5\n");
    let starts: Vec<(u32, f64)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.parse().unwrap(), t.parse().unwrap())
        })
        .collect();
    let at = |n: u32| starts.iter().find(|s| s.0 == n).unwrap().1;
    assert!(at(3) - at(1) < 0.5, "3 waited: {starts:?}");
    assert!(
        at(4) - at(1) >= 0.95,
        "4 started inside 1's window: {starts:?}"
    );
    assert!(start.elapsed().as_secs_f64() < 5.0);
}

#[test]
fn order_window_needs_keep_order() {
    let (status, _, err) = run(&["--order-window", "5", "--exec", "true"], b"x\n");
    assert_eq!(status, 2);
    assert!(err.contains("--keep-order"), "{err}");
    let (status, _, err) = run(&["-k"], b"x\n");
    assert_eq!(status, 2);
    assert!(err.contains("--keep-order: only with --exec"), "{err}");
}

#[test]
fn a_second_signal_still_writes_the_held_outputs_as_far_as_stdout_takes_them() {
    // Record 1 runs on; 2 to 20 succeed, their outputs held behind it. TERM
    // waits for record 1; TERM again kills it: the held outputs go to the
    // stdout file, which takes everything, in input order.
    let dir = tempfile::tempdir().unwrap();
    let (log, stats, out) = (
        dir.path().join("joblog"),
        dir.path().join("stats.json"),
        dir.path().join("out"),
    );
    let input = temp_file(common::numbered(1..=20).as_bytes());
    let job = r#"if [ "$1" = 1 ]; then sleep 30; fi; echo "out $1""#;
    let mut cmd = command(&[
        "-q",
        "-r",
        "inf",
        "-j",
        "20",
        "-k",
        "--joblog",
        log.to_str().unwrap(),
        "--stats-json",
        stats.to_str().unwrap(),
        input.path().to_str().unwrap(),
        "--exec",
        "sh",
        "-c",
        job,
        "sh",
        "{}",
    ]);
    cmd.stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 19 {
        assert!(start.elapsed().as_secs() < 20, "the 19 jobs did not end");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    common::send_signal(&child, libc::SIGTERM);
    std::thread::sleep(std::time::Duration::from_millis(300));
    common::send_signal(&child, libc::SIGTERM);
    let status = common::wait_for(&mut child, std::time::Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let want: String = (2..=20).map(|i| format!("out {i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), want);
    let s = common::last_json(&stats);
    common::assert_books_add_up(&s);
    assert_eq!(
        (
            s["succeeded"].as_u64(),
            s["undelivered"].as_u64(),
            s["outputs_cut"].as_u64()
        ),
        (Some(19), Some(1), Some(0)),
        "{s}"
    );
}
