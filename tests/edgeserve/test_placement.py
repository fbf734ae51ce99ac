"""Moving vLLM's EngineCore onto its model worker's cores, on real processes named as vLLM names
them (``VLLM::EngineCore`` with two threads, ``VLLM::Worker`` pinned to one core), children of
the test process as vLLM's are children of the server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from edgeserve.placement import colocate_engine_core

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to move a process between")

SPIN = ("import sys, threading, time; open('/proc/self/comm', 'w').write(sys.argv[1][:15]); "
        "threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)")


def named(name: str, cores: list[int] | None = None) -> subprocess.Popen[bytes]:
    """A Python process named ``name`` as setproctitle names vLLM's: argv[0] and the kernel's
    15-character ``comm``."""
    argv = ["bash", "-c", f'exec -a "{name}" "{sys.executable}" -c "{SPIN}" "{name}"']
    if cores is not None:
        argv = ["taskset", "-c", ",".join(map(str, cores)), *argv]
    return subprocess.Popen(argv)


@pytest.fixture
def engine() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    core = named("VLLM::EngineCore")
    worker = named("VLLM::Worker_TP0", cores=CORES[:1])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(core.pid).threads()) < 2 or psutil.Process(
                worker.pid).name() != "VLLM::Worker_TP0":
            assert time.monotonic() < deadline, "the stand-in processes did not start"
            time.sleep(0.05)
        yield core, worker
    finally:
        for p in (core, worker):
            p.kill()
            p.wait()


def test_the_engine_core_moves_with_every_thread_to_its_workers_single_core(
    engine: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    core, _ = engine
    moved = colocate_engine_core(exclude=set())
    assert moved is not None
    assert moved.pid == core.pid
    assert moved.cores_before == tuple(CORES) and moved.cores_after == (CORES[0],)
    threads = psutil.Process(core.pid).threads()
    assert moved.threads == len(threads) >= 2
    assert all(os.sched_getaffinity(t.id) == {CORES[0]} for t in threads)
    assert f"to {CORES[0]}," in moved.line()


def test_nothing_moves_when_the_worker_may_use_every_core_the_engine_core_may(
    engine: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    core, worker = engine
    os.sched_setaffinity(worker.pid, set(CORES))
    assert colocate_engine_core(exclude=set()) is None
    assert os.sched_getaffinity(core.pid) == set(CORES)


def test_excluded_processes_are_not_taken_for_vllms(
    engine: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    core, worker = engine
    assert colocate_engine_core(exclude={core.pid, worker.pid}) is None
    assert os.sched_getaffinity(core.pid) == set(CORES)
