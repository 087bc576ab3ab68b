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
