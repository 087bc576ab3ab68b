#!/usr/bin/env bash
# Limits per key: throughput and CPU against the unkeyed path on the same
# input (unlimited, and paced at the rate all keys together allow), the
# keyed path on three orders of keys, and peak RSS with many keys
# remembered. Release build; the median of five runs.
#
#   cargo build --release && bench/keyed.sh [RECORDS] [KEYS] [RSS_KEYS]
#   bench/keyed.sh 2000000 20000     # the smaller setup
#
# Defaults: 10,000,000 records over 100,000 keys; 1,000,000 keys for RSS.
# The orders that are not in turn run twice: with the default --capacity
# 1000, and with room for the whole input (-c RECORDS). In those orders a
# key's records now and then come closer than its interval and wait, so
# at the default capacity the bucket fills and the reader waits for room
# (docs/benchmarks.md works out how much): the second run shows what the
# keyed path itself allows.
# The orders (bench/keys.py, a fixed seed): every key in turn; each record's
# key uniformly at random; Zipf-skewed, s = 1.1. The floor is the least wall
# time the key rate allows: the busiest key's records, one interval apart.
# Under Zipf the busiest key holds about an eighth of the input, so its key
# rate is set for the floor of the keys in turn.
set -euo pipefail
cd "$(dirname "$0")/.."
drip=${DRIP:-target/release/drip}
n=${1:-10000000}
keys=${2:-100000}
rss_keys=${3:-1000000}
dir=$(mktemp -d /dev/shm/drip-keyed.XXXXXX)
trap 'rm -rf "$dir"' EXIT

for order in rotation random zipf; do
  python3 bench/keys.py "$order" "$n" "$keys" > "$dir/$order"
done
awk -v n="$rss_keys" 'BEGIN { for (i = 0; i < n; i++) printf "k%d %d\n", i, i }' > "$dir/rss"

# The most records of one key in an input.
busiest() {
  awk '{ c[$1]++ } END { m = 0; for (k in c) if (c[k] > m) m = c[k]; print m }' "$1"
}

# One run: wall s, CPU s (user + sys), peak RSS KiB.
measure() {
  /usr/bin/time -f '%e %U %S %M' -o "$dir/time" "$@" > /dev/null
  read -r wall user sys rss < "$dir/time"
  echo "$wall $(echo "$user + $sys" | bc -l) $rss"
}

# The median run of five (by wall time).
median() {
  for _ in 1 2 3 4 5; do measure "$@"; done | sort -n | sed -n 3p
}

# row NAME FLOOR_S COMMAND...: FLOOR_S 0 for none.
row() {
  local name=$1 floor=$2; shift 2
  read -r wall cpu rss < <(median "$@")
  # time(1) gives wall time in 10 ms steps: a shorter run counts as 10 ms.
  wall=$(echo "if ($wall < 0.01) 0.01 else $wall" | bc -l)
  local floor_cols="| – | – "
  if [ "$floor" != 0 ]; then
    floor_cols=$(printf '| %.3f s | %.2f× ' "$floor" "$(echo "$wall / $floor" | bc -l)")
  fi
  printf '| %s | %.3f s %s| %.1f M/s | %.0f ns | %.1f MiB |\n' "$name" "$wall" "$floor_cols" \
    "$(echo "$n / $wall / 1000000" | bc -l)" "$(echo "$cpu * 1000000000 / $n" | bc -l)" \
    "$(echo "$rss / 1024" | bc -l)"
}

# Each key's interval at 1000/s is 1 ms: the floor is (busiest - 1) ms.
floor_at_1000() { echo "($(busiest "$1") - 1) / 1000" | bc -l; }
rotation_floor=$(floor_at_1000 "$dir/rotation")
random_floor=$(floor_at_1000 "$dir/random")
# Zipf: the interval (whole ns) that gives its busiest key the floor of the
# keys in turn.
zipf_busiest=$(busiest "$dir/zipf")
zipf_ns=$(echo "$rotation_floor * 1000000000 / ($zipf_busiest - 1)" | bc)
zipf_floor=$(echo "($zipf_busiest - 1) * $zipf_ns / 1000000000" | bc -l)

echo "| run ($n records, $keys keys) | wall | floor | wall / floor | throughput | CPU per record | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
row "unkeyed, --rate inf" 0 "$drip" -q -r inf "$dir/rotation"
row "unkeyed, --rate 100000000/s" 0 "$drip" -q -r 100000000/s "$dir/rotation"
row "keys in turn, --key 1 --key-rate 1000/s" "$rotation_floor" \
  "$drip" -q --key 1 --key-rate 1000/s "$dir/rotation"
row "keys in turn, --key-rate 1000000000/s (never binds)" 0 \
  "$drip" -q --key 1 --key-rate 1000000000/s "$dir/rotation"
row "keys at random, --key 1 --key-rate 1000/s" "$random_floor" \
  "$drip" -q --key 1 --key-rate 1000/s "$dir/random"
row "keys at random, --key 1 --key-rate 1000/s -c $n" "$random_floor" \
  "$drip" -q --key 1 --key-rate 1000/s -c "$n" "$dir/random"
row "keys Zipf s = 1.1, --key 1 --key-rate 1/${zipf_ns}ns" "$zipf_floor" \
  "$drip" -q --key 1 --key-rate "1/${zipf_ns}ns" "$dir/zipf"
row "keys Zipf s = 1.1, --key 1 --key-rate 1/${zipf_ns}ns -c $n" "$zipf_floor" \
  "$drip" -q --key 1 --key-rate "1/${zipf_ns}ns" -c "$n" "$dir/zipf"

read -r _ _ rss < <(measure "$drip" -q --key 1 --key-rate 1000/s --max-keys "$rss_keys" "$dir/rss")
read -r _ _ base < <(measure "$drip" -q --key 1 --key-rate 1000/s --max-keys 1 -o drop-newest "$dir/rss")
echo
echo "peak RSS with $rss_keys keys remembered: $((rss / 1024)) MiB" \
  "($(( (rss - base) * 1024 / rss_keys )) bytes per key over the $((base / 1024)) MiB of one key)"
