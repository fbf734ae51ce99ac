"""``edgeserve serve --mode inline``: the same API with preprocessing on the frontend's event loop
(the baseline the split is measured against), and stall accounting on a quiet server.

Specification: inline mode answers like split mode (same prompt tokens for the same image, 400
for a bad image) with no worker processes; and when a lone request is preprocessed while the
engine has nothing else to do, the whole preprocessing time is counted as engine stall.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from PIL import Image
from skimage import data as photos

from edgeserve import records
from edgeserve.bench.server_process import ServerProcess

pytestmark = pytest.mark.engine


def data_url(array: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def image_message(url: str) -> Any:  # openai message params
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "Describe the image."}]}]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inline")


@pytest.fixture(scope="module")
def server(workdir: Path, tiny_model_dir: Path) -> Iterator[ServerProcess]:
    d = workdir
    srv = ServerProcess.edgeserve(
        ["--model", str(tiny_model_dir), "--mode", "inline", "--max-model-len", "4096",
         "--max-num-seqs", "4", "--trace", str(d / "trace.jsonl"), "--sample-interval", "0.25"],
        d / "server.log",
    ).start().ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_inline_mode_has_no_workers_and_serves_images(server: ServerProcess,
                                                      client: openai.OpenAI) -> None:
    health = server.get_json("/health")
    assert health["mode"] == "inline" and health["workers"] == []
    r = client.chat.completions.create(model=client.models.list().data[0].id, max_tokens=4,
                                       messages=image_message(data_url(photos.chelsea())),
                                       extra_body={"ignore_eos": True})
    assert r.usage is not None and r.usage.completion_tokens == 4
    text_only = client.chat.completions.create(
        model=client.models.list().data[0].id, max_tokens=1,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Describe the image."}]}])
    assert text_only.usage is not None
    # 451x300 → 448x308 (multiples of 28) → 16x11 image tokens, between vision start/end
    assert r.usage.prompt_tokens - text_only.usage.prompt_tokens == 16 * 11 + 2


def test_bad_images_are_400_inline_too(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="cannot read image"):
        client.chat.completions.create(
            model=client.models.list().data[0].id, max_tokens=4,
            messages=image_message("data:image/png;base64," + base64.b64encode(b"nope").decode()))


def test_a_lone_requests_preprocessing_is_all_stall(server: ServerProcess, client: openai.OpenAI,
                                                    workdir: Path) -> None:
    time.sleep(1.0)  # let earlier engine steps settle
    before = server.metric("edgeserve_engine_stall_seconds_total")
    big = np.asarray(Image.fromarray(photos.astronaut()).resize((4000, 3000)))
    client.chat.completions.create(model=client.models.list().data[0].id, max_tokens=2,
                                   messages=image_message(data_url(big)))
    time.sleep(1.5)  # the meter settles windows 0.5 s late; samples every 0.25 s
    stalled = server.metric("edgeserve_engine_stall_seconds_total") - before
    recs = [x for x in records.read_trace(workdir / "trace.jsonl")
            if isinstance(x, records.RequestRecord) and x.source_width == 4000]
    assert len(recs) == 1
    rec = recs[0]
    assert rec.worker is None  # preprocessed on the frontend
    assert rec.preproc_end_s is not None and rec.preproc_queued_s is not None
    cpu_stage_s = rec.preproc_end_s - rec.preproc_queued_s
    assert cpu_stage_s > 0.02
    assert stalled == pytest.approx(cpu_stage_s, abs=0.005)


def test_events_stream_is_sse_of_trace_lines(server: ServerProcess) -> None:
    import httpx

    with httpx.stream("GET", server.url + "/v1/events", timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = []
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(json.loads(line[6:]))
            if len(lines) == 2:
                break
    assert lines[0]["type"] == "header" and lines[1]["type"] == "sample"
