
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'drip' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'drip'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'drip' {
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, a bare 10 (per second), or inf (unlimited) for no pacing; the period is at most 100 years. Give it again for several limits at once, each with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]')
            [CompletionResult]::new('--rate', '--rate', [CompletionResultType]::ParameterName, 'Records per unit of time: 10/s, 90/min, 2/h, 1/d, 3/5s, 1/250ms, 0.5/s, a bare 10 (per second), or inf (unlimited) for no pacing; the period is at most 100 years. Give it again for several limits at once, each with its own burst after a colon: -r 10/s -r 500/min:50 [default: 1/s]')
            [CompletionResult]::new('--byte-rate', '--byte-rate', [CompletionResultType]::ParameterName, 'Bytes per unit of time, delimiters included: 1MiB/s, 500KB/s, 10GB/h; a record of n bytes spends n. BURST (a size, default 1 byte) is how many bytes may leave back to back; a record larger than BURST leaves alone once a full burst is saved, and the next waits until it is paid for. May be given more than once')
            [CompletionResult]::new('-i', '-i', [CompletionResultType]::ParameterName, 'One record every DURATION (100ms, 2s, 1m; at most 100y): another way to give the rate')
            [CompletionResult]::new('--interval', '--interval', [CompletionResultType]::ParameterName, 'One record every DURATION (100ms, 2s, 1m; at most 100y): another way to give the rate')
            [CompletionResult]::new('-b', '-b', [CompletionResultType]::ParameterName, 'Records that may leave back to back after an idle spell (token bucket); the long-run rate is unchanged. 1 means strict spacing below 500/s; from 500/s up, a wake-up up to 2 ms late also sends the records due meanwhile: at most N + rate × 2ms together. With several --rate limits, give each its burst as RATE:BURST instead [default: 1]')
            [CompletionResult]::new('--burst', '--burst', [CompletionResultType]::ParameterName, 'Records that may leave back to back after an idle spell (token bucket); the long-run rate is unchanged. 1 means strict spacing below 500/s; from 500/s up, a wake-up up to 2 ms late also sends the records due meanwhile: at most N + rate × 2ms together. With several --rate limits, give each its burst as RATE:BURST instead [default: 1]')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Records the bucket holds')
            [CompletionResult]::new('--capacity', '--capacity', [CompletionResultType]::ParameterName, 'Records the bucket holds')
            [CompletionResult]::new('--capacity-bytes', '--capacity-bytes', [CompletionResultType]::ParameterName, 'Bytes the bucket holds, delimiters included (10KiB, 64MiB); full at either bound')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'What to do when the bucket is full: block (backpressure), drop-newest, drop-oldest, or fail (exit 3)')
            [CompletionResult]::new('--overflow', '--overflow', [CompletionResultType]::ParameterName, 'What to do when the bucket is full: block (backpressure), drop-newest, drop-oldest, or fail (exit 3)')
            [CompletionResult]::new('-d', '-d', [CompletionResultType]::ParameterName, 'Records end with this byte: a character or an escape such as ''\t'', ''\0'' or ''\x1e''')
            [CompletionResult]::new('--delimiter', '--delimiter', [CompletionResultType]::ParameterName, 'Records end with this byte: a character or an escape such as ''\t'', ''\0'' or ''\x1e''')
            [CompletionResult]::new('--max-record', '--max-record', [CompletionResultType]::ParameterName, 'Longest record accepted, delimiter excluded (512KiB, 64MiB; KB means 1000 bytes, KiB 1024)')
            [CompletionResult]::new('--oversize', '--oversize', [CompletionResultType]::ParameterName, 'A record over --max-record or --capacity-bytes: fail (stop reading, exit 1) or skip (stream it to --dead-letter as it is read, count it as skipped, and read on)')
            [CompletionResult]::new('--max-wait', '--max-wait', [CompletionResultType]::ParameterName, 'Expire records that waited in the bucket longer than DURATION (at most 100y) instead of writing them')
            [CompletionResult]::new('--dead-letter', '--dead-letter', [CompletionResultType]::ParameterName, 'Append every record not written to stdout (dropped, expired, undelivered) to FILE, byte-exact, in the order it left the bucket')
            [CompletionResult]::new('--stats-json', '--stats-json', [CompletionResultType]::ParameterName, 'Write the summary to FILE as one JSON object (and, with --stats-interval, the periodic stats as JSON lines before it)')
            [CompletionResult]::new('--stats-interval', '--stats-interval', [CompletionResultType]::ParameterName, 'Every DURATION (10ms to 100y), write one JSON line of stats to stderr (or to --stats-json FILE)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Limit records per key: SPEC is a field number (--key 1; fields split on blanks, or on --field-separator) or a regular expression whose first capture group is the key (--key ''^https?://([^/:]+)''). Records with no key (no such field, no match) share one "no key" lane. Each key waits in its own queue at --key-rate; keys due together take turns (round robin), so a noisy key never holds back a quiet one: within a key records keep their order, across keys the output order may differ from the input''s. Needs --key-rate')
            [CompletionResult]::new('--field-separator', '--field-separator', [CompletionResultType]::ParameterName, 'Fields for --key N are separated by this byte ('','' or an escape such as ''\t'') instead of runs of blanks')
            [CompletionResult]::new('--key-rate', '--key-rate', [CompletionResultType]::ParameterName, 'Each key''s own limit, records per unit (as --rate, with its burst after a colon: 5/s:10). The global --rate limits, if any, still cap all records together: a record leaves when both allow. Needs --key')
            [CompletionResult]::new('--key-capacity', '--key-capacity', [CompletionResultType]::ParameterName, 'Records one key may have waiting; a key at this bound meets the overflow policy (drop-oldest then evicts its own oldest) [default: --capacity]')
            [CompletionResult]::new('--max-keys', '--max-keys', [CompletionResultType]::ParameterName, 'Keys remembered at most. A key with nothing waiting whose schedule has recovered its full burst is idle and forgotten first (that changes no departure); when every key is busy, a record of a new key meets the overflow policy as if the bucket were full (drop-oldest drops it as the newest; block waits until a key is idle)')
            [CompletionResult]::new('-0', '-0', [CompletionResultType]::ParameterName, 'Records end with NUL instead of newline, on input and output')
            [CompletionResult]::new('--null', '--null', [CompletionResultType]::ParameterName, 'Records end with NUL instead of newline, on input and output')
            [CompletionResult]::new('--drain', '--drain', [CompletionResultType]::ParameterName, 'On the first SIGINT, SIGTERM or SIGHUP, stop reading but write what the bucket holds at the rate before exiting')
            [CompletionResult]::new('--stats', '--stats', [CompletionResultType]::ParameterName, 'Print a summary on stderr at exit')
            [CompletionResult]::new('--progress', '--progress', [CompletionResultType]::ParameterName, 'Show live progress on stderr even when it is not a terminal')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'No progress display: stderr gets only errors and what --stats and --stats-interval ask for')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
