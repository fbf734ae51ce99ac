"""Moving estimates of what the gateway measures: link round trips, throughput, service times.

They are the simulator's own, re-exported here: the exponentially weighted moving average
(:class:`sim.core.ewma.Ewma`), which starts at a given prior, so that a policy has an answer before
the first call, and forgets old calls at a fixed rate (with ``alpha = 0.3`` the last five calls
carry over 80 % of the estimate), and a cloud endpoint's link and service
(:class:`sim.core.link_estimate.LinkEstimate`), which a replay of the gateway's trace gives its
simulated device too. A local server's latency estimate is the simulator's
:class:`sim.core.observed_estimate.ObservedEstimate`.
"""

from __future__ import annotations

from sim.core.ewma import Ewma
from sim.core.link_estimate import LinkEstimate

__all__ = ["Ewma", "LinkEstimate"]
