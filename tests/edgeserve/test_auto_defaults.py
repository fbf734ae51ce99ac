"""The machine-dependent defaults: the engine's dtype and where the vision tower runs.

Specification: on vLLM's CPU build bfloat16 where the CPU has ``avx512_bf16`` or ``amx_bf16``,
float32 otherwise, whatever the core count; on a GPU the checkpoint's own dtype. The tower runs
on ONNX Runtime in the workers on the CPU build when the model has a usable export, in the
engine on a GPU or without one (the reason then names what is missing). ``--dtype`` and
``--encoder`` given are kept. The worker count follows the chosen encoder, and the KV cache's
bytes per token follow the chosen dtype. vLLM's renderer in the frontend gets
``min(4, cores // 4)`` threads on a GPU host and one on the CPU build, or one where the user kept
vLLM's multimodal processor cache, which the threads cannot share.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edgeserve.auto_defaults import (
    choose_dtype,
    choose_encoder,
    choose_engine_wait,
    choose_render_threads,
    has_linear_attention,
    model_dtype,
    resolve,
)
from edgeserve.config import EncoderKind, EngineOptions, ServeConfig, default_workers
from edgeserve.engine_memory import KVGeometry
from edgeserve.engine_wait import EngineWait
from edgeserve.hardware import Hardware, Platform

AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512_bf16"}
AMX = AVX512_BF16 | {"amx_tile", "amx_bf16", "amx_int8"}


def cpu(flags: frozenset[str], cores: int = 2) -> Hardware:
    return Hardware(cpu_flags=flags, cores=cores, platform=Platform.CPU)


@pytest.mark.parametrize("cores", [1, 2, 64])
@pytest.mark.parametrize(("flags", "dtype"), [(AVX2, "float32"), (AVX512_BF16, "bfloat16"),
                                              (AMX, "bfloat16")])
def test_dtype_on_the_cpu_build(flags: frozenset[str], dtype: str, cores: int) -> None:
    assert choose_dtype(cpu(flags, cores), "bfloat16").value == dtype


def test_dtype_reasons_name_the_feature() -> None:
    assert "amx_bf16" in choose_dtype(cpu(AMX), "bfloat16").reason
    assert "avx512_bf16" in choose_dtype(cpu(AVX512_BF16), "bfloat16").reason
    assert "emulated" in choose_dtype(cpu(AVX2), "bfloat16").reason


@pytest.mark.parametrize("checkpoint", ["bfloat16", "float16", "float32"])
def test_dtype_on_a_gpu_is_the_checkpoints(checkpoint: str) -> None:
    gpu = Hardware(cpu_flags=AVX2, cores=8, platform=Platform.GPU)
    assert choose_dtype(gpu, checkpoint).value == checkpoint


@pytest.mark.parametrize("flags", [AVX2, AVX512_BF16, AMX])
def test_encoder_on_the_cpu_build_with_an_export(flags: frozenset[str]) -> None:
    assert choose_encoder(cpu(flags), None).value == "onnx"


def test_encoder_reason_says_amx_is_not_measured() -> None:
    assert "not measured" in choose_encoder(cpu(AMX), None).reason
    assert "not measured" not in choose_encoder(cpu(AVX512_BF16), None).reason


def test_encoder_without_an_export_or_on_a_gpu_is_the_engines() -> None:
    missing = choose_encoder(cpu(AVX512_BF16), "no encoder.onnx in /m/onnx")
    assert missing.value == "none" and "no encoder.onnx in /m/onnx" in missing.reason
    gpu = Hardware(cpu_flags=AVX512_BF16, cores=8, platform=Platform.GPU)
    assert choose_encoder(gpu, None).value == "none"


def test_inline_mode_keeps_the_tower_in_the_engine(tiny_model_dir: Path) -> None:
    """Without workers the graph would run on the frontend's event loop, stalling every stream."""
    assert choose_encoder(cpu(AVX2), None, workers=False).value == "none"
    got, lines = resolve(ServeConfig(model=str(tiny_model_dir), mode="inline"), cpu(AVX2))
    assert got.encoder is EncoderKind.NONE and "inline mode" in lines[2]


def test_model_dtype_reads_the_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"text_config": {"dtype": "float16"}}')
    assert model_dtype(tmp_path) == "float16"
    assert model_dtype(tmp_path / "absent") == "bfloat16"
    assert model_dtype(tiny_model_dir) in ("bfloat16", "float32", "float16")


def test_resolve_on_avx2_chooses_float32_and_the_workers_encoder(tiny_model_dir: Path) -> None:
    cfg = ServeConfig(model=str(tiny_model_dir))
    assert cfg.encoder is EncoderKind.AUTO and cfg.workers is None and cfg.engine.dtype is None
    got, lines = resolve(cfg, cpu(AVX2))
    assert got.engine.dtype == "float32" and got.encoder is EncoderKind.ONNX
    assert got.encoder_path == str(tiny_model_dir / "onnx")
    assert got.workers == default_workers(encoder_on_cpu=True)
    assert lines[1].startswith("dtype float32: ") and lines[1].endswith("(override: --dtype)")
    assert lines[2].startswith("encoder onnx: ")


def test_resolve_keeps_what_was_given(tiny_model_dir: Path) -> None:
    cfg = ServeConfig(model=str(tiny_model_dir), encoder=EncoderKind.NONE, workers=3,
                      engine=EngineOptions(dtype="bfloat16"), frontend_render_threads=2,
                      engine_wait=EngineWait.YIELD)
    got, lines = resolve(cfg, cpu(AVX2))
    assert (got.engine.dtype, got.encoder, got.workers) == ("bfloat16", EncoderKind.NONE, 3)
    assert got.frontend_render_threads == 2 and got.engine_wait is EngineWait.YIELD
    assert lines[1:] == ["dtype bfloat16 (--dtype)", "engine wait yield (--engine-wait)"]


def test_resolve_without_an_export_falls_back_in_one_line(tiny_model_dir: Path,
                                                           tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model, ignore=shutil.ignore_patterns("onnx"))
    got, lines = resolve(ServeConfig(model=str(model)), cpu(AVX512_BF16))
    assert got.encoder is EncoderKind.NONE and got.workers == default_workers()
    assert len(lines) == 5 and lines[2].startswith("encoder none: vLLM's tower inside the engine")
    assert "encoder.onnx" in lines[2]


def test_the_kv_cache_follows_the_chosen_dtype(tiny_model_dir: Path) -> None:
    cfg = ServeConfig(model=str(tiny_model_dir))
    per_token = {flags: KVGeometry.from_model_dir(
        tiny_model_dir, resolve(cfg, cpu(flags))[0].engine.dtype or "auto").bytes_per_token
        for flags in (AVX2, AVX512_BF16)}
    assert per_token[AVX2] == 2 * per_token[AVX512_BF16]


@pytest.mark.parametrize(("cores", "threads"), [(2, 1), (8, 2), (16, 4), (64, 4)])
def test_render_threads_on_a_gpu_grow_with_the_cores_up_to_four(cores: int, threads: int) -> None:
    gpu = Hardware(cpu_flags=AVX2, cores=cores, platform=Platform.GPU)
    assert choose_render_threads(gpu).value == str(threads)


@pytest.mark.parametrize("flags", [AVX2, AVX512_BF16, AMX])
def test_render_threads_on_the_cpu_build_are_one(flags: frozenset[str]) -> None:
    assert choose_render_threads(cpu(flags, cores=64)).value == "1"


def test_a_kept_processor_cache_keeps_one_render_thread(tiny_model_dir: Path) -> None:
    """vLLM refuses renderer threads beside its (not thread-safe) processor cache: a user who
    asked for the cache gets one thread, and the line says why."""
    gpu = Hardware(cpu_flags=AVX2, cores=16, platform=Platform.GPU)
    cfg = ServeConfig(model=str(tiny_model_dir),
                      engine=EngineOptions(extra={"mm_processor_cache_gb": 2}))
    got, lines = resolve(cfg, gpu)
    assert got.frontend_render_threads == 1
    assert lines[-1].startswith("frontend render threads 1: the multimodal processor cache")
    got, lines = resolve(ServeConfig(model=str(tiny_model_dir)), gpu)
    assert got.frontend_render_threads == 4 and lines[-1].startswith("frontend render threads 4")


@pytest.mark.parametrize("flags", [AVX2, AVX512_BF16, AMX])
@pytest.mark.parametrize("cores", [2, 64])
def test_the_engine_sleeps_instead_of_spinning_on_the_cpu_build(flags: frozenset[str],
                                                                 cores: int) -> None:
    choice = choose_engine_wait(cpu(flags, cores))
    assert choice.value == "sleep" and "sched_yield" in choice.reason


def test_a_gpu_host_keeps_vllms_spin() -> None:
    gpu = Hardware(cpu_flags=AVX2, cores=16, platform=Platform.GPU)
    assert choose_engine_wait(gpu).value == "yield"


def test_resolve_says_how_the_engine_waits(tiny_model_dir: Path) -> None:
    got, lines = resolve(ServeConfig(model=str(tiny_model_dir)), cpu(AVX2))
    assert got.engine_wait is EngineWait.SLEEP
    line = next(x for x in lines if x.startswith("engine wait "))
    assert line.startswith("engine wait sleep: ") and line.endswith("(override: --engine-wait)")


@pytest.mark.parametrize("flags", [AVX2, AVX512_BF16])
def test_linear_attention_models_keep_bfloat16_on_the_cpu_build(flags: frozenset[str]) -> None:
    """vLLM's CPU build refuses Qwen3.5's gated-delta-net layers in float32 ("CPU GDN attention
    requires BF16"): such a model keeps bfloat16 even on a CPU without it natively."""
    choice = choose_dtype(cpu(flags), "bfloat16", linear_attention=True)
    assert choice.value == "bfloat16" and "linear-attention" in choice.reason


def test_linear_attention_is_read_from_the_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    import json

    assert not has_linear_attention(tiny_model_dir)
    (tmp_path / "config.json").write_text(json.dumps(
        {"text_config": {"layer_types": ["linear_attention", "full_attention"]}}))
    assert has_linear_attention(tmp_path)
