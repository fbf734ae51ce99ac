"""One benchmark run: prepare the requests, scrape ``/metrics``, send on schedule, scrape, report.

Everything before :func:`edgeserve.bench.runner.run_load` (drawing and encoding images, building
JSON bodies, drawing the arrival schedule, asking the server for its model name) happens outside
the timed part.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

from edgeserve.bench.arrivals import ArrivalConfig, arrival_offsets_s
from edgeserve.bench.datasets import DatasetConfig, DatasetKind, build_dataset, format_dataset_stats
from edgeserve.bench.report import (
    DEFAULT_PERCENTILES,
    client_stall_fraction,
    detailed,
    run_header,
    summarize,
)
from edgeserve.bench.runner import fetch_model_id, run_load
from edgeserve.bench.server_metrics import has_settling_counters, scrape, server_figures
from edgeserve.bench.throughput import cache_figures
from edgeserve.bench.workload import PreparedRequest, WorkloadConfig, prepare_requests


@dataclass(slots=True, frozen=True)
class RunConfig:
    """One run against one server."""

    base_url: str
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)  # images: the workload above
    arrivals: ArrivalConfig = field(default_factory=ArrivalConfig)
    label: str = ""
    goodput_slo_ms: tuple[tuple[str, float], ...] = ()  # (("ttft", 2000.0), …)
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    request_timeout_s: float = 600.0
    save_detailed: bool = False
    progress: bool = True
    first_image_number: int = 0  # sweeps keep images unique across their runs
    metrics_settle_s: float = 2.5  # wait before the closing /metrics scrape (edgeserve only)
    print_dataset_stats: bool = True  # print the dataset's length statistics before the run

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"server URL must start with http:// or https://, got {self.base_url!r}")
        if self.request_timeout_s <= 0:
            raise ValueError("request timeout must be > 0 s")
        if any(not 0 < p < 100 for p in self.percentiles):
            raise ValueError(f"percentiles must be in (0, 100), got {self.percentiles}")


def prepare(config: RunConfig, model: str) -> tuple[list[PreparedRequest], list[float]]:
    """Request bodies and their send times (all of it before the clock starts)."""
    return prepare_with_stats(config, model)[:2]


def prepare_with_stats(
    config: RunConfig, model: str
) -> tuple[list[PreparedRequest], list[float], dict[str, Any]]:
    """Request bodies, send times and the dataset's length statistics (printed unless told not)."""
    from tqdm.auto import tqdm

    offsets = [float(x) for x in arrival_offsets_s(config.arrivals)]
    ds = config.dataset
    if ds.kind is not DatasetKind.IMAGES:
        from edgeserve.bench.tokentext import TokenText, find_tokenizer

        text = TokenText(find_tokenizer(ds.tokenizer, model))
        built = build_dataset(ds, config.workload, len(offsets), model,
                              config.first_image_number, text)
        if config.print_dataset_stats:
            print(format_dataset_stats(ds, built.stats), flush=True)
        return built.requests, offsets, built.stats
    with tqdm(
        total=len(offsets), desc="preparing", unit="req", disable=not config.progress, leave=False
    ) as bar:
        requests = prepare_requests(
            config.workload, len(offsets), model, config.first_image_number, on_progress=bar.update
        )
    return requests, offsets, {}


async def run_benchmark(
    config: RunConfig, prepared: tuple[list[PreparedRequest], list[float]] | None = None
) -> dict[str, Any]:
    """Run once and return the result dict (vLLM key names; see :mod:`edgeserve.bench.report`)."""
    model = config.workload.model or await fetch_model_id(config.base_url)
    if prepared is not None:
        requests, offsets = prepared
        stats: dict[str, Any] = {}
    else:
        requests, offsets, stats = await asyncio.to_thread(prepare_with_stats, config, model)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    before = await scrape(config.base_url)
    run = await run_load(
        config.base_url,
        requests,
        offsets,
        max_concurrency=config.arrivals.max_concurrency,
        request_timeout_s=config.request_timeout_s,
        progress=config.progress,
        progress_desc=config.label or "requests",
    )
    if before is not None and has_settling_counters(before):
        await asyncio.sleep(config.metrics_settle_s)  # let the server book the run's last window
    after = await scrape(config.base_url)
    result = run_header(
        label=config.label,
        model_id=model,
        num_prompts=len(requests),
        request_rate=config.arrivals.rate_rps,
        burstiness=config.arrivals.burstiness,
        max_concurrency=config.arrivals.max_concurrency,
        base_url=config.base_url,
        workload=config.workload.label if config.dataset.kind is DatasetKind.IMAGES
        else config.dataset.label,
    )
    result["dataset"] = config.dataset.kind.value
    result["dataset_stats"] = stats
    result |= summarize(run.results, run.duration_s, config.percentiles, dict(config.goodput_slo_ms))
    # a shared machine's other work shows here (1-minute load average, runnable processes)
    result["loadavg_1m_before"] = load_before
    result["loadavg_1m_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result["server"] = server_figures(before, after, run.duration_s) if before and after else None
    if before and after:  # prefix- and multimodal-cache lookups and hits during this run
        result["server"] |= cache_figures(before, after)
    result["prefix_cache_hit_rate"] = (result["server"] or {}).get("prefix_cache_hit_rate")
    result["mm_cache_hit_rate"] = (result["server"] or {}).get("mm_cache_hit_rate")
    # the stall estimate excludes the engine's own prefill when the server reports it
    prefill_ms = ((result["server"] or {}).get("stage_mean_ms") or {}).get(
        "vllm:request_prefill_time", 0.0)
    result["stall_fraction"] = client_stall_fraction(run.results, run.duration_s, prefill_ms / 1e3)
    result["stall_prefill_ms"] = prefill_ms
    # completed requests' client times, always kept for plots and re-analysis (s; not vLLM keys)
    result["cdf_ttft_s"] = [round(r.ttft_s, 5) for r in run.results if r.ok]
    result["cdf_e2el_s"] = [round(r.e2e_s, 5) for r in run.results if r.ok]
    result["cdf_start_s"] = [round(r.start_s - run.t0_s, 5) for r in run.results if r.ok]
    if config.save_detailed:
        result |= detailed(run.results, run.t0_s)
    return result
