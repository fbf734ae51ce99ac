"""A request-rate sweep: where does a server stop keeping up?

One rate hides where a system breaks. A sweep offers increasing open-loop rates (Poisson by
default), one run per rate, and records throughput and TTFT p50/p99 against offered load. A rate
is *sustained* when every request completed and the TTFT p99 stayed within a bound: past
saturation the queue grows for as long as requests keep coming, and the p99 with it. That is
why each rate runs for the same *duration* by default (more requests at higher rates): a fixed
small count at a high rate is over before a queue can build up, and would look sustained.

The **max sustainable rate** is the highest tested rate that was sustained; the *interpolated*
figure is where the TTFT p99 curve crosses the bound between that rate and the next (linear in
rate), which is finer than the rate grid.

Images stay unique over the whole sweep (each run numbers its images after the previous run's),
so no run profits from a server cache filled by an earlier one. Before the first rate a few
unmeasured warm-up requests absorb one-off start-up costs (first-request compilation, pools
spawning).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edgeserve.bench.arrivals import ArrivalConfig, arrival_offsets_s
from edgeserve.bench.report import percentile_key
from edgeserve.bench.run import RunConfig, run_benchmark

WARMUP_IMAGE_BASE = 1_000_000  # image numbers of warm-up requests (never reused by runs)


@dataclass(slots=True, frozen=True)
class SweepConfig:
    base: RunConfig  # server, workload, report options; its arrivals are replaced per rate
    rates_rps: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
    duration_per_rate_s: float | None = 20.0  # each rate sends for this long …
    requests_per_rate: int | None = None  # … or this many requests (exactly one of the two)
    burstiness: float = 1.0
    ttft_p99_bound_ms: float = 2000.0
    warmup_requests: int = 4
    stop_when_saturated: bool = True  # skip higher rates once one rate clearly failed

    def __post_init__(self) -> None:
        if not self.rates_rps:
            raise ValueError("a sweep needs at least one rate")
        if any(not r > 0 or math.isinf(r) for r in self.rates_rps):
            raise ValueError(f"sweep rates must be finite and > 0 req/s, got {self.rates_rps}")
        if list(self.rates_rps) != sorted(self.rates_rps):
            raise ValueError(f"sweep rates must increase, got {self.rates_rps}")
        if (self.duration_per_rate_s is None) == (self.requests_per_rate is None):
            raise ValueError("give exactly one of a duration and a request count per rate")
        if self.requests_per_rate is not None and self.requests_per_rate < 2:
            raise ValueError("need at least 2 requests per rate")
        if self.duration_per_rate_s is not None and self.duration_per_rate_s <= 0:
            raise ValueError("the duration per rate must be > 0 s")
        if self.ttft_p99_bound_ms <= 0:
            raise ValueError("the TTFT p99 bound must be > 0 ms")
        if self.warmup_requests < 0:
            raise ValueError("warm-up requests must be >= 0")
        if 99.0 not in self.base.percentiles:
            raise ValueError("a sweep needs the 99th percentile among the percentiles")


@dataclass(slots=True)
class SweepResult:
    """The runs of one sweep (one result dict per rate, in rate order) and what they show."""

    ttft_p99_bound_ms: float
    points: list[dict[str, Any]] = field(default_factory=list)

    def sustained(self, point: dict[str, Any]) -> bool:
        return is_sustained(point, self.ttft_p99_bound_ms)

    @property
    def max_rate_rps(self) -> float | None:
        """Highest tested rate sustained (None if none was)."""
        return max_sustained_rate(self.points, self.ttft_p99_bound_ms)

    @property
    def max_rate_interp_rps(self) -> float | None:
        return interpolated_max_rate(self.points, self.ttft_p99_bound_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "ttft_p99_bound_ms": self.ttft_p99_bound_ms,
            "max_sustained_rate": self.max_rate_rps,
            "max_sustained_rate_interp": self.max_rate_interp_rps,
            "points": self.points,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepResult:
        return cls(ttft_p99_bound_ms=float(data["ttft_p99_bound_ms"]), points=list(data["points"]))


def is_sustained(point: dict[str, Any], bound_ms: float) -> bool:
    """Every request completed and the TTFT p99 stayed within ``bound_ms``."""
    p99 = point.get(percentile_key("ttft", 99.0))
    return point["failed"] == 0 and point["completed"] > 0 and p99 is not None and p99 <= bound_ms


def max_sustained_rate(points: list[dict[str, Any]], bound_ms: float) -> float | None:
    """The highest offered rate whose run was sustained; rates above a failed one do not count."""
    best = None
    for p in sorted(points, key=lambda p: float(p["request_rate"])):
        if not is_sustained(p, bound_ms):
            break
        best = float(p["request_rate"])
    return best


def interpolated_max_rate(points: list[dict[str, Any]], bound_ms: float) -> float | None:
    """Where TTFT p99 crosses ``bound_ms``, linear between the last sustained and the next rate.

    Equal to :func:`max_sustained_rate` when the next rate failed by failures, not latency, or
    when no higher rate was tried.
    """
    ordered = sorted(points, key=lambda p: float(p["request_rate"]))
    best = max_sustained_rate(ordered, bound_ms)
    if best is None:
        return None
    rates = [float(p["request_rate"]) for p in ordered]
    i = rates.index(best)
    if i + 1 >= len(ordered) or ordered[i + 1]["failed"] or not ordered[i + 1]["completed"]:
        return best
    key = percentile_key("ttft", 99.0)
    r1, t1 = best, float(ordered[i][key])
    r2, t2 = rates[i + 1], float(ordered[i + 1][key])
    if t2 <= t1:
        return best
    return r1 + (bound_ms - t1) * (r2 - r1) / (t2 - t1)


def _clearly_saturated(point: dict[str, Any], bound_ms: float) -> bool:
    """Far past the knee: higher rates can only be worse and would take long to drain."""
    p99 = point.get(percentile_key("ttft", 99.0))
    return point["completed"] == 0 or point["failed"] > point["num_prompts"] // 2 or (
        p99 is not None and p99 > 3 * bound_ms
    )


async def warm_up(config: RunConfig, n: int) -> None:
    """Send ``n`` requests one at a time and forget them."""
    if n <= 0:
        return
    warm = replace(
        config,
        arrivals=ArrivalConfig(num_requests=n, max_concurrency=1, seed=config.arrivals.seed),
        label="warm-up",
        first_image_number=WARMUP_IMAGE_BASE + config.first_image_number,
        print_dataset_stats=False,
    )
    await run_benchmark(warm)


async def run_sweep(config: SweepConfig, log: Any = print) -> SweepResult:
    """Warm up, then one run per rate (lowest first)."""
    base = config.base
    await warm_up(base, config.warmup_requests)
    result = SweepResult(ttft_p99_bound_ms=config.ttft_p99_bound_ms)
    first_image = base.first_image_number
    for i, rate in enumerate(config.rates_rps):
        arrivals = ArrivalConfig(
            rate_rps=rate,
            burstiness=config.burstiness,
            num_requests=config.requests_per_rate,
            duration_s=config.duration_per_rate_s,
            seed=base.workload.seed + i,
        )
        run_cfg = replace(
            base,
            arrivals=arrivals,
            label=f"{base.label or 'sweep'} @ {rate:g} req/s",
            first_image_number=first_image,
        )
        first_image += len(arrival_offsets_s(arrivals))
        point = await run_benchmark(run_cfg)
        result.points.append(point)
        log(_point_line(point, config.ttft_p99_bound_ms))
        if config.stop_when_saturated and _clearly_saturated(point, config.ttft_p99_bound_ms):
            log(f"  saturated at {rate:g} req/s; higher rates skipped (--keep-going runs them)")
            break
    return result


def _point_line(p: dict[str, Any], bound_ms: float) -> str:
    p99 = p.get(percentile_key("ttft", 99.0))
    p50 = p.get("median_ttft_ms")
    stall = p.get("stall_fraction")
    return (
        f"  {p['label']}: {p['request_throughput']:.2f} req/s done, "
        f"TTFT p50 {_ms(p50)} p99 {_ms(p99)}, stall {_frac(stall)}, failed {p['failed']}"
        f"{'' if is_sustained(p, bound_ms) else '  (not sustained)'}"
    )


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f} ms"


def _frac(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def format_sweep_table(sweeps: dict[str, SweepResult]) -> str:
    """Markdown table: one row per (system, rate), then the max sustained rate per system."""
    rows = [
        "| system | offered req/s | done req/s | TTFT p50 ms | TTFT p99 ms | E2E p99 ms | stall | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, sweep in sweeps.items():
        for p in sweep.points:
            rows.append(
                f"| {name} | {float(p['request_rate']):g} | {p['request_throughput']:.2f} | "
                f"{_num(p.get('median_ttft_ms'))} | {_num(p.get(percentile_key('ttft', 99.0)))} | "
                f"{_num(p.get(percentile_key('e2el', 99.0)))} | {_frac(p.get('stall_fraction'))} | "
                f"{p['failed']} |"
            )
    rows.append("")
    rows.append("| system | max sustained req/s (tested) | interpolated | TTFT p99 bound ms |")
    rows.append("|---|---:|---:|---:|")
    for name, sweep in sweeps.items():
        rows.append(
            f"| {name} | {_num(sweep.max_rate_rps, 2)} | {_num(sweep.max_rate_interp_rps, 2)} | "
            f"{sweep.ttft_p99_bound_ms:g} |"
        )
    return "\n".join(rows)


def _num(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def save_sweep(sweeps: dict[str, SweepResult], out_dir: Path) -> list[Path]:
    """``sweep.json`` (all points, vLLM key names) and the plots, into ``out_dir``."""
    from edgeserve.bench.plots import plot_latency_cdfs, plot_rate_curves

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "sweep.json"
    path.write_text(json.dumps({n: s.to_json() for n, s in sweeps.items()}, indent=1))
    curves = out_dir / "rate_curves.png"
    plot_rate_curves(sweeps, curves)
    cdfs = out_dir / "ttft_cdf.png"
    plot_latency_cdfs(
        {f"{n} @ {float(p['request_rate']):g}": p for n, s in sweeps.items() for p in s.points},
        cdfs,
    )
    return [path, curves, cdfs]


def run_sweep_sync(config: SweepConfig) -> SweepResult:
    return asyncio.run(run_sweep(config))
