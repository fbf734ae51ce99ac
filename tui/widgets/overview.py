"""Overview panel: requests/s, TTFT and inter-token latency with history, errors."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.sources.base import Panel
from tui.widgets.base import PanelWidget, View, fmt_n, fmt_s, sparkline


class OverviewPanel(PanelWidget):
    """Headline rates and latencies.

    requests/s counts finished requests over the rate window; TTFT (time to first token) and ITL
    (inter-token latency) percentiles cover the percentile window; each line ends in a sparkline
    of its history (one point per second of source time). Errors are non-OK outcomes in the window.
    """

    PANEL = Panel.OVERVIEW
    TITLE = "overview"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "overview--label",
        "overview--spark",
        "overview--error",
    }

    def draw(self, view: View, width: int) -> Text:
        o = view.snapshot.overview
        label = self.style_of("overview--label")
        spark = self.style_of("overview--spark")
        t = Text(no_wrap=True, overflow="ellipsis")
        rows = [
            ("requests/s", f"{fmt_n(o.requests_per_s):>8}", "rps"),
            ("TTFT p50", f"{fmt_s(o.ttft_p50_s):>8}", "ttft_p50"),
            ("TTFT p99", f"{fmt_s(o.ttft_p99_s):>8}", "ttft_p99"),
            ("ITL  p50", f"{fmt_s(o.itl_p50_s):>8}", "itl_p50"),
            ("ITL  p99", f"{fmt_s(o.itl_p99_s):>8}", "itl_p99"),
        ]
        spark_w = max(0, width - 22)
        for name, value, key in rows:
            t.append(f"{name:<11}", label)
            t.append(value + "  ")
            t.append(sparkline(o.history.get(key, ()), spark_w), spark)
            t.append("\n")
        err_style = self.style_of("overview--error") if o.errors else ""
        t.append(f"{'errors':<11}", label)
        t.append(f"{o.errors:>8}", err_style)
        if o.errors_by_outcome:
            t.append("  " + ", ".join(f"{k} {n}" for k, n in sorted(o.errors_by_outcome.items())))
        t.append("\n")
        t.append(f"{'finished':<11}", label)
        t.append(f"{o.finished_total:>8}")
        for line in o.last_errors[-2:]:
            t.append("\n")
            t.append(line, err_style)
        return t
