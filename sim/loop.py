"""The event loop: SimPy's environment, driven by callbacks instead of a process per request.

A SimPy process per request costs a generator, a ``Process`` event and a ``Timeout`` per step.
The simulator instead schedules *callback events* (``loop.at(t, fn, arg)``): a bare event on
SimPy's own heap whose only callback is ``fn``. When it fires ``fn(event)`` runs and reads its
argument from ``event.value``. Ordinary SimPy processes and events can share the same
environment (``loop.env``): :meth:`EventLoop.run_until` processes every event on the heap, in
SimPy's order (time, priority, insertion).

``run_until`` is :meth:`simpy.Environment.step` inlined in a loop, which roughly halves the
per-event overhead of calling ``env.run(until=…)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.events import NORMAL, Event

SimTime = float


class Call(Event):
    """An already-triggered event that runs one callback; created only by :class:`EventLoop`."""


Callback = Callable[[Any], None]


class EventLoop:
    """Schedules callbacks on a :class:`simpy.Environment` and runs it up to a time."""

    __slots__ = ("_eid", "_q", "env", "events")

    def __init__(self, env: simpy.Environment | None = None) -> None:
        self.env = env or simpy.Environment()
        self._q: list[tuple[float, int, int, Event]] = self.env._queue  # type: ignore[attr-defined]
        self._eid = self.env._eid  # type: ignore[attr-defined]
        self.events = 0  # events processed by run_until

    @property
    def now(self) -> SimTime:
        return self.env._now  # type: ignore[attr-defined, no-any-return]

    def at(self, t_s: SimTime, fn: Callback, arg: Any = None) -> Call:
        """Run ``fn(event)`` at absolute time ``t_s`` (``event.value`` is ``arg``)."""
        ev = Call.__new__(Call)
        ev.env = self.env
        ev.callbacks = [fn]
        ev._ok = True  # type: ignore[attr-defined]
        ev._value = arg  # type: ignore[attr-defined]
        heappush(self._q, (t_s, NORMAL, next(self._eid), ev))
        return ev

    def after(self, delay_s: SimTime, fn: Callback, arg: Any = None) -> Call:
        return self.at(self.env._now + delay_s, fn, arg)  # type: ignore[attr-defined]

    def next_time(self) -> SimTime:
        return self._q[0][0] if self._q else math.inf

    def run_until(self, t_end: SimTime) -> None:
        """Process all events with time ≤ ``t_end``; afterwards ``now == t_end`` (if finite)."""
        q = self._q
        env = self.env
        n = 0
        while q and q[0][0] <= t_end:
            t, _, _, ev = heappop(q)
            env._now = t  # type: ignore[attr-defined]
            callbacks = ev.callbacks
            ev.callbacks = None  # type: ignore[assignment]
            for cb in callbacks:  # type: ignore[union-attr]
                cb(ev)
            n += 1
            if not ev._ok and not hasattr(ev, "_defused"):  # type: ignore[attr-defined]
                self.events += n
                raise ev._value  # type: ignore[attr-defined]
        self.events += n
        if t_end != math.inf and t_end > env._now:  # type: ignore[attr-defined]
            env._now = t_end  # type: ignore[attr-defined]
