//! The manual's text beside the flags' own help: examples, exit statuses,
//! the description's sections, signals, environment and files, for
//! `--help`'s epilogue, the man page and the README.

/// `drip -h`: the flags most runs need on one screen (at most 66 lines of
/// 80 columns), grouped by task; `--help` and the man page have them all.
pub const SUMMARY: &str = "\
drip: a leaky bucket for shell pipelines. Reads records (lines) from FILEs or
stdin and writes them to stdout at a steady rate.

Usage: drip [OPTIONS] [FILE]...
       drip ctl list | drip ctl TARGET COMMAND...     steer a running drip
       drip take NAME [-r RATE] [--timeout D]         take one slot of a --share

Pace:
  -r, --rate RATE[:BURST]     records per unit: 10/s, 90/min, 0.5/s, inf [1/s];
                              again for several limits: -r 10/s -r 500/min:50
  -i, --interval DURATION     one record every DURATION: 100ms, 2s
  -b, --burst N               records that may leave back to back [1]
      --byte-rate SIZE/UNIT   bytes per unit: 1MiB/s
      --cost-rate N/UNIT      cost per unit, the cost read by --cost FIELD|REGEX

Bucket:
  -c, --capacity N|DURATION   records it holds [1000]: 10k, 2M (decimal); or
                              what the rate drains in a DURATION: 30s, 5m
  -o, --overflow POLICY       when full: block, drop-newest, drop-oldest, fail
      --max-wait DURATION     expire records that waited longer
      --dead-letter FILE      append every record not written to FILE
  -0, --null                  records end with NUL (-d BYTE: with BYTE)
      --drain                 on SIGINT/SIGTERM, write what it holds first

Keys:
      --key SPEC              host (a URL's), a field number, or a regex's group
      --key-rate RATE[:BURST] each key's own limit; keys take turns
      --key-rates FILE        a rate per key or *.DOMAIN, a row a line

Share:
      --share NAME|URL        share the limits with every drip given NAME, on
                              this host or through redis://HOST/NAME

Jobs:
      --exec COMMAND...       run COMMAND per record ({} is the record), to ';'
  -j, --jobs N                at most N at once [1]
      --retries N             try a failed record again, N times at most
      --joblog FILE           one JSON line per attempt (see --resume)

Observe:
      --stats                 a summary on stderr at exit
      --stats-json FILE       the summary as JSON
      --stats-interval DURATION  figures every DURATION, as JSON lines
      --metrics FILE          the figures for Prometheus (node_exporter)
  -q, --quiet                 no live display on stderr
      --name NAME             a name for drip ctl (else its pid)

Examples:
  seq 20 | drip --rate 5/s
  drip -r 10/s urls.txt | xargs -n1 -P4 curl -sSO
  drip -r 10/s -j 8 urls.txt --exec curl -sS -o /dev/null {}
  drip ctl nightly rate 5/s

This is a summary: drip --help lists every flag under the same headings, and
man drip is the manual.
";

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
        "drip -r 10/s -c 30s --max-wait 30s -o drop-newest --dead-letter late.txt jobs.txt",
        "hold what leaves within 30 s; refuse the rest at once, into late.txt",
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
        "drip take api-quota -r 10/s && curl -sS https://api.example.com/",
        "take one slot of the 10/s limit drips share with --share api-quota, then call",
    ),
    (
        "drip --schedule 'Mon-Fri 09:00-18:00 pause; * 50/s' --ramp 60s jobs.txt",
        "nothing in office hours, else 50/s, rising from 0 over the first minute",
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
        "a runtime error (with drip ctl: any failure, one line): an unreadable FILE, or one that is the --dead-letter file or the --resume joblog (reported; drip goes on with the next), or one that is the --stats-json, --joblog or --metrics file (refused before anything is written or read: the file is left as it was), a --resume file with lines and not one joblog entry (refused before anything is written: the file is left as it was), a record over --max-record or --capacity-bytes under --oversize fail (the records before it are delivered; reading stops), a failed write to stdout, --dead-letter, --stats-json or --metrics, a control socket that cannot be made, or of -h, --help or --version output; with --exec, a job that cannot start for want of file descriptors, processes or memory and no running job to wait for (the records not run are undelivered)",
    ),
    ("2", "a usage error: a bad flag or value (one line naming the flag and the accepted form; a misspelled flag with the one meant: unexpected argument '--rat' found (tip: a similar argument exists: '--rate'; see 'drip --help')), or drip ctl without a word (its usage); two of --dead-letter, --stats-json, --metrics and --joblog (or --resume) that are one file; also limits that differ from those shared under the same --share NAME"),
    ("3", "the bucket overflowed under --overflow fail (with --key, also a key's full queue, or a new key while every remembered key is busy; with --max-wait, also a record the schedule could not let go in time)"),
    (
        "4",
        "the --share state could not be reached under --share-on-error fail, or can never be used as set up (a state directory drip may not write, a password the Redis server wants, a server that is not Redis; under every --share-on-error); what was not written is undelivered",
    ),
    (
        "5",
        "a --budget was spent while records waited, under --budget-exhausted stop: what the schedule had let go is written, the rest is undelivered",
    ),
    (
        "123",
        "with --exec: some records failed (or passed their --deadline), as xargs says when a command failed",
    ),
    (
        "124",
        "drip take: no slot was due within its --timeout; nothing was spent",
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
     then a spent budget (5), then a --share state that cannot be reached (4), then a command that cannot run (126, 127) \
     or a job that cannot start for want of a resource (1), then a signal (128 + n), then a record or input error (1), then failed jobs (123).";

/// A paragraph of the manual: `(tag, text)`; an empty tag is plain text.
pub type Paragraph = (&'static str, &'static str);

/// What the DESCRIPTION of the man page says after the summary above
/// `Cli`: (subsection title, or "" for none; paragraphs).
pub const DESCRIPTION: &[(&str, &[Paragraph])] = &[
    (
        "",
        &[
            ("", "FILEs are read in order; - or no FILE means stdin (when stdin is a terminal, drip says so once on stderr, unless -q: reading records from the terminal). FILEs go before --exec, which takes the rest of the command line: when drip reads stdin and an argument of --exec's command after the last {} (not an option's value) names a file, drip says once, unless -q, in the same line as the terminal's notice if there is one: --exec: records are read from stdin; urls.txt is an argument of the command (put it before --exec to read records from it). A FILE that is not there but reads as a rate is named with a hint (drip: 10/s: No such file or directory (did you mean --rate 10/s?)). An unterminated last record of a file gets the delimiter when another file follows, so records never merge across files, and when it is written before a record it overtook (keys reorder records), so records are never joined; otherwise the output is the input byte for byte."),
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
            ("drop-newest", "The producer is never held back; records arriving at a full bucket are discarded (and written to the dead letter, if set); with --max-wait, so are records the schedule cannot let go in time (see Service level)."),
            ("drop-oldest", "The producer is never held back; the oldest queued record is evicted to make room; with --max-wait, the fewest oldest that let an arriving record leave in time."),
            ("fail", "The first overflow (with --max-wait, also the first record that cannot leave in time) stops drip with status 3; everything still queued is undelivered."),
            ("", "With --rate inf a full bucket only means stdout is not keeping up: the drop and fail policies apply once stdout has made no room for 100 ms."),
        ],
    ),
    (
        "Accounting",
        &[
            ("", "Every record read ends up in exactly one of: written, dropped by policy (dropped_newest, dropped_oldest), expired (--max-wait), skipped (over --max-record or --capacity-bytes under --oversize skip), or undelivered (still queued, or being written, when drip stopped or stdout closed). The counts always add up: read = written + dropped_newest + dropped_oldest + expired + skipped + undelivered. Every record not written goes to the --dead-letter FILE when one is set. refused counts the drops made at an arrival because a record could not leave within --max-wait; they are in dropped_newest and dropped_oldest too, so refused is not in the sum."),
        ],
    ),
    (
        "Service level",
        &[
            ("", "A capacity is a number of records (1000), in thousands, millions or billions with k (or K), M or G, decimal (10k is 10,000, 2M 2,000,000, 1G 10^9; 1.5k is 1,500), or a DURATION. A DURATION keeps its units (ms, s, m for minutes, h, d, w, y); a month, which M would mean elsewhere, is spelled month or months. A capacity is often a time: \"no record waits more than 30 seconds\". -c 30s holds what the schedule drains in 30 seconds, \u{230a}rate \u{d7} 30s\u{230b} records of the tightest --rate (with only --byte-rate limits, the bytes the tightest drains, as --capacity-bytes); --key-capacity 30s, what --key-rate drains. --stats names the limit that set it. With --rate inf alone there is nothing to drain the bucket in time, and a duration is a usage error."),
            ("", "With --max-wait and a drop or fail policy, each arriving record is held to its deadline as it arrives: the records waiting ahead of it leave, one after another, as soon as every limit allows; when that already puts its departure later than --max-wait after its arrival (less the schedule's slack, 2 to 5 ms, so a wake-up that late does not make it expire), it is refused at once: drop-newest drops it (to the dead letter at once), drop-oldest evicts the fewest oldest waiting records that let it leave in time (or drops it when an empty bucket would not), fail stops with status 3. Under a drop or fail policy this is always so: such a record would expire anyway, having held a place for --max-wait, and refusing it at once tells the producer, the dead letter and the counts when it arrives. block never refuses: it holds the producer back instead. Only the schedule is foreseen: a record delayed after it arrived (stdout stalled, a pause, a shared state not answering) still expires while waiting, counted as expired. With --share no forecast is made (other drips take slots drip cannot foresee): records expire as before. With --key the forecast is a floor: its key's records ahead of it at the key rate, and the global limits' slots for as many; other keys' turns come on top, so a record refused could not have made it, and one let in may still expire; drop-oldest evicts its own key's oldest."),
            ("", "The display, the --stats-interval lines and the summary show the age of the oldest waiting record beside the wait a record arriving now would face, as foreseen (wait 12.4s): the figure to compare with the service level."),
        ],
    ),
    (
        "The live display",
        &[
            ("", "When stderr is a terminal, drip draws one line on it: the elapsed time, the bucket's fill as a gauge (depth/capacity), records in, out and dropped, the age of the oldest waiting record and the wait a record arriving now would face (oldest 1.2s wait 12.4s; see Service level), the output rate (measured from the times records left, over at least ten records and a second, or the last ten seconds at low rates; -/s until two have left), an ETA from that measured rate when the input's size is known (never before the schedule's forecast of the queue's end, with every limit in force; once the input has ended, that forecast), and a sign when stdout holds records up: output slow (records are waiting, a write to stdout was under way at half or more of the redraws of the last second, and less than 90% of the rate leaves) or output blocked (a write under way for 250 ms), or paused while paused (by drip ctl, or by a --schedule row that pauses: then with when the next row starts, paused until 18:00, or paused until Mon 09:00 on another day). On a narrow terminal the oldest age and the wait go first, then the gauge, then the counts, so the queue, the rate, the ETA and the sign stay. At exit the line is cleared and the summary printed in its place."),
            ("", "When stdout is the same terminal, the records are the progress: drip draws no display (and prints no summary) unless --progress asks; then the display keeps to the bottom row while the records scroll above it. --progress also draws it when stderr is not a terminal; -q turns it off. With --exec no record is written: the display shows the jobs, on the bottom row, whenever stderr is a terminal (see Running a command per record)."),
        ],
    ),
    (
        "Running a command per record",
        &[
            ("", "With --exec, each record the schedule lets go starts a job (at most --jobs at once) instead of being written: the rate paces the starts. An attempt's end is read from the HTTP status the job wrote to its headers file ({headers}: the last status line, after redirects) or, without one, from its exit status: 0 succeeded; 429, 503 and --overload-on statuses are an overload; 408, 500, 502, 504, --retry-on statuses and a --timeout are transient; anything else (a 404, a signal) is final. Transient failures and overloads are retried while --retries and --deadline allow (after that the record has failed), each retry after a backoff with full jitter; a retry whose backoff has ended takes the next slot of the rate, ahead of the records waiting in the bucket."),
            ("", "The overload pause: on an overload no job starts, new or retried (with --key, none of the refused record's key: the other keys go on), until the response's Retry-After (seconds or an HTTP date) has passed, or, without one, for a backoff drawn with full jitter whose ceiling doubles from --backoff's MIN with each overload in a row, up to MAX; only a quiet spell, no overload for as long as the current ceiling (at least a second), brings it back to MIN. An overload reported by an attempt that started before the latest one is the same episode: it may lengthen the pause, no more. After the pause the starts resume at half the rate drip had when refused and climb back by a tenth of the configured rate each second. With --adapt the rate is also halved on each overload and raised on successes, never above the configured one. While starts are paused the bucket fills and the overflow policy applies; a pause never holds a record past its --deadline. A quota the server announces in the headers (RateLimit, X-RateLimit-Remaining and -Reset, OpenAI's x-ratelimit-*-requests and -tokens, Anthropic's anthropic-ratelimit-*) spreads what remains over the time to its reset, the tokens remaining spent by the records' --cost; OpenAI's and Anthropic's request and token quotas, with their -limit field, are buckets refilled continuously until their reset (the time they are full again): a record goes when it (a request of 1) and its cost fit what is left and what came back since, else waits until enough came back. Unless --no-quota-pacing."),
            ("", "A record that cannot be an argument (a NUL byte, longer than the system allows) fails alone: the reason once on stderr and in its joblog line, the batch goes on, the exit status is 123. A command that cannot run at all ends drip with 127 (not found) or 126 (not executable). A job that cannot start for want of file descriptors, processes or memory waits for a running job to end and tries again; with none running it tries for 5 seconds, then drip ends with status 1. The jobs' output is passed to drip's stdout and stderr whole when each attempt ends (in input order with --keep-order)."),
            ("", "The live display for jobs, on stderr when it is a terminal (stdout the terminal or not; -q turns it off), keeps to the bottom row while the jobs' output scrolls above it: the elapsed time, the queue, records in (dropped and expired, when any), running, succeeded, failed, retries, pauses (overload pauses so far), the start rate (starts 3.20/s, measured as the output rate is), an ETA (the records still to start at that rate, never before the schedule's forecast, then a median attempt) and, during an overload pause, paused with the time left (paused 1.5s), or with --key the key paused (paused api.example.com +1: one more key is paused)."),
        ],
    ),
    (
        "Statistics",
        &[
            ("--stats", "At exit (and on SIGUSR1) a summary on stderr, broken between clauses into lines of at most 80 columns, each starting drip: \u{2014} read, written, dropped (newest, oldest), expired, skipped (when any), undelivered; cap N (DURATION, by the limit that set it) when --capacity or --key-capacity is a duration; while records wait (on SIGUSR1), waiting N (oldest, wait); max depth, max wait; rate, elapsed. Drops refused at arrival (see Service level) are counted as refused at arrival inside the dropped clause. The rate is taken between the first and the last record written: the records written after the first write over the time since it, (written \u{2212} 1) / span when records leave one at a time; it is left out when fewer than two writes were made. Elapsed is the wall time of the whole run. With --key the keys' lines follow, broken the same way: keys seen (remembered, busy: with records waiting), the records with no key (when any), the records of new keys dropped because every remembered key was busy (when any), and the keys that wrote, lost (dropped or expired) and hold waiting the most records, ten of each. A key is shown safe for a terminal: a backslash as \\\\, tab, newline and carriage return as \\t, \\n, \\r, other control bytes and invalid UTF-8 as \\xNN, control and direction-changing characters beyond ASCII as \\u{NNNN}; in double quotes when empty or holding a blank, comma, semicolon or quote, or spelled (no key), the name of the lane of records without a key; cut to 40 columns (a wide character takes two), ending in \u{2026}. With --share, the shared NAME: ... lines come last: reservations, slots forfeited late (reserved, unused, too late to give back), state lost, failed calls. With --exec, the counts say succeeded and failed (what the jobs did) in place of written (no record is written to stdout), max wait is max wait to start (from being read to the job's start; max depth counts only the bucket), the jobs' clauses follow (running, retries, overload responses, pauses, start limit: the rate starts are held to, lowered from the configured one after an overload, by --adapt or a quota, or starts unpaced; attempt p50 and p99 once an attempt ended; outputs cut N (B bytes not written) when jobs' output could not be written), and the rate is the measured start rate, left out over fewer than 3 starts or a span under 100 ms."),
            ("--stats-json", "The summary as one JSON object: read, written, dropped_newest, dropped_oldest, expired, refused (of the dropped, those refused at arrival: see Service level), skipped, undelivered, bytes_read, bytes_written, max_depth (records), max_wait_ms (the longest any written record waited), elapsed_ms, rate (records per second between the first and last write; null when fewer than two writes were made), span_ms (the time between them), depth, oldest_age_ms and forecast_wait_ms (the records waiting when the summary was taken, the oldest one's age, and the wait a record arriving then would face; null when it cannot be foreseen), succeeded, failed and skipped_done (records skipped by --resume: they succeeded in an earlier run) (0 without --exec); when --capacity or --key-capacity is a DURATION, capacity_for or key_capacity_for: duration_ms, capacity, unit (records or bytes) and set_by (the limit); with --exec, the runner's figures (among them outputs_cut and output_bytes_unwritten: the jobs' outputs, each attempt's stdout or stderr, not written whole because stdout or stderr was closed, failed or stalled at a second signal, and their bytes not written; rate is null over fewer than 3 starts or a span under 100 ms); with --key, a keys object: keys_seen (keys taken into memory, the no-key lane included; a key forgotten and seen again counts again), keys (remembered), busy_keys (keys with records waiting), dropped_unremembered (records of new keys dropped because every remembered key was busy, also in dropped_newest), keyless (records read that had no key: no such field, no match, not a URL with a host) and top_written, top_dropped, top_waiting (the ten keys with the most records, as [key, count] pairs); with a rate table (--key-rates, --key-rate KEY=RATE), key_limits: each key the top lists name, once, as key, row (its row's KEY; null when no row matches), rate (its limit as RATE:BURST; null when it has none) and waiting, and with --exec jobs (its job limit: its row's JOBS, else --key-jobs; null when it has none) and running (its jobs running). A key is a JSON string of its bytes: valid UTF-8 as it is, a backslash as \\\\, each byte of invalid UTF-8 as \\xNN; the no-key lane is null. The lists cover the keys remembered at the end (a key forgotten when idle takes its counts with it; the totals keep them). When drip stops with records waiting, busy_keys and top_waiting are taken at the stop, before those records are counted undelivered. With --share, a share object: name, reservations, slots_forfeited, state_lost and failed_calls (as on the --stats line shared NAME: ...), for the global limits (left out when only --key-rate is shared), and with --key a per_key object with the same four for the limits per key (as on the line shared NAME per key: ...)."),
            ("--stats-interval", "One JSON line per interval, on stderr or in the --stats-json FILE before the summary: time (seconds since start), records_in, records_out and rate (during the interval), depth, oldest_age_ms, forecast_wait_ms (the wait a record arriving now would face; null when it cannot be foreseen), and the totals read, written, dropped_newest, dropped_oldest, expired, refused, skipped; with --budget, budgets (each as in --stats-json: budget, limit, left, reset, reset_unix, reset_in_ms); with cost limits, costs (each named cost as in --stats-json); with --schedule, schedule (the row in force), with --ramp, ramp (where it stands), and with --share, share (its counters), as in --stats-json; with --exec, succeeded, failed and the runner's figures; with --key, keys (remembered now) and busy_keys (keys with records waiting now); while paused, paused (true) and, under a --schedule row that pauses, paused_until (when the next row starts, RFC 3339)."),
        ],
    ),
    (
        "Taking one slot (drip take)",
        &[
            ("drip take NAME|URL [-r RATE[:BURST]]... [--byte-rate ...] [--cost-rate ...] [--cost N] [--timeout D]", "Take one slot of the limit shared under NAME (or the Redis URL) as --share takes it, with the limits the drips sharing it give (1/s when none is given), on the same schedule they reserve from: the slot is the next one after every slot reserved before it, taken in one atomic step, and drip take sleeps until it is due, then exits 0. --cost N spends N of each --cost-rate (or bytes of each --byte-rate) and 1 of each --rate. With --timeout, a slot not due within D of the start is not taken and nothing is spent; drip take asks again every 200 ms until D has passed, then exits 124. Limits that differ from the shared ones exit 2; a state that cannot be reached or used exits 4, one line on stderr."),
        ],
    ),
];

/// The SIGNALS section: (signal, what drip does).
pub const SIGNALS: &[Paragraph] = &[
    ("SIGINT, SIGTERM, SIGHUP", "Stop at once: a record being written is finished, never cut; everything still queued goes to the dead letter and is counted as undelivered; the summary is printed as usual and drip exits with 128 + the signal's number. With --drain the first one only stops reading, and drip writes out what the bucket holds at the rate. A --dead-letter, --joblog or --stats-json FIFO that no one reads yet does not hold a signal up: drip stops at once, that file never opened."),
    ("a second one", "Exit immediately, first moving what is still queued, and what a blocked write had not yet written, to the dead letter (when one is set); the record that write had begun may be cut on stdout then, and is in the dead letter whole. The display is cleared; no summary is printed, but the --stats-json and --metrics files are written."),
    ("with --exec", "The first signal starts no job more, retries included, and waits for the running ones and their output: each of their records ends as its job does (succeeded, failed or expired, with its joblog line; a failure that would be retried is undelivered, as no retry starts at a stop); the records not started, a retry waiting for its backoff or a pause included, are undelivered and go to the dead letter. The display goes on meanwhile, then the summary is printed. A second signal sends every running job's process group TERM, then KILL 200 ms later, and leaves: the record of each job it ends by a signal is undelivered (its joblog line says so, and it goes to the dead letter); a job that exited keeps the fate its status gives, as at the first signal (succeeded, failed or expired, with its joblog line, or undelivered for a failure that would be retried; a succeeded record is never in the dead letter), and output that stdout does not take is given up and counted (outputs_cut). At a stop by signal, first or second, the process groups of jobs that already ended get TERM, then KILL, too: nothing a job left running in its group (sleep 60 &) outlives drip. At a normal end, as with xargs, what a job left running in the background is left alone. A drip killed with SIGKILL cannot end its jobs itself: its warden (drip started again, its command line drip-warden in ps -f, in a process group of its own) sees it gone and sends every running job's process group TERM, then KILL 200 ms later; a stopped drip (SIGSTOP) is not gone, and its jobs run on."),
    ("SIGUSR1", "Print the summary on stderr, every line that --stats prints at exit, and carry on."),
    ("SIGHUP with --key-rates", "Read the rate table per key again from its file (the one drip ctl key-rates named last) instead of stopping: each key takes its row again and keeps its place in its schedule. A file that cannot be read or holds a malformed row is said on stderr in one line, and the table in force stays. Caught even when the parent ignores it."),
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
    ("", "Every running drip, unless given --no-control, listens on a Unix socket in the directory of the --share state files (see FILES), mode 0600 in a directory of mode 0700, named by its pid and its --name. It answers only its own user (the peer's uid, from the kernel: SO_PEERCRED on Linux, getpeereid on macOS and FreeBSD), one request per connection, one line of JSON of at most 4096 bytes (a longer one is refused, in one line saying so); it answers up to 16 clients at once, each given 2 seconds to send its request, so a client that sends nothing holds up no other. The socket is removed at every way out; one left by a drip killed with SIGKILL (nobody listens on it) is removed by the next drip ctl list, or by a drip ctl naming it, and never counts as a drip of its name."),
    ("drip ctl list", "Every running drip of this user as one JSON array: pid, name, rate, byte_rate, cost_rate (NAME=RATE:BURST for a cost limit spending named costs), key_rate and jobs when set, paused, depth, read, written, started (seconds since the epoch). The drips are asked at once, and their answers awaited half a second at most: one that does not answer in time (stopped, say) is left out, with a line on stderr."),
    ("drip ctl TARGET info", "The drip's entry, as list gives it; with --key, keys (the keys' counts and top keys, and with a rate table each top key's row and limit), with --schedule, schedule, with --ramp, ramp, with --budget, budgets, and with cost limits, costs, each as in --stats-json."),
    ("drip ctl TARGET stats", "The --stats-json object now (with \"paused\": true while paused). TARGET is a pid or a --name."),
    ("drip ctl TARGET keys", "With --key: the keys seen, remembered and busy, and the top keys."),
    ("drip ctl TARGET jobs", "With --exec: the runner's figures, the job slots (jobs), with --key-jobs the limit per key (key_jobs), and each running job's number and record."),
    ("drip ctl TARGET pause, resume", "While paused nothing leaves: the bucket fills, the overflow policy applies as always, --max-wait and --deadline go on counting, and a retry waits too. The display says paused."),
    ("drip ctl TARGET rate RATE[:BURST]... [byte-rate SIZE/UNIT[:BURST]...] [cost-rate [NAME=]N/UNIT[:BURST]...]", "New limits from now on, several of a kind as --rate given more than once (rate 10/s 500/min:50, the same as rate 10/s rate 500/min:50): the rates given replace all the --rate limits, the byte rates all the --byte-rate limits, the cost rates the --cost-rate limits spending the costs they name (cost-rate in=30000/min; without a name the unnamed cost), one value for each such limit (a kind not given stays; rate inf removes the record limits; a cost no limit of the drip spends is refused). The next record leaves one interval of the new rate after the last one that left: no credit saved under the old rate carries over, and raising the rate sends no catch-up burst; within one interval of the old rate or 100 ms, whichever is longer, the new rate is in force. A drip started with --rate inf refuses a change of rate. Given --share, rate, byte-rate, cost-rate and key-rate change the shared limits of every drip on the NAME, through the state: each drip follows them within 1 s, with no credit carried and no catch-up, and one started later with the old limits says so on stderr and follows them; the kinds of limit shared stay (a global limit is not added to drips sharing only limits per key, nor all taken away)."),
    ("drip ctl TARGET key-rate RATE[:BURST]", "A new limit per key from now on (beside a rate table, of the keys no row matches), each key counted from its last record; a key already due keeps its turn. Given --share with --key-rate, the limit per key of every drip on the NAME, as rate."),
    ("drip ctl TARGET key-rates FILE", "With --key: the rate table per key read from FILE (as --key-rates reads it, the --key-rate KEY=RATE rows replacing its rows of the same KEY), in force from now on, and the file SIGHUP reads from then on: each remembered key takes its row again, a key whose limit changed counted from its last record with no credit and no burst, a key already due keeping its turn. A file that cannot be read or holds a malformed row is refused (its line named) and the table in force stays. With --share, the rows' rates change for every drip on the NAME, through the state (as key-rate); each drip's JOBS column stays its own. The entry then has key_rates, the file."),
    ("drip ctl TARGET key-list", "With --key: every remembered key, one a line (not JSON): the key, its row of the rate table (- when none matches), its limit as RATE:BURST (- when it has none) and its records waiting, and with --exec its job limit (its row's JOBS, else --key-jobs; - when it has none) and its jobs running, separated by tabs."),
    ("drip ctl TARGET -j N", "With --exec: N job slots (1 to 4096, as -j) from now on; lowered, running jobs finish and no new one starts until fewer than N run."),
    ("drip ctl TARGET key-jobs N", "With --key-jobs: at most N jobs of one key at once (1 to 4096) from now on; raised, a key held at its old limit starts at once; lowered, running jobs finish and no new job of a key starts until fewer than N of it run. A drip started without --key-jobs refuses it (its jobs are not counted per key)."),
    ("", "Each answer (but list's) is the drip's entry, as list gives it, after the change. An error is one line on stderr and exit status 1: no such drip, a refusal, a bad command, a control directory that is not this user's alone (checked as drip checks it), an answer stdout does not take (a command is carried out all the same); drip ctl alone prints its short help on stderr, exit status 2. ctl is a subcommand only as drip's first word: to read a file named ctl first, give it as ./ctl. So are take and help: drip help prints what drip --help prints, drip help ctl what drip ctl --help does; a file named help is read as ./help (drip help says so on stderr when there is one here)."),
];

/// The FILES section.
pub const FILES: &[Paragraph] = &[
    ("FILE", "Inputs, read in order; - is stdin."),
    ("--dead-letter FILE", "Appended to (created if missing): every record not written to stdout, byte-exact with its delimiter, in the order it left the bucket. A file that does not end with the delimiter gets one first."),
    ("--stats-json FILE", "Created or truncated: the summary as one JSON object, after the --stats-interval lines if any."),
    ("", "- is refused for both (status 2): stdout carries the records, and the two would mix."),
    ("--metrics FILE", "Replaced whole (written to a temporary file beside it, then renamed) every --stats-interval, or each second, and at exit: the figures in the Prometheus text format, for node_exporter's textfile collector. A FILE that cannot be written stops drip at the start with status 1."),
    ("--joblog FILE", "Created or truncated (with --resume JOBLOG, appended to; created if missing): one JSON object a line per attempt, each line written whole and flushed when the attempt ends, with the fields id (DRIP_RECORD_ID: the record's place in the input and a digest of its bytes, the first 128 bits of their SHA-256 in hex, the same in a resumed run), number (DRIP_RECORD), record (a JSON string: valid UTF-8 as it is, a backslash as \\\\, each byte of invalid UTF-8 as \\xNN), attempt (from 1), start_us (Unix time, whole microseconds), duration_us (whole microseconds), exit and signal (one of them null), timed_out, http_status (from the headers file; null without one), outcome (retry or overload when the record is tried again, else its fate: succeeded, failed, expired, undelivered) and, only when the record could not be an argument, error. --resume reads the lines whose outcome is succeeded; a last line cut short is passed over."),
    ("$TMPDIR/drip-headers-XXXXXX", "With --exec: a directory of drip's (under /tmp when TMPDIR is unset), mode 0700, made when drip starts; each attempt of record n may write its HTTP response headers to the file named n in it ({headers}, DRIP_HEADERS), which drip reads and removes when the attempt ends, and what it spent to n.usage ({usage}, DRIP_USAGE), which --settle reads and removes likewise. The directory and what is in it are removed when drip exits, also after an error or a signal; only SIGKILL leaves it behind."),
    ("$XDG_RUNTIME_DIR/drip/PID.ctl, PID.NAME.ctl, /tmp/drip-$UID/PID.ctl", "The control socket of a running drip (see DRIP CTL), in the same directory as the --share state files (see ENVIRONMENT for which)."),
    ("$XDG_RUNTIME_DIR/drip/NAME.json, /tmp/drip-$UID/NAME.json", "The state of --share NAME on this host (see ENVIRONMENT for which): a small JSON file (the limits, a schedule per limit and per busy key, the boot id), mode 0600 in a directory of mode 0700, changed under the flock of NAME.json.lock beside it (left in place; its time refreshed at every change), a change larger than a page written to .NAME.json.tmp and renamed over it. A directory of another user's, or one others may write to, is refused; a directory or file drip cannot use stops it with status 4, naming the path."),
];

/// The SEE ALSO section.
pub const SEE_ALSO: &str = "pv(1), xargs(1), parallel(1), mbuffer(1)";
