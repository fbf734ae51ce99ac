"""SimulationSource: the simulator stepped in time with the UI's paced clock."""

from __future__ import annotations

import pytest

from edgeserve.records import DeviceSample, RequestRecord
from tests.tui.conftest import FakeWall
from tui.sources.base import Panel, SourceError
from tui.sources.devices import DeviceInfo
from tui.sources.simulation import SimulationSource

SHORT = ["duration_s=120", "sample_interval_s=1.0"]


async def started(wall: FakeWall, **kw) -> SimulationSource:
    src = SimulationSource(None, wall=wall, overrides=SHORT, **kw)
    await src.start()
    return src


async def test_simulated_time_follows_the_wall_clock_times_the_speed(wall: FakeWall):
    src = await started(wall, speed=5.0)
    first = await src.poll()
    infos = [it for it in first.items if isinstance(it, DeviceInfo)]
    assert {i.device for i in infos} == {d.name for d in src.sim.devices}
    assert all(i.trip_temps_c == tuple(sorted(i.trip_temps_c)) for i in infos)
    wall.advance(4.0)
    b = await src.poll()
    assert b.now_s == pytest.approx(20.0) and src.sim.now_s == pytest.approx(20.0)
    records = [it for it in b.items if isinstance(it, RequestRecord)]
    samples = [it for it in b.items if isinstance(it, DeviceSample)]
    assert records and all(r.finished_s <= 20.0 for r in records)
    assert {s.t_s for s in samples} == {float(t) for t in range(21)}  # every 1 s from 0
    await src.stop()


async def test_pause_holds_simulated_time_and_step_advances_it(wall: FakeWall):
    src = await started(wall, speed=10.0, start_paused=True)
    await src.poll()
    wall.advance(5.0)
    assert (await src.poll()).now_s == 0.0
    src.step(1.0)
    assert (await src.poll()).now_s == pytest.approx(1.0)
    await src.stop()


async def test_a_policy_switch_applies_to_decisions_after_it(wall: FakeWall):
    src = await started(wall, speed=10.0, policy="always_cloud")
    wall.advance(3.0)
    before = [it for it in (await src.poll()).items if isinstance(it, RequestRecord)]
    assert before and all(r.placement.startswith("cloud:") for r in before)
    assert "always_local" in src.caps.policies
    src.set_policy("always_local")
    switched_at = src.sim.now_s
    wall.advance(6.0)
    after = [it for it in (await src.poll()).items if isinstance(it, RequestRecord)]
    late = [r for r in after if r.arrived_s > switched_at]
    assert late and {r.placement for r in late} == {"local"}
    assert all(r.worker is not None for r in late)  # local requests run on a CPU core
    assert src.policy == "always_local"
    await src.stop()


async def test_bad_input_is_a_clear_error(wall: FakeWall):
    src = await started(wall)
    with pytest.raises(SourceError, match="unknown policy 'nope'"):
        src.set_policy("nope")
    with pytest.raises(SourceError, match="cannot seek"):
        src.seek(10.0)
    assert Panel.QUEUES in src.caps.why_empty
    await src.stop()
    with pytest.raises(SourceError, match="cannot start the simulation"):
        await SimulationSource("no-such-scenario", wall=wall).start()
