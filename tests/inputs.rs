//! Inputs that are not plain files or pipes on stdin: FIFOs named as FILE,
//! and inputs that are drip's own output files.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{command, send_signal, spawn, wait_for};

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

#[test]
fn an_input_that_is_the_stats_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let out = command(&[
        "-q",
        "-r",
        "inf",
        "--stats-interval",
        "10ms",
        "--stats-json",
    ])
    .arg(&stats)
    .arg(&stats)
    .stdin(Stdio::null())
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "drip: {}: input file is the --stats-json file\n",
            stats.display()
        )
    );
    assert!(out.stdout.is_empty());
    let summary = std::fs::read_to_string(&stats).unwrap();
    assert!(
        summary.lines().last().unwrap().contains("\"read\":0"),
        "{summary}"
    );
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
