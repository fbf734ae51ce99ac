"""Engine step durations: vLLM's own time where the engine runs the step inside it, output
intervals where async scheduling only dispatches it — the engine core's, where vLLM's
inter-token latencies give them (edgeserve.step_span)."""

from __future__ import annotations

import pytest

from edgeserve.records import EngineStep
from edgeserve.step_span import StepSpans, StepTiming, engine_interval_s, respan


def test_a_synchronous_engine_keeps_vllms_time() -> None:
    spans = StepSpans(StepTiming.ELAPSED)
    assert spans.span_s(10.0, 0.004, running=3) == 0.004
    assert spans.span_s(10.5, 0.006, running=3) == 0.006  # half a second later: still its own time


def test_under_async_scheduling_a_busy_engine_step_lasts_since_the_previous_output() -> None:
    spans = StepSpans(StepTiming.OUTPUT_INTERVAL)
    assert spans.span_s(10.000, 3e-5, running=2) == 3e-5  # nothing before it: the dispatch only
    assert spans.span_s(10.003, 3e-5, running=2) == pytest.approx(0.003)
    assert spans.span_s(10.083, 4e-5, running=0) == pytest.approx(0.080)  # a step with an image


def test_after_an_idle_engine_only_the_dispatch_is_known() -> None:
    spans = StepSpans(StepTiming.OUTPUT_INTERVAL)
    spans.span_s(10.0, 3e-5, running=0)  # the last request finished in this step
    assert spans.span_s(25.0, 3e-5, running=1) == 3e-5  # not the 15 s the engine sat idle


def test_a_span_is_never_shorter_than_vllms_own_time() -> None:
    spans = StepSpans(StepTiming.OUTPUT_INTERVAL)
    spans.span_s(10.0, 0.001, running=1)
    assert spans.span_s(10.001, 0.002, running=1) == 0.002


def test_the_timing_follows_the_engines_scheduling() -> None:
    assert StepTiming.for_engine(async_scheduling=True) is StepTiming.ENGINE_INTERVAL
    assert StepTiming.for_engine(async_scheduling=False) is StepTiming.ELAPSED


def test_a_busy_frontend_does_not_lengthen_a_step_timed_by_the_engine_core() -> None:
    spans = StepSpans(StepTiming.ENGINE_INTERVAL)
    spans.span_s(10.000, 3e-5, running=32)
    # the output reached the frontend 3.6 ms after the previous one, but the requests that
    # decoded in both steps were 2.7 ms apart in the engine core
    assert spans.output_interval_s(10.0036) == pytest.approx(0.0036)
    assert spans.span_s(10.0036, 3e-5, running=32, engine_interval_s=0.0027) == 0.0027


def test_without_a_request_decoding_in_both_steps_the_frontends_interval_stands() -> None:
    spans = StepSpans(StepTiming.ENGINE_INTERVAL)
    spans.span_s(10.000, 3e-5, running=1)
    assert spans.span_s(10.040, 3e-5, running=2, engine_interval_s=None) == pytest.approx(0.040)


def test_after_an_idle_engine_no_interval_is_taken_from_either_clock() -> None:
    spans = StepSpans(StepTiming.ENGINE_INTERVAL)
    spans.span_s(10.0, 3e-5, running=0)
    assert spans.output_interval_s(25.0) is None
    # a request that last decoded before the idle time has a latency that is not a step
    assert spans.span_s(25.0, 3e-5, running=1, engine_interval_s=15.0) == 3e-5


def test_the_engine_interval_is_the_shortest_inter_token_latency() -> None:
    # one request decoded in the step before (2.7 ms); one was held a step longer (5.4 ms)
    assert engine_interval_s([0.0054, 0.0027, 0.0028]) == 0.0027
    assert engine_interval_s([]) is None
    assert engine_interval_s([0.0]) is None  # same-stamp outputs give no interval


def test_only_the_elapsed_timing_is_exact_step_by_step() -> None:
    assert not StepTiming.ELAPSED.by_interval
    assert StepTiming.OUTPUT_INTERVAL.by_interval and StepTiming.ENGINE_INTERVAL.by_interval


def test_respan_rewrites_only_the_steps_of_a_busy_engine() -> None:
    steps = [EngineStep(t_s=1.0, duration_s=3e-5, running=1),
             EngineStep(t_s=1.004, duration_s=3e-5, running=0),
             EngineStep(t_s=9.0, duration_s=3e-5, running=1)]
    out = respan(steps)
    assert [s.duration_s for s in out] == pytest.approx([3e-5, 0.004, 3e-5])
    assert out[0] is steps[0] and out[2] is steps[2]  # unchanged steps are the same objects
