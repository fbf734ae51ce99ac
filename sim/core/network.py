"""The link between a device and the cloud: serialization, propagation, jitter and loss.

A transfer of ``B`` bytes over a link of ``bw`` bits/s queues behind earlier transfers in the same
direction (FIFO: one radio), then takes ``8·B / bw`` to serialize, ``RTT/2`` to propagate and an
exponential jitter. With probability ``loss`` an attempt is lost; the sender notices after
``rto`` and sends again (a geometric number of attempts). Everything is computed in closed form
when the transfer starts, so a transfer costs no events of its own.
"""

from __future__ import annotations

import math
import random

from sim.scenario.config import LinkConfig


class Direction:
    __slots__ = ("bits_per_s", "busy_s", "free_at_s")

    def __init__(self, mbps: float) -> None:
        self.bits_per_s = mbps * 1e6
        self.free_at_s = 0.0
        self.busy_s = 0.0  # radio-on time in this direction


class Link:
    """Uplink and downlink of one device; ``send_up``/``send_down`` return arrival times."""

    __slots__ = ("cfg", "down", "est_fixed_s", "est_tx_factor", "half_rtt_s", "jitter_s", "loss",
                 "rng", "rto_s", "up")

    def __init__(self, cfg: LinkConfig, rng: random.Random) -> None:
        self.cfg = cfg
        self.up = Direction(cfg.uplink_mbps)
        self.down = Direction(cfg.downlink_mbps)
        self.half_rtt_s = cfg.rtt_ms / 2000.0
        self.jitter_s = cfg.jitter_ms / 1000.0
        self.loss = cfg.loss
        self.rto_s = cfg.rto_ms / 1000.0
        self.rng = rng
        retries = self.loss / (1.0 - self.loss)  # expected retransmissions per transfer
        self.est_tx_factor = 1 + retries
        self.est_fixed_s = 2 * (retries * self.rto_s + self.half_rtt_s + self.jitter_s)

    def _send(self, d: Direction, bytes_: float, now_s: float) -> float:
        tx = bytes_ * 8.0 / d.bits_per_s
        start = d.free_at_s if d.free_at_s > now_s else now_s
        t = start + tx
        rng = self.rng
        if self.loss > 0.0:
            while rng.random() < self.loss:  # lost: wait for the timeout, send again
                t += self.rto_s + tx
                d.busy_s += tx
        d.free_at_s = t
        d.busy_s += tx
        # rng.expovariate(1.0), inlined: the same draw and value (tests/sim/test_fast_paths.py)
        jitter = -math.log(1.0 - rng.random()) * self.jitter_s if self.jitter_s > 0.0 else 0.0
        return t + self.half_rtt_s + jitter

    def send_up(self, bytes_: float, now_s: float) -> float:
        return self._send(self.up, bytes_, now_s)

    def send_down(self, bytes_: float, now_s: float) -> float:
        return self._send(self.down, bytes_, now_s)

    def estimate_s(self, up_bytes: float, down_bytes: float, now_s: float) -> float:
        """Expected uplink + downlink time (what a policy adds to the server's own time)."""
        d = self.up
        wait = d.free_at_s - now_s if d.free_at_s > now_s else 0.0
        tx = up_bytes * 8.0 / d.bits_per_s + down_bytes * 8.0 / self.down.bits_per_s
        return wait + tx * self.est_tx_factor + self.est_fixed_s
