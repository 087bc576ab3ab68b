//! The flags: the clap definition of drip's command line, each flag's help
//! and the parser of its value (the parsers live with the types they
//! parse).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PathBufValueParser, PossibleValue, TypedValueParser};
use clap::{Parser, ValueHint};

use super::manual::{ENVIRONMENT, EXAMPLES, EXIT_PRECEDENCE, EXIT_STATUSES};
use crate::bucket::{Overflow, POLICIES};
use crate::budget::{parse_budget, Budget, Exhausted, EXHAUSTED};
use crate::cost::{parse_cost_arg, parse_named_cost_rate, parse_settle_arg, CostGiven, Estimate};
use crate::input::{Oversize, OVERSIZE_POLICIES};
use crate::jobs::retry::Backoff;
use crate::jobs::{
    backoff_arg, job_duration_arg, jobs_arg, retries_arg, statuses_arg, window_arg, Statuses,
};
use crate::key::{parse_key, KeyArg};
use crate::keyed::rates::{parse_key_rate_arg, KeyRateArg};
use crate::output::not_stdout;
use crate::quantity::{
    parse_bound, parse_byte, parse_count, parse_count_usize, parse_duration, parse_interval,
    parse_size, Bound,
};
use crate::rate::{parse_byte_rate_burst, parse_cost_rate_burst, parse_rate_burst, Rate};
use crate::shared;

/// `--ramp` as given: the start rate, if any, and the duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RampArg {
    /// The rate the ramp starts at (`None`: 0).
    pub start: Option<Rate>,
    /// How long it rises for.
    pub over: Duration,
}

/// Read `--ramp`: `DURATION` or `START:DURATION`.
///
/// # Errors
/// A bad rate or duration, or an unlimited start.
pub fn parse_ramp(text: &str) -> Result<RampArg, String> {
    let (start, over) = match text.rsplit_once(':') {
        Some((start, over)) => {
            let rate = crate::rate::parse_rate(start)
                .map_err(|why| format!("the start rate '{start}': {why}"))?;
            if rate == Rate::Unlimited {
                return Err("the start rate must be a rate, not inf".into());
            }
            (Some(rate), over)
        }
        None => (None, text),
    };
    let over = parse_interval(over).map_err(|why| format!("the duration '{over}': {why}"))?;
    Ok(RampArg { start, over })
}

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
    disable_help_flag = true,
    disable_version_flag = true
)]
pub struct Cli {
    /// Files to read in order; `-` or none means stdin.
    #[arg(value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "Arguments")]
    pub files: Vec<PathBuf>,

    /// Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s,
    /// a bare 10 (per second), or inf (unlimited) for no pacing; the period
    /// is at most 100 years. Give it again for several limits at once, each
    /// with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]
    #[arg(short, long, value_name = "RATE[:BURST]", value_parser = parse_rate_burst, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true, help_heading = "Pace")]
    pub rate: Vec<(Rate, Option<u64>)>,

    /// Bytes per unit of time, delimiters included: 1MiB/s, 500KB/s, 10GB/h;
    /// a record of n bytes spends n. BURST (a size, default 1 byte) is how
    /// many bytes may leave back to back; a record larger than BURST leaves
    /// alone once a full burst is saved, and the next waits until it is paid
    /// for. May be given more than once
    #[arg(long, value_name = "SIZE/UNIT[:BURST]", value_parser = parse_byte_rate_burst, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true, help_heading = "Pace")]
    pub byte_rate: Vec<(Rate, u64)>,

    /// Where a record's cost is (tokens, a weight), for --cost-rate: a field
    /// number (--cost 2; fields split on blanks, or on --field-separator),
    /// a regular expression whose first capture group is the cost
    /// (--cost '"tokens": *([0-9]+)'), or an estimate: terms joined by +,
    /// each a product (*) of whole numbers, bytes (the record's size) and
    /// JSON paths into the record (max_tokens, a.b, messages.0; n?1 for 1
    /// where there is no n), perhaps divided by a whole number and rounded
    /// up (--cost 'bytes/4+max_tokens*n?1'), in the record without its
    /// delimiter. A cost is a whole number from 0 to 2^53, blanks around
    /// it allowed. A record whose cost cannot be read (no such field, no
    /// match, not a whole number, not JSON) costs 1 and is still passed
    /// on; the first such record is named once on stderr. NAME=SPEC names
    /// a cost, spent by the --cost-rate limits that name it; may be given
    /// once unnamed and once for each name. Needs --cost-rate
    #[arg(long, value_name = "[NAME=]SPEC", value_parser = parse_cost_arg, value_hint = ValueHint::Other, action = clap::ArgAction::Append, help_heading = "Pace")]
    pub cost: Vec<CostGiven>,

    /// Cost per unit of time, as --rate (100000/min, 500/s); a record spends
    /// the cost --cost reads from it, as --byte-rate spends its size.
    /// BURST (default 1) is how much cost may leave back to back; a record
    /// costing more than BURST leaves alone once a full burst is saved, and
    /// the next waits until it is paid for. A record costing 0 waits for no
    /// cost limit. NAME=N/UNIT spends the cost named NAME, NAME+NAME=N/UNIT
    /// the named costs summed (in+out=40000/min); without a name, the
    /// unnamed cost. May be given more than once. With --share, shared as
    /// the byte rates are, each spending its own costs (but not beside a
    /// --byte-rate, and spending at most 4 different sets of costs). Needs
    /// --cost
    #[arg(long, value_name = "[NAME=]N/UNIT[:BURST]", value_parser = parse_named_cost_rate, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true, help_heading = "Pace")]
    pub cost_rate: Vec<(Option<String>, Rate, u64)>,

    /// A calendar budget: at most N records in each WINDOW (second, minute,
    /// hour, day, week or month) as the clock in ZONE shows it, ZONE a tz
    /// database name (America/Los_Angeles, Europe/Berlin, UTC; default the
    /// local zone, from TZ or the system). 10000/day@America/Los_Angeles
    /// resets at midnight Pacific; a day across a change to or from summer
    /// time lasts 23 or 25 hours, a week starts on Monday. Within a window
    /// the rates pace as usual; once its budget is spent, records wait for
    /// the next window (see --budget-exhausted). Without --rate, a budget
    /// alone does not pace records within the window. May be given more than
    /// once. With --share, one count per window for every drip on the NAME
    /// (kept in the shared state, so a drip started again finds it)
    #[arg(long, value_name = "N/WINDOW[@ZONE]", value_parser = parse_budget, value_hint = ValueHint::Other, action = clap::ArgAction::Append, help_heading = "Pace")]
    pub budget: Vec<Budget>,

    /// What a spent --budget does to the records waiting
    #[arg(long, value_name = "POLICY", default_value = "wait", value_parser = Choices { parse: str::parse::<Exhausted>, values: EXHAUSTED }, help_heading = "Pace")]
    pub budget_exhausted: Exhausted,

    /// One record every DURATION (100ms, 2s, 1m; at most 100y): another way
    /// to give the rate
    #[arg(short, long, value_name = "DURATION", value_parser = parse_interval, value_hint = ValueHint::Other, conflicts_with = "rate", allow_hyphen_values = true, help_heading = "Pace")]
    pub interval: Option<Duration>,

    /// Records that may leave back to back after an idle spell (token bucket);
    /// the long-run rate is unchanged. 1 means strict spacing below 500/s;
    /// from 500/s up, a wake-up up to 2 ms late also sends the records due
    /// meanwhile: at most N + rate × 2ms together. With several --rate
    /// limits, give each its burst as RATE:BURST instead [default: 1]
    #[arg(short, long, value_name = "N", value_parser = parse_count, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Pace")]
    pub burst: Option<u64>,

    /// Limits by the time of day: rows separated by ';', each [DAYS]
    /// [HH:MM-HH:MM] then a record rate (as --rate, with its burst) or
    /// 'pause'; '*' for always; the first row that matches the local clock
    /// is in force, and with none the command line's --rate. An item
    /// @ZONE (@Europe/Berlin) sets the zone, else the local one. A row
    /// changes the rate as 'drip ctl rate' does; under 'pause' nothing
    /// leaves (the display says until when: paused until 18:00). Not with
    /// --share. 'Mon-Fri 09:00-18:00 pause; * 50/s'
    #[arg(long, value_name = "ROWS", value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Pace")]
    pub schedule: Option<String>,

    /// Let the limits rise linearly to the rate over DURATION from the
    /// first record that leaves: from 0, or from START (a rate below
    /// --rate) as START:DURATION (10/s:60s). Every limit rises in step; the
    /// n-th record leaves when the rate's integral reaches n. Not with
    /// --share
    #[arg(long, value_name = "[START:]DURATION", value_parser = parse_ramp, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Pace")]
    pub ramp: Option<RampArg>,

    /// Records the bucket holds: a number (1000; 10k, 2M, 1G are 10^3, 10^6,
    /// 10^9 records, decimal; 1.5k is 1500), or a DURATION (30s, 5m, 1h,
    /// 2d; m is minutes, a month is spelled month) for what the schedule
    /// drains in that time, ⌊rate × DURATION⌋ records of the tightest
    /// --rate (with only --byte-rate limits, the bytes the tightest drains,
    /// as --capacity-bytes). --stats names the limit that set it. Not with
    /// --rate inf alone
    #[arg(short, long, value_name = "N|DURATION", default_value = "1000", value_parser = parse_bound, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Bucket")]
    pub capacity: Bound,

    /// Bytes the bucket holds, delimiters included (10KiB, 64MiB); full at
    /// either bound
    #[arg(long, value_name = "SIZE", value_parser = parse_size, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Bucket")]
    pub capacity_bytes: Option<usize>,

    /// What to do when the bucket is full
    #[arg(short, long, value_name = "POLICY", default_value = "block", value_parser = Choices { parse: str::parse::<Overflow>, values: POLICIES }, help_heading = "Bucket")]
    pub overflow: Overflow,

    /// Records end with NUL instead of newline, on input and output
    #[arg(
        short = '0',
        long = "null",
        conflicts_with = "delimiter",
        help_heading = "Bucket"
    )]
    pub null: bool,

    /// Records end with this byte: a character or an escape such as '\t',
    /// '\0' or '\x1e'
    #[arg(short, long, value_name = "BYTE", value_parser = parse_byte, value_hint = ValueHint::Other, help_heading = "Bucket")]
    pub delimiter: Option<u8>,

    /// Longest record accepted, delimiter excluded (512KiB, 64MiB; KB means
    /// 1000 bytes, KiB 1024)
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Bucket")]
    pub max_record: usize,

    /// A record over --max-record or --capacity-bytes: fail (stop reading,
    /// exit 1) or skip (stream it to --dead-letter as it is read, count it
    /// as skipped, and read on)
    #[arg(long, value_name = "POLICY", default_value = "fail", value_parser = Choices { parse: str::parse::<Oversize>, values: OVERSIZE_POLICIES }, help_heading = "Bucket")]
    pub oversize: Oversize,

    /// Expire records that waited in the bucket longer than DURATION (at most
    /// 100y) instead of writing them. Under a drop or fail policy, a record
    /// the schedule cannot let go within DURATION of its arrival is refused
    /// as it arrives: drop-newest drops it, drop-oldest evicts the oldest
    /// waiting records until it can make it, fail stops (see Service level
    /// in drip(1))
    #[arg(long, value_name = "DURATION", value_parser = parse_interval, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Bucket")]
    pub max_wait: Option<Duration>,

    /// Append every record not written to stdout (dropped, expired,
    /// undelivered) to FILE, byte-exact, each with its delimiter, in the
    /// order it left the bucket (not `-`: stdout carries the records)
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath, help_heading = "Bucket")]
    pub dead_letter: Option<PathBuf>,

    /// On the first stopping signal (SIGINT, SIGTERM, SIGHUP, ...), stop
    /// reading but write what the bucket holds at the rate before exiting
    #[arg(long, help_heading = "Bucket")]
    pub drain: bool,

    /// Limit records per key: SPEC is `host` (the host of the URL that is
    /// the record, read by a URL parser: lower-cased, punycode, one IPv6
    /// spelling, no trailing dot, no default port, never the user or
    /// password), `host:N` (the host of the URL in field N), a field
    /// number (--key 1; fields split on blanks, or on --field-separator)
    /// or a regular expression whose first capture group is the key (--key
    /// '^user=([^ ]+)'; start it with (?-u) to match bytes that are not
    /// UTF-8), found in the record without its delimiter (or a CR before a
    /// newline). Records with no key (no such field, no match, not a URL
    /// with a host) share one "no key" lane. Each
    /// key waits in its own queue at --key-rate; keys due together take
    /// turns (round robin), so a noisy key never holds back a quiet one:
    /// within a key records keep their order, across keys the output order
    /// may differ from the input's. With --exec, an overload (429, 503,
    /// --overload-on) pauses only the refused record's key. Needs
    /// --key-rate or --key-rates
    #[arg(long, value_name = "SPEC", value_parser = parse_key, value_hint = ValueHint::Other, action = clap::ArgAction::Append, help_heading = "Keys")]
    pub key: Vec<KeyArg>,

    /// Fields for --key N and --key host:N are separated by this byte (',' or an escape such
    /// as '\t') instead of runs of blanks
    #[arg(long, value_name = "BYTE", value_parser = parse_byte, value_hint = ValueHint::Other, help_heading = "Keys")]
    pub field_separator: Option<u8>,

    /// Each key's own limit, records per unit (as --rate, with its burst
    /// after a colon: 5/s:10). The global --rate limits, if any, still cap
    /// all records together: a record leaves when both allow. With --share,
    /// each key's limit holds for all the drips sharing it together (a
    /// record of a key with no slot reserved waits a round trip). Given as
    /// KEY=RATE[:BURST] (again for each row), a row of the rate table as
    /// --key-rates reads it (github.com=1/s:2, '*.github.com=1/s'), which
    /// replaces the file's row for the same KEY; RATE[:BURST] alone is then
    /// the limit of the keys no row matches. Needs --key
    #[arg(long, value_name = "[KEY=]RATE[:BURST]", value_parser = parse_key_rate_arg, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true, help_heading = "Keys")]
    pub key_rate: Vec<KeyRateArg>,

    /// A rate table per key: each line of FILE a row, KEY RATE[:BURST]
    /// [JOBS] (blanks between; blank lines, and a word starting with # to
    /// the end of its line, skipped). JOBS, with --exec: at most JOBS jobs
    /// of each key the row matches at once, in place of --key-jobs. KEY is a key (github.com), *.DOMAIN (the
    /// keys ending in .DOMAIN: its subdomains, not DOMAIN itself) or *
    /// (every key). A key takes its exact row, else the longest *.DOMAIN
    /// matching it, else *, else --key-rate RATE, else no limit of its own.
    /// With --key host, a row's key is spelled as the hosts are (GitHub.COM.
    /// is github.com). drip ctl NAME key-rates FILE, or SIGHUP (which then
    /// stops drip no more), reads the table again, each key keeping its
    /// place in its schedule; a bad file is said and the table in force
    /// stays. With --share, the table is shared as --key-rate is: every drip
    /// on the NAME must start with the same rows, and drip ctl or SIGHUP on
    /// one changes it for all. Needs --key
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "Keys")]
    pub key_rates: Option<std::path::PathBuf>,

    /// Records one key may have waiting: a number (as --capacity: 500, 10k),
    /// or a DURATION for what --key-rate drains in that time (⌊key rate ×
    /// DURATION⌋); a key at
    /// this bound meets the overflow policy (drop-oldest then evicts its
    /// own oldest) [default: --capacity]
    #[arg(long, value_name = "N|DURATION", value_parser = parse_bound, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Keys")]
    pub key_capacity: Option<Bound>,

    /// With --exec: at most N jobs of one key running at once, beside -j
    /// for all keys (a key whose row of --key-rates has a JOBS column takes
    /// that instead). A key at its limit starts nothing until one of its
    /// jobs ends (its retries included): its records wait in its own
    /// queue, and the other keys go on. Records with no key count as one
    /// key. With it, --key needs no --key-rate: a key's jobs may be its
    /// only limit. With --share, a key's limit holds across every drip on
    /// the NAME (a lease per job, as --share-jobs takes, beside it if
    /// given): a record whose key the drips run N of waits for a lease in
    /// its -j slot (at most N such of a key), and the other keys go on
    #[arg(long, value_name = "N", value_parser = jobs_arg, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Keys")]
    pub key_jobs: Option<usize>,

    /// Keys remembered at most. A key with nothing waiting whose schedule has
    /// recovered its full burst is idle and forgotten first (that changes no
    /// departure); when every key is busy, a record of a new key meets the
    /// overflow policy as if the bucket were full (drop-oldest drops it as
    /// the newest; block waits until a key is idle) [default: 100000]
    #[arg(long, value_name = "N", value_parser = parse_count_usize, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Keys")]
    pub max_keys: Option<usize>,

    /// Share the --rate limits (the default 1/s when no rate is given) and
    /// --byte-rate limits, and each key's --key-rate limit, with every drip
    /// given the same NAME (1 to 200 letters, digits, '.', '_', '-', ':';
    /// not starting with '.'): on this host with no server (a state file
    /// under $XDG_RUNTIME_DIR/drip or /tmp/drip-$UID), or on any host
    /// through Redis or Valkey: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME,
    /// rediss://... (TLS; trusting the system's CAs, or SSL_CERT_FILE),
    /// redis+unix:///SOCKET/NAME[?db=DB&user=USER&pass=PASSWORD],
    /// valkey://... (no other query string); a primary behind Sentinel:
    /// redis+sentinel://HOST[:PORT],.../PRIMARY[/DB]/NAME (the sentinels
    /// asked for the primary, a failover followed; a password as for
    /// redis://); a Redis
    /// Cluster: redis+cluster://HOST[:PORT],.../NAME, or
    /// redis:// to any of its nodes. All of them must give the same
    /// rates and bursts, in any order, per key too (else exit 2). Under a
    /// byte rate each reserved slot carries one record of at most the size
    /// it was reserved for
    // The brackets are the help's optional parts, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "NAME|URL", value_parser = shared::parse_target, value_hint = ValueHint::Other, action = clap::ArgAction::Append, help_heading = "Share")]
    pub share: Vec<shared::Target>,

    /// When the shared state cannot be reached: wait (send nothing, say so
    /// on stderr unless -q, and retry with backoff; records wait in the
    /// bucket), local (pace alone at the rate divided by --share-peers
    /// until it answers again, and hold that pace 3 s more as it shares
    /// again; a shared --budget counts alone, up to N divided by
    /// --share-peers a window; warn once unless -q), or fail (exit 4). A setup no retry mends (a
    /// state file drip cannot use, a password the server wants or refuses,
    /// a server that is not Redis) exits 4 under every policy
    #[arg(long, value_name = "POLICY", default_value = "wait", value_parser = Choices { parse: shared::parse_on_error, values: shared::SHARE_ON_ERROR }, help_heading = "Share")]
    pub share_on_error: shared::OnError,

    /// How many drips share the limits, for --share-on-error local
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Share")]
    pub share_peers: u64,

    /// With --exec and --share: at most N jobs running at once across every
    /// drip on the NAME (this host's, or every host's through Redis). Each
    /// running job holds a lease in the shared state, renewed every second;
    /// the leases of a drip that died lapse within 5 s
    #[arg(long, value_name = "N", value_parser = parse_count, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Share")]
    pub share_jobs: Option<u64>,

    /// Running a command per record (`--exec`).
    #[command(flatten)]
    pub job_args: JobArgs,

    /// Print a summary on stderr at exit
    #[arg(long, help_heading = "Observe")]
    pub stats: bool,

    /// Write the summary to FILE as one JSON object (and, with
    /// --stats-interval, the periodic stats as JSON lines before it); not
    /// `-`: stdout carries the records
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath, help_heading = "Observe")]
    pub stats_json: Option<PathBuf>,

    /// Every DURATION (10ms to 100y), write one JSON line of stats to stderr
    /// (or to --stats-json FILE)
    #[arg(long, value_name = "DURATION", value_parser = stats_interval_arg, value_hint = ValueHint::Other, allow_hyphen_values = true, help_heading = "Observe")]
    pub stats_interval: Option<Duration>,

    /// Keep FILE up to date with the figures in the Prometheus text format
    /// (records by fate, depth, oldest age, rate, jobs, retries, overload
    /// pauses, --share's calls, the top keys): written anew and renamed
    /// over FILE every --stats-interval (or each second) and at exit, for
    /// node_exporter's textfile collector
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath, help_heading = "Observe")]
    pub metrics: Option<PathBuf>,

    /// Draw the live display on stderr even when it is not a terminal, or
    /// when stdout is the same terminal (the display then keeps to the
    /// bottom row and the records scroll above it)
    #[arg(long, conflicts_with = "quiet", help_heading = "Observe")]
    pub progress: bool,

    /// No progress display: stderr gets only errors and what --stats and
    /// --stats-interval ask for
    #[arg(short, long, help_heading = "Observe")]
    pub quiet: bool,

    /// Name this drip for `drip ctl` (1 to 64 letters, digits, `_`, `-`;
    /// not all digits); it is always reachable by its pid too
    #[arg(long, value_name = "NAME", value_parser = crate::control::check_name, value_hint = ValueHint::Other, help_heading = "Observe")]
    pub name: Option<String>,

    /// Listen on no control socket: `drip ctl` cannot reach this drip
    #[arg(long, help_heading = "Observe")]
    pub no_control: bool,

    /// Print a one-screen summary of the flags most runs need, grouped by
    /// task (--help: every flag; man drip: the whole manual)
    #[arg(short = 'h', action = clap::ArgAction::SetTrue, help_heading = "Help")]
    pub summary: bool,

    /// Print help: every flag, examples, exit statuses, the environment (-h:
    /// a one-screen summary)
    #[arg(long = "help", action = clap::ArgAction::HelpLong, help_heading = "Help")]
    pub help: Option<bool>,

    /// Print the version
    #[arg(short = 'V', long, action = clap::ArgAction::Version, help_heading = "Help")]
    pub version: Option<bool>,

    /// `drip ctl`: steer a running drip.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The flags of the command runner.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Jobs")]
pub struct JobArgs {
    /// Run COMMAND once per record instead of writing records to stdout: {}
    /// in an argument is replaced by the record (delimiter excluded);
    /// without {}, the record is the last argument. {headers} is the path
    /// of a file for the job's HTTP response headers (curl -D {headers}):
    /// 429 and 503 there mean overload, 408, 500, 502 and 504 a transient
    /// failure, other statuses from 400 a final one. {usage} is the path of
    /// a file for what the job spent (read by --settle). Jobs get
    /// DRIP_RECORD, DRIP_RECORD_ID (an idempotency key), DRIP_ATTEMPT,
    /// DRIP_HEADERS ({headers}) and DRIP_USAGE ({usage}). No shell (write sh -c '...' for one). Takes the rest of the command
    /// line, or up to a ';': drip's FILEs go before it (reading stdin, drip
    /// names a file given after {}, which went to the command)
    #[arg(long, value_name = "COMMAND", num_args = 1.., allow_hyphen_values = true, value_terminator = ";", value_hint = ValueHint::CommandName)]
    pub exec: Vec<String>,

    /// At most N jobs at once (the rate limits starts; both hold) [default:
    /// 1]
    #[arg(short, long, value_name = "N", value_parser = jobs_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub jobs: Option<usize>,

    /// Give each job its record on stdin instead of as an argument
    #[arg(long)]
    pub record_on_stdin: bool,

    /// Retry a record up to N times after a transient failure or an overload
    /// [default: 0]
    #[arg(long, value_name = "N", value_parser = retries_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub retries: Option<u32>,

    /// Exit statuses that are transient failures, retried: a list such as
    /// 1,75,100-110 [default: 6,7,28,35,52,55,56,75: EX_TEMPFAIL and curl's
    /// could-not-connect, timeout and send/receive failures]
    #[arg(long, value_name = "STATUSES", value_parser = statuses_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub retry_on: Option<Statuses>,

    /// Exit statuses that mean the service is overloaded, as 429 and 503
    /// do: every start pauses (with --key, the starts of the record's key
    /// only), for Retry-After or else a backoff that grows with each
    /// overload in a row; then the rate comes back gradually, and the
    /// record is retried
    #[arg(long, value_name = "STATUSES", value_parser = statuses_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub overload_on: Option<Statuses>,

    /// Wait before retry n: a random time between 0 and min(MAX, MIN·2^n)
    /// (exponential backoff, full jitter) [default: 100ms..30s]
    #[arg(long, value_name = "MIN..MAX", value_parser = backoff_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub backoff: Option<Backoff>,

    /// Kill an attempt that runs longer than DURATION: TERM to its process
    /// group, KILL one second later
    #[arg(long, value_name = "DURATION", value_parser = job_duration_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    /// Give up on a record DURATION after it was read, counting its time in
    /// the bucket and all its attempts: it expires
    #[arg(long, value_name = "DURATION", value_parser = job_duration_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub deadline: Option<Duration>,

    /// Lower the rate on each overload (halve it) and raise it back on
    /// successes, never above the configured rate (with --key, the rate of
    /// the key refused)
    #[arg(long)]
    pub adapt: bool,

    /// Write one JSON line per attempt to FILE (truncated first; each line
    /// flushed as written): id (DRIP_RECORD_ID), number (DRIP_RECORD),
    /// record (a JSON string: valid UTF-8 as it is, a backslash as \\,
    /// each byte of invalid UTF-8 as \xNN), attempt (from 1), start_us
    /// (Unix time, whole microseconds), duration_us, exit or signal (null
    /// when not), timed_out, http_status (null when no headers file) and
    /// outcome: retry, overload, or the record's fate on its last line
    /// (succeeded, failed, expired, undelivered); error when the record
    /// could not be an argument (a NUL byte, over the system's limit: it
    /// fails alone)
    #[arg(long, value_name = "FILE", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath)]
    pub joblog: Option<PathBuf>,

    /// Skip the records that succeeded in earlier runs logged in JOBLOG,
    /// matched by content (the hash in DRIP_RECORD_ID), not by place: a
    /// record that appears twice runs again unless it succeeded twice.
    /// Skipped records count as skipped_done. This run's lines are appended
    /// to JOBLOG (created if it does not exist yet: everything runs); a last
    /// line cut short by a killed run is passed over
    #[arg(long, value_name = "JOBLOG", value_parser = PathBufValueParser::new().try_map(not_stdout), value_hint = ValueHint::FilePath)]
    pub resume: Option<PathBuf>,

    /// Do not pace from the quota the server announces in the headers file
    /// (RateLimit, RateLimit-Policy, X-RateLimit-Remaining and
    /// X-RateLimit-Reset; OpenAI's x-ratelimit-*-requests and -tokens;
    /// Anthropic's anthropic-ratelimit-*): by default, when a job writes
    /// {headers}, the remaining quota is spread over the time to its reset,
    /// the requests in flight counted against it, never faster than --rate;
    /// the tokens remaining pace the cost (--cost), a record costing more
    /// than is left waiting for the reset, or (OpenAI's and Anthropic's
    /// requests and tokens, buckets refilled until their reset) until
    /// enough came back
    #[arg(long)]
    pub no_quota_pacing: bool,

    /// After each attempt, what the job really spent of a cost (--cost
    /// NAME=…, or the unnamed one without NAME=), read from its output: an
    /// estimate as --cost takes one, its JSON paths into the job's stdout
    /// (parsed whole, else its last line), such as usage.prompt_tokens, or
    /// into the file {usage} names in the command, when the job writes it.
    /// The difference from what the record was charged is settled: an
    /// overestimate is given back (later records go sooner), an
    /// underestimate is charged (later records wait). An attempt whose
    /// output has no such number keeps its estimate (said once on
    /// stderr). May be given once for each cost. With --share, the
    /// difference reaches the shared cost limits: given back to, or
    /// charged for, every drip on the NAME
    #[arg(long, value_name = "[NAME=]SPEC", value_parser = parse_settle_arg, value_hint = ValueHint::Other, action = clap::ArgAction::Append)]
    pub settle: Vec<(Option<String>, Estimate)>,

    /// Write each job's output in input order, whole, whatever order the
    /// jobs end in (stderr is passed on as it comes). Outputs wait for the
    /// records before them; at most --order-window records start ahead of
    /// the oldest one not written out, so a long job holds new starts back
    #[arg(short = 'k', long)]
    pub keep_order: bool,

    /// With --keep-order: how many records may start ahead of the oldest
    /// one whose output is not written out yet (each record's output is
    /// held in memory up to 64 KiB, in a temporary file beyond) [default:
    /// 1000]
    #[arg(long, value_name = "N", value_parser = window_arg, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub order_window: Option<usize>,
}

/// drip's subcommands (and clap's `help`: `drip help` is `drip --help`,
/// `drip help ctl` ctl's), each only as drip's first word. A file named
/// like one is read as `./ctl`, `./help`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Steer a running drip of this user: list them, change a rate, pause,
    /// resume, read its figures.
    ///
    /// `drip ctl list` prints every running drip (pid, name, rate, depth,
    /// written, started) as one JSON array. `drip ctl TARGET COMMAND`, with
    /// TARGET a pid or a --name, prints the drip's one-line JSON answer.
    /// COMMAND is one of: `info` (its entry), `stats` (the --stats-json object now), `keys`
    /// (the top keys), `jobs` (the running jobs), `pause`, `resume`,
    /// `rate RATE[:BURST]...` and `byte-rate SIZE/UNIT[:BURST]...` (each
    /// kind given replaces all the limits of that kind: `rate 10/s
    /// 500/min:50`), `cost-rate [NAME=]N/UNIT[:BURST]...` (the limits
    /// spending the costs named: `cost-rate in=30000/min`), `key-rate
    /// RATE[:BURST]`, `-j N`. A new limit starts from now: the next record
    /// leaves one interval of the new rate after the last one, with no
    /// credit saved and no catch-up burst. On a drip given --share, `rate`,
    /// `byte-rate`, `cost-rate` and `key-rate` change the shared limits of
    /// every drip on the NAME (each follows within 1 s). Errors: one line on
    /// stderr, exit status 1 (no such drip, a refusal, a bad command);
    /// `drip ctl` alone prints this help on stderr, exit status 2.
    #[command(
        arg_required_else_help = true,
        after_help = "Examples:\n  drip ctl list\n  drip ctl nightly rate 5/s\n  drip ctl 4242 pause\n  drip ctl nightly stats"
    )]
    Ctl(CtlArgs),

    /// Take one slot from a shared limit, for a script that makes one call
    /// at a time: `drip take api-quota -r 10/s && curl ...`.
    ///
    /// NAME|URL is --share's: the same state file or Redis, the same limits
    /// (-r, --byte-rate, --cost-rate, as the drips sharing it give them;
    /// 1/s when none is given) and the same schedule the running drips
    /// reserve from. Waits until the slot is due, then exits 0. With
    /// --timeout, a slot not due within it is not taken: exit status 124,
    /// nothing spent. Limits that differ from the shared ones: exit status
    /// 2; a state that cannot be reached or used: exit status 4.
    #[command(
        after_help = "Examples:\n  drip take api-quota -r 10/s && curl https://api.example.com/\n  drip take redis://cache.internal/api-quota -r 10/s --timeout 5s"
    )]
    Take(TakeArgs),
}

/// The words and flags of `drip take`.
#[derive(Debug, clap::Args)]
pub struct TakeArgs {
    /// The shared limit: a NAME on this host, or a Redis URL, as --share
    /// takes
    #[arg(value_name = "NAME|URL", value_parser = shared::parse_target, value_hint = ValueHint::Other)]
    pub target: shared::Target,

    /// A record limit of the shared ones, as drip's --rate (RATE[:BURST];
    /// may be given more than once)
    #[arg(short, long, value_name = "RATE[:BURST]", value_parser = parse_rate_burst, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub rate: Vec<(Rate, Option<u64>)>,

    /// A byte limit of the shared ones, as drip's --byte-rate
    #[arg(long, value_name = "SIZE/UNIT[:BURST]", value_parser = parse_byte_rate_burst, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub byte_rate: Vec<(Rate, u64)>,

    /// A cost limit of the shared ones, as drip's --cost-rate
    #[arg(long, value_name = "N/UNIT[:BURST]", value_parser = parse_cost_rate_burst, value_hint = ValueHint::Other, action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub cost_rate: Vec<(Rate, u64)>,

    /// What the slot spends of the --cost-rate (or bytes of the
    /// --byte-rate) limits; each --rate counts it as one [default: 1]
    #[arg(long, value_name = "N", value_parser = parse_count, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub cost: Option<u64>,

    /// Wait at most DURATION for the slot to be due; a slot not due by then
    /// is not taken (exit status 124)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    /// Print help (see more with '--help')
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help, long_help = "Print help (see a summary with '-h')")]
    pub help: Option<bool>,
}

/// The words of `drip ctl`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// `list`, or the pid or --name of a running drip
    #[arg(value_name = "list|TARGET", allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub target: Option<String>,

    /// What to do: info, stats, keys, jobs, pause, resume, rate RATE[:BURST]...,
    /// byte-rate SIZE/UNIT[:BURST]..., cost-rate [NAME=]N/UNIT[:BURST]...,
    /// key-rate RATE[:BURST], key-rates FILE, key-list, -j N, key-jobs N
    // The brackets are the help's optional parts, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(value_name = "COMMAND", trailing_var_arg = true, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub command: Vec<String>,

    /// Print help (see more with '--help')
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help, long_help = "Print help (see a summary with '-h')")]
    pub help: Option<bool>,
}

/// Parse `--stats-interval`: at least 10 ms, so stderr is not flooded.
fn stats_interval_arg(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_millis(10) {
        return Err("must be at least 10ms (expected a duration such as 1s, 10s)".into());
    }
    Ok(d)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn an_interval_is_instead_of_a_rate() {
        assert!(Cli::try_parse_from(["drip", "-i", "1s", "-r", "2/s"]).is_err());
    }

    #[test]
    fn stats_interval_has_a_floor() {
        assert!(stats_interval_arg("1ns").is_err());
        assert_eq!(stats_interval_arg("10ms"), Ok(Duration::from_millis(10)));
    }

    #[test]
    fn stats_interval_has_a_ceiling() {
        assert_eq!(stats_interval_arg("100y"), Ok(crate::quantity::LONGEST));
        for text in ["100y 1ns", "101y", "18446744073s", "18446744074s"] {
            assert!(stats_interval_arg(text).is_err(), "{text}");
        }
    }

    #[test]
    fn policies_parse_and_are_offered() {
        for (value, _) in POLICIES {
            assert!(value.parse::<Overflow>().is_ok(), "{value}");
        }
        assert!("drop".parse::<Overflow>().is_err());
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
    }

    #[test]
    fn oversize_policies() {
        assert_eq!("skip".parse(), Ok(Oversize::Skip));
        assert_eq!("fail".parse(), Ok(Oversize::Fail));
        assert!("drop".parse::<Oversize>().is_err());
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
                "files" | "dead_letter" | "stats_json" | "joblog" | "resume" | "metrics"
                | "key_rates" => {
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
        // rate, byte-rate, cost, cost-rate, budget, interval, burst, schedule,
        // ramp, capacity, capacity-bytes, delimiter, max-record, max-wait,
        // stats-interval, share, share-peers, share-jobs; jobs, retries,
        // retry-on, overload-on, backoff, timeout, deadline, order-window,
        // settle; key, field-separator, key-rate, key-capacity, key-jobs,
        // max-keys; name.
        assert_eq!(other, 34);
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
}
