
use builtin;
use str;

set edit:completion:arg-completer[drip] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'drip'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'drip'= {
            cand -r 'Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, a bare 10 (per second), or inf (unlimited) for no pacing; the period is at most 100 years. Give it again for several limits at once, each with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]'
            cand --rate 'Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, a bare 10 (per second), or inf (unlimited) for no pacing; the period is at most 100 years. Give it again for several limits at once, each with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]'
            cand --byte-rate 'Bytes per unit of time, delimiters included: 1MiB/s, 500KB/s, 10GB/h; a record of n bytes spends n. BURST (a size, default 1 byte) is how many bytes may leave back to back; a record larger than BURST leaves alone once a full burst is saved, and the next waits until it is paid for. May be given more than once'
            cand --cost 'Where a record''s cost is (tokens, a weight), for --cost-rate: a field number (--cost 2; fields split on blanks, or on --field-separator), a regular expression whose first capture group is the cost (--cost ''"tokens": *([0-9]+)''), or an estimate: terms joined by +, each a product (*) of whole numbers, bytes (the record''s size) and JSON paths into the record (max_tokens, a.b, messages.0; n?1 for 1 where there is no n), perhaps divided by a whole number and rounded up (--cost ''bytes/4+max_tokens*n?1''), in the record without its delimiter. A cost is a whole number from 0 to 2^53, blanks around it allowed. A record whose cost cannot be read (no such field, no match, not a whole number, not JSON) costs 1 and is still passed on; the first such record is named once on stderr. NAME=SPEC names a cost, spent by the --cost-rate limits that name it; may be given once unnamed and once for each name. Needs --cost-rate'
            cand --cost-rate 'Cost per unit of time, as --rate (100000/min, 500/s); a record spends the cost --cost reads from it, as --byte-rate spends its size. BURST (default 1) is how much cost may leave back to back; a record costing more than BURST leaves alone once a full burst is saved, and the next waits until it is paid for. A record costing 0 waits for no cost limit. NAME=N/UNIT spends the cost named NAME, NAME+NAME=N/UNIT the named costs summed (in+out=40000/min); without a name, the unnamed cost. May be given more than once. With --share, shared as the byte rates are, each spending its own costs (but not beside a --byte-rate, and spending at most 4 different sets of costs). Needs --cost'
            cand --budget 'A calendar budget: at most N records in each WINDOW (second, minute, hour, day, week or month) as the clock in ZONE shows it, ZONE a tz database name (America/Los_Angeles, Europe/Berlin, UTC; default the local zone, from TZ or the system). 10000/day@America/Los_Angeles resets at midnight Pacific; a day across a change to or from summer time lasts 23 or 25 hours, a week starts on Monday. Within a window the rates pace as usual; once its budget is spent, records wait for the next window (see --budget-exhausted). Without --rate, a budget alone does not pace records within the window. May be given more than once. With --share, one count per window for every drip on the NAME (kept in the shared state, so a drip started again finds it)'
            cand --budget-exhausted 'What a spent --budget does to the records waiting'
            cand -i 'One record every DURATION (100ms, 2s, 1m; at most 100y): another way to give the rate'
            cand --interval 'One record every DURATION (100ms, 2s, 1m; at most 100y): another way to give the rate'
            cand -b 'Records that may leave back to back after an idle spell (token bucket); the long-run rate is unchanged. 1 means strict spacing below 500/s; from 500/s up, a wake-up up to 2 ms late also sends the records due meanwhile: at most N + rate × 2ms together. With several --rate limits, give each its burst as RATE:BURST instead [default: 1]'
            cand --burst 'Records that may leave back to back after an idle spell (token bucket); the long-run rate is unchanged. 1 means strict spacing below 500/s; from 500/s up, a wake-up up to 2 ms late also sends the records due meanwhile: at most N + rate × 2ms together. With several --rate limits, give each its burst as RATE:BURST instead [default: 1]'
            cand --schedule 'Limits by the time of day: rows separated by '';'', each [DAYS] [HH:MM-HH:MM] then a record rate (as --rate, with its burst) or ''pause''; ''*'' for always; the first row that matches the local clock is in force, and with none the command line''s --rate. An item @ZONE (@Europe/Berlin) sets the zone, else the local one. A row changes the rate as ''drip ctl rate'' does; under ''pause'' nothing leaves (the display says until when: paused until 18:00). Not with --share. ''Mon-Fri 09:00-18:00 pause; * 50/s'''
            cand --ramp 'Let the limits rise linearly to the rate over DURATION from the first record that leaves: from 0, or from START (a rate below --rate) as START:DURATION (10/s:60s). Every limit rises in step; the n-th record leaves when the rate''s integral reaches n. Not with --share'
            cand -c 'Records the bucket holds: a number (1000; 10k, 2M, 1G are 10^3, 10^6, 10^9 records, decimal; 1.5k is 1500), or a DURATION (30s, 5m, 1h, 2d; m is minutes, a month is spelled month) for what the schedule drains in that time, ⌊rate × DURATION⌋ records of the tightest --rate (with only --byte-rate limits, the bytes the tightest drains, as --capacity-bytes). --stats names the limit that set it. Not with --rate inf alone'
            cand --capacity 'Records the bucket holds: a number (1000; 10k, 2M, 1G are 10^3, 10^6, 10^9 records, decimal; 1.5k is 1500), or a DURATION (30s, 5m, 1h, 2d; m is minutes, a month is spelled month) for what the schedule drains in that time, ⌊rate × DURATION⌋ records of the tightest --rate (with only --byte-rate limits, the bytes the tightest drains, as --capacity-bytes). --stats names the limit that set it. Not with --rate inf alone'
            cand --capacity-bytes 'Bytes the bucket holds, delimiters included (10KiB, 64MiB); full at either bound'
            cand -o 'What to do when the bucket is full'
            cand --overflow 'What to do when the bucket is full'
            cand -d 'Records end with this byte: a character or an escape such as ''\t'', ''\0'' or ''\x1e'''
            cand --delimiter 'Records end with this byte: a character or an escape such as ''\t'', ''\0'' or ''\x1e'''
            cand --max-record 'Longest record accepted, delimiter excluded (512KiB, 64MiB; KB means 1000 bytes, KiB 1024)'
            cand --oversize 'A record over --max-record or --capacity-bytes: fail (stop reading, exit 1) or skip (stream it to --dead-letter as it is read, count it as skipped, and read on)'
            cand --max-wait 'Expire records that waited in the bucket longer than DURATION (at most 100y) instead of writing them. Under a drop or fail policy, a record the schedule cannot let go within DURATION of its arrival is refused as it arrives: drop-newest drops it, drop-oldest evicts the oldest waiting records until it can make it, fail stops (see Service level in drip(1))'
            cand --dead-letter 'Append every record not written to stdout (dropped, expired, undelivered) to FILE, byte-exact, each with its delimiter, in the order it left the bucket (not `-`: stdout carries the records)'
            cand --key 'Limit records per key: SPEC is `host` (the host of the URL that is the record, read by a URL parser: lower-cased, punycode, one IPv6 spelling, no trailing dot, no default port, never the user or password), `host:N` (the host of the URL in field N), a field number (--key 1; fields split on blanks, or on --field-separator) or a regular expression whose first capture group is the key (--key ''^user=([^ ]+)''; start it with (?-u) to match bytes that are not UTF-8), found in the record without its delimiter (or a CR before a newline). Records with no key (no such field, no match, not a URL with a host) share one "no key" lane. Each key waits in its own queue at --key-rate; keys due together take turns (round robin), so a noisy key never holds back a quiet one: within a key records keep their order, across keys the output order may differ from the input''s. With --exec, an overload (429, 503, --overload-on) pauses only the refused record''s key. Needs --key-rate or --key-rates'
            cand --field-separator 'Fields for --key N and --key host:N are separated by this byte ('','' or an escape such as ''\t'') instead of runs of blanks'
            cand --key-rate 'Each key''s own limit, records per unit (as --rate, with its burst after a colon: 5/s:10). The global --rate limits, if any, still cap all records together: a record leaves when both allow. With --share, each key''s limit holds for all the drips sharing it together (a record of a key with no slot reserved waits a round trip). Given as KEY=RATE[:BURST] (again for each row), a row of the rate table as --key-rates reads it (github.com=1/s:2, ''*.github.com=1/s''), which replaces the file''s row for the same KEY; RATE[:BURST] alone is then the limit of the keys no row matches. Needs --key'
            cand --key-rates 'A rate table per key: each line of FILE a row, KEY RATE[:BURST] [JOBS] (blanks between; blank lines, and a word starting with # to the end of its line, skipped). JOBS, with --exec: at most JOBS jobs of each key the row matches at once, in place of --key-jobs. KEY is a key (github.com), *.DOMAIN (the keys ending in .DOMAIN: its subdomains, not DOMAIN itself) or * (every key). A key takes its exact row, else the longest *.DOMAIN matching it, else *, else --key-rate RATE, else no limit of its own. With --key host, a row''s key is spelled as the hosts are (GitHub.COM. is github.com). drip ctl NAME key-rates FILE, or SIGHUP (which then stops drip no more), reads the table again, each key keeping its place in its schedule; a bad file is said and the table in force stays. With --share, the table is shared as --key-rate is: every drip on the NAME must start with the same rows, and drip ctl or SIGHUP on one changes it for all. Needs --key'
            cand --key-capacity 'Records one key may have waiting: a number (as --capacity: 500, 10k), or a DURATION for what --key-rate drains in that time (⌊key rate × DURATION⌋); a key at this bound meets the overflow policy (drop-oldest then evicts its own oldest) [default: --capacity]'
            cand --key-jobs 'With --exec: at most N jobs of one key running at once, beside -j for all keys (a key whose row of --key-rates has a JOBS column takes that instead). A key at its limit starts nothing until one of its jobs ends (its retries included): its records wait in its own queue, and the other keys go on. Records with no key count as one key. With it, --key needs no --key-rate: a key''s jobs may be its only limit. With --share, a key''s limit holds across every drip on the NAME (a lease per job, as --share-jobs takes, beside it if given): a record whose key the drips run N of waits for a lease in its -j slot (at most N such of a key), and the other keys go on'
            cand --max-keys 'Keys remembered at most. A key with nothing waiting whose schedule has recovered its full burst is idle and forgotten first (that changes no departure); when every key is busy, a record of a new key meets the overflow policy as if the bucket were full (drop-oldest drops it as the newest; block waits until a key is idle) [default: 100000]'
            cand --share 'Share the --rate limits (the default 1/s when no rate is given) and --byte-rate limits, and each key''s --key-rate limit, with every drip given the same NAME (1 to 200 letters, digits, ''.'', ''_'', ''-'', '':''; not starting with ''.''): on this host with no server (a state file under $XDG_RUNTIME_DIR/drip or /tmp/drip-$UID), or on any host through Redis or Valkey: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME, rediss://... (TLS; trusting the system''s CAs, or SSL_CERT_FILE), redis+unix:///SOCKET/NAME[?db=DB&user=USER&pass=PASSWORD], valkey://... (no other query string); a primary behind Sentinel: redis+sentinel://HOST[:PORT],.../PRIMARY[/DB]/NAME (the sentinels asked for the primary, a failover followed; a password as for redis://); a Redis Cluster: redis+cluster://HOST[:PORT],.../NAME, or redis:// to any of its nodes. All of them must give the same rates and bursts, in any order, per key too (else exit 2). Under a byte rate each reserved slot carries one record of at most the size it was reserved for'
            cand --share-on-error 'When the shared state cannot be reached: wait (send nothing, say so on stderr unless -q, and retry with backoff; records wait in the bucket), local (pace alone at the rate divided by --share-peers until it answers again, and hold that pace 3 s more as it shares again; a shared --budget counts alone, up to N divided by --share-peers a window; warn once unless -q), or fail (exit 4). A setup no retry mends (a state file drip cannot use, a password the server wants or refuses, a server that is not Redis) exits 4 under every policy'
            cand --share-peers 'How many drips share the limits, for --share-on-error local'
            cand --share-jobs 'With --exec and --share: at most N jobs running at once across every drip on the NAME (this host''s, or every host''s through Redis). Each running job holds a lease in the shared state, renewed every second; the leases of a drip that died lapse within 5 s'
            cand --exec 'Run COMMAND once per record instead of writing records to stdout: {} in an argument is replaced by the record (delimiter excluded); without {}, the record is the last argument. {headers} is the path of a file for the job''s HTTP response headers (curl -D {headers}): 429 and 503 there mean overload, 408, 500, 502 and 504 a transient failure, other statuses from 400 a final one. {usage} is the path of a file for what the job spent (read by --settle). Jobs get DRIP_RECORD, DRIP_RECORD_ID (an idempotency key), DRIP_ATTEMPT, DRIP_HEADERS ({headers}) and DRIP_USAGE ({usage}). No shell (write sh -c ''...'' for one). Takes the rest of the command line, or up to a '';'': drip''s FILEs go before it (reading stdin, drip names a file given after {}, which went to the command)'
            cand -j 'At most N jobs at once (the rate limits starts; both hold) [default: 1]'
            cand --jobs 'At most N jobs at once (the rate limits starts; both hold) [default: 1]'
            cand --retries 'Retry a record up to N times after a transient failure or an overload [default: 0]'
            cand --retry-on 'Exit statuses that are transient failures, retried: a list such as 1,75,100-110 [default: 6,7,28,35,52,55,56,75: EX_TEMPFAIL and curl''s could-not-connect, timeout and send/receive failures]'
            cand --overload-on 'Exit statuses that mean the service is overloaded, as 429 and 503 do: every start pauses (with --key, the starts of the record''s key only), for Retry-After or else a backoff that grows with each overload in a row; then the rate comes back gradually, and the record is retried'
            cand --backoff 'Wait before retry n: a random time between 0 and min(MAX, MIN·2^n) (exponential backoff, full jitter) [default: 100ms..30s]'
            cand --timeout 'Kill an attempt that runs longer than DURATION: TERM to its process group, KILL one second later'
            cand --deadline 'Give up on a record DURATION after it was read, counting its time in the bucket and all its attempts: it expires'
            cand --joblog 'Write one JSON line per attempt to FILE (truncated first; each line flushed as written): id (DRIP_RECORD_ID), number (DRIP_RECORD), record (a JSON string: valid UTF-8 as it is, a backslash as \\, each byte of invalid UTF-8 as \xNN), attempt (from 1), start_us (Unix time, whole microseconds), duration_us, exit or signal (null when not), timed_out, http_status (null when no headers file) and outcome: retry, overload, or the record''s fate on its last line (succeeded, failed, expired, undelivered); error when the record could not be an argument (a NUL byte, over the system''s limit: it fails alone)'
            cand --resume 'Skip the records that succeeded in earlier runs logged in JOBLOG, matched by content (the hash in DRIP_RECORD_ID), not by place: a record that appears twice runs again unless it succeeded twice. Skipped records count as skipped_done. This run''s lines are appended to JOBLOG (created if it does not exist yet: everything runs); a last line cut short by a killed run is passed over'
            cand --settle 'After each attempt, what the job really spent of a cost (--cost NAME=…, or the unnamed one without NAME=), read from its output: an estimate as --cost takes one, its JSON paths into the job''s stdout (parsed whole, else its last line), such as usage.prompt_tokens, or into the file {usage} names in the command, when the job writes it. The difference from what the record was charged is settled: an overestimate is given back (later records go sooner), an underestimate is charged (later records wait). An attempt whose output has no such number keeps its estimate (said once on stderr). May be given once for each cost. With --share, the difference reaches the shared cost limits: given back to, or charged for, every drip on the NAME'
            cand --order-window 'With --keep-order: how many records may start ahead of the oldest one whose output is not written out yet (each record''s output is held in memory up to 64 KiB, in a temporary file beyond) [default: 1000]'
            cand --stats-json 'Write the summary to FILE as one JSON object (and, with --stats-interval, the periodic stats as JSON lines before it); not `-`: stdout carries the records'
            cand --stats-interval 'Every DURATION (10ms to 100y), write one JSON line of stats to stderr (or to --stats-json FILE)'
            cand --metrics 'Keep FILE up to date with the figures in the Prometheus text format (records by fate, depth, oldest age, rate, jobs, retries, overload pauses, --share''s calls, the top keys): written anew and renamed over FILE every --stats-interval (or each second) and at exit, for node_exporter''s textfile collector'
            cand --name 'Name this drip for `drip ctl` (1 to 64 letters, digits, `_`, `-`; not all digits); it is always reachable by its pid too'
            cand -0 'Records end with NUL instead of newline, on input and output'
            cand --null 'Records end with NUL instead of newline, on input and output'
            cand --drain 'On the first stopping signal (SIGINT, SIGTERM, SIGHUP, ...), stop reading but write what the bucket holds at the rate before exiting'
            cand --record-on-stdin 'Give each job its record on stdin instead of as an argument'
            cand --adapt 'Lower the rate on each overload (halve it) and raise it back on successes, never above the configured rate (with --key, the rate of the key refused)'
            cand --no-quota-pacing 'Do not pace from the quota the server announces in the headers file (RateLimit, RateLimit-Policy, X-RateLimit-Remaining and X-RateLimit-Reset; OpenAI''s x-ratelimit-*-requests and -tokens; Anthropic''s anthropic-ratelimit-*): by default, when a job writes {headers}, the remaining quota is spread over the time to its reset, the requests in flight counted against it, never faster than --rate; the tokens remaining pace the cost (--cost), a record costing more than is left waiting for the reset, or (OpenAI''s and Anthropic''s requests and tokens, buckets refilled until their reset) until enough came back'
            cand -k 'Write each job''s output in input order, whole, whatever order the jobs end in (stderr is passed on as it comes). Outputs wait for the records before them; at most --order-window records start ahead of the oldest one not written out, so a long job holds new starts back'
            cand --keep-order 'Write each job''s output in input order, whole, whatever order the jobs end in (stderr is passed on as it comes). Outputs wait for the records before them; at most --order-window records start ahead of the oldest one not written out, so a long job holds new starts back'
            cand --stats 'Print a summary on stderr at exit'
            cand --progress 'Draw the live display on stderr even when it is not a terminal, or when stdout is the same terminal (the display then keeps to the bottom row and the records scroll above it)'
            cand -q 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for'
            cand --quiet 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for'
            cand --no-control 'Listen on no control socket: `drip ctl` cannot reach this drip'
            cand -h 'Print a one-screen summary of the flags most runs need, grouped by task (--help: every flag; man drip: the whole manual)'
            cand --help 'Print help: every flag, examples, exit statuses, the environment (-h: a one-screen summary)'
            cand -V 'Print the version'
            cand --version 'Print the version'
            cand ctl 'Steer a running drip of this user: list them, change a rate, pause, resume, read its figures'
            cand take 'Take one slot from a shared limit, for a script that makes one call at a time: `drip take api-quota -r 10/s && curl ...`'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'drip;ctl'= {
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'drip;take'= {
            cand -r 'A record limit of the shared ones, as drip''s --rate (RATE[:BURST]; may be given more than once)'
            cand --rate 'A record limit of the shared ones, as drip''s --rate (RATE[:BURST]; may be given more than once)'
            cand --byte-rate 'A byte limit of the shared ones, as drip''s --byte-rate'
            cand --cost-rate 'A cost limit of the shared ones, as drip''s --cost-rate'
            cand --cost 'What the slot spends of the --cost-rate (or bytes of the --byte-rate) limits; each --rate counts it as one [default: 1]'
            cand --timeout 'Wait at most DURATION for the slot to be due; a slot not due by then is not taken (exit status 124)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'drip;help'= {
            cand ctl 'Steer a running drip of this user: list them, change a rate, pause, resume, read its figures'
            cand take 'Take one slot from a shared limit, for a script that makes one call at a time: `drip take api-quota -r 10/s && curl ...`'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'drip;help;ctl'= {
        }
        &'drip;help;take'= {
        }
        &'drip;help;help'= {
        }
    ]
    var prev = ''
    if (> (count $words) 2) {
        set prev = $words[-2]
    }
    if $false {
    } elif (or (eq $prev -r) (eq $prev --rate)) {
    } elif (or (eq $prev --byte-rate)) {
    } elif (or (eq $prev --cost)) {
    } elif (or (eq $prev --cost-rate)) {
    } elif (or (eq $prev --budget)) {
    } elif (or (eq $prev --budget-exhausted)) {
        put wait
        put stop
    } elif (or (eq $prev -i) (eq $prev --interval)) {
    } elif (or (eq $prev -b) (eq $prev --burst)) {
    } elif (or (eq $prev --schedule)) {
    } elif (or (eq $prev --ramp)) {
    } elif (or (eq $prev -c) (eq $prev --capacity)) {
    } elif (or (eq $prev --capacity-bytes)) {
    } elif (or (eq $prev -o) (eq $prev --overflow)) {
        put block
        put drop-newest
        put drop-oldest
        put fail
    } elif (or (eq $prev -d) (eq $prev --delimiter)) {
    } elif (or (eq $prev --max-record)) {
    } elif (or (eq $prev --oversize)) {
        put fail
        put skip
    } elif (or (eq $prev --max-wait)) {
    } elif (or (eq $prev --dead-letter)) {
        edit:complete-filename $words[-1]
    } elif (or (eq $prev --key)) {
    } elif (or (eq $prev --field-separator)) {
    } elif (or (eq $prev --key-rate)) {
    } elif (or (eq $prev --key-rates)) {
        edit:complete-filename $words[-1]
    } elif (or (eq $prev --key-capacity)) {
    } elif (or (eq $prev --key-jobs)) {
    } elif (or (eq $prev --max-keys)) {
    } elif (or (eq $prev --share)) {
    } elif (or (eq $prev --share-on-error)) {
        put wait
        put local
        put fail
    } elif (or (eq $prev --share-peers)) {
    } elif (or (eq $prev --share-jobs)) {
    } elif (or (eq $prev --exec)) {
    } elif (or (eq $prev -j) (eq $prev --jobs)) {
    } elif (or (eq $prev --retries)) {
    } elif (or (eq $prev --retry-on)) {
    } elif (or (eq $prev --overload-on)) {
    } elif (or (eq $prev --backoff)) {
    } elif (or (eq $prev --timeout)) {
    } elif (or (eq $prev --deadline)) {
    } elif (or (eq $prev --joblog)) {
        edit:complete-filename $words[-1]
    } elif (or (eq $prev --resume)) {
        edit:complete-filename $words[-1]
    } elif (or (eq $prev --settle)) {
    } elif (or (eq $prev --order-window)) {
    } elif (or (eq $prev --stats-json)) {
        edit:complete-filename $words[-1]
    } elif (or (eq $prev --stats-interval)) {
    } elif (or (eq $prev --metrics)) {
        edit:complete-filename $words[-1]
    } elif (or (eq $prev --name)) {
    } else {
        if (not (str:has-prefix $words[-1] '-')) {
            edit:complete-filename $words[-1]
        }
        $completions[$command]
    }
}
