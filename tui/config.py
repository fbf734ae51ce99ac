"""How the UI runs: refresh cadence, layout, speeds and aggregation windows."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tui.state import StateConfig

SPEEDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
"""The ladder that ``+`` and ``-`` move along (source seconds per wall second)."""


class Layout(enum.StrEnum):
    AUTO = "auto"  # compact below FULL_MIN_SIZE, full above
    COMPACT = "compact"  # one panel at a time; works at 80×24
    FULL = "full"  # all panels in a grid; wants about 160×48


FULL_MIN_SIZE = (120, 36)


@dataclass(slots=True, frozen=True)
class TuiConfig:
    """Everything the app needs besides its source.

    Attributes:
        refresh_s: Seconds between redraws; independent of how often data arrives.
        layout: See :class:`Layout`.
        state: Windows of the aggregation.
    """

    refresh_s: float = 1.0
    layout: Layout = Layout.AUTO
    state: StateConfig = field(default_factory=StateConfig)

    def __post_init__(self) -> None:
        if not 0.05 <= self.refresh_s <= 60:
            raise ValueError(f"refresh must be between 0.05 and 60 s, got {self.refresh_s}")


def next_speed(speed: float, direction: int) -> float:
    """The next rung of :data:`SPEEDS` above (``direction > 0``) or below the current speed."""
    if direction > 0:
        return next((s for s in SPEEDS if s > speed * 1.0001), SPEEDS[-1])
    return next((s for s in reversed(SPEEDS) if s < speed / 1.0001), SPEEDS[0])
