"""Workers panel: how busy each preprocessing worker and the engine are, and at what stage."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.sources.base import Panel
from tui.widgets.base import PanelWidget, View, bar, fmt_s


class WorkersPanel(PanelWidget):
    """One busy bar per CPU worker (share of the newest sample's interval) with its current stage,
    then the engine's busy share and the stall time of that interval.

    Without resource samples (a simulation, or a trace without them) the bars come from the
    request records of the current timeline column, and the current stage is unknown.
    """

    PANEL = Panel.WORKERS
    TITLE = "workers"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "workers--label",
        "workers--busy",
        "workers--engine",
        "workers--stall",
    }

    def draw(self, view: View, width: int) -> Text:
        w = view.snapshot.workers
        label = self.style_of("workers--label")
        bar_w = max(4, width - 25)
        t = Text(no_wrap=True, overflow="ellipsis")
        if not w.busy and w.engine_busy is None:
            return Text("no worker activity seen yet", style="italic")
        for i, busy in enumerate(w.busy):
            stage = w.stage[i] if i < len(w.stage) else ""
            t.append(f"{f'cpu{i}':<7}", label)
            t.append(bar(busy, bar_w), self.style_of("workers--busy"))
            t.append(f" {busy * 100:3.0f}% {stage or 'idle' if w.stage else ''}\n")
        if w.engine_busy is not None:
            t.append(f"{'engine':<7}", label)
            t.append(bar(w.engine_busy, bar_w), self.style_of("workers--engine"))
            t.append(f" {w.engine_busy * 100:3.0f}%\n")
        if not w.stage and w.busy:
            t.append("busy share of the last 10 s, from request records", "italic")
        if w.stall_s is not None:
            t.append(f"{'stall':<7}", label)
            t.append(
                f"{fmt_s(w.stall_s)} engine idle, work in CPU stages",
                self.style_of("workers--stall") if w.stall_s > 0 else "",
            )
        return t
