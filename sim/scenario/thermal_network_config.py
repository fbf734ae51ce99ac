"""The ``thermal_network:`` section of a device profile: two thermal nodes, clock ladders, governors.

A phone or a small board is not one lump of metal. The die (the *junction*) is a few grams of
silicon that heats within seconds; the case, board and heat spreader (the *skin*) are tens of
grams that take minutes. Heat flows junction → skin → air (and, on boards with a heatsink on the
die, junction → air directly)::

    P ──▶ [junction C_j] ──R_js──▶ [skin C_s] ──R_sa──▶ ambient
                └────────────R_ja (optional)───────────────┘

Each governor watches one node and throttles the units it names; a unit's clock level is the
deepest any of its governors asks for (Linux gives a cooling device the maximum of its requests).
See :mod:`sim.core.thermal_network` and :mod:`sim.core.governors`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sim.scenario.schema import non_negative, positive, require


class NodeName(enum.StrEnum):
    JUNCTION = "junction"
    SKIN = "skin"


@dataclass(slots=True, frozen=True)
class ClockLaw:
    """A unit's DVFS ladder, made from a law: ``levels`` clocks evenly spaced from full clock
    down to ``min_clock`` (fraction of full), dynamic power ∝ clock^``power_exponent`` (P ∝ f·V²
    with the voltage falling with the clock: 2–3 on phones). Level ``k`` stretches service times
    by ``1/f_k`` and scales dynamic power by ``f_k^power_exponent``."""

    levels: int = 8
    min_clock: float = 0.4
    power_exponent: float = 2.5
    # work per joule of dynamic energy at full clock (TOPS/W, or tokens/J); None: not given
    tops_per_w: float | None = None

    def __post_init__(self) -> None:
        require(self.levels >= 1, "levels", f"must be >= 1, got {self.levels}")
        require(0 < self.min_clock <= 1, "min_clock", f"must be within (0, 1], got {self.min_clock}")
        positive(self.power_exponent, "power_exponent")
        if self.tops_per_w is not None:
            positive(self.tops_per_w, "tops_per_w")

    def efficiency(self, level: int) -> float | None:
        """Work per joule at ``level``: work ∝ f, dynamic power ∝ f^exponent, so it grows as the
        clock falls (``tops_per_w · f^(1 − exponent)``)."""
        if self.tops_per_w is None:
            return None
        f = self.clocks()[min(level, self.levels - 1)]
        return self.tops_per_w * f ** (1.0 - self.power_exponent)

    def clocks(self) -> list[float]:
        """Clock fraction of each level, fastest first."""
        n = self.levels
        if n == 1:
            return [1.0]
        return [1.0 - k * (1.0 - self.min_clock) / (n - 1) for k in range(n)]

    def power_scales(self) -> list[float]:
        return [f ** self.power_exponent for f in self.clocks()]


@dataclass(slots=True, frozen=True)
class StepWiseConfig:
    """Linux ``step_wise``: at each poll above ``trip_c`` (temperature rising or level) one level
    deeper; below ``trip_c − hysteresis_c`` one level back. An integrating controller that holds
    a fast node near its trip."""

    trip_c: float
    hysteresis_c: float = 2.0

    def __post_init__(self) -> None:
        non_negative(self.hysteresis_c, "hysteresis_c")


@dataclass(slots=True, frozen=True)
class AllocatorConfig:
    """Linux ``power_allocator`` (IPA): a PID on ``control_temp_c − T`` sets a power budget for the
    governed units; the fastest common level whose power fits it is chosen."""

    control_temp_c: float
    sustainable_power_w: float
    k_p: float = 0.5
    k_i: float = 0.05
    k_d: float = 0.0
    switch_on_below_c: float = 3.0  # below control − this: full speed, controller reset

    def __post_init__(self) -> None:
        positive(self.sustainable_power_w, "sustainable_power_w")
        non_negative(self.k_p, "k_p")
        non_negative(self.k_i, "k_i")
        non_negative(self.k_d, "k_d")
        non_negative(self.switch_on_below_c, "switch_on_below_c")


@dataclass(slots=True, frozen=True)
class FirmwareConfig:
    """Board firmware (Raspberry Pi): between ``soft_c`` and ``hard_c`` the clock is stepped down
    one level per poll, no deeper than ``soft_floor_level``; at ``hard_c`` it drops at once to
    ``hard_level``; it steps back up one level per poll below ``soft_c − hysteresis_c``."""

    soft_c: float = 80.0
    hard_c: float = 85.0
    soft_floor_level: int = 3
    hard_level: int = 7
    hysteresis_c: float = 2.0

    def __post_init__(self) -> None:
        require(self.hard_c >= self.soft_c, "hard_c", f"must be >= soft_c ({self.soft_c})")
        non_negative(self.soft_floor_level, "soft_floor_level")
        require(self.hard_level >= self.soft_floor_level, "hard_level",
                f"must be >= soft_floor_level ({self.soft_floor_level})")
        non_negative(self.hysteresis_c, "hysteresis_c")


class NetGovernorKind(enum.StrEnum):
    STEP_WISE = "step_wise"
    POWER_ALLOCATOR = "power_allocator"
    FIRMWARE = "firmware"


@dataclass(slots=True, frozen=True)
class NetGovernorConfig:
    """One governor: the node it reads, the units it throttles, and exactly one law."""

    node: NodeName
    units: list[str]
    step_wise: StepWiseConfig | None = None
    power_allocator: AllocatorConfig | None = None
    firmware: FirmwareConfig | None = None

    def __post_init__(self) -> None:
        require(len(self.units) > 0, "units", "name at least one unit to throttle")
        given = [k for k in ("step_wise", "power_allocator", "firmware")
                 if getattr(self, k) is not None]
        require(len(given) == 1, "step_wise",
                f"give exactly one of step_wise, power_allocator, firmware (got {given or 'none'})")

    @property
    def kind(self) -> NetGovernorKind:
        if self.step_wise is not None:
            return NetGovernorKind.STEP_WISE
        if self.power_allocator is not None:
            return NetGovernorKind.POWER_ALLOCATOR
        return NetGovernorKind.FIRMWARE

    @property
    def limit_c(self) -> float:
        """The temperature this governor holds the node at or below."""
        if self.step_wise is not None:
            return self.step_wise.trip_c
        if self.power_allocator is not None:
            return self.power_allocator.control_temp_c
        assert self.firmware is not None
        return self.firmware.soft_c


@dataclass(slots=True, frozen=True)
class MigrationConfig:
    """Move a stage off its hot unit and back, with hysteresis (``migrations:``).

    The stage runs on ``units[0]`` (its home, the profile's unit for it); when that unit's clock
    level reaches ``hot_level`` it moves to ``units[1]``; when the home unit is back at or below
    ``cool_level`` it returns. ``speed``: the stage's service time on a unit relative to its
    model (default 1; a GPU running an NPU's encoder: 1.5, a little core: 2). ``stage`` is
    ``encode`` (the vision encoder, between accelerators) or ``image`` (decode, resize and
    normalize: the preprocessing workers, between CPU clusters of as many cores). Work in
    progress keeps its end time; its power counts on the new unit from the move.
    """

    stage: str
    units: list[str]
    hot_level: int = 2
    cool_level: int = 0
    speed: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(self.stage in ("encode", "image"), "stage",
                f"'encode' or 'image' migrate, got {self.stage!r}")
        require(len(self.units) == 2, "units", "name the home unit and the one to move to")
        require(self.hot_level > self.cool_level >= 0, "hot_level",
                f"must be above cool_level ({self.cool_level}) for hysteresis, got {self.hot_level}")
        for u, v in self.speed.items():
            positive(v, f"speed.{u}")


@dataclass(slots=True, frozen=True)
class ThermalNetworkConfig:
    """Junction and skin nodes, their resistances, per-unit clock ladders and the governors.

    All device power enters the junction. ``r_junction_ambient_c_per_w`` (None: no such path)
    is a heatsink on the die. Units without a ``clocks`` entry keep the profile's ``dvfs`` ladder
    (their efficiency, if given, in ``tops_per_w``).
    Governors run every ``poll_s`` (Linux thermal zones poll; 0.1–1 s is usual).
    """

    junction_c_j_per_c: float
    skin_c_j_per_c: float
    r_junction_skin_c_per_w: float
    r_skin_ambient_c_per_w: float
    r_junction_ambient_c_per_w: float | None = None
    ambient_c: float = 25.0
    initial_c: float | None = None  # both nodes start here (None: ambient)
    poll_s: float = 0.25
    clocks: dict[str, ClockLaw] = field(default_factory=dict)
    # work per joule at full clock of units without a ``clocks`` entry (on the ``dvfs`` ladder)
    tops_per_w: dict[str, float] = field(default_factory=dict)
    governors: list[NetGovernorConfig] = field(default_factory=list)
    migrations: list[MigrationConfig] = field(default_factory=list)

    def __post_init__(self) -> None:
        positive(self.junction_c_j_per_c, "junction_c_j_per_c")
        positive(self.skin_c_j_per_c, "skin_c_j_per_c")
        positive(self.r_junction_skin_c_per_w, "r_junction_skin_c_per_w")
        positive(self.r_skin_ambient_c_per_w, "r_skin_ambient_c_per_w")
        if self.r_junction_ambient_c_per_w is not None:
            positive(self.r_junction_ambient_c_per_w, "r_junction_ambient_c_per_w")
        positive(self.poll_s, "poll_s")
        for unit, v in self.tops_per_w.items():
            positive(v, f"tops_per_w.{unit}")
            require(unit not in self.clocks, f"tops_per_w.{unit}",
                    "the unit has a clocks entry: give its tops_per_w there")

    def trip_temps_c(self) -> list[float]:
        return sorted(g.limit_c for g in self.governors)
