"""Request waterfall: recent requests as stage bars on one time scale; Enter opens one."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import DataTable, Static

from edgeserve.records import Outcome, RequestRecord, Stage, stage_spans
from tui.sources.base import Panel
from tui.state import matches
from tui.widgets.base import PanelWidget, View, fmt_s

MAX_ROWS = 100
ID_W = 16
E2E_W = 8


def stage_class(stage: Stage) -> str:
    return f"stage--{stage.value}"


class WaterfallPanel(PanelWidget):
    """The newest finished requests (newest first), each a bar of its stages.

    All bars share one time scale, the longest end-to-end latency among the rows shown, so a slow
    request is a long bar. The filter (``/``) keeps requests matching every word (see
    :func:`tui.state.matches`). Enter on a row posts :class:`WaterfallPanel.Opened`.
    """

    PANEL = Panel.WATERFALL
    TITLE = "requests"
    COMPONENT_CLASSES: ClassVar[set[str]] = {stage_class(s) for s in Stage} | {"waterfall--failed"}

    class Opened(Message):
        """The user asked for the details of one request."""

        def __init__(self, record: RequestRecord) -> None:
            super().__init__()
            self.record = record

    def __init__(self) -> None:
        super().__init__()
        self.can_focus = False
        self._shown: list[RequestRecord] = []
        self._key: tuple[object, ...] = ()

    def compose(self) -> ComposeResult:
        yield DataTable(cursor_type="row", zebra_stripes=False)
        yield Static(id="waterfall-note")

    def render(self) -> Text:  # the table and the note draw themselves
        return Text()

    def show(self, view: View) -> None:
        self.view = view
        why = view.why_empty.get(self.PANEL)
        self.set_class(why is not None, "-empty")
        self.query_one("#waterfall-note", Static).update(why or "")
        if not self.display or why is not None:
            return
        recs = [r for r in reversed(view.snapshot.recent) if not view.filter or matches(r, view.filter)]
        recs = recs[:MAX_ROWS]
        table: DataTable[Text | str] = self.query_one(DataTable)
        width = max(10, table.size.width - ID_W - E2E_W - 16)
        key = (tuple(r.id for r in recs), width, view.filter)
        if key == self._key:
            return  # nothing new: rebuilding the table would only cost CPU
        self._key = key
        self._shown = recs
        scale = max((r.e2e_s or 0.0 for r in recs), default=0.0) or 1.0
        cursor = table.cursor_row
        # fixed column widths: auto-sizing would depend on when the table was first laid out
        table.clear(columns=True)
        table.add_column("request", width=ID_W)
        table.add_column("e2e", width=E2E_W)
        table.add_column("stages", width=width + 9)
        table.add_rows([(r.id[-ID_W:], fmt_s(r.e2e_s), self._bar(r, scale, width)) for r in recs])
        if recs:
            table.move_cursor(row=min(cursor, len(recs) - 1), animate=False)

    def _bar(self, r: RequestRecord, scale_s: float, width: int) -> Text:
        t = Text(no_wrap=True)
        cells = [" "] * width
        styles: list[str] = [""] * width
        for stage, a, b in stage_spans(r):
            lo = int((a - r.arrived_s) / scale_s * width)
            hi = max(lo + 1, int((b - r.arrived_s) / scale_s * width))
            style = self.style_of(stage_class(stage))
            for i in range(max(0, lo), min(width, hi)):
                cells[i], styles[i] = "█", style
        for ch, st in zip(cells, styles, strict=True):
            t.append(ch, st)
        if r.outcome is not Outcome.OK:
            t.append(f" {r.outcome.value}", self.style_of("waterfall--failed"))
        return t

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        i = event.cursor_row
        if 0 <= i < len(self._shown):
            self.post_message(self.Opened(self._shown[i]))

    def focus_table(self) -> None:
        self.query_one(DataTable).focus()
