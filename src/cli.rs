//! The command line: flags, their parsers, and the checked [`Config`] they
//! make.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PathBufValueParser, PossibleValue, TypedValueParser};
use clap::{Parser, ValueHint};

use crate::bucket::Overflow;
use crate::rate::{parse_rate, Rate, RATE_FORMS};

/// Examples shown in `--help` and the man page: (command, what it does).
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "seq 20 | drip --rate 5/s",
        "print 1 to 20 over four seconds",
    ),
    (
        "drip -r 10/s urls.txt | xargs -n1 -P4 curl -sSO",
        "fetch at most 10 URLs a second",
    ),
    (
        "find . -print0 | drip -0 -i 250ms | xargs -0 -n1 process",
        "NUL-delimited names, one every 250 ms",
    ),
    (
        "tail -f app.log | drip -r 100/s -c 10000 -o drop-oldest --dead-letter late.log",
        "never hold the producer back; keep what was shed",
    ),
    (
        "drip -r 1000/s -b 50 --stats events.ndjson > /dev/null",
        "replay a log with bursts of up to 50, then print a summary",
    ),
];

/// Exit statuses, for `--help`, the man page and the README: (status, meaning).
pub const EXIT_STATUSES: &[(&str, &str)] = &[
    (
        "0",
        "every record was written, dropped by policy or expired (also when the reader closed stdout, as with | head)",
    ),
    (
        "1",
        "a runtime error: an unreadable FILE (reported; drip goes on with the next), a record over --max-record or --capacity-bytes (the records before it are delivered; reading stops), a failed write to stdout, --dead-letter or --stats-json, or of --help or --version output",
    ),
    ("2", "a usage error: a bad flag or value (one line naming the flag and the accepted form)"),
    ("3", "the bucket overflowed under --overflow fail"),
    (
        "129, 130, 143",
        "stopped by SIGHUP, SIGINT or SIGTERM (128 + the signal's number)",
    ),
];

/// What the exit statuses' precedence is, for the man page and `--help`.
pub const EXIT_PRECEDENCE: &str = "When several apply, a failed write wins, then an overflow (3), \
     then a signal (128 + n), then a record or input error (1).";

/// A paragraph of the manual: `(tag, text)`; an empty tag is plain text.
pub type Paragraph = (&'static str, &'static str);

/// What the DESCRIPTION of the man page says after the summary above
/// `Cli`: (subsection title, or "" for none; paragraphs).
pub const DESCRIPTION: &[(&str, &[Paragraph])] = &[
    (
        "",
        &[
            ("", "FILEs are read in order; - or no FILE means stdin. An unterminated last record of a file gets the delimiter when another file follows, so records never merge across files; otherwise the output is the input byte for byte."),
            ("", "Records leave on an exact schedule (GCRA): record k is due at anchor + k\u{b7}T, with the rate kept as a fraction so that it never drifts. Waking a little late keeps the schedule; a longer stall (idle input, blocked stdout, a busy machine) restarts it from now, so at most --burst records ever leave back to back. The first record leaves at once, and drip exits as soon as the last one is written."),
        ],
    ),
    (
        "Overflow policies",
        &[
            ("block", "Nothing is lost: when the bucket is full drip stops reading, and the producer's writes block until there is room."),
            ("drop-newest", "The producer is never held back; records arriving at a full bucket are discarded (and written to the dead letter, if set)."),
            ("drop-oldest", "The producer is never held back; the oldest queued record is evicted to make room."),
            ("fail", "The first overflow stops drip with status 3; everything still queued is undelivered."),
            ("", "With --rate inf a full bucket only means stdout is not keeping up: the drop and fail policies apply once stdout has made no room for 100 ms."),
        ],
    ),
    (
        "Accounting",
        &[
            ("", "Every record read ends up in exactly one of: written, dropped by policy (dropped_newest, dropped_oldest), expired (--max-wait), or undelivered (still queued, or being written, when drip stopped or stdout closed). The counts always add up: read = written + dropped_newest + dropped_oldest + expired + undelivered. Every record not written goes to the --dead-letter FILE when one is set."),
        ],
    ),
    (
        "The live display",
        &[
            ("", "When stderr is a terminal, drip draws one line on it: the elapsed time, the bucket's fill as a gauge (depth/capacity), records in, out and dropped, the output rate (measured from the times records left, over at least ten records and a second, or the last ten seconds at low rates; -/s until two have left), an ETA from that measured rate when the input's size is known, and a sign when stdout holds records up: output slow (records are waiting, a write to stdout was under way at half or more of the redraws of the last second, and less than 90% of the rate leaves) or output blocked (a write under way for 250 ms). At exit the line is cleared and the summary printed in its place."),
            ("", "When stdout is the same terminal, the records are the progress: drip draws no display (and prints no summary) unless --progress asks; then the display keeps to the bottom row while the records scroll above it. --progress also draws it when stderr is not a terminal; -q turns it off."),
        ],
    ),
    (
        "Statistics",
        &[
            ("--stats", "At exit (and on SIGUSR1) a summary on stderr, broken between clauses into lines of at most 80 columns, each starting drip: \u{2014} read, written, dropped (newest, oldest), expired, undelivered; max depth, max wait; rate, elapsed. The rate is taken between the first and the last record written: the records written after the first write over the time since it, (written \u{2212} 1) / span when records leave one at a time; it is left out when fewer than two writes were made. Elapsed is the wall time of the whole run."),
            ("--stats-json", "The summary as one JSON object: read, written, dropped_newest, dropped_oldest, expired, undelivered, bytes_read, bytes_written, max_depth (records), max_wait_ms (the longest any written record waited), elapsed_ms, rate (records per second between the first and last write; null when fewer than two writes were made) and span_ms (the time between them)."),
            ("--stats-interval", "One JSON line per interval, on stderr or in the --stats-json FILE before the summary: time (seconds since start), records_in, records_out and rate (during the interval), depth, oldest_age_ms, and the totals read, written, dropped_newest, dropped_oldest, expired."),
        ],
    ),
];

/// The SIGNALS section: (signal, what drip does).
pub const SIGNALS: &[Paragraph] = &[
    ("SIGINT, SIGTERM, SIGHUP", "Stop at once: a record being written is finished, never cut; everything still queued goes to the dead letter and is counted as undelivered; the summary is printed as usual and drip exits with 128 + the signal's number. With --drain the first one only stops reading, and drip writes out what the bucket holds at the rate."),
    ("a second one", "Exit immediately, first moving what is still queued, and what a blocked write had not yet written, to the dead letter (when one is set); the record that write had begun may be cut on stdout then, and is in the dead letter whole. The display is cleared; no summary is printed."),
    ("SIGUSR1", "Print the summary on stderr, and carry on."),
    ("| head", "A reader that closes stdout is no signal to drip, but it ends drip quietly with status 0, at once even when the next record is far off."),
    ("", "Signals the parent ignores (nohup, background jobs) stay ignored. SIGWINCH and other harmless signals change nothing."),
];

/// The ENVIRONMENT section.
pub const ENVIRONMENT: &[Paragraph] = &[
    (
        "NO_COLOR",
        "When set and not empty, the live display is drawn without colour.",
    ),
    (
        "TERM",
        "When dumb, the terminal cannot redraw a line: no live display, only the summary at exit.",
    ),
];

/// The FILES section.
pub const FILES: &[Paragraph] = &[
    ("FILE", "Inputs, read in order; - is stdin."),
    ("--dead-letter FILE", "Appended to (created if missing): every record not written to stdout, byte-exact with its delimiter, in the order it left the bucket. A file that does not end with the delimiter gets one first."),
    ("--stats-json FILE", "Created or truncated: the summary as one JSON object, after the --stats-interval lines if any."),
    ("", "- is refused for both (status 2): stdout carries the records, and the two would mix."),
];

/// The SEE ALSO section.
pub const SEE_ALSO: &str = "pv(1), xargs(1), parallel(1), mbuffer(1)";

fn after_help() -> String {
    let mut text = String::from("Examples:\n");
    for (command, what) in EXAMPLES {
        text.push_str(&format!("  {command}\n      {what}\n"));
    }
    text.push_str("\nExit status:\n");
    for (status, meaning) in EXIT_STATUSES {
        text.push_str(&format!("  {status}\n      {meaning}\n"));
    }
    text.push_str(&format!("\n  {EXIT_PRECEDENCE}\n"));
    text.push_str("\nEnvironment:\n");
    for (name, meaning) in ENVIRONMENT {
        text.push_str(&format!("  {name}\n      {meaning}\n"));
    }
    text.push_str("\nSignals, the display and the stats formats: see the README or drip(1).");
    text
}

/// A leaky bucket for shell pipelines.
///
/// Reads records (lines; NUL-terminated with -0) from FILEs or stdin into a
/// bounded bucket and writes them to stdout at a steady rate. When the bucket
/// is full, the overflow policy decides: block (stop reading, so the producer
/// waits), drop-newest, drop-oldest, or fail. Every record read is written,
/// dropped, expired or reported as undelivered.
#[derive(Debug, Parser)]
#[command(
    name = "drip",
    version,
    after_help = after_help(),
    max_term_width = 100,
    args_override_self = true
)]
pub struct Cli {
    /// Files to read in order; `-` or none means stdin.
    #[arg(value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub files: Vec<PathBuf>,

    /// Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s,
    /// a bare 10 (per second), or inf (unlimited) for no pacing [default: 1/s]
    #[arg(short, long, value_name = "RATE", value_parser = rate_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub rate: Option<Rate>,

    /// One record every DURATION (100ms, 2s, 1m): another way to give the rate
    #[arg(short, long, value_name = "DURATION", value_parser = interval_arg, value_hint = ValueHint::Other, conflicts_with = "rate", allow_hyphen_values = true)]
    pub interval: Option<Duration>,

    /// Records that may leave back to back after an idle spell (token bucket);
    /// the long-run rate is unchanged. 1 means strict spacing
    #[arg(short, long, value_name = "N", default_value = "1", value_parser = positive_u64, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub burst: u64,

    /// Records the bucket holds
    #[arg(short, long, value_name = "N", default_value = "1000", value_parser = positive_usize, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub capacity: usize,

    /// Bytes the bucket holds, delimiters included (10KiB, 64MiB); full at
    /// either bound
    #[arg(long, value_name = "SIZE", value_parser = size_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub capacity_bytes: Option<usize>,

    /// What to do when the bucket is full
    #[arg(short, long, value_name = "POLICY", default_value = "block", value_parser = Choices { parse: overflow_arg, values: POLICIES })]
    pub overflow: Overflow,

    /// Records end with NUL instead of newline, on input and output
    #[arg(short = '0', long = "null", conflicts_with = "delimiter")]
    pub null: bool,

    /// Records end with this byte: a character or an escape such as '\t',
    /// '\0' or '\x1e'
    #[arg(short, long, value_name = "BYTE", value_parser = delimiter_arg, value_hint = ValueHint::Other)]
    pub delimiter: Option<u8>,

    /// Longest record accepted, delimiter excluded (512KiB, 64MiB; KB means
    /// 1000 bytes, KiB 1024)
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = size_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub max_record: usize,

    /// Expire records that waited in the bucket longer than DURATION instead
    /// of writing them
    #[arg(long, value_name = "DURATION", value_parser = interval_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub max_wait: Option<Duration>,

    /// Append every record not written to stdout (dropped, expired,
    /// undelivered) to FILE, byte-exact, in the order it left the bucket
    /// (not `-`: stdout carries the records)
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath)]
    pub dead_letter: Option<PathBuf>,

    /// On the first SIGINT, SIGTERM or SIGHUP, stop reading but write what the
    /// bucket holds at the rate before exiting
    #[arg(long)]
    pub drain: bool,

    /// Print a summary on stderr at exit
    #[arg(long)]
    pub stats: bool,

    /// Write the summary to FILE as one JSON object (and, with
    /// --stats-interval, the periodic stats as JSON lines before it); not
    /// `-`: stdout carries the records
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath)]
    pub stats_json: Option<PathBuf>,

    /// Every DURATION, write one JSON line of stats to stderr (or to
    /// --stats-json FILE)
    #[arg(long, value_name = "DURATION", value_parser = stats_interval_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub stats_interval: Option<Duration>,

    /// Draw the live display on stderr even when it is not a terminal, or
    /// when stdout is the same terminal (the display then keeps to the
    /// bottom row and the records scroll above it)
    #[arg(long, conflicts_with = "quiet")]
    pub progress: bool,

    /// No progress display: stderr gets only errors and what --stats and
    /// --stats-interval ask for
    #[arg(short, long)]
    pub quiet: bool,
}

/// Parse `--rate`.
fn rate_arg(text: &str) -> Result<Rate, String> {
    parse_rate(text).map_err(|why| format!("{why} (expected {RATE_FORMS})"))
}

/// Parse a non-zero humantime duration.
fn interval_arg(text: &str) -> Result<Duration, String> {
    let d = duration_arg(text)?;
    if d.is_zero() {
        return Err("must be longer than zero (expected a duration such as 100ms, 2s, 1m)".into());
    }
    Ok(d)
}

/// Parse `--stats-interval`: at least 10 ms, so stderr is not flooded.
fn stats_interval_arg(text: &str) -> Result<Duration, String> {
    let d = duration_arg(text)?;
    if d < Duration::from_millis(10) {
        return Err("must be at least 10ms (expected a duration such as 1s, 10s)".into());
    }
    Ok(d)
}

/// Parse a humantime duration (`250ms`, `2s`, `1m30s`).
fn duration_arg(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (expected a duration such as 100ms, 2s, 1m)"))
}

fn positive_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of at least 1".into()),
    }
}

fn positive_usize(text: &str) -> Result<usize, String> {
    positive_u64(text).and_then(|n| usize::try_from(n).map_err(|_| "too large".into()))
}

fn overflow_arg(text: &str) -> Result<Overflow, String> {
    text.parse()
}

/// The overflow policies, for completion and help: (value, meaning).
pub const POLICIES: &[(&str, &str)] = &[
    ("block", "stop reading until there is room (backpressure)"),
    ("drop-newest", "discard records arriving at a full bucket"),
    ("drop-oldest", "evict the oldest queued record to make room"),
    ("fail", "stop with status 3 at the first overflow"),
];

/// A value parser with a fixed set of values: `parse` parses (and words
/// the error), `values` are what shell completion and `--help` offer.
#[derive(Clone)]
struct Choices<T> {
    parse: fn(&str) -> Result<T, String>,
    values: &'static [(&'static str, &'static str)],
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Choices<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        self.parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            self.values
                .iter()
                .map(|(value, help)| PossibleValue::new(*value).help(*help)),
        ))
    }
}

/// Refuse `-` for a file drip writes: it would mean stdout, which carries
/// the records, and used to create a file named `-`.
fn not_stdout(path: PathBuf) -> Result<PathBuf, String> {
    if path.as_os_str() == "-" {
        return Err("'-' would be stdout, which carries the records; name a file".into());
    }
    Ok(path)
}

/// Parse a size in bytes: `4096`, `512KiB`, `64MiB`, `1GB`.
fn size_arg(text: &str) -> Result<usize, String> {
    let n = parse_size::parse_size(text)
        .map_err(|_| "expected a size such as 4096, 512KiB or 64MiB".to_string())?;
    if n == 0 {
        return Err("must be at least 1 byte".into());
    }
    usize::try_from(n).map_err(|_| "too large".into())
}

/// Parse a delimiter: one byte, or `\n`, `\t`, `\r`, `\0`, `\\`, `\xHH`.
fn delimiter_arg(text: &str) -> Result<u8, String> {
    const FORMS: &str = "expected one byte such as ',' or an escape such as '\\t', '\\0', '\\x1e'";
    let bytes = text.as_bytes();
    match bytes {
        [b] => Ok(*b),
        [b'\\', b'n'] => Ok(b'\n'),
        [b'\\', b't'] => Ok(b'\t'),
        [b'\\', b'r'] => Ok(b'\r'),
        [b'\\', b'0'] => Ok(0),
        [b'\\', b'\\'] => Ok(b'\\'),
        [b'\\', b'x', hex @ ..] if hex.len() == 2 => std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| FORMS.to_string()),
        _ => Err(FORMS.into()),
    }
}

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

/// When to draw the live progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// When stderr is a terminal.
    Auto,
    /// Always (`--progress`).
    Always,
    /// Never (`--quiet`).
    Never,
}

/// Everything `run` needs, checked and resolved from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// Inputs, read in order.
    pub inputs: Vec<Input>,
    /// The pacing rate.
    pub rate: Rate,
    /// Records that may leave back to back (≥ 1).
    pub burst: u64,
    /// Records the bucket holds (≥ 1).
    pub capacity: usize,
    /// Bytes the bucket holds, when bounded.
    pub capacity_bytes: Option<usize>,
    /// Overflow policy.
    pub overflow: Overflow,
    /// Record delimiter.
    pub delimiter: u8,
    /// Longest record in bytes, delimiter excluded.
    pub max_record: usize,
    /// Longest a record may wait before it expires.
    pub max_wait: Option<Duration>,
    /// Dead-letter file.
    pub dead_letter: Option<PathBuf>,
    /// Drain the bucket on the first signal.
    pub drain: bool,
    /// Print the summary on stderr.
    pub stats: bool,
    /// Write the summary as JSON here.
    pub stats_json: Option<PathBuf>,
    /// Period of the stats stream.
    pub stats_interval: Option<Duration>,
    /// Progress display.
    pub progress: ProgressMode,
}

impl Config {
    /// A configuration with drip's defaults reading `inputs`.
    pub fn new(inputs: Vec<Input>) -> Config {
        Config::from(Cli::parse_from(["drip"])).with_inputs(inputs)
    }

    fn with_inputs(mut self, inputs: Vec<Input>) -> Config {
        self.inputs = inputs;
        self
    }
}

impl From<Cli> for Config {
    fn from(cli: Cli) -> Config {
        let rate = match (cli.rate, cli.interval) {
            (Some(rate), _) => rate,
            (None, Some(interval)) => Rate::per_interval(interval).expect("checked non-zero"),
            (None, None) => Rate::Limited {
                count: 1,
                period_ns: 1_000_000_000,
            },
        };
        let inputs = if cli.files.is_empty() {
            vec![Input::Stdin]
        } else {
            cli.files
                .into_iter()
                .map(|p| {
                    if p.as_os_str() == "-" {
                        Input::Stdin
                    } else {
                        Input::Path(p)
                    }
                })
                .collect()
        };
        let delimiter = if cli.null {
            0
        } else {
            cli.delimiter.unwrap_or(b'\n')
        };
        let progress = if cli.quiet {
            ProgressMode::Never
        } else if cli.progress {
            ProgressMode::Always
        } else {
            ProgressMode::Auto
        };
        Config {
            inputs,
            rate,
            burst: cli.burst,
            capacity: cli.capacity,
            capacity_bytes: cli.capacity_bytes,
            overflow: cli.overflow,
            delimiter,
            max_record: cli.max_record,
            max_wait: cli.max_wait,
            dead_letter: cli.dead_letter,
            drain: cli.drain,
            stats: cli.stats,
            stats_json: cli.stats_json,
            stats_interval: cli.stats_interval,
            progress,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let c = Config::new(vec![Input::Stdin]);
        assert_eq!(c.rate.per_second(), 1.0);
        assert_eq!(c.burst, 1);
        assert_eq!(c.capacity, 1000);
        assert_eq!(c.overflow, Overflow::Block);
        assert_eq!(c.delimiter, b'\n');
        assert_eq!(c.max_record, 64 << 20);
    }

    #[test]
    fn interval_sets_the_rate() {
        let c = Config::from(Cli::parse_from(["drip", "-i", "250ms"]));
        assert_eq!(c.rate.per_second(), 4.0);
        assert!(Cli::try_parse_from(["drip", "-i", "1s", "-r", "2/s"]).is_err());
    }

    #[test]
    fn dash_is_stdin() {
        let c = Config::from(Cli::parse_from(["drip", "a", "-", "b"]));
        assert_eq!(
            c.inputs,
            vec![
                Input::Path("a".into()),
                Input::Stdin,
                Input::Path("b".into())
            ]
        );
    }

    #[test]
    fn delimiters() {
        assert_eq!(delimiter_arg(","), Ok(b','));
        assert_eq!(delimiter_arg("\\t"), Ok(b'\t'));
        assert_eq!(delimiter_arg("\\0"), Ok(0));
        assert_eq!(delimiter_arg("\\x1e"), Ok(0x1e));
        assert!(delimiter_arg("ab").is_err());
        assert!(delimiter_arg("\\xZZ").is_err());
        assert!(delimiter_arg("").is_err());
        let c = Config::from(Cli::parse_from(["drip", "-0"]));
        assert_eq!(c.delimiter, 0);
    }

    #[test]
    fn sizes_and_counts() {
        assert_eq!(size_arg("512KiB"), Ok(512 * 1024));
        assert_eq!(size_arg("64MiB"), Ok(64 << 20));
        assert_eq!(size_arg("100"), Ok(100));
        assert!(size_arg("0").is_err());
        assert!(size_arg("lots").is_err());
        assert!(positive_u64("0").is_err());
        assert!(positive_u64("-3").is_err());
        assert_eq!(positive_usize("7"), Ok(7));
    }

    #[test]
    fn repeated_flags_take_the_last_value() {
        let c = Config::from(Cli::parse_from([
            "drip", "-r", "1/s", "-r", "inf", "-q", "-q",
        ]));
        assert_eq!(c.rate, Rate::Unlimited);
    }

    #[test]
    fn stats_interval_has_a_floor() {
        assert!(stats_interval_arg("1ns").is_err());
        assert_eq!(stats_interval_arg("10ms"), Ok(Duration::from_millis(10)));
    }

    #[test]
    fn durations() {
        assert_eq!(interval_arg("100ms"), Ok(Duration::from_millis(100)));
        assert!(interval_arg("0s").is_err());
        assert!(duration_arg("soon").is_err());
    }

    #[test]
    fn policies_parse_and_are_offered() {
        for (value, _) in POLICIES {
            assert!(overflow_arg(value).is_ok(), "{value}");
        }
        assert!(overflow_arg("drop").is_err());
        let cmd = Cli::command();
        let overflow = cmd
            .get_arguments()
            .find(|a| a.get_id() == "overflow")
            .unwrap();
        let offered: Vec<String> = overflow
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        assert_eq!(offered, ["block", "drop-newest", "drop-oldest", "fail"]);
        let c = Config::from(Cli::parse_from(["drip", "-o", "drop-oldest"]));
        assert_eq!(c.overflow, Overflow::DropOldest);
    }

    #[test]
    fn files_complete_as_files_and_values_do_not() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut other = 0;
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            let hint = arg.get_value_hint();
            match id {
                "files" | "dead_letter" | "stats_json" => {
                    assert_eq!(hint, ValueHint::FilePath, "{id}")
                }
                _ if arg.get_num_args().is_some_and(|n| n.takes_values())
                    && arg.get_possible_values().is_empty() =>
                {
                    assert_eq!(hint, ValueHint::Other, "{id}");
                    other += 1;
                }
                _ => {}
            }
        }
        // rate, interval, burst, capacity, capacity-bytes, delimiter,
        // max-record, max-wait, stats-interval.
        assert_eq!(other, 9);
    }

    #[test]
    fn dash_is_refused_for_files_drip_writes() {
        assert!(not_stdout("-".into()).is_err());
        assert_eq!(not_stdout("./-".into()), Ok(PathBuf::from("./-")));
        for flag in ["--stats-json", "--dead-letter"] {
            let err = Cli::try_parse_from(["drip", flag, "-"]).unwrap_err();
            assert!(err.to_string().contains("carries the records"), "{err}");
        }
    }

    #[test]
    fn rate_errors_show_the_accepted_form() {
        let e = rate_arg("10/fortnight").unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
        assert!(e.contains("10/s"), "{e}");
    }
}
