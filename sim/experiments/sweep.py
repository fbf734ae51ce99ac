"""Parameter sweeps: a grid of scenario variants, run on a local process pool or on Ray.

A sweep axis is a dotted path into the scenario mapping (profiles inlined, so profile values can
be swept too) with a list of values, e.g. ``devices[0].link.uplink_mbps=5,20,80``. The grid is
the Cartesian product of the axes, times policies, times seeds. Each point is an independent run
(:func:`sim.experiments.runner.run_spec`), so the pool scales to the cores available; with a Ray address the
runs go to a Ray cluster instead, one task per run (:mod:`sim.experiments.distribute`).

Replicas or tensor parallelism? A cloud entry's ``deployment`` is part of the scenario, so
``cloud[0].deployment.tp_size=1,2,4`` is an axis like any other; on a box (``deployment.gpus``
set, replicas left out) each TP degree gets ``gpus / tp_size`` replicas, so the points compare
layouts of the same GPUs. With a rate axis last, :func:`verdict` names the best point per rate
and :func:`sim.experiments.plots.sweep_lines` draws p99 latency, TTFT p99 and SLO attainment against it.

Results come back as runs finish. With an output folder each one is written down at once
(:mod:`sim.experiments.sweep_store`), and a sweep started again on the same folder runs only what is missing.
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.core.report import table
from sim.experiments.compare import METRICS
from sim.experiments.confidence import mean_ci95
from sim.experiments.distribute import ExecConfig, run_stream
from sim.experiments.runner import RunResult, RunSpec
from sim.scenario.config import parse_override
from sim.scenario.schema import ConfigError


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


def specs_for(raw: dict[str, Any], axes: list[tuple[str, list[Any]]], policies: list[str | None],
              seeds: list[int]) -> list[RunSpec]:
    """One spec per grid point × policy × seed, every point validated before any runs."""
    specs = []
    for point in grid(axes):
        for p in policies:
            for s in seeds:
                label = {**point, "policy": p or "(scenario)", "seed": s}
                specs.append(RunSpec(raw=raw, policy=p, seed=s, overrides=list(point.items()),
                                     label=label, series=False))
    # validate every point before spending time on any (clear errors, not worker tracebacks)
    from sim.scenario.config import scenario_from_raw

    for spec in specs[:: max(1, len(policies) * len(seeds))]:
        scenario_from_raw(spec.raw, None, spec.overrides)
    return specs


@dataclass(slots=True)
class SweepRun:
    """What :func:`run_specs` did: every result (in spec order), and how many came from disk."""

    results: list[RunResult]
    reused: int = 0  # read back from the output folder's sweep-runs.jsonl
    ran: int = 0


def run_specs(specs: list[RunSpec], cfg: ExecConfig, out: str | Path | None = None,
              progress: bool = False) -> SweepRun:
    """Run what ``out`` does not hold yet, writing each run down as it finishes."""
    from tqdm import tqdm

    from sim.experiments.sweep_store import RunStore, run_key
    from sim.native import source_fingerprint

    store = RunStore(out) if out is not None else None
    sources = source_fingerprint()
    keys = [run_key(s, sources) for s in specs]
    results: list[RunResult | None] = [None] * len(specs)
    todo: list[int] = []
    for i, (spec, key) in enumerate(zip(specs, keys, strict=True)):
        old = store.runs.get(key) if store is not None else None
        if old is not None:
            results[i] = RunResult(spec.label, old.summary, old.cdf, {}, old.wall_s)
        else:
            todo.append(i)
    run = SweepRun([], reused=len(specs) - len(todo))
    with tqdm(total=len(specs), initial=run.reused, unit="run", desc="sweep",
              disable=not progress, mininterval=0.5, smoothing=0.1) as bar:
        for j, result in run_stream([specs[i] for i in todo], cfg):
            i = todo[j]
            results[i] = result
            if store is not None:
                store.add(keys[i], result)
            run.ran += 1
            bar.update(1)
    run.results = [r for r in results if r is not None]
    return run


def sweep(raw: dict[str, Any], axes: list[tuple[str, list[Any]]], policies: list[str | None],
          seeds: list[int], workers: int = 1, use_ray: bool = False, *,
          ray_address: str | None = None, out: str | Path | None = None,
          progress: bool = False, retries: int = 3) -> list[RunResult]:
    """The whole grid (see :func:`run_specs`); ``use_ray`` alone means ``ray_address="auto"``."""
    address = ray_address if ray_address is not None else ("auto" if use_ray else None)
    cfg = ExecConfig(workers=max(1, workers), ray_address=address, retries=retries)
    return run_specs(specs_for(raw, axes, policies, seeds), cfg, out, progress).results


#: what a sweep reports beyond :data:`sim.experiments.compare.METRICS`: the fleet's TTFT p99 and the cloud
#: servers' prefix-cache hit rate (hits / lookups over all of them; 0 without prefix caching)
SWEEP_METRICS: list[tuple[str, str, float, str]] = [
    *METRICS,
    ("ttft_p99_s", "ttft p99 ms", 1000, ".0f"),
    ("cloud_hit_rate", "cloud hit %", 100, ".1f"),
]


def _metric(r: RunResult, m: str) -> float:
    if m == "cloud_hit_rate":
        lookups = sum(c.prefix_lookups for c in r.summary.clouds)
        return sum(c.prefix_hits for c in r.summary.clouds) / lookups if lookups else 0.0
    return float(getattr(r.summary.fleet, m))


def rows(results: list[RunResult]) -> list[dict[str, Any]]:
    """Aggregate seeds: one row per grid point and policy, metric means and CI half-widths."""
    groups: dict[tuple[Any, ...], list[RunResult]] = {}
    for r in results:
        key = tuple((k, v) for k, v in r.spec_label.items() if k != "seed")
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        row: dict[str, Any] = dict(key)
        if rs[0].summary.clouds:  # replicas × TP of each cloud server (a box's follow tp_size)
            row["layout"] = " + ".join(f"{c.replicas}×TP{c.tp_size}"
                                       for c in rs[0].summary.clouds)
        row["seeds"] = len(rs)
        for m, *_ in SWEEP_METRICS:
            mean, ci = mean_ci95([_metric(r, m) for r in rs])
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


def coordinates(data: list[dict[str, Any]]) -> list[str]:
    """The keys of a row that name its grid point (axes and policy), in order."""
    return [k for k in data[0] if k not in {m for m, *_ in SWEEP_METRICS}
            and not k.endswith("_ci95") and k != "seeds"] if data else []


def _short_names(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its last part where no other key ends the same (``tp_size``)."""
    tails = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: t if tails.count(t) == 1 else k for k, t in zip(keys, tails, strict=True)}


def verdict(data: list[dict[str, Any]], x_key: str) -> list[str]:
    """Per value of ``x_key`` (a rate, say), the grid point with the highest SLO attainment,
    ties to the lower p99 latency: ``rate_hz=V: best tp_size=…, layout=… (SLO 99.5 %, p99 812
    ms); then …`` (keys by their last part where that is unambiguous).
    When nothing but ``x_key`` varies, one line ranks its values."""
    varying = [k for k in coordinates(data) if len({d[k] for d in data}) > 1]
    others = [k for k in varying if k not in (x_key, "layout")]  # (layout follows the axes)
    groups: dict[Any, list[dict[str, Any]]] = {}
    for d in data:
        groups.setdefault(d[x_key] if others else None, []).append(d)
    named = [k for k in varying if k != x_key] if others else varying
    short = _short_names(coordinates(data))

    def name(d: dict[str, Any]) -> str:
        return ", ".join(f"{short[k]}={d[k]}" for k in named)

    def figs(d: dict[str, Any]) -> str:
        return f"SLO {100 * d['slo_attainment']:.1f} %, p99 {1000 * d['e2e_p99_s']:.0f} ms"

    out = []
    for x, pts in groups.items():
        pts = sorted(pts, key=lambda d: (-d["slo_attainment"], d["e2e_p99_s"]))
        rest = "; ".join(f"{name(d)}: {figs(d)}" for d in pts[1:])
        out.append((f"{short[x_key]}={x}: " if others else "")
                   + f"best {name(pts[0])} ({figs(pts[0])})" + (f"; then {rest}" if rest else ""))
    return out


def format_sweep(data: list[dict[str, Any]]) -> str:
    if not data:
        return "(no runs)"
    keys = coordinates(data)
    header = keys + [c for _, c, _, _ in SWEEP_METRICS]
    body = []
    for d in data:
        row = [str(d[k]) for k in keys]
        for m, _, scale, fmt in SWEEP_METRICS:
            row.append(f"{d[m] * scale:{fmt}} ± {d[m + '_ci95'] * scale:{fmt}}")
        body.append(row)
    return table(body, header)
