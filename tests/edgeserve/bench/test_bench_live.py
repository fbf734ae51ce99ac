"""The load generator against real servers: a stock vLLM OpenAI server and ``edgeserve serve``.

Each server is started once per module with the same command line ``edgeserve bench compare``
uses (tens of seconds on a 2-core machine), so these tests also check those command lines.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeserve.bench.arrivals import ArrivalConfig
from edgeserve.bench.compare import ServerKind, server_argv
from edgeserve.bench.run import RunConfig, run_benchmark
from edgeserve.bench.server_process import ServerProcess
from edgeserve.bench.sweep import SweepConfig, run_sweep
from edgeserve.bench.workload import WorkloadConfig
from edgeserve.net import free_port

pytestmark = pytest.mark.engine


def _start(kind: ServerKind, model: Path, log: Path) -> Iterator[str]:
    port = free_port()
    server = ServerProcess(server_argv(kind, model, port), log, port=port).start()
    try:
        asyncio.run(server.wait_ready(timeout_s=300))
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def vllm_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _start(ServerKind.VLLM, tiny_model_dir, tmp_path_factory.mktemp("vllm") / "log")


@pytest.fixture(scope="module")
def edgeserve_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _start(ServerKind.EDGESERVE_SPLIT, tiny_model_dir,
                      tmp_path_factory.mktemp("edgeserve") / "log")


def _config(url: str, n: int = 6) -> RunConfig:
    return RunConfig(
        base_url=url,
        workload=WorkloadConfig(sizes="448x448", output_len="8"),
        arrivals=ArrivalConfig(num_requests=n, max_concurrency=3),
        progress=False,
    )


async def test_every_request_to_vllm_completes_with_the_asked_length(vllm_url: str) -> None:
    result = await run_benchmark(_config(vllm_url))
    assert (result["completed"], result["failed"]) == (6, 0), result["error_counts"]
    assert result["total_output_tokens"] == 6 * 8  # ignore_eos: exactly max_tokens each
    # a 448×448 image is 16×16 tokens of 28 px: the prompt holds at least those
    assert result["total_input_tokens"] > 6 * 256
    assert 0 < result["mean_ttft_ms"] < result["mean_e2el_ms"]
    assert result["mean_tpot_ms"] > 0


async def test_vllm_metrics_give_a_stage_breakdown_consistent_with_the_client(vllm_url: str) -> None:
    result = await run_benchmark(_config(vllm_url))
    stages = result["server"]["stage_mean_ms"]
    assert {"vllm:request_prefill_time", "vllm:request_decode_time"} <= stages.keys()
    # the server starts its clock after the upload, the client before it
    assert result["mean_ttft_ms"] >= stages["vllm:time_to_first_token"] - 5.0
    assert result["server"]["stall_fraction"] is None  # vLLM exports no stall counter
    assert 0.0 <= result["stall_fraction"] <= 1.0


async def test_a_sweep_runs_each_rate_and_names_the_highest_sustained(vllm_url: str) -> None:
    sweep = await run_sweep(
        SweepConfig(base=_config(vllm_url), rates_rps=(1.0, 2.0), requests_per_rate=4,
                    duration_per_rate_s=None,
                    warmup_requests=1, ttft_p99_bound_ms=60_000),
        log=lambda _msg: None,
    )
    assert [p["request_rate"] for p in sweep.points] == [1.0, 2.0]
    assert all(p["completed"] == 4 for p in sweep.points)
    assert sweep.max_rate_rps == 2.0


def test_the_cli_saves_vllm_named_json_and_a_cdf_plot(vllm_url: str, tmp_path: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "cdf.png"
    proc = subprocess.run(
        [sys.executable, "-m", "edgeserve", "bench", "run", "--url", vllm_url, "--images",
         "small", "--num-prompts", "4", "--request-rate", "4", "--output-len", "4",
         "--goodput", "ttft:60000", "--save-result", str(out), "--plot", str(png),
         "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    data = json.loads(out.read_text())
    assert data["completed"] == 4 and data["request_goodput"] > 0
    assert data["request_rate"] == 4.0 and data["backend"] == "openai-chat"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_edgeserve_reports_its_cpu_stages_and_stall(edgeserve_url: str) -> None:
    result = await run_benchmark(_config(edgeserve_url))
    assert (result["completed"], result["failed"]) == (6, 0), result["error_counts"]
    assert result["total_output_tokens"] == 6 * 8
    stages = result["server"]["stage_mean_ms"]
    assert {"edgeserve_stage[decode]", "edgeserve_stage[resize]"} <= stages.keys()
    assert result["server"]["stall_fraction"] is not None
