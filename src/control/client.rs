//! `drip ctl`: find this user's running drips by their sockets, send one
//! request, print the one-line answer.
//!
//! `drip ctl list` asks every drip for its entry and prints them as one
//! JSON array; `drip ctl TARGET COMMAND…` (TARGET a pid or a `--name`)
//! prints the drip's JSON answer. Errors are one line on stderr, exit 1.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::protocol;
use super::{socket_dir, SocketName};

/// How long to wait for a drip's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit status of a failed `drip ctl`.
pub const EXIT_CTL_FAILED: i32 = 1;

/// Run `drip ctl ARGS`: print the answer on `out`, or one line on `err`;
/// returns the exit status (0, or [`EXIT_CTL_FAILED`]).
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match args.split_first() {
        Some((first, rest)) if first == "list" => match rest {
            [] => Ok(serde_json::Value::Array(list(&socket_dir()))),
            _ => Err(format!("list: takes no value, got '{}'", rest.join(" "))),
        },
        Some((target, _)) if target.starts_with('-') => Err(format!(
            "'{target}' is not a target: give list, a pid or a --name (see 'drip ctl --help')"
        )),
        Some((target, words)) => send_to(&socket_dir(), target, words),
        None => Err(format!(
            "no target: drip ctl list, or drip ctl TARGET COMMAND ({})",
            protocol::COMMANDS
        )),
    };
    match result {
        Ok(value) => {
            let _ = writeln!(out, "{value}");
            0
        }
        Err(why) => {
            let _ = writeln!(err, "drip: ctl: {why}");
            EXIT_CTL_FAILED
        }
    }
}

/// The sockets in `dir`, in order of pid.
fn sockets(dir: &Path) -> Vec<(SocketName, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(SocketName, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = SocketName::parse(e.file_name().to_str()?)?;
            Some((name, e.path()))
        })
        .collect();
    found.sort_by_key(|(name, _)| name.pid);
    found
}

/// Every running drip's entry; sockets nobody listens on any more (a drip
/// killed with SIGKILL) are removed.
fn list(dir: &Path) -> Vec<serde_json::Value> {
    let info = vec!["info".to_string()];
    sockets(dir)
        .into_iter()
        .filter_map(|(_, path)| match ask(&path, &info) {
            Ok(value) => Some(value),
            Err(Asked::Gone) => {
                let _ = std::fs::remove_file(&path);
                None
            }
            Err(Asked::Failed(_)) => None,
        })
        .collect()
}

/// Send `words` to the drip `target` (a pid, or a `--name`).
fn send_to(dir: &Path, target: &str, words: &[String]) -> Result<serde_json::Value, String> {
    protocol::parse(words)?;
    let by_pid = target.parse::<u32>().ok();
    let matching: Vec<(SocketName, PathBuf)> = sockets(dir)
        .into_iter()
        .filter(|(name, _)| match by_pid {
            Some(pid) => name.pid == pid,
            None => name.name.as_deref() == Some(target),
        })
        .collect();
    let path = match matching.as_slice() {
        [] => return Err(format!("no such drip: {target} (see 'drip ctl list')")),
        [(_, path)] => path,
        several => {
            let pids: Vec<String> = several.iter().map(|(n, _)| n.pid.to_string()).collect();
            return Err(format!(
                "{} drips are named {target} (pids {}): name one by its pid",
                several.len(),
                pids.join(", ")
            ));
        }
    };
    ask(path, words).map_err(|e| match e {
        Asked::Gone => format!("no such drip: {target} (its socket is left over; removed)"),
        Asked::Failed(why) => format!("{target}: {why}"),
    })
}

/// Why a drip gave no answer.
enum Asked {
    /// Nobody listens on the socket.
    Gone,
    /// The drip refused, failed or said an error.
    Failed(String),
}

/// One request to the socket at `path`, and its answer.
fn ask(path: &Path, words: &[String]) -> Result<serde_json::Value, Asked> {
    let mut stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => Asked::Gone,
        _ => Asked::Failed(format!("{}: {e}", path.display())),
    })?;
    let failed = |e: std::io::Error| Asked::Failed(format!("{}: {e}", path.display()));
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(failed)?;
    let request = serde_json::to_string(words).expect("strings serialize");
    writeln!(stream, "{request}").map_err(failed)?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(failed)?;
    if line.is_empty() {
        return Err(Asked::Failed("the drip closed without an answer".into()));
    }
    protocol::read_reply(&line).map_err(Asked::Failed)
}
