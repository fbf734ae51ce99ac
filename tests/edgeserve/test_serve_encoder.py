"""``edgeserve serve --encoder onnx``: the vision tower on ONNX Runtime in the worker, vLLM fed
image embeddings — a real server, real HTTP, the ``openai`` client.

One server (split mode, the default worker count, ``--trace``) serves the module. Specification: the prompt
has as many tokens as with vLLM's own tower (text + one per 28×28 px + 2) for two image sizes;
greedy output equals a server without the encoder; the trace stamps normalize ≤ encode ≤
preproc end ≤ engine queued, and the Perfetto export draws the encode on the worker's row;
``/metrics`` counts every encode; the engine runs no encoder of its own; a request whose worker is
SIGKILLed mid-encode is encoded again and answered, one whose workers are killed mid-encode twice
fails alone with 500; nothing is left in ``/dev/shm``. Then inline mode with the
encoder, and a missing export refused in one paragraph.

Greedy agreement, and its tolerance: edgeserve's chat endpoint returns no logprobs, so the
output tokens are compared with those of a second server without the encoder (same flags,
temperature 0, ``ignore_eos``). The two differ only in the tower: vLLM computes its own in the
model dtype (bfloat16 for the tiny model), ours is float32 (within 2e-7 of transformers'
float32 tower) and cast to bfloat16 by the engine. Measured offline for these images (vLLM
``LLM``, 16 tokens, logprobs=5): first-token logprobs within 4e-3 in bfloat16 (5e-7 in float32),
while the smallest top-1/top-2 margin of any of those tokens was 0.027 — seven times the
difference. So the greedy tokens must be identical, and the test demands exactly that for 16
tokens; a mismatch means a real difference (wrong pixels, order or grid), not rounding.
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
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from PIL import Image
from qwen_vl_utils import smart_resize
from serve_process import my_segments
from skimage import data as photos

from edgeserve import records
from edgeserve.bench.server_process import ServerProcess
from edgeserve.config import default_workers
from edgeserve.net import free_port
from edgeserve.trace_export import to_chrome_trace

pytestmark = pytest.mark.engine

# the default worker count (with --encoder onnx on the CPU: cores − 1, at least 2)
COMMON = ["--max-model-len", "4096", "--max-num-seqs", "8", "--sample-interval", "0.5"]
PHOTOS = {"chelsea": photos.chelsea, "astronaut": photos.astronaut}  # 451×300 and 512×512
GREEDY_TOKENS = 16


def jpeg(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def data_url(payload: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(payload).decode()


def image_message(url: str) -> Any:  # openai message params
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "Describe the image."}]}]


TEXT_ONLY: Any = [{"role": "user", "content": [{"type": "text", "text": "Describe the image."}]}]


def image_tokens(width: int, height: int, model_dir: Path) -> int:
    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    h, w = smart_resize(height, width, factor=28, min_pixels=pre["min_pixels"],
                        max_pixels=pre["max_pixels"])
    return (h // 28) * (w // 28)


def post(server: ServerProcess, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(server.url + "/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def greedy(client: openai.OpenAI, model: str, url: str) -> tuple[int, str]:
    r = client.chat.completions.create(model=model, messages=image_message(url),
                                       max_tokens=GREEDY_TOKENS, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.usage is not None and r.usage.completion_tokens == GREEDY_TOKENS
    return r.usage.prompt_tokens, r.choices[0].message.content or ""


def client_of(server: ServerProcess) -> tuple[openai.OpenAI, str]:
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0, timeout=120)
    return c, c.models.list().data[0].id


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("encoder")
    media = d / "media"
    media.mkdir()
    # exactly a smart_resize target of the tiny model's max_pixels (1280 tokens): decoded in
    # tens of ms and not resized, then about half a second in the encoder — a worker is caught
    # encoding, not decoding
    y, x = np.mgrid[0:896, 0:1120]
    big = np.stack([(x // 3) % 256, (y // 2) % 256, ((x + y) // 5) % 256], -1).astype(np.uint8)
    Image.fromarray(big).save(media / "big.png")
    return d


@pytest.fixture(scope="module")
def server(workdir: Path, tiny_model_dir: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess.edgeserve(
        ["--model", str(tiny_model_dir), "--encoder", "onnx", *COMMON,
         "--allowed-media-dir", str(workdir / "media"), "--trace", str(workdir / "trace.jsonl")],
        workdir / "server.log",
    ).start().ready()
    yield srv
    assert srv.stop() == 0
    assert my_segments(srv.pid) == []


@pytest.fixture(scope="module")
def reference(workdir: Path, tiny_model_dir: Path) -> dict[str, tuple[int, str]]:
    """(prompt tokens, greedy text) per photo from a server without the encoder, then stopped."""
    srv = ServerProcess.edgeserve(["--model", str(tiny_model_dir), *COMMON],
                                  workdir / "reference.log").start().ready()
    try:
        client, model = client_of(srv)
        return {name: greedy(client, model, data_url(jpeg(img()))) for name, img in PHOTOS.items()}
    finally:
        srv.stop()


def test_the_server_says_where_the_encoder_runs(server: ServerProcess, tiny_model_dir: Path) -> None:
    line = next(x for x in server.log_path.read_text().splitlines() if "vision encoder:" in x)
    assert f"{tiny_model_dir}/onnx/encoder.onnx on ONNX Runtime CPUExecutionProvider" in line
    assert "in each preprocessing worker" in line
    health = server.get_json("/health")
    assert [w["stage"] for w in health["workers"]] == ["idle"] * default_workers(encoder_on_cpu=True)


def test_prompt_tokens_are_text_plus_the_image_tokens_for_two_sizes(
    server: ServerProcess, tiny_model_dir: Path, reference: dict[str, tuple[int, str]]
) -> None:
    client, model = client_of(server)
    text = client.chat.completions.create(model=model, messages=TEXT_ONLY, max_tokens=1)
    assert text.usage is not None
    sizes = {"chelsea": (451, 300), "astronaut": (512, 512)}
    for name, img in PHOTOS.items():
        r = client.chat.completions.create(model=model, max_tokens=1,
                                           messages=image_message(data_url(jpeg(img()))))
        assert r.usage is not None
        n = image_tokens(*sizes[name], tiny_model_dir)
        # <|vision_start|> n × <|image_pad|> <|vision_end|>
        assert r.usage.prompt_tokens == text.usage.prompt_tokens + n + 2, name
        assert r.usage.prompt_tokens == reference[name][0], name


def test_greedy_output_equals_the_server_without_the_encoder(
    server: ServerProcess, reference: dict[str, tuple[int, str]]
) -> None:
    client, model = client_of(server)
    for name, img in PHOTOS.items():
        assert greedy(client, model, data_url(jpeg(img()))) == reference[name], name


def test_metrics_count_every_encode(server: ServerProcess) -> None:
    key = 'edgeserve_stage_seconds_count{stage="encode"}'

    def count() -> float:
        return server.metric("edgeserve_stage_seconds_count", 'stage="encode"')

    before = count()
    client, model = client_of(server)
    for seed in (1, 2):
        img = np.random.default_rng(seed).integers(0, 256, (240, 320, 3), dtype=np.uint8)
        client.chat.completions.create(model=model, max_tokens=2,
                                       messages=image_message(data_url(jpeg(img))))
    client.chat.completions.create(model=model, messages=TEXT_ONLY, max_tokens=2)
    assert count() == before + 2, key
    assert server.metric("edgeserve_stage_seconds_sum", 'stage="encode"') > 0


def post_killing_encoders(server: ServerProcess, body: dict[str, Any],
                          kills: int) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """Post ``body`` and SIGKILL each of the first ``kills`` workers seen encoding its image."""
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(reply=post(server, body)))
    t.start()
    victims: list[dict[str, Any]] = []
    while len(victims) < kills:
        deadline = time.monotonic() + 30
        victim = None
        while victim is None and time.monotonic() < deadline:
            encoding = [w for w in server.get_json("/health")["workers"]
                        if w["stage"] == "encode" and w["pid"] not in [v["pid"] for v in victims]]
            victim = encoding[0] if encoding else None
        assert victim is not None, f"no worker was seen encoding the image: {result}"
        os.kill(victim["pid"], signal.SIGKILL)
        victims.append(victim)
    t.join(60)
    status, reply = result["reply"]
    return status, reply, victims


def test_a_request_whose_worker_is_sigkilled_while_encoding_is_encoded_again(
    server: ServerProcess, workdir: Path
) -> None:
    model = server.get_json("/v1/models")["data"][0]["id"]
    body = {"model": model, "max_tokens": 4,
            "messages": image_message(f"file://{workdir}/media/big.png")}
    status, reply, [victim] = post_killing_encoders(server, body, kills=1)
    assert status == 200 and reply["usage"]["completion_tokens"] == 4, reply
    assert server.metric("edgeserve_preproc_retries_total") == 1
    assert my_segments(server.pid) == []
    status, reply, victims = post_killing_encoders(server, body, kills=2)
    assert status == 500
    message = reply["error"]["message"]
    assert message.count("SIGKILL") == 2 and "not tried again" in message, message
    assert my_segments(server.pid) == []
    status, reply = post(server, {**body, "messages": image_message(
        data_url(jpeg(photos.coffee())))})
    assert status == 200 and reply["usage"]["completion_tokens"] == 4
    workers = server.get_json("/health")["workers"]
    killed = [v["index"] for v in [victim, *victims]]
    assert [w["restarts"] for w in workers] == [killed.count(w["index"]) for w in workers]
    assert not {v["pid"] for v in [victim, *victims]} & {w["pid"] for w in workers}


def test_the_trace_stamps_the_encode_between_patchify_and_the_hand_off(
    server: ServerProcess, workdir: Path
) -> None:
    time.sleep(1.0)  # the trace is flushed with every resource sample
    items = list(records.read_trace(workdir / "trace.jsonl"))
    header = items[0]
    assert isinstance(header, records.TraceHeader)
    assert header.meta["encoder"] == {  # type: ignore[comparison-overlap]
        "kind": "onnx", "graph": str(Path(str(header.meta["model"])) / "onnx" / "encoder.onnx"),
        "provider": "CPUExecutionProvider", "threads": 1}
    reqs = [x for x in items if isinstance(x, records.RequestRecord)]
    ok = [r for r in reqs if r.outcome is records.Outcome.OK and r.num_images]
    assert len(ok) >= 7
    for r in ok:
        stamps = [r.preproc_start_s, r.decode_end_s, r.resize_end_s, r.normalize_end_s,
                  r.encode_end_s, r.preproc_end_s, r.engine_queued_s, r.first_token_s]
        assert all(s is not None for s in stamps)
        assert stamps == sorted(stamps)  # type: ignore[type-var]
        assert records.Stage.ENCODE in [s for s, _, _ in records.stage_spans(r)]
    failed = [r for r in reqs if r.outcome is records.Outcome.FAILED]
    assert failed and all(r.encode_end_s is None for r in failed)  # the one killed twice
    assert [r.preproc_retries for r in failed] == [1]
    assert [r.preproc_retries for r in ok].count(1) == 1  # the one killed once, then encoded
    # vLLM ran in its embedding-only mode: no tower loaded, none profiled (the steps still count
    # the embeddings as "encoder" tokens: they pass through its encoder cache)
    first = server.log_path.read_text().splitlines()[0]
    engine_log = Path(first.split("vLLM's output: ", 1)[1].rstrip(")"))
    assert "Skipping encoder profiling for embedding-only mode" in engine_log.read_text()
    # Perfetto: each encode slice on the row of the worker that encoded it
    events = to_chrome_trace(items)["traceEvents"]
    encodes = [e for e in events if e.get("ph") == "X" and e["name"] == "encode"]
    assert sorted(e["tid"] for e in encodes) == sorted(r.worker for r in ok)  # type: ignore[type-var]
    assert {r.worker for r in ok} <= set(range(default_workers(encoder_on_cpu=True)))


def test_no_shared_memory_is_left_while_idle(server: ServerProcess) -> None:
    assert server.get_json("/health")["inflight"] == 0
    assert my_segments(server.pid) == []


# ---- other servers ------------------------------------------------------------------------
def test_inline_mode_encodes_in_the_frontend(
    tmp_path: Path, tiny_model_dir: Path, reference: dict[str, tuple[int, str]]
) -> None:
    srv = ServerProcess.edgeserve(["--model", str(tiny_model_dir), "--mode", "inline", "--encoder", "onnx",
                                  *COMMON], tmp_path / "inline.log").start().ready()
    try:
        assert "in the frontend (inline mode)" in srv.log_path.read_text()
        client, model = client_of(srv)
        assert greedy(client, model, data_url(jpeg(photos.chelsea()))) == reference["chelsea"]
        assert srv.metric("edgeserve_stage_seconds_count", 'stage="encode"') == 1
    finally:
        assert srv.stop() == 0
    assert my_segments(srv.pid) == []


def test_openvino_runtime_gives_the_same_greedy_output(
    tmp_path: Path, tiny_model_dir: Path, reference: dict[str, tuple[int, str]]
) -> None:
    """``--encoder-provider openvino:CPU`` (an override: the default provider is ONNX Runtime's
    CPU one): OpenVINO's runtime on the same graph, bfloat16 on a CPU with AMX or AVX-512 BF16 —
    the dtype vLLM runs its own tower in. Embeddings within 1.4e-3 of the float32 graph (about
    as far as vLLM's bf16 tower is from it, benchmarks/onnx_encoder_cpu.py), well inside the
    top-1/top-2 margin of 0.027 stated above, so the 16 greedy tokens must be the same."""
    srv = ServerProcess.edgeserve(["--model", str(tiny_model_dir), "--encoder", "onnx",
                                  "--encoder-provider", "openvino:CPU", *COMMON],
                                  tmp_path / "openvino.log").start().ready()
    try:
        assert "on OpenVINO openvino:CPU" in srv.log_path.read_text()
        client, model = client_of(srv)
        for name, img in PHOTOS.items():
            assert greedy(client, model, data_url(jpeg(img()))) == reference[name], name
        assert srv.metric("edgeserve_stage_seconds_count", 'stage="encode"') == len(PHOTOS)
    finally:
        assert srv.stop() == 0
    assert my_segments(srv.pid) == []


def test_a_missing_export_fails_in_one_paragraph_before_the_engine_starts(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    empty = tmp_path / "no-export"
    empty.mkdir()
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "edgeserve", "serve", "--model", str(tiny_model_dir),
         "--encoder", "onnx", "--encoder-path",
         str(empty), "--engine-log", str(tmp_path / "engine.log"), "--port",
         str(free_port())],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"edgeserve serve: cannot start: --encoder onnx needs the model's exported vision tower, "
        f"but {empty} has no encoder.onnx and no encoder.json. Run `edgeserve models "
        f"export-encoder {tiny_model_dir} --out {empty}` (it writes and verifies both; "
        "encoder.json last), pass --encoder-path DIR of an existing export, or serve without "
        "--encoder onnx.")
    assert time.monotonic() - t0 < 30  # refused before any engine start (~40 s here)
