"""Two thermal nodes — the die (junction) and the case or board (skin) — integrated exactly.

With θ the temperatures above ambient, ``C`` the heat capacities and ``G`` the conductance matrix
(junction–skin ``g_js = 1/R_js``, skin–air ``g_sa``, optional junction–air ``g_ja``)::

    C · dθ/dt = −G θ + p,   p = (P, 0)   (all power enters the junction)

For constant ``P`` the solution is ``θ(t) = θ_ss + e^{At} (θ0 − θ_ss)`` with ``A = −C⁻¹G`` and
``θ_ss = G⁻¹ p``. ``A`` is similar to a symmetric matrix, so its two eigenvalues are real and
negative: ``−1/τ_fast`` (the junction catching up with the skin: seconds) and ``−1/τ_slow`` (the
whole device heating: minutes). Sylvester's formula gives the matrix exponential in closed form::

    e^{At} = e^{λ1 t} (A − λ2 I)/(λ1 − λ2) + e^{λ2 t} (A − λ1 I)/(λ2 − λ1)

so :meth:`TwoNodeNetwork.advance` is exact whatever the time step, as the single node's is.
"""

from __future__ import annotations

import math

from sim.scenario.thermal_network_config import ThermalNetworkConfig


class TwoNodeNetwork:
    """Junction and skin temperatures under piecewise-constant power."""

    __slots__ = (
        "_dt",
        "_e0",
        "_e1",
        "_e2",
        "_e3",
        "_l1",
        "_l2",
        "_m1",
        "_m2",
        "ambient_c",
        "c_j",
        "c_s",
        "g_ja",
        "g_js",
        "g_sa",
        "junction_c",
        "lam",
        "m1",
        "m2",
        "skin_c",
        "ss_j_per_w",
        "ss_s_per_w",
        "t_s",
    )

    def __init__(self, cfg: ThermalNetworkConfig, t_s: float = 0.0) -> None:
        self.c_j = cfg.junction_c_j_per_c
        self.c_s = cfg.skin_c_j_per_c
        self.g_js = 1.0 / cfg.r_junction_skin_c_per_w
        self.g_sa = 1.0 / cfg.r_skin_ambient_c_per_w
        r_ja = cfg.r_junction_ambient_c_per_w
        self.g_ja = 0.0 if r_ja is None else 1.0 / r_ja
        self.ambient_c = cfg.ambient_c
        start = cfg.ambient_c if cfg.initial_c is None else cfg.initial_c
        self.junction_c = start
        self.skin_c = start
        self.t_s = t_s
        # A = −C⁻¹ G
        a11 = -(self.g_js + self.g_ja) / self.c_j
        a12 = self.g_js / self.c_j
        a21 = self.g_js / self.c_s
        a22 = -(self.g_js + self.g_sa) / self.c_s
        tr = a11 + a22
        det = a11 * a22 - a12 * a21
        disc = math.sqrt(max(tr * tr / 4.0 - det, 0.0))
        l1 = tr / 2.0 + disc  # slow (closer to 0)
        l2 = tr / 2.0 - disc  # fast
        self.lam = (l1, l2)
        d = l1 - l2
        # M1 = (A − λ2 I)/(λ1 − λ2), M2 = (A − λ1 I)/(λ2 − λ1), as row-major 4-tuples
        self.m1 = ((a11 - l2) / d, a12 / d, a21 / d, (a22 - l2) / d)
        self.m2 = (-(a11 - l1) / d, -a12 / d, -a21 / d, -(a22 - l1) / d)
        # θ_ss = G⁻¹ (P, 0): G = [[g_js+g_ja, −g_js], [−g_js, g_js+g_sa]]
        g11 = self.g_js + self.g_ja
        g22 = self.g_js + self.g_sa
        gdet = g11 * g22 - self.g_js * self.g_js
        self.ss_j_per_w = g22 / gdet
        self.ss_s_per_w = self.g_js / gdet
        # the same as plain floats for :meth:`at`, and the propagator of the last step (the
        # governors' poll interval repeats, so does its step)
        self._l1 = l1
        self._l2 = l2
        self._m1 = self.m1
        self._m2 = self.m2
        self._dt = -1.0
        self._e0 = self._e1 = self._e2 = self._e3 = 0.0

    @property
    def tau_s(self) -> tuple[float, float]:
        """(slow, fast) time constants in seconds."""
        return -1.0 / self.lam[0], -1.0 / self.lam[1]

    def steady_c(self, power_w: float) -> tuple[float, float]:
        """(junction, skin) temperatures that constant ``power_w`` settles at."""
        return (self.ambient_c + power_w * self.ss_j_per_w,
                self.ambient_c + power_w * self.ss_s_per_w)

    def propagator(self, dt_s: float) -> tuple[float, float, float, float]:
        """``e^{A dt}`` row-major."""
        e1 = math.exp(self.lam[0] * dt_s)
        e2 = math.exp(self.lam[1] * dt_s)
        m1, m2 = self.m1, self.m2
        return (e1 * m1[0] + e2 * m2[0], e1 * m1[1] + e2 * m2[1],
                e1 * m1[2] + e2 * m2[2], e1 * m1[3] + e2 * m2[3])

    def at(self, dt_s: float, power_w: float) -> tuple[float, float]:
        """(junction, skin) after ``dt_s`` more seconds at ``power_w``, without moving."""
        if dt_s <= 0.0:
            return self.junction_c, self.skin_c
        sj = self.ambient_c + power_w * self.ss_j_per_w
        ss = self.ambient_c + power_w * self.ss_s_per_w
        if dt_s != self._dt:  # :meth:`propagator`, in plain floats and kept for the next step
            e1 = math.exp(self._l1 * dt_s)
            e2 = math.exp(self._l2 * dt_s)
            m1 = self._m1
            m2 = self._m2
            self._e0 = e1 * m1[0] + e2 * m2[0]
            self._e1 = e1 * m1[1] + e2 * m2[1]
            self._e2 = e1 * m1[2] + e2 * m2[2]
            self._e3 = e1 * m1[3] + e2 * m2[3]
            self._dt = dt_s
        xj = self.junction_c - sj
        xs = self.skin_c - ss
        return sj + self._e0 * xj + self._e1 * xs, ss + self._e2 * xj + self._e3 * xs

    def advance(self, t_s: float, power_w: float) -> tuple[float, float]:
        """Move to time ``t_s`` having dissipated ``power_w`` since the last call."""
        dt = t_s - self.t_s
        if dt > 0.0:
            j, sk = self.at(dt, power_w)
            self.junction_c = j
            self.skin_c = sk
            self.t_s = t_s
        return self.junction_c, self.skin_c

    def temp_c(self, node: str) -> float:
        return self.junction_c if node == "junction" else self.skin_c
