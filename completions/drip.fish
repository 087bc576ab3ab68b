# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_drip_global_optspecs
    string join \n r/rate= byte-rate= cost= cost-rate= budget= budget-exhausted= i/interval= b/burst= schedule= ramp= c/capacity= capacity-bytes= o/overflow= 0/null d/delimiter= max-record= oversize= max-wait= dead-letter= drain key= field-separator= key-rate= key-rates= key-capacity= key-jobs= max-keys= share= share-on-error= share-peers= share-jobs= exec= j/jobs= record-on-stdin retries= retry-on= overload-on= backoff= timeout= deadline= adapt joblog= resume= no-quota-pacing settle= k/keep-order order-window= stats stats-json= stats-interval= metrics= progress q/quiet name= no-control h help V/version
end

function __fish_drip_exec_words
    # The words after --exec (up to a ;), when the word being completed is one.
    set -l cmd (commandline -opc)
    set -l at 0
    for i in (seq 2 (count $cmd))
        if test $at -eq 0; and test "$cmd[$i]" = --exec
            set at $i
        else if test "$cmd[$i]" = ';'
            set at 0
        end
    end
    test $at -gt 0; or return 1
    if test (count $cmd) -gt $at
        printf '%s\n' $cmd[(math $at + 1)..-1]
    end
    return 0
end

function __fish_drip_exec_complete
    set -l words (__fish_drip_exec_words)
    if test (count $words) -eq 0
        __fish_complete_command
    else
        set -l line (string join ' ' -- (string escape -- $words))
        set -l current (commandline -ct)
        complete -C "$line $current"
    end
end

function __fish_drip_needs_command
    # Not inside --exec's command line.
    __fish_drip_exec_words >/dev/null; and return 1
    # drip ctl, drip take: the first word only.
    set -l cmd (commandline -opc)
    if test (count $cmd) -ge 2; and contains -- "$cmd[2]" ctl take
        echo $cmd[2]
        return 1
    end
    return 0
end

function __fish_drip_using_subcommand
    set -l cmd (__fish_drip_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c drip -n "__fish_drip_needs_command" -s r -l rate -d 'Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, a bare 10 (per second), or inf (unlimited) for no pacing; the period is at most 100 years. Give it again for several limits at once, each with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l byte-rate -d 'Bytes per unit of time, delimiters included: 1MiB/s, 500KB/s, 10GB/h; a record of n bytes spends n. BURST (a size, default 1 byte) is how many bytes may leave back to back; a record larger than BURST leaves alone once a full burst is saved, and the next waits until it is paid for. May be given more than once' -r -f
complete -c drip -n "__fish_drip_needs_command" -l cost -d 'Where a record\'s cost is (tokens, a weight), for --cost-rate: a field number (--cost 2; fields split on blanks, or on --field-separator), a regular expression whose first capture group is the cost (--cost \'"tokens": *([0-9]+)\'), or an estimate: terms joined by +, each a product (*) of whole numbers, bytes (the record\'s size) and JSON paths into the record (max_tokens, a.b, messages.0; n?1 for 1 where there is no n), perhaps divided by a whole number and rounded up (--cost \'bytes/4+max_tokens*n?1\'), in the record without its delimiter. A cost is a whole number from 0 to 2^53, blanks around it allowed. A record whose cost cannot be read (no such field, no match, not a whole number, not JSON) costs 1 and is still passed on; the first such record is named once on stderr. NAME=SPEC names a cost, spent by the --cost-rate limits that name it; may be given once unnamed and once for each name. Needs --cost-rate' -r -f
complete -c drip -n "__fish_drip_needs_command" -l cost-rate -d 'Cost per unit of time, as --rate (100000/min, 500/s); a record spends the cost --cost reads from it, as --byte-rate spends its size. BURST (default 1) is how much cost may leave back to back; a record costing more than BURST leaves alone once a full burst is saved, and the next waits until it is paid for. A record costing 0 waits for no cost limit. NAME=N/UNIT spends the cost named NAME, NAME+NAME=N/UNIT the named costs summed (in+out=40000/min); without a name, the unnamed cost. May be given more than once. With --share, shared as the byte rates are, each spending its own costs (but not beside a --byte-rate, and spending at most 4 different sets of costs). Needs --cost' -r -f
complete -c drip -n "__fish_drip_needs_command" -l budget -d 'A calendar budget: at most N records in each WINDOW (second, minute, hour, day, week or month) as the clock in ZONE shows it, ZONE a tz database name (America/Los_Angeles, Europe/Berlin, UTC; default the local zone, from TZ or the system). 10000/day@America/Los_Angeles resets at midnight Pacific; a day across a change to or from summer time lasts 23 or 25 hours, a week starts on Monday. Within a window the rates pace as usual; once its budget is spent, records wait for the next window (see --budget-exhausted). Without --rate, a budget alone does not pace records within the window. May be given more than once. With --share, one count per window for every drip on the NAME (kept in the shared state, so a drip started again finds it)' -r -f
complete -c drip -n "__fish_drip_needs_command" -l budget-exhausted -d 'What a spent --budget does to the records waiting' -r -f -a "wait\t'records wait for the budget\'s next window'
stop\t'drip stops (exit status 5); the records not written are undelivered'"
complete -c drip -n "__fish_drip_needs_command" -s i -l interval -d 'One record every DURATION (100ms, 2s, 1m; at most 100y): another way to give the rate' -r -f
complete -c drip -n "__fish_drip_needs_command" -s b -l burst -d 'Records that may leave back to back after an idle spell (token bucket); the long-run rate is unchanged. 1 means strict spacing below 500/s; from 500/s up, a wake-up up to 2 ms late also sends the records due meanwhile: at most N + rate × 2ms together. With several --rate limits, give each its burst as RATE:BURST instead [default: 1]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l schedule -d 'Limits by the time of day: rows separated by \';\', each [DAYS] [HH:MM-HH:MM] then a record rate (as --rate, with its burst) or \'pause\'; \'*\' for always; the first row that matches the local clock is in force, and with none the command line\'s --rate. An item @ZONE (@Europe/Berlin) sets the zone, else the local one. A row changes the rate as \'drip ctl rate\' does; under \'pause\' nothing leaves (the display says until when: paused until 18:00). Not with --share. \'Mon-Fri 09:00-18:00 pause; * 50/s\'' -r -f
complete -c drip -n "__fish_drip_needs_command" -l ramp -d 'Let the limits rise linearly to the rate over DURATION from the first record that leaves: from 0, or from START (a rate below --rate) as START:DURATION (10/s:60s). Every limit rises in step; the n-th record leaves when the rate\'s integral reaches n. Not with --share' -r -f
complete -c drip -n "__fish_drip_needs_command" -s c -l capacity -d 'Records the bucket holds: a number (1000; 10k, 2M, 1G are 10^3, 10^6, 10^9 records, decimal; 1.5k is 1500), or a DURATION (30s, 5m, 1h, 2d; m is minutes, a month is spelled month) for what the schedule drains in that time, ⌊rate × DURATION⌋ records of the tightest --rate (with only --byte-rate limits, the bytes the tightest drains, as --capacity-bytes). --stats names the limit that set it. Not with --rate inf alone' -r -f
complete -c drip -n "__fish_drip_needs_command" -l capacity-bytes -d 'Bytes the bucket holds, delimiters included (10KiB, 64MiB); full at either bound' -r -f
complete -c drip -n "__fish_drip_needs_command" -s o -l overflow -d 'What to do when the bucket is full' -r -f -a "block\t'stop reading until there is room (backpressure)'
drop-newest\t'discard records arriving at a full bucket'
drop-oldest\t'evict the oldest queued record to make room'
fail\t'stop with status 3 at the first overflow'"
complete -c drip -n "__fish_drip_needs_command" -s d -l delimiter -d 'Records end with this byte: a character or an escape such as \'\\t\', \'\\0\' or \'\\x1e\'' -r -f
complete -c drip -n "__fish_drip_needs_command" -l max-record -d 'Longest record accepted, delimiter excluded (512KiB, 64MiB; KB means 1000 bytes, KiB 1024)' -r -f
complete -c drip -n "__fish_drip_needs_command" -l oversize -d 'A record over --max-record or --capacity-bytes: fail (stop reading, exit 1) or skip (stream it to --dead-letter as it is read, count it as skipped, and read on)' -r -f -a "fail\t'stop reading at the record, exit 1'
skip\t'stream it to --dead-letter, count it as skipped, read on'"
complete -c drip -n "__fish_drip_needs_command" -l max-wait -d 'Expire records that waited in the bucket longer than DURATION (at most 100y) instead of writing them. Under a drop or fail policy, a record the schedule cannot let go within DURATION of its arrival is refused as it arrives: drop-newest drops it, drop-oldest evicts the oldest waiting records until it can make it, fail stops (see Service level in drip(1))' -r -f
complete -c drip -n "__fish_drip_needs_command" -l dead-letter -d 'Append every record not written to stdout (dropped, expired, undelivered) to FILE, byte-exact, each with its delimiter, in the order it left the bucket (not `-`: stdout carries the records)' -r -F
complete -c drip -n "__fish_drip_needs_command" -l key -d 'Limit records per key: SPEC is `host` (the host of the URL that is the record, read by a URL parser: lower-cased, punycode, one IPv6 spelling, no trailing dot, no default port, never the user or password), `host:N` (the host of the URL in field N), a field number (--key 1; fields split on blanks, or on --field-separator) or a regular expression whose first capture group is the key (--key \'^user=([^ ]+)\'; start it with (?-u) to match bytes that are not UTF-8), found in the record without its delimiter (or a CR before a newline). Records with no key (no such field, no match, not a URL with a host) share one "no key" lane. Each key waits in its own queue at --key-rate; keys due together take turns (round robin), so a noisy key never holds back a quiet one: within a key records keep their order, across keys the output order may differ from the input\'s. With --exec, an overload (429, 503, --overload-on) pauses only the refused record\'s key. Needs --key-rate or --key-rates' -r -f
complete -c drip -n "__fish_drip_needs_command" -l field-separator -d 'Fields for --key N and --key host:N are separated by this byte (\',\' or an escape such as \'\\t\') instead of runs of blanks' -r -f
complete -c drip -n "__fish_drip_needs_command" -l key-rate -d 'Each key\'s own limit, records per unit (as --rate, with its burst after a colon: 5/s:10). The global --rate limits, if any, still cap all records together: a record leaves when both allow. With --share, each key\'s limit holds for all the drips sharing it together (a record of a key with no slot reserved waits a round trip). Given as KEY=RATE[:BURST] (again for each row), a row of the rate table as --key-rates reads it (github.com=1/s:2, \'*.github.com=1/s\'), which replaces the file\'s row for the same KEY; RATE[:BURST] alone is then the limit of the keys no row matches. Needs --key' -r -f
complete -c drip -n "__fish_drip_needs_command" -l key-rates -d 'A rate table per key: each line of FILE a row, KEY RATE[:BURST] [JOBS] (blanks between; blank lines, and a word starting with # to the end of its line, skipped). JOBS, with --exec: at most JOBS jobs of each key the row matches at once, in place of --key-jobs. KEY is a key (github.com), *.DOMAIN (the keys ending in .DOMAIN: its subdomains, not DOMAIN itself) or * (every key). A key takes its exact row, else the longest *.DOMAIN matching it, else *, else --key-rate RATE, else no limit of its own. With --key host, a row\'s key is spelled as the hosts are (GitHub.COM. is github.com). drip ctl NAME key-rates FILE, or SIGHUP (which then stops drip no more), reads the table again, each key keeping its place in its schedule; a bad file is said and the table in force stays. With --share, the table is shared as --key-rate is: every drip on the NAME must start with the same rows, and drip ctl or SIGHUP on one changes it for all. Needs --key' -r -F
complete -c drip -n "__fish_drip_needs_command" -l key-capacity -d 'Records one key may have waiting: a number (as --capacity: 500, 10k), or a DURATION for what --key-rate drains in that time (⌊key rate × DURATION⌋); a key at this bound meets the overflow policy (drop-oldest then evicts its own oldest) [default: --capacity]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l key-jobs -d 'With --exec: at most N jobs of one key running at once, beside -j for all keys (a key whose row of --key-rates has a JOBS column takes that instead). A key at its limit starts nothing until one of its jobs ends (its retries included): its records wait in its own queue, and the other keys go on. Records with no key count as one key. With it, --key needs no --key-rate: a key\'s jobs may be its only limit. With --share, a key\'s limit holds across every drip on the NAME (a lease per job, as --share-jobs takes, beside it if given): a record whose key the drips run N of waits for a lease in its -j slot (at most N such of a key), and the other keys go on' -r -f
complete -c drip -n "__fish_drip_needs_command" -l max-keys -d 'Keys remembered at most. A key with nothing waiting whose schedule has recovered its full burst is idle and forgotten first (that changes no departure); when every key is busy, a record of a new key meets the overflow policy as if the bucket were full (drop-oldest drops it as the newest; block waits until a key is idle) [default: 100000]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l share -d 'Share the --rate limits (the default 1/s when no rate is given) and --byte-rate limits, and each key\'s --key-rate limit, with every drip given the same NAME (1 to 200 letters, digits, \'.\', \'_\', \'-\', \':\'; not starting with \'.\'): on this host with no server (a state file under $XDG_RUNTIME_DIR/drip or /tmp/drip-$UID), or on any host through Redis or Valkey: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]/NAME, rediss://... (TLS; trusting the system\'s CAs, or SSL_CERT_FILE), redis+unix:///SOCKET/NAME[?db=DB&user=USER&pass=PASSWORD], valkey://... (no other query string); a primary behind Sentinel: redis+sentinel://HOST[:PORT],.../PRIMARY[/DB]/NAME (the sentinels asked for the primary, a failover followed; a password as for redis://); a Redis Cluster: redis+cluster://HOST[:PORT],.../NAME, or redis:// to any of its nodes. All of them must give the same rates and bursts, in any order, per key too (else exit 2). Under a byte rate each reserved slot carries one record of at most the size it was reserved for' -r -f
complete -c drip -n "__fish_drip_needs_command" -l share-on-error -d 'When the shared state cannot be reached: wait (send nothing, say so on stderr unless -q, and retry with backoff; records wait in the bucket), local (pace alone at the rate divided by --share-peers until it answers again, and hold that pace 3 s more as it shares again; a shared --budget counts alone, up to N divided by --share-peers a window; warn once unless -q), or fail (exit 4). A setup no retry mends (a state file drip cannot use, a password the server wants or refuses, a server that is not Redis) exits 4 under every policy' -r -f -a "wait\t'send nothing, retry with backoff; records wait in the bucket'
local\t'pace alone at the rate divided by --share-peers (a --budget: count alone, N divided by it a window), warn once'
fail\t'exit with status 4'"
complete -c drip -n "__fish_drip_needs_command" -l share-peers -d 'How many drips share the limits, for --share-on-error local' -r -f
complete -c drip -n "__fish_drip_needs_command" -l share-jobs -d 'With --exec and --share: at most N jobs running at once across every drip on the NAME (this host\'s, or every host\'s through Redis). Each running job holds a lease in the shared state, renewed every second; the leases of a drip that died lapse within 5 s' -r -f
complete -c drip -n "__fish_drip_needs_command" -l exec -d 'Run COMMAND once per record instead of writing records to stdout: {} in an argument is replaced by the record (delimiter excluded); without {}, the record is the last argument. {headers} is the path of a file for the job\'s HTTP response headers (curl -D {headers}): 429 and 503 there mean overload, 408, 500, 502 and 504 a transient failure, other statuses from 400 a final one. {usage} is the path of a file for what the job spent (read by --settle). Jobs get DRIP_RECORD, DRIP_RECORD_ID (an idempotency key), DRIP_ATTEMPT, DRIP_HEADERS ({headers}) and DRIP_USAGE ({usage}). No shell (write sh -c \'...\' for one). Takes the rest of the command line, or up to a \';\': drip\'s FILEs go before it (reading stdin, drip names a file given after {}, which went to the command)' -r -f -a "(__fish_complete_command)"
complete -c drip -n "__fish_drip_needs_command" -s j -l jobs -d 'At most N jobs at once (the rate limits starts; both hold) [default: 1]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l retries -d 'Retry a record up to N times after a transient failure or an overload [default: 0]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l retry-on -d 'Exit statuses that are transient failures, retried: a list such as 1,75,100-110 [default: 6,7,28,35,52,55,56,75: EX_TEMPFAIL and curl\'s could-not-connect, timeout and send/receive failures]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l overload-on -d 'Exit statuses that mean the service is overloaded, as 429 and 503 do: every start pauses (with --key, the starts of the record\'s key only), for Retry-After or else a backoff that grows with each overload in a row; then the rate comes back gradually, and the record is retried' -r -f
complete -c drip -n "__fish_drip_needs_command" -l backoff -d 'Wait before retry n: a random time between 0 and min(MAX, MIN·2^n) (exponential backoff, full jitter) [default: 100ms..30s]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l timeout -d 'Kill an attempt that runs longer than DURATION: TERM to its process group, KILL one second later' -r -f
complete -c drip -n "__fish_drip_needs_command" -l deadline -d 'Give up on a record DURATION after it was read, counting its time in the bucket and all its attempts: it expires' -r -f
complete -c drip -n "__fish_drip_needs_command" -l joblog -d 'Write one JSON line per attempt to FILE (truncated first; each line flushed as written): id (DRIP_RECORD_ID), number (DRIP_RECORD), record (a JSON string: valid UTF-8 as it is, a backslash as \\\\, each byte of invalid UTF-8 as \\xNN), attempt (from 1), start_us (Unix time, whole microseconds), duration_us, exit or signal (null when not), timed_out, http_status (null when no headers file) and outcome: retry, overload, or the record\'s fate on its last line (succeeded, failed, expired, undelivered); error when the record could not be an argument (a NUL byte, over the system\'s limit: it fails alone)' -r -F
complete -c drip -n "__fish_drip_needs_command" -l resume -d 'Skip the records that succeeded in earlier runs logged in JOBLOG, matched by content (the hash in DRIP_RECORD_ID), not by place: a record that appears twice runs again unless it succeeded twice. Skipped records count as skipped_done. This run\'s lines are appended to JOBLOG (created if it does not exist yet: everything runs); a last line cut short by a killed run is passed over' -r -F
complete -c drip -n "__fish_drip_needs_command" -l settle -d 'After each attempt, what the job really spent of a cost (--cost NAME=…, or the unnamed one without NAME=), read from its output: an estimate as --cost takes one, its JSON paths into the job\'s stdout (parsed whole, else its last line), such as usage.prompt_tokens, or into the file {usage} names in the command, when the job writes it. The difference from what the record was charged is settled: an overestimate is given back (later records go sooner), an underestimate is charged (later records wait). An attempt whose output has no such number keeps its estimate (said once on stderr). May be given once for each cost. With --share, the difference reaches the shared cost limits: given back to, or charged for, every drip on the NAME' -r -f
complete -c drip -n "__fish_drip_needs_command" -l order-window -d 'With --keep-order: how many records may start ahead of the oldest one whose output is not written out yet (each record\'s output is held in memory up to 64 KiB, in a temporary file beyond) [default: 1000]' -r -f
complete -c drip -n "__fish_drip_needs_command" -l stats-json -d 'Write the summary to FILE as one JSON object (and, with --stats-interval, the periodic stats as JSON lines before it); not `-`: stdout carries the records' -r -F
complete -c drip -n "__fish_drip_needs_command" -l stats-interval -d 'Every DURATION (10ms to 100y), write one JSON line of stats to stderr (or to --stats-json FILE)' -r -f
complete -c drip -n "__fish_drip_needs_command" -l metrics -d 'Keep FILE up to date with the figures in the Prometheus text format (records by fate, depth, oldest age, rate, jobs, retries, overload pauses, --share\'s calls, the top keys): written anew and renamed over FILE every --stats-interval (or each second) and at exit, for node_exporter\'s textfile collector' -r -F
complete -c drip -n "__fish_drip_needs_command" -l name -d 'Name this drip for `drip ctl` (1 to 64 letters, digits, `_`, `-`; not all digits); it is always reachable by its pid too' -r -f
complete -c drip -n "__fish_drip_needs_command" -s 0 -l null -d 'Records end with NUL instead of newline, on input and output'
complete -c drip -n "__fish_drip_needs_command" -l drain -d 'On the first stopping signal (SIGINT, SIGTERM, SIGHUP, ...), stop reading but write what the bucket holds at the rate before exiting'
complete -c drip -n "__fish_drip_needs_command" -l record-on-stdin -d 'Give each job its record on stdin instead of as an argument'
complete -c drip -n "__fish_drip_needs_command" -l adapt -d 'Lower the rate on each overload (halve it) and raise it back on successes, never above the configured rate (with --key, the rate of the key refused)'
complete -c drip -n "__fish_drip_needs_command" -l no-quota-pacing -d 'Do not pace from the quota the server announces in the headers file (RateLimit, RateLimit-Policy, X-RateLimit-Remaining and X-RateLimit-Reset; OpenAI\'s x-ratelimit-*-requests and -tokens; Anthropic\'s anthropic-ratelimit-*): by default, when a job writes {headers}, the remaining quota is spread over the time to its reset, the requests in flight counted against it, never faster than --rate; the tokens remaining pace the cost (--cost), a record costing more than is left waiting for the reset, or (OpenAI\'s and Anthropic\'s requests and tokens, buckets refilled until their reset) until enough came back'
complete -c drip -n "__fish_drip_needs_command" -s k -l keep-order -d 'Write each job\'s output in input order, whole, whatever order the jobs end in (stderr is passed on as it comes). Outputs wait for the records before them; at most --order-window records start ahead of the oldest one not written out, so a long job holds new starts back'
complete -c drip -n "__fish_drip_needs_command" -l stats -d 'Print a summary on stderr at exit'
complete -c drip -n "__fish_drip_needs_command" -l progress -d 'Draw the live display on stderr even when it is not a terminal, or when stdout is the same terminal (the display then keeps to the bottom row and the records scroll above it)'
complete -c drip -n "__fish_drip_needs_command" -s q -l quiet -d 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for'
complete -c drip -n "__fish_drip_needs_command" -l no-control -d 'Listen on no control socket: `drip ctl` cannot reach this drip'
complete -c drip -n "__fish_drip_needs_command" -s h -d 'Print a one-screen summary of the flags most runs need, grouped by task (--help: every flag; man drip: the whole manual)'
complete -c drip -n "__fish_drip_needs_command" -l help -d 'Print help: every flag, examples, exit statuses, the environment (-h: a one-screen summary)'
complete -c drip -n "__fish_drip_needs_command" -s V -l version -d 'Print the version'
complete -c drip -n "__fish_drip_needs_command" -a "ctl" -d 'Steer a running drip of this user: list them, change a rate, pause, resume, read its figures'
complete -c drip -n "__fish_drip_needs_command" -a "take" -d 'Take one slot from a shared limit, for a script that makes one call at a time: `drip take api-quota -r 10/s && curl ...`'
complete -c drip -n "__fish_drip_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c drip -n "__fish_drip_using_subcommand ctl" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c drip -n "__fish_drip_using_subcommand take" -s r -l rate -d 'A record limit of the shared ones, as drip\'s --rate (RATE[:BURST]; may be given more than once)' -r -f
complete -c drip -n "__fish_drip_using_subcommand take" -l byte-rate -d 'A byte limit of the shared ones, as drip\'s --byte-rate' -r -f
complete -c drip -n "__fish_drip_using_subcommand take" -l cost-rate -d 'A cost limit of the shared ones, as drip\'s --cost-rate' -r -f
complete -c drip -n "__fish_drip_using_subcommand take" -l cost -d 'What the slot spends of the --cost-rate (or bytes of the --byte-rate) limits; each --rate counts it as one [default: 1]' -r -f
complete -c drip -n "__fish_drip_using_subcommand take" -l timeout -d 'Wait at most DURATION for the slot to be due; a slot not due by then is not taken (exit status 124)' -r -f
complete -c drip -n "__fish_drip_using_subcommand take" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c drip -n "__fish_drip_using_subcommand help; and not __fish_seen_subcommand_from ctl take help" -f -a "ctl" -d 'Steer a running drip of this user: list them, change a rate, pause, resume, read its figures'
complete -c drip -n "__fish_drip_using_subcommand help; and not __fish_seen_subcommand_from ctl take help" -f -a "take" -d 'Take one slot from a shared limit, for a script that makes one call at a time: `drip take api-quota -r 10/s && curl ...`'
complete -c drip -n "__fish_drip_using_subcommand help; and not __fish_seen_subcommand_from ctl take help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c drip -n "__fish_drip_exec_words >/dev/null" -f -a "(__fish_drip_exec_complete)"

function __fish_drip_ctl_words
    # drip ctl: list or a running drip (its pid or --name), then what to do.
    set -l cmd (commandline -opc)
    if test (count $cmd) -eq 2
        echo list
        command $cmd[1] ctl list 2>/dev/null | tr '{,}' '\n\n\n' | sed -n 's/^"pid":\([0-9]*\)$/\1/p; s/^"name":"\([A-Za-z0-9_-]*\)"$/\1/p'
    else if test (count $cmd) -eq 3; and test "$cmd[3]" != list
        printf '%s\n' info stats keys jobs pause resume rate byte-rate cost-rate key-rate -j key-jobs
    end
end
complete -c drip -n "__fish_drip_using_subcommand ctl" -f -a "(__fish_drip_ctl_words)"
