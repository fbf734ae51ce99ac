"""When the server is pushed past what it can do: a full engine queue, a drain that runs out of
time, an engine that dies.

With one engine slot and a waiting line of three, a request beyond them gets 429 while the admitted
ones complete. SIGTERM with a drain timeout shorter than a running request cancels that request,
records it as aborted and exits cleanly. A SIGKILLed vLLM EngineCore fails the requests it held
with 503, and the server starts a new engine and serves again. No shared-memory segment is left
behind.
"""

from __future__ import annotations

import base64
import io
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psutil
import pytest
from PIL import Image
from serve_process import my_segments

from edgeserve import records
from edgeserve.bench.server_process import ServerProcess

pytestmark = pytest.mark.engine


def start_stream(server: ServerProcess, max_tokens: int) -> tuple[threading.Thread, dict[str, Any]]:
    """A long streaming text request read in a thread; ``state`` fills in as chunks arrive."""
    state: dict[str, Any] = {"chunks": [], "done": False, "error": None}
    body = json.dumps({"max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                       "messages": [{"role": "user", "content": "Count."}]}).encode()

    def read() -> None:
        req = urllib.request.Request(server.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                for line in r:
                    if line.startswith(b"data: [DONE]"):
                        state["done"] = True
                    elif line.startswith(b"data: "):
                        state["chunks"].append(json.loads(line[6:]))
        except Exception as e:  # the server going away mid-stream is what some tests cause
            state["error"] = e

    t = threading.Thread(target=read, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not state["chunks"] and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.01)
    assert state["chunks"], "no token arrived"
    return t, state


def post(server: ServerProcess, body: dict[str, Any]) -> int:
    req = urllib.request.Request(server.url + "/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def slow_png_url() -> str:
    """A 36 MP PNG of a few MB: seconds to decode (PNG has no reduced-scale decoding)."""
    y, x = np.mgrid[0:6000, 0:6000]
    img = np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 11) % 256], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def finished_records(trace: Path, n: int, timeout_s: float = 10.0) -> list[records.RequestRecord]:
    """The trace's successful request records, once ``n`` are there (flushed every sample)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = [r for r in records.read_trace(trace)
                if isinstance(r, records.RequestRecord) and r.outcome is records.Outcome.OK]
        if len(done) >= n or time.monotonic() > deadline:
            return done
        time.sleep(0.2)


class TightServer(NamedTuple):
    server: ServerProcess
    trace: Path


@pytest.fixture(scope="module")
def tight(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TightServer]:
    """One engine slot, a waiting line of three, a 1 s drain timeout; the last test stops it."""
    d = tmp_path_factory.mktemp("tight")
    server = ServerProcess.edgeserve(["--model", str(tiny_model_dir), "--workers", "1", "--max-model-len",
                                      "4096", "--max-engine-queue", "1", "--max-pending", "3",
                                      "--drain-timeout", "1", "--trace", str(d / "trace.jsonl")],
                                      d / "server.log").start().ready()
    yield TightServer(server, d / "trace.jsonl")
    server.stop()


def test_past_the_engine_slots_and_the_waiting_line_requests_get_429(tight: TightServer) -> None:
    server = tight.server
    png = slow_png_url()
    slow = {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": png}} for _ in range(3)]}]}
    text = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    statuses: dict[str, int] = {}

    def send(name: str, body: dict[str, Any], inflight_after: int) -> threading.Thread:
        t = threading.Thread(target=lambda: statuses.update({name: post(server, body)}))
        t.start()
        while server.get_json("/health")["inflight"] < inflight_after:
            time.sleep(0.01)
        return t

    # a holds the only slot while its three PNGs are decoded one after the other; b1..b3 wait
    # for it (the line is then full); c finds no slot and no room in the line
    threads = [send("a", slow, 1)] + [send(f"b{i}", text, 1 + i) for i in (1, 2, 3)]
    statuses["c"] = post(server, text)
    for t in threads:
        t.join(120)
    assert statuses == {"a": 200, "b1": 200, "b2": 200, "b3": 200, "c": 429}
    # the waiting ones really waited for a: their first tokens came after a's
    done = finished_records(tight.trace, 4)
    slow_rec = next(r for r in done if r.num_images == 3)
    text_rec = min((r for r in done if r.num_images == 0), key=lambda r: r.first_token_s or 0)
    assert text_rec.first_token_s is not None and slow_rec.first_token_s is not None
    assert text_rec.first_token_s > slow_rec.first_token_s


def test_a_drain_timeout_cancels_the_requests_still_running(tight: TightServer) -> None:
    server, trace = tight
    t, state = start_stream(server, max_tokens=4000)  # ~6 s of decoding here, far past 1 s
    assert server.proc is not None
    sent = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(60) == 0, server.log_tail()
    took = time.monotonic() - sent
    t.join(10)
    tokens = sum(len(c["choices"][0]["delta"].get("content") or "") > 0
                 for c in state["chunks"] if c.get("choices"))
    assert not state["done"] and tokens < 4000  # cut off, not completed
    assert took < 30, f"shutdown took {took:.1f} s"
    recs = [i for i in records.read_trace(trace) if isinstance(i, records.RequestRecord)
            and i.outcome is records.Outcome.ABORTED]
    assert len(recs) == 1
    assert "drain timeout" in (recs[0].error or "")
    assert my_segments(server.pid) == []


def engine_processes(server: ServerProcess) -> list[psutil.Process]:
    """vLLM's processes under the server (EngineCore and its model worker)."""
    return [p for p in psutil.Process(server.pid).children(recursive=True)
            if p.name().startswith("VLLM::")]


def health(server: ServerProcess) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read())


def test_a_dead_engine_fails_its_requests_with_503_and_a_new_engine_serves(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL of vLLM's EngineCore under load: the two requests it held end with 503 and the
    reason, /health says not ready while a new engine starts, then ready; the next request is
    served by the same server process, and the dead engine left no process and no /dev/shm
    queue behind."""
    psm_before = {p.name for p in Path("/dev/shm").glob("psm_*")}
    server = ServerProcess.edgeserve(["--model", str(tiny_model_dir), "--workers", "1", "--max-model-len",
                                      "4096"], tmp_path / "server.log").start().ready()
    try:
        old = engine_processes(server)
        core = [p for p in old if p.name().startswith("VLLM::EngineCor")]
        assert len(core) == 1, [p.name() for p in old]
        streams = [start_stream(server, max_tokens=4000) for _ in range(2)]
        old_psm = {p.name for p in Path("/dev/shm").glob("psm_*")} - psm_before
        core[0].kill()
        for t, _ in streams:
            t.join(60)
        for _, state in streams:  # in-stream errors: their 200 status was already sent
            assert not state["done"] and state["error"] is None
            errors = [c["error"] for c in state["chunks"] if "error" in c]
            assert errors and errors[0]["code"] == 503, state["chunks"][-3:]
            assert "engine has died" in errors[0]["message"]
        status, body = health(server)  # the watchdog may not have begun the restart yet
        assert status == 503 and body["error"] == "the vLLM engine died; a new one is starting"
        assert post(server, {"max_tokens": 2, "messages": [
            {"role": "user", "content": "Hi"}]}) == 503
        deadline = time.monotonic() + 300
        while (status := health(server)[0]) != 200 and time.monotonic() < deadline:
            assert server.proc is not None and server.proc.poll() is None, server.log_tail()
            time.sleep(0.5)
        assert status == 200, server.log_tail()
        engine = health(server)[1]["engine"]
        assert (engine["restarting"], engine["restarts"]) == (False, 1)
        assert post(server, {"max_tokens": 4, "messages": [
            {"role": "user", "content": "Hi"}]}) == 200
        assert server.proc is not None and server.proc.poll() is None  # the same server
        log = server.log_tail(200)
        assert "the vLLM engine has died (restart 1)" in log and "a new vLLM engine serves" in log
        # nothing of the dead engine is left: processes, vLLM's queue segments, our segments
        assert [p.pid for p in old if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
        new = engine_processes(server)
        assert new and {p.pid for p in new}.isdisjoint({p.pid for p in old})
        assert old_psm and old_psm & {p.name for p in Path("/dev/shm").glob("psm_*")} == set()
        assert my_segments(server.pid) == []
    finally:
        server.stop()
    assert {p.name for p in Path("/dev/shm").glob("psm_*")} - psm_before == set()
