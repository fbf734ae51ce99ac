"""The event loop: callbacks on a heap of their own, merged with SimPy's event heap by time.

A SimPy process per request costs a generator, a ``Process`` event and a ``Timeout`` per step.
The simulator instead schedules *callbacks* (``loop.at(t, fn, arg)``); when one comes due,
``fn(arg)`` runs. Ordinary SimPy processes and events can share the loop's environment
(``loop.env``, whose clock is the loop's): :meth:`EventLoop.run_until` takes the earliest of its
own next callback and SimPy's next event, ordered as SimPy orders its heap — by (time, priority,
insertion id), with one id counter for both — so a callback and a SimPy event due at the same
time run in the order they were scheduled.

Why a heap of its own: compiled (``make sim-native``), an entry is a native object whose time is
an unboxed double, and the sift loops below compare entries with two machine comparisons; the
``heapq`` module compares tuples through ``PyObject_RichCompare`` element by element (about 40
such comparisons per simulated request, the largest single cost of the event path before).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from heapq import heappop
from typing import Any

import simpy
from simpy.events import Event

from sim.core.environment import LoopEnvironment

SimTime = float
Callback = Callable[[Any], None]

_GC_GEN0 = 100_000  # young-generation threshold of the cyclic GC while run_until runs
_NORMAL = 1  # SimPy's NORMAL priority: every callback entry has it


class Entry:
    """One scheduled callback: ``fn(arg)`` at ``t``; ``seq`` is its insertion id."""

    __slots__ = ("arg", "fn", "seq", "t")

    def __init__(self, t: float, seq: int, fn: Callback, arg: Any) -> None:
        self.t = t
        self.seq = seq
        self.fn = fn
        self.arg = arg


class Ids:
    """Insertion ids, shared by the loop's entries and SimPy's events (it replaces ``env._eid``)."""

    __slots__ = ("n",)

    def __init__(self, start: int = 0) -> None:
        self.n = start

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> Any:  # (not int: mypyc would make it an unboxed tp_iternext)
        n = self.n
        self.n = n + 1
        return n


class EventLoop:
    """Schedules callbacks and runs them, with the events of a SimPy environment, up to a time.

    Drive it with :meth:`run_until`; SimPy's ``env.run`` would not see the callbacks.
    """

    __slots__ = ("_free", "_heap", "_ids", "_sq", "env", "events", "now", "stopped", "superseded")

    def __init__(self) -> None:
        self.now: SimTime = 0.0
        self.env: simpy.Environment = LoopEnvironment(self)
        self._sq: list[tuple[Any, ...]] = self.env._queue  # SimPy's own heap of 4-tuples
        self._ids = Ids()
        self.env._eid = self._ids  # type: ignore[assignment]
        self._heap: list[Entry] = []
        # entries that have run, for reuse: no allocation per event, and the few entries in use
        # stay in cache (fresh ones come from memory freed long ago)
        self._free: list[Entry] = []
        self.events = 0  # entries processed by run_until (callbacks run, SimPy events)
        self.superseded = 0  # of those, callbacks that found themselves void and did nothing
        self.stopped = False  # set by stop(): run_until returns and processes nothing more

    def at(self, t_s: SimTime, fn: Callback, arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``t_s``."""
        ids = self._ids
        seq = ids.n
        ids.n = seq + 1
        free = self._free
        if free:
            entry = free.pop()
            entry.t = t_s
            entry.seq = seq
            entry.fn = fn
            entry.arg = arg
        else:
            entry = Entry(t_s, seq, fn, arg)
        heap = self._heap
        # heapq's _siftdown: later ids never precede earlier ones at equal time, so "<" on time
        pos = len(heap)
        heap.append(entry)
        while pos > 0:
            parent_pos = (pos - 1) >> 1
            parent = heap[parent_pos]
            if t_s < parent.t:
                heap[pos] = parent
                pos = parent_pos
                continue
            break
        heap[pos] = entry

    def after(self, delay_s: SimTime, fn: Callback, arg: Any = None) -> None:
        self.at(self.now + delay_s, fn, arg)

    def stop(self) -> None:
        """End the run: the current event completes, no further event is processed."""
        self.stopped = True

    def next_time(self) -> SimTime:
        t = self._heap[0].t if self._heap else math.inf
        if self._sq and self._sq[0][0] < t:
            return float(self._sq[0][0])
        return t

    def pending(self) -> int:
        """Entries scheduled and not yet run (callbacks and SimPy events)."""
        return len(self._heap) + len(self._sq)

    def _pop(self) -> Entry:
        """Remove and return the earliest entry (heapq's heappop: sift to a leaf, then up)."""
        heap = self._heap
        last = heap.pop()
        n = len(heap)
        if n == 0:
            return last
        top = heap[0]
        pos = 0
        child = 1
        while child < n:
            right = child + 1
            if right < n:
                a = heap[child]
                b = heap[right]
                if not (a.t < b.t or (a.t == b.t and a.seq < b.seq)):
                    child = right
            heap[pos] = heap[child]
            pos = child
            child = 2 * pos + 1
        t = last.t
        seq = last.seq
        while pos > 0:
            parent_pos = (pos - 1) >> 1
            parent = heap[parent_pos]
            if t < parent.t or (t == parent.t and seq < parent.seq):
                heap[pos] = parent
                pos = parent_pos
                continue
            break
        heap[pos] = last
        return top

    def run_until(self, t_end: SimTime) -> None:
        """Process all events with time ≤ ``t_end``; afterwards ``now == t_end`` (if finite)."""
        heap = self._heap
        sq = self._sq
        free = self._free
        n = 0
        # A run allocates a few short-lived objects per event and makes no reference cycles, so
        # the cyclic collector's young-generation passes (every 700 allocations by default) are
        # pure overhead here: collect young objects every _GC_GEN0 allocations instead while the
        # loop runs (cycles a sink creates are still collected), and restore the setting after.
        thresholds = gc.get_threshold()
        if thresholds[0] < _GC_GEN0:
            gc.set_threshold(_GC_GEN0, *thresholds[1:])
        try:
            while not self.stopped:
                if heap:
                    head = heap[0]
                    t = head.t
                    if sq and _simpy_first(sq[0], t, head.seq):
                        if not self._simpy_step(sq, t_end):
                            break
                        n += 1
                        continue
                    if t > t_end:
                        break
                    entry = self._pop()
                    self.now = t
                    n += 1
                    entry.fn(entry.arg)
                    entry.arg = None  # (the entry must not keep a finished request alive)
                    free.append(entry)
                elif sq:
                    if not self._simpy_step(sq, t_end):
                        break
                    n += 1
                else:
                    break
        finally:
            self.events += n
            if thresholds[0] < _GC_GEN0:
                gc.set_threshold(*thresholds)
        if t_end != math.inf and t_end > self.now and not self.stopped:
            self.now = t_end

    def _simpy_step(self, sq: list[tuple[Any, ...]], t_end: SimTime) -> bool:
        """Process SimPy's next event if it is due by ``t_end`` (SimPy's ``Environment.step``)."""
        if sq[0][0] > t_end:
            return False
        item = heappop(sq)
        self.now = item[0]
        ev: Event = item[3]
        callbacks = ev.callbacks
        ev.callbacks = None  # type: ignore[assignment]
        for cb in callbacks:
            cb(ev)
        if not ev._ok and not hasattr(ev, "_defused"):
            raise ev._value
        return True


def _simpy_first(item: tuple[Any, ...], t: float, seq: int) -> bool:
    """Whether SimPy's heap head ``(time, priority, id, event)`` precedes a callback ``(t, seq)``."""
    st: float = item[0]
    if st != t:
        return st < t
    prio: int = item[1]
    if prio != _NORMAL:
        return prio < _NORMAL
    sid: int = item[2]
    return sid < seq
