//! Inputs that are not plain files or pipes on stdin: FIFOs named as FILE,
//! and inputs that are drip's own output files.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{assert_books_add_up, command, last_json, send_signal, spawn, wait_for};

/// A FIFO in `dir`.
fn fifo(dir: &Path) -> PathBuf {
    let path = dir.join("fifo");
    let status = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success(), "mkfifo");
    path
}

/// Give drip time to reach its wait for the FIFO's first writer.
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

#[test]
fn a_stop_does_not_wait_for_a_fifo_to_get_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());
    let mut cmd = command(&["-q"]);
    cmd.arg(&path).stdin(Stdio::null());
    let mut child = spawn(cmd);
    settle();
    send_signal(&child, libc::SIGTERM);
    // It used to sit in open(2) for good; a stop takes milliseconds.
    let status = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(143));
}

#[test]
fn a_reader_gone_is_noticed_while_a_fifo_has_no_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());
    let mut cmd = command(&["-q"]);
    cmd.arg(&path).stdin(Stdio::null());
    let mut child = spawn(cmd);
    settle();
    // As `drip -q FIFO | true`: stdout's reader goes away.
    drop(child.stdout.take());
    let status = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_fifo_is_read_once_its_first_writer_comes() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());
    let mut cmd = command(&["-q", "-r", "inf"]);
    cmd.arg(&path).stdin(Stdio::null());
    let mut child = spawn(cmd);
    settle();
    // No writer yet is not the end of the input.
    assert!(child.try_wait().unwrap().is_none(), "drip ended early");
    let mut writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    writer.write_all(b"a\nb\n").unwrap();
    drop(writer);
    let status = wait_for(&mut child, Duration::from_secs(10));
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(out.stdout, b"a\nb\n");
}

#[test]
fn a_fifo_whose_writer_comes_and_goes_is_an_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());
    let rest = common::temp_file(b"after\n");
    let mut cmd = command(&["-q", "-r", "inf"]);
    cmd.arg(&path).arg(rest.path()).stdin(Stdio::null());
    let mut child = spawn(cmd);
    settle();
    assert!(child.try_wait().unwrap().is_none(), "drip ended early");
    drop(std::fs::OpenOptions::new().write(true).open(&path).unwrap());
    let status = wait_for(&mut child, Duration::from_secs(10));
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(out.stdout, b"after\n");
}

#[test]
fn an_input_that_is_the_dead_letter_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    std::fs::write(&dead, "a\nb\n").unwrap();
    let link = dir.path().join("link");
    std::fs::hard_link(&dead, &link).unwrap();
    let other = common::temp_file(b"other\n");
    // Named by its path, by another name for it (a hard link), and as
    // stdin: refused each time, as cat does, and the others are read.
    let out = command(&["-q", "-r", "inf", "--dead-letter"])
        .arg(&dead)
        .arg(&dead)
        .arg(&link)
        .arg("-")
        .arg(other.path())
        .stdin(std::fs::File::open(&dead).unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(out.stdout, b"other\n");
    assert_eq!(
        stderr,
        format!(
            "drip: {}: input file is the --dead-letter file\n\
             drip: {}: input file is the --dead-letter file\n\
             drip: stdin: input file is the --dead-letter file\n",
            dead.display(),
            link.display()
        )
    );
    assert_eq!(std::fs::read(&dead).unwrap(), b"a\nb\n");
}

/// `drip -q -r inf ARGS` with stdin from `stdin` (nothing when `None`):
/// its status, stdout and stderr.
fn run_on(args: &[&std::ffi::OsStr], stdin: Option<&Path>) -> (Option<i32>, Vec<u8>, String) {
    let mut cmd = command(&["-q", "-r", "inf"]);
    cmd.args(args);
    match stdin {
        Some(path) => cmd.stdin(std::fs::File::open(path).unwrap()),
        None => cmd.stdin(Stdio::null()),
    };
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), out.stdout, stderr)
}

/// An input that is a file drip empties (`--stats-json`, `--joblog`) or
/// replaces (`--metrics`) as it starts is refused before anything is
/// written: by its name, another spelling of it, a hard link, or as
/// stdin; one line, status 1, nothing read, not a byte of it lost.
#[test]
fn an_input_that_drip_would_empty_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let kept = b"1\n2\n3\n";
    std::fs::write(&input, kept).unwrap();
    let link = dir.path().join("link");
    std::fs::hard_link(&input, &link).unwrap();
    let respelled = dir.path().join(".").join("in.txt");
    let other = common::temp_file(b"other\n");
    let exec = ["--exec", "true"];
    for (flag, extra) in [
        ("--stats-json", &[][..]),
        ("--joblog", &exec[..]),
        ("--metrics", &[][..]),
    ] {
        for named in [&input, &respelled, &link] {
            // --exec takes the rest of the line: it comes last.
            let mut args: Vec<&std::ffi::OsStr> = vec![flag.as_ref(), input.as_os_str()];
            args.extend([other.path().as_os_str(), named.as_os_str()]);
            args.extend(extra.iter().map(std::ffi::OsStr::new));
            let (status, stdout, stderr) = run_on(&args, None);
            assert_eq!(status, Some(1), "{flag} {}: {stderr}", named.display());
            assert_eq!(
                stderr,
                format!("drip: {}: input file is the {flag} file\n", named.display())
            );
            assert!(stdout.is_empty(), "{flag}: read");
            assert_eq!(std::fs::read(&input).unwrap(), kept, "{flag}");
        }
        // As stdin.
        let mut args: Vec<&std::ffi::OsStr> = vec![flag.as_ref(), input.as_os_str()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        let (status, stdout, stderr) = run_on(&args, Some(&input));
        assert_eq!(status, Some(1), "{flag} stdin: {stderr}");
        assert_eq!(
            stderr,
            format!("drip: stdin: input file is the {flag} file\n")
        );
        assert!(stdout.is_empty(), "{flag}: read");
        assert_eq!(std::fs::read(&input).unwrap(), kept, "{flag}");
        // Not there yet: refused all the same, and not made.
        let absent = dir.path().join("absent");
        let mut args: Vec<&std::ffi::OsStr> = vec![flag.as_ref(), absent.as_os_str()];
        args.push(absent.as_os_str());
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        let (status, _, stderr) = run_on(&args, None);
        assert_eq!(status, Some(1), "{flag} absent: {stderr}");
        assert!(!absent.exists(), "{flag}: made");
    }
}

/// `--resume`'s joblog is appended to, as the dead letter is: an input
/// that is it is refused as it is read, and the others are read.
#[test]
fn an_input_that_is_the_resume_joblog_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let joblog = dir.path().join("joblog");
    let first = common::temp_file(b"first\n");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--resume".as_ref(),
        joblog.as_os_str(),
        first.path().as_os_str(),
        "--exec".as_ref(),
        "true".as_ref(),
    ];
    assert_eq!(run_on(&args, None).0, Some(0));
    let before = std::fs::read_to_string(&joblog).unwrap();
    let other = common::temp_file(b"other\n");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--resume".as_ref(),
        joblog.as_os_str(),
        joblog.as_os_str(),
        other.path().as_os_str(),
        "--exec".as_ref(),
        "echo".as_ref(),
    ];
    let (status, stdout, stderr) = run_on(&args, None);
    assert_eq!(status, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "drip: {}: input file is the --resume file\n",
            joblog.display()
        )
    );
    assert_eq!(stdout, b"other\n");
    let log = std::fs::read_to_string(&joblog).unwrap();
    assert!(log.starts_with(&before), "{log}");
    assert_eq!(log.lines().count(), 2, "{log}");
}

#[test]
fn a_dead_letter_that_is_not_a_regular_file_is_no_reason_to_refuse() {
    // /dev/null as both: nothing to loop on.
    let out = command(&[
        "-q",
        "-r",
        "inf",
        "--dead-letter",
        "/dev/null",
        "/dev/null",
        "-",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .and_then(|mut child| {
        child.stdin.take().unwrap().write_all(b"x\n")?;
        child.wait_with_output()
    })
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"x\n");
}

#[test]
fn oversize_skip_sends_the_record_to_the_dead_letter_and_reads_on() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let stats = dir.path().join("stats.json");
    let input = "short\n12345678\n123456789\nafter\nlast one is long";
    for args in [
        &["-r", "inf", "--max-record", "8"][..],
        &["-r", "1000/s", "--capacity-bytes", "9"],
    ] {
        let _ = std::fs::remove_file(&dead);
        let out = common::drip(&["-q", "--oversize", "skip", "--dead-letter"])
            .arg(&dead)
            .arg("--stats-json")
            .arg(&stats)
            .args(args)
            .write_stdin(input)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(out.stdout, b"short\n12345678\nafter\n", "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {out:?}");
        assert_eq!(
            std::fs::read(&dead).unwrap(),
            b"123456789\nlast one is long\n",
            "{args:?}"
        );
        let v = last_json(&stats);
        assert_eq!(v["read"], 5, "{v}");
        assert_eq!(v["written"], 3, "{v}");
        assert_eq!(v["skipped"], 2, "{v}");
        assert_eq!(v["bytes_read"], input.len(), "{v}");
        assert_books_add_up(&v);
    }
}

#[test]
fn oversize_skip_counts_the_record_without_a_dead_letter() {
    common::drip(&[
        "-q",
        "-r",
        "inf",
        "--max-record",
        "3",
        "--oversize",
        "skip",
        "--stats",
    ])
    .write_stdin("abc\nabcd\nab\n")
    .assert()
    .success()
    .stdout("abc\nab\n")
    .stderr(predicates::str::contains(
        "read 3, written 2, dropped 0, expired 0, skipped 1",
    ));
}

#[test]
fn records_leaving_during_a_skipped_record_follow_it_in_the_dead_letter() {
    // The skipped record arrives in two parts; between them, b and c
    // expire. The dead letter holds each record whole: the skipped one
    // first (it began first), then b and c.
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let stats = dir.path().join("stats.json");
    let mut cmd = command(&[
        "-q",
        "-r",
        "1/s",
        "--max-wait",
        "50ms",
        "--max-record",
        "4",
        "--oversize",
        "skip",
        "--dead-letter",
    ]);
    cmd.arg(&dead)
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::piped());
    let mut child = spawn(cmd);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a\nb\nc\nXXXXXXXXXXXX").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    stdin.write_all(b"XXXX\nd\n").unwrap();
    drop(stdin);
    let status = wait_for(&mut child, Duration::from_secs(20));
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"a\n");
    assert_eq!(
        String::from_utf8(std::fs::read(&dead).unwrap()).unwrap(),
        "XXXXXXXXXXXXXXXX\nb\nc\nd\n"
    );
    let v = last_json(&stats);
    assert_eq!(
        (v["read"].as_u64(), v["skipped"].as_u64()),
        (Some(5), Some(1)),
        "{v}"
    );
    assert_books_add_up(&v);
}

#[test]
fn a_stop_in_the_middle_of_a_skipped_record_ends_it_in_the_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("dead");
    let stats = dir.path().join("stats.json");
    let mut cmd = command(&["-q", "-r", "inf", "--max-record", "4", "--oversize", "skip"]);
    cmd.arg("--dead-letter")
        .arg(&dead)
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::piped());
    let mut child = spawn(cmd);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"ok\nXXXXXXXXXX").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGTERM);
    let status = wait_for(&mut child, Duration::from_secs(10));
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(143), "{out:?}");
    assert_eq!(out.stdout, b"ok\n");
    assert_eq!(std::fs::read(&dead).unwrap(), b"XXXXXXXXXX\n");
    let v = last_json(&stats);
    assert_eq!(v["skipped"], 1, "{v}");
    assert_books_add_up(&v);
}
