"""vllm_compat against the installed vLLM (the CPU build here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgeserve import vllm_compat
from edgeserve.config import EngineOptions, ServeConfig
from edgeserve.engine import Engine
from edgeserve.stalls import StallMeter
from models.random_shapes import build


def test_the_installed_build_is_named_from_vllms_platform() -> None:
    from vllm.platforms import current_platform

    build_ = vllm_compat.current_build()
    assert (build_ is vllm_compat.VllmBuild.CPU) == current_platform.is_cpu()
    assert vllm_compat.vllm_version().count(".") >= 2


def test_serving_defaults_are_vllm_serves_table_and_on_cpu_the_library_ones() -> None:
    from vllm.config import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    d = vllm_compat.serve_batch_defaults()
    tokens, _ = EngineArgs.get_batch_defaults(1)
    assert d.max_num_batched_tokens == tokens[UsageContext.OPENAI_API_SERVER]
    if vllm_compat.current_build() is vllm_compat.VllmBuild.CPU:
        # what AsyncLLM's own ENGINE_CONTEXT falls back to: the CPU engine is unchanged
        assert d.max_num_batched_tokens == SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS


def test_a_folder_without_weights_gets_the_dummy_format(tmp_path: Path,
                                                        tiny_model_dir: Path) -> None:
    args, why = vllm_compat.load_format_args(tmp_path, {})
    assert args == {"load_format": "dummy"} and "no weight files" in why
    assert vllm_compat.load_format_args(tmp_path, {"load_format": "auto"}) == ({}, "")
    assert vllm_compat.load_format_args(tiny_model_dir, {}) == ({}, "")


def test_the_smallest_random_shape_passes_vllms_config_validation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = build("qwen2-vl-2b", tmp_path / "q2b")
    cfg = ServeConfig(model=str(model), engine=EngineOptions(kv_cache_memory_bytes=1 << 30))
    args = Engine(cfg, StallMeter(0.0)).engine_args()
    assert args.load_format == "dummy"
    said = [line for line in capsys.readouterr().out.splitlines() if "random weights" in line]
    assert len(said) == 1 and said[0].startswith("edgeserve serve: ")
    vc = args.create_engine_config(vllm_compat.serving_usage_context())
    assert vc.model_config.hf_config.text_config.hidden_size == 1536
    assert vc.load_config.load_format == "dummy"
    assert vc.scheduler_config.max_num_batched_tokens == (
        vllm_compat.serve_batch_defaults().max_num_batched_tokens)


def test_a_prompt_with_an_image_renders_through_the_engines_renderer(
        tiny_model_dir: Path) -> None:
    """The renderer of the tiny model's engine config (no engine started) expands the image to
    its tokens, as the raw-prompt path did inside generate()."""
    from types import SimpleNamespace

    import numpy as np
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.renderers import renderer_from_config

    args = AsyncEngineArgs(model=str(tiny_model_dir), max_model_len=2048,
                           kv_cache_memory_bytes=1 << 28,
                           limit_mm_per_prompt={"image": 1, "video": 0})
    vc = args.create_engine_config(vllm_compat.serving_usage_context())
    llm = SimpleNamespace(renderer=renderer_from_config(vc), model_config=vc.model_config)
    tok = llm.renderer.tokenizer
    text = str(tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        tokenize=False, add_generation_prompt=True))
    image = np.zeros((56, 112, 3), dtype=np.uint8)  # 2 x 4 patches of 28 px: 8 image tokens
    out = asyncio.run(vllm_compat.render_prompt(llm, {
        "prompt": text, "multi_modal_data": {"image": [image]},
        "multi_modal_uuids": {"image": ["img-1"]}}))
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    assert out["prompt_token_ids"].count(image_id) == 8
    assert "type" in out  # what generate() takes without the raw-prompt path


def test_render_threads_reach_vllm_with_its_processor_cache_off(
        tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several render threads become vLLM's renderer_num_workers, and the processor cache they
    cannot share is turned off, which vLLM's own config validation accepts; one thread keeps the
    cache."""
    cfg = ServeConfig(model=str(tiny_model_dir), frontend_render_threads=3,
                      engine=EngineOptions(kv_cache_memory_bytes=1 << 28))
    args = Engine(cfg, StallMeter(0.0)).engine_args()
    assert (args.renderer_num_workers, args.mm_processor_cache_gb) == (3, 0)
    assert "multimodal processor cache off: 3 render threads" in capsys.readouterr().out
    vc = args.create_engine_config(vllm_compat.serving_usage_context())
    assert vc.model_config.renderer_num_workers == 3
    one = Engine(cfg.replace(frontend_render_threads=1), StallMeter(0.0)).engine_args()
    assert one.renderer_num_workers == 1 and one.mm_processor_cache_gb > 0
