"""What the UI keeps of a gateway's decisions: per second, where requests went and what the
policy saw.

``edgeserve gateway`` writes one :class:`~edgeserve.records.RequestRecord` per request (device
``"gateway"``): its ``placement`` (``local:<name>``, ``cloud:<name>``, ``cache``, ``drop``, or
``none`` when it was refused or nothing could take it), and the inputs the policy decided on —
the local queue, the predicted local and cloud latency, the temperature and the battery. This
folds them into one-second buckets by arrival; the devices panel draws the newest ones.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from edgeserve.records import RequestRecord

GATEWAY_DEVICE = "gateway"  # the ``device`` of every gateway record
INPUTS = ("queue", "local_s", "cloud_s", "temp_c", "battery")


def is_gateway(rec: RequestRecord) -> bool:
    return rec.device == GATEWAY_DEVICE


@dataclass(slots=True, frozen=True)
class GatewayView:
    """The newest ``seconds`` of decisions, oldest first.

    Attributes:
        seconds: Start of each one-second bucket (source clock).
        placements: Every placement seen so far, sorted.
        counts: Per placement, the decisions of each second.
        inputs: Per policy input (:data:`INPUTS`), the last value seen in each second (``nan``
            where no decision of that second had it).
        total: Decisions so far.
        cache_hits: Of them, answered by the semantic cache.
        last_reason: The newest decision's reason.
    """

    seconds: tuple[float, ...]
    placements: tuple[str, ...]
    counts: dict[str, tuple[int, ...]]
    inputs: dict[str, tuple[float, ...]]
    total: int
    cache_hits: int
    last_reason: str | None


class GatewayHistory:
    """One-second buckets of gateway decisions, the newest ``keep`` of them."""

    def __init__(self, keep: int = 600) -> None:
        self.keep = keep
        self._counts: dict[int, Counter[str]] = {}
        self._inputs: dict[int, dict[str, float]] = {}
        self.placements: set[str] = set()
        self.total = 0
        self.cache_hits = 0
        self.last_reason: str | None = None

    def add(self, rec: RequestRecord) -> None:
        k = math.floor(rec.arrived_s)
        where = rec.placement or "none"
        self.placements.add(where)
        self._counts.setdefault(k, Counter())[where] += 1
        self.total += 1
        if where == "cache":
            self.cache_hits += 1
        if rec.decision_reason:
            self.last_reason = rec.decision_reason
        seen = self._inputs.setdefault(k, {})
        for name, v in zip(INPUTS, (rec.decision_queue, rec.predicted_local_s,
                                    rec.predicted_cloud_s, rec.decision_temp_c,
                                    rec.decision_battery), strict=True):
            if v is not None:
                seen[name] = float(v)
        for old in [j for j in self._counts if j <= k - self.keep]:
            del self._counts[old]
            self._inputs.pop(old, None)

    def view(self, now_s: float, seconds: int) -> GatewayView | None:
        """The ``seconds`` whole seconds up to ``now_s``; ``None`` before any decision."""
        if not self.total:
            return None
        end = math.floor(now_s)
        ks = range(end - seconds + 1, end + 1)
        places = tuple(sorted(self.placements))
        counts = {p: tuple(self._counts.get(k, Counter())[p] for k in ks) for p in places}
        inputs = {n: tuple(self._inputs.get(k, {}).get(n, math.nan) for k in ks) for n in INPUTS}
        return GatewayView(tuple(float(k) for k in ks), places, counts, inputs, self.total,
                           self.cache_hits, self.last_reason)
