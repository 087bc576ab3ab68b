#!/usr/bin/env python3
"""Benchmark drip against `pv -qlL RATE` (and `cat` where a baseline helps).

Runs each throttler on the same input, measures what arrives at the other end
of its stdout pipe, and prints ONE markdown table (drip and pv in columns) on
stdout.  Progress goes to stderr.  Standard library only (Python 3.11+).

    python3 bench/bench.py                 # full run, about 4 minutes
    python3 bench/bench.py --quick         # smoke test, well under a minute
    python3 bench/bench.py --only gap,rss  # a subset of sections

See bench/README.md for what every figure means.
"""

from __future__ import annotations

import argparse
import array
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("gap", "window", "rate", "cpu", "throughput", "rss", "startup")
TOOLS = ("drip", "pv")  # the two table columns

# Reference pacer for the gap figures: the simplest correct throttler (sleep to
# absolute deadlines, one write per record), run by this same Python.  Its gap
# error is what the machine and the bench can deliver at best, so drip's gap
# error above it is drip's own.
REF_PACER = """
import os, sys, time
period = 1e9 / float(sys.argv[1])
now = lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC)
t0 = None
for k, line in enumerate(sys.stdin.buffer):
    if t0 is None:
        t0 = now()
    while (left := t0 + k * period - now()) > 0:
        time.sleep(left / 1e9)
    os.write(1, line)
"""
# Scheduler stalls: the simplest pacer that follows drip's rule (issue #2: no
# catch-up after a stall beyond the slack), with no I/O: it sleeps to absolute
# 1 ms deadlines and, when it wakes more than SLACK late, restarts its
# schedule from then, as drip does.  Run for the same duration as a rate run,
# it prints how many stalls it met, the worst, and the time they cost it: the
# mean rate error that rule cannot avoid on this machine at this moment.
STALL_PROBE = """
import sys, time
dur, slack = float(sys.argv[1]), int(sys.argv[2])
now = lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC)
anchor = now(); k = 0; count = worst = lost = 0
for _ in range(int(dur * 1000)):
    k += 1
    due = anchor + k * 1_000_000
    while (left := due - now()) > 0:
        time.sleep(left / 1e9)
    late = now() - due
    worst = max(worst, late)
    if late > slack:
        count += 1
        lost += late
        anchor, k = now(), 0
print(count, worst, lost)
"""
T0 = time.monotonic()


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns: the one clock used for every arrival timestamp."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def log(msg: str) -> None:
    print(f"bench: [{time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Small statistics helpers
# --------------------------------------------------------------------------


def percentile(sorted_vals: list[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation between ranks."""
    if not sorted_vals:
        return float("nan")
    pos = (len(sorted_vals) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def max_in_window(times_ns: list[int], window_ns: int) -> int:
    """Most records whose arrival times fall in any half-open window [t, t+W).

    Sliding window anchored at each arrival (the maximum is always reached
    with the window starting on an arrival).  Strict pacing at R/s gives
    R*W; one more means two records came closer than 1/R somewhere.
    """
    best = 0
    j = 0
    n = len(times_ns)
    for i in range(n):
        if j < i:
            j = i
        while j < n and times_ns[j] < times_ns[i] + window_ns:
            j += 1
        best = max(best, j - i)
    return best


# --------------------------------------------------------------------------
# Process plumbing
# --------------------------------------------------------------------------


@dataclass
class Run:
    """One throttler process run to completion, and what its reader saw."""

    rc: int  # exit status (negative = killed by that signal)
    wall: float  # s, spawn -> reaped
    cpu: float  # user+sys s of the throttler process only (wait4 rusage)
    chunk_ts: array.array  # CLOCK_MONOTONIC ns at which each read() returned
    chunk_lines: array.array  # records completed (newlines) in that read
    timed_out: bool = False
    stderr: str = ""

    @property
    def lines(self) -> int:
        return sum(self.chunk_lines)

    def line_times(self) -> list[int]:
        """Arrival time per record: the time of the read() that brought its newline."""
        out: list[int] = []
        for t, c in zip(self.chunk_ts, self.chunk_lines):
            out.extend([t] * c)
        return out


def startup_once(argv: list[str]) -> tuple[float, int]:
    """One run of `echo x | argv > /dev/null`: wall seconds from the spawn to
    the reap, and the exit status."""
    r, w = os.pipe()
    os.write(w, b"x\n")
    os.close(w)
    with open(os.devnull, "wb") as null:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=r, stdout=null)
        os.close(r)
        rc, _ = reap(p)
        return time.monotonic() - t0, rc


def reap(p: subprocess.Popen) -> tuple[int, float]:
    """Wait for p with wait4 so we get *its* CPU time, not all children's.

    (ru_maxrss from wait4 is not used: Linux carries the parent's RSS high-water
    mark into a spawned child, so every child of this ~20 MiB Python process
    would report at least ~20 MiB.  Peak RSS is read from /proc VmHWM instead.)
    """
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
    return p.returncode, ru.ru_utime + ru.ru_stime


def read_stamped(fd: int, fast: bool) -> tuple[array.array, array.array]:
    """Read fd to EOF with os.read, timestamping each read and counting newlines.

    Runs in the bench's main thread with nothing else busy, so a blocked read
    wakes within a few microseconds of the writer's write() (see the
    reader-latency self-check row).  `fast` is for 10^5..10^6 records/s: after a
    small read it naps 0.5 ms so reads stay big and this loop cannot become
    the bottleneck; only the first/last read times matter there.
    """
    ts = array.array("q")
    counts = array.array("q")
    read = os.read
    clock = time.clock_gettime_ns
    mono = time.CLOCK_MONOTONIC
    sleep = time.sleep
    gc.disable()
    try:
        while True:
            buf = read(fd, 1 << 20)
            t = clock(mono)
            if not buf:
                break
            n = buf.count(b"\n")
            if n:
                ts.append(t)
                counts.append(n)
            if fast and len(buf) < 16384:
                sleep(0.0005)
    finally:
        gc.enable()
    return ts, counts


def run_reader(argv: list[str], stdin_path: Path, timeout: float, fast: bool = False) -> Run:
    """Run argv < stdin_path with stdout into a pipe that this process reads."""
    r, w = os.pipe()
    with open(stdin_path, "rb") as fin, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=fin, stdout=w, stderr=err)
        os.close(w)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            p.kill()

        watchdog = threading.Timer(timeout, kill)
        watchdog.start()
        try:
            ts, counts = read_stamped(r, fast)
        finally:
            watchdog.cancel()
            os.close(r)
        rc, cpu = reap(p)
        wall = time.monotonic() - t0
        err.seek(0)
        msg = err.read().decode(errors="replace")[-500:]
    return Run(rc, wall, cpu, ts, counts, timed_out.is_set(), msg)


def proc_kib(pid: int, field: str = "VmRSS") -> int | None:
    """A KiB field of /proc/PID/status (None once the process is gone).

    VmRSS is the current resident set, VmHWM its peak since exec.
    """
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------


def fmt_rate(rate: float) -> str:
    return f"{rate:g}" if rate < 1 else f"{int(rate):,}"


def fmt_ms(x: float) -> str:
    return f"{x:.3f}"


def fmt_pct(x: float) -> str:
    return f"{x * 100:+.3f}%"


def fmt_mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


# --------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.quick: bool = args.quick
        self.drip: str = args.drip
        self.pv: str | None = shutil.which("pv")
        self.tmp = tmp
        self.rows: list[tuple[str, dict[str, str], str]] = []
        self.warnings: list[str] = []
        self._runs: dict[tuple, Run | None] = {}
        self._inputs: dict[int, Path] = {}
        # Length of a paced run: 10 s (1.5 s in quick mode); the gap figure adds
        # two shorter runs at 100/s and 1000/s for a median of three.
        self.dur = 1.0 if self.quick else 10.0
        self.gap_reps = 1 if self.quick else 3
        self.gap_extra_dur = 1.0 if self.quick else 3.0

    @property
    def tools(self) -> list[str]:
        return ["drip", "pv"] if self.pv else ["drip"]

    # ---- inputs and commands ----

    def seq_file(self, n: int) -> Path:
        """A file holding `seq n` (records 1..n, one per line)."""
        if n not in self._inputs:
            path = self.tmp / f"seq-{n}"
            with open(path, "wb") as f:
                subprocess.run(["seq", str(n)], stdout=f, check=True)
            self._inputs[n] = path
        return self._inputs[n]

    def paced_argv(self, tool: str, rate: float) -> list[str] | None:
        if tool == "ref":
            return [sys.executable, "-c", REF_PACER, repr(rate)]
        if tool == "drip":
            count = str(int(rate)) if rate == int(rate) else repr(rate)
            return [self.drip, "--rate", f"{count}/s"]
        if tool == "drip-layered":
            # Two record limits and a byte rate, the first record limit the
            # tightest: the cost of checking several limits per record.
            count = str(int(rate))
            return [self.drip, "--rate", f"{count}/s", "--rate", f"{2 * int(rate)}/s:100",
                    "--byte-rate", "1GB/s:1MB"]
        if rate != int(rate):
            return None  # pv -L takes integers only
        return [self.pv, "-qlL", str(int(rate))]

    def unthrottled_argv(self, tool: str) -> list[str]:
        return {
            "drip": [self.drip, "--rate", "inf"],
            "pv": [self.pv, "-qlL", "1000000000"],
            "cat": ["cat"],
        }[tool]

    def records_for(self, rate: float, dur: float) -> int:
        """Records that take `dur` seconds at `rate` (first one leaves at once)."""
        return max(2, round(rate * dur) + 1)

    # ---- the one paced run type every rate/gap/window/cpu figure uses ----

    def paced(self, tool: str, rate: float, rep: int = 0) -> Run | None:
        """Feed a seq file through `tool` at `rate`, reader timestamping arrivals.

        rep 0 lasts self.dur and is shared by the gap, window, rate and cpu
        sections; reps 1+ (gap only) last gap_extra_dur.  Cached.
        """
        key = (tool, rate, rep)
        if key in self._runs:
            return self._runs[key]
        argv = self.paced_argv(tool, rate)
        if argv is None:
            self._runs[key] = None
            return None
        n = self.records_for(rate, self.dur if rep == 0 else self.gap_extra_dur)
        path = self.seq_file(n)
        expect = (n - 1) / rate
        log(f"{tool} --rate {fmt_rate(rate)}/s: {n:,} records, ~{expect:.1f} s (run {rep + 1})")
        run = run_reader(argv, path, timeout=expect * 1.5 + 10, fast=rate >= 50_000)
        if run.timed_out:
            self.warn(f"{tool} at {fmt_rate(rate)}/s timed out after {expect * 1.5 + 10:.0f} s")
        if run.rc != 0:
            self.warn(f"{tool} at {fmt_rate(rate)}/s exited {run.rc}: {run.stderr.strip()}")
        if run.lines != n:
            self.warn(f"{tool} at {fmt_rate(rate)}/s: {run.lines:,} of {n:,} records arrived")
        self._runs[key] = run
        return run

    def warn(self, msg: str) -> None:
        log("WARNING: " + msg)
        self.warnings.append(msg)

    def row(self, figure: str, cells: dict[str, str], ref: str = "") -> None:
        self.rows.append((figure, cells, ref))

    def header(self, title: str) -> None:
        self.rows.append((f"**{title}**", {}, ""))

    # ---- sections ----

    def section_gap(self) -> None:
        """|gap - 1/rate| between consecutive records (first gap skipped).

        The first record leaves at once and the schedule starts from it, so
        gap 0 -> 1 is the first real spacing; it is skipped to keep start-up
        effects out.  p50 and p99 are medians over gap_reps runs, max is the
        worst run's.
        """
        self.header(f"gap error |gap − 1/rate| (ms; p50, p99: median of {self.gap_reps}; max: worst)")
        self.reader_latency_row()
        for rate in (100, 1000):
            stats: dict[str, list[tuple[float, float, float]]] = {}
            # drip and pv: gap_reps runs each; the reference pacer: one short run.
            runs = [(tool, rep) for tool in self.tools for rep in range(self.gap_reps)]
            for tool, rep in runs + [("ref", 1)]:
                run = self.paced(tool, rate, rep)
                if run is None:
                    continue
                t = run.line_times()
                period = 1e9 / rate
                errs = sorted(abs((t[i + 1] - t[i]) - period) / 1e6 for i in range(1, len(t) - 1))
                if errs:
                    stats.setdefault(tool, []).append(
                        (percentile(errs, 50), percentile(errs, 99), errs[-1]))
            for idx, name in enumerate(("p50", "p99", "max")):
                pick = max if name == "max" else statistics.median
                cells = {tool: fmt_ms(pick(v[idx] for v in vals)) for tool, vals in stats.items()}
                ref = f"ref pacer {cells.pop('ref', '?')}"
                if name == "p99":
                    ref += "; drip target ≤ 0.25"
                self.row(f"gap error {name} @ {rate}/s", cells, ref)

    def reader_latency_row(self) -> None:
        """Self-check of the bench: how late does the reader see a write?

        A Python child writes its own CLOCK_MONOTONIC time every 1 ms; the
        reader compares arrival time with the embedded stamp.  This bounds how
        much of the gap error is measurement noise rather than the throttler.
        """
        child = (
            "import os,time\n"
            "for _ in range(1000):\n"
            "    os.write(1, b'%d\\n' % time.clock_gettime_ns(time.CLOCK_MONOTONIC))\n"
            "    time.sleep(0.001)\n"
        )
        r, w = os.pipe()
        p = subprocess.Popen([sys.executable, "-c", child], stdout=w)
        os.close(w)
        lat: list[float] = []
        buf = b""
        gc.disable()
        try:
            while True:
                data = os.read(r, 65536)
                t = now_ns()
                if not data:
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                lat.extend((t - int(x)) / 1e3 for x in lines)
        finally:
            gc.enable()
            os.close(r)
        p.wait()
        lat.sort()
        self.row("bench self-check: reader wake-up latency p50 / p99 (µs)",
                 {}, f"{percentile(lat, 50):.1f} / {percentile(lat, 99):.1f} (noise floor)")

    def section_window(self) -> None:
        """Most records seen in any sliding 1 s / 100 ms window of arrivals."""
        self.header("burstiness: most records in any sliding window")
        for rate in (10, 100, 1000):
            runs = {tool: self.paced(tool, rate) for tool in self.tools}
            for window_ms in (1000, 100):
                cells = {}
                for tool, run in runs.items():
                    if run is not None:
                        cells[tool] = str(max_in_window(run.line_times(), window_ms * 1_000_000))
                ideal = max(1, rate * window_ms // 1000)
                self.row(f"max records in {window_ms} ms @ {rate}/s", cells,
                         f"{ideal} ideal; {ideal + 1} if any record was late")

    def section_rate(self) -> None:
        """Mean rate over the whole run, relative to the requested rate.

        measured = (records after the first read) / (t_last_read - t_first_read).
        At low rates each read carries one record so this is (N-1)/(t_N - t_1);
        at 10^5..10^6/s reads carry many records and only read times are kept.
        """
        self.header(f"mean rate error over ~{self.dur:g} s (measured/requested − 1)")
        for rate in (0.5, 10, 100, 1000, 100_000, 1_000_000):
            cells = {}
            for tool in self.tools:
                run = self.paced(tool, rate)
                if run is None:
                    cells[tool] = "n/a (-L integer)" if tool == "pv" else "n/a"
                    continue
                if len(run.chunk_ts) < 2:
                    cells[tool] = "no data"
                    continue
                span = (run.chunk_ts[-1] - run.chunk_ts[0]) / 1e9
                measured = (run.lines - run.chunk_lines[0]) / span
                cells[tool] = fmt_pct(measured / rate - 1)
            n = self.records_for(rate, self.dur)
            self.row(f"rate error @ {fmt_rate(rate)}/s ({n:,} records)", cells, "0 ideal")
        self.stall_row()

    def stall_row(self) -> None:
        """How much a pacer that restarts after stalls (drip's rule) loses here."""
        slack = 2_000_000
        out = subprocess.run([sys.executable, "-c", STALL_PROBE, str(self.dur), str(slack)],
                             capture_output=True, text=True, check=True).stdout.split()
        count, worst, lost = int(out[0]), int(out[1]), int(out[2])
        self.row(f"machine: stalls > 2 ms in {self.dur:g} s (bare 1000/s loop, drip's rule)", {},
                 f"{count}, worst {worst / 1e6:.1f} ms; they cost it {lost / 1e6:.1f} ms "
                 f"= {fmt_pct(-lost / 1e9 / self.dur)} rate error floor")

    def section_cpu(self) -> None:
        """user+sys CPU of the throttler process alone, per 1000 records."""
        self.header("CPU of the throttler (user+sys s per 1000 records)")
        floor = self.floor_cpu(1000)
        for rate in (10, 1000, 100_000, 1_000_000):  # runs shared with the rate section
            cells = {}
            for tool in self.tools:
                run = self.paced(tool, rate)
                if run is not None and run.lines:
                    cells[tool] = f"{run.cpu * 1000 / run.lines:.5f}"
            ref = ""
            if rate == 1000:
                ref = (f"floor {floor:.5f} (examples/bare_pacer: sleep + write per record)"
                       if floor is not None else "floor: cargo build --release --examples")
            self.row(f"CPU per 1000 records @ {fmt_rate(rate)}/s", cells, ref)
        run = self.paced("drip-layered", 1_000_000)
        if run is not None and run.lines:
            span = (run.chunk_ts[-1] - run.chunk_ts[0]) / 1e9 if len(run.chunk_ts) > 1 else 0
            err = fmt_pct((run.lines - run.chunk_lines[0]) / span / 1_000_000 - 1) if span else "?"
            self.row("CPU per 1000 records @ 1,000,000/s, two limits + a byte rate",
                     {"drip": f"{run.cpu * 1000 / run.lines:.5f}"},
                     f"-r 1000000/s -r 2000000/s:100 --byte-rate 1GB/s:1MB; rate error {err}")
        cells = {}
        for tool in self.tools:
            run = self.paced(tool, 10)
            if run is not None:
                cells[tool] = f"{run.cpu * 1000:.1f}"
        self.row(f"CPU in all, {self.dur:g} s @ 10/s (ms)", cells, "drip target ≤ 20")
        cells = {tool: f"{self.blocked_cpu(tool) * 1000:.1f}" for tool in self.tools}
        self.row(f"CPU in all, {self.dur:g} s @ 10/s, stdout never read (ms)", cells,
                 "2M-line input; drip target ≤ 20")

    def floor_cpu(self, rate: int) -> float | None:
        """CPU per 1000 records of examples/bare_pacer at `rate`, read the same way."""
        bare = Path(self.drip).parent / "examples" / "bare_pacer"
        if not os.access(bare, os.X_OK):
            self.warn(f"{bare} missing: cargo build --release --examples")
            return None
        n = self.records_for(rate, self.dur)
        log(f"bare_pacer {rate}/s: {n:,} records (CPU floor)")
        run = run_reader([str(bare), str(rate)], self.seq_file(n), timeout=self.dur * 1.5 + 10)
        return run.cpu * 1000 / run.lines if run.lines else None

    def blocked_cpu(self, tool: str) -> float:
        """CPU of `tool` at 10/s for self.dur seconds while nobody reads its stdout."""
        argv = self.paced_argv(tool, 10)
        log(f"{tool} 10/s, stdout never read, {self.dur:g} s")
        r, w = os.pipe()
        with open(self.seq_file(2_000_000), "rb") as fin:
            p = subprocess.Popen(argv, stdin=fin, stdout=w, stderr=subprocess.DEVNULL)
        os.close(w)
        time.sleep(self.dur)
        p.send_signal(signal.SIGTERM)
        # The records under way are finished on the way out: let them go.
        drain = threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(r, 1 << 16), b"")])
        drain.start()
        _, cpu = reap(p)
        drain.join()
        os.close(r)
        return cpu

    def section_throughput(self) -> None:
        """Unthrottled wall time to /dev/null, median of 3 (1 in quick mode)."""
        reps = 1 if self.quick else 3
        n_seq = 2_000_000 if self.quick else 20_000_000
        n_wide = 100_000 if self.quick else 1_000_000
        self.header(f"unthrottled (drip --rate inf, pv -qlL 1000000000; median of {reps}; out to /dev/null)")

        # (a) straight from `seq N |`, as a user would pipe it.
        def from_seq(argv: list[str]) -> float:
            t0 = time.monotonic()
            gen = subprocess.Popen(["seq", str(n_seq)], stdout=subprocess.PIPE)
            with open(os.devnull, "wb") as null:
                p = subprocess.Popen(argv, stdin=gen.stdout, stdout=null)
            gen.stdout.close()
            rc, _ = reap(p)
            wall = time.monotonic() - t0
            gen.wait()
            if rc != 0:
                self.warn(f"{argv[0]} on seq {n_seq} exited {rc}")
            return wall

        # (b) 200-byte lines from a file in the temp dir.
        wide = self.tmp / "wide"
        line = b"x" * 199 + b"\n"
        with open(wide, "wb") as f:
            for _ in range(n_wide // 1000):
                f.write(line * 1000)
        nbytes = len(line) * n_wide

        def from_file(argv: list[str]) -> float:
            with open(wide, "rb") as fin, open(os.devnull, "wb") as null:
                t0 = time.monotonic()
                p = subprocess.Popen(argv, stdin=fin, stdout=null)
                rc, _ = reap(p)
                wall = time.monotonic() - t0
            if rc != 0:
                self.warn(f"{argv[0]} on 200-byte lines exited {rc}")
            return wall

        walls: dict[str, tuple[float, float]] = {}
        for tool in self.tools + ["cat"]:
            argv = self.unthrottled_argv(tool)
            log(f"{tool} unthrottled: seq {n_seq:,} and {n_wide:,} x 200 B lines")
            a = statistics.median(from_seq(argv) for _ in range(reps))
            b = statistics.median(from_file(argv) for _ in range(reps))
            walls[tool] = (a, b)
        cat = walls.pop("cat")
        self.row(f"wall, seq {n_seq:,} | tool (s)",
                 {t: f"{w[0]:.3f}" for t, w in walls.items()}, f"cat: {cat[0]:.3f}")
        self.row(f"wall, {n_wide:,} × 200 B lines (s)",
                 {t: f"{w[1]:.3f}" for t, w in walls.items()}, f"cat: {cat[1]:.3f}")
        self.row("throughput, 200 B lines (GB/s)",
                 {t: f"{nbytes / w[1] / 1e9:.2f}" for t, w in walls.items()},
                 f"cat: {nbytes / cat[1] / 1e9:.2f}")

    def section_rss(self) -> None:
        """Peak RSS with a full bucket, and RSS over time while dropping."""
        self.header("memory")
        path = self.seq_file(2_000_000)
        pv_rss = None
        if self.pv:
            pv_rss = self.stalled_rss([self.pv, "-qlL", "1"], path)
        for cap in (1000, 1_000_000):
            stats = self.tmp / f"stats-{cap}.json"
            argv = [self.drip, "--rate", "1/s", "--capacity", str(cap), "--stats-json", str(stats)]
            rss = self.stalled_rss(argv, path)
            depth = ""
            try:
                depth = f"; drip max_depth {json.loads(stats.read_text())['max_depth']:,}"
            except (OSError, ValueError, KeyError):
                depth = "; drip wrote no --stats-json"
            cells = {"drip": fmt_mib(rss)}
            if pv_rss is not None:
                cells["pv"] = fmt_mib(pv_rss) + " (no capacity)"
            self.row(f"peak RSS, --capacity {cap:,}, 2M-line input, 1/s", cells,
                     "VmHWM" + depth)

        secs = 3.0 if self.quick else 10.0
        series = {"drip": self.yes_rss([self.drip, "--rate", "10/s", "-o", "drop-oldest"], secs)}
        if self.pv:
            series["pv"] = self.yes_rss([self.pv, "-qlL", "10"], secs)
        self.row(f"VmRSS first / peak / last, yes | … 10/s, {secs:g} s",
                 {t: " / ".join(f"{k / 1024:.1f}" for k in s[0]) + " MiB" for t, s in series.items()},
                 "drip: -o drop-oldest; pv blocks")
        self.row("CPU while doing that (% of one core)",
                 {t: f"{s[1] * 100:.0f}%" for t, s in series.items()})

    def stalled_rss(self, argv: list[str], stdin_path: Path) -> int:
        """Run argv < stdin_path (output 1/s, so stalled) until RSS stops growing.

        Samples VmRSS every 0.1 s; stops with SIGTERM once it has been flat for
        1 s (at least 2 s in), or after 10 s.  Returns VmHWM (peak RSS) in KiB,
        read just before the SIGTERM.
        """
        log(f"stalled RSS: {os.path.basename(argv[0])} {' '.join(argv[1:5])}")
        with open(stdin_path, "rb") as fin, open(os.devnull, "wb") as null:
            p = subprocess.Popen(argv, stdin=fin, stdout=null, stderr=subprocess.DEVNULL)
            start = time.monotonic()
            last, flat_since = None, start
            while time.monotonic() - start < 10:
                time.sleep(0.1)
                rss = proc_kib(p.pid)
                if rss is None:
                    break
                if rss != last:
                    last, flat_since = rss, time.monotonic()
                elif time.monotonic() - start >= 2 and time.monotonic() - flat_since >= 1:
                    break
            peak = proc_kib(p.pid, "VmHWM") or 0
            p.send_signal(signal.SIGTERM)
            rc, _ = reap(p)
        if argv[0] == self.drip and rc != 143:  # pv's status on a signal is a bit mask (32)
            self.warn(f"drip stalled-RSS run exited {rc} on SIGTERM (expected 143)")
        return peak

    def yes_rss(self, argv: list[str], secs: float) -> tuple[tuple[int, int, int], float]:
        """`yes | argv` for secs; VmRSS sampled every 0.5 s -> (first, peak, last), CPU share."""
        log(f"yes | {os.path.basename(argv[0])} {' '.join(argv[1:])} for {secs:g} s")
        yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
        with open(os.devnull, "wb") as null:
            t0 = time.monotonic()
            p = subprocess.Popen(argv, stdin=yes.stdout, stdout=null)
        yes.stdout.close()
        samples = []
        for k in range(1, int(secs / 0.5) + 1):
            time.sleep(max(0.0, t0 + 0.5 * k - time.monotonic()))
            rss = proc_kib(p.pid)
            if rss is not None:
                samples.append(rss)
        p.send_signal(signal.SIGTERM)
        rc, cpu = reap(p)
        wall = time.monotonic() - t0
        yes.terminate()
        yes.wait()
        if argv[0] == self.drip and rc != 143:
            self.warn(f"yes | drip exited {rc} on SIGTERM (expected 143)")
        if not samples:
            samples = [0]
        return (samples[0], max(samples), samples[-1]), cpu / wall

    def section_startup(self) -> None:
        """Wall time of `echo x | tool` unthrottled (drip -r inf, pv -q, cat):
        spawn, one record, EOF, exit. The tools run in turn (drip, pv, cat,
        drip, ...) so a drift of the machine's speed touches each alike; the
        ratio to pv is taken pair by pair, then its median."""
        reps = 10 if self.quick else 40
        self.header(f"start-up (paired runs, median of {reps})")
        argvs = {"drip": [self.drip, "--rate", "inf"], "pv": [self.pv or "pv", "-q"], "cat": ["cat"]}
        tools = [t for t in self.tools if t in argvs] + ["cat"]
        walls: dict[str, list[float]] = {t: [] for t in tools}
        log(f"start-up: echo x | {', '.join(tools)} in turn x{reps}")
        for i in range(reps + 2):
            for tool in tools:
                wall, rc = startup_once(argvs[tool])
                if rc != 0:
                    self.warn(f"echo x | {tool} exited {rc}")
                if i >= 2:  # two warm-up rounds
                    walls[tool].append(wall)
        med = {t: statistics.median(w) * 1000 for t, w in walls.items()}
        cells = {t: f"{med[t]:.2f}" for t in tools if t != "cat"}
        self.row("wall of echo x | … (drip -r inf, pv -q; ms)", cells, f"cat: {med['cat']:.2f}")
        if "pv" in walls:
            ratios = [d / p for d, p in zip(walls["drip"], walls["pv"])]
            self.row("drip / pv -q, pair by pair (median)", {"drip": f"{statistics.median(ratios):.2f}×"},
                     "target ≤ 1.5×")

    # ---- output ----

    def table(self) -> str:
        head = ["figure", *TOOLS, "reference / ideal"]
        body = []
        for figure, cells, ref in self.rows:
            if not cells:  # section header, or a figure that is not per tool
                body.append([figure, "", "", ref])
                continue
            body.append([figure, *(cells.get(t, "—" if t == "pv" and not self.pv else "") for t in TOOLS), ref])
        # A literal | would end a markdown cell.
        body = [[c.replace("|", "\\|") for c in r] for r in body]
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

        def line(r: list[str]) -> str:
            return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"

        sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(head), sep, *(line(r) for r in body)])


def main() -> int:
    ap = argparse.ArgumentParser(description="drip vs pv -qlL benchmark (markdown table on stdout)")
    ap.add_argument("--drip", default=str(REPO / "target" / "release" / "drip"),
                    help="drip binary (default: target/release/drip in the repo)")
    ap.add_argument("--quick", action="store_true", help="short runs: a smoke test well under a minute")
    ap.add_argument("--only", metavar="NAME[,NAME]",
                    help="run only these sections: " + ",".join(SECTIONS))
    args = ap.parse_args()

    only = SECTIONS
    if args.only:
        only = tuple(s.strip() for s in args.only.split(",") if s.strip())
        bad = [s for s in only if s not in SECTIONS]
        if bad:
            ap.error(f"unknown section(s) {','.join(bad)}; choose from {','.join(SECTIONS)}")
    if not (os.path.isfile(args.drip) and os.access(args.drip, os.X_OK)):
        print(f"bench: drip not found at {args.drip} (cargo build --release, or pass --drip)",
              file=sys.stderr)
        return 2
    if not shutil.which("pv"):
        print("bench: pv not found: apt-get install -y pv", file=sys.stderr)

    # Inputs live in tmpfs where there is one: page cache for a file on disk
    # can be reclaimed between runs, and then a run would measure the disk.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="drip-bench-", dir=shm) as tmp:
        bench = Bench(args, Path(tmp))
        log(f"drip={args.drip} pv={bench.pv or 'missing'} mode={'quick' if args.quick else 'full'} "
            f"sections={','.join(only)}")
        load_start = os.getloadavg()[0]
        if load_start > 0.7:
            log(f"note: load average is {load_start:.2f}; other work on this machine will add noise")
        for name in SECTIONS:  # fixed order, so shared runs are reused
            if name in only:
                try:
                    getattr(bench, f"section_{name}")()
                except Exception as e:  # keep going: one broken section should not hide the rest
                    bench.warn(f"section {name} failed: {e!r}")
                    bench.row(f"section {name} failed: {e}", {}, "")
        # Other work on the machine shows up as timing noise: say how busy it was.
        bench.row("load average (1 min), start → end", {},
                  f"{load_start:.2f} → {os.getloadavg()[0]:.2f} (2 cores)")
        print(bench.table())
        sys.stdout.flush()
        log(f"done in {time.monotonic() - T0:.0f} s")
        for w in bench.warnings:
            print(f"bench: warning: {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
