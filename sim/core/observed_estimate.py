"""A device's local latency as the gateway predicts it: the idle prediction, corrected by what ran.

``edgeserve gateway`` cannot see inside its local server, so it predicts a request's latency
there as::

    estimate_s(job, queue) = idle_s(job) × ratio × (1 + queue)

``idle_s(job)`` is the simulator's prediction for the job on an idle device of the server's
profile (:func:`sim.core.device.idle_device`), and ``ratio`` the moving average (:class:`Ewma`) of
observed over predicted service: each finished local request adds ``(latency / (1 + queue at
dispatch)) / idle_s(job)`` (:meth:`ObservedEstimate.observe`). Without a profile (``idle_s``
None) the service time is the moving average of the observed ones instead.

The same object gives the live gateway's local estimate
(:class:`edgeserve.gateway.live_device.LiveDevice`) and, in a replay of a gateway trace, the
simulated device's (a device entry's ``observed_estimate``): there the simulation observes
each of the device's finished local requests as the gateway observes a finished local call, so
the policy is fed the same function of the same kind of inputs on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.core.ewma import Ewma

if TYPE_CHECKING:
    from sim.core.job import Job


class ObservedEstimate:
    """Idle prediction × moving ratio of observed to predicted service × (1 + queue)."""

    __slots__ = ("idle_s", "ratio", "service")

    def __init__(self, idle_s: Callable[[Job], float] | None, alpha: float = 0.3) -> None:
        self.idle_s = idle_s
        self.ratio = Ewma(1.0, alpha)  # observed / idle prediction
        self.service = Ewma(1.0, alpha)  # one request's observed service time, no queue

    def service_s(self, job: Job) -> float:
        """One request's predicted service time, with no queue ahead of it."""
        if self.idle_s is None:
            return self.service.value
        return self.idle_s(job) * self.ratio.value

    def estimate_s(self, job: Job, queue: int) -> float:
        """Predicted latency of ``job`` dispatched now, behind ``queue`` waiting requests."""
        return self.service_s(job) * (1 + queue)

    def observe(self, job: Job, latency_s: float, queue_seen: int) -> None:
        """``job`` finished ``latency_s`` after its dispatch, which saw ``queue_seen`` waiting."""
        service = latency_s / (1 + queue_seen)
        self.service.add(service)
        if self.idle_s is not None:
            prior = self.idle_s(job)
            if prior > 0:
                self.ratio.add(service / prior)
