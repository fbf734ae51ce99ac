"""The process-tree sampler finds a busy child thread, the CPU it ran on and how busy it was."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from edgeserve.bench.proc_sampler import read_thread, sample, smt_siblings


def test_a_spinning_child_shows_up_busy_on_a_cpu_and_an_idle_one_does_not(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "spin = subprocess.Popen([sys.executable, '-c', 'import time\\nt=time.time()\\n"
        "while time.time() - t < 1.6: pass'])\n"
        "idle = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1.6)'])\n"
        "spin.wait(); idle.wait()\n")])
    time.sleep(0.3)  # the children started
    out = tmp_path / "threads.csv"
    rows = sample(parent.pid, out, period_s=0.2, min_busy=0.3)
    parent.wait()
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# siblings")
    assert lines[1] == "t_s,pid,tid,process,thread,cpu,busy"
    data = [line.split(",") for line in lines[2:]]
    assert rows == len(data) >= 3
    # only the spinning child ran ≥ 30 % of a period: one pid, on a real CPU, mostly busy
    assert len({d[1] for d in data}) == 1 and int(data[0][1]) != parent.pid
    assert all(0 <= int(d[5]) < os.cpu_count() for d in data)  # type: ignore[operator]
    assert max(float(d[6]) for d in data) > 0.6


def test_a_thread_reads_its_name_cpu_and_ticks() -> None:
    got = read_thread(os.getpid(), os.getpid())
    assert got is not None
    name, cpu, ticks = got
    assert name and cpu >= 0 and ticks >= 0
    assert read_thread(os.getpid(), 2**22 + 7) is None  # no such thread
    assert all("-" in s or s.isdigit() for s in smt_siblings())
