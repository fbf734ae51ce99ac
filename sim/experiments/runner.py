"""Run specifications that can cross process boundaries (process pools, Ray).

A :class:`RunSpec` holds the raw scenario mapping (profiles inlined) plus overrides, policy and
seed; :func:`run_spec` builds and runs it and returns a :class:`RunResult`: the summary plus the
small things plots need (the fleet latency CDF and per-device time series). Both are plain,
picklable data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.core.report import Summary
from sim.core.simulation import Simulation
from sim.scenario.config import PolicyConfig, scenario_from_raw
from sim.scenario.schema import build


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
