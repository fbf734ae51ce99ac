"""The offload part alone: a job's uplink, the cloud's hand-back, its downlink and radio energy."""

from __future__ import annotations

import math
import random

import pytest

from edgeserve.records import Outcome, RequestRecord
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.offload import RADIO_W, OffloadPath
from sim.scenario.config import LinkConfig


def a_job(image_bytes: int, output_tokens: int) -> Job:
    rec = RequestRecord(id="r0", arrived_s=0.0, image_bytes=image_bytes)
    return Job(rec, None, 0, 0, 0, 0, output_tokens)


def test_a_job_goes_up_and_its_answer_comes_down_charging_the_radio() -> None:
    loop = EventLoop()
    cfg = LinkConfig(uplink_mbps=8.0, downlink_mbps=80.0, rtt_ms=40.0, jitter_ms=0.0, loss=0.0)
    done: list[Job] = []
    path = OffloadPath(loop, cfg, random.Random(1), None, done.append)
    assert path.estimate_s(a_job(1000, 10)) == math.inf  # no cloud server
    job = a_job(100_000 - cfg.request_overhead_bytes, 25)
    path.cloud_done(job)  # (as the cloud would) the answer goes down at once
    loop.run_until(10.0)
    down_s = (25 * cfg.response_bytes_per_token + 500) * 8 / 80e6
    assert done == [job]
    assert job.rec.finished_s == pytest.approx(down_s + 0.020, rel=1e-12)
    assert path.radio_j == pytest.approx(down_s * RADIO_W, rel=1e-12)


def test_a_failed_cloud_job_finishes_without_a_downlink() -> None:
    loop = EventLoop()
    cfg = LinkConfig(jitter_ms=0.0, loss=0.0)
    done: list[Job] = []
    path = OffloadPath(loop, cfg, random.Random(1), None, done.append)
    job = a_job(1000, 5)
    job.rec.outcome = Outcome.FAILED
    path.cloud_done(job)
    assert done == [job] and path.radio_j == 0.0 and job.rec.finished_s is None
