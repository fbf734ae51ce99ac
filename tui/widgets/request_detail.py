"""A modal with one request's record: where it ran, its sizes and each stage's time."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from edgeserve.records import RequestRecord, stage_spans
from tui.widgets.base import fmt_s


def record_table(r: RequestRecord) -> Table:
    """The record as a two-part table: facts, then stages relative to arrival."""
    t = Table(show_header=True, box=None, expand=False, pad_edge=False)
    t.add_column("stage")
    t.add_column("start", justify="right")
    t.add_column("duration", justify="right")
    for stage, a, b in stage_spans(r):
        t.add_row(stage.value, fmt_s(a - r.arrived_s), fmt_s(b - a))
    t.add_row("", "", "")
    facts: list[tuple[str, object]] = [
        ("outcome", r.outcome.value + (f" — {r.error}" if r.error else "")),
        ("device / placement", f"{r.device or '—'} / {r.placement or '—'}"),
        ("decision", r.decision_reason or "—"),
        ("worker", "—" if r.worker is None else r.worker),
        (
            "image",
            f"{r.num_images}× {r.image_bytes} B  {r.source_width}×{r.source_height} → "
            f"{r.target_width}×{r.target_height}",
        ),
        (
            "tokens",
            f"image {r.image_tokens}  prompt {r.prompt_tokens}  "
            f"output {r.output_tokens}/{r.max_tokens}",
        ),
        ("TTFT / TPOT / e2e", f"{fmt_s(r.ttft_s)} / {fmt_s(r.tpot_s)} / {fmt_s(r.e2e_s)}"),
    ]
    for k, v in facts:
        t.add_row(k, "", str(v))
    return t


class RequestDetail(ModalScreen[None]):
    """Shows one :class:`~edgeserve.records.RequestRecord`; Escape or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "dismiss", "close")]

    def __init__(self, record: RequestRecord) -> None:
        super().__init__()
        self.record = record

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Static(record_table(self.record))

    def on_mount(self) -> None:
        self.query_one("#detail").border_title = f"request {self.record.id}"

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
