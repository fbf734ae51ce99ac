"""The devices panel for a phone with a thermal network: junction and skin, a clock per unit, and
the encoder's migrations, from a running simulation and from the replay of its trace."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from sim.core.simulation import Simulation
from sim.scenario.config import load_scenario
from tests.tui.conftest import FakeWall
from tui.app import TuiApp
from tui.config import Layout, TuiConfig
from tui.host import FixedProbe
from tui.sources.base import Panel
from tui.sources.replay import ReplaySource
from tui.sources.simulation import SimulationSource

COMPACT = (80, 24)


async def refreshed(pilot: Pilot) -> None:
    app = pilot.app
    assert isinstance(app, TuiApp)
    await app.workers.wait_for_complete()
    await app.refresh_data()
    await pilot.pause()


def devices_text(app: TuiApp) -> str:
    return app.panels()[Panel.DEVICES].drawing.plain


async def test_a_running_simulation_shows_skin_unit_clocks_and_migrations(
        phone_scenario: Path, wall: FakeWall, host: FixedProbe) -> None:
    src = SimulationSource(str(phone_scenario), wall=wall, speed=10.0, policy="always_local")
    app = TuiApp(src, TuiConfig(layout=Layout.COMPACT), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        await pilot.press("6")
        text = devices_text(app)
        assert "skin  22.0°C" in text and "npu L0 ×1.00" in text and "gpu L0" in text
        assert "migrations" not in text  # nothing has moved at t = 0
        wall.advance(6.0)  # 60 simulated seconds: the NPU throttles and the encoder leaves it
        await refreshed(pilot)
        net = src.sim.devices[0].net
        first = net.migrations[0]
        text = devices_text(app)
        assert "migrations" in text
        assert f"{first.t_s:7.1f} s phone encode npu→gpu  {first.reason}" in text
        levels = net.unit_levels()
        sample = app.state.snapshot().devices[0].sample
        assert {u.unit: u.level for u in sample.units} == levels
        assert f"npu L{levels['npu']} ×" in text
        assert f"skin {sample.skin_temp_c:5.1f}°C" in text


async def test_the_replay_of_a_simulation_trace_shows_the_same(
        phone_scenario: Path, tmp_path: Path, wall: FakeWall, host: FixedProbe) -> None:
    trace = tmp_path / "phone.jsonl"
    sim = Simulation(load_scenario(str(phone_scenario)), policy="always_local", trace_path=trace)
    sim.run_until(120.0)
    sim.close()
    moves = sim.devices[0].net.migrations
    assert moves
    src = ReplaySource(trace, wall=wall, start_paused=True, start_at_s=60.0)
    app = TuiApp(src, TuiConfig(layout=Layout.COMPACT), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        await pilot.press("6")
        text = devices_text(app)
        assert f"{moves[0].t_s:7.1f} s phone encode {moves[0].from_unit}→{moves[0].to_unit}" in text
        assert "skin" in text and "cpu L" in text


async def test_a_trace_without_a_network_shows_no_skin_line(
        trace_path: Path, wall: FakeWall, host: FixedProbe) -> None:
    src = ReplaySource(trace_path, wall=wall, start_paused=True, start_at_s=30.5)
    app = TuiApp(src, TuiConfig(layout=Layout.COMPACT), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        text = devices_text(app)
        assert "clock L" in text and "skin" not in text and "migrations" not in text
