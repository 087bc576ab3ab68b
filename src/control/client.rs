//! `drip ctl`: find this user's running drips by their sockets, send one
//! request, print the one-line answer.
//!
//! `drip ctl list` asks every drip for its entry and prints them as one
//! JSON array; `drip ctl TARGET COMMAND…` (TARGET a pid or a `--name`)
//! prints the drip's JSON answer. Errors are one line on stderr, exit 1
//! (`drip ctl` alone is a usage error, exit 2).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::protocol;
use super::{socket_dir, SocketName};

/// How long to wait for a drip's answer to a command.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long `list` waits for the answers of all the drips at once: a drip
/// answers `info` in well under a millisecond, so one that takes longer is
/// stopped or stuck, and the others are listed without it.
const LIST_TIMEOUT: Duration = Duration::from_millis(500);

/// How long after a socket is made a drip is surely listening on it (it
/// binds and listens in one step).
const BIND_TO_LISTEN: Duration = Duration::from_secs(1);

/// Exit status of a failed `drip ctl`.
pub const EXIT_CTL_FAILED: i32 = 1;

/// Run `drip ctl ARGS`: print the answer on `out`, or one line on `err`;
/// returns the exit status (0, or `EXIT_CTL_FAILED`; no words at all is
/// a usage error, [`crate::EXIT_USAGE`]).
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let Some((first, rest)) = args.split_first() else {
        let _ = writeln!(
            err,
            "drip: ctl: no target: drip ctl list, or drip ctl TARGET COMMAND ({}) (see 'drip ctl --help')",
            protocol::COMMANDS
        );
        return crate::EXIT_USAGE;
    };
    let dir = socket_dir();
    let result = match (first.as_str(), rest) {
        ("list", []) => trusted(&dir).map(|()| serde_json::Value::Array(list(&dir, err))),
        ("list", _) => Err(format!("list: takes no value, got '{}'", rest.join(" "))),
        (target, _) if target.starts_with('-') => Err(format!(
            "'{target}' is not a target: give list, a pid or a --name (see 'drip ctl --help')"
        )),
        (target, words) => trusted(&dir).and_then(|()| send_to(&dir, target, &absolute(words))),
    };
    let lines = matches!(rest.first().map(String::as_str), Some("key-list"));
    match result.and_then(|value| {
        if lines {
            print_lines(out, &value)
        } else {
            print(out, &value)
        }
    }) {
        Ok(()) => 0,
        Err(why) => {
            let _ = writeln!(err, "drip: ctl: {why}");
            EXIT_CTL_FAILED
        }
    }
}

/// Check that the sockets in `dir` may be trusted, as drip checks the
/// directory before it makes its own there ([`super::check_dir`]); no
/// directory at all is fine (no drip runs).
///
/// # Errors
/// It is not this user's alone: why, in words.
fn trusted(dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => super::check_dir(dir),
    }
}

/// Print the answer `value` as one line on `out` and flush it: an answer
/// that cannot be written is a failure (a reader that went away, as with
/// `| head`, is not).
///
/// # Errors
/// `stdout: why`.
fn print(out: &mut dyn Write, value: &serde_json::Value) -> Result<(), String> {
    match writeln!(out, "{value}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("stdout: {}", crate::sys::describe(&e)))
        }
        _ => Ok(()),
    }
}

/// `words` with the FILE of `key-rates FILE` made absolute: the drip
/// reads it from its own working directory.
fn absolute(words: &[String]) -> Vec<String> {
    match words {
        [first, file] if first == "key-rates" && !file.is_empty() => {
            let path = std::path::absolute(file).unwrap_or_else(|_| file.into());
            vec![first.clone(), path.to_string_lossy().into_owned()]
        }
        _ => words.to_vec(),
    }
}

/// Print the answer to `key-list`, `{"keys": [LINE, ...]}`, one line a
/// key (none: nothing printed), and flush it, as [`print`].
///
/// # Errors
/// `stdout: why`.
fn print_lines(out: &mut dyn Write, value: &serde_json::Value) -> Result<(), String> {
    let lines = value["keys"].as_array().cloned().unwrap_or_default();
    let text: String = lines
        .iter()
        .filter_map(|l| l.as_str())
        .map(|l| format!("{l}\n"))
        .collect();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("stdout: {}", crate::sys::describe(&e)))
        }
        _ => Ok(()),
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

/// Every running drip's entry, asked of all of them at once: each socket
/// is connected to and sent its request first, then the answers are read
/// against one deadline, [`LIST_TIMEOUT`] from the start, however many
/// drips there are. A socket nobody listens on (a drip killed with
/// SIGKILL: [`stale`]) is removed; a drip that does not answer in time
/// (stopped, say) is left out, and said so on `err`, one line each.
fn list(dir: &Path, err: &mut dyn Write) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + LIST_TIMEOUT;
    let info = vec!["info".to_string()];
    let mut asked = Vec::new();
    for (name, path) in sockets(dir) {
        match connect(&path).and_then(|stream| send(stream, &path, &info)) {
            Ok(stream) => asked.push((name, path, stream)),
            Err(Asked::Gone) => {
                if stale(&name, &path) {
                    let _ = std::fs::remove_file(&path);
                }
            }
            Err(Asked::Failed(why)) => left_out(err, &name, &why),
        }
    }
    let mut entries = Vec::new();
    for (name, path, stream) in asked {
        let left = deadline.saturating_duration_since(Instant::now());
        match receive(&stream, &path, left.max(Duration::from_millis(1))) {
            Ok(value) => entries.push(value),
            Err(Asked::Gone) => {}
            Err(Asked::Failed(why)) => left_out(err, &name, &why),
        }
    }
    entries
}

/// Say on `err` that the drip `name` is not in the list, and why.
fn left_out(err: &mut dyn Write, name: &SocketName, why: &str) {
    let who = name
        .name
        .as_ref()
        .map_or(name.pid.to_string(), |n| format!("{} ({n})", name.pid));
    let _ = writeln!(err, "drip: ctl: list: {who} left out: {why}");
}

/// Whether the socket `path`, which nobody listens on, is a dead drip's:
/// its pid runs no process, or it was made more than [`BIND_TO_LISTEN`]
/// ago (a drip binds its socket and listens on it at once, so a young
/// socket may be a drip's that is starting; an old one whose pid runs
/// again is another process's pid now).
fn stale(name: &SocketName, path: &Path) -> bool {
    let running = crate::sys::process_exists(name.pid);
    let old = std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|made| made.elapsed().ok())
        .is_some_and(|age| age > BIND_TO_LISTEN);
    !running || old
}

/// Send `words` to the drip `target` (a pid, or a `--name`). Only the
/// sockets someone listens on count: a dead drip's (killed with SIGKILL,
/// its name now another's) is passed over, and removed when [`stale`].
fn send_to(dir: &Path, target: &str, words: &[String]) -> Result<serde_json::Value, String> {
    protocol::encode(words)?;
    protocol::parse(words)?;
    let by_pid = target.parse::<u32>().ok();
    let mut live = Vec::new();
    let mut removed = false;
    let mut matched = false;
    for (name, path) in sockets(dir) {
        let ours = by_pid.map_or(name.name.as_deref() == Some(target), |pid| name.pid == pid);
        if !ours {
            continue;
        }
        matched = true;
        match connect(&path) {
            Err(Asked::Gone) => {
                removed |= stale(&name, &path) && std::fs::remove_file(&path).is_ok();
            }
            connected => live.push((name, path, connected)),
        }
    }
    if live.len() > 1 {
        let pids: Vec<String> = live.iter().map(|(n, _, _)| n.pid.to_string()).collect();
        return Err(format!(
            "{} drips are named {target} (pids {}): name one by its pid",
            live.len(),
            pids.join(", ")
        ));
    }
    let Some((_, path, connected)) = live.pop() else {
        return Err(match (matched, removed) {
            (false, _) => format!("no such drip: {target} (see 'drip ctl list')"),
            (true, true) => format!("no such drip: {target} (its socket is left over; removed)"),
            (true, false) => format!("no such drip: {target} (nobody listens on its socket)"),
        });
    };
    connected
        .and_then(|stream| send(stream, &path, words))
        .and_then(|stream| receive(&stream, &path, ANSWER_TIMEOUT))
        .map_err(|e| match e {
            Asked::Gone => format!("no such drip: {target} (nobody listens on its socket)"),
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

/// Connect to the socket at `path` without waiting: nobody listening
/// (`ECONNREFUSED`) or no socket (`ENOENT`) is [`Asked::Gone`]; a drip
/// whose queue of connections is full (`EAGAIN`: it accepts none, being
/// stopped, say) failed.
fn connect(path: &Path) -> Result<UnixStream, Asked> {
    use rustix::io::Errno;
    use rustix::net::SocketAddrUnix;
    let failed = |e: Errno| Asked::Failed(format!("{}: {}", path.display(), io_error(e)));
    let addr = SocketAddrUnix::new(path).map_err(failed)?;
    let fd = crate::platform::descriptors::unix_stream().map_err(failed)?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) => {}
        Err(Errno::CONNREFUSED | Errno::NOENT) => return Err(Asked::Gone),
        Err(Errno::AGAIN) => {
            return Err(Asked::Failed(format!(
                "{}: takes no connection now (stopped?)",
                path.display()
            )))
        }
        Err(e) => return Err(failed(e)),
    }
    let stream = UnixStream::from(fd);
    stream
        .set_nonblocking(false)
        .map_err(|e| Asked::Failed(format!("{}: {e}", path.display())))?;
    Ok(stream)
}

/// An `Errno` as std's error, for its words.
fn io_error(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// Send `words` as one request line on `stream`.
fn send(mut stream: UnixStream, path: &Path, words: &[String]) -> Result<UnixStream, Asked> {
    let failed = |e: std::io::Error| Asked::Failed(format!("{}: {e}", path.display()));
    stream
        .set_write_timeout(Some(ANSWER_TIMEOUT))
        .map_err(failed)?;
    let request = protocol::encode(words).map_err(Asked::Failed)?;
    stream.write_all(request.as_bytes()).map_err(failed)?;
    Ok(stream)
}

/// The answer on `stream` within `timeout`.
fn receive(
    stream: &UnixStream,
    path: &Path,
    timeout: Duration,
) -> Result<serde_json::Value, Asked> {
    let failed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Asked::Failed("no answer in time (stopped?)".to_string())
        }
        _ => Asked::Failed(format!("{}: {e}", path.display())),
    };
    stream.set_read_timeout(Some(timeout)).map_err(failed)?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(failed)?;
    if line.is_empty() {
        return Err(Asked::Failed("the drip closed without an answer".into()));
    }
    protocol::read_reply(&line).map_err(Asked::Failed)
}
