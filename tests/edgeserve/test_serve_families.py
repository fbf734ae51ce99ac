"""``edgeserve serve`` on the tiny Qwen2.5-VL, Qwen3-VL and Qwen3.5, each in split and inline
mode.

Specification: the server reads the family from the model folder; ``/v1/models`` and the trace
header name it, and the header's ``mode`` and ``workers`` are the mode asked for; an image
request's prompt has the family's image tokens — one per 32×32 pixels of the smart-resized image
for Qwen3-VL and Qwen3.5, per 28×28 for Qwen2.5-VL (qwen-vl-utils' own ``smart_resize`` is the
reference) — for two sizes, which the trace's request record counts too, and ``max_tokens`` is
honoured; ``--encoder onnx``, whose export covers Qwen2-VL's tower only, is declined at start in
one line and the server answers all the same. A folder of another family ends the start with one
paragraph. Qwen3.5's hybrid language model gets a KV cache that vLLM itself reports as holding
exactly ``max_num_seqs`` requests of ``max_model_len`` (its linear-attention layers cost a fixed
state per request, not KV per token), and the trace header's ``kv_cache_tokens`` is that
capacity, not its blocks × block size.

Engine starts: six, one per family and mode — Qwen3-VL and Qwen2.5-VL in both modes and Qwen3.5
inline with ``--encoder onnx`` (``family_server``), Qwen3.5 with default flags (split,
``qwen3_5_server``). Qwen2-VL's two modes are served in test_serve.py and test_serve_inline.py.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from PIL import Image
from qwen_vl_utils import smart_resize  # the reference implementation, not ours

from edgeserve import records
from edgeserve.bench.server_process import ServerProcess
from edgeserve.engine_memory import HybridLayout, KVGeometry, cpu_ssm_dtype
from edgeserve.net import free_port
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


# every family in both modes; Qwen3.5 split is qwen3_5_server below (default flags)
FAMILY_MODES = [(Family.QWEN3_VL, "inline"), (Family.QWEN3_VL, "split"),
                (Family.QWEN2_5_VL, "split"), (Family.QWEN2_5_VL, "inline"),
                (Family.QWEN3_5, "inline")]


@pytest.fixture(scope="module", params=FAMILY_MODES,
                ids=[f"{f.value}-{m}" for f, m in FAMILY_MODES])
def family_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Family, Path, ServerProcess, Path]]:
    family, mode = request.param
    model = build_family(family)
    d = tmp_path_factory.mktemp(family.value)
    trace = d / "trace.jsonl"
    # --encoder onnx: declined for these families (see the module docstring)
    srv = ServerProcess.edgeserve(["--model", str(model), "--mode", mode, "--encoder", "onnx",
                                   "--trace", str(trace)], d / "server.log").start().ready()
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
    mode = srv.argv[srv.argv.index("--mode") + 1]
    assert header.meta["mode"] == mode
    assert (header.meta["workers"] > 0) == (mode == "split")  # type: ignore[operator]
    assert any("--encoder onnx" in note for note in header.meta["fallbacks"])  # type: ignore[union-attr]
    requests = [r for r in lines if isinstance(r, records.RequestRecord)]
    assert [r.image_tokens for r in requests] == [
        expected_prompt_tokens(model, w, h)[1] for w, h in [(640, 480), (1600, 1200)]]
    log = srv.log_path.read_text()
    assert "the ONNX export covers Qwen2-VL's vision tower only" in log


QWEN3_5_SIZES = [(640, 480), (1920, 1080)]


def engine_layout(model: Path) -> HybridLayout:
    """The hybrid pages of the model as the engine on this CPU lays them out (its state dtype)."""
    import torch

    ssm = cpu_ssm_dtype("auto", avx512_bf16=bool(torch.cpu._is_avx512_bf16_supported()))
    return HybridLayout.of(KVGeometry.from_model_dir(model, ssm_dtype=ssm))


def vllm_log(srv: ServerProcess) -> str:
    said = re.search(r"vLLM's output: (\S+)\)", srv.log_path.read_text())
    assert said is not None  # the server names its engine log at start
    return Path(said.group(1)).read_text()


@pytest.fixture(scope="module")
def qwen3_5_server(tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[Path, ServerProcess, Path]]:
    """``edgeserve serve --model tiny-qwen3.5`` with default flags (``--trace`` only adds the
    trace file the family is read back from)."""
    model = build_family(Family.QWEN3_5)
    d = tmp_path_factory.mktemp("qwen3_5")
    trace = d / "trace.jsonl"
    srv = ServerProcess.edgeserve(["--model", str(model), "--trace", str(trace)], d / "server.log").start().ready()
    yield model, srv, trace
    srv.stop()


def test_qwen3_5_is_named_in_v1_models(qwen3_5_server: tuple[Path, ServerProcess, Path]) -> None:
    _, srv, _ = qwen3_5_server
    assert srv.get_json("/v1/models")["data"][0]["family"] == "qwen3_5"


@pytest.mark.parametrize(("size", "max_tokens"), zip(QWEN3_5_SIZES, [2, 5], strict=True),
                         ids=["640x480", "1920x1080"])
def test_qwen3_5_prompt_tokens_follow_the_32_px_rule_and_max_tokens_is_honoured(
    qwen3_5_server: tuple[Path, ServerProcess, Path], size: tuple[int, int], max_tokens: int
) -> None:
    model, srv, _ = qwen3_5_server
    w, h = size
    usage = ask(srv, image_url(w, h, seed=w), max_tokens=max_tokens)
    pre = json.loads((model / "preprocessor_config.json").read_text())
    assert pre["patch_size"] * pre["merge_size"] == 32  # the rule expected_prompt_tokens applies
    text, image = expected_prompt_tokens(model, w, h)
    assert (usage.prompt_tokens, usage.completion_tokens) == (text + image, max_tokens)


def test_qwen3_5_kv_cache_holds_max_num_seqs_requests_as_vllm_counts_them(
    qwen3_5_server: tuple[Path, ServerProcess, Path]
) -> None:
    """vLLM's own start-up figures against the sizing: the attention block it grew to hold one
    linear-attention layer's state, and its maximum concurrency at max_model_len, which is the
    16 default sequences (plus the null block's 1/6) — counting the Gated DeltaNet layer as
    attention, as the sizing did before, gave vLLM 18.83 requests' worth."""
    model, srv, _ = qwen3_5_server
    layout = engine_layout(model)
    engine_log = vllm_log(srv)
    block = re.search(r"Setting attention block size to (\d+) tokens", engine_log)
    assert block is not None and int(block.group(1)) == layout.block_tokens
    found = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
                      engine_log)
    assert found is not None
    assert int(found.group(1).replace(",", "")) == 4096
    per_request = layout.blocks_per_request(4096)
    assert float(found.group(2)) == pytest.approx((16 * per_request + 1) / per_request, abs=0.01)
    assert "1 full-attention layers" in srv.log_path.read_text()


def test_qwen3_5_trace_header_names_the_family(
    qwen3_5_server: tuple[Path, ServerProcess, Path]
) -> None:
    model, srv, trace = qwen3_5_server
    ask(srv, image_url(800, 600, seed=1), max_tokens=1)
    srv.stop()  # closes the trace
    lines = list(records.read_trace(trace))
    header = next(r for r in lines if isinstance(r, records.TraceHeader))
    assert header.meta["family"] == "qwen3_5"
    assert not header.meta.get("fallbacks")
    requests = [r for r in lines if isinstance(r, records.RequestRecord)]
    assert requests[-1].image_tokens == expected_prompt_tokens(model, 800, 600)[1]


def test_qwen3_5_trace_header_gives_the_kv_capacity_vllm_reports(
    qwen3_5_server: tuple[Path, ServerProcess, Path]
) -> None:
    """``kv_cache_tokens`` is vLLM's "KV cache size: N tokens" (16.17 requests × 4096 =
    66,218), not blocks × block size (97 × 1152 = 111,744, which counted the state blocks as
    tokens); the header names the pool and the layout a reader needs (sim.fit.engine_kv)."""
    model, srv, trace = qwen3_5_server
    srv.stop()  # closes the trace
    header = next(records.read_trace(trace))
    assert isinstance(header, records.TraceHeader)
    engine = header.meta["engine"]
    assert isinstance(engine, dict)
    said = re.search(r"KV cache size: ([\d,]+) tokens", vllm_log(srv))
    assert said is not None
    layout = engine_layout(model)
    per_request = layout.blocks_per_request(4096)
    assert engine["kv_cache_tokens"] == int(said.group(1).replace(",", "")) == int(
        (16 * per_request + 1) / per_request * 4096)
    assert engine["kv_cache_blocks"] == 16 * per_request + 1
    assert engine["block_size"] == layout.block_tokens
    assert engine["kv_cache_tokens"] < engine["kv_cache_blocks"] * engine["block_size"]
    assert (engine["kv_attention_groups"], engine["kv_state_blocks_per_request"]) == (
        layout.attention_groups, layout.state_groups * layout.state_blocks_per_group)


def test_a_folder_of_another_family_fails_in_one_paragraph(tmp_path: Path) -> None:
    folder = tmp_path / "llava"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}))
    done = subprocess.run([sys.executable, "-m", "edgeserve", "serve", "--model", str(folder),
                           "--port", str(free_port()),
                           "--engine-log", str(tmp_path / "engine.log")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"edgeserve serve: cannot start: {folder / 'config.json'} has model_type 'llava' "
        "(LlavaForConditionalGeneration); edgeserve preprocesses images for Qwen2-VL (qwen2_vl), "
        "Qwen2.5-VL (qwen2_5_vl), Qwen3-VL (qwen3_vl), Qwen3.5 (qwen3_5) only. Pass --model DIR "
        "of one of those.")
