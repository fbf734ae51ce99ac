"""The encoder leaves its hot NPU for the GPU at a trip and comes back with hysteresis.

One device: an NPU (20 W busy) running a 90 ms encoder for 6 images a second, a GPU (3 W busy)
running the same encoder 1.5 × slower, a CPU with no work to speak of. The junction (1 J/°C,
4 °C/W to a 100 J/°C skin, 3 °C/W to the air) trips at 50 °C; the step-wise governor throttles
only the NPU. The encoder moves to the GPU once the NPU is 3 levels down, and back once it is at
full clock again.
"""

from __future__ import annotations

from typing import Any

import pytest

from edgeserve.records import RequestRecord
from sim.core.simulation import Simulation
from sim.scenario.config import scenario_from_raw
from sim.scenario.schema import ConfigError
from tests.sim.conftest import one_core_profile


def profile(**migration: Any) -> dict[str, Any]:
    prof = one_core_profile()
    prof["units"]["npu"] = {"kind": "npu", "idle_w": 0.0, "active_w": 20.0}
    prof["units"]["gpu"] = {"kind": "gpu", "idle_w": 0.0, "active_w": 3.0}
    prof["stages"]["encode"] = {"unit": "npu", "model": {"kind": "deterministic", "base_s": 0.09}}
    prof["thermal_network"] = {
        "junction_c_j_per_c": 1.0, "skin_c_j_per_c": 100.0, "r_junction_skin_c_per_w": 4.0,
        "r_skin_ambient_c_per_w": 3.0, "poll_s": 0.1,
        "clocks": {"npu": {"levels": 8, "min_clock": 0.3, "tops_per_w": 10.0},
                   "gpu": {"levels": 4, "tops_per_w": 2.0}},
        "governors": [{"node": "junction", "units": ["npu"],
                       "step_wise": {"trip_c": 50.0, "hysteresis_c": 1.0}}],
        "migrations": [{"stage": "encode", "units": ["npu", "gpu"], "hot_level": 3,
                        "cool_level": 0, "speed": {"gpu": 1.5}, **migration}],
    }
    return prof


def run(prof: dict[str, Any], t_s: float) -> tuple[Simulation, list[RequestRecord]]:
    sim = Simulation(scenario_from_raw({
        "name": "migrate", "duration_s": t_s, "sample_interval_s": 1.0,
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"kind": "periodic", "fps": 6, "output_tokens": [1, 1]}}]}))
    records: list[RequestRecord] = []
    sim.add_record_sink(records.append)
    sim.run_until(t_s)
    return sim, records


def test_the_encoder_moves_at_the_trip_and_back_with_hysteresis() -> None:
    sim, records = run(profile(), 120.0)
    dev = sim.devices[0]
    assert dev.net is not None
    moves = dev.net.migrations
    assert len(moves) >= 4
    # alternating, away at the hot level, back only at the cool level
    assert [(m.from_unit, m.to_unit) for m in moves[:4]] == [("npu", "gpu"), ("gpu", "npu")] * 2
    for m in moves:
        if m.to_unit == "gpu":
            assert m.from_level >= 3 and m.reason.startswith("npu at clock level")
        else:
            assert m.to_level == 0 and m.reason.startswith("npu back at clock level")
    # the records carry each unit's work per joule at its level: the throttled NPU does more per
    # joule than at full clock (10 TOPS/W at f = 1, f^(1 - 2.5) below it)
    away = moves[0]
    assert away.from_efficiency is not None and away.from_efficiency > 10.0
    assert away.to_efficiency == pytest.approx(2.0)
    # on the GPU the encoder takes 1.5 × 90 ms = 135 ms, a time no NPU clock level gives
    # (90 ms / f for f = 1, 0.9, …, 0.3); on the NPU it took 90 ms at full clock
    took = [r.encode_end_s - r.normalize_end_s for r in records
            if r.normalize_end_s is not None and r.encode_end_s is not None]
    assert any(abs(t - 0.135) < 1e-9 for t in took)
    assert any(abs(t - 0.09) < 1e-9 for t in took)


def test_without_the_gap_in_levels_there_is_no_hysteresis_to_configure() -> None:
    with pytest.raises(ConfigError, match="hot_level: must be above cool_level"):
        scenario_from_raw({"name": "x", "devices": [{"name": "d",
                                                     "profile": profile(hot_level=0)}]})


def test_the_first_unit_must_be_the_stage_s_own() -> None:
    prof = profile(units=["gpu", "npu"])
    with pytest.raises(ConfigError, match="the first unit must be the encode stage's own unit"):
        scenario_from_raw({"name": "x", "devices": [{"name": "d", "profile": prof}]})


def test_image_stages_move_to_the_little_cluster_and_back() -> None:
    """A big core (30 W busy) decoding images in 90 ms, a little core (2 W) taking twice as long;
    the governor throttles only the big cluster."""
    prof = one_core_profile({"kind": "deterministic", "base_s": 0.09})
    prof["units"] = {"big": {"kind": "cpu", "count": 1, "idle_w": 0.0, "active_w": 30.0},
                     "little": {"kind": "cpu", "count": 1, "idle_w": 0.0, "active_w": 2.0}}
    for st in prof["stages"].values():
        st["unit"] = "big"
    prof["thermal_network"] = {
        "junction_c_j_per_c": 1.0, "skin_c_j_per_c": 100.0, "r_junction_skin_c_per_w": 4.0,
        "r_skin_ambient_c_per_w": 3.0, "poll_s": 0.1,
        "clocks": {"big": {"levels": 8, "min_clock": 0.3}, "little": {"levels": 4}},
        "governors": [{"node": "junction", "units": ["big"],
                       "step_wise": {"trip_c": 50.0, "hysteresis_c": 1.0}}],
        "migrations": [{"stage": "image", "units": ["big", "little"], "hot_level": 2,
                        "cool_level": 0, "speed": {"little": 1.7}}],
    }
    sim = Simulation(scenario_from_raw({
        "name": "big-little", "duration_s": 60, "sample_interval_s": 1.0,
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"kind": "periodic", "fps": 4, "output_tokens": [1, 1]}}]}))
    records: list[RequestRecord] = []
    sim.add_record_sink(records.append)
    sim.run_until(60.0)
    dev = sim.devices[0]
    assert dev.net is not None
    moves = dev.net.migrations
    assert [(m.from_unit, m.to_unit) for m in moves[:4]] == [("big", "little"), ("little", "big")] * 2
    assert all(m.from_level >= 2 for m in moves if m.to_unit == "little")
    assert all(m.to_level == 0 for m in moves if m.to_unit == "big")
    took = [r.decode_end_s - r.preproc_start_s for r in records
            if r.decode_end_s is not None and r.preproc_start_s is not None]
    # on the little core 1.7 × 90 ms, a time no big-core level gives (90 ms / f, f = 1, 0.9, …)
    assert any(abs(t - 0.153) < 1e-9 for t in took)
    assert any(abs(t - 0.09) < 1e-9 for t in took)  # on the big core at full clock
