"""A user's own SimPy process runs beside the built-in devices: ``Simulation.env`` and ``.process``."""

from __future__ import annotations

from typing import Any

import pytest
import simpy

from edgeserve.records import RequestRecord
from sim.core.simulation import Simulation
from sim.scenario.config import scenario_from_raw
from tests.sim.conftest import one_core_profile, queue_scenario

SERVICE_S = 0.3


def run(sim: Simulation) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    sim.add_record_sink(out.append)
    sim.run()
    return out


def test_a_sensor_process_reads_the_devices_on_the_simulations_clock() -> None:
    # M/D/1 at 2 Hz, 0.3 s per image: a thermometer-style sensor reads the CPU queue and the busy
    # core every 0.5 s; what it read at t is what the records say of t
    sim = Simulation(queue_scenario("deterministic", 2.0, SERVICE_S, 200))
    dev = sim.devices[0]
    readings: list[tuple[float, float, int, int]] = []

    def sensor(env: simpy.Environment, every_s: float) -> Any:
        while True:
            readings.append((env.now, sim.now_s, dev.queue_len, dev.running))
            yield env.timeout(every_s)

    assert isinstance(sim.env, simpy.Environment)
    sim.process(sensor, 0.5)
    records = run(sim)
    assert [t for t, *_ in readings] == [0.5 * k for k in range(len(readings))]
    assert all(t == now for t, now, *_ in readings)
    last = max(r.finished_s or 0.0 for r in records)
    assert readings[-1][0] <= last < readings[-1][0] + 0.5  # the run ends with its last request

    def queued(t: float) -> int:
        return sum(1 for r in records if r.preproc_queued_s <= t < r.preproc_start_s)  # type: ignore[operator]

    def busy(t: float) -> int:
        return sum(1 for r in records if r.preproc_start_s <= t < r.preproc_end_s)  # type: ignore[operator]

    assert [(q, b) for t, _, q, b in readings] == [(queued(t), busy(t)) for t, *_ in readings]
    assert max(q for _, _, q, _ in readings) >= 2  # it saw a queue form
    # reading leaves the run as it was
    alone = run(Simulation(queue_scenario("deterministic", 2.0, SERVICE_S, 200)))
    assert [r.preproc_end_s for r in alone] == [r.preproc_end_s for r in records]


def test_an_operator_process_forces_a_clock_level_and_work_started_after_it_slows() -> None:
    # at 5 s an operator forces clock level 1 (scale 2): images started later take 0.6 s, the one
    # on the core keeps its end
    prof = one_core_profile({"kind": "deterministic", "base_s": SERVICE_S},
                            dvfs=[{"scale": 1.0}, {"scale": 2.0}])
    sim = Simulation(scenario_from_raw({
        "name": "operator", "requests": 40, "sample_interval_s": 1e9,
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"rate_hz": 2.0, "output_tokens": [1, 1]}}]}))

    def operator(env: simpy.Environment, at_s: float, level: int) -> Any:
        yield env.timeout(at_s)
        sim.devices[0].set_level(level)
        return env.now

    done = sim.process(operator, 5.0, 1)
    records = run(sim)
    assert done.processed and done.value == 5.0
    took = [(r.preproc_start_s >= 5.0, round(r.decode_end_s - r.preproc_start_s, 9))  # type: ignore[operator]
            for r in records]
    assert {t for _, t in took} == {SERVICE_S, 2 * SERVICE_S}
    assert all(t == (2 * SERVICE_S if after else SERVICE_S) for after, t in took)
    assert any(r.preproc_start_s < 5.0 < r.decode_end_s for r in records)  # type: ignore[operator]


def test_an_error_in_a_users_process_reaches_the_caller_and_env_run_is_refused() -> None:
    sim = Simulation(queue_scenario("deterministic", 2.0, SERVICE_S, 20))

    def faulty(env: simpy.Environment) -> Any:
        yield env.timeout(1.0)
        raise ValueError("sensor unplugged")

    sim.process(faulty)
    with pytest.raises(ValueError, match="sensor unplugged"):
        sim.run()
    assert sim.now_s == 1.0
    with pytest.raises(RuntimeError, match=r"Simulation\.run\(\)"):
        sim.env.run()
