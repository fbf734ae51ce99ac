"""Parameter sweeps: a grid of scenario variants, run on a local process pool or on Ray.

A sweep axis is a dotted path into the scenario mapping (profiles inlined, so profile values can
be swept too) with a list of values, e.g. ``devices[0].link.uplink_mbps=5,20,80``. The grid is
the Cartesian product of the axes, times policies, times seeds. Each point is an independent run
(:func:`sim.runner.run_spec`), so the pool scales to the cores available; with ``use_ray`` the
runs go to a Ray cluster instead (only when ``ray`` is importable).
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Any

from sim.compare import METRICS
from sim.config import parse_override
from sim.report import table
from sim.runner import RunResult, RunSpec, mean_ci95, run_many
from sim.schema import ConfigError


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """``key.path=v1,v2,v3`` → (``key.path``, [v1, v2, v3]) with YAML-parsed values."""
    key, value = parse_override(text)
    if isinstance(value, str):
        import yaml

        values = [yaml.safe_load(v) for v in value.split(",")]
    elif isinstance(value, list):
        values = value
    else:
        values = [value]
    if not values:
        raise ConfigError(f"{text!r}: an axis needs at least one value")
    return key, values


def grid(axes: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(vals for _, vals in axes))]


def sweep(raw: dict[str, Any], axes: list[tuple[str, list[Any]]], policies: list[str | None],
          seeds: list[int], workers: int = 1, use_ray: bool = False) -> list[RunResult]:
    specs = []
    for point in grid(axes):
        for p in policies:
            for s in seeds:
                label = {**point, "policy": p or "(scenario)", "seed": s}
                specs.append(RunSpec(raw=raw, policy=p, seed=s, overrides=list(point.items()),
                                     label=label))
    # validate every point before spending time on any (clear errors, not worker tracebacks)
    from sim.config import scenario_from_raw

    for spec in specs[:: max(1, len(policies) * len(seeds))]:
        scenario_from_raw(spec.raw, None, spec.overrides)
    return run_many(specs, workers, use_ray)


def rows(results: list[RunResult]) -> list[dict[str, Any]]:
    """Aggregate seeds: one row per grid point and policy, metric means and CI half-widths."""
    groups: dict[tuple[Any, ...], list[RunResult]] = {}
    for r in results:
        key = tuple((k, v) for k, v in r.spec_label.items() if k != "seed")
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        row: dict[str, Any] = dict(key)
        row["seeds"] = len(rs)
        for m, *_ in METRICS:
            mean, ci = mean_ci95([float(getattr(r.summary.fleet, m)) for r in rs])
            row[m] = mean
            row[f"{m}_ci95"] = ci
        out.append(row)
    return out


def write_csv(path: str | Path, data: list[dict[str, Any]]) -> None:
    if not data:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(data[0]))
        w.writeheader()
        w.writerows(data)


def format_sweep(data: list[dict[str, Any]]) -> str:
    if not data:
        return "(no runs)"
    keys = [k for k in data[0] if k not in {m for m, *_ in METRICS}
            and not k.endswith("_ci95") and k != "seeds"]
    header = keys + [c for _, c, _, _ in METRICS]
    body = []
    for d in data:
        row = [str(d[k]) for k in keys]
        for m, _, scale, fmt in METRICS:
            row.append(f"{d[m] * scale:{fmt}} ± {d[m + '_ci95'] * scale:{fmt}}")
        body.append(row)
    return table(body, header)
