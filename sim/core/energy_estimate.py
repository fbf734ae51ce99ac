"""A request's predicted energy on the device, from each unit's efficiency at its present clock.

A unit's clock law (``thermal_network.clocks.<unit>.tops_per_w``), or for a unit on the
profile's ``dvfs`` ladder ``thermal_network.tops_per_w.<unit>``, gives its efficiency at full
clock (work per joule of dynamic energy). At level ``k`` a unit's work takes ``stretch_k`` times
as long at ``power_k`` times the dynamic power, so its efficiency is ``efficiency(0) /
(stretch_k · power_k)`` (on a clock law, work ∝ clock f and power ∝ f^n: it grows as f^(1 − n)
when the clock falls, :meth:`~sim.scenario.thermal_network_config.ClockLaw.efficiency`). A request's work on a unit is what the
unit does in the stage's mean service time at full clock with its dynamic power
(``active_w − idle_w`` of one server); at level ``k`` that work costs

    E_k = t_full · P_dyn · efficiency(0) / efficiency(k)

joules. The estimate sums the image stages (on the CPU stages' unit, or the one they migrated
to), the encoder and the language model (prefill plus ``output_tokens`` decode steps at batch 1):
the marginal energy of running the request here. The device's base and idle power are drawn
whether or not it runs here and are left out, as is the radio of an offload
(:meth:`sim.core.offload.OffloadPath.estimate_radio_j` is that side).

Without an efficiency figure for every unit the request uses the estimate is ``None``: the
energy-aware policy then decides from the battery alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.core.service import Linear
from sim.scenario.profiles import CPU_STAGE_NAMES, DeviceProfile, StageName
from sim.scenario.thermal_network_config import ThermalNetworkConfig

if TYPE_CHECKING:
    from sim.core.job import Job


class EnergyEstimate:
    """The stage models and per-unit laws one device's energy estimate needs, built once."""

    __slots__ = ("_decode_base_s", "_decode_per_ctx_s", "_dyn_w", "_encode", "_full", "_image",
                 "_prefill", "_ratio", "enc_unit", "llm_unit")

    def __init__(self, profile: DeviceProfile, cfg: ThermalNetworkConfig,
                 ladders: list[tuple[list[float], list[float]]]) -> None:
        """``ladders``: each unit's (time stretch, power scale) per clock level, fastest first."""
        names = list(profile.units)
        st = profile.stages
        self._dyn_w = [profile.units[n].active_w - profile.units[n].idle_w for n in names]
        # efficiency at full clock: the unit's clock law's, or tops_per_w for a dvfs-ladder unit
        self._full: list[float | None] = []
        for n in names:
            law = cfg.clocks.get(n)
            self._full.append(law.tops_per_w if law is not None else cfg.tops_per_w.get(n))
        # energy per operation at level k relative to full clock: stretch_k · power_k, which is
        # efficiency(0) / efficiency(k) (f^(exponent − 1) on a clock law)
        self._ratio = [[sk * pk / (stretch[0] * power[0]) for sk, pk in zip(stretch, power,
                                                                            strict=True)]
                       for stretch, power in ladders]
        self._image = Linear(*(st[s].model for s in CPU_STAGE_NAMES if s in st))
        enc = st.get(StageName.ENCODE)
        self._encode = Linear(enc.model) if enc is not None else None
        self.enc_unit = names.index(enc.unit) if enc is not None else -1
        self._prefill = Linear(st[StageName.PREFILL].model)
        self.llm_unit = names.index(st[StageName.PREFILL].unit)
        step = st.get(StageName.DECODE_STEP)
        per = step.model.per if step is not None else {}
        self._decode_base_s = (step.model.base_s + per.get("batch", 0.0)) if step is not None \
            else 0.0
        self._decode_per_ctx_s = per.get("context_tokens", 0.0)

    def efficiency(self, unit: int, level: int) -> float | None:
        """``unit``'s work per joule at clock ``level`` (None: the profile gives no figure)."""
        full = self._full[unit]
        if full is None:
            return None
        ratio = self._ratio[unit]
        return full / ratio[level if level < len(ratio) else len(ratio) - 1]

    def _unit_j(self, unit: int, full_clock_s: float, level: int) -> float | None:
        if self._full[unit] is None:
            return None
        ratio = self._ratio[unit]
        return full_clock_s * self._dyn_w[unit] * ratio[level if level < len(ratio)
                                                        else len(ratio) - 1]

    def local_j(self, job: Job, cpu_unit: int, enc_unit: int, levels: list[int]) -> float | None:
        """Joules ``job`` would cost here with the units at ``levels`` (image stages on
        ``cpu_unit``, the encoder on ``enc_unit``), or None without the efficiency figures."""
        ctx = job.prompt_tokens + 0.5 * job.output_tokens  # mean context over the decode
        llm_s = self._prefill.mean_s(job) + job.output_tokens * (
            self._decode_base_s + self._decode_per_ctx_s * ctx)
        parts = [(cpu_unit, self._image.mean_s(job)), (self.llm_unit, llm_s)]
        if self._encode is not None and enc_unit >= 0:
            parts.append((enc_unit, self._encode.mean_s(job)))
        total = 0.0
        for unit, full_clock_s in parts:
            j = self._unit_j(unit, full_clock_s, levels[unit])
            if j is None:
                return None
            total += j
        return total
