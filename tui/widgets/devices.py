"""Devices panel (simulations): temperature against trip points, clock level, battery, offload.

For an ``edgeserve gateway`` (live or replayed) it shows the gateway's decisions instead
(:mod:`tui.widgets.gateway_view`).

A device with a thermal network (junction and skin nodes, a clock per unit) adds a line with its
skin temperature and every unit's clock level; below the devices, the latest stage migrations
(the encoder leaving a hot NPU, image work leaving a hot big cluster) with their reasons.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from edgeserve.records import DeviceSample
from tui.sources.base import Panel
from tui.state import DeviceView
from tui.widgets.base import PanelWidget, View, sparkline
from tui.widgets.gateway_view import draw_gateway


class DevicesPanel(PanelWidget):
    """One block per simulated device.

    The temperature bar runs from ambient to a little above the highest trip point; ``|`` marks
    each trip point where the device steps its clock down. Then the DVFS level (0 = fastest) with
    its service-time stretch, power, battery, the share of requests offloaded so far, and the
    device's queue. For a device with a thermal network the bar is the junction (die) and a
    second line gives the skin and each unit's level and stretch (a throttled unit highlighted).
    The newest ``MIGRATIONS_SHOWN`` stage migrations of all devices close the panel.
    """

    MIGRATIONS_SHOWN = 5

    PANEL = Panel.DEVICES
    TITLE = "devices"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "devices--label",
        "devices--temp",
        "devices--hot",
        "devices--trip",
        "devices--spark",
        "devices--migration",
    }

    def partial(self, view: View) -> bool:
        """A trace or server without device samples may still be a gateway's: show its decisions."""
        return view.snapshot.gateway is not None

    def draw(self, view: View, width: int) -> Text:
        devs = view.snapshot.devices
        gw = view.snapshot.gateway
        if not devs and gw is None:
            return Text("no device samples yet", style="italic")
        t = Text(no_wrap=True, overflow="ellipsis")
        if gw is not None:
            draw_gateway(t, gw, width, self.style_of("devices--label"),
                         self.style_of("devices--spark"))
        for d in devs:
            self._device(t, d, width)
        moves = view.snapshot.migrations[-self.MIGRATIONS_SHOWN:]
        if moves:
            t.append("migrations\n", self.style_of("devices--label"))
            for m in moves:
                t.append(f"  {m.t_s:7.1f} s {m.device} {m.stage} {m.from_unit}→{m.to_unit}  ",
                         self.style_of("devices--migration"))
                t.append(f"{m.reason}\n")
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
        if s.skin_temp_c is not None or s.units:
            self._network(t, s)
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

    def _network(self, t: Text, s: DeviceSample) -> None:
        """Skin temperature and each unit's clock, for a device with a thermal network."""
        t.append("  ")
        if s.skin_temp_c is not None:
            t.append(f"skin {s.skin_temp_c:5.1f}°C ")
        for u in s.units:
            style = self.style_of("devices--hot") if u.level else None
            t.append(f" {u.unit} L{u.level} ×{u.scale:.2f}", style or "")
        t.append("\n")
