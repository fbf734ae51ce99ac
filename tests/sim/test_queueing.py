"""Queueing behaviour against closed forms: M/M/1, M/D/1, FIFO order, Little's law.

The device is one CPU core whose only work is image decode (every other stage takes 0 s), so a
request's waiting time is ``preproc_start_s − preproc_queued_s`` and the system is a single-server
FIFO queue fed by Poisson arrivals. At utilization ρ = λ/μ = 0.8 the mean waiting times are
ρ/(μ − λ) (M/M/1, exponential service) and ρ/(2μ(1 − ρ)) (M/D/1, deterministic service).
"""

from __future__ import annotations

import itertools

from edgeserve.records import RequestRecord
from sim.core.simulation import Simulation
from sim.scenario.config import scenario_from_raw
from tests.sim.conftest import queue_scenario

MU = 1.0  # services per second
LAM = 0.8  # arrivals per second: ρ = 0.8


def mean_wait(kind: str, seeds: range, requests: int) -> float:
    """Pooled mean waiting time over independent replications (one per seed)."""
    total, n = 0.0, 0
    for seed in seeds:
        sim = Simulation(queue_scenario(kind, LAM, 1 / MU, requests, seed))

        def on_record(r: RequestRecord) -> None:
            nonlocal total, n
            total += r.preproc_start_s - r.preproc_queued_s  # type: ignore[operator]
            n += 1

        sim.add_record_sink(on_record)
        sim.run()
    return total / n


def test_mm1_mean_wait_within_2_percent_of_theory() -> None:
    rho = LAM / MU
    theory = rho / (MU - LAM)  # 4.0 s
    assert abs(mean_wait("exponential", range(8), 250_000) / theory - 1) < 0.02


def test_md1_mean_wait_within_2_percent_of_theory() -> None:
    rho = LAM / MU
    theory = rho / (2 * MU * (1 - rho))  # 2.0 s
    assert abs(mean_wait("deterministic", range(4), 250_000) / theory - 1) < 0.02


def test_fifo_waits_follow_lindley_recursion_exactly() -> None:
    """W(n+1) = max(0, W(n) + S(n) − A(n+1)) on the simulation's own arrivals and service times."""
    sim = Simulation(queue_scenario("exponential", LAM, 1 / MU, 5_000, seed=3))
    recs: list[RequestRecord] = []
    sim.add_record_sink(recs.append)
    sim.run()
    recs.sort(key=lambda r: r.arrived_s)
    w = 0.0
    for prev, cur in itertools.pairwise(recs):
        service = prev.normalize_end_s - prev.preproc_start_s  # type: ignore[operator]
        w = max(0.0, w + service - (cur.arrived_s - prev.arrived_s))
        assert abs((cur.preproc_start_s - cur.preproc_queued_s) - w) < 1e-9  # type: ignore[operator]


def test_littles_law_holds_on_a_run(fleet_raw: dict) -> None:
    """Time-average number in system = arrival rate × mean time in system (L = λW).

    Over a run that starts and ends empty the identity is exact: the area under the
    number-in-system curve is the sum of the requests' times in system.
    """
    sim = Simulation(scenario_from_raw(fleet_raw))
    sojourn = 0.0
    count = 0

    def on_record(r: RequestRecord) -> None:
        nonlocal sojourn, count
        end = r.finished_s if r.finished_s is not None else r.arrived_s
        sojourn += end - r.arrived_s
        count += 1

    sim.add_record_sink(on_record)
    summary = sim.run()
    lam = count / summary.sim_time_s
    w = sojourn / count
    assert count > 1000
    assert abs(summary.mean_in_system - lam * w) < 1e-6 * summary.mean_in_system
