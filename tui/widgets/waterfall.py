"""Request waterfall: recent requests as stage bars on one time scale; Enter opens one."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message

from edgeserve.records import Outcome, RequestRecord, Stage, stage_spans
from tui.sources.base import Panel
from tui.state import matches
from tui.widgets.base import PanelWidget, View, fmt_s

MAX_ROWS = 200
ID_W = 16
E2E_W = 9


def stage_class(stage: Stage) -> str:
    return f"stage--{stage.value}"


class WaterfallPanel(PanelWidget):
    """The newest finished requests (newest first), each a bar of its stages.

    All bars share one time scale, the longest end-to-end latency among the rows shown, so a slow
    request is a long bar. The filter (``/``) keeps requests matching every word (see
    :func:`tui.state.matches`). Up/down move the cursor; Enter posts
    :class:`WaterfallPanel.Opened`. Only the rows that fit are drawn: at hundreds of requests a
    second, drawing what nobody sees would cost the watched machine CPU.
    """

    PANEL = Panel.WATERFALL
    TITLE = "requests"
    COMPONENT_CLASSES: ClassVar[set[str]] = {stage_class(s) for s in Stage} | {
        "waterfall--failed",
        "waterfall--cursor",
        "waterfall--header",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "move(-10)", show=False),
        Binding("pagedown", "move(10)", show=False),
        Binding("home", "move(-1000000)", show=False),
        Binding("enter", "open", "open", show=False),
    ]

    class Opened(Message):
        """The user asked for the details of one request."""

        def __init__(self, record: RequestRecord) -> None:
            super().__init__()
            self.record = record

    def __init__(self) -> None:
        super().__init__()
        self.cursor = 0
        self._rows: list[RequestRecord] = []
        self._stage_styles: dict[Stage, str] = {}
        self._failed = ""

    def show(self, view: View) -> None:
        self.view = view
        self.set_class(self.PANEL in view.why_empty, "-empty")
        recs = view.snapshot.recent
        rows: list[RequestRecord] = []
        for r in reversed(recs):  # newest first; stop once enough match
            if not view.filter or matches(r, view.filter):
                rows.append(r)
                if len(rows) >= MAX_ROWS:
                    break
        self._rows = rows
        self.cursor = min(self.cursor, max(0, len(rows) - 1))
        if self.display:
            self.redraw()

    @property
    def rows(self) -> list[RequestRecord]:
        """The requests listed, newest first (after the filter)."""
        return self._rows

    def draw(self, view: View, width: int) -> Text:
        height = max(1, self.content_size.height - 1)
        first = max(0, self.cursor - height + 1)
        shown = self._rows[first : first + height]
        bar_w = max(10, width - ID_W - E2E_W - 2)
        scale = max((r.e2e_s or 0.0 for r in shown), default=0.0) or 1.0
        self._stage_styles = {s: self.style_of(stage_class(s)) for s in Stage}
        self._failed = self.style_of("waterfall--failed")
        t = Text(no_wrap=True, overflow="crop")
        head = f"{'request':<{ID_W}} {'e2e':>{E2E_W - 1}}  stages (scale {fmt_s(scale)})"
        t.append(head[:width], self.style_of("waterfall--header"))
        if not shown:
            t.append("\nno requests" + (" match the filter" if view.filter else " yet"), "italic")
        for i, r in enumerate(shown, start=first):
            t.append("\n")
            row = Text(f"{r.id[-ID_W:]:<{ID_W}} {fmt_s(r.e2e_s):>{E2E_W - 1}}  ")
            row.append_text(self._bar(r, scale, bar_w))
            if i == self.cursor and self.has_focus:
                row.stylize(self.style_of("waterfall--cursor"))
            t.append_text(row)
        return t

    def _bar(self, r: RequestRecord, scale_s: float, width: int) -> Text:
        """The stages as runs of ``█`` in their colors (one append per stage, not per cell)."""
        t = Text(no_wrap=True)
        pos = 0
        for stage, a, b in stage_spans(r):
            lo = max(pos, int((a - r.arrived_s) / scale_s * width))
            hi = min(width, max(lo + 1, int((b - r.arrived_s) / scale_s * width)))
            if hi <= lo:
                continue
            if lo > pos:
                t.append(" " * (lo - pos))
            t.append("█" * (hi - lo), self._stage_styles[stage])
            pos = hi
        if r.outcome is not Outcome.OK:
            t.append(" " * max(0, width - pos) + f" {r.outcome.value}", self._failed)
        return t

    def action_move(self, delta: int) -> None:
        self.cursor = min(max(0, self.cursor + delta), max(0, len(self._rows) - 1))
        self.redraw()

    def action_open(self) -> None:
        if 0 <= self.cursor < len(self._rows):
            self.post_message(self.Opened(self._rows[self.cursor]))

    def on_focus(self) -> None:
        self.redraw()

    def on_blur(self) -> None:
        self.redraw()
