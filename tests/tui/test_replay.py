"""ReplaySource: a recorded trace played back on a paced clock, with pause, step, seek, speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeserve.records import RequestRecord, ResourceSample, TraceHeader, TraceWriter, read_trace
from tests.tui.conftest import FakeWall
from tui.sources.base import Panel, SourceError
from tui.sources.replay import ReplaySource
from tui.state import event_time


def trace_items(path: Path) -> list:
    return [it for it in read_trace(path) if not isinstance(it, TraceHeader)]


async def started(path: Path, wall: FakeWall, **kw) -> ReplaySource:
    src = ReplaySource(path, wall=wall, **kw)
    await src.start()
    return src


async def test_items_arrive_when_the_clock_reaches_their_time(trace_path: Path, wall: FakeWall):
    src = await started(trace_path, wall)
    t0 = src.index.start_s
    first = await src.poll()
    wall.advance(10.0)
    second = await src.poll()
    expected = [it for it in trace_items(trace_path) if event_time(it) <= t0 + 10.0]
    assert first.items + second.items == expected
    assert second.now_s == pytest.approx(t0 + 10.0)
    await src.stop()


async def test_speed_scales_trace_time_per_wall_second(trace_path: Path, wall: FakeWall):
    src = await started(trace_path, wall, speed=4.0)
    t0 = src.index.start_s
    wall.advance(2.5)
    assert (await src.poll()).now_s == pytest.approx(t0 + 10.0)
    src.set_speed(0.5)
    wall.advance(2.0)
    assert (await src.poll()).now_s == pytest.approx(t0 + 11.0)


async def test_pause_holds_the_clock_and_step_moves_it(trace_path: Path, wall: FakeWall):
    src = await started(trace_path, wall, start_paused=True)
    t0 = src.index.start_s
    wall.advance(30.0)
    b = await src.poll()
    assert b.now_s == t0 and src.paused and "paused" in b.status
    src.step(1.0)
    assert (await src.poll()).now_s == pytest.approx(t0 + 1.0)
    src.set_paused(False)
    wall.advance(2.0)
    assert (await src.poll()).now_s == pytest.approx(t0 + 3.0)


async def test_seek_resets_and_hands_over_the_window_before_the_target(
    trace_path: Path, wall: FakeWall
):
    src = await started(trace_path, wall, start_paused=True, history_s=10.0)
    await src.poll()
    src.seek(40.0)
    b = await src.poll()
    assert b.reset and b.now_s == 40.0
    expected = [it for it in trace_items(trace_path) if 30.0 <= event_time(it) <= 40.0]
    assert b.items == expected
    src.seek(5.0)  # backwards too
    b = await src.poll()
    assert b.reset and all(event_time(it) <= 5.0 for it in b.items) and b.items


async def test_the_end_of_the_trace_ends_the_replay(trace_path: Path, wall: FakeWall):
    src = await started(trace_path, wall, speed=100.0)
    n = 0
    for _ in range(3):
        wall.advance(1.0)
        b = await src.poll()
        n += len(b.items)
    assert b.ended and "ended" in b.status
    assert n == len(trace_items(trace_path))
    assert b.now_s == src.index.end_s  # the clock stops at the last event


async def test_a_trace_without_samples_says_which_panels_stay_empty(tmp_path: Path, wall):
    p = tmp_path / "records-only.jsonl"
    with TraceWriter(p, TraceHeader(producer="test")) as w:
        w.write(RequestRecord(id="a", arrived_s=0.0, finished_s=1.0))
    src = await started(p, wall)
    why = src.caps.why_empty
    assert set(why) == {Panel.QUEUES, Panel.SYSTEM, Panel.DEVICES}
    assert "no resource samples" in why[Panel.QUEUES]
    assert src.caps.can_seek and src.caps.can_speed and not src.caps.policies


async def test_unreadable_traces_are_clear_errors(tmp_path: Path, wall: FakeWall):
    with pytest.raises(SourceError, match="trace not found"):
        await started(tmp_path / "missing.jsonl", wall)
    bad = tmp_path / "bad.jsonl"
    with TraceWriter(bad, TraceHeader(producer="test")) as w:
        w.write(ResourceSample(t_s=1.0))
    with bad.open("ab") as f:
        f.write(b"{not json\n")
    with pytest.raises(SourceError, match=r"bad.jsonl:3"):
        await started(bad, wall)
    headless = tmp_path / "headless.jsonl"
    headless.write_bytes(b'{"type":"sample","t_s":1.0}\n')
    with pytest.raises(SourceError, match="no trace header"):
        await started(headless, wall)


async def test_a_simulation_trace_replays_with_its_devices(tmp_path: Path, wall: FakeWall):
    from sim.core.simulation import Simulation
    from sim.scenario.config import load_scenario, parse_override
    from tui.state import PipelineState

    path = tmp_path / "sim.jsonl"
    scenario = load_scenario(None, [parse_override("duration_s=60")])
    sim = Simulation(scenario, policy="always_local", trace_path=path)
    sim.run()
    src = await started(path, wall, speed=1000.0)
    wall.advance(1.0)
    state = PipelineState()
    batch = await src.poll()
    state.fold(batch.items)
    state.advance(batch.now_s)
    snap = state.snapshot()
    assert batch.ended
    assert {d.sample.device for d in snap.devices} == {d.name for d in sim.devices}
    assert snap.overview.finished_total == src.index.requests > 0
    assert any(r.placement == "local" for r in snap.recent)
    assert Panel.DEVICES not in src.caps.why_empty


async def test_device_facts_in_the_trace_header_reach_the_devices_panel(tmp_path: Path, wall):
    from edgeserve.records import DeviceSample
    from tui.sources.devices import DeviceInfo

    meta = {
        "devices": {
            "phone": {
                "trip_temps_c": [70, 85],
                "ambient_c": 22,
                "clock_levels": 3,
                "battery_capacity_wh": 15,
            },
            "odd": "not a dict",
        }
    }
    p = tmp_path / "devices.jsonl"
    with TraceWriter(p, TraceHeader(producer="edgeserve sim", clock="sim", meta=meta)) as w:
        w.write(
            DeviceSample(
                t_s=1.0, device="phone", temp_c=71.0, clock_level=1, clock_scale=1.3, power_w=3.0
            )
        )
    src = await started(p, wall, speed=10.0)
    wall.advance(1.0)
    items = (await src.poll()).items
    assert items[0] == DeviceInfo("phone", (70.0, 85.0), 22.0, 3, 15.0)
    src.seek(1.0)
    assert isinstance((await src.poll()).items[0], DeviceInfo)  # again after a reset
