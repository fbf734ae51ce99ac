"""Where a server's threads ran and how busy they were, sampled from ``/proc``.

At depth, a GPU engine's step can be bound by its CPU side (scheduling, input preparation,
sampling bookkeeping) rather than by the GPU. Then its speed depends on the core the engine
core's thread runs on and on what shares that core or its SMT sibling: the frontend's event
loop, the preprocessing workers, vLLM's renderer threads. This sampler reads, every
``period_s``, each thread of a process tree (``/proc/PID/task/TID/stat``: the CPU it last ran on
and its user + system time) and writes one CSV row per thread that ran in the period:

    t_s,pid,tid,process,thread,cpu,busy

``t_s`` is the monotonic clock (the traces' clock), ``busy`` the fraction of the period the thread
ran. The first line is a comment with the host's SMT siblings (``# siblings 0-8 1-9 …``).

    python -m edgeserve.bench.proc_sampler PID OUT.csv [--period-ms 200] [--min-busy 0.02]

It stops when the process ends or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import psutil

CLK_TCK = os.sysconf("SC_CLK_TCK")


def smt_siblings() -> list[str]:
    """Each core's SMT siblings as ``a-b`` (one entry per physical core; empty if unknown)."""
    seen: set[str] = set()
    for d in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*")):
        try:
            s = (d / "topology" / "thread_siblings_list").read_text().strip()
        except OSError:
            continue
        seen.add(s.replace(",", "-"))
    return sorted(seen, key=lambda s: int(s.split("-")[0]))


def read_thread(pid: int, tid: int) -> tuple[str, int, int] | None:
    """(thread name, CPU it last ran on, user + system ticks) of one thread; None if gone."""
    try:
        raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()
    # fields after the name: state is rest[0] (field 3); utime 14, stime 15, processor 39
    return name, int(rest[36]), int(rest[11]) + int(rest[12])


def alive(p: psutil.Process) -> bool:
    """Running and not a zombie (an ended child its parent has not reaped yet)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def sample(root_pid: int, out: Path, period_s: float = 0.2, min_busy: float = 0.02) -> int:
    """Sample until the process ends or a signal stops it; the number of rows written."""
    root = psutil.Process(root_pid)
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    last: dict[int, int] = {}
    names: dict[int, str] = {}
    rows = 0
    with open(out, "w") as f:
        f.write(f"# siblings {' '.join(smt_siblings())}\n")
        f.write("t_s,pid,tid,process,thread,cpu,busy\n")
        t_prev = time.monotonic()
        while not stop and alive(root):
            time.sleep(period_s)
            now = time.monotonic()
            dt = now - t_prev
            t_prev = now
            for p in tree(root):
                pid = p.pid
                if pid not in names:
                    try:
                        names[pid] = " ".join(p.cmdline()[:1]) or p.name()
                    except psutil.Error:
                        continue
                try:
                    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
                except OSError:
                    continue
                for tid in tids:
                    got = read_thread(pid, tid)
                    if got is None:
                        continue
                    name, cpu, ticks = got
                    prev = last.get(tid)
                    last[tid] = ticks
                    if prev is None:
                        continue
                    busy = (ticks - prev) / CLK_TCK / dt
                    if busy >= min_busy:
                        f.write(f"{now:.3f},{pid},{tid},{names[pid]},{name},{cpu},"
                                f"{busy:.3f}\n")
                        rows += 1
            f.flush()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgeserve.bench.proc_sampler",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("pid", type=int, help="the process whose tree is sampled")
    ap.add_argument("out", type=Path, help="the CSV written")
    ap.add_argument("--period-ms", type=float, default=200.0)
    ap.add_argument("--min-busy", type=float, default=0.02,
                    help="threads that ran less than this fraction of a period are left out")
    a = ap.parse_args(argv)
    try:
        n = sample(a.pid, a.out, a.period_ms / 1000.0, a.min_busy)
    except psutil.NoSuchProcess:
        print(f"proc_sampler: no process {a.pid}", file=sys.stderr)
        return 2
    print(f"proc_sampler: {n} rows in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
