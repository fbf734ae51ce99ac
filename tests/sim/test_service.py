"""Service-time models and DVFS stretching."""

from __future__ import annotations

import statistics

import pytest

from edgeserve.records import RequestRecord
from sim.core.batching import BatchEngine, StepModel
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.service import Draws, ServiceTime
from sim.scenario.profiles import ServiceKind, ServiceModelConfig


def features() -> Job:
    """A request with 1 MP source pixels (the only feature the test models use)."""
    return Job(RequestRecord(id="f", arrived_s=0.0), None, 1_000_000, 500_000, 640, 700, 10)


def draws(kind: ServiceKind, n: int = 50_000, **kw: object) -> list[float]:
    st = ServiceTime(ServiceModelConfig(kind=kind, base_s=0.002, per={"source_pixels": 8e-9}, **kw),  # type: ignore[arg-type]
                     Draws("test"))
    return [st.sample(features()) for _ in range(n)]


def test_the_mean_is_linear_in_the_features() -> None:
    assert draws(ServiceKind.DETERMINISTIC, 3) == [pytest.approx(0.010)] * 3


@pytest.mark.parametrize(("kind", "cv"), [(ServiceKind.EXPONENTIAL, 1.0), (ServiceKind.LOGNORMAL, 0.3)])
def test_random_kinds_keep_the_mean_and_have_their_spread(kind: ServiceKind, cv: float) -> None:
    xs = draws(kind, cv=cv)
    assert statistics.fmean(xs) == pytest.approx(0.010, rel=0.015)
    assert statistics.stdev(xs) / statistics.fmean(xs) == pytest.approx(cv, rel=0.05)


def test_empirical_samples_are_rescaled_to_the_mean() -> None:
    xs = draws(ServiceKind.EMPIRICAL, samples_s=[1.0, 2.0, 3.0, 6.0])  # mean 3 → ratios 1/3 … 2
    assert set(round(x, 9) for x in xs) == {0.003333333, 0.006666667, 0.01, 0.02}
    assert statistics.fmean(xs) == pytest.approx(0.010, rel=0.02)


def test_same_seed_same_draws() -> None:
    assert draws(ServiceKind.LOGNORMAL, 100, cv=0.2) == draws(ServiceKind.LOGNORMAL, 100, cv=0.2)


class Model(StepModel):
    def prefill_s(self, job: Job) -> float:
        return 0.0

    def prefill_draw_s(self, mean_s: float) -> float:
        return mean_s

    def step_s(self, batch: int, context_tokens: int) -> float:
        return 0.1


def test_a_clock_change_reprices_the_decode_batch_from_that_moment() -> None:
    """11 tokens: 1 from the (free) prefill, 10 steps of 0.1 s. At t = 0.5 the clock slows to
    scale 2: five steps are done, five remain at 0.2 s → last token at 1.5 s."""
    loop = EventLoop()
    done: list[float] = []
    engine = BatchEngine(loop, "e", Model(), 1000, 4,
                         lambda j: done.append(j.rec.last_token_s))  # type: ignore[arg-type]
    engine.submit(Job(RequestRecord(id="a", arrived_s=0.0), None, 0, 0, 0, 10, 11))
    loop.at(0.5, lambda _: engine.retime(2.0))
    loop.run_until(10.0)
    assert done == [pytest.approx(1.5)]
