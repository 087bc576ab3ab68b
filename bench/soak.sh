#!/usr/bin/env bash
# Soak: drip under sustained load with a stalling consumer (not run in CI).
#
#   bench/soak.sh [SECONDS]      default 600 (ten minutes)
#
# A producer (drip itself, pacing `seq` at 150,000/s) feeds the drip under
# test, which passes 100,000/s through a 10,000-record bucket with
# drop-oldest. The consumer reads steadily but stalls for 3 s every 20 s.
# At the end the drip under test gets SIGTERM; the script then checks that
#   read = written + dropped_oldest + undelivered   (from --stats-json),
#   the consumer saw exactly `written` records, in increasing order,
# and prints peak RSS samples taken every 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
drip=${DRIP:-target/release/drip}
[ -x "$drip" ] || cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

consumer='
import os, sys, time
count, last, ok = 0, 0, True
start = time.monotonic()
next_stall = start + 20
buf = b""
while True:
    chunk = os.read(0, 1 << 16)
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        n = int(line)
        ok &= n > last
        last = n
        count += 1
    if time.monotonic() >= next_stall:
        time.sleep(3)
        next_stall = time.monotonic() + 20
print(count, "in-order" if ok else "OUT-OF-ORDER")
'

seq 1 100000000000 | "$drip" -q -r 150000/s 2>/dev/null \
  | "$drip" -q -r 100000/s -c 10000 -o drop-oldest --stats-json "$work/stats.json" \
  | python3 -c "$consumer" > "$work/consumer.txt" &
pipeline=$!
sleep 1
pid=$(pgrep -f -- "--stats-json $work/stats.json" | head -n1)
echo "soak: drip under test is pid $pid; running ${secs}s" >&2
printf '%8s %10s\n' "t (s)" "RSS (KiB)" > "$work/rss.txt"
for ((t = 10; t <= secs; t += 10)); do
  sleep 10
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo gone)
  printf '%8d %10s\n' "$t" "$rss" >> "$work/rss.txt"
done
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
kill -TERM "$pid"
wait "$pipeline" || true

python3 - "$work/stats.json" "$work/consumer.txt" "$work/rss.txt" "$hwm" <<'PY'
import json, sys
stats = json.loads(open(sys.argv[1]).read().splitlines()[-1])
seen, order = open(sys.argv[2]).read().split()
rss = [l.split() for l in open(sys.argv[3]).read().splitlines()[1:]]
kib = [int(r[1]) for r in rss if r[1].isdigit()]
settled = stats["written"] + stats["dropped_newest"] + stats["dropped_oldest"] + stats["expired"] + stats["undelivered"]
print(f"elapsed        {stats['elapsed_ms']/1000:.0f} s")
for k in ("read", "written", "dropped_oldest", "undelivered", "max_depth"):
    print(f"{k:<14} {stats[k]:,}")
print(f"consumer saw   {int(seen):,} records, {order}")
print(f"RSS (KiB)      first {kib[0]}, peak {max(kib)}, last {kib[-1]}; VmHWM {sys.argv[4]}")
ok = stats["read"] == settled and int(seen) == stats["written"] and order == "in-order"
print("invariant      " + ("holds" if ok else "BROKEN"))
sys.exit(0 if ok else 1)
PY
