"""The help screen (``?``): keys, panels and what the timeline's glyphs mean."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]Keys[/b]
  q          quit                     ?        this help
  Tab / 1-7  next panel / panel N     /        filter requests (Esc clears)
  p          pause / resume           s        step one second (paused)
  + / -      speed up / down (sim, replay)
  [ / ]      seek -10 s / +10 s (replay)
  { / }      seek -60 s / +60 s (replay)
  o          switch offload policy (simulation, gateway)
  Enter      open the selected request (requests panel)

[b]Panels[/b]
  1 overview   requests/s, TTFT and ITL p50/p99 with history, errors
  2 queues     preprocessing queue and workers, engine waiting/running
  3 workers    busy share and stage per CPU worker; engine busy; stall
  4 timeline   one row per CPU worker and the engine, one column per second
  5 requests   recent requests as stage bars
  6 devices    simulated devices: temperature, clocks, battery; gateway decisions
  7 system     this host (psutil, NVML) and the server's processes

[b]Timeline[/b]
  █ ▆ busy   ▁ a little work   · idle   ▒ engine idle while work sat in a CPU stage

[b]Filter[/b] words that must all match id, outcome, device, placement, error or w<N>;
  slow>2 keeps requests slower than 2 s end to end.
"""


class HelpScreen(ModalScreen[None]):
    """Key bindings and legends; any of Escape, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP)

    def on_mount(self) -> None:
        self.query_one("#help").border_title = "help"

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
