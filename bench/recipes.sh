#!/bin/sh
# The cookbook's chat recipes (OpenAI's: one budget of input and output
# tokens; Anthropic's: input and output apart) against the loopback
# servers of tests/common/llm.rs speaking each provider's rate-limit
# headers and usage, the minute made 6 s (OpenAI) and 3 s (Anthropic),
# the quotas fixed windows and then buckets refilled continuously:
# each run's 429s and the share of the binding quota spent from the
# first answer to the last, window by window, as written and with
# --no-quota-pacing (the budgets alone, the headers not read).
#
#   sh bench/recipes.sh [REQUESTS]
set -eu
n=${1:-500}
cd "$(dirname "$0")/.."
DRIP_RECIPE_REQUESTS=$n \
  cargo test --test suite recipes::the_ -- --nocapture --test-threads 1 2>&1 |
  grep -E '(OpenAi|Anthropic)( buckets)?( --no-quota-pacing)?: |^  window |^test result'

