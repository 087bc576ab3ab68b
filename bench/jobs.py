#!/usr/bin/env python3
"""drip --exec beside GNU parallel and xargs: start spacing, throughput of
short jobs, and the CPU drip itself spends per job. Prints one markdown
table on stdout. Python 3.11+, standard library only.

    cargo build --release
    apt-get install -y parallel     # optional: the parallel column
    python3 bench/jobs.py [--drip target/release/drip] [--records 5000]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def self_cpu(pid):
    """User+system seconds of `pid` itself (not its children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run(cmd, stdin_text):
    """Run `cmd` with `stdin_text`; (wall seconds, its own CPU seconds)."""
    with tempfile.TemporaryFile() as f:
        f.write(stdin_text.encode())
        f.seek(0)
        start = time.monotonic()
        p = subprocess.Popen(cmd, stdin=f, stdout=subprocess.DEVNULL)
        cpu = 0.0
        while p.poll() is None:
            # The last reading before it exits (the rest is under a tick).
            got = self_cpu(p.pid)
            cpu = got if got is not None else cpu
            time.sleep(0.005)
        wall = time.monotonic() - start
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} exited {p.returncode}")
    return wall, cpu


def p99(values):
    values = sorted(values)
    return values[round((len(values) - 1) * 0.99)]


def gaps_stdout(drip, rate, n):
    """Gap errors (ms) of drip's output lines at `rate`/s."""
    p = subprocess.Popen(
        [drip, "-q", "-r", f"{rate}/s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    p.stdin.write("".join(f"{i}\n" for i in range(n)).encode())
    p.stdin.close()
    times = []
    fd = p.stdout.fileno()
    while chunk := os.read(fd, 65536):
        t = time.monotonic()
        times += [t] * chunk.count(b"\n")
    p.wait()
    return [abs((b - a) * 1e3 - 1e3 / rate) for a, b in zip(times, times[1:])]


def gaps_exec(drip, rate, n, jobs):
    """Gap errors (ms) of job starts (drip's joblog) at `rate`/s."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "joblog")
        subprocess.run(
            [drip, "-q", "-r", f"{rate}/s", "-j", str(jobs), "--joblog", log, "--exec", "true"],
            input="".join(f"{i}\n" for i in range(n)).encode(),
            check=True,
        )
        with open(log) as f:
            starts = sorted(json.loads(line)["start_us"] / 1e6 for line in f)
    return [abs((b - a) * 1e3 - 1e3 / rate) for a, b in zip(starts, starts[1:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--drip", default="target/release/drip")
    ap.add_argument("--records", type=int, default=5000)
    args = ap.parse_args()
    drip, n = args.drip, args.records
    rows = []

    out = gaps_stdout(drip, 100, 301)
    ex = gaps_exec(drip, 100, 301, 8)
    rows.append(("gap error p99 @ 100/s, job starts, -j 8, 300 gaps (ms)", f"{p99(ex):.3f}",
                 "", "", "within 1 ms of stdout mode"))
    rows.append(("gap error p99 @ 100/s, stdout mode, 300 gaps (ms)", f"{p99(out):.3f}", "", "", ""))

    text = "".join(f"{i}\n" for i in range(n))
    tools = {
        "drip": [drip, "-q", "-r", "inf", "-j", "16", "--exec", "/bin/true"],
        "parallel": ["parallel", "-j16", "/bin/true"] if shutil.which("parallel") else None,
        "xargs": ["xargs", "-P16", "-n1", "/bin/true"],
    }
    results = {}
    for name, cmd in tools.items():
        if cmd is None:
            results[name] = None
            continue
        runs = [run(cmd, text) for _ in range(3)]
        results[name] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
    cell = lambda r, f: "n/a" if r is None else f(r)
    rows.append((f"wall, {n} × /bin/true, 16 at once (s, median of 3)",
                 cell(results["drip"], lambda r: f"{r[0]:.2f}"),
                 cell(results["parallel"], lambda r: f"{r[0]:.2f}"),
                 cell(results["xargs"], lambda r: f"{r[0]:.2f}"),
                 "drip ≤ 1.25 × xargs"))
    rows.append(("jobs per second", *(cell(results[k], lambda r: f"{n / r[0]:.0f}") for k in tools),
                 "drip ≥ parallel"))
    rows.append(("CPU of the tool itself per job (µs)",
                 *(cell(results[k], lambda r: f"{r[1] / n * 1e6:.0f}") for k in tools),
                 "drip − xargs ≤ 50 (xargs: fork/exec and wait only)"))

    print("| figure | drip | GNU parallel | xargs | target |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
