"""PNG plots of benchmark results (matplotlib, Agg backend: no display needed).

* :func:`plot_latency_cdfs` — empirical CDFs of TTFT and end-to-end latency, one line per run.
* :func:`plot_rate_curves` — against offered request rate: completed throughput, TTFT p50/p99
  (with the sustainability bound) and the stall fraction, one line per system.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class RateSweep(Protocol):
    """Results at several offered rates (an :class:`edgeserve.bench.sweep.SweepResult`): one
    result dict per rate, and the TTFT p99 bound a sustained rate keeps."""

    @property
    def ttft_p99_bound_ms(self) -> float: ...
    @property
    def points(self) -> list[dict[str, Any]]: ...


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency_cdfs(runs: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """TTFT and E2E latency CDFs of each run (``cdf_ttft_s`` / ``cdf_e2el_s`` of its result)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for label, result in runs.items():
        for ax, key in zip(axes, ("cdf_ttft_s", "cdf_e2el_s"), strict=True):
            values = np.sort(np.asarray(result.get(key) or [], dtype=float)) * 1000.0
            if values.size:
                ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=label)
    for ax, title in zip(axes, ("time to first token", "end-to-end latency"), strict=True):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(_null_formatter())
        ax.set_xlabel(f"{title} (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(title)
    if runs:
        axes[1].legend(fontsize=7, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_rate_curves(sweeps: Mapping[str, RateSweep], path: Path, title: str = "") -> Path:
    """Throughput, TTFT p50/p99 and stall fraction against offered rate, one line per system."""
    plt = _pyplot()
    fig, (ax_tp, ax_ttft, ax_stall) = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    bound = None
    max_rate = 0.0
    for i, (name, sweep) in enumerate(sweeps.items()):
        color = f"C{i}"
        bound = sweep.ttft_p99_bound_ms
        pts = sorted(sweep.points, key=lambda p: float(p["request_rate"]))
        rate = [float(p["request_rate"]) for p in pts]
        max_rate = max([max_rate, *rate])
        ax_tp.plot(rate, [p["request_throughput"] for p in pts], "o-", color=color, label=name)
        p50 = [_nan(p.get("median_ttft_ms")) for p in pts]
        p99 = [_nan(p.get("p99_ttft_ms")) for p in pts]
        ax_ttft.plot(rate, p99, "o-", color=color, label=f"{name} p99")
        ax_ttft.plot(rate, p50, "s--", color=color, alpha=0.6, label=f"{name} p50")
        ax_stall.plot(rate, [_nan(p.get("stall_fraction")) for p in pts], "o-", color=color,
                      label=f"{name} (client estimate)")
        server_stall = [_nan((p.get("server") or {}).get("stall_fraction")) for p in pts]
        if not all(np.isnan(server_stall)):
            ax_stall.plot(rate, server_stall, "^:", color=color, label=f"{name} (server counter)")
    ax_tp.plot([0, max_rate], [0, max_rate], ":", color="grey", label="offered")
    ax_tp.set_ylabel("completed requests/s")
    ax_tp.set_title("throughput")
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("TTFT (ms, log scale)")
    ax_ttft.set_title("time to first token")
    if bound is not None:
        ax_ttft.axhline(bound, color="red", lw=0.8, ls=":", label=f"p99 bound {bound:g} ms")
    ax_stall.set_ylabel("fraction of run")
    ax_stall.set_ylim(0, 1)
    ax_stall.set_title("stall (engine idle while a request waits)")
    for ax in (ax_tp, ax_ttft, ax_stall):
        ax.set_xlabel("offered request rate (req/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _null_formatter() -> Any:
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def _nan(v: float | None) -> float:
    return float("nan") if v is None else float(v)
