"""The real vLLM engine (AsyncLLM, CPU build) serves the tiny Qwen2.5-VL, Qwen3-VL and Qwen3.5.

Specification, per family: an image request's prompt is the chat-templated text plus one
``<|image_pad|>`` per ``factor × factor`` pixels of the smart-resized image — factor 28 for
Qwen2.5-VL (14-px patches), 32 for Qwen3-VL and Qwen3.5 (16-px patches), all with a 2×2 merge
(Qwen3.5's hybrid language model runs on vLLM's CPU Gated DeltaNet kernel) — for two
image sizes; and with ``ignore_eos`` the engine generates exactly ``max_tokens`` tokens. The
reference for the resize is qwen-vl-utils' ``smart_resize`` given the factor the model folder's
own ``preprocessor_config.json`` implies; the template is the tokenizer's own (Qwen3-VL's adds no
system prompt). One engine start per family (about 40 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from qwen_vl_utils import smart_resize  # the reference implementation, not ours

from mm_preproc.spec import Family
from models.tiny_qwen_vl import FAMILIES, build_family

pytestmark = pytest.mark.engine

SIZES = [(640, 480), (1920, 1080)]
MESSAGES = [{"role": "user", "content": [{"type": "image"},
                                         {"type": "text", "text": "Describe the image."}]}]


def expected_image_tokens(width: int, height: int, model_dir: Path) -> int:
    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    factor = pre["patch_size"] * pre["merge_size"]
    size = pre["size"]
    h, w = smart_resize(height, width, factor=factor, min_pixels=size["shortest_edge"],
                        max_pixels=size["longest_edge"])
    return (h // factor) * (w // factor)


def random_image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


async def _run(model_dir: Path) -> tuple[str, list[tuple[int, int, int, int]]]:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = str(tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True))
    text_tokens = len(tok(prompt)["input_ids"]) - 1  # the single <|image_pad|> expands
    # a fixed KV cache (the server sizes its own) and eager mode keep the start short
    args = AsyncEngineArgs(model=str(model_dir), max_model_len=4096, max_num_seqs=4,
                           kv_cache_memory_bytes=256 << 20, enforce_eager=True, seed=0,
                           limit_mm_per_prompt={"image": 1, "video": 0})
    llm = AsyncLLM.from_engine_args(args)
    results = []
    try:
        for i, (w, h) in enumerate(SIZES):
            params = SamplingParams(max_tokens=7 + i, ignore_eos=True, temperature=0.0)
            final = None
            request = {"prompt": prompt, "multi_modal_data": {"image": random_image(w, h, i)}}
            async for out in llm.generate(request, params, request_id=f"req-{i}"):
                final = out
            assert final is not None and final.finished
            results.append((len(final.prompt_token_ids or []),
                            text_tokens + expected_image_tokens(w, h, model_dir),
                            len(final.outputs[0].token_ids), int(params.max_tokens or 0)))
    finally:
        llm.shutdown()
        del llm  # let AsyncLLM.__del__ run now, not at interpreter teardown
        gc.collect()
    return prompt, results


@pytest.mark.parametrize("family", list(FAMILIES))
def test_prompt_tokens_follow_the_family_rule_and_outputs_hit_max_tokens(family: Family) -> None:
    model_dir = build_family(family)
    prompt, results = asyncio.run(_run(model_dir))
    assert prompt.startswith("<|im_start|>system\n") == (family is Family.QWEN2_5_VL)
    assert [(p, o) for p, _, o, _ in results] == [(e, m) for _, e, _, m in results]
    # the two sizes differ in image tokens, so the count really follows the image
    assert results[0][0] != results[1][0]
