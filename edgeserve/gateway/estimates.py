"""Moving estimates of what the gateway measures: link round trips, throughput, service times.

They rest on the simulator's exponentially weighted moving average (:class:`sim.core.ewma.Ewma`,
re-exported here): it starts at a given prior, so that a policy has an answer before the first
call, and forgets old calls at a fixed rate (with ``alpha = 0.3`` the last five calls carry over
80 % of the estimate). A local server's latency estimate is the simulator's own
:class:`sim.core.observed_estimate.ObservedEstimate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core.ewma import Ewma

__all__ = ["Ewma", "LinkEstimate"]


@dataclass(slots=True)
class LinkEstimate:
    """A cloud endpoint's link and service, from probes and calls.

    ``rtt_s`` comes from small probes (``GET /v1/models``); ``uplink_bps`` from requests with
    large bodies: their time to response headers less the RTT and the endpoint's service time on
    small requests is the upload; ``service_s`` is a call's total time less the link's share.
    """

    rtt_s: Ewma
    uplink_bps: Ewma
    service_s: Ewma
    large_body_bytes: int = 64 * 1024

    def transfer_s(self, body_bytes: int) -> float:
        return body_bytes * 8.0 / max(self.uplink_bps.value, 1.0)

    def predict_s(self, body_bytes: int) -> float:
        return self.rtt_s.value + self.transfer_s(body_bytes) + self.service_s.value

    def observe_call(self, body_bytes: int, headers_s: float, total_s: float) -> None:
        """One finished call: ``headers_s`` to the response headers, ``total_s`` to its end."""
        rtt = self.rtt_s.value
        if body_bytes >= self.large_body_bytes and self.service_s.count:
            upload_s = headers_s - rtt - self.service_s.value
            if upload_s > 1e-3:
                self.uplink_bps.add(body_bytes * 8.0 / upload_s)
        self.service_s.add(max(0.0, total_s - rtt - self.transfer_s(body_bytes)))
