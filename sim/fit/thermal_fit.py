"""Fit a profile's thermal network to a measured curve: time against throughput (or clock), and
optionally temperature.

The forward model is the network itself under *continuous load* — the units named busy run at
their full duty cycle, the governors poll as in the simulator, and the governed unit's clock
fraction (1/scale) is the throughput relative to full clock (decode is memory-bound: tokens/s
follow the clock). Both sides are compared as window means (a measured point is a benchmark
iteration or a rolling window, not an instant): the model's clock fraction is averaged over
``window_s`` before each measured time.

Parameters are fitted in log space with :func:`scipy.optimize.least_squares` (bounded to a
factor of ``spread`` around the profile's values): by default the two heat capacities and the
two resistances, plus the full-clock throughput that the measured values are normalised by.
Residuals are the relative throughput error at each point and, where the curve has temperatures,
the junction error in units of ``temp_scale_c`` (10 °C counts as much as 100 % throughput).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares, minimize

from sim.core.governors import make_governor
from sim.core.thermal_network import TwoNodeNetwork
from sim.scenario.profiles import DeviceProfile
from sim.scenario.schema import ConfigError
from sim.scenario.thermal_network_config import (
    ClockLaw,
    NetGovernorConfig,
    NodeName,
    ThermalNetworkConfig,
)

#: network fields the fit may move (``clocks.<unit>.power_exponent``/``min_clock`` are the law's)
NETWORK_PARAMS = ("junction_c_j_per_c", "skin_c_j_per_c", "r_junction_skin_c_per_w",
                  "r_skin_ambient_c_per_w", "r_junction_ambient_c_per_w")
LAW_PARAMS = ("power_exponent", "min_clock")
DEFAULT_PARAMS = ("junction_c_j_per_c", "skin_c_j_per_c", "r_junction_skin_c_per_w",
                  "r_skin_ambient_c_per_w")


@dataclass(slots=True)
class Curve:
    """A measured curve: times, a throughput-like value (tok/s or clock), optional temperatures."""

    t_s: np.ndarray
    value: np.ndarray
    temp_c: np.ndarray  # NaN where not measured
    value_name: str = "throughput_tok_s"

    @property
    def has_temp(self) -> bool:
        return bool(np.isfinite(self.temp_c).any())


def read_curve(path: Path) -> Curve:
    """Read ``t_s,<value>[,temp_c]`` CSV (``#`` lines are comments; the value column is
    ``throughput_tok_s`` or ``clock_mhz`` or ``clock_fraction``)."""
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    rows = list(csv.DictReader(lines))
    if not rows:
        raise ConfigError(f"{path}: no rows (want a header t_s,throughput_tok_s[,temp_c])")
    cols = list(rows[0])
    value_col = next((c for c in ("throughput_tok_s", "clock_mhz", "clock_fraction") if c in cols),
                     None)
    if "t_s" not in cols or value_col is None:
        raise ConfigError(f"{path}: the header must name t_s and one of throughput_tok_s, "
                          f"clock_mhz, clock_fraction (optionally temp_c); got {', '.join(cols)}")
    try:
        t = np.array([float(r["t_s"]) for r in rows])
        v = np.array([float(r[value_col]) if r[value_col] not in ("", None) else math.nan
                      for r in rows])
        temp = np.array([float(r["temp_c"]) if r.get("temp_c") not in ("", None) else math.nan
                         for r in rows])
    except ValueError as e:
        raise ConfigError(f"{path}: a value is not a number ({e})") from None
    if np.any(np.diff(t) <= 0):
        raise ConfigError(f"{path}: t_s must rise strictly from row to row")
    return Curve(t, v, temp, value_col)


@dataclass(slots=True, frozen=True)
class Load:
    """Continuous load: which units are busy (all their servers), and which unit's clock is the
    throughput."""

    busy_units: tuple[str, ...]
    unit: str


def continuous_load(cfg: ThermalNetworkConfig, prof: DeviceProfile, load: Load, t_end_s: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Poll-by-poll (t, clock fraction of ``load.unit``, junction, skin) under continuous load."""
    names = list(prof.units)
    static = prof.base_w + sum(u.idle_w * u.count for u in prof.units.values())
    dyn = [(u.active_w - u.idle_w) * u.count if n in load.busy_units else 0.0
           for n, u in prof.units.items()]
    ladders: list[tuple[list[float], list[float]]] = []
    for n in names:
        law = cfg.clocks.get(n)
        if law is not None:
            ladders.append((law.clocks(), law.power_scales()))
        else:
            ladders.append(([1.0 / lv.scale for lv in prof.dvfs],
                            [lv.power_scale for lv in prof.dvfs]))
    levels = [0] * len(names)
    govs = []
    for g in cfg.governors:
        units = [names.index(u) for u in g.units]
        govs.append((make_governor(g, max(len(ladders[u][0]) - 1 for u in units)),
                     g.node.value, units))
    net = TwoNodeNetwork(cfg)
    dt = cfg.poll_s
    steps = math.ceil(t_end_s / dt) + 1
    out_t = np.empty(steps)
    out_f = np.empty(steps)
    out_j = np.empty(steps)
    out_s = np.empty(steps)
    u_out = names.index(load.unit)

    def power() -> float:
        return static + sum(d * ladders[u][1][levels[u]] for u, d in enumerate(dyn))

    for k in range(steps):
        t = k * dt
        if k:
            net.advance(t, power())
        want = [0] * len(names)
        for gov, node, units in govs:
            others = static + sum(d * ladders[u][1][levels[u]] for u, d in enumerate(dyn)
                                  if u not in units)

            def power_at(lv: int, units: list[int] = units, others: float = others) -> float:
                return others + sum(dyn[u] * ladders[u][1][min(lv, len(ladders[u][1]) - 1)]
                                    for u in units)

            lv = gov.update(net.temp_c(node), dt, power_at)
            for u in units:
                want[u] = max(want[u], min(lv, len(ladders[u][0]) - 1))
        levels = want
        out_t[k] = t
        out_f[k] = ladders[u_out][0][levels[u_out]]
        out_j[k] = net.junction_c
        out_s[k] = net.skin_c
    return out_t, out_f, out_j, out_s


def window_means(t: np.ndarray, x: np.ndarray, at_s: np.ndarray, window_s: float) -> np.ndarray:
    """Mean of ``x`` over ``(at − window_s, at]`` for each ``at`` (the value at ``at`` when the
    window holds no sample)."""
    c = np.concatenate([[0.0], np.cumsum(x)])
    hi = np.searchsorted(t, at_s, side="right")
    lo = np.searchsorted(t, at_s - window_s, side="right")
    lo = np.minimum(lo, hi - 1)
    return (c[hi] - c[lo]) / (hi - lo)


@dataclass(slots=True)
class ThermalFit:
    """What :func:`fit_thermal` found."""

    params: dict[str, float]
    full_value: float  # the measured value at full clock (tok/s, MHz, or 1)
    network: ThermalNetworkConfig
    rms_rel: float  # RMS relative error of the throughput (or clock) curve
    max_rel: float  # largest relative error after skip_s
    rms_temp_c: float | None  # RMS junction error where the curve has temperatures
    predicted: np.ndarray = field(repr=False)  # model values at the curve's times
    predicted_temp_c: np.ndarray = field(repr=False)


def _with(cfg: ThermalNetworkConfig, unit: str, params: dict[str, float]) -> ThermalNetworkConfig:
    net_kw = {k: v for k, v in params.items() if k in NETWORK_PARAMS}
    law_kw = {k: v for k, v in params.items() if k in LAW_PARAMS}
    out = dataclasses.replace(cfg, **net_kw)  # type: ignore[arg-type]
    out = dataclasses.replace(out, governors=[_sustainable(g, out) for g in out.governors])
    if law_kw:
        law = cfg.clocks.get(unit, ClockLaw())
        out = dataclasses.replace(out, clocks={**cfg.clocks,
                                               unit: dataclasses.replace(law, **law_kw)})  # type: ignore[arg-type]
    return out


def _sustainable(g: NetGovernorConfig, cfg: ThermalNetworkConfig) -> NetGovernorConfig:
    """A skin allocator's sustainable power follows the resistances: the power that holds the
    node at its control temperature in steady state (what Linux's IPA documentation asks for)."""
    pa = g.power_allocator
    if pa is None:
        return g
    net = TwoNodeNetwork(cfg)
    per_w = net.ss_s_per_w if g.node is NodeName.SKIN else net.ss_j_per_w
    watts = (pa.control_temp_c - cfg.ambient_c) / per_w
    if watts <= 0:
        return g
    return dataclasses.replace(g, power_allocator=dataclasses.replace(pa, sustainable_power_w=watts))


def _start(cfg: ThermalNetworkConfig, unit: str, name: str) -> float:
    if name in LAW_PARAMS:
        return float(getattr(cfg.clocks.get(unit, ClockLaw()), name))
    v = getattr(cfg, name)
    if v is None:
        raise ConfigError(f"cannot fit {name}: the profile's network has none (give it a value)")
    return float(v)


def predict(cfg: ThermalNetworkConfig, prof: DeviceProfile, load: Load, curve: Curve,
            window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Model clock fraction (window means) and junction temperature at the curve's times."""
    t, f, tj, _ = continuous_load(cfg, prof, load, float(curve.t_s[-1]) + cfg.poll_s)
    frac = window_means(t, f, curve.t_s, window_s)
    temp = np.interp(curve.t_s, t, tj)
    return frac, temp


def fit_thermal(prof: DeviceProfile, curve: Curve, load: Load,
                params: tuple[str, ...] = DEFAULT_PARAMS, window_s: float = 10.0,
                spread: float = 20.0, temp_scale_c: float = 10.0, skip_s: float = 10.0,
                fit_full_value: bool = True) -> ThermalFit:
    """Least-squares fit of ``params`` of ``prof.thermal_network`` to ``curve``."""
    cfg = prof.thermal_network
    if cfg is None:
        raise ConfigError(f"profile {prof.name} has no thermal_network section to fit")
    for p in params:
        if p not in NETWORK_PARAMS + LAW_PARAMS:
            raise ConfigError(f"cannot fit {p!r} (known: {', '.join(NETWORK_PARAMS + LAW_PARAMS)})")
    x0 = np.log([_start(cfg, load.unit, p) for p in params])
    ok_v = np.isfinite(curve.value)
    ok_t = np.isfinite(curve.temp_c)
    full0 = float(np.nanmax(curve.value[: max(1, len(curve.value) // 5)]))
    lo = x0 - math.log(spread)
    hi = x0 + math.log(spread)
    for i, p in enumerate(params):  # the clock law's min_clock stays a fraction
        if p == "min_clock":
            hi[i] = min(hi[i], 0.0)

    def unpack(x: np.ndarray) -> dict[str, float]:
        return {p: float(math.exp(v)) for p, v in zip(params, x, strict=True)}

    def full_for(frac: np.ndarray) -> float:
        """The full-clock value that best scales the model's fractions onto the curve (the
        relative residual ``frac·full/v − 1`` is linear in ``full``: closed form)."""
        if not fit_full_value:
            return full0
        q = frac[ok_v] / curve.value[ok_v]
        return float(np.sum(q) / np.sum(q * q)) if np.sum(q * q) > 0 else full0

    def residuals(x: np.ndarray) -> np.ndarray:
        frac, temp = predict(_with(cfg, load.unit, unpack(x)), prof, load, curve, window_s)
        r = (frac * full_for(frac) - curve.value) / curve.value
        parts = [r[ok_v]]
        if ok_t.any():
            parts.append((temp - curve.temp_c)[ok_t] / temp_scale_c)
        return np.concatenate(parts)

    def cost(x: np.ndarray) -> float:
        return float(np.sum(residuals(np.clip(x, lo, hi)) ** 2))

    # the governors' discrete levels make the model piecewise constant at fine scale: a simplex
    # search finds the basin, least squares (differencing over wide steps) polishes it
    simplex = minimize(cost, x0, method="Nelder-Mead",
                       options={"initial_simplex": np.vstack([x0] + [
                           x0 + 0.4 * np.eye(len(x0))[i] for i in range(len(x0))]),
                           "maxfev": 60 * len(x0), "xatol": 0.01, "fatol": 1e-6})
    start = np.clip(simplex.x, lo + 1e-9, hi - 1e-9)
    best = least_squares(residuals, start, bounds=(lo, hi), diff_step=0.05, max_nfev=100)
    if simplex.fun < 2 * best.cost:  # least_squares' cost is half the sum of squares
        best.x = start
    vals = unpack(best.x)
    net = _with(cfg, load.unit, vals)
    frac, temp = predict(net, prof, load, curve, window_s)
    full = full_for(frac)
    rel = (frac * full - curve.value) / curve.value
    keep = ok_v & (curve.t_s >= skip_s)
    rms_temp = float(np.sqrt(np.mean((temp - curve.temp_c)[ok_t] ** 2))) if ok_t.any() else None
    return ThermalFit(vals, full, net, float(np.sqrt(np.mean(rel[ok_v] ** 2))),
                      float(np.max(np.abs(rel[keep]))) if keep.any() else 0.0, rms_temp,
                      frac * full, temp)
