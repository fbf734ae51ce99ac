"""What calibration reads of the host the engine and the preprocessing workers share.

On a CPU-only server the simulator slows an engine step by κ per second of a busy worker beside
it, by κ₊ for a worker beyond the cores the engine leaves free, and stretches a preprocessing job
started while the cores are oversubscribed (:mod:`sim.core.cpu_pool`). Calibration must measure
these in the same form, or the simulator counts the contention twice: the stage times are fitted
with the stretch taken out, the step's extra time against the worker-seconds of its modelled
period, split at the free cores.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeserve.records import EngineStep, Outcome, RequestRecord
from sim.fit.host_effects import (
    Intervals,
    contention,
    fit_engine_demand,
    fit_kappas,
    worker_seconds_split,
    worker_stretch,
)
from sim.fit.least_squares import StageFit
from sim.fit.stage_fits import fit_stages


def step(start: float, duration: float, **kw: int) -> EngineStep:
    return EngineStep(t_s=start + duration, duration_s=duration, decode_tokens=4,
                      decode_requests=4, running=4, **kw)


def test_worker_seconds_are_split_at_the_free_cores() -> None:
    # worker 0 busy 0–1, worker 1 busy 0.5–2; a step 0–1.5 (its modelled period). One core free:
    # one worker at a time is inside (1.5 s), the second from 0.5 to 1.0 is beyond (0.5 s)
    workers = {0: Intervals([(0.0, 1.0)]), 1: Intervals([(0.5, 2.0)])}
    s = step(0.0, 3.0)  # as it ran: longer than its period; the period decides
    assert worker_seconds_split(s, workers, 1.5, 1) == pytest.approx((1.5, 0.5))
    assert worker_seconds_split(s, workers, 1.5, 2) == pytest.approx((2.0, 0.0))


def test_both_kappas_come_back_from_steps_beside_one_and_two_workers() -> None:
    # decode steps of 2 ms: a third alone, a third beside one worker, a third beside two;
    # each worker-second adds 0.15 s within the free core and 1.1 s beyond it, with 5 % noise
    rng = np.random.default_rng(0)
    fit = StageFit("step", 0, 0.002, {}, 0.0, 1.0)
    steps, spans = [], {0: [], 1: []}
    t = 0.0
    for i in range(600):
        busy = i % 3
        d = 0.002 * (1 + 0.15 * min(busy, 1) + 1.1 * max(busy - 1, 0)) * rng.lognormal(0, 0.05)
        steps.append(step(t, d))
        for w in range(busy):
            spans[w].append((t - 0.001, t + d + 0.001))
        t += d + 0.05
    workers = {w: Intervals(v) for w, v in spans.items()}
    k1, k2, n = contention(steps, fit, 0, workers, free_cores=1)
    assert n == 400
    assert k1 == pytest.approx(0.15, rel=0.1) and k2 == pytest.approx(1.1, rel=0.05)


def test_without_steps_beyond_the_free_cores_there_is_no_kappa_over() -> None:
    rows = np.asarray([(0.002, 0.0, 0.0006, 500.0, float(i)) for i in range(20)])
    k1, k2 = fit_kappas(rows)
    assert k1 == pytest.approx(0.3) and k2 is None


def record(i: int, worker: int, start: float, decode_s: float) -> RequestRecord:
    return RequestRecord(id=str(i), arrived_s=start, outcome=Outcome.OK, num_images=1, worker=worker,
                         preproc_start_s=start, decode_end_s=start + decode_s,
                         resize_end_s=start + decode_s + 0.001,
                         normalize_end_s=start + decode_s + 0.002,
                         source_width=640, source_height=480, target_width=644,
                         target_height=476, decoded_pixels=640 * 480, image_tokens=391)


def test_a_job_beside_a_busy_worker_is_stretched_as_the_simulator_does_while_steps_run() -> None:
    # 2 cores, the engine on 1. Request 0 (0–1.002) starts alone: ×1 between steps and inside
    # them (its worker and the engine's thread fit the cores). Request 1 (0.5–2.002) starts while
    # 0 runs: 2 workers, ×1 between steps, ×1.5 inside; the steps 0.4–0.7 and 0.71–1.01 count as
    # one (their 10 ms gap is the engine's), 0.51 s of its span: its work is 0.992 + 0.51 / 1.5
    # = 1.332 s, its stretch 1.502 / 1.332. Request 2 starts during a step, no other worker busy:
    # demand 2, ×1.
    recs = [record(0, 0, 0.0, 1.0), record(1, 1, 0.5, 1.5), record(2, 0, 3.0, 1.0)]
    steps = [step(0.4, 0.3), step(0.71, 0.3), step(2.9, 0.5)]
    got = worker_stretch(recs, steps, host_cores=2, engine_demand=1)
    assert [got[id(r)] for r in recs] == pytest.approx([1.0, 1.502 / 1.332, 1.0])


def test_on_one_core_only_the_seconds_beside_steps_count_twice() -> None:
    # one core: a job of 1.002 s with 0.2 s of steps inside ran 0.802 + 0.2 / 2 = 0.902 s of work
    recs = [record(0, 0, 0.0, 1.0)]
    got = worker_stretch(recs, [step(0.3, 0.2)], host_cores=1, engine_demand=1)
    assert got[id(recs[0])] == pytest.approx(1.002 / 0.902)


def one_core_jobs(demand: float, sizes: dict[int, float], n: int, seed: int = 0
                  ) -> tuple[list[RequestRecord], list[EngineStep]]:
    """Jobs one after the other on one core, each of a size's work (± 3 %), beside an engine
    stepping every 200 ms at a random phase, its steps 0–140 ms long (as busy as the load then;
    the gaps longer than the engine's own): a job runs at speed 1 between steps and 1 / (1 +
    ``demand``) inside them."""
    rng = np.random.default_rng(seed)
    recs: list[RequestRecord] = []
    steps: list[EngineStep] = []
    t, i, period = 0.0, 0, 0.2
    for _ in range(n):
        for width, work in sizes.items():
            start = t + float(rng.uniform(0.0, period))
            phase = float(rng.uniform(0.0, period))
            busy = float(rng.uniform(0.0, 0.7)) * period
            left, now, dt = work * float(rng.uniform(0.97, 1.03)), start, 1e-4
            while left > 0:
                inside = (now - phase) % period < busy
                left -= dt / (1.0 + demand) if inside else dt
                now += dt
            if busy > 0:
                first, last = int((start - phase) // period), int((now - phase) // period)
                steps += [step(phase + period * j, busy) for j in range(first, last + 1)]
            r = record(i, 0, start, now - start - 0.002)
            r.source_width, r.source_height = width, width * 3 // 4
            recs.append(r)
            t, i = now + 0.5, i + 1
    return recs, sorted(steps, key=lambda s: s.t_s)


def test_the_engines_demand_inside_steps_is_the_one_that_makes_one_size_one_work() -> None:
    # a step takes 3.2 threads' worth of the one core from the worker beside it (a worker at
    # about a quarter of its speed inside steps, as measured on an AMX Xeon): fitted back
    recs, steps = one_core_jobs(3.2, {640: 0.08, 1280: 0.25}, 15)
    got = fit_engine_demand(recs, steps, host_cores=1, engine_threads=1)
    assert got is not None
    demand, n = got
    assert demand == pytest.approx(3.2, abs=0.3) and n == 30
    # the even share (one thread) would have left the works of a size spread out
    even = worker_stretch(recs, steps, host_cores=1, engine_demand=1.0)
    fitted = worker_stretch(recs, steps, host_cores=1, engine_demand=demand)
    def spread(stretch: dict[int, float]) -> float:
        work = [(r.normalize_end_s - r.preproc_start_s) / stretch[id(r)]  # type: ignore[operator]
                for r in recs if r.source_width == 1280]
        return float(np.std(work) / np.mean(work))
    assert spread(fitted) < 0.6 * spread(even)


def test_an_even_share_is_fitted_back_as_one_thread() -> None:
    recs, steps = one_core_jobs(1.0, {640: 0.08, 1280: 0.25}, 15, seed=1)
    got = fit_engine_demand(recs, steps, host_cores=1, engine_threads=1)
    assert got is not None and got[0] == pytest.approx(1.0, abs=0.15)


def test_without_jobs_that_overlapped_steps_the_demand_is_not_fitted() -> None:
    recs = [record(i, 0, 10.0 * i, 0.05) for i in range(30)]  # no step beside any of them
    assert fit_engine_demand(recs, [step(5.0, 0.02)], host_cores=1, engine_threads=1) is None
    assert fit_engine_demand(recs, [], host_cores=1, engine_threads=1) is None


def test_the_stage_fits_take_the_stretch_out_of_the_measured_times() -> None:
    # every decode took 10 ms × its stretch: the fit gives back 10 ms, not the mean it ran at
    recs, stretch = [], {}
    for i in range(40):
        k = 1.5 if i % 2 else 1.0
        r = record(i, 0, 10.0 * i, 0.010 * k)
        recs.append(r)
        stretch[id(r)] = k
    cal = fit_stages(recs, stretch)
    fit = cal.fits["image_decode"]
    assert fit.base_s + sum(c * 640 * 480 for c in fit.per.values()) == pytest.approx(0.010)
    plain = fit_stages(recs).fits["image_decode"]
    assert plain.base_s + sum(c * 640 * 480 for c in plain.per.values()) == pytest.approx(0.0125)
