"""A cloud endpoint's latency as the gateway predicts it: moving round trip, upload rate and service.

``edgeserve gateway`` cannot see inside its cloud endpoint or the network on the way, so it
predicts an offloaded request's latency from what it measures::

    estimate_s(job) = rtt + body_bytes × 8 / uplink_bps + service

with ``body_bytes`` the job's image bytes plus :data:`REQUEST_OVERHEAD_BYTES` for the prompt's
text and the headers. Each term is a moving average (:class:`~sim.core.ewma.Ewma`) that starts at
a prior (:meth:`LinkEstimate.starting_at`; the gateway's: :data:`RTT_PRIOR_S`,
:data:`UPLINK_PRIOR_BPS`, :data:`SERVICE_PRIOR_S`):

* ``rtt`` — the round trip of small probes (:meth:`LinkEstimate.observe_rtt`);
* ``uplink_bps`` — from calls with large bodies: their time to the response headers less the
  round trip and the service time is the upload (:meth:`LinkEstimate.observe_call`);
* ``service`` — a call's total time less the round trip and the upload at the current rate.

The same object gives the live gateway's cloud estimate
(:class:`edgeserve.gateway.live_device.LiveDevice`, one per cloud endpoint, fed by its prober and
by each finished cloud call) and, in a replay of a gateway trace, the simulated device's (a device
entry's ``observed_cloud_estimate``, fed by :class:`sim.core.simulation.Simulation` from each of
the device's finished simulated cloud calls), so the policy is fed the same function of the same
kind of inputs on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.core.ewma import Ewma

if TYPE_CHECKING:
    from sim.core.job import Job

RTT_PRIOR_S = 0.05  # the gateway's round trip before its first probe
UPLINK_PRIOR_BPS = 20e6  # the gateway's upload rate before a large call (``cloud_uplink_mbps``)
SERVICE_PRIOR_S = 1.0  # the gateway's service time before its first call
REQUEST_OVERHEAD_BYTES = 2000  # a request's prompt text and headers, beside its image's bytes


def request_bytes(job: Job) -> int:
    """The bytes the estimate puts on the uplink for ``job``: its image and the overhead."""
    return job.rec.image_bytes + REQUEST_OVERHEAD_BYTES


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

    @classmethod
    def starting_at(cls, rtt_s: float = RTT_PRIOR_S, uplink_bps: float = UPLINK_PRIOR_BPS,
                    service_s: float = SERVICE_PRIOR_S) -> LinkEstimate:
        """An estimate with these priors (left out: the gateway's)."""
        return cls(Ewma(rtt_s), Ewma(uplink_bps), Ewma(service_s))

    def transfer_s(self, body_bytes: int) -> float:
        return body_bytes * 8.0 / max(self.uplink_bps.value, 1.0)

    def predict_s(self, body_bytes: int) -> float:
        return self.rtt_s.value + self.transfer_s(body_bytes) + self.service_s.value

    def estimate_s(self, job: Job) -> float:
        """Predicted latency of ``job`` offloaded now: :meth:`predict_s` of its request bytes."""
        return self.predict_s(request_bytes(job))

    def observe_rtt(self, rtt_s: float) -> None:
        """One probe's round trip."""
        self.rtt_s.add(rtt_s)

    def observe_call(self, body_bytes: int, headers_s: float, total_s: float) -> None:
        """One finished call: ``headers_s`` to the response headers, ``total_s`` to its end."""
        rtt = self.rtt_s.value
        if body_bytes >= self.large_body_bytes and self.service_s.count:
            upload_s = headers_s - rtt - self.service_s.value
            if upload_s > 1e-3:
                self.uplink_bps.add(body_bytes * 8.0 / upload_s)
        self.service_s.add(max(0.0, total_s - rtt - self.transfer_s(body_bytes)))
