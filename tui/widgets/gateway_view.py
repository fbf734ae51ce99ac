"""The devices panel's view of an ``edgeserve gateway``: decisions per target per second, cache
hits, and the policy's inputs over time.

One row per placement (``local:<name>``, ``cloud:<name>``, ``cache``, ``drop``) with a sparkline
of its decisions per second on one scale for all rows, then one row per policy input (local queue,
predicted local and cloud latency, temperature, battery) with the last value of each second;
a second without decisions is blank there. Counts are drawn from zero, the other inputs from the
lowest value shown, so that a slow drift of temperature or charge is visible. ``o`` switches the gateway's policy live.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

from tui.gateway import GatewayView
from tui.widgets.base import SPARK, fmt_s

LABEL_W = 12
INPUT_LABELS = {"queue": "queue", "local_s": "pred local", "cloud_s": "pred cloud",
                "temp_c": "temp °C", "battery": "battery"}


def spark_on(values: Sequence[float], top: float) -> str:
    """Block characters on a common ``top``; a missing value (``nan``) is a blank."""
    out = []
    for v in values:
        if math.isnan(v):
            out.append(" ")
        elif top <= 0 or v <= 0:
            out.append(SPARK[0])
        else:
            out.append(SPARK[min(7, int(v / top * 7.999))])
    return "".join(out)


def _fmt_input(name: str, v: float) -> str:
    if math.isnan(v):
        return "—"
    if name in ("local_s", "cloud_s"):
        return fmt_s(v)
    if name == "battery":
        return f"{v * 100:.0f}%"
    if name == "queue":
        return f"{v:.0f}"
    return f"{v:.1f}"


def _last(values: Sequence[float]) -> float:
    return next((v for v in reversed(values) if not math.isnan(v)), math.nan)


def draw_gateway(t: Text, g: GatewayView, width: int, label_style: str, spark_style: str) -> None:
    """Append the gateway view to ``t`` for a panel ``width`` cells wide."""
    hits = f"{g.cache_hits} ({g.cache_hits / g.total * 100:.0f}%)" if g.total else "0"
    t.append("gateway", label_style)
    t.append(f"  {g.total} decisions  cache hits {hits}\n")
    spark_w = max(5, min(len(g.seconds), width - LABEL_W - 12))
    t.append(f"decisions per second, last {spark_w} s\n", label_style)
    top = max((max(c[-spark_w:]) for c in g.counts.values()), default=0)
    for p in g.placements:
        c = g.counts[p][-spark_w:]
        t.append(f"  {p[:LABEL_W - 2]:<{LABEL_W - 2}} ")
        t.append(spark_on([float(x) for x in c], float(top)), spark_style)
        t.append(f" {c[-1]:>3}/s  {sum(c):>4}\n")
    t.append("policy inputs\n", label_style)
    for name, vals in g.inputs.items():
        v = vals[-spark_w:]
        known = [x for x in v if not math.isnan(x)]
        # a count from zero; latency, temperature and charge from their lowest value shown
        lo = 0.0 if name == "queue" or not known else min(known)
        t.append(f"  {INPUT_LABELS[name]:<{LABEL_W - 2}} ")
        t.append(spark_on([x - lo for x in v], max(known, default=0.0) - lo), spark_style)
        t.append(f" {_fmt_input(name, _last(v)):>8}\n")
    if g.last_reason:
        t.append("  last: ", label_style)
        t.append(f"{g.last_reason}\n")
