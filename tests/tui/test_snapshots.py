"""SVG snapshots at 80×24 (compact) and 160×48 (full) of a fixed trace on a frozen clock.

Everything time-dependent is pinned: the replay is paused at t = 30.5 s of a seeded synthetic
trace, its wall clock never moves, and the host probe always reads the same. Update the
snapshots with ``pytest tests/tui/test_snapshots.py --snapshot-update`` after a deliberate change.
"""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui.conftest import FakeWall
from tui.app import TuiApp
from tui.config import TuiConfig
from tui.sources.replay import ReplaySource
from tui.sources.simulation import SimulationSource

COMPACT = (80, 24)
FULL = (160, 48)


def replay_app(trace_path, host) -> TuiApp:
    src = ReplaySource(trace_path, wall=FakeWall(), start_paused=True, start_at_s=30.5)
    return TuiApp(src, TuiConfig(), host_probe=host)


async def settle(pilot: Pilot) -> None:
    app = pilot.app
    assert isinstance(app, TuiApp)
    await app.workers.wait_for_complete()
    await app.refresh_data()
    await pilot.pause()


def test_compact_overview(snap_compare, trace_path, host):
    assert snap_compare(replay_app(trace_path, host), terminal_size=COMPACT, run_before=settle)


def test_compact_timeline(snap_compare, trace_path, host):
    assert snap_compare(
        replay_app(trace_path, host), terminal_size=COMPACT, run_before=settle, press=["4"]
    )


def test_compact_requests(snap_compare, trace_path, host):
    assert snap_compare(
        replay_app(trace_path, host), terminal_size=COMPACT, run_before=settle, press=["5"]
    )


def test_compact_help(snap_compare, trace_path, host):
    assert snap_compare(
        replay_app(trace_path, host),
        terminal_size=COMPACT,
        run_before=settle,
        press=["question_mark"],
    )


def test_full(snap_compare, trace_path, host):
    assert snap_compare(replay_app(trace_path, host), terminal_size=FULL, run_before=settle)


def test_full_request_detail(snap_compare, trace_path, host):
    assert snap_compare(
        replay_app(trace_path, host), terminal_size=FULL, run_before=settle, press=["5", "enter"]
    )


def test_full_simulation(snap_compare, host):
    wall = FakeWall()
    src = SimulationSource(
        None, wall=wall, speed=10.0, policy="always_local", overrides=["duration_s=600"]
    )

    async def run_for_a_minute(pilot: Pilot) -> None:
        await settle(pilot)
        wall.advance(6.0)
        await settle(pilot)
        await pilot.press("p")  # paused: later ticks change nothing
        await settle(pilot)

    assert snap_compare(
        TuiApp(src, host_probe=host), terminal_size=FULL, run_before=run_for_a_minute
    )


def test_compact_simulation_devices_with_a_thermal_network(snap_compare, host, phone_scenario):
    """A phone's junction and skin, its units' clocks and the encoder's first migrations."""
    wall = FakeWall()
    src = SimulationSource(str(phone_scenario), wall=wall, speed=10.0, policy="always_local")

    async def run_for_a_minute(pilot: Pilot) -> None:
        await settle(pilot)
        wall.advance(9.0)
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)

    assert snap_compare(
        TuiApp(src, host_probe=host), terminal_size=COMPACT, run_before=run_for_a_minute,
        press=["6"],
    )
