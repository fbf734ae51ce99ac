"""``edgeserve serve --replicas 2`` on this CPU with the tiny model: two whole servers, a core
each, behind one endpoint. Both replicas receive work; /health and /metrics speak for both; a
SIGKILLed engine in one replica leaves the endpoint serving through the other until the dead
engine's replacement is ready, and then both serve again."""

from __future__ import annotations

import base64
import io
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from PIL import Image

from edgeserve.bench.server_process import ServerProcess

pytestmark = pytest.mark.engine


def photo_url(seed: int) -> str:
    img = Image.new("RGB", (320, 240), ((seed * 53) % 256, (seed * 97) % 256, 128))
    buf = io.BytesIO()
    img.save(buf, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def chat(server: ServerProcess, seed: int) -> tuple[int, dict[str, Any]]:
    # ignore_eos: the random-weight model's first token may be its end of sequence, and which
    # token comes first depends on the CPU's arithmetic; four tokens are asked for and counted
    body = {"max_tokens": 4, "ignore_eos": True, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": photo_url(seed)}},
        {"type": "text", "text": "Describe."}]}]}
    req = urllib.request.Request(server.url + "/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read() or b"{}")


def health(server: ServerProcess) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read())


def replica_requests_ok(server: ServerProcess) -> dict[str, float]:
    """``edgeserve_requests_total{outcome="ok"}`` per replica, from the endpoint's /metrics."""
    out = {}
    for line in server.get_text("/metrics").splitlines():
        if line.startswith("edgeserve_requests_total{") and 'outcome="ok"' in line:
            replica = line.split('replica="', 1)[1].split('"', 1)[0]
            out[replica] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def two(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("replicas")
    server = ServerProcess.edgeserve(
        ["--model", str(tiny_model_dir), "--replicas", "2", "--workers", "1",
         "--max-model-len", "4096", "--max-num-seqs", "4", "--engine-log", str(d / "engine.log")],
        d / "server.log").start().ready(600)
    replicas = [psutil.Process(r["pid"]) for r in health(server)[1]["replicas"]]
    yield server
    assert server.stop() == 0, server.log_tail()  # SIGTERM: the replicas drain and stop too
    assert [p.pid for p in replicas if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def test_both_replicas_are_ready_on_cores_of_their_own_and_both_get_work(
        two: ServerProcess) -> None:
    status, body = health(two)
    assert status == 200 and body["status"] == "ok"
    reps = body["replicas"]
    assert [(r["index"], r["state"], r["placement"]) for r in reps] == [
        (0, "ready", "core 0"), (1, "ready", "core 1")]
    assert reps[0]["pid"] != reps[1]["pid"]
    assert all(r["health"]["engine"]["restarts"] == 0 for r in reps)
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: chat(two, i), range(6)))
    assert [s for s, _ in answers] == [200] * 6
    assert all(a["choices"][0]["message"]["role"] == "assistant"
               and a["usage"]["completion_tokens"] == 4 for _, a in answers), answers
    routed = [r["routed_total"] for r in health(two)[1]["replicas"]]
    assert sum(routed) >= 6 and min(routed) >= 1, routed
    ok = replica_requests_ok(two)  # the replicas' own counters, labelled by the endpoint
    assert set(ok) == {"0", "1"} and min(ok.values()) >= 1 and sum(ok.values()) >= 6, ok
    assert 'edgeserve_replica_ready{replica="1"} 1.0' in two.get_text("/metrics")


def test_a_dead_engine_in_one_replica_leaves_the_other_serving(two: ServerProcess) -> None:
    reps = health(two)[1]["replicas"]
    victim = psutil.Process(reps[0]["pid"])
    core = [p for p in victim.children(recursive=True) if p.name().startswith("VLLM::EngineCor")]
    assert len(core) == 1, [p.name() for p in victim.children(recursive=True)]
    routed_before = reps[1]["routed_total"]
    core[0].kill()
    deadline = time.monotonic() + 20
    while health(two)[1]["replicas"][0]["state"] == "ready" and time.monotonic() < deadline:
        time.sleep(0.2)
    status, body = health(two)
    assert status == 503 and body["status"] == "degraded"
    assert [r["state"] for r in body["replicas"]] == ["unavailable", "ready"]
    # the endpoint keeps answering: every request goes to replica 1 while replica 0 restarts
    answers = [chat(two, 100 + i)[0] for i in range(4)]
    assert answers == [200] * 4
    body = health(two)[1]
    assert body["replicas"][1]["routed_total"] >= routed_before + 4
    # replica 0 gets a new engine (its server's own restart) and is routed to again
    deadline = time.monotonic() + 300
    while (status := health(two)[0]) != 200 and time.monotonic() < deadline:
        assert two.proc is not None and two.proc.poll() is None, two.log_tail()
        time.sleep(0.5)
    assert status == 200, two.log_tail()
    body = health(two)[1]
    assert body["replicas"][0]["health"]["engine"]["restarts"] == 1
    assert body["replicas"][0]["pid"] == victim.pid  # the same replica server, a new engine
    before = body["replicas"][0]["routed_total"]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda i: chat(two, 200 + i)[0], range(4))) == [200] * 4
    assert health(two)[1]["replicas"][0]["routed_total"] > before
    assert "replica 0 (core 0): ready → unavailable" in two.log_tail(200)
