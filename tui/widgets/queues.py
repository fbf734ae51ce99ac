"""Queues panel: requests waiting for and inside preprocessing, and in the engine."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.sources.base import Panel
from tui.widgets.base import PanelWidget, View, bar, fmt_n, sparkline


class QueuesPanel(PanelWidget):
    """Queue depths from the newest resource sample, each with a bar and its history.

    Bars share one scale (the largest depth in the shown history), so a growing preprocessing
    queue next to an empty engine queue reads at a glance as "the CPU is the bottleneck".
    A stock vLLM server reports only its engine queues; the preprocessing rows then say why.
    """

    PANEL = Panel.QUEUES
    TITLE = "queues"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "queues--label",
        "queues--bar",
        "queues--spark",
        "queues--note",
    }

    def partial(self, view: View) -> bool:
        q = view.snapshot.queues
        return q.engine_waiting is not None or q.preproc_queue is not None

    def draw(self, view: View, width: int) -> Text:
        q = view.snapshot.queues
        label = self.style_of("queues--label")
        rows = [
            ("preproc queue", q.preproc_queue, "preproc_queue"),
            ("preproc running", q.preproc_running, "preproc_running"),
            ("engine waiting", q.engine_waiting, "engine_waiting"),
            ("engine running", q.engine_running, "engine_running"),
        ]
        scale = max(
            [1.0]
            + [float(v) for _, v, _ in rows if v is not None]
            + [max(q.history.get(k, (0.0,)), default=0.0) for _, _, k in rows]
        )
        bar_w = max(4, min(20, (width - 24) // 2))
        spark_w = max(0, width - 24 - bar_w)
        t = Text(no_wrap=True, overflow="ellipsis")
        for name, value, key in rows:
            t.append(f"{name:<16}", label)
            if value is None:
                t.append("     n/a", self.style_of("queues--note"))
                if Panel.QUEUES in view.why_empty:
                    t.append("  " + view.why_empty[Panel.QUEUES], self.style_of("queues--note"))
                t.append("\n")
                continue
            t.append(f"{fmt_n(value):>5}  ")
            t.append(bar(value / scale, bar_w), self.style_of("queues--bar"))
            t.append(" ")
            t.append(sparkline(q.history.get(key, ()), spark_w), self.style_of("queues--spark"))
            t.append("\n")
        if q.kv_cache_usage is not None:
            t.append(f"{'KV cache':<16}", label)
            t.append(f"{q.kv_cache_usage * 100:>4.0f}%  ")
            t.append(bar(q.kv_cache_usage, bar_w), self.style_of("queues--bar"))
        return t
