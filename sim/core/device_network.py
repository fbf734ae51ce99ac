"""A device's heat as a two-node network, with per-unit clocks and per-node governors.

The device (:class:`~sim.core.device.Device`) hands this object its power changes; between them the
network is integrated exactly (:mod:`sim.core.thermal_network`). Every ``poll_s`` the governors read
their nodes (:mod:`sim.core.governors`) and each unit takes the deepest level asked of it: the NPU can
be throttled while the CPU is not. The device's own ``level``/``scale`` follow the unit that runs
the language model (what the throughput and the UI show); the CPU stages use the CPU unit's scale
and the encoder its unit's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgeserve.records import DeviceSample, MigrationDecision, UnitClockSample
from sim.core.energy_estimate import EnergyEstimate
from sim.core.governors import Governor, make_governor
from sim.core.heat import Heat
from sim.core.migration import MigrationRecord, Migrator
from sim.core.thermal_network import TwoNodeNetwork
from sim.scenario.thermal_network_config import ThermalNetworkConfig

if TYPE_CHECKING:
    from sim.core.device import Device
    from sim.core.job import Job


class UnitClock:
    """One unit's DVFS ladder and present level."""

    __slots__ = ("level", "max_level", "power_scales", "scales")

    def __init__(self, scales: list[float], power_scales: list[float]) -> None:
        self.scales = scales
        self.power_scales = power_scales
        self.level = 0
        self.max_level = len(scales) - 1


class GovernorSlot:
    """One governor, the node it reads and the units it governs (and those it does not)."""

    __slots__ = ("gov", "node", "others", "units")

    def __init__(self, gov: Governor, node: str, units: list[int], n_units: int) -> None:
        self.gov = gov
        self.node = node
        self.units = units
        self.others = [u for u in range(n_units) if u not in units]


class DeviceNetwork(Heat):
    """The network, the unit clocks and the governors of one device."""

    def __init__(self, dev: Device, cfg: ThermalNetworkConfig) -> None:
        super().__init__(dev.loop, dev.power)
        self.dev = dev
        self.cfg = cfg
        self.net = TwoNodeNetwork(cfg, dev.loop.now)
        names = dev.unit_names
        self.clocks: list[UnitClock] = []
        for n in names:
            law = cfg.clocks.get(n)
            if law is not None:
                self.clocks.append(UnitClock([1.0 / f for f in law.clocks()], law.power_scales()))
            else:
                self.clocks.append(UnitClock([lv.scale for lv in dev.levels],
                                             [lv.power_scale for lv in dev.levels]))
        self.govs: list[GovernorSlot] = []
        for g in cfg.governors:
            units = [names.index(u) for u in g.units]
            top = max(self.clocks[u].max_level for u in units)
            self.govs.append(GovernorSlot(make_governor(g, top), g.node.value, units, len(names)))
        self.migrators = [Migrator(m) for m in cfg.migrations]
        self.energy = EnergyEstimate(dev.profile, cfg,
                                     [(c.scales, c.power_scales) for c in self.clocks])
        self.migrations: list[MigrationRecord] = []
        self._migrations_taken = 0  # how many of them went into the trace so far
        self._t_last = dev.loop.now
        self._nominal_j = [0.0] * len(names)  # each unit's dynamic energy at full clock
        self._poll_last_t = dev.loop.now
        self._poll_last_j = [0.0] * len(names)
        # scratch of the poll, reused: per-unit demand (W at full clock) and the levels asked for
        self._demand = [0.0] * len(names)
        self._want = [0] * len(names)
        # what :meth:`_power_at` evaluates: the governed units and the others' power
        self._pa_units: list[int] = []
        self._pa_others_w = 0.0
        self._power_at_fn = self._power_at  # bound once: no closure per poll
        self.power_w = self._power_now()
        dev.loop.after(cfg.poll_s, self._on_poll)

    # ---- power --------------------------------------------------------------------------
    def _power_now(self) -> float:
        p = self.static_w
        power = self.power
        for u, c in enumerate(self.clocks):
            p += power.busy_w(u) * c.power_scales[c.level]
        return p

    def junction_c(self) -> float:
        return self.net.junction_c

    def integrate(self, now: float) -> None:
        dt = now - self._t_last
        if dt <= 0.0:
            return
        p = self.power_w
        self.energy_j += p * dt
        for c in self.clocks:
            if c.level:
                self.throttled_s += dt
                break
        nominal = self._nominal_j
        power = self.power
        for u in range(len(nominal)):
            nominal[u] += power.busy_w(u) * dt
        self._t_last = now
        self.net.advance(now, p)

    def power_changed(self) -> None:
        self.integrate(self.loop.now)
        self.power_w = self._power_now()

    # ---- governors ----------------------------------------------------------------------
    def _power_at(self, lv: int) -> float:
        """The governed units' power at clock level ``lv`` plus the others' (see :meth:`_on_poll`)."""
        s = 0.0
        demand = self._demand
        clocks = self.clocks
        for u in self._pa_units:
            c = clocks[u]
            s += demand[u] * c.power_scales[lv if lv < c.max_level else c.max_level]
        return self._pa_others_w + s

    def _on_poll(self, arg: Any) -> None:
        d = self.dev
        now = d.loop.now
        self.integrate(now)
        dt = now - self._poll_last_t
        self._poll_last_t = now
        clocks = self.clocks
        n = len(clocks)
        demand = self._demand
        nominal = self._nominal_j
        last = self._poll_last_j
        want = self._want
        for u in range(n):
            j = nominal[u]
            demand[u] = (j - last[u]) / dt if dt > 0 else 0.0
            last[u] = j
            want[u] = 0
        net = self.net
        for slot in self.govs:
            s = 0.0
            for u in slot.others:
                c = clocks[u]
                s += demand[u] * c.power_scales[c.level]
            self._pa_units = slot.units
            self._pa_others_w = self.static_w + s
            temp = net.junction_c if slot.node == "junction" else net.skin_c
            lv = slot.gov.update(temp, dt, self._power_at_fn)
            for u in slot.units:
                top = clocks[u].max_level
                w = lv if lv < top else top
                if w > want[u]:
                    want[u] = w
        changed = False
        for u in range(n):
            c = clocks[u]
            if c.level != want[u]:
                c.level = want[u]
                changed = True
        if self.migrators and self._migrate(now):
            changed = True
        if changed:
            self._apply()
        if self.active:
            d.loop.after(self.cfg.poll_s, self._on_poll)

    def _migrate(self, now: float) -> bool:
        """Decide and carry out moves from the present levels; True when a stage changed unit."""
        d = self.dev
        names = d.unit_names
        moved = False
        for m in self.migrators:
            home = names.index(m.cfg.units[0])
            why = m.decide(self.clocks[home].level)
            if why is None:
                continue
            src, dst = names.index(m.unit), names.index(m.target)
            self.migrations.append(MigrationRecord(
                now, d.name, m.cfg.stage, m.unit, m.target, why,
                self.clocks[src].level, self.clocks[dst].level,
                self.energy.efficiency(src, self.clocks[src].level),
                self.energy.efficiency(dst, self.clocks[dst].level)))
            # the servers at work move with the stage (their power counts on the new unit)
            if m.cfg.stage == "image":
                busy = d.cpu.busy
                d.cpu.unit = dst
            else:
                assert d.encoder is not None
                busy = d.encoder.busy
                d.encoder.unit = dst
            self.power.move(src, dst, busy)
            m.moved()
            moved = True
        return moved

    def _apply(self) -> None:
        """New unit levels: power from now, and the clocks the device's work runs at."""
        d = self.dev
        self.power_w = self._power_now()
        cpu = self.clocks[d.cpu.unit]
        cpu_scale = cpu.scales[cpu.level]
        encoder = d.encoder
        enc_scale = 1.0
        if encoder is not None:
            enc = self.clocks[encoder.unit]
            enc_scale = enc.scales[enc.level]
        for m in self.migrators:  # a migrated stage runs at its unit's speed for it
            if m.cfg.stage == "image":
                cpu_scale *= m.cfg.speed.get(m.unit, 1.0)
            else:
                enc_scale *= m.cfg.speed.get(m.unit, 1.0)
        d.cpu.scale = cpu_scale
        if encoder is not None:
            encoder.scale = enc_scale
        llm = self.clocks[d.llm_unit]
        d.level = llm.level
        d.llm_scale = llm.scales[llm.level]
        d.engine.retime(d.llm_scale)
        for name, e in d.variants.items():
            c = self.clocks[d.unit_names.index(d.profile.llm_variants[name].unit)]
            e.retime(c.scales[c.level])
        if d.on_level is not None:
            d.on_level(d)

    def force(self, level: int) -> None:
        """Every unit to ``level`` (clipped to its ladder); the governors may change it again."""
        self.integrate(self.loop.now)
        for c in self.clocks:
            c.level = max(0, min(level, c.max_level))
        self._apply()

    def fill_sample(self, s: DeviceSample) -> None:
        """Add the skin temperature and every unit's clock to the device's sample."""
        s.skin_temp_c = self.net.skin_c
        s.units = [UnitClockSample(unit=n, level=c.level, scale=c.scales[c.level])
                   for n, c in zip(self.dev.unit_names, self.clocks, strict=True)]

    def take_migrations(self) -> list[MigrationDecision]:
        """The moves decided since the previous call, as trace records."""
        new = self.migrations[self._migrations_taken:]
        self._migrations_taken = len(self.migrations)
        return [MigrationDecision(
            t_s=m.t_s, device=m.device, stage=m.stage, from_unit=m.from_unit, to_unit=m.to_unit,
            reason=m.reason, from_level=m.from_level, to_level=m.to_level,
            from_efficiency=m.from_efficiency, to_efficiency=m.to_efficiency) for m in new]

    def estimate_local_j(self, job: Job) -> float | None:
        """Joules ``job`` would cost here now, from each unit's efficiency at its present level
        (:mod:`sim.core.energy_estimate`); None without the profile's efficiency figures."""
        d = self.dev
        enc_u = d.encoder.unit if d.encoder is not None else d.cpu.unit if d.enc_in_worker else -1
        return self.energy.local_j(job, d.cpu.unit, enc_u, [c.level for c in self.clocks])

    def unit_levels(self) -> dict[str, int]:
        return {n: c.level for n, c in zip(self.dev.unit_names, self.clocks, strict=True)}
