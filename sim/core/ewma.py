"""An exponentially weighted moving average: a measured quantity that forgets old observations.

After ``n`` more observations an observation weighs ``(1 − alpha)^n``, so with ``alpha = 0.3``
the last five carry over 80 % of the value. It starts at a given prior, so that a reader has an
answer before the first observation; the first observation replaces the prior, and
:attr:`Ewma.count` says how many observations the value rests on. The gateway's latency and link
estimates are built on it: a local server's (:mod:`sim.core.observed_estimate`) and a cloud
endpoint's (:mod:`sim.core.link_estimate`), which :mod:`edgeserve.gateway.estimates` re-exports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Ewma:
    value: float
    alpha: float = 0.3
    count: int = 0

    def add(self, x: float) -> float:
        self.value = x if self.count == 0 else self.value + self.alpha * (x - self.value)
        self.count += 1
        return self.value
