"""A phone's thermal network in its trace: both temperatures, every unit's clock, each migration.

The phone-soc profile (NPU and CPU on a junction node under a skin node) runs a camera stream
long enough to heat its skin past the power allocator's control temperature; with a GPU added and
the encoder allowed to leave the throttled NPU for it, the trace also says when and why it moved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from edgeserve.records import DeviceSample, MigrationDecision, read_trace
from sim.core.simulation import Simulation
from sim.scenario.config import scenario_from_raw

PHONE = Path(__file__).resolve().parents[2] / "models" / "profiles" / "phone-soc.yaml"


def phone(migrate: bool) -> dict[str, Any]:
    prof: dict[str, Any] = yaml.safe_load(PHONE.read_text())
    if migrate:
        prof["units"]["gpu"] = {"kind": "gpu", "idle_w": 0.05, "active_w": 2.0}
        net = prof["thermal_network"]
        net["clocks"]["gpu"] = {"levels": 4}
        net["migrations"] = [{"stage": "encode", "units": ["npu", "gpu"], "hot_level": 2,
                              "cool_level": 0, "speed": {"gpu": 1.5}}]
    return prof


def run(tmp_path: Path, migrate: bool) -> tuple[list[DeviceSample], list[MigrationDecision],
                                                  Simulation]:
    sim = Simulation(scenario_from_raw({
        "name": "phone", "duration_s": 300, "sample_interval_s": 5.0,
        "devices": [{"name": "phone", "profile": phone(migrate),
                     "workload": {"kind": "periodic", "fps": 4, "output_tokens": [16, 16]}}]}),
        policy="always_local", trace_path=tmp_path / "t.jsonl")
    sim.run()
    items = list(read_trace(tmp_path / "t.jsonl"))
    return ([i for i in items if isinstance(i, DeviceSample)],
            [i for i in items if isinstance(i, MigrationDecision)], sim)


def test_samples_carry_junction_skin_and_each_unit_s_clock(tmp_path: Path) -> None:
    samples, moves, sim = run(tmp_path, migrate=False)
    assert moves == []
    first, last = samples[0], samples[-1]
    assert first.skin_temp_c == first.temp_c == 22.0  # both nodes start at ambient
    # the die heats within seconds, the skin over minutes: the junction stays above the skin
    assert last.skin_temp_c is not None and 22.0 < last.skin_temp_c < last.temp_c
    assert [u.unit for u in last.units] == ["cpu", "npu"]
    net = sim.devices[0].net
    assert net is not None
    assert {u.unit: u.level for u in last.units} == net.unit_levels()
    # the skin governor throttled the NPU: its level and its stretch (1 / clock) say so
    npu = [max(u.level for u in s.units if u.unit == "npu") for s in samples]
    assert max(npu) > 0
    for s in samples:
        for u in s.units:
            assert (u.scale > 1.0) == (u.level > 0)


def test_migrations_are_trace_records_before_the_sample_that_follows(tmp_path: Path) -> None:
    samples, moves, sim = run(tmp_path, migrate=True)
    net = sim.devices[0].net
    assert net is not None and len(net.migrations) >= 1
    assert [(m.t_s, m.from_unit, m.to_unit, m.reason) for m in moves] == [
        (m.t_s, m.from_unit, m.to_unit, m.reason) for m in net.migrations]
    assert (moves[0].stage, moves[0].from_unit, moves[0].to_unit) == ("encode", "npu", "gpu")
    assert moves[0].from_level >= 2
    assert {u.unit for u in samples[-1].units} == {"cpu", "npu", "gpu"}
    # in the file, each move comes before the first sample taken after it
    items = list(read_trace(tmp_path / "t.jsonl"))
    i_move = items.index(moves[0])
    later = [i for i in items[i_move:] if isinstance(i, DeviceSample)]
    assert later and later[0].t_s >= moves[0].t_s
    earlier = [i for i in items[:i_move] if isinstance(i, DeviceSample)]
    assert all(s.t_s <= moves[0].t_s for s in earlier)
