#!/usr/bin/env python3
"""Benchmark `drip --share`: several drips sharing one limit, side by side.

    cargo build --release
    python3 bench/share.py > bench/share-results.md   # about 30 seconds
    python3 bench/share.py --drip target/debug/drip  # another binary

Needs redis-server and redis-cli (Debian: apt-get install redis-server);
starts its own server on a free loopback port with --save '' --appendonly no
and stops it at the end. Prints one markdown table on stdout; progress on
stderr. See bench/README.md ("Shared limits") for what each figure means.
"""

from __future__ import annotations

import argparse
import random
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"share-bench: {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout


def script_calls(port: int) -> int:
    """Client calls of the script (EVALSHA and EVAL) so far."""
    total = 0
    for line in redis_cli(port, "INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
            total += int(line.split("calls=")[1].split(",")[0])
    return total


def all_commands(port: int) -> int:
    """Every command the server processed, those the script runs included."""
    for line in redis_cli(port, "INFO", "stats").splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    return 0


def realtime_reader() -> bool:
    """Run the reader under SCHED_FIFO when allowed (root), so a busy machine
    cannot hold up its reads and bunch the timestamps; the drips stay
    ordinary processes."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return True
    except (PermissionError, OSError):
        return False


def ordinary_scheduling() -> None:
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def run_all(argvs: list[list[str]], records: int, env: dict[str, str],
            data: list[bytes] | None = None, sizes: list[tuple[int, int]] | None = None
            ) -> tuple[list[int], float, float, int]:
    """Run every argv on its own input of `records` lines (or on its own
    item of `data`),
    all stdouts read by this one process; returns the arrival times (ns,
    one per record), the wall time, the participants' CPU (user+sys, s)
    together, and the slots they forfeited late (from `--stats`). With
    `sizes`, each read's (time, bytes) is added to it."""
    if data is None:
        data = ["".join(f"{i}\n" for i in range(1, records + 1)).encode()] * len(argvs)
    sel = selectors.DefaultSelector()
    procs = []
    t0 = time.monotonic()
    for argv in argvs:
        r, w = os.pipe()
        p = subprocess.Popen([*argv, "--stats"], stdin=subprocess.PIPE, stdout=w, env=env,
                             stderr=subprocess.PIPE, preexec_fn=ordinary_scheduling)
        os.close(w)
        sel.register(r, selectors.EVENT_READ)
        procs.append(p)
    # The input reaches every drip only once all have started: a drip
    # started first would otherwise send records while the others are
    # still being spawned, read here late and all at once, which looks
    # like a burst the schedule never made.

    def feed(p: subprocess.Popen, text: bytes) -> None:
        try:
            p.stdin.write(text)
        finally:
            p.stdin.close()

    feeders = [threading.Thread(target=feed, args=(p, d)) for p, d in zip(procs, data)]
    for f in feeders:
        f.start()
    times: list[int] = []
    open_fds = len(argvs)
    while open_fds:
        for key, _ in sel.select():
            buf = os.read(key.fd, 1 << 20)
            t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            if not buf:
                sel.unregister(key.fd)
                os.close(key.fd)
                open_fds -= 1
                continue
            times.extend([t] * buf.count(b"\n"))
            if sizes is not None:
                sizes.append((t, len(buf)))
    for f in feeders:
        f.join()
    cpu = 0.0
    forfeited = 0
    for p in procs:
        err = p.stderr.read().decode()
        for line in err.splitlines():
            if "slots forfeited late" in line:
                forfeited += int(line.split(" slots forfeited")[0].split()[-1])
        _, status, ru = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"share-bench: {p.args} exited {status}")
        cpu += ru.ru_utime + ru.ru_stime
    wall = time.monotonic() - t0
    times.sort()
    return times, wall, cpu, forfeited


def most_in_window(times: list[int], window: int) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] < t + window:
            j += 1
        best = max(best, j - i)
    return best


def most_bytes_in_window(reads: list[tuple[int, int]], window: int) -> int:
    reads = sorted(reads)
    best, j, inside = 0, 0, 0
    for i, (t, _) in enumerate(reads):
        while j < len(reads) and reads[j][0] < t + window:
            inside += reads[j][1]
            j += 1
        best = max(best, inside)
        inside -= reads[i][1]
    return best


def byte_lines(n: int, seed: int) -> bytes:
    """`n` lines of 1 to 200 bytes (newline included), the same for a seed."""
    rng = random.Random(seed)
    return b"".join(b"x" * (rng.randint(1, 200) - 1) + b"\n" for _ in range(n))


def bytes_row(args, env, label: str, share: str, rows: list) -> None:
    """3 drips sharing 20 KB/s (burst 2 KB) through `share`, lines of
    random sizes: the most bytes in any 1 s, and the aggregate rate."""
    rate, burst, n = 20_000, 2_000, 3
    lines = int(rate * args.seconds / n / 100)
    log(f"{n} drips sharing {rate} bytes/s through {label}, {lines} lines each")
    argv = [args.drip, "--byte-rate", f"{rate}/s:{burst}", "--share", share, "-q"]
    reads: list[tuple[int, int]] = []
    inputs = [byte_lines(lines, seed) for seed in range(n)]
    total = sum(len(d) for d in inputs)
    _, _, _, lost = run_all([argv] * n, 0, env, inputs, reads)
    span = (max(t for t, _ in reads) - min(t for t, _ in reads)) / 1e9
    aggregate = (total - burst) / span
    rows.append((f"{label}, 3 × 20,000 bytes/s (burst 2,000): most bytes in any 1 s",
                 f"{most_bytes_in_window(reads, 1_000_000_000)}",
                 "≤ 22,000 + a record or two (200 B each)"))
    rows.append((f"{label}, 3 × 20,000 bytes/s: aggregate rate error, slots wasted or late",
                 f"{aggregate / rate - 1:+.3%}, {lost}", ""))


def mean_rate(times: list[int], burst: int) -> float:
    """Records after the first burst, over the time from its last to the end."""
    return (len(times) - burst) / ((times[-1] - times[burst - 1]) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drip", default=str(REPO / "target/release/drip"))
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    args = ap.parse_args()
    rows: list[tuple[str, str, str]] = []
    load0 = os.getloadavg()[0]
    realtime = realtime_reader()
    env = dict(os.environ)
    env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="drip-share-state-")

    # 4 participants sharing 10,000/s through Redis on the loopback.
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL,
                              preexec_fn=ordinary_scheduling)
    try:
        for _ in range(200):
            try:
                if redis_cli(port, "PING").strip() == "PONG":
                    break
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.02)
        rate, n = 10_000, 4
        per = int(rate * args.seconds / n)
        log(f"{n} drips sharing {rate}/s through Redis, {per} records each")
        calls0, cmds0 = script_calls(port), all_commands(port)
        share = f"redis://127.0.0.1:{port}/bench"
        times, wall, cpu, lost = run_all(
            [[args.drip, "-r", f"{rate}/s", "--share", share, "-q"]] * n, per, env)
        calls, cmds = script_calls(port) - calls0, all_commands(port) - cmds0
        measured = mean_rate(times, 1)
        log(f"one drip alone at {rate}/s")
        times1, _, cpu1, _ = run_all([[args.drip, "-r", f"{rate}/s", "-q"]], per * n, env)
        alone = mean_rate(times1, 1)
        rows.append(("Redis, 4 × 10,000/s: aggregate rate error (one drip alone at 10,000/s)",
                     f"{measured / rate - 1:+.3%} ({alone / rate - 1:+.3%})", "≤ 1%"))
        rows.append(("Redis, 4 × 10,000/s: slots forfeited by a wake-up over 2 ms late",
                     f"{lost} of {len(times) + lost}", ""))
        rows.append(("Redis, 4 × 10,000/s: script calls per second, all drips",
                     f"{calls / wall:.0f}", "≤ 400"))
        rows.append(("Redis, 4 × 10,000/s: server commands per second (the script's own included)",
                     f"{cmds / wall:.0f}", ""))
        rows.append(("Redis, 4 × 10,000/s: most records in any 1 s",
                     f"{most_in_window(times, 1_000_000_000)}", f"{rate} + 1 + ceil(RTT × rate)"))
        shared_cpu = cpu / len(times) * 1e6
        alone_cpu = cpu1 / len(times1) * 1e6
        rows.append(("Redis, 4 × 10,000/s: CPU per record, µs (reference: one drip alone at 10,000/s)",
                     f"{shared_cpu:.2f} ({alone_cpu:.2f}, ×{shared_cpu / alone_cpu:.2f})", "≤ 3×"))
        bytes_row(args, env, "Redis", f"redis://127.0.0.1:{port}/bytes", rows)
    finally:
        server.terminate()
        server.wait()

    # 8 participants sharing 1000/s through a state file on this host.
    rate, n = 1000, 8
    per = int(rate * args.seconds / n)
    log(f"{n} drips sharing {rate}/s through --share NAME, {per} records each")
    times, wall, cpu, lost = run_all(
        [[args.drip, "-r", f"{rate}/s", "--share", "bench", "-q"]] * n, per, env)
    log(f"one drip alone at {rate}/s")
    times1, _, cpu1, _ = run_all([[args.drip, "-r", f"{rate}/s", "-q"]], per * n, env)
    rows.append(("host file, 8 × 1000/s: most records in any 1 s",
                 f"{most_in_window(times, 1_000_000_000)}", "≤ 1002 + burst (1)"))
    rows.append(("host file, 8 × 1000/s: aggregate rate error (one drip alone at 1000/s)",
                 f"{mean_rate(times, 1) / rate - 1:+.3%} ({mean_rate(times1, 1) / rate - 1:+.3%})", ""))
    rows.append(("host file, 8 × 1000/s: slots forfeited by a wake-up over 2 ms late",
                 f"{lost} of {len(times) + lost}", ""))
    shared_cpu = cpu / len(times) * 1e6
    alone_cpu = cpu1 / len(times1) * 1e6
    rows.append(("host file, 8 × 1000/s: CPU per record, µs (reference: one drip alone at 1000/s)",
                 f"{shared_cpu:.2f} ({alone_cpu:.2f}, ×{shared_cpu / alone_cpu:.2f})", "≤ 3×"))

    bytes_row(args, env, "host file", "bytes", rows)

    load = os.getloadavg()[0]
    log(f"load average {load0:.2f} at the start, {load:.2f} at the end")
    print("| figure | measured | target |\n| --- | --- | --- |")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")
    reader = "a SCHED_FIFO reader" if realtime else "an ordinary reader (not root: no SCHED_FIFO)"
    print(f"\n{args.seconds:g} s runs, {reader}; load average {load0:.2f} at the start, "
          f"{load:.2f} at the end.")


if __name__ == "__main__":
    main()
