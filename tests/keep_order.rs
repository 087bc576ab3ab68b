//! `--keep-order`: with several jobs at once, each job's output reaches
//! stdout in input order, whole, byte for byte, whatever order the jobs end
//! in; the window of records bounds how far starts run ahead of the oldest
//! record not written out. Real processes.

mod common;

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
