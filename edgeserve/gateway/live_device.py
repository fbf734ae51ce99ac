"""The live device: what the simulator's :class:`sim.core.device.Device` offers a policy, measured.

A policy reads ``device.cloud`` (is there a cloud to offload to), ``queue_len`` and ``running``,
``temp_c``, ``battery_fraction`` and ``battery_low_fraction``, ``loop.now`` (against a job's
deadline), and the two predictions ``estimate_local_s(job)`` and ``estimate_cloud_s(job)``. Here:

* queue and running: the least-loaded up local server's, from its ``/metrics`` and the gateway's
  own in-flight requests (:class:`~edgeserve.gateway.targets.Target`);
* local latency: the simulator's :class:`~sim.core.observed_estimate.ObservedEstimate`, the same
  code a replay of the gateway's trace gives its simulated device: one request's service time ×
  ``(1 + queue)``. The service time is the moving average of observed ones, or — with
  ``--profile`` — the simulator's own :meth:`sim.core.device.Device.estimate_local_s` for the
  job's sizes on an idle simulated device of that profile
  (:func:`sim.core.device.idle_device`), scaled by the moving ratio of observed to predicted;
  each local server has its own;
* cloud latency: the simulator's :class:`~sim.core.link_estimate.LinkEstimate` of the first up
  cloud endpoint, the same code a replay of the gateway's trace gives its simulated device: the
  measured RTT + the request's upload at the measured throughput + the observed service time;
* temperature and battery: :class:`~edgeserve.gateway.sensors.Sensors`;
* energy (``estimate_local_j``/``estimate_cloud_j``, for ``energy_aware``): with ``--profile``,
  the simulated device's estimate from its units' efficiency figures at full clock (the live
  device reads no unit clock levels), and the radio at the simulator's power for the upload at the
  measured throughput; None without a profile or a cloud.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from edgeserve.gateway.sensors import Sensors
from edgeserve.gateway.targets import Target
from sim.core.device import Device, idle_device
from sim.core.job import Job
from sim.core.link_estimate import request_bytes
from sim.core.observed_estimate import ObservedEstimate
from sim.core.offload import RADIO_W
from sim.scenario.profiles import DeviceProfile


class WallClock:
    """``loop.now`` for policies: the monotonic clock the records use."""

    @property
    def now(self) -> float:
        return time.monotonic()


@dataclass(slots=True)
class CloudRef:
    target: Target


class LiveDevice:
    def __init__(self, locals_: list[Target], clouds: list[Target], sensors: Sensors,
                 profile: DeviceProfile | None) -> None:
        self.locals = locals_
        self.clouds = clouds
        self.sensors = sensors
        self.loop = WallClock()
        self._sim: Device | None = None
        if profile is not None:
            self._sim = idle_device(profile, "gateway")
            for t in locals_:
                t.estimate = ObservedEstimate(self._sim.estimate_local_s)
        self.battery_low_fraction = (profile.battery.low_fraction
                                     if profile is not None and profile.battery else 0.2)

    # ---- where -------------------------------------------------------------------------
    def local_order(self) -> list[Target]:
        now = time.monotonic()
        up = [t for t in self.locals if t.up(now)]
        down = [t for t in self.locals if not t.up(now)]
        return sorted(up, key=lambda t: (t.queue_len, t.inflight)) + down

    def cloud_order(self) -> list[Target]:
        now = time.monotonic()
        return ([t for t in self.clouds if t.up(now)] + [t for t in self.clouds if not t.up(now)])

    @property
    def local(self) -> Target | None:
        order = self.local_order()
        return order[0] if order else None

    @property
    def cloud(self) -> CloudRef | None:
        now = time.monotonic()
        return next((CloudRef(t) for t in self.clouds if t.up(now)), None)

    # ---- state -------------------------------------------------------------------------
    @property
    def queue_len(self) -> int:
        t = self.local
        return t.queue_len if t is not None else 0

    @property
    def running(self) -> int:
        t = self.local
        return t.running if t is not None else 0

    @property
    def temp_c(self) -> float:
        return self.sensors.reading.temp_c

    @property
    def battery_fraction(self) -> float | None:
        return self.sensors.reading.battery_fraction

    # ---- predictions ---------------------------------------------------------------------
    def estimate_local_s(self, job: Job) -> float:
        t = self.local
        if t is None:
            return math.inf
        return t.estimate.estimate_s(job, t.queue_len)

    def estimate_cloud_s(self, job: Job) -> float:
        c = self.cloud
        if c is None:
            return math.inf
        return c.target.link.estimate_s(job)

    def estimate_local_j(self, job: Job) -> float | None:
        return self._sim.estimate_local_j(job) if self._sim is not None else None

    def estimate_cloud_j(self, job: Job) -> float | None:
        c = self.cloud
        if c is None or self._sim is None:
            return None
        return c.target.link.transfer_s(request_bytes(job)) * RADIO_W

    def observe_local(self, target: Target, job: Job, latency_s: float, queue_seen: int) -> None:
        """A local call finished ``latency_s`` after its dispatch, which saw ``queue_seen``."""
        target.estimate.observe(job, latency_s, queue_seen)
