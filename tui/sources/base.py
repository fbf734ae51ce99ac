"""What every data source behind the UI offers, and the items it hands over.

The UI watches one of three things: a recorded trace (:mod:`tui.sources.replay`), a simulation
running in this process (:mod:`tui.sources.simulation`) or a live server
(:mod:`tui.sources.live`). All three look the same to the app: it calls :meth:`Source.poll` once
per refresh and folds the returned :class:`Batch` into :class:`tui.state.PipelineState`. Data may
arrive at any rate in between; a source buffers it until the next poll, so the refresh rate and the
data rate are independent.

A source says what it can do through :class:`Capabilities`: a replay can seek, a simulation can
switch policies, a stock vLLM server has no request records, so the panels that need them say why
they are empty instead of showing zeros.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from edgeserve.records import DeviceSample, MigrationDecision, RequestRecord, ResourceSample
from tui.sources.devices import DeviceInfo
from tui.sources.vllm_metrics import EngineMetrics

Clock = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic`` unless a test freezes it)."""

Item = (RequestRecord | ResourceSample | DeviceSample | MigrationDecision | EngineMetrics
        | DeviceInfo)
"""What a source delivers: the shared trace records (a simulated device's stage migrations
included), a stock vLLM server's metrics, device facts."""


class Panel(enum.IntEnum):
    """The UI's panels; the value is the number key that selects it."""

    OVERVIEW = 1
    QUEUES = 2
    WORKERS = 3
    TIMELINE = 4
    WATERFALL = 5
    DEVICES = 6
    SYSTEM = 7


@dataclass(slots=True, frozen=True)
class Capabilities:
    """What a source can do and which panels it can fill.

    Attributes:
        can_pause: The source's clock can be stopped (replay, simulation).
        can_step: While paused, the clock can be advanced by a fixed step.
        can_seek: The clock can jump to any time (replay).
        can_speed: The clock can run faster or slower than wall time.
        policies: Offload policies the source can switch between while it runs (simulation).
        why_empty: For each panel the source cannot fill, the reason shown in its place.
    """

    can_pause: bool = False
    can_step: bool = False
    can_seek: bool = False
    can_speed: bool = False
    policies: tuple[str, ...] = ()
    why_empty: Mapping[Panel, str] = field(default_factory=dict)


@dataclass(slots=True)
class Batch:
    """What arrived since the previous poll.

    Attributes:
        items: New records and samples, roughly in time order.
        now_s: The source's clock (trace or simulated seconds; for a live server the time of its
            newest event), or ``None`` while nothing is known yet.
        status: One line for people: position, connection state, errors.
        reset: The source jumped (seek): forget everything folded so far before folding ``items``.
        ended: Nothing more will come (the trace is exhausted, the simulation finished).
    """

    items: list[Item]
    now_s: float | None
    status: str
    reset: bool = False
    ended: bool = False


@runtime_checkable
class Source(Protocol):
    """The interface between the app and whatever it watches."""

    @property
    def caps(self) -> Capabilities: ...

    @property
    def description(self) -> str:
        """Short name of what is watched, e.g. ``replay run.jsonl``."""
        ...

    @property
    def speed(self) -> float: ...

    @property
    def paused(self) -> bool: ...

    async def start(self) -> None:
        """Open files or connections; raise :class:`SourceError` with a clear message on failure."""

    async def stop(self) -> None: ...

    async def poll(self) -> Batch:
        """Hand over everything that arrived since the previous call."""
        ...

    def set_speed(self, speed: float) -> None: ...

    def set_paused(self, paused: bool) -> None: ...

    def step(self, dt_s: float) -> None:
        """While paused, advance the clock by ``dt_s``."""

    def seek(self, t_s: float) -> None: ...

    def set_policy(self, name: str) -> None: ...


class SourceError(RuntimeError):
    """A source that cannot start: a missing trace, a refused connection, an unknown scenario."""


class PacedClock:
    """The source clock of a replay or simulation: wall time scaled by a speed, pausable.

    ``now()`` is ``anchor_s + (wall - anchor_wall) * speed`` while running, ``anchor_s`` while
    paused. Every change (speed, pause, step, seek) re-anchors, so the clock never jumps backwards
    except on an explicit seek.
    """

    def __init__(self, start_s: float, speed: float = 1.0, wall: Clock = time.monotonic) -> None:
        self._wall = wall
        self._anchor_s = start_s
        self._anchor_wall = wall()
        self._speed = speed
        self._paused = False
        self.limit_s: float | None = None  # the clock stops here (end of a trace)

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def paused(self) -> bool:
        return self._paused

    def now(self) -> float:
        t = self._anchor_s
        if not self._paused:
            t += (self._wall() - self._anchor_wall) * self._speed
        if self.limit_s is not None:
            t = min(t, self.limit_s)
        return t

    def _reanchor(self, t_s: float) -> None:
        self._anchor_s = t_s
        self._anchor_wall = self._wall()

    def set_speed(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self._reanchor(self.now())
        self._speed = speed

    def set_paused(self, paused: bool) -> None:
        self._reanchor(self.now())
        self._paused = paused

    def step(self, dt_s: float) -> None:
        self._reanchor(self.now() + dt_s)

    def seek(self, t_s: float) -> None:
        self._reanchor(t_s)
