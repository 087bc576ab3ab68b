#!/usr/bin/env bash
# Limits per key: throughput and CPU against the unkeyed path on the same
# input (unlimited, and paced at the rate all keys together allow), and peak
# RSS with many keys remembered. Release build; the median of five runs.
#
#   cargo build --release && bench/keyed.sh [RECORDS] [KEYS] [RSS_KEYS]
#
# Defaults: 10,000,000 records over 100,000 keys; 1,000,000 keys for RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
drip=${DRIP:-target/release/drip}
n=${1:-10000000}
keys=${2:-100000}
rss_keys=${3:-1000000}
dir=$(mktemp -d /dev/shm/drip-keyed.XXXXXX)
trap 'rm -rf "$dir"' EXIT

# "k<i mod keys> <i>": every key in turn, as many records each.
awk -v n="$n" -v k="$keys" 'BEGIN { for (i = 0; i < n; i++) printf "k%d %d\n", i % k, i }' > "$dir/in"
awk -v n="$rss_keys" 'BEGIN { for (i = 0; i < n; i++) printf "k%d %d\n", i, i }' > "$dir/rss"

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

row() {
  local name=$1; shift
  read -r wall cpu rss < <(median "$@")
  printf '| %s | %.3f s | %.1f M/s | %.0f ns | %.1f MiB |\n' "$name" "$wall" \
    "$(echo "$n / $wall / 1000000" | bc -l)" "$(echo "$cpu * 1000000000 / $n" | bc -l)" \
    "$(echo "$rss / 1024" | bc -l)"
}

echo "| run ($n records, $keys keys) | wall | throughput | CPU per record | peak RSS |"
echo "| --- | --- | --- | --- | --- |"
row "unkeyed, --rate inf" "$drip" -q -r inf "$dir/in"
row "unkeyed, --rate 100000000/s" "$drip" -q -r 100000000/s "$dir/in"
row "--key 1 --key-rate 1000/s" "$drip" -q --key 1 --key-rate 1000/s "$dir/in"
row "--key 1 --key-rate 1000000000/s (never binds)" "$drip" -q --key 1 --key-rate 1000000000/s "$dir/in"
echo
echo "schedule floor: each key's $((n / keys)) records at 1000/s take at least" \
  "$(( (n / keys - 1) )) ms, keyed or not"

read -r _ _ rss < <(measure "$drip" -q --key 1 --key-rate 1000/s --max-keys "$rss_keys" "$dir/rss")
read -r _ _ base < <(measure "$drip" -q --key 1 --key-rate 1000/s --max-keys 1 -o drop-newest "$dir/rss")
echo
echo "peak RSS with $rss_keys keys remembered: $((rss / 1024)) MiB" \
  "($(( (rss - base) * 1024 / rss_keys )) bytes per key over the $((base / 1024)) MiB of one key)"
