"""The places a request can run, and what the gateway knows about each one now.

A :class:`Target` holds its config, the requests the gateway has in flight to it, the queue and
running counts last read from its ``/metrics`` (edgeserve's ``edgeserve_queue_depth`` gauges, or
a stock vLLM server's ``vllm:num_requests_*``), and moving estimates of its latency: for a local
server the simulator's :class:`~sim.core.observed_estimate.ObservedEstimate` (one request's
service time — observed latency over ``1 + queue`` at dispatch — or, with a device profile, the
profile's idle prediction times the moving ratio of observed to predicted service; the live
device gives it the profile), for a cloud endpoint the simulator's
:class:`~sim.core.link_estimate.LinkEstimate` of its link and service (moving round trip, upload
rate and service time, from the gateway's priors). A target
that failed (refused, timed out, 5xx) is skipped for ``down_s`` seconds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from edgeserve.gateway.config import LARGE, SMALL, Place, TargetConfig
from sim.core.link_estimate import UPLINK_PRIOR_BPS, LinkEstimate
from sim.core.observed_estimate import ObservedEstimate

_WAITING = ("preproc_queue", "engine_waiting")
_RUNNING = ("preproc_running", "engine_running")


@dataclass(slots=True)
class Target:
    cfg: TargetConfig
    uplink_bps: float = UPLINK_PRIOR_BPS  # the link estimate's prior upload rate
    down_s: float = 5.0
    inflight: int = 0
    polled_waiting: int = 0
    polled_running: int = 0
    down_until_s: float = 0.0
    estimate: ObservedEstimate = field(default_factory=lambda: ObservedEstimate(None))  # local
    link: LinkEstimate = field(init=False)
    calls: int = 0
    failures: int = 0

    def __post_init__(self) -> None:
        self.link = LinkEstimate.starting_at(uplink_bps=self.uplink_bps)

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def place(self) -> Place:
        return self.cfg.place

    @property
    def label(self) -> str:
        return f"{self.cfg.place.value}:{self.cfg.name}"

    @property
    def api_key(self) -> str | None:
        env = self.cfg.api_key_env
        return os.environ.get(env) if env else None

    def up(self, now_s: float) -> bool:
        return now_s >= self.down_until_s

    def mark_down(self) -> None:
        self.failures += 1
        self.down_until_s = time.monotonic() + self.down_s

    def model_for(self, size: str | None, requested: str | None) -> str | None:
        """The upstream model id: the size's (``small`` on a model downgrade), else ``large``,
        else what the client asked for."""
        m = self.cfg.models
        if size is not None and size in m:
            return m[size]
        if size == SMALL and m:
            return None  # no small model here: the caller records that no downgrade happened
        return m.get(LARGE, requested)

    @property
    def queue_len(self) -> int:
        """Requests waiting here: the server's own count, or, between polls, the gateway's own
        requests beyond the ones the server runs."""
        return max(self.polled_waiting, self.inflight - max(self.polled_running, 1), 0)

    @property
    def running(self) -> int:
        return max(self.polled_running, min(self.inflight, 1))

    def read_metrics(self, text: str) -> None:
        waiting = running = 0.0
        for line in text.splitlines():
            if line.startswith("edgeserve_queue_depth{"):
                q = line.split('queue="', 1)[1].split('"', 1)[0]
                v = float(line.rsplit(" ", 1)[1])
                if q in _WAITING:
                    waiting += v
                elif q in _RUNNING:
                    running += v
            elif line.startswith("vllm:num_requests_waiting"):
                waiting += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:num_requests_running"):
                running += float(line.rsplit(" ", 1)[1])
        self.polled_waiting, self.polled_running = int(waiting), int(running)
