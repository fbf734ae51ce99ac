"""An OpenAI-compatible server (edgeserve or vLLM) as a child process: started, waited for, read
from, stopped.

The server runs in its own process group with its output in a log file. Stopping it sends SIGTERM
to the server's own process (edgeserve and vLLM both drain and stop their children on it), then
SIGKILL to the whole group for whatever is left (vLLM's EngineCore may outlive its parent by a
moment). SIGTERM rather than SIGINT: a process started in the background by a shell inherits an
ignored SIGINT, and so would the servers started from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import aiohttp

from edgeserve.net import free_port


class ServerProcess:
    """One server on ``127.0.0.1:port``, started by ``argv`` (pinned with ``taskset -c cores``)."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, port: int, cores: str = "",
                 env: Mapping[str, str] | None = None, ready_path: str = "/v1/models") -> None:
        self.argv = (["taskset", "-c", cores] if cores else []) + list(argv)
        self.log_path = log_path
        self.port = port
        self.ready_path = ready_path
        self._env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.ready_t_s = 0.0  # time.monotonic() when ready_path first answered 200
        self.last_refused_t_s = 0.0  # the last poll before that which got no answer

    @classmethod
    def edgeserve(cls, args: Sequence[str], log_path: Path, *, port: int | None = None,
                  env: Mapping[str, str] | None = None, cores: str = "") -> ServerProcess:
        """``edgeserve serve ARGS`` with this interpreter, on ``port`` (default: a free one),
        pinned to ``cores`` (taskset's list; default: not pinned)."""
        port = free_port() if port is None else port
        argv = [sys.executable, "-m", "edgeserve", "serve", "--port", str(port), *args]
        return cls(argv, log_path, port=port, env={"PYTHONUNBUFFERED": "1", **(env or {})},
                   ready_path="/health", cores=cores)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the server was not started"
        return self.proc.pid

    def start(self) -> ServerProcess:
        """Start the process (it is not ready yet: :meth:`ready` or :meth:`wait_ready` waits)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, **self._env})
        return self

    def _check_alive(self) -> None:
        assert self.proc is not None, "the server was not started"
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with code {self.proc.returncode} during start-up; "
                               f"last lines of {self.log_path}:\n{self.log_tail(40)}")

    def ready(self, timeout_s: float = 300.0) -> ServerProcess:
        """Block until ``ready_path`` answers 200; stop the server and raise if it never does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            asked_t_s = time.monotonic()
            try:
                self.get_json(self.ready_path)
                self.ready_t_s = time.monotonic()
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                self.last_refused_t_s = asked_t_s
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout_s:.0f} s; last lines of "
                           f"{self.log_path}:\n{self.log_tail(40)}")

    async def wait_ready(self, timeout_s: float = 300.0) -> None:
        """:meth:`ready` for an event loop (the benchmarks run one)."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    async with http.get(self.url + self.ready_path) as resp:
                        if resp.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(1.0)
        raise RuntimeError(f"server not ready after {timeout_s:.0f} s; see {self.log_path}")

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def get_text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return str(r.read().decode())

    def metric(self, name: str, labels: str = "") -> float:
        """One sample's value from /metrics (``labels`` as in the exposition, e.g. 'outcome="ok"');
        0.0 when the sample is not there yet."""
        key = f"{name}{{{labels}}}" if labels else name
        for line in self.get_text("/metrics").splitlines():
            if line.startswith(key + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def metric_sum(self, name: str) -> float:
        """The sum of all samples of ``name`` in /metrics, whatever their labels."""
        total = 0.0
        for line in self.get_text("/metrics").splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 60.0) -> int | None:
        """SIGTERM the server, SIGKILL its process group after ``grace_s``; its exit code (None
        if it was never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # children that outlived the server
        if self._log is not None:
            self._log.close()
        return self.proc.returncode
