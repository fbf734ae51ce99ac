"""Several policies on the same workload and seeds, with 95 % confidence intervals across seeds.

Each (policy, seed) pair is one run. Because workloads draw from their own seeded streams, every
policy sees exactly the same arrivals for a given seed; differences between policies are then
paired, not noise from different workloads. The table shows, per policy, the mean over seeds
and the half-width of its 95 % confidence interval (Student t over the seeds).
"""

from __future__ import annotations

from typing import Any

from sim.core.report import table
from sim.experiments.confidence import mean_ci95
from sim.experiments.distribute import run_many
from sim.experiments.runner import RunResult, RunSpec

METRICS: list[tuple[str, str, float, str]] = [
    # (summary field, column, scale, format)
    ("e2e_mean_s", "mean ms", 1000, ".0f"),
    ("e2e_p99_s", "p99 ms", 1000, ".0f"),
    ("slo_attainment", "SLO %", 100, ".1f"),
    ("throughput_rps", "req/s", 1, ".3g"),
    ("energy_per_request_j", "J/req", 1, ".3g"),
    ("throttled_share", "throttled %", 100, ".1f"),
    ("offload_share", "offload %", 100, ".1f"),
    ("dropped", "dropped", 1, ".0f"),
]


def compare(raw: dict[str, Any], policies: list[str], seeds: list[int], workers: int = 1,
            use_ray: bool = False, overrides: list[tuple[str, Any]] | None = None,
            trace_dir: str | None = None) -> list[RunResult]:
    specs = [
        RunSpec(raw=raw, policy=p, seed=s, overrides=list(overrides or []),
                trace_path=None if trace_dir is None else f"{trace_dir}/{p}-seed{s}.jsonl",
                label={"policy": p, "seed": s})
        for p in policies for s in seeds
    ]
    return run_many(specs, workers, use_ray)


def aggregate(results: list[RunResult], key: str = "policy") -> dict[Any, dict[str, tuple[float, float]]]:
    """Per value of ``key`` (policy): metric → (mean, 95 % CI half-width) over the runs."""
    groups: dict[Any, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.spec_label[key], []).append(r)
    return {
        k: {m: mean_ci95([float(getattr(r.summary.fleet, m)) for r in rs]) for m, *_ in METRICS}
        for k, rs in groups.items()
    }


def format_comparison(results: list[RunResult], key: str = "policy") -> str:
    agg = aggregate(results, key)
    n = len({r.spec_label.get("seed") for r in results})
    header = [key] + [c for _, c, _, _ in METRICS]
    rows = []
    for k, ms in agg.items():
        row = [str(k)]
        for m, _, scale, fmt in METRICS:
            mean, ci = ms[m]
            row.append(f"{mean * scale:{fmt}} ± {ci * scale:{fmt}}")
        rows.append(row)
    return f"fleet metrics, mean ± 95% CI over {n} seed(s)\n" + table(rows, header)
