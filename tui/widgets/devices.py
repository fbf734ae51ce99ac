"""Devices panel (simulations): temperature against trip points, clock level, battery, offload."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.sources.base import Panel
from tui.state import DeviceView
from tui.widgets.base import PanelWidget, View, sparkline


class DevicesPanel(PanelWidget):
    """One block per simulated device.

    The temperature bar runs from ambient to a little above the highest trip point; ``|`` marks
    each trip point where the device steps its clock down. Then the DVFS level (0 = fastest) with
    its service-time stretch, power, battery, the share of requests offloaded so far, and the
    device's queue.
    """

    PANEL = Panel.DEVICES
    TITLE = "devices"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "devices--label",
        "devices--temp",
        "devices--hot",
        "devices--trip",
        "devices--spark",
    }

    def draw(self, view: View, width: int) -> Text:
        devs = view.snapshot.devices
        if not devs:
            return Text("no device samples yet", style="italic")
        t = Text(no_wrap=True, overflow="ellipsis")
        for d in devs:
            self._device(t, d, width)
        return t

    def _device(self, t: Text, d: DeviceView, width: int) -> None:
        s, info = d.sample, d.info
        trips = info.trip_temps_c if info else ()
        lo = info.ambient_c if info else min(25.0, s.temp_c)
        hi = max([s.temp_c + 5, *(x + 10 for x in trips)]) if trips else max(100.0, s.temp_c)
        name_w = min(12, max(len(s.device), 6))
        bar_w = max(10, min(40, width - name_w - 9))
        fill = round((s.temp_c - lo) / max(1e-9, hi - lo) * bar_w)
        cells = ["█" if i < fill else "░" for i in range(bar_w)]
        trip_at = {min(bar_w - 1, max(0, round((x - lo) / (hi - lo) * bar_w))) for x in trips}
        t.append(f"{s.device[:name_w]:<{name_w}} ", self.style_of("devices--label"))
        t.append(f"{s.temp_c:5.1f}°C ")
        temp_style = self.style_of("devices--hot" if s.throttled else "devices--temp")
        for i, ch in enumerate(cells):
            if i in trip_at:
                t.append("|", self.style_of("devices--trip"))
            else:
                t.append(ch, temp_style)
        t.append("\n")
        levels = f"/{info.clock_levels - 1}" if info and info.clock_levels > 1 else ""
        t.append(f"  clock L{s.clock_level}{levels} ×{s.clock_scale:.2f}  {s.power_w:.1f} W")
        if s.battery_wh is not None:
            cap = info.battery_capacity_wh if info else None
            pct = f" ({s.battery_wh / cap * 100:.0f}%)" if cap else ""
            t.append(f"  batt {s.battery_wh:.2f} Wh{pct}")
        t.append("\n")
        line = f"  offload {s.offload_share * 100:.0f}%  queue {s.queue}  run {s.running}  "
        t.append(line)
        t.append(
            sparkline(d.temp_history, max(0, width - len(line))), self.style_of("devices--spark")
        )
        t.append("\n")
