"""Streaming statistics: folding in batches gives exactly what folding one by one gives."""

from __future__ import annotations

import random

from edgeserve.records import DeviceSample, RequestRecord
from sim.core.simulation import Simulation
from sim.core.stats import DeviceStats, Histogram, Series, StatsCollector
from sim.scenario.config import scenario_from_raw
from tests.sim.conftest import small_fleet


def test_a_series_keeps_at_most_max_points_by_averaging_pairs() -> None:
    rng = random.Random(7)
    points = [(i * 0.5, rng.random()) for i in range(1000)]  # 1000 points, 64 max: 4 halvings
    s = Series(max_points=64)
    for t, v in points:
        s.add(t, v)
    assert s.stride == 16 and len(s.t) < 64
    # every kept point is the mean of `stride` consecutive inputs, stamped at the last one's time
    for k, (t, v) in enumerate(zip(s.t, s.v, strict=True)):
        block = points[k * 16:(k + 1) * 16]
        assert t == block[-1][0]
        assert abs(v - sum(x for _, x in block) / 16) < 1e-12


def histogram_state(h: Histogram) -> tuple[object, ...]:
    return h.count, h.sum, h.max, h.counts


def device_state(st: DeviceStats) -> tuple[object, ...]:
    return (st.requests, st.ok, st.failed, st.dropped, st.offloaded, st.slo_met,
            st.last_finish_s, *(histogram_state(h) for h in
                                (st.e2e, st.ttft, st.e2e_local, st.e2e_cloud)))


def test_a_run_folds_records_and_samples_as_one_by_one_folding_would() -> None:
    """Records go into the statistics in batches; the result must equal folding each one as it
    comes. Samples go into the plot series as they come."""
    sim = Simulation(scenario_from_raw(small_fleet(duration_s=6000)))  # ≈ 8k requests
    records: list[RequestRecord] = []
    samples: list[DeviceSample] = []
    sim.add_record_sink(records.append)
    sim.add_sample_sink(samples.append)
    sim.run()
    assert len(records) > 4096 and len(samples) > 4 * 1024
    one = StatsCollector(sim.scenario.slo.e2e_s, sim.scenario.slo.ttft_s)
    for r in records:
        one.on_record(r)
    assert {n: device_state(st) for n, st in one.devices.items()} == \
        {n: device_state(st) for n, st in sim.stats.devices.items()}
    for name, tl in sim.stats.timelines.items():
        mine = [s for s in samples if s.device == name]
        for series, values in (("temp_c", [s.temp_c for s in mine]),
                               ("clock_level", [s.clock_level for s in mine]),
                               ("power_w", [s.power_w for s in mine])):
            expected = Series()
            for s, v in zip(mine, values, strict=True):
                expected.add(s.t_s, v)
            got = getattr(tl, series)
            assert (got.t, got.v) == (expected.t, expected.v), (name, series)
        assert tl.max_temp_c == max(s.temp_c for s in mine)


def test_statistics_mid_run_include_every_request_that_left() -> None:
    sim = Simulation(scenario_from_raw(small_fleet()))
    sim.run_until(300.0)
    assert 0 < sim.completed <= sim.arrived
    assert sim.stats.fleet().requests == sim.completed
    assert sim.recent_records(1)[0].finished_s is not None or sim.recent_records(1)[0].error
