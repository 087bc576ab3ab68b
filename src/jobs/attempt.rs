//! One attempt of one job: build the command line for a record, start it in
//! its own process group with the record's environment, wait for it (with a
//! timeout: TERM to the group, then KILL), and keep its output whole.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::retry::Exit;
use super::warden::Warden;
use crate::platform::child::ChildEnd;
use crate::sys;

/// How long a job has between TERM and KILL after its timeout.
pub const KILL_GRACE: Duration = Duration::from_secs(1);

/// The command line for `record` (delimiter excluded): every `{}` in an
/// argument is replaced by the record, every `{headers}` by the path of
/// the headers file (`headers`), every `{usage}` by the path of the usage
/// file ([`usage_file`]); without any `{}`, the record is appended as the
/// last argument (unless it goes on stdin).
pub fn command_line(
    template: &[String],
    record: &[u8],
    headers: &Path,
    on_stdin: bool,
) -> Vec<OsString> {
    let substituted = template.iter().any(|a| a.contains("{}"));
    let usage = usage_file(headers);
    let (headers, usage) = (headers.to_string_lossy(), usage.to_string_lossy());
    let mut argv: Vec<OsString> = template
        .iter()
        .map(|arg| {
            let arg = arg
                .replace("{headers}", &headers)
                .replace("{usage}", &usage);
            let mut out = Vec::with_capacity(arg.len());
            let mut parts = arg.as_bytes();
            while let Some(at) = find(parts, b"{}") {
                out.extend_from_slice(&parts[..at]);
                out.extend_from_slice(record);
                parts = &parts[at + 2..];
            }
            out.extend_from_slice(parts);
            OsString::from_vec(out)
        })
        .collect();
    if !substituted && !on_stdin {
        argv.push(OsString::from_vec(record.to_vec()));
    }
    argv
}

/// The directory of the jobs' headers files (mode 0700: only the user may
/// read them), one file a record, read and removed after each attempt
/// ([`HeadersDir::take`]); the directory is removed at the run's end
/// ([`HeadersDir::remove`]).
#[derive(Debug)]
pub struct HeadersDir {
    dir: std::sync::Mutex<Option<tempfile::TempDir>>,
    path: std::path::PathBuf,
    /// Part of a headers file was passed over, and said on stderr.
    passed_over_said: std::sync::atomic::AtomicBool,
}

impl HeadersDir {
    /// A new directory, in the temporary directory.
    ///
    /// # Errors
    /// It cannot be made.
    pub fn new() -> anyhow::Result<HeadersDir> {
        use anyhow::Context;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("drip-headers-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .context("creating a directory for DRIP_HEADERS")?;
        Ok(HeadersDir {
            path: dir.path().to_path_buf(),
            dir: std::sync::Mutex::new(Some(dir)),
            passed_over_said: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The headers file of record `number`.
    pub fn file(&self, number: u64) -> std::path::PathBuf {
        self.path.join(number.to_string())
    }

    /// The text of record `number`'s headers file `path` ([`take_headers`]);
    /// a part of it passed over is said once on stderr (not when `quiet`).
    pub fn take(&self, path: &Path, number: u64, quiet: bool) -> Option<String> {
        let (text, passed_over) = take_headers(path);
        if let Some(passed) = passed_over {
            let said = self
                .passed_over_said
                .swap(true, std::sync::atomic::Ordering::Relaxed);
            if !said && !quiet {
                eprintln!("{}", passed.notice(number));
            }
        }
        text
    }

    /// Remove the directory and what is in it (once no job runs, or none
    /// will be waited for); again, nothing.
    pub fn remove(&self) {
        use crate::sys::Unpoisoned;
        let dir = self.dir.lock().unpoisoned().take();
        if let Some(dir) = dir {
            let _ = dir.close();
        }
    }
}

/// The usage file beside the headers file `headers`: where a job may
/// write what it spent (`{usage}`, read by `--settle`).
pub fn usage_file(headers: &Path) -> std::path::PathBuf {
    let mut name = headers.as_os_str().to_owned();
    name.push(".usage");
    name.into()
}

/// The text of the usage file beside `headers`, when the job wrote one of
/// at most `most` bytes; removed after reading.
pub fn take_usage(headers: &Path, most: u64) -> Option<Vec<u8>> {
    let path = usage_file(headers);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    let text = (meta.is_file() && meta.len() <= most)
        .then(|| std::fs::read(&path).ok())
        .flatten();
    let _ = std::fs::remove_file(&path);
    text
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A stable id for a record, for an idempotency key: its place in the
/// input (`number`, 1-based) and its content digest ([`content_hash`], 32
/// hex digits). The same record in the same place of the input gets the
/// same id in every run, a resumed one too; two records with different
/// bytes never share the digest in practice (it is collision-resistant,
/// so not even when someone crafts them to).
pub fn record_id(number: u64, record: &[u8]) -> String {
    format!("{number}-{:032x}", content_hash(record))
}

/// A record's content digest: the first 128 bits of the SHA-256 of its
/// bytes (delimiter excluded), the second part of its id, which `--resume`
/// matches (`printf %s RECORD | sha256sum | cut -c1-32` spells it).
pub fn content_hash(record: &[u8]) -> u128 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(record);
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

/// The 64-bit FNV-1a hash of a record's bytes: the hash part of the ids
/// of earlier versions of drip, which the joblogs they wrote hold
/// (`--resume` reads them: [`super::resume`]).
pub fn fnv1a_64(record: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in record {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// A worker's files, reused from one job to the next: the job's stdout and
/// stderr (kept whole, passed on when it ends) and, with the record on
/// stdin, that.
pub struct Files {
    stdout: File,
    stderr: File,
    stdin: Option<File>,
}

impl Files {
    /// Anonymous temporary files for one worker; `record_on_stdin`: the
    /// record goes on the job's stdin.
    ///
    /// # Errors
    /// When no temporary file can be created.
    pub fn new(record_on_stdin: bool) -> io::Result<Files> {
        Ok(Files {
            stdout: tempfile::tempfile()?,
            stderr: tempfile::tempfile()?,
            stdin: record_on_stdin.then(tempfile::tempfile).transpose()?,
        })
    }

    /// The attempt's stdout as it stands, and its whole length (bytes):
    /// all of it when at most `most` bytes, else its tail, the lines that
    /// start within its last `most` bytes (a usage report is its last
    /// line). It is not moved: passing it on still passes it all.
    pub fn stdout_text(&self, most: u64) -> Option<(Vec<u8>, u64)> {
        use std::os::unix::fs::FileExt;
        let len = self.stdout.metadata().ok()?.len();
        // The byte before the tail too: whether its first line is whole.
        let from = len.saturating_sub(most.saturating_add(1));
        let mut text = vec![0u8; usize::try_from(len - from).ok()?];
        self.stdout.read_exact_at(&mut text, from).ok()?;
        if from > 0 || len > most {
            // The line under way at the tail's start began before it: cut
            // it off, up to the newline that ends it (the byte before the
            // tail, when it starts a line).
            let start = memchr::memchr(b'\n', &text).map_or(text.len(), |i| i + 1);
            text.drain(..start);
        }
        Some((text, len))
    }

    /// Give back the space the last job's output took (and its record on
    /// stdin): the files are kept, empty, for the next job.
    ///
    /// # Errors
    /// When a temporary file cannot be truncated.
    pub fn empty(&mut self) -> io::Result<()> {
        let stdin = self.stdin.iter_mut();
        for f in [&mut self.stdout, &mut self.stderr]
            .into_iter()
            .chain(stdin)
        {
            f.set_len(0)?;
        }
        Ok(())
    }

    /// Put `record` on the next job's stdin (with the record on stdin).
    ///
    /// # Errors
    /// When the temporary file cannot be written.
    pub fn set_record(&mut self, record: &[u8]) -> io::Result<()> {
        if let Some(f) = &mut self.stdin {
            f.set_len(0)?;
            f.seek(SeekFrom::Start(0))?;
            f.write_all(record)?;
        }
        Ok(())
    }

    fn stdio(&mut self) -> io::Result<(Stdio, Stdio, Stdio)> {
        for f in [&mut self.stdout, &mut self.stderr] {
            f.set_len(0)?;
            f.seek(SeekFrom::Start(0))?;
        }
        let stdin = match &mut self.stdin {
            Some(f) => {
                f.seek(SeekFrom::Start(0))?;
                Stdio::from(f.try_clone()?)
            }
            None => Stdio::null(),
        };
        Ok((
            stdin,
            Stdio::from(self.stdout.try_clone()?),
            Stdio::from(self.stderr.try_clone()?),
        ))
    }

    /// Pass the attempt's stdout to `out` and its stderr to drip's stderr,
    /// each whole (the caller holds the output lock). Output that does not
    /// end with its terminator gets one, so the next job's output starts
    /// on a record (a line) of its own: stdout's is `delimiter`, the record
    /// delimiter; stderr's a newline. A write interrupted while `give_up()`
    /// says so ends the copy there ([`pass`]). Returns what could not be
    /// written.
    pub fn pass_on(
        &mut self,
        out: &mut dyn Write,
        delimiter: u8,
        give_up: &dyn Fn() -> bool,
    ) -> Unwritten {
        let cut = copy_all(&mut self.stdout, out, delimiter, give_up);
        cut.and(copy_all(
            &mut self.stderr,
            &mut io::stderr().lock(),
            b'\n',
            give_up,
        ))
    }

    /// Bytes the attempt wrote to its stdout and stderr, not passed on yet.
    pub fn pending(&self) -> u64 {
        let len = |f: &File| f.metadata().map_or(0, |m| m.len());
        len(&self.stdout) + len(&self.stderr)
    }
}

/// Output that could not be passed on: a stalled stdout at a second
/// signal, a closed one, a failed write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unwritten {
    /// Outputs (one attempt's stdout or stderr, or a record's held output
    /// with `--keep-order`) not written whole.
    pub outputs: u64,
    /// Bytes of them not written.
    pub bytes: u64,
}

impl Unwritten {
    /// `bytes` of one output were not written (nothing when 0).
    pub fn of(bytes: u64) -> Unwritten {
        Unwritten {
            outputs: u64::from(bytes > 0),
            bytes,
        }
    }

    /// Both together.
    #[must_use]
    pub fn and(self, other: Unwritten) -> Unwritten {
        Unwritten {
            outputs: self.outputs + other.outputs,
            bytes: self.bytes + other.bytes,
        }
    }
}

/// Copy all of `from` to `to`, then `end` unless the copy ended with it;
/// what was not written.
fn copy_all(from: &mut File, to: &mut dyn Write, end: u8, give_up: &dyn Fn() -> bool) -> Unwritten {
    let len = from.metadata().map_or(0, |m| m.len());
    if len == 0 {
        return Unwritten::default();
    }
    let mut last = [0u8];
    let ended = from.read_exact_at(&mut last, len - 1).is_ok() && last[0] == end;
    let tail = u64::from(!ended);
    if from.seek(SeekFrom::Start(0)).is_err() {
        return Unwritten::of(len + tail);
    }
    let mut cut = pass(&mut io::Read::take(from, len), to, len, give_up);
    if cut == 0 && !ended {
        cut = pass(&mut &[end][..], to, 1, give_up);
    } else {
        cut += tail;
    }
    let _ = to.flush();
    Unwritten::of(cut)
}

/// The largest piece [`pass`] reads and writes at a time, bytes.
pub(crate) const PIECE: usize = 64 * 1024;

/// Copy `from` (`len` bytes) to `to`, one piece at a time; a write
/// interrupted by a signal (EINTR: drip interrupts the threads passing
/// output on at a second signal) is tried again unless `give_up()` says
/// otherwise. Returns the bytes not written: 0 when all were, the rest
/// after a failed write or when given up.
pub fn pass(
    from: &mut dyn io::Read,
    to: &mut dyn Write,
    len: u64,
    give_up: &dyn Fn() -> bool,
) -> u64 {
    let mut buf = vec![0u8; PIECE.min(usize::try_from(len).unwrap_or(PIECE)).max(1)];
    let mut written = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut piece = &buf[..n];
        while !piece.is_empty() {
            match to.write(piece) {
                Ok(0) => return len.saturating_sub(written),
                Ok(k) => {
                    piece = &piece[k..];
                    written += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted && !give_up() => {}
                Err(_) => return len.saturating_sub(written),
            }
        }
    }
    len.saturating_sub(written)
}

/// What one attempt needs to know.
pub struct Spec<'a> {
    /// The program and its arguments.
    pub argv: &'a [OsString],
    /// `DRIP_RECORD`, `DRIP_RECORD_ID`, `DRIP_ATTEMPT`, `DRIP_HEADERS`,
    /// `DRIP_USAGE`.
    pub env: [(&'static str, OsString); 5],
    /// Kill the attempt after this long.
    pub limit: Option<Duration>,
    /// The warden the job's process notes itself to before its program
    /// runs (under `--share-jobs`); without one, the caller notes it.
    pub noted_by: Option<&'a Warden>,
}

/// How an attempt went.
pub struct Ended {
    /// Its exit.
    pub exit: Exit,
    /// When it started (wall time).
    pub started: SystemTime,
    /// How long it ran.
    pub duration: Duration,
}

/// Run one attempt. `running` is told the process group as soon as the job
/// has started (for a second signal to kill it).
///
/// # Errors
/// The command could not be started (not found, not executable, or no
/// temporary file).
pub fn run(spec: &Spec, files: &mut Files, running: &dyn Fn(u32)) -> io::Result<Ended> {
    let (stdin, stdout, stderr) = files.stdio()?;
    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    if let Some(warden) = spec.noted_by {
        warden.note_in_child(&mut cmd);
    }
    let started = SystemTime::now();
    let clock = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            // Its process may have noted itself before its program failed
            // to run (and is reaped by now).
            if let Some(warden) = spec.noted_by {
                warden.forget_gone();
            }
            return Err(e);
        }
    };
    running(child.id());
    let exit = wait(&mut child, spec.limit)?;
    Ok(Ended {
        exit,
        started,
        duration: clock.elapsed(),
    })
}

/// Wait for `child`; past `limit`, TERM its group, KILL it after
/// [`KILL_GRACE`], and leave nothing of the group running.
fn wait(child: &mut Child, limit: Option<Duration>) -> io::Result<Exit> {
    let Some(limit) = limit else {
        return child.wait().map(exit_of);
    };
    let pid = child.id();
    // No way to watch it (no descriptor to spare, a system without one):
    // the job runs already (it must not fail as one that did not start),
    // and is looked at now and then.
    let end = ChildEnd::watch(pid).ok();
    if ends_within(child, end.as_ref(), limit)? {
        return child.wait().map(exit_of);
    }
    sys::kill_group(pid, libc::SIGTERM);
    if !ends_within(child, end.as_ref(), KILL_GRACE)? {
        sys::kill_group(pid, libc::SIGKILL);
    }
    let status = child.wait()?;
    // Its children may outlive it: the group goes too.
    sys::kill_group(pid, libc::SIGKILL);
    Ok(Exit::TimedOut {
        code: status.code(),
        signal: status.signal(),
    })
}

/// How often a job is looked at when it is not watched.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// Whether `child` ends within `time`: its watch sees it end, or, without
/// one, [`Child::try_wait`] every [`EXIT_POLL`] sees it ended.
fn ends_within(child: &mut Child, end: Option<&ChildEnd>, time: Duration) -> io::Result<bool> {
    if let Some(end) = end {
        return Ok(end.ended_within(time));
    }
    let until = Instant::now() + time;
    loop {
        if child.try_wait()?.is_some() {
            return Ok(true);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        std::thread::sleep(left.min(EXIT_POLL));
    }
}

fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}

/// The most of a headers file drip reads, bytes: above the 300 KB of
/// headers curl accepts in a response, so what `curl -D` writes is read
/// whole; a longer file is read this far.
pub const HEADERS_READ_MAX: u64 = 1024 * 1024;

/// What drip passed over of a job's headers file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassedOver {
    /// It was no regular file (or a link to none), but this (a FIFO, a
    /// character device...): not read at all.
    NotRegular(&'static str),
    /// A regular file of this many bytes, more than
    /// [`HEADERS_READ_MAX`]: only its first [`HEADERS_READ_MAX`] were
    /// read.
    Longer(u64),
}

impl PassedOver {
    /// The notice drip gives (once) for record `number`'s headers file,
    /// one line.
    pub fn notice(self, number: u64) -> String {
        match self {
            PassedOver::NotRegular(kind) => format!(
                "drip: headers file of record {number}: {kind}, not a regular file: not read; \
                 such files are passed over and the job's exit status decides"
            ),
            PassedOver::Longer(len) => format!(
                "drip: headers file of record {number}: {len} bytes: only the first \
                 {HEADERS_READ_MAX} are read; the rest of such files is passed over"
            ),
        }
    }
}

/// The text of a job's headers file at `path`, if the job wrote one, and
/// what of it was passed over; the file (or the link the job put there)
/// is removed. Only a regular file is read, a link to one too, and at
/// most its first [`HEADERS_READ_MAX`] bytes: anything else a job may put
/// there (a FIFO that would block the read for ever, `/dev/zero` that
/// would never end) is not opened at all, and what is opened is opened
/// without waiting (O_NONBLOCK) and checked again once open, so a file
/// swapped meanwhile is not read either. `None` for the text when there is
/// no file (or it cannot be read).
pub fn take_headers(path: &Path) -> (Option<String>, Option<PassedOver>) {
    let taken = read_headers(path);
    let _ = std::fs::remove_file(path);
    taken
}

fn read_headers(path: &Path) -> (Option<String>, Option<PassedOver>) {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |meta: &std::fs::Metadata| {
        (!meta.is_file()).then(|| PassedOver::NotRegular(file_kind(meta.file_type())))
    };
    // stat first: a FIFO or a device is never opened.
    let Ok(meta) = std::fs::metadata(path) else {
        return (None, None);
    };
    if let Some(passed) = not_regular(&meta) {
        return (None, Some(passed));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let Ok((file, meta)) = file.and_then(|f| f.metadata().map(|m| (f, m))) else {
        return (None, None);
    };
    if let Some(passed) = not_regular(&meta) {
        return (None, Some(passed));
    }
    let mut bytes = Vec::new();
    if file.take(HEADERS_READ_MAX).read_to_end(&mut bytes).is_err() {
        return (None, None);
    }
    let passed = (meta.len() > HEADERS_READ_MAX).then_some(PassedOver::Longer(meta.len()));
    (Some(String::from_utf8_lossy(&bytes).into_owned()), passed)
}

/// What a file of type `kind` is, in words.
fn file_kind(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "of another kind"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settling reads the lines that start within the last `most` bytes
    /// of an output: a line that starts right at the tail's start is
    /// kept, one that began before it is cut off.
    #[test]
    fn the_tail_of_a_long_output_is_its_whole_last_lines() {
        use std::io::Write;
        let tail = |text: &[u8], most: u64| {
            let mut files = Files::new(false).unwrap();
            files.stdout.write_all(text).unwrap();
            let (got, len) = files.stdout_text(most).unwrap();
            assert_eq!(len, text.len() as u64);
            String::from_utf8(got).unwrap()
        };
        assert_eq!(tail(b"ab\ncd\n", 10), "ab\ncd\n", "short: all of it");
        assert_eq!(tail(b"ab\ncd\n", 3), "cd\n", "starts at a line");
        assert_eq!(tail(b"ab\ncd\n", 2), "", "cd began before the tail");
        assert_eq!(tail(b"abc\n{\"n\":1}\n", 8), "{\"n\":1}\n");
        assert_eq!(tail(b"xabc\n", 5), "xabc\n", "exactly the most");
    }

    fn strings(argv: &[OsString]) -> Vec<String> {
        argv.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn braces_are_replaced_wherever_they_appear() {
        let t: Vec<String> = ["curl", "-o", "{}.html", "https://x/{}?q={}"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            strings(&command_line(&t, b"a b", Path::new("h"), false)),
            ["curl", "-o", "a b.html", "https://x/a b?q=a b"]
        );
    }

    #[test]
    fn without_braces_the_record_is_the_last_argument() {
        let t: Vec<String> = ["echo", "-n"].map(String::from).to_vec();
        assert_eq!(
            strings(&command_line(&t, b"r", Path::new("h"), false)),
            ["echo", "-n", "r"]
        );
        assert_eq!(
            strings(&command_line(&t, b"r", Path::new("h"), true)),
            ["echo", "-n"]
        );
        let t: Vec<String> = ["curl", "-D", "{headers}"].map(String::from).to_vec();
        assert_eq!(
            strings(&command_line(&t, b"r", Path::new("/t/h"), false)),
            ["curl", "-D", "/t/h", "r"]
        );
        let t: Vec<String> = ["job", "--usage={usage}", "{}"].map(String::from).to_vec();
        assert_eq!(
            strings(&command_line(&t, b"r", Path::new("/t/h"), false)),
            ["job", "--usage=/t/h.usage", "r"]
        );
    }

    #[test]
    fn a_usage_file_is_read_once_and_only_when_regular_and_small() {
        let dir = tempfile::tempdir().unwrap();
        let headers = dir.path().join("7");
        assert_eq!(take_usage(&headers, 100), None);
        std::fs::write(usage_file(&headers), b"{\"n\":3}").unwrap();
        assert_eq!(
            take_usage(&headers, 100).as_deref(),
            Some(&b"{\"n\":3}"[..])
        );
        assert_eq!(take_usage(&headers, 100), None, "removed once read");
        std::fs::write(usage_file(&headers), [b' '; 200]).unwrap();
        assert_eq!(take_usage(&headers, 100), None, "too large");
    }

    #[test]
    fn record_ids_are_stable_and_distinct() {
        assert_eq!(record_id(3, b"x"), record_id(3, b"x"));
        assert_ne!(record_id(3, b"x"), record_id(4, b"x"));
        assert_ne!(record_id(3, b"x"), record_id(3, b"y"));
        assert!(record_id(3, b"x").starts_with("3-"));
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223…
        assert_eq!(record_id(1, b"abc"), "1-ba7816bf8f01cfea414140de5dae2223");
        // Two records the 64-bit FNV-1a of earlier ids did not tell apart.
        let (a, b) = (b"78eafc5a458f3669", b"05d19705f609f65d");
        assert_eq!(fnv1a_64(a), fnv1a_64(b));
        assert_ne!(record_id(1, a)[2..], record_id(1, b)[2..]);
    }

    #[test]
    fn output_passed_on_ends_with_its_terminator() {
        let mut files = Files::new(false).unwrap();
        let mut out = Vec::new();
        files.stdout.write_all(b"a\nnonl").unwrap();
        files.pass_on(&mut out, b'\n', &|| false);
        assert_eq!(out, b"a\nnonl\n");
        // Ended already: nothing is added; nothing at all: nothing.
        files.stdio().unwrap();
        files.stdout.write_all(b"b\0").unwrap();
        files.pass_on(&mut out, 0, &|| false);
        files.stdio().unwrap();
        files.pass_on(&mut out, b'\n', &|| false);
        assert_eq!(out, b"a\nnonl\nb\0");
    }

    /// A sink that takes `room` bytes, then is interrupted (EINTR) on
    /// every write, as a stalled pipe is at a second signal.
    struct Stalled {
        taken: Vec<u8>,
        room: usize,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room - self.taken.len());
            if n == 0 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            self.taken.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_interrupted_pass_gives_up_only_when_told_and_counts_the_rest() {
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut to = Stalled {
            taken: Vec::new(),
            room: 70_000,
        };
        let tries = std::cell::Cell::new(0);
        let give_up = || {
            tries.set(tries.get() + 1);
            tries.get() > 3
        };
        let left = pass(&mut &data[..], &mut to, data.len() as u64, &give_up);
        assert_eq!(left, 130_000);
        assert_eq!(to.taken, data[..70_000]);
        assert_eq!(tries.get(), 4, "tried again until told to give up");
        // A closed output: the rest of this output and its terminator.
        let mut files = Files::new(false).unwrap();
        files.stdout.write_all(b"abc").unwrap();
        let cut = files.pass_on(&mut Closed, b'\n', &|| false);
        assert_eq!(
            cut,
            Unwritten {
                outputs: 1,
                bytes: 4
            }
        );
    }

    #[test]
    fn only_a_regular_headers_file_is_read_and_only_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1");
        let take = || take_headers(&path);
        // None written: nothing.
        assert_eq!(take(), (None, None));
        std::fs::write(&path, "HTTP/1.1 200 OK\r\n").unwrap();
        assert_eq!(take(), (Some("HTTP/1.1 200 OK\r\n".into()), None));
        assert!(!path.exists(), "removed once read");
        // A link to a regular file: read, and the link alone removed.
        let elsewhere = dir.path().join("h");
        std::fs::write(&elsewhere, "HTTP/1.1 404 X\r\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(take(), (Some("HTTP/1.1 404 X\r\n".into()), None));
        assert!(!path.exists() && elsewhere.exists());
        // A FIFO no one writes, or a link to one, would block a read for
        // ever; /dev/zero would never end: none is read, nor waited on.
        let fifo = dir.path().join("fifo");
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for target in [fifo.as_path(), Path::new("/dev/zero")] {
            std::os::unix::fs::symlink(target, &path).unwrap();
            let kind = if target == fifo {
                "a FIFO"
            } else {
                "a character device"
            };
            assert_eq!(take(), (None, Some(PassedOver::NotRegular(kind))));
            assert!(!path.exists());
        }
        std::fs::rename(&fifo, &path).unwrap();
        assert_eq!(take(), (None, Some(PassedOver::NotRegular("a FIFO"))));
        assert!(!path.exists());
        // A longer file (sparse: a terabyte): its first MiB only.
        let file = File::create(&path).unwrap();
        file.write_all_at(b"HTTP/1.1 429 X\r\n", 0).unwrap();
        file.set_len(1 << 40).unwrap();
        let (text, passed) = take();
        let text = text.unwrap();
        assert_eq!(text.len() as u64, HEADERS_READ_MAX);
        assert!(text.starts_with("HTTP/1.1 429 X\r\n"));
        assert_eq!(passed, Some(PassedOver::Longer(1 << 40)));
        assert_eq!(
            PassedOver::Longer(1 << 40).notice(3),
            "drip: headers file of record 3: 1099511627776 bytes: only the first 1048576 \
             are read; the rest of such files is passed over"
        );
    }

    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod without_a_pidfd {
    use super::*;

    #[test]
    fn a_job_is_waited_for_by_looking_at_it() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        assert!(!ends_within(&mut child, None, Duration::from_millis(20)).unwrap());
        assert!(ends_within(&mut child, None, Duration::from_secs(10)).unwrap());
        assert_eq!(exit_of(child.wait().unwrap()), Exit::Code(0));
    }
}
