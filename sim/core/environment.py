"""SimPy's environment with the event loop's clock (never compiled: it subclasses SimPy's class).

:class:`sim.core.loop.EventLoop` keeps the simulated time in its own (unboxed) ``now`` and runs its
callbacks off its own heap. SimPy's code reads the time as ``env._now`` (``env.now``,
``env.schedule``) and sets it in ``env.step``; here that attribute *is* the loop's clock, so SimPy
processes and events sharing the environment always see the loop's time without the loop writing
it into the environment at every event.
"""

from __future__ import annotations

from typing import Any, Protocol

import simpy
from simpy.events import Event


class Clock(Protocol):
    now: float


class LoopEnvironment(simpy.Environment):
    """A :class:`simpy.Environment` whose ``now`` is ``clock.now``."""

    def __init__(self, clock: Clock, initial_time: float = 0.0) -> None:
        self._clock = clock
        super().__init__(initial_time)

    @property
    def _now(self) -> float:
        return self._clock.now

    @_now.setter
    def _now(self, t: Any) -> None:
        self._clock.now = t

    def run(self, until: float | Event | None = None) -> Any:
        """Refused: the event loop runs this environment's events with its own callbacks."""
        raise RuntimeError(
            "this SimPy environment belongs to a simulation whose event loop runs it together "
            "with the devices' own events; advance it with Simulation.run() or "
            "Simulation.run_until(t_s) (or EventLoop.run_until), not env.run()")
