"""The event loop: SimPy's environment, driven by callbacks instead of a process per request.

A SimPy process per request costs a generator, a ``Process`` event and a ``Timeout`` per step.
The simulator instead schedules *callbacks* (``loop.at(t, fn, arg)``) directly on SimPy's own
heap; when one comes due, ``fn(arg)`` runs. Ordinary SimPy processes and events can share the same
environment (``loop.env``): :meth:`EventLoop.run_until` processes every entry of the heap in
SimPy's order (time, priority, insertion), its own callbacks and SimPy events alike.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.events import NORMAL, Event

SimTime = float


Callback = Callable[[Any], None]

_GC_GEN0 = 100_000  # young-generation threshold of the cyclic GC while run_until runs


class EventLoop:
    """Schedules callbacks on a :class:`simpy.Environment` and runs it up to a time.

    Callback entries share SimPy's heap as 5-tuples ``(t, priority, id, fn, arg)`` next to SimPy's
    own 4-tuples ``(t, priority, id, event)``: no event object per callback. The ids are unique,
    so tuples never compare beyond them. Drive the environment with :meth:`run_until` (SimPy's
    ``env.run`` would not understand the callback entries).
    """

    __slots__ = ("_eid", "_env_dict", "_push", "_q", "eid", "env", "events", "now", "queue", "stopped", "superseded")

    def __init__(self, env: simpy.Environment | None = None) -> None:
        self.env = env or simpy.Environment()
        self._q: list[tuple[Any, ...]] = self.env._queue
        self._eid = self.env._eid
        # for hot paths that push (t, 1, next(eid), fn, arg) themselves; 1 is SimPy's NORMAL
        self.queue: list[tuple[Any, ...]] = self._q
        self.eid: Iterator[int] = self._eid
        # heappush as an attribute: compiled code looks an imported name up in a dict per use
        self._push: Callable[[list[Any], Any], None] = heappush
        # SimPy's clock is the environment's instance attribute ``_now``: written straight into
        # its __dict__ per event (a generic attribute store costs several times a dict store)
        d = getattr(self.env, "__dict__", None)
        self._env_dict: dict[str, Any] | None = d if isinstance(d, dict) and "_now" in d else None
        self.events = 0  # heap entries processed by run_until (callbacks run, SimPy events)
        self.superseded = 0  # of those, callbacks that found themselves void and did nothing
        self.now: SimTime = self.env.now  # mirrors env.now (a plain attribute: read per event)
        self.stopped = False  # set by stop(): run_until returns and processes nothing more

    def at(self, t_s: SimTime, fn: Callback, arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``t_s``."""
        self._push(self._q, (t_s, NORMAL, next(self._eid), fn, arg))

    def after(self, delay_s: SimTime, fn: Callback, arg: Any = None) -> None:
        self._push(self._q, (self.now + delay_s, NORMAL, next(self._eid), fn, arg))

    def stop(self) -> None:
        """End the run: the current event completes, no further event is processed."""
        self.stopped = True

    def next_time(self) -> SimTime:
        return self._q[0][0] if self._q else math.inf

    def run_until(self, t_end: SimTime) -> None:
        """Process all events with time ≤ ``t_end``; afterwards ``now == t_end`` (if finite)."""
        q = self._q
        env = self.env
        pop = heappop  # a local: compiled code looks an imported name up in a dict per use
        envd = self._env_dict
        n = 0
        # A run allocates a few short-lived objects per event and makes no reference cycles, so
        # the cyclic collector's young-generation passes (every 700 allocations by default) are
        # pure overhead here: collect young objects every _GC_GEN0 allocations instead while the
        # loop runs (cycles a sink creates are still collected), and restore the setting after.
        thresholds = gc.get_threshold()
        if thresholds[0] < _GC_GEN0:
            gc.set_threshold(_GC_GEN0, *thresholds[1:])
        try:
            while q and not self.stopped:
                head: float = q[0][0]  # unboxed: compared natively
                if head > t_end:
                    break
                item = pop(q)
                t: Any = item[0]  # the entry's own float object, stored as is (no new box)
                self.now = t
                if envd is not None:
                    envd["_now"] = t
                else:
                    env._now = t
                n += 1
                if len(item) == 5:
                    item[3](item[4])
                    continue
                ev: Event = item[3]  # a SimPy event: SimPy's Environment.step, inlined
                callbacks = ev.callbacks
                ev.callbacks = None  # type: ignore[assignment]
                for cb in callbacks:
                    cb(ev)
                if not ev._ok and not hasattr(ev, "_defused"):
                    raise ev._value
        finally:
            self.events += n
            if thresholds[0] < _GC_GEN0:
                gc.set_threshold(*thresholds)
        if t_end != math.inf and t_end > self.now and not self.stopped:
            env._now = self.now = t_end
