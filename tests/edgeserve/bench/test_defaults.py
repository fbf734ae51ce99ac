"""benchmarks/defaults.py: which combination a server started as, the sustained rate of a sweep,
and the verdict on the default."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from defaults import Combo, Dtype, Point, Tower, judge, started_as, sustained_rate  # noqa: E402

DEFAULT_LINES = """\
edgeserve serve: machine: AMD EPYC, 2 core(s), avx512_bf16, avx512f, avx2; vLLM on CPU
edgeserve serve: dtype bfloat16: vLLM's CPU build on a CPU with avx512_bf16: native bfloat16 (override: --dtype)
edgeserve serve: encoder onnx: the exported tower on ONNX Runtime in the workers: keeps image steps out of the engine (override: --encoder none|onnx)
edgeserve serve: vision encoder: /m/onnx/encoder.onnx on ONNX Runtime CPUExecutionProvider
edgeserve serve: ready on http://127.0.0.1:4000 (mode=split, workers=2, model=/m)
"""
FLAGGED_LINES = """\
edgeserve serve: dtype float32 (--dtype)
edgeserve serve: ready on http://127.0.0.1:4001 (mode=split, workers=1, model=/m)
"""


def test_the_start_up_lines_name_the_combination() -> None:
    assert started_as(DEFAULT_LINES) == (Combo(Dtype.BFLOAT16, Tower.ONNX), 2)
    assert started_as(FLAGGED_LINES) == (Combo(Dtype.FLOAT32, Tower.ENGINE), 1)
    with pytest.raises(ValueError, match="no dtype"):
        started_as("edgeserve serve: starting\n")


def point(rate: float, ttft_p99_s: float, ok: int = 10, sent: int = 10) -> Point:
    return Point(offered_rps=rate, sent=sent, ok=ok, achieved_rps=rate, ttft_p50_s=0.5,
                 ttft_p99_s=ttft_p99_s, itl_p99_s=0.01)


def test_the_sustained_rate_is_where_ttft_p99_crosses_the_goal() -> None:
    # p99 1 s at 1 req/s, 5 s at 2 req/s: the 3 s goal is crossed half-way, at 1.5 req/s
    assert sustained_rate([point(2.0, 5.0), point(0.5, 0.4), point(1.0, 1.0)], 3.0) == (
        1.5, "interpolated")
    assert sustained_rate([point(0.5, 0.4), point(1.0, 2.9)], 3.0) == (1.0, "at least")
    assert sustained_rate([point(0.5, 3.5), point(1.0, 9.0)], 3.0) == (0.0, "below the sweep")
    # a point with failed requests does not pass whatever its TTFT, and gives no slope
    assert sustained_rate([point(0.5, 0.4), point(1.0, 1.0, ok=9)], 3.0) == (0.5, "interpolated")


def test_the_default_is_judged_against_the_best_of_each_figure() -> None:
    rows: dict[str, dict[str, Any]] = {"a": {"sustained_rps": 2.0, "itl_p99_ms": 12.0},
            "b": {"sustained_rps": 1.85, "itl_p99_ms": 10.0},
            "c": {"sustained_rps": 1.0, "itl_p99_ms": None}}
    v = judge(rows, "b")  # 7.5 % below the best rate, its ITL the best
    assert (v["best_sustained"], v["best_itl"]) == ("a", "b")
    assert (v["default_rate_within_10pct"], v["default_itl_within_20pct"]) == (True, True)
    v = judge(rows, "a")  # the best rate, ITL 20 % over the best: still within
    assert (v["default_rate_within_10pct"], v["default_itl_within_20pct"]) == (True, True)
    rows["a"]["itl_p99_ms"] = 12.5
    assert judge(rows, "a")["default_itl_within_20pct"] is False
    assert judge(rows, "c")["default_rate_within_10pct"] is False
