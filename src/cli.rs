//! The command line: flags, their parsers, and the checked [`Config`] they
//! make.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PathBufValueParser, PossibleValue, TypedValueParser};
use clap::{Parser, ValueHint};

use crate::bucket::Overflow;
pub use crate::input::Input;
use crate::input::Oversize;
use crate::key::{parse_key, KeyArg, KeySpec};
use crate::keyed::KeyConfig;
use crate::output::not_stdout;
use crate::rate::{
    parse_byte_rate, parse_rate, Rate, BYTE_RATE_FORMS, LONGEST, LONGEST_TEXT, RATE_FORMS,
};
use crate::schedule::{Limit, Unit};
use crate::shared;

/// Examples shown in `--help` and the man page: (command, what it does).
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "seq 20 | drip --rate 5/s",
        "print 1 to 20, one every 200 ms (3.8 seconds)",
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
        "drip -r 10/s -j 8 --retries 5 urls.txt --exec curl -sS -o /dev/null -D {headers} {}",
        "run curl per URL: paced starts, 8 at once, retries, pauses on 429",
    ),
    (
        "drip -r 1000/s -b 50 --stats events.ndjson > /dev/null",
        "replay a log with bursts of up to 50, then print a summary",
    ),
    (
        "drip ctl nightly rate 5/s",
        "halve the rate of the drip started with --name nightly -r 10/s, from now on",
    ),
];

/// Exit statuses, for `--help`, the man page and the README: (status, meaning).
pub const EXIT_STATUSES: &[(&str, &str)] = &[
    (
        "0",
        "every record was written (with --exec: its job succeeded), dropped by policy or expired under --max-wait (also when the reader closed stdout, as with | head)",
    ),
    (
        "1",
        "a runtime error (with drip ctl: any failure, one line): an unreadable FILE (reported; drip goes on with the next) or one that is the --dead-letter or --stats-json file, a record over --max-record or --capacity-bytes under --oversize fail (the records before it are delivered; reading stops), a failed write to stdout, --dead-letter, --stats-json or --metrics, a control socket that cannot be made, or of --help or --version output",
    ),
    ("2", "a usage error: a bad flag or value (one line naming the flag and the accepted form); also limits that differ from those shared under the same --share NAME"),
    ("3", "the bucket overflowed under --overflow fail (with --key, also a key's full queue, or a new key while every remembered key is busy)"),
    (
        "4",
        "the --share state could not be reached under --share-on-error fail, or can never be used as set up (a state directory drip may not write, a password the Redis server wants; under every --share-on-error); what was not written is undelivered",
    ),
    (
        "123",
        "with --exec: some records failed (or passed their --deadline), as xargs says when a command failed",
    ),
    (
        "126, 127",
        "with --exec: the command is not executable (126) or not found (127)",
    ),
    (
        "128 + n",
        "stopped by signal n: 129 SIGHUP, 130 SIGINT, 143 SIGTERM, and the other signals that end a process by default (SIGUSR2, SIGALRM, ...)",
    ),
];

/// What the exit statuses' precedence is, for the man page and `--help`.
pub const EXIT_PRECEDENCE: &str = "When several apply, a failed write wins, then an overflow (3), \
     then a --share state that cannot be reached (4), then a command that cannot run (126, 127), \
     then a signal (128 + n), then a record or input error (1), then failed jobs (123).";

/// A paragraph of the manual: `(tag, text)`; an empty tag is plain text.
pub type Paragraph = (&'static str, &'static str);

/// What the DESCRIPTION of the man page says after the summary above
/// `Cli`: (subsection title, or "" for none; paragraphs).
pub const DESCRIPTION: &[(&str, &[Paragraph])] = &[
    (
        "",
        &[
            ("", "FILEs are read in order; - or no FILE means stdin. An unterminated last record of a file gets the delimiter when another file follows, so records never merge across files; otherwise the output is the input byte for byte."),
            ("", "Records leave on an exact schedule (GCRA): record k is due at anchor + k\u{b7}T, with the rate kept as a fraction so that it never drifts. Waking a little late (up to the slack: half an interval, 2 to 5 ms) keeps the schedule; a longer stall (idle input, blocked stdout, a busy machine) restarts it from now, with no catch-up burst. At most burst + \u{230a}rate \u{d7} slack\u{230b} records leave back to back: --burst below 500/s, a few more above. The first record leaves at once, and drip exits as soon as the last one is written."),
        ],
    ),
    (
        "Admission",
        &[
            ("", "Records are decided one at a time, in input order, as they arrive. If no record is waiting ahead of it and every limit allows a departure now, a record leaves at once and takes no place in the bucket; otherwise it waits in the bucket if there is room, and leaves as soon as every limit allows; otherwise the overflow policy applies. A dropped or expired record takes no slot of the schedule. The outcome never depends on how the input was cut into reads."),
            ("", "While a write to stdout has been under way for longer than the slack, stdout counts as blocked and arriving records wait (and count against the capacity)."),
        ],
    ),
    (
        "Several limits",
        &[
            ("", "Give --rate once per limit, each with its own burst after a colon (-r 10/s -r 500/min:50), and --byte-rate for bytes (a record of n bytes spends n). A record leaves only when every limit allows it and then takes its slot in all of them, so no window of length W holds more than burst + rate \u{d7} (W + slack) of any one limit's units. A record larger than a byte rate's burst leaves alone once a full burst is saved up, and the next record waits until it is paid for. --burst beside several --rate limits is refused as ambiguous."),
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
            ("", "Every record read ends up in exactly one of: written, dropped by policy (dropped_newest, dropped_oldest), expired (--max-wait), skipped (over --max-record or --capacity-bytes under --oversize skip), or undelivered (still queued, or being written, when drip stopped or stdout closed). The counts always add up: read = written + dropped_newest + dropped_oldest + expired + skipped + undelivered. Every record not written goes to the --dead-letter FILE when one is set."),
        ],
    ),
    (
        "The live display",
        &[
            ("", "When stderr is a terminal, drip draws one line on it: the elapsed time, the bucket's fill as a gauge (depth/capacity), records in, out and dropped, the output rate (measured from the times records left, over at least ten records and a second, or the last ten seconds at low rates; -/s until two have left), an ETA from that measured rate when the input's size is known, and a sign when stdout holds records up: output slow (records are waiting, a write to stdout was under way at half or more of the redraws of the last second, and less than 90% of the rate leaves) or output blocked (a write under way for 250 ms). On a narrow terminal the gauge goes first, then the counts, so the queue, the rate, the ETA and the sign stay. At exit the line is cleared and the summary printed in its place."),
            ("", "When stdout is the same terminal, the records are the progress: drip draws no display (and prints no summary) unless --progress asks; then the display keeps to the bottom row while the records scroll above it. --progress also draws it when stderr is not a terminal; -q turns it off."),
        ],
    ),
    (
        "Statistics",
        &[
            ("--stats", "At exit (and on SIGUSR1) a summary on stderr, broken between clauses into lines of at most 80 columns, each starting drip: \u{2014} read, written, dropped (newest, oldest), expired, skipped (when any), undelivered; max depth, max wait; rate, elapsed. The rate is taken between the first and the last record written: the records written after the first write over the time since it, (written \u{2212} 1) / span when records leave one at a time; it is left out when fewer than two writes were made. Elapsed is the wall time of the whole run. With --key the keys' lines follow, broken the same way: keys seen (remembered, busy: with records waiting), the records of new keys dropped because every remembered key was busy (when any), and the keys that wrote, lost (dropped or expired) and hold waiting the most records, ten of each. A key is shown safe for a terminal: a backslash as \\\\, tab, newline and carriage return as \\t, \\n, \\r, other control bytes and invalid UTF-8 as \\xNN, control and direction-changing characters beyond ASCII as \\u{NNNN}; in double quotes when empty or holding a blank, comma, semicolon or quote, or spelled (no key), the name of the lane of records without a key; cut to 40 characters, ending in \u{2026}. With --share, the shared NAME: ... lines come last."),
            ("--stats-json", "The summary as one JSON object: read, written, dropped_newest, dropped_oldest, expired, skipped, undelivered, bytes_read, bytes_written, max_depth (records), max_wait_ms (the longest any written record waited), elapsed_ms, rate (records per second between the first and last write; null when fewer than two writes were made), span_ms (the time between them), succeeded and failed (0 without --exec); with --exec, the runner's figures; with --key, a keys object: keys_seen (keys taken into memory, the no-key lane included; a key forgotten and seen again counts again), keys (remembered), busy_keys (keys with records waiting), dropped_unremembered (records of new keys dropped because every remembered key was busy, also in dropped_newest) and top_written, top_dropped, top_waiting (the ten keys with the most records, as [key, count] pairs). A key is a JSON string of its bytes: valid UTF-8 as it is, a backslash as \\\\, each byte of invalid UTF-8 as \\xNN; the no-key lane is null. The lists cover the keys remembered at the end (a key forgotten when idle takes its counts with it; the totals keep them). When drip stops with records waiting, busy_keys and top_waiting are taken at the stop, before those records are counted undelivered. With --share, a share object: name, reservations, slots_forfeited, state_lost and failed_calls (as on the --stats line shared NAME: ...), for the global limits (left out when only --key-rate is shared), and with --key a per_key object with the same four for the limits per key (as on the line shared NAME per key: ...)."),
            ("--stats-interval", "One JSON line per interval, on stderr or in the --stats-json FILE before the summary: time (seconds since start), records_in, records_out and rate (during the interval), depth, oldest_age_ms, and the totals read, written, dropped_newest, dropped_oldest, expired, skipped; with --exec, succeeded, failed and the runner's figures; with --key, keys (remembered now) and busy_keys (keys with records waiting now)."),
        ],
    ),
];

/// The SIGNALS section: (signal, what drip does).
pub const SIGNALS: &[Paragraph] = &[
    ("SIGINT, SIGTERM, SIGHUP", "Stop at once: a record being written is finished, never cut; everything still queued goes to the dead letter and is counted as undelivered; the summary is printed as usual and drip exits with 128 + the signal's number. With --drain the first one only stops reading, and drip writes out what the bucket holds at the rate."),
    ("a second one", "Exit immediately, first moving what is still queued, and what a blocked write had not yet written, to the dead letter (when one is set); the record that write had begun may be cut on stdout then, and is in the dead letter whole. The display is cleared; no summary is printed."),
    ("SIGUSR1", "Print the summary on stderr, every line that --stats prints at exit, and carry on."),
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
    (
        "XDG_RUNTIME_DIR",
        "For --share NAME: the state file is $XDG_RUNTIME_DIR/drip/NAME.json when it is an absolute path to an existing directory (only drip/ is made in it, mode 0700); when it is unset, empty, relative or not there, /tmp/drip-$UID/NAME.json.",
    ),
    (
        "SSL_CERT_FILE, SSL_CERT_DIR",
        "For --share rediss://: the CA certificates drip trusts (a PEM file; a directory of them) instead of the system's store, as for a Redis whose certificate a private CA signed.",
    ),
];

/// The DRIP CTL section: steering a running drip.
pub const CONTROL: &[Paragraph] = &[
    ("", "Every running drip, unless given --no-control, listens on a Unix socket in the directory of the --share state files (see FILES), mode 0600 in a directory of mode 0700, named by its pid and its --name. It answers only its own user (the peer's uid, from the kernel: SO_PEERCRED), one request per connection, one line of JSON. The socket is removed at every way out; one left by a drip killed with SIGKILL is removed by the next drip ctl list."),
    ("drip ctl list", "Every running drip of this user as one JSON array: pid, name, rate, byte_rate, key_rate and jobs when set, paused, depth, read, written, started (seconds since the epoch)."),
    ("drip ctl TARGET stats", "The --stats-json object now (with \"paused\": true while paused). TARGET is a pid or a --name."),
    ("drip ctl TARGET keys", "With --key: the keys seen, remembered and busy, and the top keys."),
    ("drip ctl TARGET jobs", "With --exec: the runner's figures, the job slots (jobs) and each running job's number and record."),
    ("drip ctl TARGET pause, resume", "While paused nothing leaves: the bucket fills, the overflow policy applies as always, --max-wait and --deadline go on counting, and a retry waits too. The display says paused."),
    ("drip ctl TARGET rate RATE[:BURST] [rate ...] [byte-rate SIZE/UNIT[:BURST] ...]", "New limits from now on: the rates given replace all the --rate limits, the byte rates all the --byte-rate limits (a kind not given stays; rate inf removes the record limits). The next record leaves one interval of the new rate after the last one that left: no credit saved under the old rate carries over, and raising the rate sends no catch-up burst; within one interval of the old rate or 100 ms, whichever is longer, the new rate is in force. A drip started with --rate inf, or given --share (its limits are the state's, the same for every drip on it), refuses a change of rate."),
    ("drip ctl TARGET key-rate RATE[:BURST]", "A new limit per key from now on, each key counted from its last record; a key already due keeps its turn."),
    ("drip ctl TARGET -j N", "With --exec: N job slots from now on; lowered, running jobs finish and no new one starts until fewer than N run."),
    ("", "Each answer (but list's) is the drip's entry, as list gives it, after the change. An error is one line on stderr and exit status 1: no such drip, a refusal, a bad command. ctl is a subcommand only as drip's first word: to read a file named ctl first, give it as ./ctl."),
];

/// The FILES section.
pub const FILES: &[Paragraph] = &[
    ("FILE", "Inputs, read in order; - is stdin."),
    ("--dead-letter FILE", "Appended to (created if missing): every record not written to stdout, byte-exact with its delimiter, in the order it left the bucket. A file that does not end with the delimiter gets one first."),
    ("--stats-json FILE", "Created or truncated: the summary as one JSON object, after the --stats-interval lines if any."),
    ("", "- is refused for both (status 2): stdout carries the records, and the two would mix."),
    ("--metrics FILE", "Replaced whole (written to a temporary file beside it, then renamed) every --stats-interval, or each second, and at exit: the figures in the Prometheus text format, for node_exporter's textfile collector. A FILE that cannot be written stops drip at the start with status 1."),
    ("$XDG_RUNTIME_DIR/drip/PID.ctl, PID.NAME.ctl", "The control socket of a running drip (see DRIP CTL), in the same directory as the --share state files."),
    ("$XDG_RUNTIME_DIR/drip/NAME.json, /tmp/drip-$UID/NAME.json", "The state of --share NAME on this host (see ENVIRONMENT for which): a small JSON file (the limits, a schedule per limit and per busy key, the boot id), mode 0600 in a directory of mode 0700, changed under flock. A directory of another user's, or one others may write to, is refused; a directory or file drip cannot use stops it with status 4, naming the path."),
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
/// dropped, expired, skipped (--oversize skip) or reported as undelivered.
#[derive(Debug, Parser)]
#[command(
    name = "drip",
    version,
    after_help = after_help(),
    max_term_width = 100,
    args_override_self = true,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Files to read in order; `-` or none means stdin.
    #[arg(value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub files: Vec<PathBuf>,

    /// Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s,
    /// a bare 10 (per second), or inf (unlimited) for no pacing; the period
    /// is at most 100 years. Give it again for several limits at once, each
    /// with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]
    #[arg(short, long, value_name = "RATE[:BURST]", value_parser = rate_arg, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub rate: Vec<(Rate, Option<u64>)>,

    /// Bytes per unit of time, delimiters included: 1MiB/s, 500KB/s, 10GB/h;
    /// a record of n bytes spends n. BURST (a size, default 1 byte) is how
    /// many bytes may leave back to back; a record larger than BURST leaves
    /// alone once a full burst is saved, and the next waits until it is paid
    /// for. May be given more than once
    #[arg(long, value_name = "SIZE/UNIT[:BURST]", value_parser = byte_rate_arg, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub byte_rate: Vec<(Rate, u64)>,

    /// One record every DURATION (100ms, 2s, 1m; at most 100y): another way
    /// to give the rate
    #[arg(short, long, value_name = "DURATION", value_parser = interval_arg, value_hint = ValueHint::Other, conflicts_with = "rate", allow_hyphen_values = true)]
    pub interval: Option<Duration>,

    /// Records that may leave back to back after an idle spell (token bucket);
    /// the long-run rate is unchanged. 1 means strict spacing below 500/s;
    /// from 500/s up, a wake-up up to 2 ms late also sends the records due
    /// meanwhile: at most N + rate × 2ms together. With several --rate
    /// limits, give each its burst as RATE:BURST instead [default: 1]
    #[arg(short, long, value_name = "N", value_parser = positive_u64, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub burst: Option<u64>,

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

    /// A record over --max-record or --capacity-bytes: fail (stop reading,
    /// exit 1) or skip (stream it to --dead-letter as it is read, count it
    /// as skipped, and read on)
    #[arg(long, value_name = "POLICY", default_value = "fail", value_parser = Choices { parse: oversize_arg, values: OVERSIZE_POLICIES })]
    pub oversize: Oversize,

    /// Expire records that waited in the bucket longer than DURATION (at most
    /// 100y) instead of writing them
    #[arg(long, value_name = "DURATION", value_parser = interval_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub max_wait: Option<Duration>,

    /// Append every record not written to stdout (dropped, expired,
    /// undelivered) to FILE, byte-exact, in the order it left the bucket
    /// (not `-`: stdout carries the records)
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath)]
    pub dead_letter: Option<PathBuf>,

    /// On the first stopping signal (SIGINT, SIGTERM, SIGHUP, ...), stop
    /// reading but write what the bucket holds at the rate before exiting
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

    /// Every DURATION (10ms to 100y), write one JSON line of stats to stderr
    /// (or to --stats-json FILE)
    #[arg(long, value_name = "DURATION", value_parser = stats_interval_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub stats_interval: Option<Duration>,

    /// Keep FILE up to date with the figures in the Prometheus text format
    /// (records by fate, depth, oldest age, rate, jobs, retries, overload
    /// pauses, --share's calls, the top keys): written anew and renamed
    /// over FILE every --stats-interval (or each second) and at exit, for
    /// node_exporter's textfile collector
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath)]
    pub metrics: Option<PathBuf>,

    /// Name this drip for `drip ctl` (1 to 64 letters, digits, `_`, `-`;
    /// not all digits); it is always reachable by its pid too
    #[arg(long, value_name = "NAME", value_parser = crate::control::check_name, value_hint = ValueHint::Other)]
    pub name: Option<String>,

    /// Listen on no control socket: `drip ctl` cannot reach this drip
    #[arg(long)]
    pub no_control: bool,

    /// Limit records per key: SPEC is a field number (--key 1; fields split
    /// on blanks, or on --field-separator) or a regular expression whose
    /// first capture group is the key (--key '^https?://([^/:]+)'; start it
    /// with (?-u) to match bytes that are not UTF-8), found in the record
    /// without its delimiter (or a CR before a newline). Records with no
    /// key (no such field, no match) share one "no key" lane. Each
    /// key waits in its own queue at --key-rate; keys due together take
    /// turns (round robin), so a noisy key never holds back a quiet one:
    /// within a key records keep their order, across keys the output order
    /// may differ from the input's. Needs --key-rate
    #[arg(long, value_name = "SPEC", value_parser = parse_key, value_hint = ValueHint::Other, action = clap::ArgAction::Append, help_heading = "Limits per key")]
    pub key: Vec<KeyArg>,

    /// Fields for --key N are separated by this byte (',' or an escape such
    /// as '\t') instead of runs of blanks
    #[arg(long, value_name = "BYTE", value_parser = delimiter_arg, value_hint = ValueHint::Other, help_heading = "Limits per key")]
    pub field_separator: Option<u8>,

    /// Each key's own limit, records per unit (as --rate, with its burst
    /// after a colon: 5/s:10). The global --rate limits, if any, still cap
    /// all records together: a record leaves when both allow. With --share,
    /// each key's limit holds for all the drips sharing it together (a
    /// record of a key with no slot reserved waits a round trip). Needs
    /// --key
    #[arg(long, value_name = "RATE[:BURST]", value_parser = key_rate_arg, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true, help_heading = "Limits per key")]
    pub key_rate: Vec<(Rate, Option<u64>)>,

    /// Records one key may have waiting; a key at this bound meets the
    /// overflow policy (drop-oldest then evicts its own oldest)
    /// [default: --capacity]
    #[arg(long, value_name = "N", value_parser = positive_usize, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Limits per key")]
    pub key_capacity: Option<usize>,

    /// Keys remembered at most. A key with nothing waiting whose schedule has
    /// recovered its full burst is idle and forgotten first (that changes no
    /// departure); when every key is busy, a record of a new key meets the
    /// overflow policy as if the bucket were full (drop-oldest drops it as
    /// the newest; block waits until a key is idle) [default: 100000]
    #[arg(long, value_name = "N", value_parser = positive_usize, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Limits per key")]
    pub max_keys: Option<usize>,

    /// Draw the live display on stderr even when it is not a terminal, or
    /// when stdout is the same terminal (the display then keeps to the
    /// bottom row and the records scroll above it)
    #[arg(long, conflicts_with = "quiet")]
    pub progress: bool,

    /// No progress display: stderr gets only errors and what --stats and
    /// --stats-interval ask for
    #[arg(short, long)]
    pub quiet: bool,

    /// Share the --rate limits (the default 1/s when no rate is given) and
    /// --byte-rate limits, and each key's --key-rate limit, with every drip
    /// given the same NAME (1 to 200 letters, digits, '.', '_', '-', ':';
    /// not starting with '.'): on this host with no server (a state file
    /// under $XDG_RUNTIME_DIR/drip or /tmp/drip-$UID), or on any host
    /// through Redis or Valkey: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME,
    /// rediss://... (TLS; trusting the system's CAs, or SSL_CERT_FILE),
    /// redis+unix:///SOCKET/NAME[?db=DB&user=USER&pass=PASSWORD],
    /// valkey://... (no other query string). All of them must give the same
    /// rates and bursts, in any order, per key too (else exit 2). Under a
    /// byte rate each reserved slot carries one record of at most the size
    /// it was reserved for
    #[arg(long, value_name = "NAME|URL", value_parser = shared::parse_target, value_hint = ValueHint::Other, action = clap::ArgAction::Append)]
    pub share: Vec<shared::Target>,

    /// When the shared state cannot be reached: wait (send nothing, say so
    /// on stderr unless -q, and retry with backoff; records wait in the
    /// bucket), local (pace alone at the rate divided by --share-peers
    /// until it answers again, warn once unless -q), or fail (exit 4). A setup no retry mends (a
    /// state file drip cannot use, a password the server wants or refuses)
    /// exits 4 under every policy
    #[arg(long, value_name = "POLICY", default_value = "wait", value_parser = Choices { parse: shared::parse_on_error, values: SHARE_ON_ERROR })]
    pub share_on_error: shared::OnError,

    /// How many drips share the limits, for --share-on-error local
    #[arg(long, value_name = "N", default_value = "1", value_parser = positive_u64, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub share_peers: u64,

    /// Running a command per record (`--exec`).
    #[command(flatten)]
    pub job_args: crate::jobs::JobArgs,

    /// `drip ctl`: steer a running drip.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// drip's subcommands. A file named like one is read as `./ctl`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Steer a running drip of this user: list them, change a rate, pause,
    /// resume, read its figures.
    ///
    /// `drip ctl list` prints every running drip (pid, name, rate, depth,
    /// written, started) as one JSON array. `drip ctl TARGET COMMAND`, with
    /// TARGET a pid or a --name, prints the drip's one-line JSON answer.
    /// COMMAND is one of: `stats` (the --stats-json object now), `keys`
    /// (the top keys), `jobs` (the running jobs), `pause`, `resume`,
    /// `rate RATE[:BURST]` and `byte-rate SIZE/UNIT[:BURST]` (each kind
    /// given replaces all the limits of that kind: `rate 10/s rate
    /// 500/min:50`), `key-rate RATE[:BURST]`, `-j N`. A new limit starts
    /// from now: the next record leaves one interval of the new rate after
    /// the last one, with no credit saved and no catch-up burst. A drip
    /// given --share refuses a change of its limits. Errors: one line on
    /// stderr, exit status 1 (no such drip, a refusal, a bad command).
    #[command(
        after_help = "Examples:\n  drip ctl list\n  drip ctl nightly rate 5/s\n  drip ctl 4242 pause\n  drip ctl nightly stats"
    )]
    Ctl(CtlArgs),
}

/// The words of `drip ctl`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// `list`, or the pid or --name of a running drip
    #[arg(value_name = "list|TARGET", value_hint = ValueHint::Other)]
    pub target: Option<String>,

    /// What to do: stats, keys, jobs, pause, resume, rate RATE[:BURST],
    /// byte-rate SIZE/UNIT[:BURST], key-rate RATE[:BURST], -j N
    #[arg(value_name = "COMMAND", trailing_var_arg = true, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub command: Vec<String>,
}

/// Parse `--rate`: `RATE` or `RATE:BURST`.
pub(crate) fn rate_arg(text: &str) -> Result<(Rate, Option<u64>), String> {
    let (rate_text, burst) = match text.rsplit_once(':') {
        Some((rate, burst)) => (rate, Some(burst_arg(burst)?)),
        None => (text, None),
    };
    let rate =
        parse_rate(rate_text).map_err(|why| format!("{why} (expected {RATE_FORMS}[:BURST])"))?;
    if rate == Rate::Unlimited && burst.is_some() {
        return Err("an unlimited rate takes no burst".into());
    }
    Ok((rate, burst))
}

/// Parse `--key-rate`: as `--rate`, but a limit (not `inf`).
pub(crate) fn key_rate_arg(text: &str) -> Result<(Rate, Option<u64>), String> {
    let forms = RATE_FORMS.trim_end_matches(", or inf");
    match rate_arg(text) {
        Ok((Rate::Unlimited, _)) => Err(format!(
            "each key needs a limit, not inf (expected {forms}[:BURST])"
        )),
        Ok(rate) => Ok(rate),
        Err(why) => Err(why.replace(RATE_FORMS, forms)),
    }
}

/// Parse `--byte-rate`: `SIZE/UNIT` or `SIZE/UNIT:BURST` (BURST a size).
pub(crate) fn byte_rate_arg(text: &str) -> Result<(Rate, u64), String> {
    let (rate_text, burst) = match text.rsplit_once(':') {
        Some((rate, burst)) => (rate, size_arg(burst)? as u64),
        None => (text, 1),
    };
    let rate = parse_byte_rate(rate_text)
        .map_err(|why| format!("{why} (expected {BYTE_RATE_FORMS}[:BURST])"))?;
    Ok((rate, burst))
}

/// Parse the burst after a colon.
fn burst_arg(text: &str) -> Result<u64, String> {
    positive_u64(text).map_err(|why| format!("burst '{text}': {why}"))
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

/// Parse a humantime duration (`250ms`, `2s`, `1m30s`) of at most
/// [`LONGEST`] (100 years): longer ones would wrap drip's deadlines.
fn duration_arg(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{e} (expected a duration such as 100ms, 2s, 1m)"))?;
    if d > LONGEST {
        return Err(format!(
            "must be at most {LONGEST_TEXT} ({}s)",
            LONGEST.as_secs()
        ));
    }
    Ok(d)
}

fn positive_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of at least 1".into()),
    }
}

pub(crate) fn positive_usize(text: &str) -> Result<usize, String> {
    positive_u64(text).and_then(|n| usize::try_from(n).map_err(|_| "too large".into()))
}

fn overflow_arg(text: &str) -> Result<Overflow, String> {
    text.parse()
}

fn oversize_arg(text: &str) -> Result<Oversize, String> {
    text.parse()
}

/// What `--share-on-error` can say, for completion and help: (value,
/// meaning).
pub const SHARE_ON_ERROR: &[(&str, &str)] = &[
    (
        "wait",
        "send nothing, retry with backoff; records wait in the bucket",
    ),
    (
        "local",
        "pace alone at the rate divided by --share-peers, warn once",
    ),
    ("fail", "exit with status 4"),
];

/// The oversize policies, for completion and help: (value, meaning).
pub const OVERSIZE_POLICIES: &[(&str, &str)] = &[
    ("fail", "stop reading at the record, exit 1"),
    (
        "skip",
        "stream it to --dead-letter, count it as skipped, read on",
    ),
];

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
    /// The limits every record must pass (none: unlimited, `--rate inf`).
    pub limits: Vec<Limit>,
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
    /// What becomes of a record over the limits.
    pub oversize: Oversize,
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
    /// The limits are shared with other drips (`--share`).
    pub share: Option<shared::Share>,
    /// The command to run per record (`--exec`), instead of stdout.
    pub jobs: Option<crate::jobs::JobConfig>,
    /// Limits per key (`--key`, `--key-rate`), if any.
    pub key: Option<KeyConfig>,
    /// `--metrics`: the Prometheus text file kept up to date.
    pub metrics: Option<PathBuf>,
    /// `--name`, for `drip ctl`.
    pub name: Option<String>,
    /// Listen on a control socket (no `--no-control`).
    pub control: bool,
}

impl Config {
    /// A configuration with drip's defaults reading `inputs`.
    pub fn new(inputs: Vec<Input>) -> Config {
        Config::try_from(Cli::parse_from(["drip"]))
            .expect("the defaults are valid")
            .with_inputs(inputs)
    }

    /// The highest record rate the limits allow, records per second
    /// (infinite when no limit counts records), for display only.
    pub fn records_per_second(&self) -> f64 {
        self.limits
            .iter()
            .filter(|l| l.unit == Unit::Records)
            .map(|l| l.rate.per_second())
            .fold(f64::INFINITY, f64::min)
    }

    fn with_inputs(mut self, inputs: Vec<Input>) -> Config {
        self.inputs = inputs;
        self
    }
}

/// The limits that `--rate`, `--interval`, `--burst` and `--byte-rate` give.
///
/// # Errors
/// `--burst` beside several `--rate`s, or beside a `RATE:BURST`: which
/// limit it is for would be a guess.
fn limits(cli: &Cli) -> Result<Vec<Limit>, clap::Error> {
    use clap::CommandFactory;
    let ambiguous =
        |why: &str| Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, why));
    let mut rates = cli.rate.clone();
    if let Some(interval) = cli.interval {
        rates.push((
            Rate::per_interval(interval).expect("checked non-zero"),
            None,
        ));
    }
    if let Some(burst) = cli.burst {
        match rates.as_mut_slice() {
            [(Rate::Unlimited, _)] => {
                return ambiguous("--burst: an unlimited rate takes no burst");
            }
            [(_, own @ None)] => *own = Some(burst),
            [] if !cli.byte_rate.is_empty() => {
                return ambiguous(
                    "--burst: it is a burst of records; give a byte rate's burst as SIZE/UNIT:BURST",
                );
            }
            [] if !cli.key_rate.is_empty() => {
                return ambiguous(
                    "--burst: there is no --rate for it; give each key's burst as --key-rate RATE:BURST",
                );
            }
            [] => rates.push((ONE_PER_SECOND, Some(burst))),
            [(_, Some(_))] => {
                return ambiguous("--burst: the rate already has its burst (RATE:BURST); give one")
            }
            _ => {
                return ambiguous(
                    "--burst: several --rate limits; give each its own burst as RATE:BURST",
                )
            }
        }
    }
    // With limits per key, no --rate means no global limit.
    if rates.is_empty() && cli.byte_rate.is_empty() && cli.key_rate.is_empty() {
        rates.push((ONE_PER_SECOND, None));
    }
    let records = rates
        .into_iter()
        .filter(|(rate, _)| *rate != Rate::Unlimited)
        .map(|(rate, burst)| Limit {
            rate,
            burst: burst.unwrap_or(1),
            unit: Unit::Records,
        });
    let bytes = cli.byte_rate.iter().map(|&(rate, burst)| Limit {
        rate,
        burst,
        unit: Unit::Bytes,
    });
    Ok(records.chain(bytes).collect())
}

/// Limits per key from `--key`, `--key-rate`, `--field-separator`,
/// `--key-capacity` and `--max-keys`.
///
/// # Errors
/// One of `--key` and `--key-rate` without the other, either given twice,
/// an unlimited key rate, a key option without `--key`, or a field
/// separator that is the record delimiter.
fn key_config(cli: &Cli, delimiter: u8) -> Result<Option<KeyConfig>, clap::Error> {
    use clap::CommandFactory;
    let usage =
        |why: &str| Err(Cli::command().error(clap::error::ErrorKind::MissingRequiredArgument, why));
    let (arg, (rate, burst)) = match (cli.key.as_slice(), cli.key_rate.as_slice()) {
        ([arg], [rate]) => (arg.clone(), *rate),
        ([_, _, ..], _) => return usage("--key: given twice; a record has one key"),
        (_, [_, _, ..]) => return usage(
            "--key-rate: given twice; each key has one limit (--rate gives limits for all records)",
        ),
        ([_], []) => return usage("--key: needs --key-rate, each key's limit"),
        ([], [_]) => return usage("--key-rate: needs --key, which part of a record is its key"),
        ([], []) => {
            for (given, flag) in [
                (
                    cli.field_separator.is_some(),
                    "--field-separator: needs --key N",
                ),
                (cli.key_capacity.is_some(), "--key-capacity: needs --key"),
                (cli.max_keys.is_some(), "--max-keys: needs --key"),
            ] {
                if given {
                    return usage(flag);
                }
            }
            return Ok(None);
        }
    };
    if cli.field_separator.is_some() && !matches!(arg, KeyArg::Field(_)) {
        return usage("--field-separator: --key is a regular expression, not a field number");
    }
    if cli.field_separator == Some(delimiter) {
        return usage("--field-separator: it is the record delimiter, which no field contains");
    }
    Ok(Some(KeyConfig {
        spec: KeySpec::new(arg, cli.field_separator),
        rate,
        burst: burst.unwrap_or(1),
        max_keys: cli.max_keys.unwrap_or(DEFAULT_MAX_KEYS),
        key_capacity: cli.key_capacity.unwrap_or(cli.capacity),
    }))
}

/// Keys remembered at most unless `--max-keys` says.
const DEFAULT_MAX_KEYS: usize = 100_000;

/// The default rate.
const ONE_PER_SECOND: Rate = Rate::Limited {
    count: 1,
    period_ns: 1_000_000_000,
};

/// What `--share` and its companions give, checked against the limits.
///
/// # Errors
/// `--share` with no rate to share (`--rate inf` alone); `--share` given
/// twice; `--share-on-error` or
/// `--share-peers` without `--share`.
fn share(cli: &Cli, limits: &[Limit]) -> Result<Option<shared::Share>, clap::Error> {
    use clap::CommandFactory;
    let refuse =
        |why: &str| Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, why));
    if cli.share.len() > 1 {
        return refuse("--share: given twice; a drip shares its limits under one NAME");
    }
    let Some(target) = cli.share.first().cloned() else {
        if cli.share_on_error != shared::OnError::Wait || cli.share_peers != 1 {
            return refuse("--share-on-error and --share-peers need --share");
        }
        return Ok(None);
    };
    if limits.is_empty() && cli.key_rate.is_empty() {
        return refuse("--share: there is no rate to share (--rate inf)");
    }
    Ok(Some(shared::Share {
        target,
        on_error: cli.share_on_error,
        peers: cli.share_peers,
        quiet: cli.quiet,
    }))
}

impl TryFrom<Cli> for Config {
    type Error = clap::Error;

    fn try_from(cli: Cli) -> Result<Config, clap::Error> {
        use clap::CommandFactory;
        let limits = limits(&cli)?;
        let share = share(&cli, &limits)?;
        let jobs = cli.job_args.config().map_err(|flag| {
            let why = format!("{flag}: only with --exec (the command to run per record)");
            Cli::command().error(clap::error::ErrorKind::MissingRequiredArgument, why)
        })?;
        let delimiter = if cli.null {
            0
        } else {
            cli.delimiter.unwrap_or(b'\n')
        };
        let key = key_config(&cli, delimiter)?;
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
        let progress = if cli.quiet {
            ProgressMode::Never
        } else if cli.progress {
            ProgressMode::Always
        } else {
            ProgressMode::Auto
        };
        Ok(Config {
            inputs,
            limits,
            capacity: cli.capacity,
            capacity_bytes: cli.capacity_bytes,
            overflow: cli.overflow,
            delimiter,
            max_record: cli.max_record,
            oversize: cli.oversize,
            max_wait: cli.max_wait,
            dead_letter: cli.dead_letter,
            drain: cli.drain,
            stats: cli.stats,
            stats_json: cli.stats_json,
            stats_interval: cli.stats_interval,
            progress,
            share,
            jobs,
            key,
            metrics: cli.metrics,
            name: cli.name,
            control: !cli.no_control,
        })
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
        assert_eq!(
            c.limits,
            [Limit {
                rate: ONE_PER_SECOND,
                burst: 1,
                unit: Unit::Records
            }]
        );
        assert_eq!(c.capacity, 1000);
        assert_eq!(c.overflow, Overflow::Block);
        assert_eq!(c.delimiter, b'\n');
        assert_eq!(c.max_record, 64 << 20);
        assert_eq!(c.oversize, Oversize::Fail);
    }

    #[test]
    fn oversize_policies() {
        assert_eq!(oversize_arg("skip"), Ok(Oversize::Skip));
        assert_eq!(oversize_arg("fail"), Ok(Oversize::Fail));
        assert!(oversize_arg("drop").is_err());
        let c = config(&["--oversize", "skip"]).unwrap();
        assert_eq!(c.oversize, Oversize::Skip);
    }

    #[test]
    fn interval_sets_the_rate() {
        let c = config(&["-i", "250ms"]).unwrap();
        assert_eq!(c.records_per_second(), 4.0);
        assert!(Cli::try_parse_from(["drip", "-i", "1s", "-r", "2/s"]).is_err());
    }

    #[test]
    fn dash_is_stdin() {
        let c = config(&["a", "-", "b"]).unwrap();
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
        let c = config(&["-0"]).unwrap();
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
        let c = config(&["-c", "5", "-c", "7", "-q", "-q"]).unwrap();
        assert_eq!(c.capacity, 7);
    }

    fn config(args: &[&str]) -> Result<Config, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("drip").chain(args.iter().copied()))?;
        Config::try_from(cli)
    }

    fn rate(text: &str) -> Rate {
        parse_rate(text).unwrap()
    }

    #[test]
    fn several_limits_each_with_its_burst() {
        let c = config(&[
            "-r",
            "10/s",
            "-r",
            "500/min:50",
            "--byte-rate",
            "1MiB/s:64KiB",
        ])
        .unwrap();
        assert_eq!(
            c.limits,
            [
                Limit {
                    rate: rate("10/s"),
                    burst: 1,
                    unit: Unit::Records
                },
                Limit {
                    rate: rate("500/min"),
                    burst: 50,
                    unit: Unit::Records
                },
                Limit {
                    rate: parse_byte_rate("1MiB/s").unwrap(),
                    burst: 64 << 10,
                    unit: Unit::Bytes
                },
            ]
        );
        // One --rate takes --burst as before.
        let c = config(&["-r", "10/s", "-b", "5"]).unwrap();
        assert_eq!(c.limits[0].burst, 5);
        // inf adds no limit; alone, nothing is limited.
        assert!(config(&["-r", "inf"]).unwrap().limits.is_empty());
        assert_eq!(config(&["-r", "inf", "-r", "3/s"]).unwrap().limits.len(), 1);
        // A byte rate alone limits bytes only.
        let c = config(&["--byte-rate", "1KB/s"]).unwrap();
        assert_eq!(c.limits.len(), 1);
        assert_eq!(c.records_per_second(), f64::INFINITY);
    }

    #[test]
    fn an_ambiguous_burst_is_refused() {
        let e = config(&["-r", "10/s", "-r", "500/min", "-b", "5"]).unwrap_err();
        assert!(e.to_string().contains("RATE:BURST"), "{e}");
        assert!(config(&["-r", "10/s:3", "-b", "5"]).is_err());
        assert!(config(&["-r", "inf:5"]).is_err());
        assert!(config(&["-r", "inf", "-b", "5"]).is_err());
        let e = config(&["--byte-rate", "1KiB/s", "-b", "3"]).unwrap_err();
        assert!(e.to_string().contains("SIZE/UNIT:BURST"), "{e}");
        assert!(config(&["-r", "10/s:0"]).is_err());
        assert!(config(&["--byte-rate", "1MiB"]).is_err());
        assert!(config(&["--byte-rate", "1MiB/s:0"]).is_err());
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
    fn durations_have_a_ceiling() {
        assert_eq!(duration_arg("100y"), Ok(LONGEST));
        assert_eq!(stats_interval_arg("100y"), Ok(LONGEST));
        for text in ["100y 1ns", "101y", "18446744073s", "18446744074s"] {
            let e = interval_arg(text).unwrap_err();
            assert!(e.contains("at most 100 years"), "{text}: {e}");
            assert!(stats_interval_arg(text).is_err(), "{text}");
        }
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
        let c = config(&["-o", "drop-oldest"]).unwrap();
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
                "files" | "dead_letter" | "stats_json" | "joblog" => {
                    assert_eq!(hint, ValueHint::FilePath, "{id}")
                }
                "exec" => assert_eq!(hint, ValueHint::CommandName),
                _ if arg.get_num_args().is_some_and(|n| n.takes_values())
                    && arg.get_possible_values().is_empty() =>
                {
                    assert_eq!(hint, ValueHint::Other, "{id}");
                    other += 1;
                }
                _ => {}
            }
        }
        // rate, byte-rate, interval, burst, capacity, capacity-bytes,
        // delimiter, max-record, max-wait, stats-interval, share,
        // share-peers; jobs, retries, retry-on, overload-on, backoff,
        // timeout, deadline; key, field-separator, key-rate, key-capacity,
        // max-keys.
        assert_eq!(other, 24);
    }

    #[test]
    fn dash_is_refused_for_files_drip_writes() {
        assert!(not_stdout("-".into()).is_err());
        assert_eq!(not_stdout("./-".into()), Ok(PathBuf::from("./-")));
        for flag in ["--stats-json", "--dead-letter", "--joblog"] {
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
