"""Pipeline timeline panel: one row per CPU worker and one for the engine, one column per second."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.sources.base import Panel
from tui.timeline import Cell, CellState
from tui.widgets.base import PanelWidget, View

LABEL_W = 7


def glyph(cell: Cell) -> str:
    """The character of one cell: its shape tells the state even without colors."""
    if cell.state is CellState.STALL:
        return "▒"
    if cell.state is CellState.BUSY:
        return "█" if cell.busy >= 0.75 else "▆"
    if cell.state is CellState.IDLE:
        return "▁" if cell.busy > 0 else "·"
    return " "


class TimelinePanel(PanelWidget):
    """Busy, idle and "engine waiting on CPU" over time, newest column on the right.

    ``█``/``▆`` busy (≥75 % / ≥50 % of the column), ``▁`` a little work, ``·`` idle, ``▒`` a
    stall: the engine idle while admitted requests sat in a CPU stage. See :mod:`tui.timeline`.
    """

    PANEL = Panel.TIMELINE
    TITLE = "pipeline timeline"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "timeline--label",
        "timeline--busy",
        "timeline--idle",
        "timeline--stall",
        "timeline--none",
    }

    def draw(self, view: View, width: int) -> Text:
        snap = view.snapshot
        styles = {
            CellState.BUSY: self.style_of("timeline--busy"),
            CellState.IDLE: self.style_of("timeline--idle"),
            CellState.STALL: self.style_of("timeline--stall"),
            CellState.NO_DATA: self.style_of("timeline--none"),
        }
        cols = max(1, width - LABEL_W)
        t = Text(no_wrap=True, overflow="crop")
        if not snap.timeline:
            return Text("no data yet", style="italic")
        for row in snap.timeline:
            t.append(f"{row.name:<{LABEL_W}}", self.style_of("timeline--label"))
            cells = row.cells[-cols:]
            t.append(" " * (cols - len(cells)))
            run_state: CellState | None = None
            run = ""
            for c in cells:
                if c.state is not run_state and run:
                    t.append(run, styles[run_state] if run_state else "")
                    run = ""
                run_state = c.state
                run += glyph(c)
            if run:
                t.append(run, styles[run_state] if run_state else "")
            t.append("\n")
        t.append("█ busy  ", styles[CellState.BUSY])
        t.append("· idle  ", styles[CellState.IDLE])
        t.append("▒ engine waiting on CPU", styles[CellState.STALL])
        src = "samples" if snap.timeline_from_samples else "request records"
        t.append(f"   1 col = {snap.timeline_bucket_s:g} s, from {src}")
        if snap.pipeline_device is not None:
            t.append(f" of {snap.pipeline_device} (d: next device)")
        return t
