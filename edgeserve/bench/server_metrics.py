"""What the server says about itself: ``/metrics`` scraped before and after a run.

Both servers export Prometheus text. The difference of two scrapes around a run gives, for every
latency histogram, the mean per request *during the run only* (Δsum / Δcount), and for every
seconds counter the time accumulated during the run. From that:

* **stage breakdown** — mean milliseconds per request for each ``*_seconds`` histogram. A stock
  vLLM server reports its engine-side stages (``vllm:request_queue_time_seconds``,
  ``…prefill…``, ``…decode…``, ``vllm:time_to_first_token_seconds``, …); edgeserve also reports
  its CPU stages (decode, resize, normalize, queueing for a worker). A histogram with a ``stage``
  label is broken out per stage.
* **server stall fraction** — a counter whose name contains ``stall`` and ends in
  ``_seconds_total`` (edgeserve's ``edgeserve_engine_stall_seconds``: engine idle while work
  waits in a CPU stage), divided by the run's duration; likewise the engine busy fraction from a
  ``…busy_seconds`` counter (the engine's step spans: on a GPU, the time the GPU had a step to
  run) and, where NVML is present, the GPU's own busy fraction from
  ``edgeserve_gpu_busy_seconds`` (NVML utilization × sample interval, summed over GPUs). edgeserve settles these counters once per sample interval, so the
  second scrape waits for that (``settle_s``). vLLM has no such counter; for it only the client-side estimate
  (:func:`edgeserve.bench.report.client_stall_fraction`) exists.

Scraping is two small GETs outside the timed part; nothing is sampled during the run, so the
measurement does not load the server.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp

SERVER_PREFIXES = ("vllm:", "edgeserve")  # metric families that describe the serving pipeline

# (family name, label-set) → value, for the _sum/_count of histograms and the value of counters
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(slots=True)
class Snapshot:
    """One scrape: histogram sums and counts, and counters, keyed by family and labels."""

    hist_sum: dict[SampleKey, float] = field(default_factory=dict)
    hist_count: dict[SampleKey, float] = field(default_factory=dict)
    counters: dict[SampleKey, float] = field(default_factory=dict)


def parse_metrics(text: str) -> Snapshot:
    """Parse Prometheus exposition text into a :class:`Snapshot`."""
    from prometheus_client.parser import text_string_to_metric_families

    snap = Snapshot()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            key: SampleKey = (family.name, labels)
            if family.type == "histogram":
                if s.name.endswith("_sum"):
                    snap.hist_sum[key] = snap.hist_sum.get(key, 0.0) + s.value
                elif s.name.endswith("_count"):
                    snap.hist_count[key] = snap.hist_count.get(key, 0.0) + s.value
            elif family.type == "counter" and s.name.endswith("_total"):
                snap.counters[key] = snap.counters.get(key, 0.0) + s.value
    return snap


async def scrape(base_url: str, timeout_s: float = 10.0) -> Snapshot | None:
    """GET ``<root>/metrics``; None when the server has none (or does not answer)."""
    from edgeserve.bench.runner import server_root

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(server_root(base_url) + "/metrics") as resp,
        ):
            if resp.status != 200:
                return None
            return parse_metrics(await resp.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _stage_name(family: str, labels: tuple[tuple[str, str], ...]) -> str:
    name = family.removesuffix("_seconds")
    stage = dict(labels).get("stage")
    return f"{name}[{stage}]" if stage else name


def _pipeline_order(name: str) -> tuple[int, int, str]:
    """edgeserve's per-stage histograms first, in pipeline order; then the rest by name."""
    from edgeserve.records import Stage

    order = {f"edgeserve_stage[{s.value}]": i for i, s in enumerate(Stage)}
    return (0, order[name], "") if name in order else (1, 0, name)


def server_figures(before: Snapshot, after: Snapshot, duration_s: float) -> dict[str, Any]:
    """Stage breakdown and server stall fraction from two scrapes around a run of ``duration_s``."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, float] = defaultdict(float)
    for key, total in after.hist_sum.items():
        family, labels = key
        if not family.endswith("_seconds") or not family.startswith(SERVER_PREFIXES):
            continue  # e.g. the HTTP framework's own request-duration histograms
        # other labels (model_name, engine, …) are summed over; a stage label stays separate
        name = _stage_name(family, tuple((k, v) for k, v in labels if k == "stage"))
        sums[name] += total - before.hist_sum.get(key, 0.0)
        counts[name] += after.hist_count.get(key, 0.0) - before.hist_count.get(key, 0.0)
    stage_mean_ms = {n: 1000.0 * sums[n] / counts[n] for n in sorted(sums, key=_pipeline_order)
                     if counts[n] > 0}
    counter_s: dict[str, float] = {}
    for key, value in after.counters.items():
        family = key[0]
        if family.endswith("_seconds") and family.startswith(SERVER_PREFIXES):
            counter_s[family] = counter_s.get(family, 0.0) + value - before.counters.get(key, 0.0)
    stall_s = sum(v for f, v in counter_s.items() if "stall" in f) if any(
        "stall" in f for f in counter_s) else None
    engine = {f: v for f, v in counter_s.items() if "busy" in f and "gpu" not in f}
    busy_s = sum(engine.values()) if engine else None
    # NVML busy time summed over GPUs (edgeserve_gpu_busy_seconds, one series per GPU)
    gpu = {f: v for f, v in counter_s.items() if "gpu_busy" in f}
    gpu_busy_s = sum(gpu.values()) if gpu else None
    return {
        "stage_mean_ms": stage_mean_ms,
        "counter_seconds": counter_s,
        "stall_s": stall_s,
        "stall_fraction": None if stall_s is None or duration_s <= 0 else stall_s / duration_s,
        "engine_busy_fraction": None if busy_s is None or duration_s <= 0 else busy_s / duration_s,
        "gpu_busy_fraction": None if gpu_busy_s is None or duration_s <= 0
        else gpu_busy_s / duration_s,
    }


def has_settling_counters(snap: Snapshot) -> bool:
    """Does the server settle its seconds counters periodically (edgeserve does, vLLM not)?"""
    return any(f.startswith("edgeserve") and f.endswith("_seconds") for f, _ in snap.counters)
