"""The event loop: callbacks and ordinary SimPy processes share one clock and one heap."""

from __future__ import annotations

import math
import random
from typing import Any

from sim.core.loop import EventLoop


def test_simpy_processes_and_callbacks_see_the_same_clock() -> None:
    loop = EventLoop()
    env = loop.env
    seen: list[tuple[str, float, float]] = []

    def proc() -> Any:
        for _ in range(3):
            yield env.timeout(1.5)
            seen.append(("proc", env.now, loop.now))

    def cb(arg: Any) -> None:
        seen.append((arg, env.now, loop.now))
        if arg == "cb1":  # a SimPy event scheduled from a callback starts at the callback's time
            env.timeout(0.25).callbacks.append(lambda ev: seen.append(("t", env.now, loop.now)))

    env.process(proc())
    loop.at(1.0, cb, "cb1")
    loop.at(2.0, cb, "cb2")
    loop.run_until(10.0)
    assert seen == [("cb1", 1.0, 1.0), ("t", 1.25, 1.25), ("proc", 1.5, 1.5), ("cb2", 2.0, 2.0),
                    ("proc", 3.0, 3.0), ("proc", 4.5, 4.5)]
    assert env.now == loop.now == 10.0


def test_callbacks_run_in_time_order_and_ties_in_scheduling_order() -> None:
    rng = random.Random(7)
    loop = EventLoop()
    ran: list[tuple[float, int]] = []
    times = [float(rng.randrange(50)) for _ in range(2000)]  # many equal times
    for i, t in enumerate(times):
        loop.at(t, lambda arg: ran.append((loop.now, arg)), i)
    loop.run_until(math.inf)
    assert ran == sorted(((t, i) for i, t in enumerate(times)))
    assert loop.events == len(times)


def test_simpy_events_and_callbacks_due_together_run_in_scheduling_order() -> None:
    loop = EventLoop()
    env = loop.env
    order: list[str] = []
    loop.at(1.0, order.append, "cb-a")
    env.timeout(1.0).callbacks.append(lambda ev: order.append("simpy-1"))
    loop.at(1.0, order.append, "cb-b")
    env.timeout(1.0).callbacks.append(lambda ev: order.append("simpy-2"))
    urgent = env.event()
    urgent.callbacks.append(lambda ev: order.append("urgent"))

    def trigger(_: Any) -> None:  # at t=0.5: an URGENT event scheduled now runs before t=1
        urgent.succeed()

    loop.at(0.5, trigger)
    loop.run_until(2.0)
    assert order == ["urgent", "cb-a", "simpy-1", "cb-b", "simpy-2"]
    assert loop.events == 6  # the five above and the trigger


def test_run_until_stops_at_the_bound_and_resumes() -> None:
    loop = EventLoop()
    seen: list[float] = []
    for t in (0.5, 1.0, 1.5, 2.5):
        loop.at(t, lambda arg: seen.append(loop.now))
    loop.run_until(1.0)  # inclusive bound
    assert seen == [0.5, 1.0] and loop.now == 1.0 and loop.next_time() == 1.5
    loop.run_until(2.0)
    assert seen == [0.5, 1.0, 1.5] and loop.now == 2.0 and loop.env.now == 2.0
    loop.stop()
    loop.run_until(10.0)
    assert seen == [0.5, 1.0, 1.5] and loop.pending() == 1
