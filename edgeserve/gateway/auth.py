"""Who may call the gateway, and how often.

With API keys configured, every request but ``/health`` needs ``Authorization: Bearer KEY``
(as vLLM's ``--api-key``), else 401. The rate limit is a token bucket per key (per client
address without keys): ``rate_per_s`` tokens a second up to ``burst``; a request finding the
bucket empty gets 429 with ``Retry-After`` set to the seconds until the next token.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Bucket:
    tokens: float
    t_s: float


@dataclass(slots=True)
class RateLimiter:
    rate_per_s: float
    burst: int
    buckets: dict[str, Bucket] = field(default_factory=dict)

    def retry_after_s(self, who: str) -> float:
        """0 when ``who`` may go now (a token is taken), else seconds until the next token."""
        if self.rate_per_s <= 0:
            return 0.0
        now = time.monotonic()
        b = self.buckets.get(who)
        if b is None:
            b = self.buckets[who] = Bucket(float(self.burst), now)
        b.tokens = min(float(self.burst), b.tokens + (now - b.t_s) * self.rate_per_s)
        b.t_s = now
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        return (1.0 - b.tokens) / self.rate_per_s


def bearer(header: str | None) -> str | None:
    if not header or not header.lower().startswith("bearer "):
        return None
    return header[7:].strip() or None


def retry_after_header(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
