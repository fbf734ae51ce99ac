"""One replica: a whole ``edgeserve serve`` (frontend, preprocessing workers, vLLM engine) as a
child process on a local port, with its GPUs or cores (:class:`~edgeserve.replicas.plan.ReplicaSlot`).

Each replica has its own preprocessing pool rather than one pool shared by all engines: a replica
is then a failure domain of its own (a dead engine, a stuck worker or a full queue in one leaves
the others untouched, and the engine-restart logic of a single server works unchanged), the hand
-off from workers to engine stays inside one process tree with its shared-memory segments, and on
a GPU host each replica's CPU work follows its engine's load. The price is that the workers are
split between the replicas (on the CPU build: the replica's own cores) instead of drawn from one
pool, so a burst on one replica cannot borrow the other's idle workers; routing by least
outstanding requests keeps the loads even, which makes that case rare.

The child gets the parent's configuration whole (a JSON ``--config`` file), with its own port on
127.0.0.1, ``replicas`` 1 and per-replica trace and log files; it dies with the parent (Linux's
parent-death signal), so a killed frontend leaves no engine behind.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from edgeserve.config import ServeConfig
from edgeserve.net import free_port
from edgeserve.replicas.plan import ReplicaSlot

PR_SET_PDEATHSIG = 1


class ReplicaState(enum.StrEnum):
    """What the frontend knows of a replica, from its process and its ``/health``."""

    STARTING = "starting"  # started, /health not yet 200
    READY = "ready"  # /health 200: takes requests
    UNAVAILABLE = "unavailable"  # /health not 200 after being ready (engine restarting, draining)
    EXITED = "exited"  # its server process ended


@dataclass(slots=True)
class Replica:
    """A replica's process, address and the frontend's counters for it."""

    slot: ReplicaSlot
    port: int
    config_path: Path
    log_path: Path  # the replica's own terminal lines (its vLLM output is in its engine log)
    proc: subprocess.Popen[bytes] | None = None
    state: ReplicaState = ReplicaState.STARTING
    outstanding: int = 0  # requests sent to it and not yet answered in full
    routed_total: int = 0  # requests sent to it since start
    failed_total: int = 0  # attempts it refused or dropped (retried on another replica)
    health: dict[str, Any] = field(default_factory=dict)  # its last /health body
    _log: IO[bytes] | None = None

    @property
    def index(self) -> int:
        return self.slot.index

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        cores = set(self.slot.cores)

        def in_child() -> None:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if cores:
                os.sched_setaffinity(0, cores)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgeserve", "serve", "--config", str(self.config_path)],
            stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=in_child,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.slot.env()})

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> None:
        """Wait for the process to end; SIGKILL it after ``timeout_s``."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def replica_config(cfg: ServeConfig, index: int, port: int, log_dir: Path) -> dict[str, Any]:
    """The configuration file's fields of replica ``index``: the parent's, on its own port."""
    skip = {"spec", "replicas", "host", "port", "trace", "engine_log", "verbose", "engine"}
    out: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(ServeConfig)
                           if f.name not in skip}
    out.update(host="127.0.0.1", port=port, replicas=1,
               engine_log=str(log_dir / f"replica{index}.engine.log"),
               engine={f.name: getattr(cfg.engine, f.name)
                       for f in dataclasses.fields(type(cfg.engine))})
    if cfg.trace:
        t = Path(cfg.trace)
        out["trace"] = str(t.with_name(f"{t.stem}.replica{index}{t.suffix}"))
    return out


def make_replicas(cfg: ServeConfig, slots: list[ReplicaSlot], log_dir: Path) -> list[Replica]:
    """The replicas of ``cfg`` (not started), their configuration files written to ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for slot in slots:
        port = free_port()
        path = log_dir / f"replica{slot.index}.json"
        path.write_text(json.dumps(replica_config(cfg, slot.index, port, log_dir), indent=1))
        out.append(Replica(slot, port, path, log_dir / f"replica{slot.index}.log"))
    return out
