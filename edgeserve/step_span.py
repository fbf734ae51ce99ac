"""How long an engine step took, from what vLLM reports about it.

vLLM times each step's ``iteration_details.elapsed_ms`` around scheduling and model execution.
Where the engine executes synchronously (vLLM's CPU build turns async scheduling off) that is the
step. With async scheduling — vLLM's default on CUDA — the timed region only schedules and
dispatches: the GPU runs the step after it returns, while the next one is scheduled. On an H200
(2026-12-05, Qwen2-VL-2B shape, 12 MP photos at 1230 image tokens) the reported times had a
median of 30 µs for steps whose outputs reached the frontend 2.9 ms apart, and steps that
carried images came ~80 ms apart. There a step's span is the interval since the previous step's
output reached the frontend, as long as the engine had requests running through it; after an
idle engine only the dispatch time is known, and that is what is used. With a step in flight
while the next is scheduled, the scheduler's figures that come with an output can describe the
step after the one the GPU just finished, so a single step's span may land on its neighbour:
the spans are exact in sum (the engine's busy time, its stall), approximate one by one.

:class:`StepSpans` does this live (the engine's stat logger, :mod:`edgeserve.engine`);
:func:`respan` does it afterwards for a trace whose header says its steps were timed by
dispatch alone (GPU traces recorded before the header named its step timing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from edgeserve.records import EngineStep


class StepTiming(StrEnum):
    """What a step's ``duration_s`` measures."""

    ELAPSED = "elapsed"  # vLLM's own timing: the step ran inside it (synchronous engine)
    OUTPUT_INTERVAL = "output_interval"  # since the previous step's output (async scheduling)

    @classmethod
    def for_engine(cls, async_scheduling: bool) -> StepTiming:
        return cls.OUTPUT_INTERVAL if async_scheduling else cls.ELAPSED


@dataclass(slots=True)
class StepSpans:
    """Step durations, one step at a time, in the order their outputs arrive."""

    timing: StepTiming
    _prev_t_s: float | None = None
    _prev_running: int = 0

    def span_s(self, t_s: float, elapsed_s: float, running: int) -> float:
        """The duration of the step whose output arrived at ``t_s``; ``elapsed_s`` is vLLM's
        time for it, ``running`` the requests running after it."""
        span = elapsed_s
        if (self.timing is StepTiming.OUTPUT_INTERVAL and self._prev_t_s is not None
                and self._prev_running > 0):
            span = max(elapsed_s, t_s - self._prev_t_s)
        self._prev_t_s, self._prev_running = t_s, running
        return span


def respan(steps: Iterable[EngineStep]) -> list[EngineStep]:
    """``steps`` (in output order) with output-interval durations, for a trace recorded under
    async scheduling with vLLM's dispatch times as durations."""
    spans = StepSpans(StepTiming.OUTPUT_INTERVAL)
    out: list[EngineStep] = []
    for s in steps:
        d = spans.span_s(s.t_s, s.duration_s, s.running)
        out.append(s if d == s.duration_s else msgspec.structs.replace(s, duration_s=d))
    return out
