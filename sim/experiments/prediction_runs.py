"""A scenario's latency figures with prediction intervals: ``edgeserve sim run --draws N``.

Each device entry whose profile carries an ``uncertainty`` section (a calibrated profile,
:mod:`sim.scenario.uncertainty`) gets, per draw, a profile drawn from it — coefficients and its
server's speed level, :func:`sim.fit.prediction.draw_profile` — and the scenario runs once per
draw with its own seed. A profile without the section runs as it is, so its interval holds only
the seeds' luck.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from sim.core.report import DeviceSummary
from sim.experiments.runner import RunSpec, run_spec
from sim.fit.prediction import DRAWS, LEVEL, draw_profile, has_uncertainty, intervals

FIGURES = (("e2e mean", "e2e_mean_s"), ("e2e p50", "e2e_p50_s"), ("e2e p90", "e2e_p90_s"),
           ("e2e p99", "e2e_p99_s"), ("ttft p50", "ttft_p50_s"), ("ttft p99", "ttft_p99_s"))


def uncertain(raw: Mapping[str, Any]) -> bool:
    """Whether some device entry's (inlined) profile has an uncertainty section."""
    return any(isinstance(d, Mapping) and isinstance(d.get("profile"), Mapping)
               and has_uncertainty(d["profile"]) for d in raw.get("devices", []))


def drawn_scenario(raw: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    out = copy.deepcopy(dict(raw))
    for d in out.get("devices", []):
        if isinstance(d, dict) and isinstance(d.get("profile"), Mapping):
            d["profile"] = draw_profile(d["profile"], rng)
    return out


def shown_row(summary: Any) -> DeviceSummary:
    """The row a summary's figures are read from: the only device, else the fleet."""
    devices: list[DeviceSummary] = summary.devices
    return devices[0] if len(devices) == 1 else summary.fleet


def figures(row: DeviceSummary) -> dict[str, float | None]:
    return {name: getattr(row, key) for name, key in FIGURES}


def run_intervals(spec: RunSpec, *, draws: int = DRAWS, seed: int = 0,
                  level: float = LEVEL) -> dict[str, tuple[float, float]]:
    """Each latency figure's ``level`` interval over ``draws`` runs of drawn scenarios, run
    ``k`` with seed ``spec.seed + 1000 + k`` (the scenario's seed when ``spec.seed`` is None)."""
    rng = np.random.default_rng(seed)
    base_seed = spec.seed if spec.seed is not None else int(spec.raw.get("seed", 0))
    out = []
    for k in range(draws):
        drawn = replace(spec, raw=drawn_scenario(spec.raw, rng), seed=base_seed + 1000 + k,
                        trace_path=None, series=False)
        out.append(figures(shown_row(run_spec(drawn).summary)))
    return intervals(out, level)


def format_intervals(point: DeviceSummary, ivs: Mapping[str, tuple[float, float]], draws: int,
                     level: float = LEVEL) -> str:
    """The point estimate of each figure with its interval, one line each, in ms."""
    lines = [f"{level * 100:.0f} % prediction intervals ({point.name}; {draws} runs, each with a "
             "profile drawn from its calibration's uncertainty and its own seed):"]
    for name, key in FIGURES:
        iv = ivs.get(name)
        if iv is None:
            continue
        lines.append(f"  {name:9s} {getattr(point, key) * 1e3:9.1f} ms   "
                     f"[{iv[0] * 1e3:.1f} … {iv[1] * 1e3:.1f} ms]")
    return "\n".join(lines)
