"""Latency and throughput figures of a run, under the key names of ``vllm bench serve``.

The JSON written by ``edgeserve bench run --save-result`` can be read by anything that reads
``vllm bench serve --save-result`` output: ``completed``, ``failed``, ``total_input_tokens``,
``total_output_tokens``, ``request_throughput``, ``request_goodput``, ``output_throughput``,
``total_token_throughput``, ``max_output_tokens_per_s``, ``max_concurrent_requests`` and for each of ``ttft``, ``tpot``,
``itl`` and ``e2el`` the keys ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and
``p<P>_<m>_ms``. Percentiles are numpy's linear-interpolation percentiles, as in vLLM. Where
vLLM reports 0 for a metric with no samples, this report gives ``null``: an empty run should not
look infinitely fast.

*Goodput* is the rate of completed requests that met every given SLO (``ttft``, ``tpot``,
``e2el`` in milliseconds), as in vLLM's ``--goodput``.

Additional keys (not in vLLM): ``stall_fraction`` (see :func:`client_stall_fraction`),
``mean_image_bytes``, ``mean_image_pixels``, and ``server`` for figures read from the server's
own ``/metrics`` (stage breakdown).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from edgeserve.bench.client import RequestResult

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
SLO_METRICS = frozenset({"ttft", "tpot", "e2el"})


def percentile_key(metric: str, p: float) -> str:
    """``("ttft", 99.0)`` → ``"p99_ttft_ms"``; ``("itl", 99.9)`` → ``"p99.9_itl_ms"`` (vLLM's form)."""
    word = str(int(p)) if int(p) == p else str(p)
    return f"p{word}_{metric}_ms"


def latency_stats(
    name: str, values_s: Sequence[float], percentiles: Iterable[float] = DEFAULT_PERCENTILES
) -> dict[str, float | None]:
    """``mean_/median_/std_/pXX_<name>_ms`` of values given in seconds (None when empty)."""
    arr = np.asarray(values_s, dtype=float) * 1000.0
    empty = arr.size == 0
    out: dict[str, float | None] = {
        f"mean_{name}_ms": None if empty else float(arr.mean()),
        f"median_{name}_ms": None if empty else float(np.median(arr)),
        f"std_{name}_ms": None if empty else float(arr.std()),
    }
    for p in percentiles:
        out[percentile_key(name, p)] = None if empty else float(np.percentile(arr, p))
    return out


def parse_goodput(specs: Iterable[str]) -> dict[str, float]:
    """``["ttft:2000", "e2el:5000"]`` → ``{"ttft": 2000.0, "e2el": 5000.0}`` (milliseconds)."""
    slo: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition(":")
        name = name.strip().lower()
        if not sep or name not in SLO_METRICS:
            raise ValueError(f"bad SLO {spec!r}: use ttft:MS, tpot:MS or e2el:MS")
        try:
            slo[name] = float(value)
        except ValueError:
            raise ValueError(f"bad SLO {spec!r}: {value!r} is not a number of milliseconds") from None
        if slo[name] <= 0:
            raise ValueError(f"bad SLO {spec!r}: must be > 0 ms")
    return slo


def meets_slo(r: RequestResult, slo_ms: Mapping[str, float]) -> bool:
    """Did a completed request meet every SLO? (TPOT counts as 0 for one-token answers, as in vLLM.)"""
    if not r.ok:
        return False
    observed_ms = {"ttft": r.ttft_s * 1e3, "tpot": (r.tpot_s or 0.0) * 1e3, "e2el": r.e2e_s * 1e3}
    return all(observed_ms[k] <= v for k, v in slo_ms.items())


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def client_stall_fraction(
    results: Sequence[RequestResult], duration_s: float, prefill_s: float = 0.0
) -> float | None:
    """Share of the run in which the engine was idle while a request waited upstream of it.

    Seen from the client, request *i* is in the engine from ``first token − prefill_s`` (its
    prefill, vision encoder included) to its last token, and *waits upstream* — HTTP, image
    preprocessing, queueing for a worker or for the engine — from its send until then. When some
    request waits upstream and no request is in the engine, the engine idles while work exists:
    a stall. ``prefill_s`` is the server's mean prefill time over the run (from
    ``vllm:request_prefill_time_seconds``, which edgeserve exports too); with 0 the prefill counts
    as waiting and the estimate errs high by it. It errs low when the engine serves some requests
    while others wait in preprocessing (capacity unused, but not idle). It needs nothing else
    from the server, so it is the same yardstick for edgeserve and a stock vLLM server.
    ``None`` when nothing completed.
    """
    done = [r for r in results if r.ok]
    if not done or duration_s <= 0:
        return None
    engine_in = [r.start_s + max(0.0, r.ttft_s - prefill_s) for r in done]
    waiting = _merge([(r.start_s, t) for r, t in zip(done, engine_in, strict=True)])
    in_engine = _merge([(t, r.start_s + r.e2e_s) for r, t in zip(done, engine_in, strict=True)])
    # stall = |waiting \ in_engine| = |waiting| − |waiting ∩ in_engine|
    overlap, j = 0.0, 0
    for a, b in waiting:
        while j < len(in_engine) and in_engine[j][1] <= a:
            j += 1
        k = j
        while k < len(in_engine) and in_engine[k][0] < b:
            overlap += min(b, in_engine[k][1]) - max(a, in_engine[k][0])
            k += 1
    stall_s = _union_length(waiting) - overlap
    return max(0.0, stall_s) / duration_s


def per_second_peaks(results: Sequence[RequestResult]) -> tuple[float, int]:
    """``(max_output_tokens_per_s, max_concurrent_requests)`` computed as ``vllm bench serve`` does.

    Time from the first send is cut into whole seconds; a token counts in the second it arrived
    (first token at start + TTFT, the others after each ITL), a request counts as concurrent in
    every second from its send to its last token, both included. The peaks are the largest bins.
    """
    done = [r for r in results if r.ok]
    if not done:
        return 0.0, 0
    t_min = min(r.start_s for r in done)
    n_bins = math.ceil(max(r.start_s + r.e2e_s for r in done) - t_min) + 1
    tokens = np.zeros(n_bins)
    concurrent = np.zeros(n_bins)
    for r in done:
        times = r.start_s + r.ttft_s + np.concatenate([[0.0], np.cumsum(r.itl_s)])
        bins = (times - t_min).astype(int)
        np.add.at(tokens, bins[(bins >= 0) & (bins < n_bins)], 1)
        concurrent[int(r.start_s - t_min) : int(r.start_s + r.e2e_s - t_min) + 1] += 1
    return float(tokens.max()), int(concurrent.max())


def summarize(
    results: Sequence[RequestResult],
    duration_s: float,
    percentiles: Iterable[float] = DEFAULT_PERCENTILES,
    goodput_slo_ms: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The metrics of one run (see the module docstring for the keys)."""
    percentiles = tuple(percentiles)
    done = [r for r in results if r.ok]
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    out: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(done),
        "failed": len(results) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration_s,
        "request_goodput": (
            sum(meets_slo(r, goodput_slo_ms) for r in done) / duration_s if goodput_slo_ms else None
        ),
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
    }
    out["max_output_tokens_per_s"], out["max_concurrent_requests"] = per_second_peaks(results)
    tpots = [t for r in done if (t := r.tpot_s) is not None]
    out |= latency_stats("ttft", [r.ttft_s for r in done], percentiles)
    out |= latency_stats("tpot", tpots, percentiles)
    out |= latency_stats("itl", [x for r in done for x in r.itl_s], percentiles)
    out |= latency_stats("e2el", [r.e2e_s for r in done], percentiles)
    out["stall_fraction"] = client_stall_fraction(results, duration_s)
    out["mean_image_bytes"] = float(np.mean([r.image_bytes for r in results])) if results else 0.0
    out["mean_image_pixels"] = float(np.mean([r.image_pixels for r in results])) if results else 0.0
    errors: dict[str, int] = {}
    for r in results:
        if not r.ok:
            errors[r.error[:120]] = errors.get(r.error[:120], 0) + 1
    out["error_counts"] = errors
    return out


def run_header(
    *,
    label: str,
    model_id: str,
    num_prompts: int,
    request_rate: float,
    burstiness: float,
    max_concurrency: int | None,
    base_url: str,
    workload: str,
) -> dict[str, Any]:
    """The setup keys that ``vllm bench serve --save-result`` puts before its metrics."""
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
        "request_rate": request_rate if not math.isinf(request_rate) else "inf",
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "base_url": base_url,
        "workload": workload,
    }


def detailed(results: Sequence[RequestResult], t0_s: float) -> dict[str, list[Any]]:
    """Per-request lists under vLLM's ``--save-detailed`` names (times in seconds)."""
    return {
        "input_lens": [r.prompt_tokens for r in results],
        "output_lens": [r.output_tokens if r.ok else 0 for r in results],
        "ttfts": [r.ttft_s if r.ok else 0.0 for r in results],
        "itls": [r.itl_s for r in results],
        "latencies": [r.e2e_s if r.ok else 0.0 for r in results],
        "start_times": [r.start_s - t0_s for r in results],
        "errors": [r.error for r in results],
    }


def _fmt(v: object, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.2f}{unit}"
    return f"{v}{unit}"


def format_summary(m: Mapping[str, Any], percentiles: Iterable[float] = DEFAULT_PERCENTILES) -> str:
    """A text block like ``vllm bench serve`` prints."""
    lines = [
        "{:=^60}".format(" Serving Benchmark Result "),
        f"{'Successful requests:':<44}{m['completed']}",
        f"{'Failed requests:':<44}{m['failed']}",
        f"{'Benchmark duration (s):':<44}{_fmt(m['duration'])}",
        f"{'Total input tokens:':<44}{m['total_input_tokens']}",
        f"{'Total generated tokens:':<44}{m['total_output_tokens']}",
        f"{'Request throughput (req/s):':<44}{_fmt(m['request_throughput'])}",
    ]
    if m.get("request_goodput") is not None:
        lines.append(f"{'Request goodput (req/s):':<44}{_fmt(m['request_goodput'])}")
    lines += [
        f"{'Output token throughput (tok/s):':<44}{_fmt(m['output_throughput'])}",
        f"{'Total token throughput (tok/s):':<44}{_fmt(m['total_token_throughput'])}",
        f"{'Stall fraction (client estimate):':<44}{_fmt(m.get('stall_fraction'))}",
    ]
    if m.get("server") is not None:
        from edgeserve.bench.throughput import CACHE_COUNTERS

        for name in CACHE_COUNTERS:
            rate = m["server"].get(f"{name}_hit_rate")
            title = "Prefix cache hit rate (tokens):" if name == "prefix_cache" else \
                "Multimodal cache hit rate (items):"
            lines.append(f"{title:<44}{'n/a' if rate is None else f'{rate:.1%}'}")
    titles = {"ttft": "Time to First Token", "tpot": "Time per Output Token (excl. 1st token)",
              "itl": "Inter-token Latency", "e2el": "End-to-end Latency"}
    for name, title in titles.items():
        lines.append(f"{' ' + title + ' ':-^60}")
        upper = name.upper()
        lines.append(f"{'Mean ' + upper + ' (ms):':<44}{_fmt(m.get(f'mean_{name}_ms'))}")
        lines.append(f"{'Median ' + upper + ' (ms):':<44}{_fmt(m.get(f'median_{name}_ms'))}")
        for p in percentiles:
            key = percentile_key(name, p)
            lines.append(f"{key.split('_')[0].upper() + ' ' + upper + ' (ms):':<44}{_fmt(m.get(key))}")
    server = m.get("server") or {}
    if server.get("stage_mean_ms"):
        lines.append("{:-^60}".format(" Server histograms: mean ms per observation "))
        for stage, ms in server["stage_mean_ms"].items():
            lines.append(f"{stage + ':':<44}{_fmt(ms)}")
    if server.get("stall_fraction") is not None:
        lines.append(f"{'Stall fraction (server):':<44}{_fmt(server['stall_fraction'])}")
    if server.get("engine_busy_fraction") is not None:
        lines.append(f"{'Engine busy fraction (step spans):':<44}"
                     f"{_fmt(server['engine_busy_fraction'])}")
    if server.get("gpu_busy_fraction") is not None:
        lines.append(f"{'GPU busy fraction (NVML):':<44}{_fmt(server['gpu_busy_fraction'])}")
    if m.get("error_counts"):
        lines.append("{:-^60}".format(" Errors "))
        for err, n in list(m["error_counts"].items())[:5]:
            lines.append(f"{n:>5} × {err}")
    from edgeserve.bench.throughput import throughput_line

    lines.append("=" * 60)
    lines.append(throughput_line(m))  # the three side by side, always
    return "\n".join(lines)
