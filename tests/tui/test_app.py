"""The app driven headless with the Pilot: each source, each panel, the keys."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import OptionList

from edgeserve.records import Outcome
from tests.tui.conftest import FakeWall
from tui.app import TuiApp
from tui.config import Layout, TuiConfig
from tui.host import FixedProbe
from tui.sources.base import Panel
from tui.sources.live import LiveSource
from tui.sources.replay import ReplaySource
from tui.sources.simulation import SimulationSource
from tui.widgets.help import HelpScreen
from tui.widgets.policy_picker import PolicyPicker
from tui.widgets.request_detail import RequestDetail
from tui.widgets.waterfall import WaterfallPanel

COMPACT = (80, 24)
FULL = (160, 48)


def replay_app(trace: Path, wall: FakeWall, host: FixedProbe, **kw) -> TuiApp:
    src = ReplaySource(trace, wall=wall, start_paused=True, start_at_s=30.5)
    return TuiApp(src, TuiConfig(**kw), host_probe=host)


async def refreshed(pilot: Pilot) -> None:
    """One complete refresh: poll, fold, and the panels redrawn."""
    app = pilot.app
    assert isinstance(app, TuiApp)
    await pilot.app.workers.wait_for_complete()
    await app.refresh_data()
    await pilot.pause()


def shown(app: TuiApp) -> set[Panel]:
    return {p for p, w in app.panels().items() if w.display}


async def test_compact_layout_shows_one_panel_and_keys_switch_it(trace_path, wall, host):
    app = replay_app(trace_path, wall, host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        assert shown(app) == {Panel.OVERVIEW}
        await pilot.press("4")
        assert shown(app) == {Panel.TIMELINE}
        await pilot.press("tab")
        assert shown(app) == {Panel.WATERFALL}
        await pilot.press("shift+tab", "shift+tab")
        assert shown(app) == {Panel.WORKERS}


async def test_full_layout_shows_every_panel(trace_path, wall, host):
    app = replay_app(trace_path, wall, host)
    async with app.run_test(size=FULL) as pilot:
        await refreshed(pilot)
        assert shown(app) == set(Panel)
        await pilot.press("6")
        assert app.panels()[Panel.DEVICES].has_class("-active")


async def test_layout_can_be_forced_compact_on_a_large_terminal(trace_path, wall, host):
    app = replay_app(trace_path, wall, host, layout=Layout.COMPACT)
    async with app.run_test(size=FULL) as pilot:
        await refreshed(pilot)
        assert shown(app) == {Panel.OVERVIEW}


async def test_replay_keys_pause_speed_step_and_seek(trace_path, wall, host):
    app = replay_app(trace_path, wall, host)
    src = app.source
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        assert app.state.now_s == 30.5 and src.paused
        await pilot.press("s")
        await refreshed(pilot)
        assert app.state.now_s == 31.5
        await pilot.press("right_square_bracket")
        await refreshed(pilot)
        assert app.state.now_s == 41.5
        await pilot.press("left_curly_bracket")
        await refreshed(pilot)
        assert app.state.now_s == src.index.start_s  # clamped to the trace's start
        await pilot.press("plus")
        assert src.speed == 2.0
        await pilot.press("minus", "minus")
        assert src.speed == 0.5
        await pilot.press("p")
        assert not src.paused
        wall.advance(4.0)
        await refreshed(pilot)
        assert app.state.now_s == src.index.start_s + 2.0  # 4 s of wall time at ×0.5
        assert "×0.5" in app.last_status


async def test_help_opens_and_closes(trace_path, wall, host):
    app = replay_app(trace_path, wall, host)
    async with app.run_test(size=COMPACT) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_filter_keeps_matching_requests_and_enter_opens_one(trace_path, wall, host):
    app = replay_app(trace_path, wall, host)
    async with app.run_test(size=FULL) as pilot:
        await refreshed(pilot)
        failed = [r for r in app.state.snapshot().recent if r.outcome is Outcome.FAILED]
        assert failed
        await pilot.press("slash", *"failed", "enter")
        await pilot.pause()
        waterfall = app.query_one(WaterfallPanel)
        assert app.filter == "failed" and "filter: failed" in str(app.query_one("#status").render())
        assert waterfall.rows == failed[::-1]
        await pilot.press("enter")
        assert isinstance(app.screen, RequestDetail)
        assert app.screen.record == failed[-1]  # newest first
        await pilot.press("escape")
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert app.filter == "" and len(waterfall.rows) > len(failed)


async def test_q_quits(trace_path, wall, host):
    app = replay_app(trace_path, wall, host)
    async with app.run_test(size=COMPACT) as pilot:
        await pilot.press("q")
    assert app.return_code == 0 and not app.is_running


async def test_a_missing_trace_exits_with_a_message(tmp_path, wall, host):
    app = TuiApp(ReplaySource(tmp_path / "none.jsonl", wall=wall), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await pilot.pause()
    assert app.return_code == 2


async def test_simulation_runs_behind_the_ui_and_switches_policy(wall, host):
    src = SimulationSource(
        None, wall=wall, speed=10.0, policy="always_cloud", overrides=["duration_s=300"]
    )
    app = TuiApp(src, host_probe=host)
    async with app.run_test(size=FULL) as pilot:
        await refreshed(pilot)
        wall.advance(3.0)
        await refreshed(pilot)
        assert app.state.now_s == 30.0
        assert app.state.snapshot().devices
        await pilot.press("o")
        assert isinstance(app.screen, PolicyPicker)
        options = app.screen.query_one(OptionList)
        options.highlighted = src.caps.policies.index("always_local")
        await pilot.press("enter")
        await pilot.pause()
        assert "policy always_local" in str(app.query_one("#status").render())
        wall.advance(3.0)
        await refreshed(pilot)
        assert src.policy == "always_local"
        assert any(r.placement == "local" for r in app.state.snapshot().recent)
        await pilot.press("d")  # the timeline follows another device
        await refreshed(pilot)
        assert app.state.pipeline_device == app.state.devices_seen[1]


async def test_live_edgeserve_stream_fills_the_panels_and_p_holds_the_view(edgeserve_like, host):
    app = TuiApp(LiveSource(edgeserve_like), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        for _ in range(100):
            await refreshed(pilot)
            if app.state.finished_total >= 2:
                break
            await pilot.pause(0.05)
        assert app.state.finished_total == 2
        assert app.state.snapshot().queues.preproc_queue == 3
        assert not app.check_action("speed", (1,))  # a live server has no speed to change
        await pilot.press("p")
        assert app.frozen and "PAUSED" in str(app.query_one("#status").render())
        await pilot.press("5")
        assert [r.id for r in app.query_one(WaterfallPanel).rows] == ["b", "a"]


async def test_stock_vllm_server_panels_say_why_they_are_empty(vllm_like, host):
    app = TuiApp(LiveSource(vllm_like), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        assert app.state.snapshot().queues.engine_waiting == 7
        await pilot.press("5")
        waterfall = app.panels()[Panel.WATERFALL]
        assert waterfall.has_class("-empty")
        note = waterfall.drawing.plain
        assert "stock vLLM server publishes no per-request records" in note


async def test_system_panel_shows_this_hosts_gpus_and_the_servers_processes(trace_path, wall):
    from tui.host import GpuStats, HostStats

    gpu = GpuStats("NVIDIA H200", 35.0, 600 << 20, 143_000 << 20, 37.0)
    probe = FixedProbe(HostStats(50.0, (40.0, 60.0), 25.0, gpus=(gpu,)))
    app = replay_app(trace_path, wall, probe)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        await pilot.press("7")
        text = app.panels()[Panel.SYSTEM].drawing.plain
        assert "50.0% of 2 cores" in text
        assert " 35% 600 MiB/143000 MiB" in text
        assert "engine" in text and "1200 MiB" in text  # from the trace's resource samples
