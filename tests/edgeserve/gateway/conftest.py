"""Real processes for the gateway's tests: fake OpenAI-compatible upstreams and the gateway."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from edgeserve.net import free_port

HERE = Path(__file__).parent
STARTUP_S = 60.0


class Proc:
    """A subprocess serving HTTP on ``port``; ready once ``ready_path`` answers."""

    def __init__(self, argv: list[str], port: int, log: Path, ready_path: str) -> None:
        self.port, self.log = port, log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
        deadline = time.monotonic() + STARTUP_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv} exited:\n{log.read_text()}")
            try:
                urllib.request.urlopen(self.url + ready_path, timeout=2).read()
                return
            except urllib.error.HTTPError:
                return  # answering (401 behind a key is an answer)
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{argv} not ready:\n{log.read_text()}") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def upstream(tmp: Path, name: str, *args: str) -> Proc:
    port = free_port()
    return Proc([sys.executable, str(HERE / "fake_upstream.py"), "--port", str(port),
                 "--name", name, *args], port, tmp / f"{name}.log", "/v1/models")


def delay_proxy(tmp: Path, target: Proc | str, delay_s: float, ready_path: str = "/v1/models"
                ) -> Proc:
    """A proxy in front of ``target`` (a process or its URL) that delays each request by
    ``delay_s`` (``delay_proxy.py``): a slower link."""
    port = free_port()
    url = target.url if isinstance(target, Proc) else target
    return Proc([sys.executable, str(HERE / "delay_proxy.py"), "--port", str(port),
                 "--target-port", url.rsplit(":", 1)[1], "--delay-s", str(delay_s)], port,
                tmp / f"proxy-{port}.log", ready_path)


def gateway(tmp: Path, *args: str) -> Proc:
    port = free_port()
    return Proc([sys.executable, "-m", "edgeserve", "gateway", "--port", str(port),
                 "--trace", str(tmp / "gateway.jsonl"), *args], port, tmp / "gateway.log",
                "/health")


def png_data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def chat_body(text: str = "describe", image: str | None = None, **extra: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": image}})
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 8, **extra}


def post(url: str, body: Any, headers: dict[str, str] | None = None,
         timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def chat(gw: Proc, body: dict[str, Any], headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, str], bytes]:
    return post(gw.url + "/v1/chat/completions", body, headers)


def answer(raw: bytes) -> dict[str, Any]:
    """The fake upstream's reply: which upstream, which model, the widest image."""
    return dict(json.loads(json.loads(raw)["choices"][0]["message"]["content"]))


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def trace_records(tmp: Path) -> list[dict[str, Any]]:
    lines = (tmp / "gateway.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if json.loads(x).get("type") == "request"]


def wait_records(tmp: Path, n: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The trace's request records once there are ``n`` (a streamed answer's record is written
    just after its last byte, so the client can be there first)."""
    deadline = time.monotonic() + timeout_s
    while len(recs := trace_records(tmp)) < n:
        assert time.monotonic() < deadline, f"{len(recs)} records, expected {n}"
        time.sleep(0.02)
    return recs


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Processes a test starts; all stopped at its end."""
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.stop()
