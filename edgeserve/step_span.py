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

An output interval is timed where the output is handled, in the frontend's event loop. When that
loop is busy — many streams to write, images to take in — an output is handled late, and the
interval holds the frontend's pacing as well as the engine's step. vLLM stamps each batch of
outputs in the engine core (``EngineCoreOutputs.timestamp``), and its per-request inter-token
latencies are the differences of those stamps: a request decoding in two consecutive steps has
the second step's engine interval as its latency. The shortest of a step's inter-token latencies
is therefore the step as the engine core ran it (:attr:`StepTiming.ENGINE_INTERVAL`, the default
under async scheduling); the frontend's interval stays beside it in the record
(``output_interval_s``), and is the span where no request decoded in both steps.

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
    OUTPUT_INTERVAL = "output_interval"  # since the previous step's output reached the frontend
    ENGINE_INTERVAL = "engine_interval"  # since the engine core's previous output (async)

    @classmethod
    def for_engine(cls, async_scheduling: bool) -> StepTiming:
        return cls.ENGINE_INTERVAL if async_scheduling else cls.ELAPSED

    @property
    def by_interval(self) -> bool:
        """Whether a step's span is an interval between outputs: exact in sum, approximate one
        by one (the fit averages such steps in windows)."""
        return self is not StepTiming.ELAPSED


@dataclass(slots=True)
class StepSpans:
    """Step durations, one step at a time, in the order their outputs arrive."""

    timing: StepTiming
    _prev_t_s: float | None = None
    _prev_running: int = 0

    def span_s(self, t_s: float, elapsed_s: float, running: int,
               engine_interval_s: float | None = None) -> float:
        """The duration of the step whose output arrived at ``t_s``; ``elapsed_s`` is vLLM's
        time for it, ``running`` the requests running after it, ``engine_interval_s`` the
        shortest inter-token latency among its outputs (None where none decoded)."""
        span = elapsed_s
        interval = self.output_interval_s(t_s)
        if interval is not None:
            if self.timing is StepTiming.ENGINE_INTERVAL and engine_interval_s is not None:
                interval = engine_interval_s
            span = max(elapsed_s, interval)
        self._prev_t_s, self._prev_running = t_s, running
        return span

    def output_interval_s(self, t_s: float) -> float | None:
        """Since the previous step's output reached the frontend, where the engine ran requests
        in between (an interval timing only; call before :meth:`span_s` for the same step)."""
        if (not self.timing.by_interval or self._prev_t_s is None
                or self._prev_running <= 0):
            return None
        return t_s - self._prev_t_s


def engine_interval_s(inter_token_latencies_s: Iterable[float]) -> float | None:
    """The engine core's interval before a step, from its outputs' inter-token latencies (vLLM's
    ``IterationStats.inter_token_latencies_iter``): the shortest positive one — a request that
    decoded in the step before as well — or None."""
    return min((x for x in inter_token_latencies_s if x > 0), default=None)


def respan(steps: Iterable[EngineStep]) -> list[EngineStep]:
    """``steps`` (in output order) with output-interval durations, for a trace recorded under
    async scheduling with vLLM's dispatch times as durations."""
    spans = StepSpans(StepTiming.OUTPUT_INTERVAL)  # what such a trace has: the frontend's times
    out: list[EngineStep] = []
    for s in steps:
        d = spans.span_s(s.t_s, s.duration_s, s.running)
        out.append(s if d == s.duration_s else msgspec.structs.replace(s, duration_s=d))
    return out
