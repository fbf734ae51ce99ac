"""The UI against a real ``edgeserve gateway`` process with fake upstreams: decisions per target
per second, cache hits, the policy's inputs, a live policy switch, and the replay of its trace."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList

from tests.edgeserve.gateway.conftest import Proc, chat, chat_body, gateway, procs, upstream
from tests.tui.conftest import FakeWall
from tui.app import TuiApp
from tui.config import Layout, TuiConfig
from tui.host import FixedProbe
from tui.sources.base import Panel, SourceError
from tui.sources.live import LiveSource, Mode
from tui.sources.replay import ReplaySource
from tui.widgets.policy_picker import PolicyPicker

__all__ = ["procs"]  # the fixture that stops the processes
COMPACT = (80, 24)


async def refreshed(pilot: Pilot, n: int = 1) -> None:
    app = pilot.app
    assert isinstance(app, TuiApp)
    for _ in range(n):
        await app.workers.wait_for_complete()
        await app.refresh_data()
        await pilot.pause()


def devices_text(app: TuiApp) -> str:
    return app.panels()[Panel.DEVICES].drawing.plain


def health(gw: Proc) -> dict:
    with urllib.request.urlopen(gw.url + "/health", timeout=10) as r:
        return dict(json.loads(r.read()))


async def send(gw: Proc, text: str) -> int:
    status, _, _ = await asyncio.to_thread(chat, gw, chat_body(text))
    return status


async def until(pilot: Pilot, cond, what: str, timeout_s: float = 10.0) -> None:
    """Refresh until ``cond()``: records reach the UI over the event stream, a moment later."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        await refreshed(pilot)
        if cond():
            return
        assert loop.time() < deadline, f"not shown: {what}\n{devices_text(pilot.app)}"
        await asyncio.sleep(0.05)


async def test_a_live_gateway_shows_decisions_inputs_and_switches_policy(
        tmp_path: Path, procs: list[Proc], host: FixedProbe, wall: FakeWall) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cl := upstream(tmp_path, "cl"))
    procs.append(gw := gateway(tmp_path, "--local", f"loc={loc.url}", "--cloud", f"cl={cl.url}",
                               "--policy", "always_local", "--profile", "phone-soc",
                               "--cache-capacity", "8"))
    src = LiveSource(gw.url)
    app = TuiApp(src, TuiConfig(layout=Layout.COMPACT), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        assert src.mode is Mode.GATEWAY and src.policy == "always_local"
        await pilot.press("6")
        assert await send(gw, "What is on the table?") == 200
        assert await send(gw, "what is on the table") == 200  # the semantic cache answers
        await until(pilot, lambda: "cache hits 1 (50%)" in devices_text(app), "a cache hit")
        text = devices_text(app)
        assert "gateway  2 decisions" in text
        for row in ("local:loc", "cache", "queue", "pred local", "pred cloud", "temp °C",
                    "battery"):
            assert row in text, row
        assert "cloud:cl" not in text
        rec = app.state.snapshot().recent[0]
        assert rec.decision_battery is not None and f"{rec.decision_battery * 100:.0f}%" in text
        # o: the simulation's policy picker, here switching the gateway's policy live
        await pilot.press("o")
        assert isinstance(app.screen, PolicyPicker)
        options = app.screen.query_one(OptionList)
        options.highlighted = src.caps.policies.index("always_cloud")
        await pilot.press("enter")
        await src.wait_policy()
        assert health(gw)["policy"] == "always_cloud" and src.policy == "always_cloud"
        assert await send(gw, "Name the colours of the cup.") == 200
        await until(pilot, lambda: "cloud:cl" in devices_text(app), "the cloud decision")
        await until(pilot, lambda: "policy always_cloud" in str(app.query_one("#status").render()),
                    "the new policy in the status line")
    # the gateway's own trace, replayed, shows the same decisions
    replay = ReplaySource(tmp_path / "gateway.jsonl", wall=wall, speed=1.0)
    app = TuiApp(replay, TuiConfig(layout=Layout.COMPACT), host_probe=host)
    async with app.run_test(size=COMPACT) as pilot:
        await refreshed(pilot)
        wall.advance(600.0)
        await refreshed(pilot, 2)
        await pilot.press("6")
        await refreshed(pilot)
        text = devices_text(app)
        assert "gateway  3 decisions  cache hits 1 (33%)" in text
        assert "local:loc" in text and "cloud:cl" in text and "cache" in text
        assert not replay.caps.policies  # a recording cannot switch the policy


async def test_an_unknown_policy_is_refused_before_the_gateway_is_asked(
        tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(gw := gateway(tmp_path, "--local", f"loc={loc.url}"))
    src = LiveSource(gw.url)
    await src.start()
    try:
        assert "always_cloud" in src.caps.policies
        with pytest.raises(SourceError, match="unknown policy 'nope'"):
            src.set_policy("nope")
        assert health(gw)["policy"] == src.policy
    finally:
        await src.stop()
