#!/bin/sh
# Token-metered API batches: 300 chat requests through drip against the
# loopback LLM-like server of tests/common/llm.rs (5 s windows of 500
# requests, 40,000 prompt and 40,000 completion tokens; max_tokens 1000,
# completions a quarter of it on average), settled from usage, and the
# same 300 on estimates alone, and the 300 split between two drips sharing
# the budgets through a redis-server the test starts (--share, settled
# too: one cost, prompt and completion together, as a shared slot is
# reserved for one weight). Prints, for each, the requests answered,
# the 429s, the tokens and the share of the output tokens the windows
# allowed from the first answer to the last (pro rata: the first and the
# last window count for the part of them the run covered); then each
# window's requests and output tokens; and, from the joblog, the jobs in
# flight on average and how long they took (each holds its whole estimate
# until its response settles it).
#
#   sh bench/llm.sh [REQUESTS]
set -eu
n=${1:-300}
cd "$(dirname "$0")/.."
DRIP_LLM_REQUESTS=$n DRIP_LLM_ESTIMATED=$n DRIP_LLM_SHARED=$n \
  cargo test --test suite llm_api:: -- --nocapture --test-threads 1 2>&1 |
  grep -oE '(settled|estimated|shared)( jobs)?: .*|^  window .*|^test result.*'
