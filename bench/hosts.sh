#!/bin/sh
# Each host its own limits (docs/benchmarks.md, "Each host its own
# limits"): five loopback hosts of tests/common/hosts.rs, each enforcing
# its own rate (429 with Retry-After over it) and concurrency (503 over
# it), N URLs spread unevenly over them (the slow one, 10/s, holds a
# third), checked by curl under drip with a rate table (--key host
# --key-rates, each host's concurrency as its JOBS column), then by
# xargs -P 16 and GNU parallel -j 16 over the same URLs (fresh hosts for
# each), and by two drips sharing the table through a Redis the test
# starts (half the URLs each). Prints each run's time, its 200s, 429s and
# 503s, each host's requests by its own stamps under drip, the slowest
# host's floor and what one rate for all keys would take.
#
#   sh bench/hosts.sh [URLS]
#
# GNU parallel is `parallel` on PATH if it is GNU's (moreutils' parallel
# is not), or the one DRIP_HOSTS_PARALLEL names.
set -eu
n=${1:-2000}
cd "$(dirname "$0")/.."
DRIP_HOSTS_URLS=$n DRIP_HOSTS_OTHERS=1 \
  cargo test --test suite key_hosts:: -- --nocapture --test-threads 1 2>&1 |
  grep -oE '(drip --key-rates|two drips|drip --key-rate 5|xargs -P|parallel -j|parallel:|one rate|  host|not judged).*|^test result.*'
