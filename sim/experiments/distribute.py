"""Running many independent runs: in this process, on a local process pool, or on a Ray cluster.

:func:`run_stream` takes a list of :class:`~sim.experiments.runner.RunSpec` and yields ``(index, result)``
pairs *as the runs finish*, in whatever order that is, so a caller can write each result down at
once (see :mod:`sim.experiments.sweep_store`) and show progress. Each run is independent and deterministic
given its spec, so where it runs does not change its result: a Ray worker, a pool process and
this process return equal summaries for the same spec.

**Workers that die.** A Ray task whose worker process dies (killed, out of memory, its node
lost) is run again by Ray, up to ``retries`` times. A local pool whose worker dies is broken as a
whole (every pending run fails with ``BrokenProcessPool``); it is replaced by a fresh pool that
runs the unfinished specs, up to ``retries`` times. An exception raised by a run itself (a bad
scenario) is not retried: it ends the whole call.

**Ray** is an optional dependency (``pip install 'edgeserve[ray]'``). ``ray_address`` is what
``ray.init(address=...)`` takes: ``"auto"`` for the cluster that ``ray start --head`` started on
this machine, ``"HOST:PORT"`` for any other, ``"local"`` for a private one started (and stopped)
for this call. Every node must run the same simulator sources as this process; a worker that
does not is refused (its results would not be the results of this code).
"""

from __future__ import annotations

import functools
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from sim.experiments.runner import RunResult, RunSpec, run_spec
from sim.native import source_fingerprint
from sim.scenario.schema import positive, require

RAY_INSTALL = "Ray is not installed: pip install 'edgeserve[ray]' (or pip install 'ray>=2.40')"

Progress = Callable[[int, RunResult], Any]


class RunFailed(RuntimeError):
    """A run could not be completed (its workers kept dying, or the cluster is unreachable)."""


@dataclass(slots=True, frozen=True)
class ExecConfig:
    """Where runs go. ``ray_address`` set: Ray; else ``workers`` > 1: a local pool; else serial."""

    workers: int = 1
    ray_address: str | None = None
    retries: int = 3  # re-runs after a worker died (Ray tasks; a broken local pool)

    def __post_init__(self) -> None:
        positive(self.workers, "workers")
        require(self.retries >= 0, "retries", f"must be >= 0, got {self.retries}")
        require(self.ray_address is None or self.ray_address.strip() != "", "ray_address",
                "must not be empty")


def run_stream(specs: list[RunSpec], cfg: ExecConfig) -> Iterator[tuple[int, RunResult]]:
    """Yield ``(index into specs, result)`` for every spec, as each run finishes."""
    if not specs:
        return
    if cfg.ray_address is not None:
        yield from _ray_stream(specs, cfg)
    elif cfg.workers <= 1 or len(specs) == 1:
        for i, spec in enumerate(specs):
            yield i, run_spec(spec)
    else:
        yield from _pool_stream(specs, cfg)


def run_all(specs: list[RunSpec], cfg: ExecConfig) -> list[RunResult]:
    """Every result, in the order of ``specs``."""
    out: list[RunResult | None] = [None] * len(specs)
    for i, r in run_stream(specs, cfg):
        out[i] = r
    return [r for r in out if r is not None]


# ---- local process pool --------------------------------------------------------------------

def run_many(specs: list[RunSpec], workers: int = 1, use_ray: bool = False) -> list[RunResult]:
    """Run specs on this process, a local process pool, or the Ray cluster found by
    ``ray.init(address="auto")``; results in the order of ``specs``."""
    return run_all(specs, ExecConfig(workers=max(1, workers),
                                     ray_address="auto" if use_ray else None))


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (no traceback from each)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool_stream(specs: list[RunSpec], cfg: ExecConfig) -> Iterator[tuple[int, RunResult]]:
    todo = set(range(len(specs)))
    broken = 0
    while todo:
        pool = ProcessPoolExecutor(max_workers=min(cfg.workers, len(todo)),
                                   initializer=_ignore_sigint)
        try:
            futures: dict[Future[RunResult], int] = {pool.submit(run_spec, specs[i]): i
                                                     for i in sorted(todo)}
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        i = futures[f]
                        result = f.result()  # a run's own exception ends the call here
                        todo.discard(i)
                        yield i, result
            except BrokenProcessPool:
                broken += 1
                if broken > cfg.retries:
                    raise RunFailed(
                        f"a worker of the local pool died {broken} times (killed, or out of "
                        f"memory?); {len(todo)} of {len(specs)} runs unfinished") from None
                print(f"edgeserve sim: a pool worker died; running the {len(todo)} unfinished "
                      f"runs on a new pool (retry {broken} of {cfg.retries})", file=sys.stderr)
        finally:
            _stop_pool(pool)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and stop the workers now (they may be mid-run on Ctrl-C)."""
    # the executor has no public way to stop running workers; its process table is the only one
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)


# ---- Ray ------------------------------------------------------------------------------------

@functools.cache
def _sources() -> str:
    return source_fingerprint()


def ray_run(spec: RunSpec, driver_sources: str) -> RunResult:
    """One run on a Ray worker, refused when the worker's simulator is not the driver's."""
    mine = _sources()
    if mine != driver_sources:
        import socket

        raise RunFailed(f"the Ray worker on {socket.gethostname()} runs other simulator sources "
                        "than the driver: install the same edgeserve on every node")
    return run_spec(spec)


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RunFailed` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RunFailed(RAY_INSTALL) from None
    return ray


def connect(address: str) -> Any:
    """``ray.init`` on ``address`` (see the module docstring); returns the ``ray`` module."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    kw: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit():  # HOST:PORT: fail in seconds, not after Ray's minutes of retries
        import socket

        try:
            socket.create_connection((host.removeprefix("ray://"), int(port)), timeout=5).close()
        except OSError as e:
            raise RunFailed(
                f"no Ray cluster answers at {address} ({e.strerror or e}). Start one with "
                "`ray start --head` (then --ray alone finds it), or give its address as "
                "--ray HOST:PORT") from None
    try:
        if address == "local":
            ray.init(include_dashboard=False, **kw)
        else:
            ray.init(address=address, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunFailed(
            f"cannot connect to a Ray cluster at {address!r} ({first}). Start one with "
            "`ray start --head` on this machine (then --ray alone finds it), or give its address "
            "as --ray HOST:PORT") from None
    return ray


def _ray_stream(specs: list[RunSpec], cfg: ExecConfig) -> Iterator[tuple[int, RunResult]]:
    assert cfg.ray_address is not None
    ray = import_ray()
    ours = not ray.is_initialized()  # connected here: disconnect at the end (the cluster stays)
    connect(cfg.ray_address)
    from ray.exceptions import RayTaskError, WorkerCrashedError

    task = ray.remote(num_cpus=1, max_retries=cfg.retries, retry_exceptions=False)(ray_run)
    sources = _sources()
    refs = {task.remote(spec, sources): i for i, spec in enumerate(specs)}
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                i = refs.pop(ref)
                try:
                    result = ray.get(ref)
                except WorkerCrashedError:
                    raise RunFailed(f"run {i} ({specs[i].label}): its Ray worker died "
                                    f"{cfg.retries + 1} times") from None
                except RayTaskError as e:
                    raise e.as_instanceof_cause() from None
                yield i, result
    finally:
        # interrupted, or a run failed: what is left ends with this driver's job (cancelling
        # the tasks by force while their replies arrive crashed Ray 2.60's driver on Ctrl-C)
        if ours:
            ray.shutdown()
