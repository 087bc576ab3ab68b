//! Reading inputs and splitting them into records.
//!
//! Inputs are read in large chunks straight from the file descriptor (no
//! line buffering, no UTF-8 decoding); a chunk's complete records are
//! counted, not indexed ([`crate::scan`]), and handed on as one
//! [`Segment`]. Bytes are never altered,
//! except that a file's unterminated last record gets the delimiter when
//! another input follows, so records never merge across files.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::bucket::{Piece, Segment};
use crate::scan;
use crate::sys::{describe, Waker};

/// Where records come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Standard input.
    Stdin,
    /// A file, by path.
    Path(PathBuf),
}

impl Input {
    /// The name used in messages (`-` is stdin).
    pub fn name(&self) -> String {
        match self {
            Input::Stdin => "stdin".into(),
            Input::Path(p) => p.display().to_string(),
        }
    }
}

/// What to add to the error of an `input` that is not there when its name
/// reads as a rate (`drip 10/s`, `--rate` left out): ` (did you mean
/// --rate 10/s?)`; else nothing.
fn rate_hint(input: &Input, err: &io::Error) -> String {
    match (input, err.kind()) {
        (Input::Path(path), io::ErrorKind::NotFound) => path
            .to_str()
            .filter(|text| crate::rate::parse_rate_burst(text).is_ok())
            .map_or(String::new(), |text| {
                format!(" (did you mean --rate {text}?)")
            }),
        _ => String::new(),
    }
}

/// Bytes asked for per read(2).
const READ_SIZE: usize = 128 * 1024;

/// A read at least this large (a producer's full output buffer) means the
/// input is streaming: worth lingering for more (see [`read_all`]).
const STREAMING: usize = 4096;

/// What the consumer of segments wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// Stop reading (a signal, an overflow under `fail`, a closed output).
    Stop,
}

/// Why reading ended early with an error that stops drip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// Record `number` (1-based, over all inputs) is longer than `limit` bytes.
    TooLong {
        /// 1-based record number.
        number: u64,
        /// The `--max-record` limit in bytes.
        limit: usize,
        /// The input's name.
        input: String,
    },
    /// Record `number` alone is larger than `--capacity-bytes`.
    LargerThanBucket {
        /// 1-based record number.
        number: u64,
        /// The record's size in bytes, delimiter included.
        size: usize,
        /// The `--capacity-bytes` limit.
        limit: usize,
        /// The input's name.
        input: String,
    },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::TooLong {
                number,
                limit,
                input,
            } => write!(
                f,
                "{input}: record {number} is longer than --max-record ({limit} bytes)"
            ),
            RecordError::LargerThanBucket {
                number,
                size,
                limit,
                input,
            } => write!(
                f,
                "{input}: record {number} is {size} bytes, more than --capacity-bytes ({limit} bytes)"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// How reading went.
#[derive(Debug, Default)]
pub struct ReadReport {
    /// How many inputs could not be opened or failed while being read
    /// (each already reported through `warn`).
    pub failed_inputs: usize,
    /// A record that stopped reading.
    pub record_error: Option<RecordError>,
}

/// What to do with a record over `--max-record` or `--capacity-bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversize {
    /// Stop reading; drip exits with status 1.
    Fail,
    /// Pass the record, as it is read, to the splitter's oversize sink
    /// (drip's dead letter) and read on.
    Skip,
}

impl std::str::FromStr for Oversize {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "fail" => Ok(Oversize::Fail),
            "skip" => Ok(Oversize::Skip),
            _ => Err(format!("unknown policy '{text}' (expected fail or skip)")),
        }
    }
}

/// The oversize policies (`--oversize`), for completion and help: (value, meaning).
pub const OVERSIZE_POLICIES: &[(&str, &str)] = &[
    ("fail", "stop reading at the record, exit 1"),
    (
        "skip",
        "stream it to --dead-letter, count it as skipped, read on",
    ),
];

/// Where a splitter that skips oversized records sends them: called with
/// each piece of such a record as it is read, in order, saying whether the
/// record goes on or ends there. Only bytes read are passed; no record is
/// held whole.
pub type OversizeSink = Box<dyn FnMut(&[u8], Piece) + Send>;

/// Splits a byte stream into records.
///
/// Reads land in one reusable buffer; complete records are copied out into
/// a segment of exactly their size, so a queued record never pins a read
/// buffer (memory stays proportional to the bytes held, whatever the read
/// pattern), and the buffer is reused for the next read.
#[derive(Default)]
pub struct Splitter {
    delimiter: u8,
    max_record: usize,
    capacity_bytes: usize,
    /// Always initialized to its full length; data is `buf[..end]`.
    buf: Vec<u8>,
    end: usize,
    /// Offset in `buf` up to which delimiters have been searched for.
    scanned: usize,
    /// Records emitted (or skipped) so far.
    records: u64,
    /// Where oversized records go, when they are skipped rather than an
    /// error ([`Splitter::skipping`]).
    skip: Option<OversizeSink>,
    /// An oversized record is under way: its bytes so far went to `skip`,
    /// and the rest, up to its delimiter, follows them.
    skipping: bool,
}

impl Splitter {
    /// A splitter for records ending in `delimiter`, at most `max_record`
    /// bytes long without it, each no larger than `capacity_bytes` with it.
    pub fn new(delimiter: u8, max_record: usize, capacity_bytes: Option<usize>) -> Splitter {
        Splitter {
            delimiter,
            max_record,
            capacity_bytes: capacity_bytes.unwrap_or(usize::MAX),
            ..Splitter::default()
        }
    }

    /// Skip records over the limits instead of stopping at them
    /// (`--oversize skip`): each goes to `sink`, piece by piece as it is
    /// read, and the records around it are split as usual.
    pub fn skipping(mut self, sink: OversizeSink) -> Splitter {
        self.skip = Some(sink);
        self
    }

    /// Pass `buf[from..to]` to the oversize sink.
    fn skip_piece(&mut self, from: usize, to: usize, piece: Piece) {
        if let Some(sink) = self.skip.as_mut() {
            sink(&self.buf[from..to], piece);
        }
        if piece != Piece::Part {
            self.records += 1;
        }
    }

    /// [`Splitter::filled`] when oversized records are skipped.
    fn filled_skipping(&mut self) -> Option<Segment> {
        let delimiter = self.delimiter;
        if self.skipping {
            // Everything before this read went to the sink already.
            match memchr::memchr(delimiter, &self.buf[..self.end]) {
                None => {
                    self.skip_piece(0, self.end, Piece::Part);
                    self.end = 0;
                    self.scanned = 0;
                    return None;
                }
                Some(at) => {
                    self.skip_piece(0, at + 1, Piece::End);
                    self.skipping = false;
                    self.take_front(at + 1);
                    self.scanned = 0;
                }
            }
        }
        let upto = match crate::scan::last(&self.buf[self.scanned..self.end], delimiter) {
            Some(last) => self.scanned + last + 1,
            None => 0,
        };
        self.scanned = self.end;
        // Largest record, delimiter included.
        let limit = self.max_record.saturating_add(1).min(self.capacity_bytes);
        let seg = if upto <= limit {
            self.emit(upto)
        } else {
            // Measure the records one by one; copy out those that fit.
            let mut kept = Vec::with_capacity(upto);
            let mut start = 0;
            let ends: Vec<usize> = memchr::memchr_iter(delimiter, &self.buf[..upto])
                .map(|at| at + 1)
                .collect();
            for end in ends {
                if end - start > limit {
                    self.skip_piece(start, end, Piece::End);
                } else {
                    kept.extend_from_slice(&self.buf[start..end]);
                }
                start = end;
            }
            self.take_front(upto);
            self.scanned = self.end;
            (!kept.is_empty()).then(|| {
                let seg = Segment::new(Bytes::from(kept), delimiter);
                self.records += seg.len() as u64;
                seg
            })
        };
        // The unfinished record is already too long: send what there is
        // of it and skip the rest as it comes.
        if self.end > self.max_record || self.end > self.capacity_bytes {
            self.skip_piece(0, self.end, Piece::Part);
            self.skipping = true;
            self.end = 0;
            self.scanned = 0;
        }
        seg
    }

    /// Space to read into: at least `READ_SIZE` bytes after the data. Call
    /// [`Splitter::filled`] with how many were read.
    pub fn space(&mut self) -> &mut [u8] {
        if self.buf.len() - self.end < READ_SIZE {
            // Grow (at the first read, for reads gathered while lingering,
            // for a record longer than a read) into a new zeroed buffer,
            // the data copied over: memory that large comes from the
            // system already zeroed (calloc), so only the pages a read
            // fills are ever touched, where `resize` wrote every new byte
            // (a one-record run zeroed 384 KiB: a fifth of its page
            // faults). Then the buffer is reused.
            let want = (self.end + READ_SIZE).max(self.buf.len() * 2);
            let mut grown = vec![0; want];
            grown[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = grown;
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`Splitter::space`]; they are split at the
    /// next [`Splitter::filled`].
    pub fn extend(&mut self, n: usize) {
        self.end += n;
    }

    /// Bytes read but not yet split.
    pub fn unscanned(&self) -> usize {
        self.end - self.scanned
    }

    /// `n` bytes were read into [`Splitter::space`]: returns the complete
    /// records now available, if any, and the error of a record over the
    /// limits, if one was found (the records before it are still returned).
    pub fn filled(&mut self, n: usize, input: &str) -> (Option<Segment>, Option<RecordError>) {
        self.end += n;
        if self.skip.is_some() {
            return (self.filled_skipping(), None);
        }
        // What was scanned before holds no delimiter: it is the start of
        // the unfinished record.
        let Some(last) = crate::scan::last(&self.buf[self.scanned..self.end], self.delimiter)
        else {
            self.scanned = self.end;
            return (None, self.check(self.end, self.end, 0, input).err());
        };
        let upto = self.scanned + last + 1;
        // A record with its delimiter must be no longer than `limit`; when
        // all the complete records together are not, none is (the usual
        // case), else they are measured one by one.
        let limit = self.max_record.saturating_add(1).min(self.capacity_bytes);
        let (upto, error) = if upto <= limit {
            (upto, None)
        } else {
            self.first_too_long(upto, limit, input)
        };
        self.scanned = self.end;
        // The unfinished record is already too long?
        let partial = self.end - upto;
        let error = error.or_else(|| {
            (partial > self.max_record || partial > self.capacity_bytes)
                .then(|| {
                    let index = scan::count(&self.buf[..upto], self.delimiter);
                    self.check(partial, partial, index, input).err()
                })
                .flatten()
        });
        (self.emit(upto), error)
    }

    /// Check the records of `buf[..upto]` one by one: returns where the
    /// good ones end and the error of the first over `limit` bytes.
    fn first_too_long(
        &self,
        upto: usize,
        limit: usize,
        input: &str,
    ) -> (usize, Option<RecordError>) {
        let mut start = 0;
        for (index, pos) in memchr::memchr_iter(self.delimiter, &self.buf[..upto]).enumerate() {
            let end = pos + 1;
            if end - start > limit {
                if let Err(e) = self.check(end - start - 1, end - start, index, input) {
                    return (start, Some(e));
                }
            }
            start = end;
        }
        (upto, None)
    }

    fn check(
        &self,
        content: usize,
        size: usize,
        index: usize,
        input: &str,
    ) -> Result<(), RecordError> {
        let number = self.records + index as u64 + 1;
        if content > self.max_record {
            return Err(RecordError::TooLong {
                number,
                limit: self.max_record,
                input: input.to_string(),
            });
        }
        if size > self.capacity_bytes {
            return Err(RecordError::LargerThanBucket {
                number,
                size,
                limit: self.capacity_bytes,
                input: input.to_string(),
            });
        }
        Ok(())
    }

    /// Copy out the records in `buf[..upto]` (a record boundary) and move
    /// the unfinished rest to the front of the buffer.
    fn emit(&mut self, upto: usize) -> Option<Segment> {
        if upto == 0 {
            return None;
        }
        let data = Bytes::copy_from_slice(&self.buf[..upto]);
        let seg = Segment::new(data, self.delimiter);
        self.records += seg.len() as u64;
        self.take_front(upto);
        Some(seg)
    }

    /// Drop `buf[..upto]`, moving the rest to the front of the buffer.
    fn take_front(&mut self, upto: usize) {
        self.buf.copy_within(upto..self.end, 0);
        self.end -= upto;
        self.scanned = self.scanned.saturating_sub(upto);
        // Give back the room a very long record needed.
        if self.buf.len() > 4 * READ_SIZE && self.end < READ_SIZE {
            self.buf.truncate(2 * READ_SIZE);
            self.buf.shrink_to_fit();
        }
    }

    /// The input ended: returns its unterminated last record, if any, with
    /// the delimiter added when `terminate` (another input follows).
    ///
    /// # Errors
    /// The record is over the limits.
    pub fn finish(&mut self, terminate: bool, input: &str) -> Result<Option<Segment>, RecordError> {
        if self.skipping {
            // Nothing is left over between reads: the record ends unread.
            self.skip_piece(0, self.end, Piece::EndUnterminated);
            self.end = 0;
            self.scanned = 0;
            self.skipping = false;
            return Ok(None);
        }
        if self.end == 0 {
            return Ok(None);
        }
        let content = self.end;
        if terminate {
            self.space()[0] = self.delimiter;
            self.end += 1;
        }
        if let Err(e) = self.check(content, self.end, 0, input) {
            if self.skip.is_some() {
                // Oversized: to the sink.
                let piece = if terminate {
                    Piece::End
                } else {
                    Piece::EndUnterminated
                };
                self.skip_piece(0, self.end, piece);
                self.end = 0;
                self.scanned = 0;
                return Ok(None);
            }
            // Reading stops here: the bytes stay for [`Splitter::take_rest`]
            // and never run into the next input.
            self.scanned = self.end;
            return Err(e);
        }
        let len = self.end;
        self.scanned = len;
        Ok(self.emit(len))
    }

    /// Reading stopped at a record over the limits: what was read and not
    /// handed on (that record as far as it was read, and whatever followed
    /// it in the same read), as records, the last perhaps unterminated; so
    /// that nothing consumed from the input is lost without a trace.
    pub fn take_rest(&mut self) -> Option<Segment> {
        if self.end == 0 {
            return None;
        }
        let data = Bytes::copy_from_slice(&self.buf[..self.end]);
        self.end = 0;
        self.scanned = 0;
        Some(Segment::new(data, self.delimiter))
    }
}

/// Open an input. Stdin is duplicated so it is read without std's buffer.
///
/// A path is opened without waiting (O_NONBLOCK), then made blocking
/// again: opening a FIFO that has no writer yet would otherwise block in
/// open(2), where no stop can reach the reader. Its wait for the first
/// writer happens instead in poll(2) beside the waker ([`read_one`]
/// polls every input that is not a regular file before reading it): a
/// FIFO opened this way reports neither data nor a hang-up until a writer
/// has come (and written, or gone).
fn open(input: &Input) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match input {
        Input::Stdin => Ok(File::from(io::stdin().as_fd().try_clone_to_owned()?)),
        Input::Path(path) => {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?;
            crate::sys::set_blocking(file.as_fd())?;
            Ok(file)
        }
    }
}

/// A regular file drip writes to (`--dead-letter`, `--stats-json`,
/// `--metrics`), known by device and inode: an input that is the same file
/// is refused, as cat refuses to read its output, for drip would read what
/// it writes itself, perhaps for ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnFile {
    dev: u64,
    ino: u64,
    /// The flag that names it, for the message.
    flag: &'static str,
    /// Its path, for a file replaced by rename (`--metrics`): each write
    /// makes a new inode, so an input is known by its path too.
    replaced: Option<PathBuf>,
}

impl OwnFile {
    /// Of `files` (each with the flag that names it), those that are
    /// regular files (call once drip has created them). A FIFO or a device
    /// such as /dev/null is no loop and is never refused.
    pub fn of_all(files: &[(&'static str, Option<&std::path::Path>)]) -> Vec<OwnFile> {
        files
            .iter()
            .copied()
            .filter_map(|(flag, path)| OwnFile::of(flag, path?))
            .collect()
    }

    /// `path`, written as `flag`, if it is a regular file.
    pub fn of(flag: &'static str, path: &std::path::Path) -> Option<OwnFile> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
        Some(OwnFile {
            dev: meta.dev(),
            ino: meta.ino(),
            flag,
            replaced: None,
        })
    }

    /// `path`, written as `flag` by replacing it whole (a temporary file
    /// renamed over it), if it is a regular file.
    pub fn replaced(flag: &'static str, path: &Path) -> Option<OwnFile> {
        let own = OwnFile::of(flag, path)?;
        Some(OwnFile {
            replaced: Some(path.to_path_buf()),
            ..own
        })
    }

    /// The one of `own` that `input`, opened as `file`, is, if any.
    fn find<'a>(own: &'a [OwnFile], input: &Input, file: &File) -> Option<&'a OwnFile> {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().ok()?;
        own.iter().find(|o| {
            let by_path =
                matches!((input, &o.replaced), (Input::Path(p), Some(own)) if same_file(p, own));
            by_path || (o.dev == meta.dev() && o.ino == meta.ino())
        })
    }
}

/// The first of `inputs` that is one of `files` (each with the flag that
/// names it): the files drip empties or replaces as it starts
/// (`--stats-json`, `--joblog`, `--metrics`). Such an input is refused
/// before any of them is written, for writing it would lose the input.
/// Stdin counts when it is that regular file; a path, when
/// [`same_file`] says so (so also when it does not exist yet). Neither is
/// opened: a FIFO given as FILE would wait for its writer.
pub fn emptied_at_start(
    inputs: &[Input],
    files: &[(&'static str, Option<&Path>)],
) -> Option<(String, &'static str)> {
    inputs.iter().find_map(|input| {
        let (flag, _) = files.iter().find(|(_, path)| {
            path.is_some_and(|path| match input {
                Input::Path(input) => same_file(input, path),
                Input::Stdin => stdin_is(path),
            })
        })?;
        Some((input.name(), *flag))
    })
}

/// Whether stdin is the regular file at `path`, by device and inode.
fn stdin_is(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(meta) = std::fs::metadata(path).ok().filter(|m| m.is_file()) else {
        return false;
    };
    let stdin = open(&Input::Stdin).and_then(|f| f.metadata());
    stdin.is_ok_and(|s| s.dev() == meta.dev() && s.ino() == meta.ino())
}

/// Whether paths `a` and `b` name the same regular file, existing or to be
/// created: the same name in the same directory (each parent canonicalized),
/// or, when both exist, the same device and inode. A file that exists and
/// is not regular (a FIFO, a device such as /dev/null) is never the same:
/// writing it twice loses nothing kept.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (meta_a, meta_b) = (std::fs::metadata(a).ok(), std::fs::metadata(b).ok());
    if [&meta_a, &meta_b]
        .iter()
        .any(|m| m.as_ref().is_some_and(|m| !m.is_file()))
    {
        return false;
    }
    if let (Some(ma), Some(mb)) = (&meta_a, &meta_b) {
        if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
            return true;
        }
    }
    let place = |p: &Path| -> Option<PathBuf> {
        let name = p.file_name()?;
        let parent = match p.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(parent).ok()?.join(name))
    };
    place(a).is_some_and(|pa| Some(pa) == place(b))
}

/// Read every input in order, passing complete records to `deliver`.
///
/// A file that cannot be opened or read is passed to `warn` as
/// `"NAME: reason"` and skipped, as cat does; so is an input that is one
/// of drip's `own` output files. Reading stops when `deliver`
/// says so, when `waker` is woken, or at a record over the limits. Bytes of
/// an unfinished record when reading stops are delivered as a final record.
///
/// `linger`: after a pipe that is streaming (reads of a page or more) runs
/// dry, watch it for up to this long before sleeping in poll(2). A producer
/// that writes again within it then finds no sleeping reader to wake, which
/// costs it several microseconds per write otherwise. Zero never lingers.
pub fn read_all(
    inputs: &[Input],
    splitter: &mut Splitter,
    waker: &Waker,
    linger: Duration,
    own: &[OwnFile],
    deliver: &mut dyn FnMut(Segment) -> Flow,
    warn: &mut dyn FnMut(String),
) -> ReadReport {
    let mut report = ReadReport::default();
    for (i, input) in inputs.iter().enumerate() {
        let name = input.name();
        let more_follow = i + 1 < inputs.len();
        let file = match open(input) {
            Ok(f) => f,
            Err(e) => {
                warn(format!("{name}: {}{}", describe(&e), rate_hint(input, &e)));
                report.failed_inputs += 1;
                continue;
            }
        };
        if let Some(own) = OwnFile::find(own, input, &file) {
            warn(format!("{name}: input file is the {} file", own.flag));
            report.failed_inputs += 1;
            continue;
        }
        let open = OpenInput {
            file,
            name: &name,
            more_follow,
        };
        match read_one(open, linger, splitter, waker, deliver) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => return report,
            Err(ReadFailure::Io(e)) => {
                warn(format!("{name}: {}", describe(&e)));
                report.failed_inputs += 1;
                // Whatever was read of its last record still counts.
                if let Ok(Some(seg)) = splitter.finish(more_follow, &name) {
                    if deliver(seg) == Flow::Stop {
                        return report;
                    }
                }
            }
            Err(ReadFailure::Record(e)) => {
                report.record_error = Some(e);
                return report;
            }
        }
    }
    report
}

enum ReadFailure {
    Io(io::Error),
    Record(RecordError),
}

/// Read once, then go on reading while a pipe already holds more
/// (producers often write a few KiB at a time): one segment, one hand-off,
/// for many small reads, and never a wait for more. Returns whether the
/// input ended, the read error that ended the round, and the bytes read.
fn drain(
    file: &mut File,
    splitter: &mut Splitter,
    waker: &Waker,
    regular: bool,
) -> (bool, Option<io::Error>, usize) {
    let (mut at_end, mut failure, mut got) = (false, None, 0);
    loop {
        match file.read(splitter.space()) {
            Ok(0) => at_end = true,
            Ok(n) => {
                splitter.extend(n);
                got += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => failure = Some(e),
        }
        if at_end
            || failure.is_some()
            || regular
            || splitter.unscanned() >= READ_SIZE
            || !waker.ready_now(file.as_fd())
        {
            return (at_end, failure, got);
        }
    }
}

/// An input opened for reading: its file, the name messages give it, and
/// whether more inputs follow it (its unterminated last record is then
/// given the delimiter: [`Splitter::finish`]).
struct OpenInput<'a> {
    file: File,
    name: &'a str,
    more_follow: bool,
}

/// Read the input `open` to its end, lingering up to `linger` on a
/// streaming pipe that runs dry (see [`read_all`]).
fn read_one(
    open: OpenInput<'_>,
    linger: Duration,
    splitter: &mut Splitter,
    waker: &Waker,
    deliver: &mut dyn FnMut(Segment) -> Flow,
) -> Result<Flow, ReadFailure> {
    let OpenInput {
        mut file,
        name,
        more_follow,
    } = open;
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    let stop_with_partial = |splitter: &mut Splitter, deliver: &mut dyn FnMut(Segment) -> Flow| {
        // Bytes already read of an unfinished record are not lost: they go
        // on as a record of their own (and so end up undelivered).
        if let Ok(Some(seg)) = splitter.finish(false, name) {
            deliver(seg);
        }
        Ok(Flow::Stop)
    };
    loop {
        if !regular && !waker.wait_readable(file.as_fd()).map_err(ReadFailure::Io)? {
            return stop_with_partial(splitter, deliver);
        }
        let (at_end, failure, got) = drain(&mut file, splitter, waker, regular);
        let (seg, error) = splitter.filled(0, name);
        if let Some(seg) = seg {
            if deliver(seg) == Flow::Stop {
                return stop_with_partial(splitter, deliver);
            }
        }
        if let Some(e) = error {
            return Err(ReadFailure::Record(e));
        }
        if !regular && !at_end && got >= STREAMING && !linger.is_zero() {
            let since = Instant::now();
            while since.elapsed() < linger && !waker.ready_now(file.as_fd()) {
                std::hint::spin_loop();
            }
        }
        if let Some(e) = failure {
            return Err(ReadFailure::Io(e));
        }
        if at_end {
            if let Some(seg) = splitter
                .finish(more_follow, name)
                .map_err(ReadFailure::Record)?
            {
                if deliver(seg) == Flow::Stop {
                    return Ok(Flow::Stop);
                }
            }
            return Ok(Flow::Continue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(chunks: &[&[u8]], delim: u8, terminate: bool) -> Vec<Vec<u8>> {
        let mut s = Splitter::new(delim, 1 << 20, None);
        let mut out = Vec::new();
        for chunk in chunks {
            let space = s.space();
            space[..chunk.len()].copy_from_slice(chunk);
            let (seg, err) = s.filled(chunk.len(), "t");
            assert!(err.is_none());
            if let Some(seg) = seg {
                out.extend(seg.records().map(<[u8]>::to_vec));
            }
        }
        if let Some(seg) = s.finish(terminate, "t").unwrap() {
            out.extend(seg.records().map(<[u8]>::to_vec));
        }
        out
    }

    #[test]
    fn splits_across_chunks_byte_exact() {
        let recs = split_all(&[b"a\nb", b"c\n\n\r\n", b"\xff\x00z"], b'\n', false);
        assert_eq!(
            recs,
            vec![
                b"a\n".to_vec(),
                b"bc\n".to_vec(),
                b"\n".to_vec(),
                b"\r\n".to_vec(),
                b"\xff\x00z".to_vec()
            ]
        );
    }

    #[test]
    fn terminates_last_record_when_asked() {
        assert_eq!(split_all(&[b"x"], b'\n', true), vec![b"x\n".to_vec()]);
        assert_eq!(split_all(&[b"x\n"], b'\n', true), vec![b"x\n".to_vec()]);
        assert!(split_all(&[b""], b'\n', true).is_empty());
    }

    #[test]
    fn other_delimiters() {
        assert_eq!(
            split_all(&[b"a\0b\nc\0"], 0, false),
            vec![b"a\0".to_vec(), b"b\nc\0".to_vec()]
        );
    }

    #[test]
    fn record_limits_name_the_record() {
        let mut s = Splitter::new(b'\n', 3, None);
        let space = s.space();
        space[..9].copy_from_slice(b"abc\nabcd\n");
        let (seg, err) = s.filled(9, "in");
        assert_eq!(seg.unwrap().as_bytes(), b"abc\n");
        let err = err.unwrap();
        assert_eq!(
            err,
            RecordError::TooLong {
                number: 2,
                limit: 3,
                input: "in".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "in: record 2 is longer than --max-record (3 bytes)"
        );
    }

    #[test]
    fn unfinished_record_over_the_limit_is_caught_early() {
        let mut s = Splitter::new(b'\n', 4, None);
        let space = s.space();
        space[..6].copy_from_slice(b"abcdef");
        assert!(s.filled(6, "in").1.is_some());
    }

    #[test]
    fn capacity_bytes_limit_counts_the_delimiter() {
        let mut s = Splitter::new(b'\n', 100, Some(3));
        let space = s.space();
        space[..7].copy_from_slice(b"ab\nabc\n");
        let err = s.filled(7, "in").1.unwrap();
        assert!(matches!(
            err,
            RecordError::LargerThanBucket {
                number: 2,
                size: 4,
                ..
            }
        ));
    }

    /// Split `input` fed in chunks of `sizes` (cycled) with oversized
    /// records skipped: returns the records kept, the records skipped (each
    /// reassembled from its pieces), and the largest buffer the splitter
    /// held.
    fn split_skipping(
        input: &[u8],
        sizes: &[usize],
        max_record: usize,
        capacity_bytes: Option<usize>,
        terminate: bool,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, usize) {
        use std::sync::{Arc, Mutex};
        let skipped = Arc::new(Mutex::new((Vec::<Vec<u8>>::new(), Vec::<u8>::new())));
        let sink = Arc::clone(&skipped);
        let mut s = Splitter::new(b'\n', max_record, capacity_bytes).skipping(Box::new(
            move |bytes: &[u8], piece: Piece| {
                let (done, current) = &mut *sink.lock().unwrap();
                current.extend_from_slice(bytes);
                match piece {
                    Piece::Part => return,
                    Piece::End => assert_eq!(current.last(), Some(&b'\n')),
                    Piece::EndUnterminated => {
                        assert_ne!(current.last(), Some(&b'\n'));
                        current.push(b'\n');
                    }
                }
                done.push(std::mem::take(current));
            },
        ));
        let mut kept = Vec::new();
        let mut most = 0;
        let mut rest = input;
        for &size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let n = size.min(rest.len());
            s.space()[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            let (seg, err) = s.filled(n, "t");
            assert!(err.is_none());
            most = most.max(s.buf.len());
            if let Some(seg) = seg {
                kept.extend(seg.records().map(<[u8]>::to_vec));
            }
        }
        if let Some(seg) = s.finish(terminate, "t").unwrap() {
            kept.extend(seg.records().map(<[u8]>::to_vec));
        }
        let (done, current) = std::mem::take(&mut *skipped.lock().unwrap());
        assert!(current.is_empty(), "a skipped record left open");
        (kept, done, most)
    }

    #[test]
    fn oversized_records_are_skipped_whole_and_the_rest_kept() {
        let input = b"ok\ntoolong\nfine\nx\nwaytoolongagain\nend\nlastoneistoolong";
        for sizes in [&[1][..], &[3, 7], &[5], &[1000]] {
            let (kept, skipped, _) = split_skipping(input, sizes, 4, None, false);
            assert_eq!(
                kept,
                [&b"ok\n"[..], b"fine\n", b"x\n", b"end\n"],
                "{sizes:?}"
            );
            assert_eq!(
                skipped,
                [
                    &b"toolong\n"[..],
                    b"waytoolongagain\n",
                    b"lastoneistoolong\n"
                ],
                "{sizes:?}"
            );
        }
        // --capacity-bytes counts the delimiter: "abc\n" is 4 bytes.
        let (kept, skipped, _) = split_skipping(b"ab\nabc\nabcd", &[2], 100, Some(3), true);
        assert_eq!(kept, [b"ab\n"]);
        assert_eq!(skipped, [&b"abc\n"[..], b"abcd\n"]);
        // The last record fits exactly when unterminated.
        let (kept, skipped, _) = split_skipping(b"abc", &[1], 100, Some(3), false);
        assert_eq!((kept, skipped.len()), (vec![b"abc".to_vec()], 0));
    }

    #[test]
    fn a_skipped_record_is_never_held_whole() {
        // A 10 MiB record with a 1 KiB limit, read 64 KiB at a time.
        let mut input = b"before\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10 << 20));
        input.extend_from_slice(b"\nafter\n");
        let (kept, skipped, most) = split_skipping(&input, &[64 << 10], 1024, None, false);
        assert_eq!(kept, [&b"before\n"[..], b"after\n"]);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].len(), (10 << 20) + 1);
        assert!(most <= 2 * READ_SIZE, "buffer grew to {most}");
    }

    #[test]
    fn skipping_keeps_every_record_in_order() {
        // Random records and chunkings: kept and skipped together are the
        // input's records, each on the side its size says.
        let mut seed = 0x9e37_79b9_u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        for _ in 0..200 {
            let records: Vec<Vec<u8>> = (0..next(30))
                .map(|i| {
                    let mut r = vec![b'a' + (i % 26) as u8; next(40) as usize];
                    r.push(b'\n');
                    r
                })
                .collect();
            let input = records.concat();
            let sizes: Vec<usize> = (0..5).map(|_| 1 + next(50) as usize).collect();
            let max_record = 1 + next(30) as usize;
            let (kept, skipped, _) = split_skipping(&input, &sizes, max_record, None, false);
            let fits = |r: &&Vec<u8>| r.len() <= max_record + 1;
            let want_kept: Vec<Vec<u8>> = records.iter().filter(fits).cloned().collect();
            let want_skipped: Vec<Vec<u8>> = records.iter().filter(|r| !fits(r)).cloned().collect();
            assert_eq!(kept, want_kept);
            assert_eq!(skipped, want_skipped);
        }
    }

    #[test]
    fn oversize_policies_parse() {
        assert_eq!("fail".parse(), Ok(Oversize::Fail));
        assert_eq!("skip".parse(), Ok(Oversize::Skip));
        let e = "drop".parse::<Oversize>().unwrap_err();
        assert!(e.contains("expected fail or skip"), "{e}");
    }

    #[test]
    fn a_missing_file_named_like_a_rate_gets_a_hint() {
        let missing = io::Error::from(io::ErrorKind::NotFound);
        let path = |p: &str| Input::Path(PathBuf::from(p));
        assert_eq!(
            rate_hint(&path("10/s"), &missing),
            " (did you mean --rate 10/s?)"
        );
        assert_eq!(
            rate_hint(&path("500/min:50"), &missing),
            " (did you mean --rate 500/min:50?)"
        );
        assert_eq!(rate_hint(&path("urls.txt"), &missing), "");
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(rate_hint(&path("10/s"), &denied), "");
    }
}
