"""The comparison: every server gets the same image budget; ratios are given at several bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeserve.bench.compare import ServerKind, rates_by_bound, server_argv
from edgeserve.bench.sweep import SweepResult


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
