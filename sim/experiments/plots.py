"""Plots of runs: latency CDFs per policy, temperature and clock level, offload share over time.

Uses matplotlib's non-interactive Agg backend and writes PNG files; imported only when plots are
asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.experiments.runner import RunResult

if TYPE_CHECKING:
    from sim.fit.validate import Validation


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (PNG, folders made) and free it."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def latency_cdf(results: list[RunResult], path: Path, key: str = "policy") -> Path:
    """Fleet end-to-end latency CDF, one line per policy (first seed of each)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    seen = set()
    for r in results:
        name = str(r.spec_label.get(key, r.summary.policy))
        if name in seen:
            continue
        seen.add(name)
        xs, ys = r.cdf
        ax.step(xs, ys, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Latency CDF per policy")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save(fig, path)


def thermal(result: RunResult, path: Path) -> Path:
    """Temperature and clock level over time, per device."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for dev, s in result.series.items():
        t, v = s["temp_c"]
        ax1.plot(t, v, label=dev)
        t, v = s["clock_level"]
        ax2.step(t, v, where="post", label=dev)
    ax1.set_ylabel("temperature (°C)")
    ax1.set_title(f"Temperature and clock level — {result.summary.policy}")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.set_ylabel("clock level (0 = fastest)")
    ax2.set_xlabel("simulated time (s)")
    ax2.grid(True, alpha=0.3)
    return save(fig, path)


def offload_share(results: list[RunResult], path: Path, key: str = "policy",
                  windows: int = 60) -> Path:
    """Fleet share of decisions sent to the cloud over time, one line per policy (first seed),
    in ``windows`` equal time windows (per-interval shares of a few decisions are too noisy)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    seen = set()
    for r in results:
        name = str(r.spec_label.get(key, r.summary.policy))
        if name in seen or not r.series:
            continue
        seen.add(name)
        end = max((s["decisions"][0][-1] for s in r.series.values() if s["decisions"][0]),
                  default=0.0)
        if end <= 0:
            continue
        width = end / windows
        dec = [0.0] * (windows + 1)
        off = [0.0] * (windows + 1)
        for s in r.series.values():
            for (t, d), o in zip(zip(*s["decisions"], strict=True), s["offloads"][1], strict=True):
                i = min(windows, int(t / width))
                dec[i] += d
                off[i] += o
        xs = [(i + 0.5) * width for i in range(windows + 1) if dec[i] > 0]
        ys = [off[i] / dec[i] for i in range(windows + 1) if dec[i] > 0]
        ax.plot(xs, ys, marker=".", label=name)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("offload share (fleet)")
    ax.set_title("Offload share over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save(fig, path)


def sweep_lines(data: list[dict[str, Any]], x_key: str, path: Path) -> Path:
    """A sweep's p99 latency, TTFT p99 and SLO attainment against its axis ``x_key`` (a rate,
    say), one line per combination of the other axes — for ``tp_size=1,2,4`` on a box, one line
    per layout: where lines cross, replicas and TP trade places."""
    from sim.experiments.sweep import coordinates

    plt = pyplot()
    others = [k for k in coordinates(data) if k != x_key and len({d[k] for d in data}) > 1]
    xs_all = list(dict.fromkeys(d[x_key] for d in data))
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs_all)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    lines: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for d in data:
        lines.setdefault(tuple(d[k] for k in others), []).append(d)
    for key, pts in lines.items():
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(others, key, strict=True))
        xs = [p[x_key] if numeric else xs_all.index(p[x_key]) for p in pts]
        for ax, (m, scale) in zip(axes, (("e2e_p99_s", 1.0), ("ttft_p99_s", 1.0),
                                         ("slo_attainment", 100.0)), strict=True):
            ax.plot(xs, [p[m] * scale for p in pts], marker="o", label=label or "(sweep)")
    for ax, title in zip(axes, ("end-to-end p99 (s)", "TTFT p99 (s)", "SLO attainment (%)"),
                         strict=True):
        ax.set_xlabel(x_key)
        ax.set_ylabel(title)
        if not numeric:
            ax.set_xticks(range(len(xs_all)), [str(x) for x in xs_all])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    fig.suptitle(f"sweep over {x_key}", fontsize=10)
    return save(fig, path)


def all_plots(results: list[RunResult], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [latency_cdf(results, out_dir / "latency_cdf.png"),
             offload_share(results, out_dir / "offload_share.png")]
    seen = set()
    for r in results:
        name = str(r.spec_label.get("policy", r.summary.policy))
        if name not in seen:
            seen.add(name)
            paths.append(thermal(r, out_dir / f"thermal_{name}.png"))
    return paths


def validation_cdfs(v: Validation, path: Path) -> None:
    """TTFT and end-to-end CDFs of a held-out trace, measured beside simulated."""
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4))
    for ax, m in zip(axes, ("ttft", "e2e"), strict=True):
        for side, label in ((v.measured, "measured"), (v.simulated, "simulated")):
            xs = np.sort(np.asarray(side.samples[m])) * 1e3
            if len(xs):
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=label)
        ax.set_xlabel(f"{m.upper()} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{Path(v.trace).name}: measured vs simulated ({v.profile})")
    save(fig, path)
