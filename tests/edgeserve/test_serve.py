"""``edgeserve serve`` as a user meets it: a real server process, real HTTP, the ``openai`` client.

One server (split mode, one worker, the tiny Qwen2-VL on vLLM's CPU build) serves the whole
module; starting it takes about a minute. The tests are specifications of the API and of the
robustness promises: bad input → 400 while others succeed, a request whose worker is SIGKILLed
is preprocessed again and answered (a second death fails it with 500 and both reasons), a client that goes away has its engine request aborted, no shared-memory segment is
left behind, and SIGTERM drains what is in flight. The last test shuts the server down.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from PIL import Image
from qwen_vl_utils import smart_resize  # the reference rule, not our implementation
from serve_process import my_segments
from skimage import data as photos

from edgeserve import records
from edgeserve.bench.server_process import ServerProcess

pytestmark = pytest.mark.engine

MAX_IMAGE_BYTES = 8 << 20
MAX_IMAGE_PIXELS = 20_000_000


def jpeg(array: np.ndarray, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def data_url(payload: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64,{base64.b64encode(payload).decode()}"


def image_message(url: str, text: str = "Describe the image.") -> Any:  # openai message params
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("serve")
    media = d / "media"
    media.mkdir()
    (media / "coffee.jpg").write_bytes(jpeg(photos.coffee()))
    # 19 MP but a few hundred kB: slow to decode (PNG has no reduced-scale decoding), so a
    # worker stays busy with it long enough to be killed mid-job
    y, x = np.mgrid[0:4400, 0:4400]
    big = np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 11) % 256], -1).astype(np.uint8)
    Image.fromarray(big).save(media / "big.png", compress_level=1)
    return d


@pytest.fixture(scope="module")
def server(workdir: Path, tiny_model_dir: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess.edgeserve(
        ["--model", str(tiny_model_dir), "--workers", "1", "--max-model-len", "4096",
         "--max-num-seqs", "8", "--max-inflight", "12", "--max-pending", "8",
         "--allowed-media-dir", str(workdir / "media"), "--trace", str(workdir / "trace.jsonl"),
         "--sample-interval", "0.5", "--max-image-bytes", str(MAX_IMAGE_BYTES),
         "--max-image-pixels", str(MAX_IMAGE_PIXELS), "--drain-timeout", "60"],
        workdir / "server.log",
    ).start().ready()
    yield srv
    srv.stop()
    assert my_segments(srv.pid) == []


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def image_tokens(width: int, height: int, model_dir: Path) -> int:
    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    h, w = smart_resize(height, width, factor=28, min_pixels=pre["min_pixels"],
                        max_pixels=pre["max_pixels"])
    return (h // 28) * (w // 28)


def post_raw(server: ServerProcess, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
    req = urllib.request.Request(server.url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


# ---- the API ------------------------------------------------------------------------------
def test_models_lists_the_served_model(client: openai.OpenAI, tiny_model_dir: Path) -> None:
    assert [m.id for m in client.models.list().data] == [str(tiny_model_dir)]


def test_non_streaming_image_request(client: openai.OpenAI, model: str) -> None:
    r = client.chat.completions.create(
        model=model, messages=image_message(data_url(jpeg(photos.chelsea()))), max_tokens=8,
        temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 8
    assert isinstance(r.choices[0].message.content, str)


def test_streaming_sends_tokens_then_usage(client: openai.OpenAI, model: str) -> None:
    msgs = image_message(data_url(jpeg(photos.chelsea())))
    plain = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0,
                                           extra_body={"ignore_eos": True})
    stream = client.chat.completions.create(
        model=model, messages=msgs, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    token_chunks = [c for c in chunks if c.choices]
    assert token_chunks[0].choices[0].delta.role == "assistant"
    assert token_chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and not chunks[-1].choices
    assert chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens  # type: ignore[union-attr]
    text = "".join(c.choices[0].delta.content or "" for c in token_chunks)
    assert text == plain.choices[0].message.content  # greedy: same tokens either way


def test_prompt_tokens_grow_with_the_image_by_one_token_per_28x28_pixels(
    client: openai.OpenAI, model: str, tiny_model_dir: Path
) -> None:
    small, large = photos.chelsea(), photos.astronaut()  # 451x300, 512x512
    usage = {}
    for name, img in (("small", small), ("large", large)):
        r = client.chat.completions.create(model=model, messages=image_message(data_url(jpeg(img))),
                                           max_tokens=1)
        assert r.usage is not None
        usage[name] = r.usage.prompt_tokens
    text_only = client.chat.completions.create(
        model=model, max_tokens=1,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Describe the image."}]}])
    assert text_only.usage is not None
    n_small = image_tokens(451, 300, tiny_model_dir)
    n_large = image_tokens(512, 512, tiny_model_dir)
    assert usage["large"] - usage["small"] == n_large - n_small
    # <|vision_start|> N × <|image_pad|> <|vision_end|> around the text-only prompt
    assert usage["small"] - text_only.usage.prompt_tokens == n_small + 2


def test_several_images_in_one_request_each_add_their_tokens(
    client: openai.OpenAI, model: str, tiny_model_dir: Path
) -> None:
    parts: Any = [
        {"type": "image_url", "image_url": {"url": data_url(jpeg(photos.chelsea()))}},
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": data_url(jpeg(photos.coffee()))}},
    ]
    both = client.chat.completions.create(model=model, max_tokens=1,
                                          messages=[{"role": "user", "content": parts}])
    text = client.chat.completions.create(
        model=model, max_tokens=1,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Compare"}]}])
    assert both.usage is not None and text.usage is not None
    expected = image_tokens(451, 300, tiny_model_dir) + image_tokens(600, 400, tiny_model_dir)
    assert both.usage.prompt_tokens - text.usage.prompt_tokens == expected + 2 * 2


def test_seeded_sampling_is_reproducible(client: openai.OpenAI, model: str) -> None:
    msgs = image_message(data_url(jpeg(photos.coffee())))
    outs = {client.chat.completions.create(model=model, messages=msgs, max_tokens=12,
                                           temperature=1.0, seed=1234).choices[0].message.content
            for _ in range(2)}
    assert len(outs) == 1


def test_local_files_inside_the_media_dir(client: openai.OpenAI, model: str, workdir: Path) -> None:
    r = client.chat.completions.create(
        model=model, messages=image_message(f"file://{workdir}/media/coffee.jpg"), max_tokens=4,
        extra_body={"ignore_eos": True})
    assert r.usage is not None and r.usage.completion_tokens == 4


def test_concurrent_requests_all_complete(client: openai.OpenAI, model: str) -> None:
    imgs = [photos.chelsea(), photos.coffee(), photos.astronaut(), photos.rocket()]

    def one(i: int) -> int:
        img = np.ascontiguousarray(np.roll(imgs[i % 4], i, axis=1))  # distinct content
        r = client.chat.completions.create(model=model, messages=image_message(data_url(jpeg(img))),
                                           max_tokens=16, extra_body={"ignore_eos": True})
        assert r.usage is not None
        return r.usage.completion_tokens

    with ThreadPoolExecutor(8) as ex:
        assert list(ex.map(one, range(8))) == [16] * 8


# ---- bad input ----------------------------------------------------------------------------
BAD_IMAGES = {
    "garbage": (data_url(b"definitely not an image"), "cannot read image"),
    "truncated": (data_url(jpeg(photos.chelsea())[:3000]), "invalid image"),
    "unsupported": (data_url(b"%PDF-1.7\n..."), "PDF images are not supported"),
    "bomb": (data_url(jpeg(np.zeros((5000, 5000, 3), np.uint8))), "more than the limit"),
    "not-base64": ("data:image/jpeg;base64,@@@@", "not valid base64"),
    "oversized": (data_url(b"\xff" * (MAX_IMAGE_BYTES + 10)), "more than the limit"),
    "outside-media-dir": ("file:///etc/hostname", "outside the allowed media directory"),
    "http-disabled": ("http://127.0.0.1:9/x.jpg", "--allow-http-media"),
}


@pytest.mark.parametrize("kind", list(BAD_IMAGES))
def test_bad_images_get_400_with_a_reason(server: ServerProcess, model: str, kind: str) -> None:
    url, reason = BAD_IMAGES[kind]
    body = json.dumps({"model": model, "messages": image_message(url), "max_tokens": 4}).encode()
    status, reply, _ = post_raw(server, body)
    assert status == 400
    assert reason.lower() in reply["error"]["message"].lower()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"{}", "missing required field `messages`"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}',
         "`$.max_tokens`"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}', "max_tokens"),
        (b'{"messages": [{"role": "robot", "content": "hi"}]}', "role"),
        (b'{"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}', "input_audio"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 9}', "temperature"),
    ],
    ids=["json", "no-messages", "type", "max-tokens-0", "role", "part-type", "temperature"],
)
def test_malformed_requests_get_400_with_a_reason(
    server: ServerProcess, body: bytes, reason: str
) -> None:
    status, reply, _ = post_raw(server, body)
    assert status == 400
    assert reason.lower() in reply["error"]["message"].lower()


def test_bad_requests_do_not_disturb_good_ones(
    server: ServerProcess, client: openai.OpenAI, model: str
) -> None:
    good = image_message(data_url(jpeg(photos.coffee())))

    def good_one(_: int) -> int:
        r = client.chat.completions.create(model=model, messages=good, max_tokens=32,
                                           extra_body={"ignore_eos": True})
        assert r.usage is not None
        return r.usage.completion_tokens

    def bad_one(kind: str) -> int:
        url, _ = BAD_IMAGES[kind]
        body = json.dumps({"model": model, "messages": image_message(url)}).encode()
        return post_raw(server, body)[0]

    with ThreadPoolExecutor(6) as ex:
        goods = ex.map(good_one, range(4))
        bads = ex.map(bad_one, ["garbage", "truncated", "unsupported", "bomb"])
        assert list(bads) == [400] * 4
        assert list(goods) == [32] * 4
    assert server.get_json("/health")["status"] == "ok"
    assert my_segments(server.pid) == []


# ---- failures inside the server -----------------------------------------------------------
def kill_the_busy_worker(server: ServerProcess, spare: set[int],
                         result: dict[str, Any]) -> dict[str, Any]:
    """SIGKILL the worker /health shows busy (once it is none of the pids in ``spare``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        busy = [w for w in server.get_json("/health")["workers"]
                if w["busy"] and w["pid"] not in spare]
        if busy:
            os.kill(busy[0]["pid"], signal.SIGKILL)
            return busy[0]
    raise AssertionError(f"no worker picked up the image: {result}")


def post_while_killing(server: ServerProcess, body: bytes,
                       kills: int) -> tuple[int, dict[str, Any], list[int]]:
    """Post ``body`` and SIGKILL each of the first ``kills`` workers that take its image."""
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(reply=post_raw(server, body)))
    t.start()
    victims: list[int] = []
    for _ in range(kills):
        victims.append(kill_the_busy_worker(server, set(victims), result)["pid"])
    t.join(60)
    status, reply, _ = result["reply"]
    return status, reply, victims


def test_a_request_whose_worker_is_sigkilled_is_preprocessed_again_and_answered(
    server: ServerProcess, model: str, workdir: Path
) -> None:
    body = json.dumps({"model": model, "max_tokens": 4,
                       "messages": image_message(f"file://{workdir}/media/big.png")}).encode()
    retries = server.metric("edgeserve_preproc_retries_total")
    restarts = server.metric("edgeserve_worker_restarts_total")
    status, reply, [victim] = post_while_killing(server, body, kills=1)
    assert status == 200 and reply["usage"]["completion_tokens"] >= 1, reply
    assert server.metric("edgeserve_preproc_retries_total") == retries + 1
    assert my_segments(server.pid) == []
    worker = server.get_json("/health")["workers"][0]
    assert worker["restarts"] == 1 and worker["pid"] != victim
    assert server.metric("edgeserve_worker_restarts_total") == restarts + 1


def test_a_request_whose_workers_die_twice_fails_with_500_and_the_next_succeeds(
    server: ServerProcess, model: str, workdir: Path
) -> None:
    body = json.dumps({"model": model, "max_tokens": 4,
                       "messages": image_message(f"file://{workdir}/media/big.png")}).encode()
    restarts = server.get_json("/health")["workers"][0]["restarts"]
    status, reply, victims = post_while_killing(server, body, kills=2)
    assert status == 500
    message = reply["error"]["message"]
    assert all(f"(pid {v}) died" in message for v in victims), message
    assert message.count("SIGKILL") == 2 and "not tried again" in message
    assert my_segments(server.pid) == []
    status, reply, _ = post_raw(server, json.dumps({
        "model": model, "max_tokens": 4,
        "messages": image_message(f"file://{workdir}/media/coffee.jpg")}).encode())
    assert status == 200 and reply["usage"]["completion_tokens"] >= 1
    worker = server.get_json("/health")["workers"][0]
    assert worker["restarts"] == restarts + 2 and worker["pid"] not in victims


def _generated_tokens(server: ServerProcess) -> float:
    return server.metric_sum("vllm:generation_tokens_total")


def _wait_until_generation_stops(server: ServerProcess) -> float:
    last = -1.0
    for _ in range(50):
        now = _generated_tokens(server)
        if now == last:
            return now
        last = now
        time.sleep(0.3)
    raise AssertionError("generation never stopped")


def test_a_client_that_disconnects_has_its_request_aborted(
    server: ServerProcess, model: str
) -> None:
    aborted_before = server.metric("edgeserve_requests_total", 'outcome="aborted"')
    before = _wait_until_generation_stops(server)
    body = {"model": model, "max_tokens": 3000, "stream": True, "ignore_eos": True,
            "messages": image_message(data_url(jpeg(photos.chelsea())))}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for i, _ in enumerate(r.iter_lines()):
            if i >= 6:
                break  # hang up after a few tokens
    # non-streaming: the client gives up while tokens are being generated
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", timeout=2.0,
                   json={**body, "stream": False})
    after = _wait_until_generation_stops(server)
    assert after - before < 2 * 3000 * 0.5  # both stopped long before their 3000 tokens
    deadline = time.monotonic() + 10
    while server.metric("edgeserve_requests_total", 'outcome="aborted"') < aborted_before + 2:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert server.get_json("/health")["engine"]["aborted_total"] >= 2
    assert my_segments(server.pid) == []


def test_a_client_that_leaves_during_preprocessing_leaves_nothing_behind(
    server: ServerProcess, model: str, workdir: Path
) -> None:
    aborted_before = server.metric("edgeserve_requests_total", 'outcome="aborted"')
    body = {"model": model, "max_tokens": 4,
            "messages": image_message(f"file://{workdir}/media/big.png")}
    with pytest.raises(httpx.ReadTimeout):  # gone while the worker decodes the 19 MP PNG
        httpx.post(server.url + "/v1/chat/completions", json=body, timeout=0.2)
    deadline = time.monotonic() + 30
    while server.metric("edgeserve_requests_total", 'outcome="aborted"') < aborted_before + 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    while any(w["busy"] for w in server.get_json("/health")["workers"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert my_segments(server.pid) == []  # the late pixels were dropped and released
    assert server.get_json("/health")["inflight"] == 0


def test_sigusr2_writes_the_frontends_threads_and_tasks_and_the_server_keeps_serving(
        server: ServerProcess, workdir: Path) -> None:
    first = (workdir / "server.log").read_text().splitlines()[0]
    engine_log = Path(first.split("vLLM's output: ", 1)[1].rstrip(")"))
    before = engine_log.read_text(errors="replace").count("Current thread")
    os.kill(server.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while engine_log.read_text(errors="replace").count("Current thread") == before:
        assert time.monotonic() < deadline, "no stack dump in the engine log"
        time.sleep(0.1)
    while "asyncio task(s) ---" not in engine_log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "no task dump in the engine log"
        time.sleep(0.1)
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        assert r.status == 200


def test_a_full_server_answers_429_with_retry_after(server: ServerProcess, model: str) -> None:
    body = json.dumps({"model": model, "max_tokens": 200, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "hello"}]}).encode()
    with ThreadPoolExecutor(30) as ex:
        replies = list(ex.map(lambda _: post_raw(server, body), range(30)))
    statuses = [s for s, _, _ in replies]
    assert set(statuses) == {200, 429}
    assert all(h.get("Retry-After") == "1" for s, _, h in replies if s == 429)


# ---- observability ------------------------------------------------------------------------
def test_metrics_cover_stages_latencies_queues_workers_and_the_engine(server: ServerProcess) -> None:
    text = server.get_text("/metrics")
    for needle in (
        'edgeserve_stage_seconds_count{stage="decode"}',
        'edgeserve_stage_seconds_count{stage="preproc_queue"}',
        'edgeserve_stage_seconds_count{stage="engine_queue"}',
        "edgeserve_time_to_first_token_seconds_bucket",
        "edgeserve_inter_token_latency_seconds_bucket",
        "edgeserve_e2e_request_latency_seconds_bucket",
        'edgeserve_requests_total{outcome="rejected"}',
        'edgeserve_queue_depth{queue="preproc_queue"}',
        'edgeserve_worker_busy_fraction{worker="0"}',
        "edgeserve_engine_stall_seconds_total",
        "vllm:num_requests_running",
    ):
        assert needle in text, needle
    assert server.metric("edgeserve_engine_busy_seconds_total") > 0
    assert server.metric("edgeserve_requests_total", 'outcome="ok"') >= 10
    assert server.metric("edgeserve_requests_total", 'outcome="failed"') >= 1  # killed twice
    assert server.metric("edgeserve_preproc_retries_total") >= 2  # both killed ones


def test_event_stream_publishes_request_records_and_samples(
    server: ServerProcess, client: openai.OpenAI, model: str
) -> None:
    seen: list[records.TraceItem] = []

    def listen() -> None:
        with httpx.stream("GET", server.url + "/v1/events", timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    seen.append(records.decode(line[6:]))
                if any(isinstance(x, records.RequestRecord) for x in seen) and any(
                        isinstance(x, records.ResourceSample) for x in seen):
                    return

    t = threading.Thread(target=listen)
    t.start()
    time.sleep(0.5)
    client.chat.completions.create(model=model, messages=image_message(data_url(jpeg(photos.coffee()))),
                                   max_tokens=5, extra_body={"ignore_eos": True})
    t.join(30)
    assert isinstance(seen[0], records.TraceHeader) and seen[0].producer == "edgeserve serve"
    rec = next(x for x in seen if isinstance(x, records.RequestRecord))
    assert rec.outcome is records.Outcome.OK and rec.output_tokens == 5
    assert (rec.source_width, rec.source_height) == (600, 400)
    stages = [s for s, _, _ in records.stage_spans(rec)]
    assert stages[:4] == [records.Stage.PREPROC_QUEUE, records.Stage.DECODE, records.Stage.RESIZE,
                          records.Stage.NORMALIZE]


def test_the_trace_file_holds_the_lifecycle_of_every_request(server: ServerProcess,
                                                              workdir: Path) -> None:
    time.sleep(1.0)  # the trace is flushed with every resource sample
    items = list(records.read_trace(workdir / "trace.jsonl"))
    assert isinstance(items[0], records.TraceHeader)
    reqs = [x for x in items if isinstance(x, records.RequestRecord)]
    samples = [x for x in items if isinstance(x, records.ResourceSample)]
    assert {r.outcome for r in reqs} >= {records.Outcome.OK, records.Outcome.REJECTED,
                                         records.Outcome.FAILED, records.Outcome.ABORTED}
    for r in reqs:
        if r.outcome is records.Outcome.OK and r.num_images:
            stamps = [r.arrived_s, r.preproc_queued_s, r.preproc_start_s, r.decode_end_s,
                      r.resize_end_s, r.normalize_end_s, r.preproc_end_s, r.engine_queued_s,
                      r.first_token_s, r.last_token_s, r.finished_s]
            assert all(s is not None for s in stamps)
            assert stamps == sorted(stamps)  # type: ignore[type-var]
            assert len(r.token_times_s) == r.output_tokens
    # the request answered after its worker died, and the one that failed after two deaths
    retried = [r.outcome for r in reqs if r.preproc_retries]
    assert retried.count(records.Outcome.OK) >= 1 and retried.count(records.Outcome.FAILED) >= 1
    assert all(r.preproc_retries <= 1 for r in reqs)
    assert samples and all("frontend" in s.process_cpu and "worker0" in s.process_cpu
                           for s in samples[-3:])
    assert any(s.engine_busy > 0 for s in samples)


def test_the_trace_names_each_prompts_system_prefix_and_its_prefix_cache_hit(
        client: openai.OpenAI, model: str, workdir: Path) -> None:
    # two system prompts (one app's, long enough for vLLM's 128-token CPU blocks, and a short
    # one) and no system prompt at all, each before the same question
    app = "You are the guide of a museum app. Answer briefly and cite the room. " * 24
    ids = {}
    for name, system in [("app1", app), ("app2", app), ("short", "Be brief."), ("none", None)]:
        msgs: list[Any] = [{"role": "system", "content": system}] if system else []
        msgs.append({"role": "user", "content": "Where is the blue vase?"})
        r = client.chat.completions.create(model=model, messages=msgs, max_tokens=2,
                                           temperature=0, extra_body={"ignore_eos": True})
        ids[name] = r.id
    time.sleep(1.0)  # the trace is flushed with every resource sample
    recs = {r.id: r for r in records.read_trace(workdir / "trace.jsonl")
            if isinstance(r, records.RequestRecord)}
    app1, app2, short, none = (recs[ids[k]] for k in ("app1", "app2", "short", "none"))
    assert app1.prefix_id == app2.prefix_id and app1.prefix_id not in (short.prefix_id, None)
    assert none.prefix_id is None and none.prefix_tokens == 0
    # the prefix is exactly the prompt's system turn: the same question after two system
    # prompts makes prompts that differ by what their prefixes differ by
    assert app1.prefix_tokens > 256
    assert app1.prompt_tokens - short.prompt_tokens == app1.prefix_tokens - short.prefix_tokens
    # vLLM's prefix cache: the second request of the app reuses whole blocks of its prefix
    # (the prompts also agree on the few template tokens that open the user turn)
    assert app1.cached_tokens == 0
    assert 128 <= app2.cached_tokens <= app2.prefix_tokens + 8 and app2.cached_tokens % 128 == 0


# ---- interoperability ---------------------------------------------------------------------
def test_vllm_bench_serve_completes_against_our_server(
    server: ServerProcess, tiny_model_dir: Path, workdir: Path
) -> None:
    script = (
        "import argparse, sys\n"
        "from vllm.benchmarks.serve import add_cli_args, main\n"
        "p = argparse.ArgumentParser(); add_cli_args(p)\n"
        "main(p.parse_args(sys.argv[1:]))\n"
    )
    out = workdir / "bench"
    cmd = [sys.executable, "-c", script, "--backend", "openai-chat", "--base-url", server.url,
           "--endpoint", "/v1/chat/completions", "--model", str(tiny_model_dir),
           "--dataset-name", "random-mm", "--num-prompts", "8", "--random-input-len", "16",
           "--random-output-len", "8", "--random-mm-base-items-per-request", "1",
           "--random-mm-bucket-config", "{(256, 256, 1): 1.0}", "--request-rate", "8",
           "--ignore-eos", "--save-result", "--result-dir", str(out), "--result-filename", "r.json",
           "--disable-tqdm", "--num-warmups", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "r.json").read_text())
    assert result["completed"] == 8 and result["total_output_tokens"] == 64


# ---- shutdown (runs last: it stops the server) --------------------------------------------
def test_sigterm_drains_in_flight_requests_then_exits(server: ServerProcess, model: str) -> None:
    body = json.dumps({"model": model, "max_tokens": 600, "ignore_eos": True,
                       "messages": image_message(data_url(jpeg(photos.chelsea())))}).encode()
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(reply=post_raw(server, body)))
    t.start()
    while server.get_json("/health")["inflight"] == 0:
        time.sleep(0.01)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:  # while draining, new requests are refused (or the listener is already gone)
        status = post_raw(server, body)[0]
        assert status == 503
    except (urllib.error.URLError, ConnectionError):
        pass
    t.join(120)
    status, reply, _ = result["reply"]
    assert status == 200 and reply["usage"]["completion_tokens"] == 600
    assert server.proc.wait(60) == 0
    assert my_segments(server.pid) == []
