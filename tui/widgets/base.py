"""What all panels share: the view they render, a base class, and small text functions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from tui.host import HostStats
from tui.sources.base import Panel
from tui.state import Snapshot

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(slots=True, frozen=True)
class View:
    """Everything a panel may draw at one refresh.

    Attributes:
        snapshot: The folded state of the source.
        why_empty: Panels the source cannot fill, with the reason.
        filter: The waterfall filter (``/``), empty for none.
        host: This machine, for the system panel.
    """

    snapshot: Snapshot
    why_empty: Mapping[Panel, str] = field(default_factory=dict)
    filter: str = ""
    host: HostStats | None = None


class PanelWidget(Widget, can_focus=True):
    """A bordered panel that draws one :class:`View`.

    Subclasses set ``PANEL`` and ``TITLE`` and implement :meth:`draw`. A panel whose source cannot
    fill it shows the reason instead (and gets the ``-empty`` class).
    """

    PANEL: ClassVar[Panel]
    TITLE: ClassVar[str]

    def __init__(self) -> None:
        super().__init__(id=self.PANEL.name.lower(), classes="panel")
        self.border_title = f"{self.PANEL.value} {self.TITLE}"
        self.view: View | None = None
        self._drawn: Text | None = None
        self._strips: list[Strip] | None = None
        self._strips_width = 0
        self._styles: dict[str, str] = {}

    def show(self, view: View) -> None:
        """Take a new view; repaint only if shown and only if the drawing changed.

        Hidden panels cost nothing, and an unchanged panel costs one comparison of two texts
        instead of a repaint: most of the UI's CPU goes into repainting, not into the data.
        """
        self.view = view
        self.set_class(self.PANEL in view.why_empty and not self.partial(view), "-empty")
        if self.display:
            self.redraw()

    def redraw(self, force: bool = False) -> None:
        """Compose the drawing again and repaint if it differs (or if ``force``)."""
        text = self._compose_text()
        if force or text != self._drawn:
            self._drawn = text
            self.refresh()

    def partial(self, view: View) -> bool:
        """Whether the panel draws what it has despite a ``why_empty`` note (default: no)."""
        return False

    @property
    def drawing(self) -> Text:
        """What the panel shows now (tests read it; the screen gets it line by line)."""
        if self._drawn is None:
            self._drawn = self._compose_text()
        return self._drawn

    def render_line(self, y: int) -> Strip:
        """One line of the drawing (Textual's line API).

        The drawing is cut into lines with Rich once per change and the lines are handed out
        as they are asked for: about half the cost of Textual's general path for a renderable,
        which matters at one full repaint a second on a machine that is busy serving.
        """
        width = self.size.width
        if self._drawn is None:
            self._drawn = self._compose_text()
        if self._strips is None or self._strips_width != width:
            console = self.app.console
            base = self.rich_style
            lines = console.render_lines(
                self._drawn,
                console.options.update(width=width, height=None, no_wrap=True),
                style=base,
                pad=True,
            )
            self._strips = [Strip(line, width) for line in lines]
            self._strips_width = width
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, self.rich_style)

    def refresh(self, *regions: Region, **kwargs: Any) -> Self:
        self._strips = None
        return super().refresh(*regions, **kwargs)

    def on_resize(self) -> None:
        self._drawn = None  # widths changed: compose again on the next render
        self._strips = None

    def notify_style_update(self) -> None:
        self._styles.clear()  # the theme or the CSS changed
        self._drawn = None
        self._strips = None
        super().notify_style_update()

    def _compose_text(self) -> Text:
        v = self.view
        if v is None:
            return Text("waiting for data…", style="italic")
        why = v.why_empty.get(self.PANEL)
        if why is not None and not self.partial(v):
            return Text(why, style="italic")
        return self.draw(v, max(1, self.content_size.width))

    def draw(self, view: View, width: int) -> Text:
        raise NotImplementedError

    def style_of(self, name: str) -> str:
        """The rich style of a component class (colors live in app.tcss), cached: looking it up
        costs more than drawing a line."""
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = str(self.get_component_rich_style(name, partial=True))
        return style


def sparkline(values: Sequence[float], width: int) -> str:
    """The last ``width`` values as block characters scaled to their own maximum."""
    vals = list(values)[-width:] if width > 0 else []
    if not vals:
        return ""
    top = max(vals)
    if top <= 0:
        return SPARK[0] * len(vals)
    return "".join(SPARK[min(7, int(v / top * 7.999))] if v > 0 else SPARK[0] for v in vals)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of ``width`` cells filled to ``fraction`` (eighth-cell resolution)."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    return s.ljust(width)


def fmt_s(x: float | None) -> str:
    """A duration for people: ``850 µs``, ``12.3 ms``, ``1.25 s``, ``—`` when unknown."""
    if x is None or math.isnan(x):
        return "—"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if x < 1:
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g} s"


def fmt_n(x: float | None, unit: str = "") -> str:
    if x is None:
        return "—"
    s = f"{x:.0f}" if abs(x) >= 100 or float(x).is_integer() else f"{x:.3g}"
    return s + unit
