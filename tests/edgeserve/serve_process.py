"""A real ``edgeserve serve`` subprocess for tests: free port, wait for /health, stop by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT_S = 300.0


def my_segments(pid: int) -> list[str]:
    """The shared-memory segments a server with this pid still has in /dev/shm."""
    return sorted(p.name for p in Path("/dev/shm").glob(f"edgeserve_{pid}_*"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, args: list[str], log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.argv = [sys.executable, "-m", "edgeserve", "serve", "--port", str(self.port), *args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_t_s = 0.0  # time.monotonic() when /health first answered 200
        self.last_refused_t_s = 0.0  # the last /health poll before that which got no answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                asked_t_s = time.monotonic()
                self.get_json("/health")
                self.ready_t_s = time.monotonic()
                return self
            except (urllib.error.URLError, ConnectionError):
                self.last_refused_t_s = asked_t_s
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server not ready after {STARTUP_TIMEOUT_S} s:\n{self.log_tail()}")

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def get_text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return str(r.read().decode())

    def metric(self, name: str, labels: str = "") -> float:
        """One sample's value from /metrics (``labels`` as in the exposition, e.g. 'outcome="ok"')."""
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

    def stop(self, timeout_s: float = 60.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
