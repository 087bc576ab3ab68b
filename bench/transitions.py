#!/usr/bin/env python3
"""How often `drip --share` holds its bound through its transitions.

    python3 bench/transitions.py                    # 20 runs per backend and transition
    python3 bench/transitions.py --runs 5 --only redis:restart,file:term
    python3 bench/transitions.py --release          # drip built with the release profile
    python3 bench/transitions.py --only file --policy fail   # every run under one policy
    python3 bench/transitions.py --only sentinel,cluster     # the replicated topologies

Runs the long run of tests/transitions.rs (`many_runs`, ignored in `cargo test`): for each
backend (the state file, a redis-server it starts on a free loopback port) and each transition
(drips stopped by SIGTERM or SIGKILL, a lost state, SHUTDOWN NOSAVE and a restart, SIGSTOP and
SIGCONT of the server, writes refused under maxmemory, one drip's first answer read 40 ms late
(`late-answer`, through a proxy); and, with a primary and a replica behind
three sentinels (`sentinel`) or a three-primary cluster with a replica (`cluster`), SENTINEL or
CLUSTER FAILOVER, the primary killed, drip's slot resharded), RUNS runs with random seeds, the
--share-on-error policy taking turns (wait, local, fail). Each run: three or four drips at
`-r 200/s:1 -c 10 -o block` on one NAME, every record stamped as its consumer read it.

A run that cannot be judged (fewer than half its windows clear of the consumer's stalls, on a
busy machine) and broke nothing is made again with a seed of its own, up to 5 runs, as the tests
do; the one kept says how many it took.

Prints one markdown table on stdout (progress on stderr): per backend and transition, the runs
that held the bound `burst + rate x W + 1` in every window W <= 1 s, plus what
docs/sharing.md ("At each transition") states for the transitions a window meets, by policy;
those over it in a window clear of stalls, those not judged in five runs, the runs made in all;
those within one record more (a consumer stamp late on a loaded machine); the worst excess;
the runs that held `burst + rate x W + 1` with no slack for the transitions and their worst
excess over it; whether every drip's books added up. The raw lines (one JSON object
per run, with its seed, for a replay) go to --raw FILE. See bench/README.md ("Transitions").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POLICIES = ("wait", "local", "fail")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per backend and transition")
    ap.add_argument("--only", default="", help="backend[:transition],... (file, redis:lost)")
    ap.add_argument("--policy", choices=POLICIES, default="",
                    help="run every run under this --share-on-error policy (default: turns)")
    ap.add_argument("--release", action="store_true", help="build drip with the release profile")
    ap.add_argument("--raw", type=Path, help="write the runs' JSON lines here")
    args = ap.parse_args()

    cmd = ["cargo", "test", "--locked", "--test", "suite"]
    if args.release:
        cmd.append("--release")
    cmd += ["--", "--ignored", "--nocapture", "--exact", "transitions::many_runs"]
    env = dict(os.environ, DRIP_TRANSITIONS_RUNS=str(args.runs),
               DRIP_TRANSITIONS_ONLY=args.only, DRIP_TRANSITIONS_POLICY=args.policy)
    print(f"transitions-bench: {' '.join(cmd)}", file=sys.stderr, flush=True)
    runs = []
    with subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        for line in p.stdout:
            if not line.startswith("run: "):
                continue
            run = json.loads(line[len("run: "):])
            runs.append(run)
            verdict = run.get("verdict", "held" if run["held"] else "over")
            mark = f"over by {run['over']:g}" if verdict == "over" else verdict
            print(f"transitions-bench: {run['backend']} {run['transition']} {run['policy']}: "
                  f"{mark} (seed {run['seed']}, run {run.get('tries', 1)} of its tries)",
                  file=sys.stderr, flush=True)
    if args.raw:
        args.raw.write_text("".join(json.dumps(r) + "\n" for r in runs))
    if not runs:
        print("transitions-bench: no runs (is redis-server installed? see the output above)",
              file=sys.stderr)
        return 1

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in runs:
        groups[(r["backend"], r["transition"])].append(r)
    print("| backend | transition | held | over | not judged | runs made | wait | local | fail "
          "| within +1 stamp | worst over | held with no slack | worst over B + 1 | books |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (backend, transition), rs in groups.items():
        by = {pol: [r for r in rs if r["policy"] == pol] for pol in POLICIES}
        cells = [f"{sum(r['held'] for r in by[pol])}/{len(by[pol])}" for pol in POLICIES]
        over = sum(r["over"] > 0 for r in rs)
        unjudged = sum(r["over"] <= 0 and not r["held"] for r in rs)
        print(f"| {backend} | {transition} | {sum(r['held'] for r in rs)}/{len(rs)} | "
              + f"{over} | {unjudged} | {sum(r.get('tries', 1) for r in rs)} | "
              + " | ".join(cells)
              + f" | {sum(r['held_loaded'] for r in rs)}/{len(rs)}"
              + f" | {max(r['over'] for r in rs):g}"
              + f" | {sum(r.get('over_tight', 0) <= 0 for r in rs)}/{len(rs)}"
              + f" | {max(r.get('over_tight', 0) for r in rs):g}"
              + f" | {sum(r['books'] for r in rs)}/{len(rs)} |")
    stalled = statistics.median(r["stalled_s"] for r in runs)
    print(f"\nConsumer stalls (windows meeting them are not judged): median {stalled:.3f} s a run.")
    return 0 if all(r["books"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
