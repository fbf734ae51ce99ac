"""Hand-inlined copies on the event path, each against the plain code it copies.

These copies stay because the speed benchmark (``benchmarks/sim_speed.py``, compiled event path)
ran measurably slower with the plain calls in their place; each test here says the copy computes
exactly what the plain code computes, draw for draw.
"""

from __future__ import annotations

import bisect
import itertools
import random
from itertools import accumulate

from edgeserve.records import Outcome, RequestRecord
from sim.core.network import Link
from sim.core.stats import StatsCollector
from sim.core.workload import arrivals
from sim.scenario.config import ImageConfig, ImageSize, LinkConfig, WorkloadConfig, WorkloadKind


def plain_poisson(cfg: WorkloadConfig, rng: random.Random, n: int) -> list[tuple]:
    """Poisson arrivals as random.Random says them: an exponential gap, then the features."""
    sizes = [(s.width, s.height, int(s.width * s.height * cfg.image.jpeg_bytes_per_pixel))
             for s in cfg.image.sizes]
    cum = list(accumulate(s.weight for s in cfg.image.sizes))
    lo, hi = cfg.output_tokens
    out, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(cfg.rate_hz)
        w, h, b = sizes[0] if len(sizes) == 1 else \
            sizes[bisect.bisect_right(cum, rng.random() * cum[-1])]
        tokens = lo + int(rng.random() * (hi - lo + 1))
        out.append((t, w, h, b, cfg.text_tokens, tokens, None, None))
    return out


def test_poisson_arrivals_are_the_plain_exponential_draws():
    for sizes in ([ImageSize(640, 480)], [ImageSize(640, 480, 3), ImageSize(100, 100, 1)]):
        cfg = WorkloadConfig(kind=WorkloadKind.POISSON, rate_hz=3.0,
                             image=ImageConfig(sizes=sizes), output_tokens=[4, 40])
        fast = list(itertools.islice(arrivals(cfg, random.Random(5)), 5000))
        assert fast == plain_poisson(cfg, random.Random(5), 5000)


def test_link_jitter_is_the_plain_exponential_draw():
    cfg = LinkConfig(jitter_ms=7.0, rtt_ms=30.0, uplink_mbps=10.0)
    link, rng = Link(cfg, random.Random(9)), random.Random(9)
    for i in range(2000):
        now = i * 0.5  # far apart: no queueing, so arrival = now + tx + RTT/2 + jitter
        got = link.send_up(10_000, now)
        assert got == now + 10_000 * 8.0 / 10e6 + 0.015 + rng.expovariate(1.0) * 0.007


def records(n: int) -> list[RequestRecord]:
    rng = random.Random(3)
    out = []
    for i in range(n):
        arrived = i * 0.1
        kind = rng.random()
        outcome = Outcome.OK if kind < 0.85 else Outcome.DROPPED if kind < 0.9 else \
            Outcome.REJECTED if kind < 0.95 else Outcome.FAILED
        first = arrived + rng.expovariate(4.0)
        out.append(RequestRecord(
            id=str(i), device=f"d{i % 3}", arrived_s=arrived, outcome=outcome,
            first_token_s=first, finished_s=first + rng.expovariate(1.0),
            uplink_end_s=arrived + 0.01 if rng.random() < 0.4 else None,
            deadline_s=arrived + 2.0 if rng.random() < 0.5 else None))
    return out


def test_on_records_folds_in_exactly_what_on_record_does():
    recs = records(3000)
    batched, single = StatsCollector(1.5, 0.4), StatsCollector(1.5, 0.4)
    batched.on_records(recs)
    for r in recs:
        single.on_record(r)
    for name in ("d0", "d1", "d2"):
        a, b = batched.devices[name], single.devices[name]
        assert (a.requests, a.ok, a.dropped, a.rejected, a.failed, a.offloaded, a.slo_met,
                a.last_finish_s) == (b.requests, b.ok, b.dropped, b.rejected, b.failed,
                                     b.offloaded, b.slo_met, b.last_finish_s)
        for h in ("e2e", "e2e_local", "e2e_cloud", "ttft"):
            ha, hb = getattr(a, h), getattr(b, h)
            assert (ha.count, ha.sum, ha.max, ha.counts) == (hb.count, hb.sum, hb.max, hb.counts)
    assert batched.devices["d0"].ok > 500  # the records exercised every outcome and path
