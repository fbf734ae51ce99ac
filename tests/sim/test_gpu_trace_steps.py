"""Calibration reads a GPU trace's steps by their spans, not by vLLM's dispatch times.

The data: 17 s of a trace ``edgeserve serve`` recorded on an H200 (2026-12-05, vLLM 0.26, the
Qwen2-VL-2B shape with random weights, 12 MP photos at 1230 image tokens, 8 req/s offered;
``benchmarks/gpu_compare.py``), before the header named its step timing: each step's
``duration_s`` there is vLLM's ``elapsed_ms``, which under async scheduling is only the dispatch.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from edgeserve.records import EngineStep, read_trace
from sim.fit.traces import dispatch_timed, read_traces

DATA = Path(__file__).parents[1] / "data" / "gpu" / "h200_split_1280tok_8rps.jsonl.gz"


@pytest.fixture()
def gpu_trace(tmp_path: Path) -> Path:
    path = tmp_path / "gpu.jsonl"
    path.write_bytes(gzip.decompress(DATA.read_bytes()))
    return path


def test_the_recorded_durations_are_dispatch_times(gpu_trace: Path) -> None:
    steps = [s for s in read_trace(gpu_trace) if isinstance(s, EngineStep)]
    assert len(steps) > 500
    assert statistics.median(s.duration_s for s in steps) < 1e-4  # tens of microseconds


def test_calibration_reads_them_as_output_intervals(gpu_trace: Path) -> None:
    data = read_traces([gpu_trace])
    assert dispatch_timed(data.meta)
    decode_only = [s.duration_s for s in data.steps if not s.encoder_inputs and s.running > 1]
    assert 0.002 < statistics.median(decode_only) < 0.006  # a 2B model's decode step on an H200
    # spans tile the busy engine's time: never longer than the trace's wall time together, and
    # at 8 photos a second far more of it than the dispatch times' 1 %
    wall_s = data.steps[-1].t_s - data.steps[0].t_s
    busy_s = sum(s.duration_s for s in data.steps[1:])
    assert 0.3 * wall_s < busy_s <= wall_s + 1e-6


def test_a_header_that_names_its_step_timing_is_read_as_it_is(gpu_trace: Path,
                                                              tmp_path: Path) -> None:
    lines = gpu_trace.read_text().splitlines()
    header = json.loads(lines[0])
    header["meta"]["engine"]["step_timing"] = "output_interval"
    named = tmp_path / "named.jsonl"
    named.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    data = read_traces([named])
    assert not dispatch_timed(data.meta)
    assert statistics.median(s.duration_s for s in data.steps) < 1e-4
