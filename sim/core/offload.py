"""A device's way to the cloud: its link, the radio energy of its transfers, the offload estimate.

An offloaded request's image and prompt go up the link (:mod:`sim.core.network`), the cloud server
(:mod:`sim.core.cloud`) runs it, and its answer comes back down. Every transfer charges the radio
``RADIO_W`` for the time it holds its direction of the link (``radio_j``, drawn from the battery).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from edgeserve.records import Outcome
from sim.core.cloud import CloudServer
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.network import Link
from sim.scenario.config import LinkConfig

RADIO_W = 1.5  # assumed radio power while a transfer is on air (Wi-Fi/5G class)


class OffloadPath:
    """Sends jobs over a link to a cloud server and brings their answers back."""

    __slots__ = ("_downlinked_cb", "_outcome_ok", "cloud", "link", "link_cfg", "loop",
                 "on_finished", "radio_j")

    def __init__(self, loop: EventLoop, link_cfg: LinkConfig, rng: random.Random,
                 cloud: CloudServer | None, on_finished: Callable[[Job], Any]) -> None:
        self.loop = loop
        self.link = Link(link_cfg, rng)
        self.link_cfg = link_cfg
        self.cloud = cloud
        self.on_finished = on_finished
        self.radio_j = 0.0
        self._downlinked_cb: Callable[[Any], None] = self._downlinked  # bound once
        self._outcome_ok = Outcome.OK

    def estimate_s(self, job: Job) -> float:
        """Predicted latency if ``job`` were offloaded now (``inf`` without a cloud server)."""
        cloud = self.cloud
        if cloud is None:
            return math.inf
        lc = self.link_cfg
        return self.link.estimate_s(
            job.rec.image_bytes + lc.request_overhead_bytes,
            job.output_tokens * lc.response_bytes_per_token + 500, self.loop.now,
        ) + cloud.estimate_s(job)

    def estimate_radio_j(self, job: Job) -> float | None:
        """Radio energy of offloading ``job`` now: its request up and its answer down at the
        link's rates, retransmissions included (None without a cloud server)."""
        if self.cloud is None:
            return None
        lc = self.link_cfg
        link = self.link
        tx = ((job.rec.image_bytes + lc.request_overhead_bytes) * 8.0 / link.up.bits_per_s
              + (job.output_tokens * lc.response_bytes_per_token + 500) * 8.0
              / link.down.bits_per_s)
        return tx * link.est_tx_factor * RADIO_W

    def send(self, job: Job) -> None:
        """Send ``job`` (its JPEG bytes and prompt) to the cloud server."""
        cloud = self.cloud
        assert cloud is not None
        now = self.loop.now
        link = self.link
        up = link.up
        busy0 = up.busy_s
        t_up = link._send(up, job.rec.image_bytes + self.link_cfg.request_overhead_bytes, now)
        self.radio_j += (up.busy_s - busy0) * RADIO_W
        job.rec.uplink_end_s = t_up
        self.loop.at(t_up + cloud.preprocess_s(job), cloud.arrive, job)

    def cloud_done(self, job: Job) -> None:
        """The cloud finished ``job``; its answer comes back over the downlink."""
        rec = job.rec
        if rec.outcome is not self._outcome_ok:
            self.on_finished(job)
            return
        link = self.link
        down = link.down
        busy0 = down.busy_s
        t = link._send(down, job.output_tokens * self.link_cfg.response_bytes_per_token + 500,
                       self.loop.now)
        self.radio_j += (down.busy_s - busy0) * RADIO_W
        self.loop.at(t, self._downlinked_cb, job)

    def _downlinked(self, arg: Any) -> None:
        job: Job = arg
        job.rec.finished_s = self.loop.now
        self.on_finished(job)
