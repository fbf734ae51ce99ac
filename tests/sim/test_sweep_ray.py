"""Sweeps on a real Ray cluster and on the local pool: same summaries, dead workers, resuming.

The module starts one Ray head on 127.0.0.1 with 2 CPUs (``ray start --head --block`` in its own
process session, stopped at the end) and runs a grid of 8 runs of the default scenario on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from edgeserve.cli.main import main
from edgeserve.net import free_port
from sim.experiments.distribute import ExecConfig
from sim.experiments.runner import RunResult
from sim.experiments.sweep import run_specs, specs_for
from sim.experiments.sweep_store import FILE_NAME, RunStore
from tests.sim.conftest import small_fleet

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
AXES: list[tuple[str, list[Any]]] = [("devices[0].workload.rate_hz", [0.5, 1.0, 1.5, 2.0])]
SEEDS = [0, 1]
DURATION_S = 6000  # 0.3–0.8 s a run in pure Python here: long enough to be caught mid-run
PARAM = "devices[0].workload.rate_hz=0.5,1.0,1.5,2.0"


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[tuple[str, psutil.Process]]:
    """A Ray head on 127.0.0.1 (2 CPUs): yields its address and the ``ray start`` process."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit
    log = open(Path(tmp) / "ray-start.log", "w")  # noqa: SIM115 (closed at teardown)
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--num-cpus", "2", "--node-ip-address",
         "127.0.0.1", "--port", str(port), "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", tmp],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (Path(tmp) / "ray-start.log").read_text()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the Ray head did not come up in 60 s"
                time.sleep(0.2)
        yield address, psutil.Process(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)  # --block: ray start stops what it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything left of that session
        proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _specs() -> list[Any]:
    return specs_for(small_fleet(duration_s=DURATION_S), AXES, [None], SEEDS)


def _summaries(results: list[RunResult]) -> list[str]:
    return [json.dumps(r.summary.to_dict(), sort_keys=True) for r in results]


@pytest.fixture(scope="module")
def pool_summaries() -> list[str]:
    """The reference: the same grid on the local process pool (2 processes)."""
    return _summaries(run_specs(_specs(), ExecConfig(workers=2)).results)


def test_ray_sweep_returns_exactly_the_local_pools_summaries(
        ray_cluster: tuple[str, psutil.Process], pool_summaries: list[str]) -> None:
    address, _ = ray_cluster
    run = run_specs(_specs(), ExecConfig(ray_address=address))
    assert run.ran == len(pool_summaries) == 8
    assert _summaries(run.results) == pool_summaries
    assert len(set(pool_summaries)) == 8  # every point differs: the grid really varied


def _kill_one(parent: psutil.Process, is_target: Any, killed: list[int],
              stop: threading.Event) -> None:
    """SIGKILL the first descendant of ``parent`` whose command line ``is_target``."""
    while not stop.is_set() and not killed:
        for p in parent.children(recursive=True):
            try:
                if is_target(p.cmdline()):
                    p.kill()
                    killed.append(p.pid)
                    return
            except psutil.Error:
                continue
        time.sleep(0.02)


def test_a_ray_worker_killed_mid_sweep_is_retried_and_the_sweep_completes(
        ray_cluster: tuple[str, psutil.Process], pool_summaries: list[str]) -> None:
    address, head = ray_cluster
    killed: list[int] = []
    stop = threading.Event()
    # a worker running a task carries the task's name as its process title
    killer = threading.Thread(target=_kill_one, args=(
        head, lambda cmd: " ".join(cmd).startswith("ray::ray_run"), killed, stop))
    killer.start()
    try:
        run = run_specs(_specs(), ExecConfig(ray_address=address))
    finally:
        stop.set()
        killer.join()
    assert killed, "no Ray worker was seen running a task"
    assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == "zombie"
    assert _summaries(run.results) == pool_summaries


def test_a_pool_worker_killed_mid_sweep_gets_a_new_pool_and_the_sweep_completes(
        pool_summaries: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    killed: list[int] = []
    stop = threading.Event()
    me = psutil.Process()
    mine = me.cmdline()  # pool workers are forked: they carry this process's command line
    killer = threading.Thread(target=_kill_one, args=(me, lambda cmd: cmd == mine, killed, stop))
    killer.start()
    try:
        run = run_specs(_specs(), ExecConfig(workers=2))
    finally:
        stop.set()
        killer.join()
    assert killed
    assert "a pool worker died; running the" in capsys.readouterr().err
    assert _summaries(run.results) == pool_summaries


def _sweep_argv(out: Path, *extra: str) -> list[str]:
    return ["sim", "sweep", "--param", PARAM, "--seeds", "2", "--duration", str(DURATION_S),
            "--out", str(out), "--no-progress", *extra]


@pytest.mark.parametrize("where", ["pool", "ray"])
def test_an_interrupted_sweep_resumes_and_runs_only_the_missing_points(
        where: str, ray_cluster: tuple[str, psutil.Process], pool_summaries: list[str],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--ray", ray_cluster[0]] if where == "ray" else ["--workers", "2"]
    store = tmp_path / FILE_NAME
    # Ctrl-C's default disposition in the sweep, as in a terminal: a test run started in the
    # background by a shell without job control inherits SIGINT ignored, and so would the sweep
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeserve.cli.main", *_sweep_argv(tmp_path, *extra)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (store.exists() and store.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"interrupted; finished runs are in {store}" in err
    kept = len(RunStore(tmp_path).runs)
    assert 2 <= kept < 8

    assert main(_sweep_argv(tmp_path, *extra)) == 0
    out = capsys.readouterr().out
    assert f"resumed: {kept} of 8 runs read from {store}, {8 - kept} run now" in out
    lines = store.read_text().splitlines()
    assert len(lines) == 8 and len({json.loads(x)["key"] for x in lines}) == 8
    stored = RunStore(tmp_path).runs.values()
    assert sorted(json.dumps(r.summary.to_dict(), sort_keys=True) for r in stored) \
        == sorted(pool_summaries)
    # a third time: nothing left to run
    assert main(_sweep_argv(tmp_path, *extra)) == 0
    assert "resumed: 8 of 8 runs read" in capsys.readouterr().out


def test_a_run_cut_short_while_writing_is_dropped_and_run_again(tmp_path: Path) -> None:
    specs = _specs()[:2]
    run_specs(specs, ExecConfig(), tmp_path)
    store = tmp_path / FILE_NAME
    data = store.read_bytes()
    store.write_bytes(data[: len(data) - 40])  # the second line loses its end
    run = run_specs(specs, ExecConfig(), tmp_path)
    assert (run.reused, run.ran) == (1, 1)
    assert store.read_text().count("\n") == 2


def test_sweep_without_ray_says_how_to_install_it() -> None:
    code = ("import sys; sys.modules['ray'] = None\n"  # as if ray were not installed
            "from edgeserve.cli.main import main\n"
            f"sys.exit(main({['sim', 'sweep', '--param', PARAM, '--ray']!r}))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "edgeserve sim: Ray is not installed: pip install 'edgeserve[ray]' "
        "(or pip install 'ray>=2.40')"]


def test_sweep_on_an_address_where_no_cluster_answers_fails_at_once() -> None:
    t0 = time.monotonic()
    assert main(["sim", "sweep", "--param", PARAM, "--ray", f"127.0.0.1:{free_port()}"]) == 2
    assert time.monotonic() - t0 < 30
