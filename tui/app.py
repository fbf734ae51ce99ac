"""The Textual app: one source, one state, seven panels.

Every ``refresh_s`` a worker polls the source, folds what arrived into
:class:`~tui.state.PipelineState` and posts :class:`TuiApp.Refreshed`; the handler hands the new
:class:`~tui.widgets.base.View` to the panels. Nothing else runs on a timer, so with a 1 s refresh
the UI wakes about once a second however fast events arrive (the live source buffers them).
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.events import Key, Resize
from textual.message import Message
from textual.widgets import Footer, Input, Static

from tui.config import FULL_MIN_SIZE, Layout, TuiConfig, next_speed
from tui.host import HostProbe, PsutilProbe
from tui.sources.base import Panel, Source, SourceError
from tui.state import PipelineState
from tui.widgets.base import PanelWidget, View
from tui.widgets.devices import DevicesPanel
from tui.widgets.help import HelpScreen
from tui.widgets.overview import OverviewPanel
from tui.widgets.policy_picker import PolicyPicker
from tui.widgets.queues import QueuesPanel
from tui.widgets.request_detail import RequestDetail
from tui.widgets.system import SystemPanel
from tui.widgets.timeline import LABEL_W, TimelinePanel
from tui.widgets.waterfall import WaterfallPanel
from tui.widgets.workers import WorkersPanel

STEP_S = 1.0


class TuiApp(App[int]):
    """``edgeserve tui``: watch a live server, a simulation or a recorded trace.

    Args:
        source: What to watch.
        config: Refresh, layout and windows.
        host_probe: Reads this machine for the system panel (tests pass a fixed one).
    """

    CSS_PATH = "app.tcss"
    TITLE = "edgeserve tui"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("p", "pause", "pause"),
        Binding("slash", "filter", "filter"),
        Binding("tab", "cycle_panel(1)", "panel", priority=True),
        Binding("shift+tab", "cycle_panel(-1)", show=False, priority=True),
        *(Binding(str(p.value), f"panel({p.value})", show=False) for p in Panel),
        Binding("plus,equals_sign", "speed(1)", "faster"),
        Binding("minus", "speed(-1)", "slower"),
        Binding("s", "step", "step"),
        Binding("left_square_bracket", "seek(-10)", "-10s"),
        Binding("right_square_bracket", "seek(10)", "+10s"),
        Binding("left_curly_bracket", "seek(-60)", show=False),
        Binding("right_curly_bracket", "seek(60)", show=False),
        Binding("o", "policy", "policy"),
        Binding("d", "next_device", "device"),
    ]

    class Refreshed(Message):
        """A refresh finished: the panels should draw ``view``."""

        def __init__(self, view: View, status: str) -> None:
            super().__init__()
            self.view = view
            self.status = status

    def __init__(
        self,
        source: Source,
        config: TuiConfig | None = None,
        host_probe: HostProbe | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.config = config or TuiConfig()
        self.state = PipelineState(self.config.state)
        self.host_probe = host_probe
        self.filter = ""
        self.active = Panel.OVERVIEW
        self.frozen = False  # live sources: the view is held still
        self.policy: str | None = None
        self.last_status = ""
        self.last_view: View | None = None
        self.refreshes = 0
        self._busy = False
        self._started = False
        self._binding_keys: tuple[object, ...] = ()
        # widgets kept by reference: while a modal screen is up, queries would search that screen
        self._status = Static(self.source.description, id="status")
        self._filter_box = Input(
            placeholder="filter: words to match; slow>2 for e2e > 2 s", id="filter"
        )
        self._panel_box = Container(id="panels")
        self._panels: dict[Panel, PanelWidget] = {
            w.PANEL: w
            for w in (
                OverviewPanel(),
                QueuesPanel(),
                SystemPanel(),
                WorkersPanel(),
                TimelinePanel(),
                WaterfallPanel(),
                DevicesPanel(),
            )
        }

    # ---- composition ---------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield self._status
        with self._panel_box:
            yield from self._panels.values()
        yield self._filter_box
        yield Footer()

    def panels(self) -> dict[Panel, PanelWidget]:
        return self._panels

    async def on_mount(self) -> None:
        if self.host_probe is None:
            self.host_probe = PsutilProbe()
        self._apply_layout(self.size.width, self.size.height)
        self._activate(self.active)
        try:
            await self.source.start()
        except SourceError as e:
            self.exit(return_code=2, message=f"edgeserve tui: {e}")
            return
        self._started = True
        self.set_interval(self.config.refresh_s, self._tick)
        self._tick()

    async def on_unmount(self) -> None:
        if self._started:
            await self.source.stop()

    # ---- the refresh cycle ---------------------------------------------------------------
    def _tick(self) -> None:
        if not self._busy and not self.frozen:
            self._busy = True
            self._refresh_worker()

    @work(group="refresh")
    async def _refresh_worker(self) -> None:
        try:
            await self.refresh_data()
        finally:
            self._busy = False

    async def refresh_data(self) -> None:
        """Poll the source once, fold what came and post :class:`Refreshed`."""
        batch = await self.source.poll()
        if batch.reset:
            self.state.reset()
        self.state.fold(batch.items)
        self.state.advance(batch.now_s)
        # as many columns as the widest the timeline can be, whether it is shown or not, so that
        # what it draws does not depend on when it was last laid out
        cols = max(10, self.size.width - LABEL_W)
        view = View(
            snapshot=self.state.snapshot(timeline_columns=cols),
            why_empty=self.source.caps.why_empty,
            filter=self.filter,
            host=self.host_probe.read() if self.host_probe else None,
        )
        self.refreshes += 1
        self.post_message(self.Refreshed(view, batch.status))

    def on_tui_app_refreshed(self, msg: Refreshed) -> None:
        self.last_view = msg.view
        self.last_status = msg.status
        self._show_status()
        for w in self.panels().values():
            w.show(msg.view)
        keys = (
            self.source.caps,
            len(self.state.devices_seen) > 1,
            self.state.timeline.from_samples,
        )
        if keys != self._binding_keys:  # what the footer offers changed (rarely)
            self._binding_keys = keys
            self.refresh_bindings()

    def _show_status(self) -> None:
        parts = [self.source.description, self.last_status]
        if self.frozen:
            parts.append("PAUSED (view held; events are buffered)")
        if self.policy and f"policy {self.policy}" not in self.last_status:
            parts.append(f"policy {self.policy}")  # chosen; the source reports it on its next poll
        if self.filter:
            parts.append(f"filter: {self.filter}")
        parts.append("? help")
        # the status line has a fixed height: repaint it without a layout pass
        self._status.update(" │ ".join(p for p in parts if p), layout=False)

    def _redraw(self) -> None:
        """Draw the last view again (after a filter or layout change), without polling."""
        if self.last_view is not None:
            v = self.last_view
            self.last_view = View(v.snapshot, v.why_empty, self.filter, v.host)
            for w in self.panels().values():
                w.show(self.last_view)
        self._show_status()

    # ---- layout --------------------------------------------------------------------------
    def on_resize(self, event: Resize) -> None:
        self._apply_layout(event.size.width, event.size.height)

    def _apply_layout(self, width: int, height: int) -> None:
        layout = self.config.layout
        if layout is Layout.AUTO:
            full = width >= FULL_MIN_SIZE[0] and height >= FULL_MIN_SIZE[1]
            layout = Layout.FULL if full else Layout.COMPACT
        self._panel_box.set_class(layout is Layout.COMPACT, "-compact")
        self.call_after_refresh(self._redraw)

    def _activate(self, panel: Panel) -> None:
        self.active = panel
        for p, w in self.panels().items():
            w.set_class(p is panel, "-active")
        self.panels()[panel].focus()
        self.call_after_refresh(self._redraw)

    # ---- actions -------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide keys the source cannot honour (the footer then shows only what works)."""
        caps = self.source.caps
        if action in ("cycle_panel", "panel") and self.screen is not self.screen_stack[0]:
            return False
        if action == "speed":
            return caps.can_speed
        if action == "step":
            return caps.can_step
        if action == "seek":
            return caps.can_seek
        if action == "policy":
            return bool(caps.policies)
        if action == "next_device":
            return len(self.state.devices_seen) > 1 and not self.state.timeline.from_samples
        return True

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_pause(self) -> None:
        if self.source.caps.can_pause:
            self.source.set_paused(not self.source.paused)
            self._tick()
        else:
            self.frozen = not self.frozen
            self._show_status()
            self._tick()

    def action_speed(self, direction: int) -> None:
        self.source.set_speed(next_speed(self.source.speed, direction))
        self._tick()

    def action_step(self) -> None:
        if not self.source.paused:
            self.source.set_paused(True)
        self.source.step(STEP_S)
        self._tick()

    def action_seek(self, dt_s: float) -> None:
        now = self.state.now_s
        if now is not None:
            self.source.seek(now + dt_s)
            self._tick()

    def action_cycle_panel(self, direction: int) -> None:
        order = list(Panel)
        self._activate(order[(order.index(self.active) + direction) % len(order)])

    def action_panel(self, number: int) -> None:
        self._activate(Panel(number))

    def action_filter(self) -> None:
        box = self._filter_box
        box.value = self.filter
        box.add_class("-open")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter = event.value.strip()
        event.input.remove_class("-open")
        self._activate(Panel.WATERFALL)

    def on_key(self, event: Key) -> None:
        box = self._filter_box
        if event.key == "escape" and box.has_class("-open"):
            self.filter = ""
            box.remove_class("-open")
            self._activate(self.active)

    def action_policy(self) -> None:
        policies = self.source.caps.policies
        if not policies:
            return

        def chosen(name: str | None) -> None:
            if name:
                try:
                    self.source.set_policy(name)
                except SourceError as e:
                    self.notify(str(e), severity="error")
                    return
                self.policy = name
                self._show_status()

        current = self.policy or getattr(self.source, "policy", None)
        self.push_screen(PolicyPicker(policies, current), chosen)

    def action_next_device(self) -> None:
        seen = self.state.devices_seen
        if len(seen) > 1:
            cur = self.state.pipeline_device
            nxt = seen[(seen.index(cur) + 1) % len(seen)] if cur in seen else seen[0]
            self.state.select_device(nxt)
            self._tick()

    def on_waterfall_panel_opened(self, msg: WaterfallPanel.Opened) -> None:
        self.push_screen(RequestDetail(msg.record))
