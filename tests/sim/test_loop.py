"""The event loop: callbacks and ordinary SimPy processes share one clock and one heap."""

from __future__ import annotations

from typing import Any

from sim.loop import EventLoop


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
