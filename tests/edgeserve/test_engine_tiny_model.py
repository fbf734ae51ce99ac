"""The real vLLM engine (AsyncLLM, CPU build) serves the tiny default Qwen2-VL.

Specification: an image request's prompt is the chat-templated text plus one ``<|image_pad|>`` per
28×28 pixels of the smart-resized image (Qwen2-VL rule: grid_t·grid_h·grid_w / merge²), and with
``ignore_eos`` the engine generates exactly ``max_tokens`` tokens.
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

pytestmark = pytest.mark.engine

PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def expected_image_tokens(width: int, height: int, model_dir: Path) -> int:
    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    h, w = smart_resize(height, width, factor=28, min_pixels=pre["min_pixels"], max_pixels=pre["max_pixels"])
    return (h // 14) * (w // 14) // 4


def random_image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


async def _run(model_dir: Path) -> list[tuple[int, int, int, int]]:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(
        model=str(model_dir),
        max_model_len=4096,
        max_num_seqs=4,
        kv_cache_memory_bytes=256 << 20,
        enforce_eager=True,
        seed=0,
    )
    llm = AsyncLLM.from_engine_args(args)
    tok = AutoTokenizer.from_pretrained(model_dir)
    text_tokens = len(tok(PROMPT)["input_ids"]) - 1  # the single <|image_pad|> placeholder expands
    results = []
    try:
        for i, (w, h) in enumerate([(640, 480), (1920, 1080)]):
            params = SamplingParams(max_tokens=12, ignore_eos=True, temperature=0.0)
            final = None
            prompt = {"prompt": PROMPT, "multi_modal_data": {"image": random_image(w, h, i)}}
            async for out in llm.generate(prompt, params, request_id=f"req-{i}"):
                final = out
            assert final is not None and final.finished
            results.append(
                (len(final.prompt_token_ids or []), text_tokens + expected_image_tokens(w, h, model_dir),
                 len(final.outputs[0].token_ids), params.max_tokens)
            )
    finally:
        llm.shutdown()
        del llm  # let AsyncLLM.__del__ run now, not at interpreter teardown
        gc.collect()
    return results


def test_prompt_tokens_follow_image_size_and_outputs_hit_max_tokens(tiny_model_dir: Path) -> None:
    results = asyncio.run(_run(tiny_model_dir))
    (p1, e1, o1, m1), (p2, e2, o2, m2) = results
    assert (p1, o1) == (e1, m1)
    assert (p2, o2) == (e2, m2)
    assert p1 != p2, "two image sizes must give two different prompt lengths"
