"""The comparison: every server gets the same image budget; ratios are given at several bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeserve.bench.compare import (
    CompareConfig,
    ServerKind,
    rates_by_bound,
    server_argv,
    server_kind,
)
from edgeserve.bench.sweep import SweepResult
from edgeserve.cli.bench import compare_config
from edgeserve.cli.main import parse_args


def point(rate: float, p99_ms: float) -> dict:
    return {"request_rate": rate, "p99_ttft_ms": p99_ms, "failed": 0, "completed": 30,
            "num_prompts": 30}


@pytest.mark.parametrize("kind", list(ServerKind))
def test_one_image_budget_reaches_every_server_in_its_own_syntax(kind: ServerKind) -> None:
    argv = server_argv(kind, Path("m"), 9000, max_pixels=200704)
    if kind.value.startswith("edgeserve"):  # split, inline, split with the ONNX encoder
        assert argv[argv.index("--max-pixels") + 1] == "200704"
    else:
        kwargs = json.loads(argv[argv.index("--mm-processor-kwargs") + 1])
        assert kwargs == {"max_pixels": 200704}


def test_without_a_budget_servers_use_the_models_own() -> None:
    for kind in ServerKind:
        argv = server_argv(kind, Path("m"), 9000)
        assert "--max-pixels" not in argv and "--mm-processor-kwargs" not in argv


def test_ratio_is_reported_at_each_ttft_bound() -> None:
    split = SweepResult(ttft_p99_bound_ms=3000,
                        points=[point(4, 100), point(8, 200), point(16, 400), point(20, 1000)])
    vllm = SweepResult(ttft_p99_bound_ms=3000,
                       points=[point(4, 450), point(8, 1300), point(12, 6000)])
    rows = rates_by_bound({ServerKind.EDGESERVE_SPLIT: [split], ServerKind.VLLM: [vllm]})
    # 500 ms: split between 16 (400) and 20 (1000) → 16.67; vllm between 4 (450) and 8 (1300) → 4.24
    assert rows["500"]["servers"]["edgeserve-split"] == pytest.approx(16 + 4 * 100 / 600)
    assert rows["500"]["servers"]["vllm"] == pytest.approx(4 + 4 * 50 / 850)
    assert rows["500"]["ratio_split_over_vllm"] == pytest.approx(
        (16 + 4 * 100 / 600) / (4 + 4 * 50 / 850))
    # 3000 ms: split sustained its top rate (20); vllm crosses between 8 and 12 → 8 + 4·1700/4700
    assert rows["3000"]["servers"]["edgeserve-split"] == 20
    assert rows["3000"]["ratio_split_over_vllm"] == pytest.approx(20 / (8 + 4 * 1700 / 4700))


def _compare_config(tiny_model_dir: Path, *argv: str) -> CompareConfig:
    """The config ``edgeserve bench compare`` would run with these flags."""
    args = parse_args(["bench", "compare", "--model-path", str(tiny_model_dir),
                                      "--workloads", "12mp", *argv])
    config: CompareConfig = compare_config(args)
    return config


def test_a_variant_of_a_kind_is_its_own_server_with_its_own_arguments(tiny_model_dir: Path) -> None:
    cfg = _compare_config(tiny_model_dir, "--servers", "edgeserve-split-onnx,edgeserve-split-onnx:1w,vllm",
                          "--server-arg", "edgeserve-split-onnx:1w=--workers 1")
    assert cfg.names == ("edgeserve-split-onnx", "edgeserve-split-onnx:1w", "vllm")
    assert [server_kind(n) for n in cfg.names] == [ServerKind.EDGESERVE_SPLIT_ONNX,
                                                    ServerKind.EDGESERVE_SPLIT_ONNX, ServerKind.VLLM]
    variant, plain = cfg.argv("edgeserve-split-onnx:1w"), cfg.argv("edgeserve-split-onnx")
    assert "--encoder" in plain and "--workers" not in plain
    assert variant == [*plain, "--workers", "1"]


def test_unknown_kinds_and_arguments_for_absent_variants_are_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="nope"):
        _compare_config(tiny_model_dir, "--servers", "edgeserve-split,nope:x")
    with pytest.raises(ValueError, match="edgeserve-split:2w"):
        _compare_config(tiny_model_dir, "--servers", "edgeserve-split",
                        "--server-arg", "edgeserve-split:2w=--workers 2")
