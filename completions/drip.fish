complete -c drip -s r -l rate -d 'Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, a bare 10 (per second), or inf (unlimited) for no pacing; the period is at most 100 years. Give it again for several limits at once, each with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]' -r
complete -c drip -l byte-rate -d 'Bytes per unit of time, delimiters included: 1MiB/s, 500KB/s, 10GB/h; a record of n bytes spends n. BURST (a size, default 1 byte) is how many bytes may leave back to back; a record larger than BURST leaves alone once a full burst is saved, and the next waits until it is paid for. May be given more than once' -r
complete -c drip -s i -l interval -d 'One record every DURATION (100ms, 2s, 1m; at most 100y): another way to give the rate' -r
complete -c drip -s b -l burst -d 'Records that may leave back to back after an idle spell (token bucket); the long-run rate is unchanged. 1 means strict spacing below 500/s; from 500/s up, a wake-up up to 2 ms late also sends the records due meanwhile: at most N + rate × 2ms together. With several --rate limits, give each its burst as RATE:BURST instead [default: 1]' -r
complete -c drip -s c -l capacity -d 'Records the bucket holds' -r
complete -c drip -l capacity-bytes -d 'Bytes the bucket holds, delimiters included (10KiB, 64MiB); full at either bound' -r
complete -c drip -s o -l overflow -d 'What to do when the bucket is full: block (backpressure), drop-newest, drop-oldest, or fail (exit 3)' -r
complete -c drip -s d -l delimiter -d 'Records end with this byte: a character or an escape such as \'\\t\', \'\\0\' or \'\\x1e\'' -r
complete -c drip -l max-record -d 'Longest record accepted, delimiter excluded (512KiB, 64MiB; KB means 1000 bytes, KiB 1024)' -r
complete -c drip -l oversize -d 'A record over --max-record or --capacity-bytes: fail (stop reading, exit 1) or skip (stream it to --dead-letter as it is read, count it as skipped, and read on)' -r
complete -c drip -l max-wait -d 'Expire records that waited in the bucket longer than DURATION (at most 100y) instead of writing them' -r
complete -c drip -l dead-letter -d 'Append every record not written to stdout (dropped, expired, undelivered) to FILE, byte-exact, in the order it left the bucket' -r -F
complete -c drip -l stats-json -d 'Write the summary to FILE as one JSON object (and, with --stats-interval, the periodic stats as JSON lines before it)' -r -F
complete -c drip -l stats-interval -d 'Every DURATION (10ms to 100y), write one JSON line of stats to stderr (or to --stats-json FILE)' -r
complete -c drip -l exec -d 'Run COMMAND once per record instead of writing records to stdout: {} in an argument is replaced by the record (delimiter excluded); without {}, the record is the last argument. {headers} is the path of a file for the job\'s HTTP response headers (curl -D {headers}): 429 and 503 there mean overload, 408, 500, 502 and 504 a transient failure, other statuses from 400 a final one. Jobs get DRIP_RECORD, DRIP_RECORD_ID (an idempotency key), DRIP_ATTEMPT and DRIP_HEADERS. No shell (write sh -c \'...\' for one). Takes the rest of the command line, or up to a \';\'' -r
complete -c drip -s j -l jobs -d 'At most N jobs at once (the rate limits starts; both hold) [default: 1]' -r
complete -c drip -l retries -d 'Retry a record up to N times after a transient failure or an overload [default: 0]' -r
complete -c drip -l retry-on -d 'Exit statuses that are transient failures, retried: a list such as 1,75,100-110 [default: 6,7,28,35,52,55,56,75: EX_TEMPFAIL and curl\'s could-not-connect, timeout and send/receive failures]' -r
complete -c drip -l overload-on -d 'Exit statuses that mean the service is overloaded: every start pauses, and the record is retried' -r
complete -c drip -l backoff -d 'Wait before retry n: a random time between 0 and min(MAX, MIN·2^n) (exponential backoff, full jitter) [default: 100ms..30s]' -r
complete -c drip -l timeout -d 'Kill an attempt that runs longer than DURATION: TERM to its process group, KILL one second later' -r
complete -c drip -l deadline -d 'Give up on a record DURATION after it was read, counting its time in the bucket and all its attempts: it expires' -r
complete -c drip -l joblog -d 'Write one JSON line per attempt to FILE' -r -F
complete -c drip -s 0 -l null -d 'Records end with NUL instead of newline, on input and output'
complete -c drip -l drain -d 'On the first SIGINT, SIGTERM or SIGHUP, stop reading but write what the bucket holds at the rate before exiting'
complete -c drip -l stats -d 'Print a summary on stderr at exit'
complete -c drip -l progress -d 'Show live progress on stderr even when it is not a terminal'
complete -c drip -s q -l quiet -d 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for'
complete -c drip -l record-on-stdin -d 'Give each job its record on stdin instead of as an argument'
complete -c drip -l adapt -d 'Lower the rate on each overload (halve it) and raise it back on successes, never above the configured rate'
complete -c drip -s h -l help -d 'Print help (see more with \'--help\')'
complete -c drip -s V -l version -d 'Print version'
