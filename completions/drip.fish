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
complete -c drip -l key -d 'Limit records per key: SPEC is a field number (--key 1; fields split on blanks, or on --field-separator) or a regular expression whose first capture group is the key (--key \'^https?://([^/:]+)\'). Records with no key (no such field, no match) share one "no key" lane. Each key waits in its own queue at --key-rate; keys due together take turns (round robin), so a noisy key never holds back a quiet one: within a key records keep their order, across keys the output order may differ from the input\'s. Needs --key-rate' -r
complete -c drip -l field-separator -d 'Fields for --key N are separated by this byte (\',\' or an escape such as \'\\t\') instead of runs of blanks' -r
complete -c drip -l key-rate -d 'Each key\'s own limit, records per unit (as --rate, with its burst after a colon: 5/s:10). The global --rate limits, if any, still cap all records together: a record leaves when both allow. Needs --key' -r
complete -c drip -l key-capacity -d 'Records one key may have waiting; a key at this bound meets the overflow policy (drop-oldest then evicts its own oldest) [default: --capacity]' -r
complete -c drip -l max-keys -d 'Keys remembered at most. A key with nothing waiting whose schedule has recovered its full burst is idle and forgotten first (that changes no departure); when every key is busy, a record of a new key meets the overflow policy as if the bucket were full (drop-oldest drops it as the newest; block waits until a key is idle)' -r
complete -c drip -s 0 -l null -d 'Records end with NUL instead of newline, on input and output'
complete -c drip -l drain -d 'On the first SIGINT, SIGTERM or SIGHUP, stop reading but write what the bucket holds at the rate before exiting'
complete -c drip -l stats -d 'Print a summary on stderr at exit'
complete -c drip -l progress -d 'Show live progress on stderr even when it is not a terminal'
complete -c drip -s q -l quiet -d 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for'
complete -c drip -s h -l help -d 'Print help (see more with \'--help\')'
complete -c drip -s V -l version -d 'Print version'
