"""``edgeserve serve`` on the tiny Qwen3-VL (split mode) and Qwen2.5-VL (inline mode).

Specification: the server reads the family from the model folder; ``/v1/models`` and the trace
header name it; an image request's prompt has the family's image tokens — one per 32×32 pixels
of the smart-resized image for Qwen3-VL, per 28×28 for Qwen2.5-VL (qwen-vl-utils' own
``smart_resize`` is the reference) — which the trace's request record counts too; ``--encoder
onnx``, whose export covers Qwen2-VL's tower only, is declined at start in one line and the
server answers all the same. A folder of another family ends the start with one paragraph.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from PIL import Image
from qwen_vl_utils import smart_resize  # the reference implementation, not ours
from serve_process import ServerProcess

from edgeserve import records
from mm_preproc.spec import Family
from models.tiny_qwen_vl import build_family

pytestmark = pytest.mark.engine
QUESTION = "What is it?"


def image_url(width: int, height: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, "JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def expected_prompt_tokens(model_dir: Path, width: int, height: int) -> tuple[int, int]:
    """(text tokens, image tokens) of one image + QUESTION by the folder's own files."""
    from transformers import AutoTokenizer

    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    factor = pre["patch_size"] * pre["merge_size"]
    h, w = smart_resize(height, width, factor=factor, min_pixels=pre["size"]["shortest_edge"],
                        max_pixels=pre["size"]["longest_edge"])
    tok = AutoTokenizer.from_pretrained(model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}],
        tokenize=False, add_generation_prompt=True)
    return len(tok(text)["input_ids"]) - 1, (h // factor) * (w // factor)


def ask(srv: ServerProcess, url: str, max_tokens: int) -> openai.types.CompletionUsage:
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="-")
    out = client.chat.completions.create(
        model=srv.get_json("/v1/models")["data"][0]["id"], max_tokens=max_tokens,
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                               {"type": "text", "text": QUESTION}]}])
    assert out.usage is not None
    return out.usage


@pytest.fixture(scope="module", params=[(Family.QWEN3_VL, "split"), (Family.QWEN2_5_VL, "inline")],
                ids=["qwen3_vl-split", "qwen2_5_vl-inline"])
def family_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Family, Path, ServerProcess, Path]]:
    family, mode = request.param
    model = build_family(family)
    d = tmp_path_factory.mktemp(family.value)
    trace = d / "trace.jsonl"
    # --encoder onnx: declined for these families (see the module docstring); --mode: the
    # two modes are covered by the two families to keep the suite to two engine starts
    srv = ServerProcess(["--model", str(model), "--mode", mode, "--encoder", "onnx",
                         "--trace", str(trace)], d / "server.log").start()
    yield family, model, srv, trace
    srv.stop()


def test_the_family_is_named_and_image_tokens_follow_its_rule(
    family_server: tuple[Family, Path, ServerProcess, Path]
) -> None:
    family, model, srv, trace = family_server
    assert srv.get_json("/v1/models")["data"][0]["family"] == family.value
    for i, (w, h) in enumerate([(640, 480), (1600, 1200)]):
        usage = ask(srv, image_url(w, h, i), max_tokens=3 + i)
        text, image = expected_prompt_tokens(model, w, h)
        assert (usage.prompt_tokens, usage.completion_tokens) == (text + image, 3 + i)
    srv.stop()  # closes the trace
    lines = list(records.read_trace(trace))
    header = next(r for r in lines if isinstance(r, records.TraceHeader))
    assert header.meta["family"] == family.value
    assert any("--encoder onnx" in note for note in header.meta["fallbacks"])  # type: ignore[union-attr]
    requests = [r for r in lines if isinstance(r, records.RequestRecord)]
    assert [r.image_tokens for r in requests] == [
        expected_prompt_tokens(model, w, h)[1] for w, h in [(640, 480), (1600, 1200)]]
    log = srv.log_path.read_text()
    assert "the ONNX export covers Qwen2-VL's vision tower only" in log


def test_a_folder_of_another_family_fails_in_one_paragraph(tmp_path: Path) -> None:
    folder = tmp_path / "llava"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}))
    done = subprocess.run([sys.executable, "-m", "edgeserve", "serve", "--model", str(folder),
                           "--port", str(ServerProcess([], tmp_path / "unused").port),
                           "--engine-log", str(tmp_path / "engine.log")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"edgeserve serve: cannot start: {folder / 'config.json'} has model_type 'llava' "
        "(LlavaForConditionalGeneration); edgeserve preprocesses images for Qwen2-VL (qwen2_vl), "
        "Qwen2.5-VL (qwen2_5_vl), Qwen3-VL (qwen3_vl), Qwen3.5 (qwen3_5) only. Pass --model DIR "
        "of one of those.")
