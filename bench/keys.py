#!/usr/bin/env python3
"""Write keyed input for bench/keyed.sh: RECORDS lines "k<key> <i>" over KEYS
keys, in one of three orders, the same bytes on every run (a fixed seed).

    python3 bench/keys.py ORDER RECORDS KEYS > FILE

ORDER is
  rotation  every key in turn (k<i mod KEYS>): the order in which each key's
            pacing and the input line up;
  random    each record's key drawn uniformly at random;
  zipf      each record's key drawn Zipf-skewed, s = 1.1: key k<r> (r from 0)
            with a probability proportional to 1 / (r + 1)^1.1, so a few
            keys carry much of the input, as in logs and URL lists.

Standard library only.
"""

import itertools
import random
import sys

SEED = 23
ZIPF_S = 1.1


def keys(order: str, records: int, nkeys: int) -> list[int]:
    """Each record's key number, in input order."""
    rng = random.Random(SEED)
    if order == "rotation":
        return [i % nkeys for i in range(records)]
    if order == "random":
        return [int(rng.random() * nkeys) for _ in range(records)]
    if order == "zipf":
        weights = itertools.accumulate(1.0 / (r + 1) ** ZIPF_S for r in range(nkeys))
        return rng.choices(range(nkeys), cum_weights=list(weights), k=records)
    raise SystemExit(f"keys.py: {order}: not an order (rotation, random, zipf)")


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    order, records, nkeys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = sys.stdout
    chunk = 1 << 16
    picked = keys(order, records, nkeys)
    for start in range(0, records, chunk):
        end = min(start + chunk, records)
        out.write("".join(f"k{picked[i]} {i}\n" for i in range(start, end)))


if __name__ == "__main__":
    main()
