"""ServeConfig: one validated object from defaults, a config file and flags (flags win)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgeserve.cli.main import parse_args
from edgeserve.cli.serve import config_from_args
from edgeserve.config import (
    ConfigError,
    EngineCorePlacement,
    EngineOptions,
    PreprocMode,
    ServeConfig,
)


def parse(*argv: str) -> ServeConfig:
    args = parse_args(["serve", *argv])
    return config_from_args(args)


def test_pixel_limits_default_to_the_models_preprocessor_config(tiny_model_dir: Path) -> None:
    pre = json.loads((tiny_model_dir / "preprocessor_config.json").read_text())
    cfg = ServeConfig(model=str(tiny_model_dir))
    assert (cfg.min_pixels, cfg.max_pixels) == (pre["min_pixels"], pre["max_pixels"])


def test_flags_map_onto_the_config(tiny_model_dir: Path) -> None:
    cfg = parse("--model", str(tiny_model_dir), "--workers", "3", "--mode", "inline",
                "--max-pending", "5", "--max-model-len", "2048", "--gpu-memory-utilization", "0.2",
                "--port", "9001", "--allow-http-media")
    assert cfg.workers == 3 and cfg.mode is PreprocMode.INLINE and cfg.max_pending == 5
    assert cfg.engine.max_model_len == 2048 and cfg.engine.gpu_memory_utilization == 0.2
    assert cfg.port == 9001 and cfg.allow_http_media is True
    assert ServeConfig(model=str(tiny_model_dir)).engine_core_placement is EngineCorePlacement.WITH_WORKER
    assert parse("--model", str(tiny_model_dir), "--engine-core-placement", "any"
                 ).engine_core_placement is EngineCorePlacement.ANY
    assert ServeConfig(model=str(tiny_model_dir)).frontend_torch_threads == 1
    assert parse("--model", str(tiny_model_dir), "--frontend-torch-threads", "4"
                 ).frontend_torch_threads == 4
    assert ServeConfig(model=str(tiny_model_dir)).frontend_render_threads is None  # auto
    assert parse("--model", str(tiny_model_dir), "--frontend-render-threads", "3"
                 ).frontend_render_threads == 3


def test_flags_override_the_file_and_the_file_overrides_defaults(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    f = tmp_path / "serve.yaml"
    f.write_text(f"model: {tiny_model_dir}\nworkers: 2\nmax_pending: 7\n"
                 "engine:\n  max_num_seqs: 3\n  max_model_len: 1024\n")
    cfg = parse("--config", str(f), "--workers", "1")
    assert (cfg.workers, cfg.max_pending) == (1, 7)
    assert (cfg.engine.max_num_seqs, cfg.engine.max_model_len) == (3, 1024)


def test_other_engine_args_pass_through_as_json_values(tiny_model_dir: Path) -> None:
    cfg = parse("--model", str(tiny_model_dir), "--engine-arg", "block_size=32",
                "--engine-arg", "kv_cache_dtype=auto", "--engine-arg", "enable_chunked_prefill=false")
    assert cfg.engine.extra == {"block_size": 32, "kv_cache_dtype": "auto",
                                "enable_chunked_prefill": False}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse("--model", str(tiny_model_dir), "--engine-arg", "block_size")


def test_unknown_file_fields_are_named(tmp_path: Path) -> None:
    f = tmp_path / "serve.json"
    f.write_text(json.dumps({"wokers": 2}))
    with pytest.raises(ConfigError, match=r"unknown field.*wokers"):
        parse("--config", str(f))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"workers": 0}, "workers must be >= 1"),
        ({"mode": "threads"}, "mode must be 'split' or 'inline'"),
        ({"min_pixels": 10_000, "max_pixels": 5_000}, "min_pixels <= max_pixels"),
        ({"allowed_media_dir": "/no/such/dir"}, "is not a directory"),
        ({"model": "/no/such/model"}, "edgeserve models build-tiny"),
        ({"engine": {"gpu_memory_utilization": 1.5}}, "gpu_memory_utilization"),
        ({"engine_core_placement": "core0"}, "engine_core_placement must be 'with-worker' or"),
        ({"frontend_torch_threads": 0}, "frontend_torch_threads must be an integer >= 1"),
        ({"frontend_render_threads": 0}, "frontend_render_threads must be an integer >= 1"),
        ({"frontend_render_threads": 2, "engine": EngineOptions(extra={"mm_processor_cache_gb": 1})},
         "cannot share vLLM's multimodal processor cache"),
    ],
)
def test_bad_values_fail_at_construction_with_the_field_named(
    tiny_model_dir: Path, changes: dict[str, object], message: str
) -> None:
    values: dict[str, object] = {"model": str(tiny_model_dir), **changes}
    with pytest.raises(ConfigError, match=message):
        ServeConfig(**values)  # type: ignore[arg-type]


def test_cli_reports_config_errors_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["serve", "--model", "/no/such/model"])
    assert args.func(args) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("cores", [1, 2, 4, 16])
def test_default_workers_leave_the_engine_a_core_unless_the_workers_run_the_encoder_on_the_cpu(
    tiny_model_dir: Path, cores: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cores − 2 (at least 1) when vLLM's engine runs the vision tower or the encoder runs on an
    accelerator; cores − 1 (at least 2 where there are 2 cores) when the workers run it on the
    CPU. The default reads the process's affinity mask, faked here for core counts this machine
    lacks."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    cases: dict[str, dict[str, Any]] = {
        "auto": {},  # decided at start (test_auto_defaults.py)
        "no_encoder": {"encoder": "none"},
        "onnx_cpu": {"encoder": "onnx"},
        "openvino_cpu": {"encoder": "onnx", "encoder_provider": "openvino:CPU"},
        "ort_openvino_default_device": {"encoder": "onnx", "encoder_provider": "OpenVINO"},
        "ort_openvino_npu": {"encoder": "onnx", "encoder_provider": "OpenVINO",
                             "encoder_provider_options": {"device_type": "NPU"}},
        "cuda": {"encoder": "onnx", "encoder_provider": "CUDA"},
        "given": {"encoder": "onnx", "workers": 1},
    }
    got = {name: ServeConfig(model=str(tiny_model_dir), **kw).workers for name, kw in cases.items()}
    without, with_cpu_encoder = max(1, cores - 2), max(min(2, cores), cores - 1)
    assert got == {"auto": None, "no_encoder": without, "onnx_cpu": with_cpu_encoder,
                   "openvino_cpu": with_cpu_encoder, "ort_openvino_default_device": with_cpu_encoder,
                   "ort_openvino_npu": without, "cuda": without, "given": 1}


def test_serve_help_states_both_default_worker_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from edgeserve.config import default_workers

    with pytest.raises(SystemExit):
        parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"cores - 2, at least 1, here {default_workers()};" in text
    assert f"cores - 1, at least 2, here {default_workers(encoder_on_cpu=True)})" in text
