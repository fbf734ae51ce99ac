"""Run specifications that can cross process boundaries (process pools, Ray).

A :class:`RunSpec` holds the raw scenario mapping (profiles inlined) plus overrides, policy and
seed; :func:`run_spec` builds and runs it and returns a :class:`RunResult`: the summary plus the
small things plots need (the fleet latency CDF and per-device time series). Both are plain,
picklable data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import scenario_from_raw
from sim.report import Summary
from sim.simulation import Simulation


@dataclass(slots=True)
class RunSpec:
    raw: dict[str, Any]  # scenario mapping with profiles inlined
    policy: str | dict[str, Any] | None = None  # name, {"kind":…, "params":…}, or the scenario's
    seed: int | None = None
    overrides: list[tuple[str, Any]] = field(default_factory=list)
    trace_path: str | None = None
    label: dict[str, Any] = field(default_factory=dict)  # sweep coordinates, for tables
    series: bool = True  # per-device time series in the result (plots); sweeps need none


@dataclass(slots=True)
class RunResult:
    spec_label: dict[str, Any]
    summary: Summary
    cdf: tuple[list[float], list[float]]
    series: dict[str, dict[str, tuple[list[float], list[float]]]]  # device → name → (t, v)
    wall_s: float = 0.0


def _policy_arg(p: str | dict[str, Any] | None) -> Any:
    if p is None or isinstance(p, str):
        return p
    from sim.config import PolicyConfig
    from sim.schema import build

    return build(PolicyConfig, p, "policy")


def run_spec(spec: RunSpec, progress: bool = False) -> RunResult:
    import time

    t0 = time.perf_counter()
    scenario = scenario_from_raw(spec.raw, None, spec.overrides)
    sim = Simulation(scenario, policy=_policy_arg(spec.policy), seed=spec.seed,
                     trace_path=spec.trace_path)
    summary = sim.run(progress=progress)
    fleet = sim.stats.fleet()
    series = {} if not spec.series else {
        name: {
            "temp_c": (tl.temp_c.t, tl.temp_c.v),
            "clock_level": (tl.clock_level.t, tl.clock_level.v),
            "offload_share": (tl.offload_share.t, tl.offload_share.v),
            "decisions": (tl.decisions.t, tl.decisions.v),
            "offloads": (tl.offloads.t, tl.offloads.v),
            "power_w": (tl.power_w.t, tl.power_w.v),
            "battery_wh": (tl.battery_wh.t, tl.battery_wh.v),
        }
        for name, tl in sim.stats.timelines.items()
    }
    return RunResult(spec.label, summary, fleet.e2e.cdf_points(), series,
                     time.perf_counter() - t0)


# ---- confidence intervals ------------------------------------------------------------------

# two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % confidence interval (Student t; 0 for one value)."""
    vals = [x for x in xs if x is not None and not math.isnan(x)]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan
    m = sum(vals) / n
    if n == 1:
        return m, 0.0
    var = sum((x - m) ** 2 for x in vals) / (n - 1)
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return m, t * math.sqrt(var / n)


def run_many(specs: list[RunSpec], workers: int = 1, use_ray: bool = False) -> list[RunResult]:
    """Run specs on this process, a local process pool, or the Ray cluster found by
    ``ray.init(address="auto")`` (see :mod:`sim.distribute`); results in the order of ``specs``."""
    from sim.distribute import ExecConfig, run_all

    return run_all(specs, ExecConfig(workers=max(1, workers),
                                     ray_address="auto" if use_ray else None))


def load_raw(path: str | Path | None) -> tuple[dict[str, Any], Path]:
    """A scenario file (or the default) as a raw mapping with profiles inlined."""
    from sim.config import SCENARIO_DIR, inline_profiles
    from sim.schema import load_yaml

    p = Path(path) if path is not None else SCENARIO_DIR / "default.yaml"
    if path is not None and not p.exists() and (SCENARIO_DIR / f"{path}.yaml").exists():
        p = SCENARIO_DIR / f"{path}.yaml"
    return inline_profiles(load_yaml(p), p.parent), p
