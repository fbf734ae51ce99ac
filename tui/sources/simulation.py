"""Run a simulation behind the UI: simulated time follows wall time times a speed.

Each poll advances the simulation (:meth:`sim.core.simulation.Simulation.run_until`) to the paced
clock's time in a worker thread, so a slow step never freezes the UI, and hands over the records
of requests that finished and the device samples taken meanwhile. Pause, step and speed act on
the clock; a policy switch is applied between two steps, so every decision is made under exactly
one policy.

The simulator has no preprocessing pool or engine queues of the runtime kind: each device's queue
is in the devices panel, and the pipeline timeline is built from the records of one device (its
CPU cores as workers, its local LLM as the engine); ``d`` cycles through the devices.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeserve.records import DeviceSample, MigrationDecision, RequestRecord
from tui.sources.base import Batch, Capabilities, Clock, Item, PacedClock, Panel, SourceError
from tui.sources.devices import infos_from_meta

QUEUES_WHY = (
    "a simulation has no preprocessing pool or engine queues of the runtime kind; "
    "each device's queue is in the devices panel (6)"
)


class SimulationSource:
    """A :class:`sim.core.simulation.Simulation` stepped in time with the UI.

    Args:
        scenario: A scenario YAML path or built-in name; ``None`` for the default scenario.
        speed: Simulated seconds per wall second.
        policy: Start with this policy instead of the scenario's.
        trace_path: Also write the simulation's trace here.
        overrides: ``key=value`` scenario overrides, as for ``edgeserve sim``.
        start_paused: Start with the clock stopped.
        wall: The wall clock that paces the simulation.
    """

    def __init__(
        self,
        scenario: str | None = None,
        *,
        speed: float = 10.0,
        policy: str | None = None,
        trace_path: str | Path | None = None,
        overrides: list[str] | None = None,
        start_paused: bool = False,
        wall: Clock = time.monotonic,
    ) -> None:
        self.scenario_ref = scenario
        self._speed0 = speed
        self._policy0 = policy
        self._trace_path = trace_path
        self._overrides = overrides or []
        self._start_paused = start_paused
        self._wall = wall
        self.sim: Any = None
        self._lock = threading.Lock()
        self._clock: PacedClock | None = None
        self._policies: tuple[str, ...] = ()
        self._pending_policy: str | None = None
        self._out: list[Item] = []
        self._infos_sent = False
        self.policy: str | None = None

    @property
    def caps(self) -> Capabilities:
        return Capabilities(
            can_pause=True,
            can_step=True,
            can_speed=True,
            policies=self._policies,
            why_empty={
                Panel.QUEUES: QUEUES_WHY,
                Panel.SYSTEM: "simulated devices have no host processes",
            },
        )

    @property
    def description(self) -> str:
        return f"sim {self.scenario_ref or 'default'}"

    @property
    def speed(self) -> float:
        return self._clock.speed if self._clock else self._speed0

    @property
    def paused(self) -> bool:
        return self._clock.paused if self._clock else self._start_paused

    async def start(self) -> None:
        from sim.core.policies import POLICIES
        from sim.core.simulation import Simulation
        from sim.scenario.config import load_scenario, parse_override
        from sim.scenario.schema import ConfigError

        try:
            overrides = [parse_override(o) for o in self._overrides]
            scenario = load_scenario(self.scenario_ref, overrides)
            self.sim = Simulation(scenario, policy=self._policy0, trace_path=self._trace_path)
        except (ConfigError, OSError, ValueError) as e:
            raise SourceError(f"cannot start the simulation: {e}") from None
        self.sim.add_record_sink(self._collect)
        self.sim.add_sample_sink(self._collect)
        self.sim.add_migration_sink(self._collect)
        self._policies = tuple(POLICIES)
        self.policy = self.sim.policy.name
        self._clock = PacedClock(self.sim.now_s, self._speed0, self._wall)
        self._clock.set_paused(self._start_paused)

    async def stop(self) -> None:
        if self.sim is not None:
            await asyncio.to_thread(self._locked, self.sim.close)

    def _locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` holding the simulation's lock: a step still running in its thread when the
        app quits (the refresh worker was cancelled, the thread was not) must end before close."""
        with self._lock:
            return fn(*args)

    async def poll(self) -> Batch:
        if self._clock is None or self.sim is None:
            return Batch([], None, "not started")
        if self._pending_policy is not None:
            name, self._pending_policy = self._pending_policy, None
            self.sim.set_policy(name)
            self.policy = self.sim.policy.name
        target = self._clock.now()
        if target > self.sim.now_s and not self.sim.finished:
            await asyncio.to_thread(self._locked, self.sim.run_until, target)
        items, self._out = self._out, []
        if not self._infos_sent:
            self._infos_sent = True
            items = [*self._device_infos(), *self.sim.device_states(), *items]
        ended = bool(self.sim.finished)
        if ended:
            self._clock.limit_s = self.sim.now_s
        now = self.sim.now_s
        state = "finished" if ended else ("paused" if self.paused else "running")
        status = f"t={now:8.1f} s  ×{self.speed:g}  {state}  policy {self.policy}"
        return Batch(items, now, status, ended=ended)

    def _collect(self, item: RequestRecord | DeviceSample | MigrationDecision) -> None:
        """The simulation's sink (called in the stepping thread; drained by ``poll``)."""
        self._out.append(item)

    def _device_infos(self) -> list[Item]:
        return list(infos_from_meta({"devices": self.sim.device_facts()}))

    def set_speed(self, speed: float) -> None:
        if self._clock:
            self._clock.set_speed(speed)
        else:
            self._speed0 = speed

    def set_paused(self, paused: bool) -> None:
        if self._clock:
            self._clock.set_paused(paused)
        else:
            self._start_paused = paused

    def step(self, dt_s: float) -> None:
        if self._clock:
            self._clock.step(dt_s)

    def seek(self, t_s: float) -> None:
        raise SourceError("a running simulation cannot seek; record a trace and replay it")

    def set_policy(self, name: str) -> None:
        if self._policies and name not in self._policies:
            raise SourceError(f"unknown policy {name!r} (known: {', '.join(self._policies)})")
        self._pending_policy = name
