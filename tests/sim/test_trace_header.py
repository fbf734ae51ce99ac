"""A simulator trace carries the static device facts a replay needs (trip lines, battery size)."""

from __future__ import annotations

from pathlib import Path

from edgeserve.records import TraceHeader, read_trace
from sim.core.simulation import Simulation
from sim.scenario.config import load_scenario
from tui.sources.devices import infos_from_meta


def test_trace_header_names_each_device_with_its_trips_ambient_and_battery(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    sim = Simulation(load_scenario(None), trace_path=path)
    sim.run_until(10.0)
    sim.close()

    header = next(read_trace(path))
    assert isinstance(header, TraceHeader) and header.producer == "edgeserve sim"
    infos = {i.device: i for i in infos_from_meta(header.meta)}
    assert sorted(infos) == sorted(d.name for d in sim.devices)
    for d in sim.devices:
        info = infos[d.name]
        net = d.profile.thermal_network
        if net is None:  # the single node
            assert info.trip_temps_c == tuple(t.temp_c for t in d.profile.thermal.trips)
            assert info.ambient_c == d.profile.thermal.ambient_c
            assert info.clock_levels == len(d.levels)
        else:  # the network: its governors' limits, the language model's unit's ladder
            assert info.trip_temps_c == tuple(sorted(g.limit_c for g in net.governors))
            assert info.ambient_c == net.ambient_c
            llm_unit = d.profile.stages["prefill"].unit
            law = net.clocks.get(llm_unit)
            assert info.clock_levels == (law.levels if law is not None else len(d.levels))
        assert info.battery_capacity_wh == d.battery_capacity_wh
    assert any(d.profile.thermal_network is not None for d in sim.devices)
